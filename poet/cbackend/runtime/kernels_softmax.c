/* Softmax and log-softmax along one dimension, and their gradients (specs: poet/cbackend/ops_softmax.py).

   Each row along the dimension: its maximum, exp(x - max) through pk_expf, a cascaded sum.  The
   output row holds the exponentials until they are divided (no workspace).  A row of -inf only gives
   NaN, as aten's softmax does, or 0 with `safe` (aten's _safe_softmax, what attention with a mask that
   hides a whole row uses). */
#include "pk.h"
#include "pk_dense.h"
#include "pk_math.h"

/* the rows along dim shared by every view (same shape): how many elements each has and their strides */
typedef struct {
    pk_rows r;
    int dim;
    int32_t n;
} rowwalk;

static int rowwalk_init(rowwalk *w, const pk_tensor *shape, int64_t dim) {
    w->dim = pk_dim(dim, shape->ndim);
    if (w->dim < 0) return -1;
    w->n = shape->ndim ? shape->size[w->dim] : 1;
    return w->n > 0 && pk_rows_init(&w->r, shape, shape->ndim ? w->dim : -1);
}

static int32_t along(const pk_tensor *x, int dim) { return x->ndim ? x->stride[dim] : 0; }

/* softmax(x -> y; dim, safe) and log_softmax(x -> y; dim, log) share this */
static int softmax_rows(pk_tensor *t, int nt, const pk_scalar *s, int ns, int log) {
    if (nt != 2 || ns != 2) return PK_EARGS;
    if (!pk_all_f32(t, 2)) return PK_EDTYPE;
    const pk_tensor *x = &t[0];
    pk_tensor *y = &t[1];
    if (!pk_same_shape(x, y)) return PK_EARGS;
    rowwalk w;
    const int ok = rowwalk_init(&w, y, s[0].i);
    if (ok < 0) return PK_EARGS;
    if (!ok) return PK_OK;
    const int safe = (int)s[1].i;
    const int32_t sx = along(x, w.dim), sy = along(y, w.dim), n = w.n;
    int64_t off[2] = {0, 0};
    const int32_t *st[2] = {x->stride, y->stride};
    do {
        const float *xr = (const float *)x->data + off[0];
        float *yr = (float *)y->data + off[1];
        float m = xr[0];
        for (int32_t j = 1; j < n; j++) {
            const float v = xr[(int64_t)j * sx];
            if (v > m || v != v) m = v; /* NaN wins, as in aten's max */
        }
        if (safe && m == -pk_inff()) {
            for (int32_t j = 0; j < n; j++) yr[(int64_t)j * sy] = 0.0f;
            continue;
        }
        pk_cascade c;
        pk_cascade_init(&c);
        for (int32_t j = 0; j < n; j++) {
            const float e = pk_expf(xr[(int64_t)j * sx] - m);
            if (!log) yr[(int64_t)j * sy] = e;
            pk_cascade_add(&c, e);
        }
        const float sum = pk_cascade_total(&c);
        if (log) {
            const float ls = pk_logf(sum);
            for (int32_t j = 0; j < n; j++) yr[(int64_t)j * sy] = (xr[(int64_t)j * sx] - m) - ls;
        } else {
            for (int32_t j = 0; j < n; j++) yr[(int64_t)j * sy] = yr[(int64_t)j * sy] / sum;
        }
    } while (pk_rows_next(&w.r, st, 2, off));
    return PK_OK;
}

/* softmax(x -> y; dim, safe) */
PK_KERNEL(softmax) { return softmax_rows(t, nt, s, ns, 0); }

/* log_softmax(x -> y; dim, 0) */
PK_KERNEL(log_softmax) { return softmax_rows(t, nt, s, ns, 1); }

/* softmax_backward(grad, y -> gi; dim): gi = y * (grad - sum(grad * y)) along dim;
   log_softmax_backward(grad, y -> gi; dim): gi = grad - exp(y) * sum(grad) along dim */
static int softmax_backward_rows(pk_tensor *t, int nt, const pk_scalar *s, int ns, int log) {
    if (nt != 3 || ns != 1) return PK_EARGS;
    if (!pk_all_f32(t, 3)) return PK_EDTYPE;
    const pk_tensor *g = &t[0], *y = &t[1];
    pk_tensor *gi = &t[2];
    if (!pk_same_shape(g, gi) || !pk_same_shape(y, gi)) return PK_EARGS;
    rowwalk w;
    const int ok = rowwalk_init(&w, gi, s[0].i);
    if (ok < 0) return PK_EARGS;
    if (!ok) return PK_OK;
    const int32_t sg = along(g, w.dim), sy = along(y, w.dim), so = along(gi, w.dim), n = w.n;
    int64_t off[3] = {0, 0, 0};
    const int32_t *st[3] = {g->stride, y->stride, gi->stride};
    do {
        const float *gr = (const float *)g->data + off[0], *yr = (const float *)y->data + off[1];
        float *o = (float *)gi->data + off[2];
        pk_cascade c;
        pk_cascade_init(&c);
        for (int32_t j = 0; j < n; j++)
            pk_cascade_add(&c, log ? gr[(int64_t)j * sg] : gr[(int64_t)j * sg] * yr[(int64_t)j * sy]);
        const float sum = pk_cascade_total(&c);
        for (int32_t j = 0; j < n; j++) {
            const float gj = gr[(int64_t)j * sg], yj = yr[(int64_t)j * sy];
            o[(int64_t)j * so] = log ? gj - pk_expf(yj) * sum : yj * (gj - sum);
        }
    } while (pk_rows_next(&w.r, st, 3, off));
    return PK_OK;
}

PK_KERNEL(softmax_backward) { return softmax_backward_rows(t, nt, s, ns, 0); }

PK_KERNEL(log_softmax_backward) { return softmax_backward_rows(t, nt, s, ns, 1); }
