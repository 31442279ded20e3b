/* Elementwise kernels: activations and their gradients, unary math (specs: poet/cbackend/ops_elementwise.py).

   Every input is a view of the output's shape (the spec asks the lowering to broadcast), so a kernel
   walks one shape.  Formulas follow aten's CPU kernels operation for operation, so where they use no
   transcendental function the result is bit-identical to torch's. */
#include "pk.h"
#include "pk_elem.h"
#include "pk_iter.h"
#include "pk_math.h"

/* checks for an f32 kernel of n inputs, one output (t[n]), and ns scalars */
static int check_f32(const pk_tensor *t, int nt, int n, int ns, int want_ns) {
    if (nt != n + 1 || ns != want_ns) return PK_EARGS;
    for (int i = 0; i <= n; i++)
        if (t[i].dtype != PK_F32) return PK_EDTYPE;
    for (int i = 0; i < n; i++)
        if (!pk_same_shape(&t[i], &t[n])) return PK_EARGS;
    return PK_OK;
}

/* relu(x) -> y */
PK_KERNEL(relu) {
    (void)s;
    int rc = check_f32(t, nt, 1, ns, 0);
    if (rc) return rc;
    PK_FOR2(&t[1], &t[0], y, x, { *y = *x > 0.0f ? *x : (*x != *x ? *x : 0.0f); });
    return PK_OK;
}

/* threshold_backward(grad, self; threshold) -> grad * (self > threshold) */
PK_KERNEL(threshold_backward) {
    int rc = check_f32(t, nt, 2, ns, 1);
    if (rc) return rc;
    const float th = (float)s[0].f;
    PK_FOR3(&t[2], &t[0], &t[1], o, g, x, { *o = *x <= th ? 0.0f : *g; });
    return PK_OK;
}

/* hardtanh(x; min, max) -> clamp(x, min, max) (ReLU6 is hardtanh(0, 6)); NaN stays NaN */
PK_KERNEL(hardtanh) {
    int rc = check_f32(t, nt, 1, ns, 2);
    if (rc) return rc;
    const float lo = (float)s[0].f, hi = (float)s[1].f;
    PK_FOR2(&t[1], &t[0], y, x, { *y = *x < lo ? lo : (*x > hi ? hi : *x); });
    return PK_OK;
}

/* hardtanh_backward(grad, self; min, max) -> grad where min < self < max, else 0 (NaN self: 0) */
PK_KERNEL(hardtanh_backward) {
    int rc = check_f32(t, nt, 2, ns, 2);
    if (rc) return rc;
    const float lo = (float)s[0].f, hi = (float)s[1].f;
    PK_FOR3(&t[2], &t[0], &t[1], o, g, x, { *o = (*x > lo && *x < hi) ? *g : 0.0f; });
    return PK_OK;
}

/* hardswish(x) -> x * clamp(x + 3, 0, 6) / 6 */
PK_KERNEL(hardswish) {
    (void)s;
    int rc = check_f32(t, nt, 1, ns, 0);
    if (rc) return rc;
    PK_FOR2(&t[1], &t[0], y, x, {
        float c = *x + 3.0f;
        c = c < 0.0f ? 0.0f : (c > 6.0f ? 6.0f : c);
        *y = *x * c / 6.0f;
    });
    return PK_OK;
}

/* hardswish_backward(grad, self) -> 0 up to -3, grad (x/3 + 1/2) on (-3, 3), grad from 3; NaN for a
   NaN self (as aten's vectorised loop; its scalar loop, used for short tails, gives grad) */
PK_KERNEL(hardswish_backward) {
    (void)s;
    int rc = check_f32(t, nt, 2, ns, 0);
    if (rc) return rc;
    PK_FOR3(&t[2], &t[0], &t[1], o, g, x, {
        if (*x <= -3.0f) *o = 0.0f;
        else if (*x >= 3.0f) *o = *g;
        else *o = *g * ((*x / 3.0f) + 0.5f);
    });
    return PK_OK;
}

/* sigmoid(x) -> 1 / (1 + exp(-x)) */
PK_KERNEL(sigmoid) {
    (void)s;
    int rc = check_f32(t, nt, 1, ns, 0);
    if (rc) return rc;
    PK_FOR2(&t[1], &t[0], y, x, { *y = pk_sigmoidf(*x); });
    return PK_OK;
}

/* sigmoid_backward(grad, output) -> grad (1 - y) y */
PK_KERNEL(sigmoid_backward) {
    (void)s;
    int rc = check_f32(t, nt, 2, ns, 0);
    if (rc) return rc;
    PK_FOR3(&t[2], &t[0], &t[1], o, g, y, { *o = *g * (1.0f - *y) * *y; });
    return PK_OK;
}

/* silu(x) -> x sigmoid(x) */
PK_KERNEL(silu) {
    (void)s;
    int rc = check_f32(t, nt, 1, ns, 0);
    if (rc) return rc;
    PK_FOR2(&t[1], &t[0], y, x, { *y = *x * pk_sigmoidf(*x); });
    return PK_OK;
}

/* silu_backward(grad, self) -> grad sigmoid(x) (1 + x (1 - sigmoid(x))) */
PK_KERNEL(silu_backward) {
    (void)s;
    int rc = check_f32(t, nt, 2, ns, 0);
    if (rc) return rc;
    PK_FOR3(&t[2], &t[0], &t[1], o, g, x, {
        float sg = pk_sigmoidf(*x);
        *o = *g * sg * (1.0f + *x * (1.0f - sg));
    });
    return PK_OK;
}

/* ------------------------------------------------------------------ unary math, float32 and float64 */

/* a unary kernel: float32 through F32EXPR(v), float64 through F64EXPR(v) */
#define PK_UNARY(NAME, F32EXPR, F64EXPR)                                                         \
    PK_KERNEL(NAME) {                                                                            \
        (void)s;                                                                                 \
        if (nt != 2 || ns != 0) return PK_EARGS;                                                 \
        if (!pk_same_shape(&t[0], &t[1])) return PK_EARGS;                                       \
        if (t[0].dtype == PK_F32 && t[1].dtype == PK_F32) {                                      \
            PK_FOR2(&t[1], &t[0], y, x, {                                                        \
                const float v = *x;                                                              \
                *y = (F32EXPR);                                                                  \
            });                                                                                  \
            return PK_OK;                                                                        \
        }                                                                                        \
        if (t[0].dtype != PK_F64 || t[1].dtype != PK_F64) return PK_EDTYPE;                      \
        pk_walk w;                                                                               \
        pk_walk_init(&w, 2, &t[1], &t[0], 0, 0);                                                 \
        for (int64_t k = pk_numel(&t[1]); k > 0; k--, pk_walk_next(&w)) {                        \
            const double v = ((const double *)t[0].data)[w.off[1]];                              \
            ((double *)t[1].data)[w.off[0]] = (F64EXPR);                                         \
        }                                                                                        \
        return PK_OK;                                                                            \
    }

PK_UNARY(sqrt, pk_sqrtf(v), pk_sqrtd(v))
PK_UNARY(rsqrt, 1.0f / pk_sqrtf(v), 1.0 / pk_sqrtd(v))
PK_UNARY(exp, pk_expf(v), pk_expd(v))
PK_UNARY(log, pk_logf(v), pk_logd(v))
PK_UNARY(reciprocal, 1.0f / v, 1.0 / v)
PK_UNARY(abs, v < 0.0f ? -v : (v == 0.0f ? 0.0f : v), v < 0.0 ? -v : (v == 0.0 ? 0.0 : v))

/* neg(x) -> -x (float32, float64, integers) */
PK_KERNEL(neg) {
    (void)s;
    if (nt != 2 || ns != 0) return PK_EARGS;
    if (!pk_same_shape(&t[0], &t[1]) || t[0].dtype != t[1].dtype) return PK_EARGS;
    if (t[0].dtype == PK_F32) {
        PK_FOR2(&t[1], &t[0], y, x, { *y = -*x; });
        return PK_OK;
    }
    if (t[0].dtype == PK_BOOL) return PK_EDTYPE; /* aten refuses negating a bool */
    pk_walk w;
    pk_walk_init(&w, 2, &t[1], &t[0], 0, 0);
    for (int64_t k = pk_numel(&t[1]); k > 0; k--, pk_walk_next(&w)) {
        if (t[0].dtype == PK_F64) pk_set(&t[1], w.off[0], -pk_get(&t[0], w.off[1]));
        else pk_seti(&t[1], w.off[0], (int64_t)(0 - (uint64_t)pk_geti(&t[0], w.off[1])));
    }
    return PK_OK;
}

/* pow(x; exponent) -> x^exponent: the exponents aten computes exactly (2, 3, -1, -2, 0.5, -0.5) as it
   does (x*x, x*x*x, 1/x, 1/(x*x), sqrt, 1/sqrt), any other through pk_powf with the exponent rounded
   to float as aten rounds it for a float32 tensor */
PK_KERNEL(pow_scalar) {
    int rc = check_f32(t, nt, 1, ns, 1);
    if (rc) return rc;
    const double e = s[0].f;
    if (e == 2.0) PK_FOR2(&t[1], &t[0], y, x, { *y = *x * *x; });
    else if (e == 3.0) PK_FOR2(&t[1], &t[0], y, x, { *y = *x * *x * *x; });
    else if (e == -1.0) PK_FOR2(&t[1], &t[0], y, x, { *y = 1.0f / *x; });
    else if (e == -2.0) PK_FOR2(&t[1], &t[0], y, x, { *y = 1.0f / (*x * *x); });
    else if (e == 0.5) PK_FOR2(&t[1], &t[0], y, x, { *y = pk_sqrtf(*x); });
    else if (e == -0.5) PK_FOR2(&t[1], &t[0], y, x, { *y = 1.0f / pk_sqrtf(*x); });
    else if (e == 1.0) PK_FOR2(&t[1], &t[0], y, x, { *y = *x; });
    else if (e == 0.0) PK_FOR2(&t[1], &t[0], y, x, { (void)x; *y = 1.0f; });
    else {
        const float ef = (float)e;
        PK_FOR2(&t[1], &t[0], y, x, { *y = pk_powf(*x, ef); });
    }
    return PK_OK;
}
