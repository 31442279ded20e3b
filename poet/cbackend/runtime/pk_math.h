/* pk_math.h: POET's deterministic math library.

   Built from + - * / and integer bit operations only (no libm, no hardware sqrt, no fused
   multiply-add under -ffp-contract=off), so a host build and a Cortex-M4F build of the same kernels
   give bit-identical results.  The float functions compute in float (the M4F's FPU is single
   precision; double is software there).  Accuracy against the exact value, measured over dense
   sweeps by tests/test_ckernels_math.py (figures in bench/pk_math_accuracy.py):

     pk_sqrtf, pk_sqrtd      correctly rounded (0.5 ulp), so equal to IEEE sqrt
     pk_expf, pk_logf, pk_log1pf, pk_expm1f, pk_tanhf, pk_erff, pk_sigmoidf   <= 2 ulp
     pk_expd, pk_logd        within 1 ulp of numpy's (glibc's) double functions

   Names end in f (float) or d (double): plain pk_<name> is a kernel's (pk.h), e.g. pk_exp is aten.exp.

   Special values follow C99 Annex F (NaN in -> NaN out; exp(+inf) = inf, exp(-inf) = 0; log(0) = -inf,
   log(x < 0) = NaN; tanh and erf saturate to +-1). */
#ifndef PK_MATH_H
#define PK_MATH_H

#include <stdint.h>

float pk_sqrtf(float x);
float pk_expf(float x);
float pk_logf(float x);
float pk_log1pf(float x);
float pk_expm1f(float x);
float pk_tanhf(float x);
float pk_erff(float x);
float pk_sigmoidf(float x); /* 1 / (1 + exp(-x)) */
float pk_powf(float x, float y); /* general powers through pk_expd/pk_logd in double (slow on the M4F) */

double pk_sqrtd(double x);
double pk_expd(double x);
double pk_logd(double x);

/* IEEE bit patterns (memcpy: no aliasing issues, compiled to a register move) */
uint32_t pk_f32_bits(float x);
float pk_f32_from_bits(uint32_t u);
uint64_t pk_f64_bits(double x);
double pk_f64_from_bits(uint64_t u);

float pk_nanf(void);
float pk_inff(void);
double pk_nan(void);
double pk_inf(void);

#endif
