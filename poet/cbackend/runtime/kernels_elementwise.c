/* Elementwise kernels and their gradients (specs: poet/cbackend/ops_elementwise.py). */
#include "pk.h"
#include "pk_iter.h"

/* relu(x) -> y */
PK_KERNEL(relu) {
    (void)s;
    if (nt != 2 || ns != 0) return PK_EARGS;
    if (t[0].dtype != PK_F32 || t[1].dtype != PK_F32) return PK_EDTYPE;
    PK_FOR2(&t[1], &t[0], y, x, { *y = *x > 0.0f ? *x : 0.0f; });
    return PK_OK;
}

/* threshold_backward(grad, self, threshold) -> grad * (self > threshold) */
PK_KERNEL(threshold_backward) {
    if (nt != 3 || ns != 1) return PK_EARGS;
    if (t[0].dtype != PK_F32 || t[1].dtype != PK_F32 || t[2].dtype != PK_F32) return PK_EDTYPE;
    const float th = (float)s[0].f;
    PK_FOR3(&t[2], &t[0], &t[1], o, g, x, { *o = *x > th ? *g : 0.0f; });
    return PK_OK;
}
