/* pk_math's functions applied elementwise, by number: what the accuracy tests
   (tests/test_ckernels_math.py) and bench/pk_math_accuracy.py sweep.  Not an aten op. */
#include "pk.h"
#include "pk_iter.h"
#include "pk_math.h"

enum { PK_MATH_SQRT, PK_MATH_EXP, PK_MATH_LOG, PK_MATH_LOG1P, PK_MATH_EXPM1, PK_MATH_TANH, PK_MATH_ERF,
       PK_MATH_SIGMOID, PK_MATH_COUNT };

static float eval_f32(int64_t fn, float x) {
    switch (fn) {
    case PK_MATH_SQRT: return pk_sqrtf(x);
    case PK_MATH_EXP: return pk_expf(x);
    case PK_MATH_LOG: return pk_logf(x);
    case PK_MATH_LOG1P: return pk_log1pf(x);
    case PK_MATH_EXPM1: return pk_expm1f(x);
    case PK_MATH_TANH: return pk_tanhf(x);
    case PK_MATH_ERF: return pk_erff(x);
    default: return pk_sigmoidf(x);
    }
}

/* math_eval(x) -> y, scalar: function number (float32: all; float64: sqrt, exp, log) */
PK_KERNEL(math_eval) {
    if (nt != 2 || ns != 1) return PK_EARGS;
    const int64_t fn = s[0].i;
    if (fn < 0 || fn >= PK_MATH_COUNT) return PK_EARGS;
    if (pk_numel(&t[0]) != pk_numel(&t[1]) || t[0].ndim != 1 || t[1].ndim != 1) return PK_EARGS;
    const int64_t n = pk_numel(&t[0]);
    if (t[0].dtype == PK_F32 && t[1].dtype == PK_F32) {
        const float *x = (const float *)t[0].data;
        float *y = (float *)t[1].data;
        for (int64_t i = 0; i < n; i++) y[i * t[1].stride[0]] = eval_f32(fn, x[i * t[0].stride[0]]);
        return PK_OK;
    }
    if (t[0].dtype == PK_F64 && t[1].dtype == PK_F64 && fn <= PK_MATH_LOG) {
        const double *x = (const double *)t[0].data;
        double *y = (double *)t[1].data;
        for (int64_t i = 0; i < n; i++) {
            double v = x[i * t[0].stride[0]];
            y[i * t[1].stride[0]] = fn == PK_MATH_SQRT ? pk_sqrtd(v) : fn == PK_MATH_EXP ? pk_expd(v) : pk_logd(v);
        }
        return PK_OK;
    }
    return PK_EDTYPE;
}
