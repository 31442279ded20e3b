/* The step's dropout seed (pk_rng.h), in a file of its own: the step program sets it before every
   step (pk_main.c), and a build that replaces the kernels (the instruction calibration's no-op
   kernels) still links it without pulling in the dropout kernels. */
#include "pk_rng.h"

static uint64_t step_seed;

void pk_rng_set_seed(uint64_t seed) { step_seed = seed; }
uint64_t pk_rng_seed(void) { return step_seed; }
uint64_t pk_rng_step_seed(uint64_t base, uint32_t step) { return base + step; }
