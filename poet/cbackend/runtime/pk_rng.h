/* pk_rng.h: dropout's random bits, counter-based so a device draws what a host reproduces.

   Element i of a dropout node's output keeps its value iff bits(key(seed, unit), i) < (1 - p) 2^32,
   where seed is the step's seed (set by the runtime before each step), unit identifies the node
   (poet/cbackend/rng.py's unit_of(node name), a scalar of its kernel call) and i counts the output's
   elements in row-major order.  A recomputation in the same step draws the same mask.
   poet/cbackend/rng.py is the bit-identical Python reference (the check against PyTorch uses it). */
#ifndef PK_RNG_H
#define PK_RNG_H

#include <stdint.h>

void pk_rng_set_seed(uint64_t seed);                     /* the current step's seed */
uint64_t pk_rng_seed(void);
uint64_t pk_rng_step_seed(uint64_t base, uint32_t step); /* the seed of step `step` of a run seeded base */
uint32_t pk_rng_key(uint64_t seed, uint32_t unit);       /* one node's key in one step */
uint32_t pk_rng_bits(uint32_t key, uint32_t index);      /* element index's 32 random bits */
uint64_t pk_rng_keep_below(double p);                    /* keep element iff bits < this, for drop probability p */

#endif
