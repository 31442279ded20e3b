/* LayerNorm forward and backward, and the weight/bias gradients of one tile of tokens
   (specs: poet/cbackend/ops_norm.py).

   A row is one position of the leading dimensions; it is normalised over the trailing k dimensions
   (normalized_shape), which may have any strides.  Two passes in float (mean, then the mean of squared
   deviations: no cancellation), each a cascaded sum; rstd = 1 / sqrt(var + eps) through pk_sqrtf.
   mean and rstd are read and written through their own strides for the leading dimensions (their
   trailing size-1 dimensions, if any, are ignored).  Weight and bias gradients are accumulated row by
   row in their outputs (float, in row order), as aten's CPU kernel does. */
#include "pk.h"
#include "pk_dense.h"
#include "pk_math.h"

/* the trailing k dimensions of up to six views: the last one walked by an inner loop (n elements,
   last[i] apart in view i), the k - 1 before it by an odometer (off[i]: view i's offset of the
   current run of the last dimension) */
typedef struct {
    int k, nv;
    int32_t n, last[6];
    int32_t size[PK_MAXDIM], idx[PK_MAXDIM];
    int32_t stride[6][PK_MAXDIM];
    int64_t off[6];
} tail;

/* views[i] may be NULL (its offsets stay 0); each has its trailing k dims as the normalized shape */
static void tail_init(tail *w, int k, const pk_tensor *shape, const pk_tensor *const *views, int nv) {
    w->k = k - 1;
    w->nv = nv;
    w->n = shape->size[shape->ndim - 1];
    for (int i = 0; i < nv; i++) w->last[i] = views[i] ? views[i]->stride[views[i]->ndim - 1] : 0;
    for (int d = 0; d < k - 1; d++) {
        w->size[d] = shape->size[shape->ndim - k + d];
        for (int i = 0; i < nv; i++) w->stride[i][d] = views[i] ? views[i]->stride[views[i]->ndim - k + d] : 0;
    }
}

static inline void tail_reset(tail *w) {
    for (int d = 0; d < w->k; d++) w->idx[d] = 0;
    for (int i = 0; i < w->nv; i++) w->off[i] = 0;
}

/* the next run of the last dimension; 0 after the last one */
static inline int tail_next(tail *w) {
    for (int d = w->k - 1; d >= 0; d--) {
        if (++w->idx[d] < w->size[d]) {
            for (int i = 0; i < w->nv; i++) w->off[i] += w->stride[i][d];
            return 1;
        }
        for (int i = 0; i < w->nv; i++) w->off[i] -= (int64_t)w->stride[i][d] * (w->size[d] - 1);
        w->idx[d] = 0;
    }
    return 0;
}

/* the statement(s) after E for every element of the normalized dims, in order; in them, E_AT(E, i) is
   view i's offset */
#define TAIL_LOOP(E, ...)                                                       \
    do {                                                                        \
        tail_reset(E);                                                          \
        do {                                                                    \
            for (int32_t j_ = 0; j_ < (E)->n; j_++) {                           \
                __VA_ARGS__;                                                    \
            }                                                                   \
        } while (tail_next(E));                                                 \
    } while (0)
#define E_AT(E, I) ((E)->off[I] + (int64_t)j_ * (E)->last[I])

/* the leading dimensions of x as a shape of their own (rows), and a row statistic's strides over them */
static pk_tensor leading(const pk_tensor *x, int k) {
    pk_tensor v = *x;
    v.ndim = x->ndim - k;
    return v;
}

/* 1 if stat (mean or rstd) has the rows' shape, with or without k trailing size-1 dims */
static int stat_fits(const pk_tensor *stat, const pk_tensor *x, int k) {
    const int lead = x->ndim - k;
    if (stat->dtype != PK_F32 || (stat->ndim != lead && stat->ndim != x->ndim)) return 0;
    for (int d = 0; d < stat->ndim; d++)
        if (stat->size[d] != (d < lead ? x->size[d] : 1)) return 0;
    return 1;
}

/* 1 if p (weight, bias or their gradient) is absent or has the normalized shape */
static int param_fits(const pk_tensor *p, const pk_tensor *x, int k) {
    if (p->dtype == PK_NONE) return 1;
    if (p->dtype != PK_F32 || p->ndim != k) return 0;
    for (int d = 0; d < k; d++)
        if (p->size[d] != x->size[x->ndim - k + d]) return 0;
    return 1;
}

#define AT(T, OFF) (((float *)(T)->data)[OFF])

/* layer_norm(x, weight | NONE, bias | NONE -> y, mean, rstd; k, eps) */
PK_KERNEL(layer_norm) {
    if (nt != 6 || ns != 2) return PK_EARGS;
    const pk_tensor *x = &t[0], *w = &t[1], *b = &t[2];
    pk_tensor *y = &t[3], *mean = &t[4], *rstd = &t[5];
    if (x->dtype != PK_F32 || y->dtype != PK_F32) return PK_EDTYPE;
    const int k = (int)s[0].i;
    const float eps = (float)s[1].f;
    if (k < 1 || k > x->ndim || !pk_same_shape(x, y) || !stat_fits(mean, x, k) || !stat_fits(rstd, x, k) ||
        !param_fits(w, x, k) || !param_fits(b, x, k))
        return PK_EARGS;
    const pk_tensor rows = leading(x, k);
    const int64_t n = pk_numel(x) / (pk_numel(&rows) ? pk_numel(&rows) : 1);
    pk_rows r;
    if (n == 0 || !pk_rows_init(&r, &rows, -1)) return PK_OK;
    const pk_tensor *views[4] = {x, y, w->dtype ? w : 0, b->dtype ? b : 0};
    tail e;
    tail_init(&e, k, x, views, 4);
    int64_t off[4] = {0, 0, 0, 0};
    const int32_t *st[4] = {x->stride, y->stride, mean->stride, rstd->stride};
    do {
        const float *xr = (const float *)x->data + off[0];
        float *yr = (float *)y->data + off[1];
        pk_cascade c;
        pk_cascade_init(&c);
        TAIL_LOOP(&e, pk_cascade_add(&c, xr[E_AT(&e, 0)]));
        const float mu = pk_cascade_total(&c) / (float)n;
        pk_cascade_init(&c);
        TAIL_LOOP(&e, {
            const float d = xr[E_AT(&e, 0)] - mu;
            pk_cascade_add(&c, d * d);
        });
        const float rs = 1.0f / pk_sqrtf(pk_cascade_total(&c) / (float)n + eps);
        TAIL_LOOP(&e, {
            float v = (xr[E_AT(&e, 0)] - mu) * rs;
            if (views[2]) v = v * AT(w, E_AT(&e, 2));
            if (views[3]) v = v + AT(b, E_AT(&e, 3));
            yr[E_AT(&e, 1)] = v;
        });
        AT(mean, off[2]) = mu;
        AT(rstd, off[3]) = rs;
    } while (pk_rows_next(&r, st, 4, off));
    return PK_OK;
}

/* gw = acc_w + sum over rows of go * (x - mean) * rstd, gb = acc_b + sum over rows of go (either absent):
   the sums accumulated in gw and gb row by row (as aten's CPU kernel does), then the running ones added */
static void param_grads(const pk_tensor *acc_w, const pk_tensor *acc_b, const pk_tensor *go, const pk_tensor *x,
                        const pk_tensor *mean, const pk_tensor *rstd, pk_tensor *gw, pk_tensor *gb, int k) {
    const pk_tensor rows = leading(x, k);
    const pk_tensor *views[6] = {gw->dtype ? gw : 0, gb->dtype ? gb : 0, acc_w->dtype ? acc_w : 0,
                                 acc_b->dtype ? acc_b : 0, go, x};
    tail e;
    tail_init(&e, k, x, views, 6);
    TAIL_LOOP(&e, {
        if (views[0]) AT(gw, E_AT(&e, 0)) = 0.0f;
        if (views[1]) AT(gb, E_AT(&e, 1)) = 0.0f;
    });
    pk_rows r;
    if (pk_numel(x) > 0 && pk_rows_init(&r, &rows, -1)) {
        int64_t off[4] = {0, 0, 0, 0};
        const int32_t *st[4] = {go->stride, x->stride, mean->stride, rstd->stride};
        do {
            const float mu = AT(mean, off[2]), rs = AT(rstd, off[3]);
            TAIL_LOOP(&e, {
                const float g = AT(go, off[0] + E_AT(&e, 4));
                if (views[0]) AT(gw, E_AT(&e, 0)) += g * ((AT(x, off[1] + E_AT(&e, 5)) - mu) * rs);
                if (views[1]) AT(gb, E_AT(&e, 1)) += g;
            });
        } while (pk_rows_next(&r, st, 4, off));
    }
    TAIL_LOOP(&e, {
        if (views[2]) AT(gw, E_AT(&e, 0)) = AT(acc_w, E_AT(&e, 2)) + AT(gw, E_AT(&e, 0));
        if (views[3]) AT(gb, E_AT(&e, 1)) = AT(acc_b, E_AT(&e, 3)) + AT(gb, E_AT(&e, 1));
    });
}

/* layer_norm_backward(go, x, mean, rstd, weight | NONE -> gi | NONE, gw | NONE, gb | NONE; k):
   gi = rstd * (g - mean(g) - xhat * mean(g * xhat)) per row, g = go * weight, xhat = (x - mean) * rstd */
PK_KERNEL(layer_norm_backward) {
    if (nt != 8 || ns != 1) return PK_EARGS;
    const pk_tensor *go = &t[0], *x = &t[1], *mean = &t[2], *rstd = &t[3], *w = &t[4];
    pk_tensor *gi = &t[5], *gw = &t[6], *gb = &t[7];
    const int k = (int)s[0].i;
    if (go->dtype != PK_F32 || x->dtype != PK_F32 || (gi->dtype != PK_NONE && gi->dtype != PK_F32)) return PK_EDTYPE;
    if (k < 1 || k > x->ndim || !pk_same_shape(go, x) || (gi->dtype && !pk_same_shape(gi, x)) ||
        !stat_fits(mean, x, k) || !stat_fits(rstd, x, k) || !param_fits(w, x, k) || !param_fits(gw, x, k) ||
        !param_fits(gb, x, k))
        return PK_EARGS;
    const pk_tensor none = {0, PK_NONE, 0, {0}, {0}};
    param_grads(&none, &none, go, x, mean, rstd, gw, gb, k);
    const pk_tensor rows = leading(x, k);
    const int64_t n = pk_numel(x) / (pk_numel(&rows) ? pk_numel(&rows) : 1);
    pk_rows r;
    if (!gi->dtype || n == 0 || !pk_rows_init(&r, &rows, -1)) return PK_OK;
    const pk_tensor *views[4] = {go, x, gi, w->dtype ? w : 0};
    tail e;
    tail_init(&e, k, x, views, 4);
    int64_t off[5] = {0, 0, 0, 0, 0};
    const int32_t *st[5] = {go->stride, x->stride, gi->stride, mean->stride, rstd->stride};
    do {
        const float mu = AT(mean, off[3]), rs = AT(rstd, off[4]);
        pk_cascade ca, cb;
        pk_cascade_init(&ca);
        pk_cascade_init(&cb);
        TAIL_LOOP(&e, {
            float g = AT(go, off[0] + E_AT(&e, 0));
            if (views[3]) g = g * AT(w, E_AT(&e, 3));
            pk_cascade_add(&ca, g);
            pk_cascade_add(&cb, g * ((AT(x, off[1] + E_AT(&e, 1)) - mu) * rs));
        });
        const float ma = pk_cascade_total(&ca) / (float)n, mb = pk_cascade_total(&cb) / (float)n;
        TAIL_LOOP(&e, {
            float g = AT(go, off[0] + E_AT(&e, 0));
            if (views[3]) g = g * AT(w, E_AT(&e, 3));
            const float xhat = (AT(x, off[1] + E_AT(&e, 1)) - mu) * rs;
            AT(gi, off[2] + E_AT(&e, 2)) = rs * ((g - ma) - xhat * mb);
        });
    } while (pk_rows_next(&r, st, 5, off));
    return PK_OK;
}

/* layer_norm_param_grad(acc_w | NONE, acc_b | NONE, go, x, mean, rstd -> gw | NONE, gb | NONE):
   one more tile of tokens' weight and bias gradients added to the running ones
   (tile_layer_norm_param_grad; normalised over the last dimension) */
PK_KERNEL(layer_norm_param_grad) {
    (void)s;
    if (nt != 8 || ns != 0) return PK_EARGS;
    const pk_tensor *acc_w = &t[0], *acc_b = &t[1], *go = &t[2], *x = &t[3], *mean = &t[4], *rstd = &t[5];
    pk_tensor *gw = &t[6], *gb = &t[7];
    if (go->dtype != PK_F32 || x->dtype != PK_F32) return PK_EDTYPE;
    if (x->ndim < 1 || !pk_same_shape(go, x) || !stat_fits(mean, x, 1) || !stat_fits(rstd, x, 1) ||
        !param_fits(gw, x, 1) || !param_fits(gb, x, 1) || (acc_w->dtype && (!gw->dtype || !param_fits(acc_w, x, 1))) ||
        (acc_b->dtype && (!gb->dtype || !param_fits(acc_b, x, 1))))
        return PK_EARGS;
    param_grads(acc_w, acc_b, go, x, mean, rstd, gw, gb, 1);
    return PK_OK;
}
