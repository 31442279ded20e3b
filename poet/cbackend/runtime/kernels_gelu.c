/* GELU and tanh, and their gradients (specs: poet/cbackend/ops_gelu.py), in aten's CPU formulas
   (float, the same order of operations) with pk_erff / pk_tanhf / pk_expf in place of libm. */
#include "pk.h"
#include "pk_dense.h"
#include "pk_iter.h"
#include "pk_math.h"

#define SQRT1_2 0.70710678118654752440f  /* 1 / sqrt(2) */
#define INV_SQRT_2PI 0.39894228040143267794f /* 1 / sqrt(2 pi) */
#define SQRT_2_PI 0.79788456080286535588f  /* sqrt(2 / pi) */
#define KAPPA 0.044715f

static float gelu_erf(float x) { return x * 0.5f * (1.0f + pk_erff(x * SQRT1_2)); }

static float gelu_tanh(float x) {
    const float cube = x * x * x;
    return 0.5f * x * (1.0f + pk_tanhf(SQRT_2_PI * (x + KAPPA * cube)));
}

static float gelu_erf_grad(float g, float x) {
    const float cdf = 0.5f * (1.0f + pk_erff(x * SQRT1_2));
    const float pdf = INV_SQRT_2PI * pk_expf(x * x * -0.5f);
    return g * (cdf + x * pdf);
}

static float gelu_tanh_grad(float g, float x) {
    const float sq = x * x, cube = sq * x;
    const float th = pk_tanhf(SQRT_2_PI * (x + KAPPA * cube));
    const float left = 0.5f * x, right = 1.0f + th;
    const float dleft = 0.5f * right;
    const float dtanh = 1.0f - th * th, dinner = SQRT_2_PI * (1.0f + 3.0f * KAPPA * sq);
    return g * (dleft + left * dtanh * dinner);
}

/* gelu(x -> y; approximate): approximate 0 = 'none' (erf), 1 = 'tanh' */
PK_KERNEL(gelu) {
    if (nt != 2 || ns != 1) return PK_EARGS;
    if (!pk_all_f32(t, 2)) return PK_EDTYPE;
    if (!pk_same_shape(&t[0], &t[1])) return PK_EARGS;
    if (s[0].i) PK_FOR2(&t[1], &t[0], y, x, { *y = gelu_tanh(*x); });
    else PK_FOR2(&t[1], &t[0], y, x, { *y = gelu_erf(*x); });
    return PK_OK;
}

/* gelu_backward(grad, x -> gi; approximate) */
PK_KERNEL(gelu_backward) {
    if (nt != 3 || ns != 1) return PK_EARGS;
    if (!pk_all_f32(t, 3)) return PK_EDTYPE;
    if (!pk_same_shape(&t[0], &t[2]) || !pk_same_shape(&t[1], &t[2])) return PK_EARGS;
    if (s[0].i) PK_FOR3(&t[2], &t[0], &t[1], o, g, x, { *o = gelu_tanh_grad(*g, *x); });
    else PK_FOR3(&t[2], &t[0], &t[1], o, g, x, { *o = gelu_erf_grad(*g, *x); });
    return PK_OK;
}

/* tanh(x -> y) */
PK_KERNEL(tanh) {
    (void)s;
    if (nt != 2 || ns != 0) return PK_EARGS;
    if (!pk_all_f32(t, 2)) return PK_EDTYPE;
    if (!pk_same_shape(&t[0], &t[1])) return PK_EARGS;
    PK_FOR2(&t[1], &t[0], y, x, { *y = pk_tanhf(*x); });
    return PK_OK;
}

/* tanh_backward(grad, y -> gi): grad * (1 - y * y) */
PK_KERNEL(tanh_backward) {
    (void)s;
    if (nt != 3 || ns != 0) return PK_EARGS;
    if (!pk_all_f32(t, 3)) return PK_EDTYPE;
    if (!pk_same_shape(&t[0], &t[2]) || !pk_same_shape(&t[1], &t[2])) return PK_EARGS;
    PK_FOR3(&t[2], &t[0], &t[1], o, g, y, { *o = *g * (1.0f - *y * *y); });
    return PK_OK;
}
