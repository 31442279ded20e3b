/* BatchNorm in training (and eval) and its gradient, whole and in tiles (specs: poet/cbackend/ops_batchnorm.py).

   Channels are dimension 1 of a view of 2 or more dimensions (N, C, ...).  Statistics are summed in
   double, as aten's CPU kernels sum them (and as poet/execute/tiled_ops.py's tile kernels do), then
   rounded to float once; the normalisation itself runs in float as aten's does.  The tile kernels
   compute exactly what their Python versions compute, operation for operation in the same
   precision: Chan's parallel combination of per-tile (count, mean, M2) in double, the input
   gradient per element in double. */
#include "pk.h"
#include "pk_dense.h"
#include "pk_math.h"

/* the views' channel c (dimension 1 removed), walked row by row along their last dimension */
typedef struct {
    int nv;
    pk_tensor sel[3];
    const int32_t *st[3];
    int64_t off[3];
    pk_rows rows;
    int32_t len, inner[3];
} chan_walk;

/* 0 when the channel has no elements */
static int chan_begin(chan_walk *w, const pk_tensor *const *views, int nv, int32_t c) {
    w->nv = nv;
    for (int i = 0; i < nv; i++) {
        w->sel[i] = pk_select(views[i], 1, c);
        w->st[i] = w->sel[i].stride;
        w->off[i] = 0;
        w->inner[i] = w->sel[i].stride[w->sel[i].ndim - 1];
    }
    const int last = w->sel[0].ndim - 1;
    w->len = w->sel[0].size[last];
    return w->len > 0 && pk_rows_init(&w->rows, &w->sel[0], last);
}

static const float *chan_row(const chan_walk *w, int i) { return (const float *)w->sel[i].data + w->off[i]; }
static int chan_next(chan_walk *w) { return pk_rows_next(&w->rows, w->st, w->nv, w->off); }

static double vec_at(const pk_tensor *v, int32_t c) {
    return v->dtype == PK_F64 ? ((const double *)v->data)[(int64_t)c * v->stride[0]]
                              : (double)((const float *)v->data)[(int64_t)c * v->stride[0]];
}

static void vec_set(const pk_tensor *v, int32_t c, double x) {
    if (v->dtype == PK_F64) ((double *)v->data)[(int64_t)c * v->stride[0]] = x;
    else ((float *)v->data)[(int64_t)c * v->stride[0]] = (float)x;
}

/* a per-channel vector of C float32/float64 values, or PK_NONE when optional */
static int vec_ok(const pk_tensor *v, int32_t c, int optional) {
    if (v->dtype == PK_NONE) return optional;
    return (v->dtype == PK_F32 || v->dtype == PK_F64) && v->ndim == 1 && v->size[0] == c;
}

/* an (N, C, ...) float32 view */
static int nc_ok(const pk_tensor *x) { return x->dtype == PK_F32 && x->ndim >= 2; }

static int64_t per_channel_count(const pk_tensor *x) { return x->size[1] ? pk_numel(x) / x->size[1] : 0; }

/* channel c's sum and sum of squared deviations from its mean, in double (two passes) */
static void channel_moments(const pk_tensor *x, int32_t c, int64_t n, double *mean, double *m2) {
    const pk_tensor *v[1] = {x};
    chan_walk w;
    double s = 0.0, q = 0.0;
    if (chan_begin(&w, v, 1, c)) do {
            const float *p = chan_row(&w, 0);
            for (int32_t j = 0; j < w.len; j++) s += (double)p[(int64_t)j * w.inner[0]];
        } while (chan_next(&w));
    const double mu = n ? s / (double)n : 0.0;
    if (chan_begin(&w, v, 1, c)) do {
            const float *p = chan_row(&w, 0);
            for (int32_t j = 0; j < w.len; j++) {
                const double d = (double)p[(int64_t)j * w.inner[0]] - mu;
                q += d * d;
            }
        } while (chan_next(&w));
    *mean = mu;
    *m2 = q;
}

/* y = x * alpha + beta on channel c (float, as aten's transform) */
static void channel_affine(const pk_tensor *x, const pk_tensor *y, int32_t c, float alpha, float beta) {
    const pk_tensor *v[2] = {x, y};
    chan_walk w;
    if (chan_begin(&w, v, 2, c)) do {
            const float *p = chan_row(&w, 0);
            float *q = (float *)chan_row(&w, 1);
            for (int32_t j = 0; j < w.len; j++) q[(int64_t)j * w.inner[1]] = p[(int64_t)j * w.inner[0]] * alpha + beta;
        } while (chan_next(&w));
}

/* batch_norm(x, w | NONE, b | NONE, running_mean | NONE, running_var | NONE -> y, save_mean, save_invstd
   [, new_running_mean, new_running_var]; training, momentum, eps): aten's _native_batch_norm_legit
   family.  Training: batch statistics (save_* hold mean and 1/sqrt(var + eps)), running stats (when
   given and asked for) moved by momentum with the unbiased variance.  Eval: the running stats
   normalise; save_* are empty; the running stats are copied. */
PK_KERNEL(batch_norm) {
    static const pk_tensor none = {0, PK_NONE, 0, {0}, {0}};
    if ((nt != 10 && nt != 8) || ns != 3) return PK_EARGS;
    const pk_tensor *x = &t[0], *wt = &t[1], *b = &t[2], *rm = &t[3], *rv = &t[4];
    const pk_tensor *y = &t[5], *sm = &t[6], *si = &t[7];
    const pk_tensor *nrm = nt == 10 ? &t[8] : &none, *nrv = nt == 10 ? &t[9] : &none;
    const int training = s[0].i != 0;
    const double momentum = s[1].f, eps = s[2].f;
    if (!nc_ok(x) || y->dtype != PK_F32) return PK_EDTYPE;
    const int32_t C = x->size[1];
    const int64_t n = per_channel_count(x);
    if (!pk_same_shape(x, y) || !vec_ok(wt, C, 1) || !vec_ok(b, C, 1)) return PK_EARGS;
    if (!vec_ok(rm, C, 1) || !vec_ok(rv, C, 1) || !vec_ok(nrm, C, 1) || !vec_ok(nrv, C, 1))
        return PK_EARGS;
    if (training && (!vec_ok(sm, C, 0) || !vec_ok(si, C, 0))) return PK_EARGS;
    if (!training && (rm->dtype == PK_NONE || rv->dtype == PK_NONE)) return PK_EARGS;
    for (int32_t c = 0; c < C; c++) {
        float mean_f, invstd_f;
        if (training) {
            double mean, m2;
            channel_moments(x, c, n, &mean, &m2);
            const double var = n ? m2 / (double)n : 0.0;
            mean_f = (float)mean;
            invstd_f = (float)(1.0 / pk_sqrtd(var + eps));
            vec_set(sm, c, mean_f);
            vec_set(si, c, invstd_f);
            if (rm->dtype != PK_NONE && nrm->dtype != PK_NONE)
                vec_set(nrm, c, momentum * mean + (1.0 - momentum) * vec_at(rm, c));
            if (rv->dtype != PK_NONE && nrv->dtype != PK_NONE) {
                const double unbiased = n > 1 ? m2 / (double)(n - 1) : var;
                vec_set(nrv, c, momentum * unbiased + (1.0 - momentum) * vec_at(rv, c));
            }
        } else {
            mean_f = (float)vec_at(rm, c);
            invstd_f = (float)(1.0 / pk_sqrtd(vec_at(rv, c) + eps));
            if (nrm->dtype != PK_NONE) vec_set(nrm, c, vec_at(rm, c));
            if (nrv->dtype != PK_NONE) vec_set(nrv, c, vec_at(rv, c));
        }
        const float wc = wt->dtype == PK_NONE ? 1.0f : (float)vec_at(wt, c);
        const float bc = b->dtype == PK_NONE ? 0.0f : (float)vec_at(b, c);
        const float alpha = invstd_f * wc;
        channel_affine(x, y, c, alpha, bc - mean_f * alpha);
    }
    return PK_OK;
}

/* batch_norm_backward(go, x, w | NONE, running_mean | NONE, running_var | NONE, save_mean | NONE,
   save_invstd | NONE -> gi | NONE, gw | NONE, gb | NONE; training, eps):
   aten.native_batch_norm_backward.  Sums of go and go (x - mean) per channel in double. */
PK_KERNEL(batch_norm_backward) {
    if (nt != 10 || ns != 2) return PK_EARGS;
    const pk_tensor *go = &t[0], *x = &t[1], *wt = &t[2], *rm = &t[3], *rv = &t[4], *sm = &t[5], *si = &t[6];
    const pk_tensor *gi = &t[7], *gw = &t[8], *gb = &t[9];
    const int training = s[0].i != 0;
    const double eps = s[1].f;
    if (!nc_ok(go) || !nc_ok(x)) return PK_EDTYPE;
    const int32_t C = x->size[1];
    const int64_t n = per_channel_count(x);
    if (!pk_same_shape(go, x) || !vec_ok(wt, C, 1)) return PK_EARGS;
    if (gi->dtype != PK_NONE && (gi->dtype != PK_F32 || !pk_same_shape(gi, x))) return PK_EARGS;
    if (!vec_ok(gw, C, 1) || !vec_ok(gb, C, 1)) return PK_EARGS;
    if (training ? (!vec_ok(sm, C, 0) || !vec_ok(si, C, 0)) : (!vec_ok(rm, C, 0) || !vec_ok(rv, C, 0)))
        return PK_EARGS;
    for (int32_t c = 0; c < C; c++) {
        const double mean = training ? vec_at(sm, c) : vec_at(rm, c);
        const double invstd = training ? vec_at(si, c) : 1.0 / pk_sqrtd(vec_at(rv, c) + eps);
        const pk_tensor *v[3] = {go, x, gi};
        chan_walk w;
        double sum = 0.0, dotp = 0.0;
        if (chan_begin(&w, v, 2, c)) do {
                const float *g = chan_row(&w, 0), *p = chan_row(&w, 1);
                for (int32_t j = 0; j < w.len; j++) {
                    const double gv = (double)g[(int64_t)j * w.inner[0]];
                    sum += gv;
                    dotp += gv * ((double)p[(int64_t)j * w.inner[1]] - mean);
                }
            } while (chan_next(&w));
        if (gw->dtype != PK_NONE) vec_set(gw, c, dotp * invstd);
        if (gb->dtype != PK_NONE) vec_set(gb, c, sum);
        if (gi->dtype == PK_NONE) continue;
        const float wc = wt->dtype == PK_NONE ? 1.0f : (float)vec_at(wt, c);
        const float mean_f = (float)mean, scale = (float)invstd * wc;
        const float k = training && n ? (float)(dotp * invstd * invstd / (double)n) : 0.0f;
        const float gmean = training && n ? (float)(sum / (double)n) : 0.0f;
        if (chan_begin(&w, v, 3, c)) do {
                const float *g = chan_row(&w, 0), *p = chan_row(&w, 1);
                float *q = (float *)chan_row(&w, 2);
                for (int32_t j = 0; j < w.len; j++) {
                    const float dx = (p[(int64_t)j * w.inner[1]] - mean_f) * k;
                    q[(int64_t)j * w.inner[2]] = (g[(int64_t)j * w.inner[0]] - gmean - dx) * scale;
                }
            } while (chan_next(&w));
    }
    return PK_OK;
}

/* ------------------------------------------------------------------ tile kernels (poet/execute/tiled_ops.py) */

/* a (rows, C) float64 view */
static int stats_ok(const pk_tensor *v, int32_t rows, int32_t c) {
    return v->dtype == PK_F64 && v->ndim == 2 && v->size[0] == rows && v->size[1] == c;
}

static double *at2(const pk_tensor *v, int32_t r, int32_t c) {
    return (double *)v->data + (int64_t)r * v->stride[0] + (int64_t)c * v->stride[1];
}

/* tile_bn_stats(x -> stats): per channel of one tile [count, mean, sum of squared deviations], float64 3 x C */
PK_KERNEL(tile_bn_stats) {
    (void)s;
    if (nt != 2 || ns != 0) return PK_EARGS;
    const pk_tensor *x = &t[0], *st = &t[1];
    if (!nc_ok(x)) return PK_EDTYPE;
    const int32_t C = x->size[1];
    if (!stats_ok(st, 3, C)) return PK_EARGS;
    const int64_t n = per_channel_count(x);
    for (int32_t c = 0; c < C; c++) {
        double mean, m2;
        channel_moments(x, c, n, &mean, &m2);
        *at2(st, 0, c) = (double)n;
        *at2(st, 1, c) = mean;
        *at2(st, 2, c) = m2;
    }
    return PK_OK;
}

/* tile_bn_combine(stats_0 .. stats_{k-1}, running_mean | NONE, running_var | NONE -> mean, invstd,
   new_running_mean | NONE, new_running_var | NONE; k, momentum, eps): the batch statistics from every
   tile's by Chan's parallel formula, in tile order, and the running statistics' update */
PK_KERNEL(tile_bn_combine) {
    if (ns != 3 || s[0].i < 1 || nt != s[0].i + 6) return PK_EARGS;
    const int k = (int)s[0].i;
    const double momentum = s[1].f, eps = s[2].f;
    const pk_tensor *rm = &t[k], *rv = &t[k + 1], *mo = &t[k + 2], *io = &t[k + 3], *nrm = &t[k + 4], *nrv = &t[k + 5];
    if (t[0].ndim != 2) return PK_EARGS;
    const int32_t C = t[0].size[1];
    for (int i = 0; i < k; i++)
        if (!stats_ok(&t[i], 3, C)) return PK_EARGS;
    if (!vec_ok(mo, C, 0) || !vec_ok(io, C, 0) || !vec_ok(rm, C, 1) || !vec_ok(rv, C, 1)) return PK_EARGS;
    if (!vec_ok(nrm, C, rm->dtype == PK_NONE) || !vec_ok(nrv, C, rv->dtype == PK_NONE)) return PK_EARGS;
    double total = *at2(&t[0], 0, 0); /* the Python reads channel 0's count; every channel's is equal */
    for (int i = 1; i < k; i++) total += *at2(&t[i], 0, 0);
    for (int32_t c = 0; c < C; c++) {
        double n = *at2(&t[0], 0, c), mean = *at2(&t[0], 1, c), m2 = *at2(&t[0], 2, c);
        for (int i = 1; i < k; i++) {
            const double nb = *at2(&t[i], 0, c), mb = *at2(&t[i], 1, c), m2b = *at2(&t[i], 2, c);
            const double tot = n + nb, delta = mb - mean;
            mean = mean + delta * nb / tot;
            m2 = m2 + m2b + delta * delta * n * nb / tot;
            n = tot;
        }
        const double var = m2 / n;
        vec_set(mo, c, mean);
        vec_set(io, c, 1.0 / pk_sqrtd(var + eps));
        if (rm->dtype != PK_NONE) {
            const double unbiased = var * total / (total - 1.0 > 1.0 ? total - 1.0 : 1.0);
            vec_set(nrm, c, vec_at(rm, c) * (1.0 - momentum) + mean * momentum);
            vec_set(nrv, c, vec_at(rv, c) * (1.0 - momentum) + unbiased * momentum);
        }
    }
    return PK_OK;
}

/* tile_bn_apply(x, mean, invstd, w | NONE, b | NONE -> y): ((x - mean) * invstd) * w + b, in float */
PK_KERNEL(tile_bn_apply) {
    (void)s;
    if (nt != 6 || ns != 0) return PK_EARGS;
    const pk_tensor *x = &t[0], *mn = &t[1], *is = &t[2], *wt = &t[3], *b = &t[4], *y = &t[5];
    if (!nc_ok(x) || y->dtype != PK_F32) return PK_EDTYPE;
    const int32_t C = x->size[1];
    if (!pk_same_shape(x, y) || !vec_ok(mn, C, 0) || !vec_ok(is, C, 0) || !vec_ok(wt, C, 1) || !vec_ok(b, C, 1))
        return PK_EARGS;
    for (int32_t c = 0; c < C; c++) {
        const float m = (float)vec_at(mn, c), iv = (float)vec_at(is, c);
        const float wc = wt->dtype == PK_NONE ? 0.0f : (float)vec_at(wt, c);
        const float bc = b->dtype == PK_NONE ? 0.0f : (float)vec_at(b, c);
        const pk_tensor *v[2] = {x, y};
        chan_walk w;
        if (chan_begin(&w, v, 2, c)) do {
                const float *p = chan_row(&w, 0);
                float *q = (float *)chan_row(&w, 1);
                for (int32_t j = 0; j < w.len; j++) {
                    float r = (p[(int64_t)j * w.inner[0]] - m) * iv;
                    if (wt->dtype != PK_NONE) r = r * wc;
                    if (b->dtype != PK_NONE) r = r + bc;
                    q[(int64_t)j * w.inner[1]] = r;
                }
            } while (chan_next(&w));
    }
    return PK_OK;
}

/* tile_bn_grad_partial(go, x, mean -> partial): per channel of one tile [sum(go), sum(go (x - mean))],
   float64 2 x C */
PK_KERNEL(tile_bn_grad_partial) {
    (void)s;
    if (nt != 4 || ns != 0) return PK_EARGS;
    const pk_tensor *go = &t[0], *x = &t[1], *mn = &t[2], *out = &t[3];
    if (!nc_ok(go) || !nc_ok(x)) return PK_EDTYPE;
    const int32_t C = x->size[1];
    if (!pk_same_shape(go, x) || !vec_ok(mn, C, 0) || !stats_ok(out, 2, C)) return PK_EARGS;
    for (int32_t c = 0; c < C; c++) {
        const double m = vec_at(mn, c);
        const pk_tensor *v[2] = {go, x};
        chan_walk w;
        double sg = 0.0, sgx = 0.0;
        if (chan_begin(&w, v, 2, c)) do {
                const float *g = chan_row(&w, 0), *p = chan_row(&w, 1);
                for (int32_t j = 0; j < w.len; j++) {
                    const double gv = (double)g[(int64_t)j * w.inner[0]];
                    sg += gv;
                    sgx += gv * ((double)p[(int64_t)j * w.inner[1]] - m);
                }
            } while (chan_next(&w));
        *at2(out, 0, c) = sg;
        *at2(out, 1, c) = sgx;
    }
    return PK_OK;
}

/* tile_bn_grad_combine(partial_0 .. partial_{k-1}, invstd -> grad_weight, grad_bias, sums; k): the
   partials summed in tile order; grad_weight = sums[1] * invstd, grad_bias = sums[0] */
PK_KERNEL(tile_bn_grad_combine) {
    if (ns != 1 || s[0].i < 1 || nt != s[0].i + 4) return PK_EARGS;
    const int k = (int)s[0].i;
    const pk_tensor *is = &t[k], *gw = &t[k + 1], *gb = &t[k + 2], *sums = &t[k + 3];
    if (t[0].ndim != 2) return PK_EARGS;
    const int32_t C = t[0].size[1];
    for (int i = 0; i < k; i++)
        if (!stats_ok(&t[i], 2, C)) return PK_EARGS;
    if (!vec_ok(is, C, 0) || !vec_ok(gw, C, 0) || !vec_ok(gb, C, 0) || !stats_ok(sums, 2, C)) return PK_EARGS;
    for (int32_t c = 0; c < C; c++) {
        double s0 = *at2(&t[0], 0, c), s1 = *at2(&t[0], 1, c);
        for (int i = 1; i < k; i++) {
            s0 = s0 + *at2(&t[i], 0, c);
            s1 = s1 + *at2(&t[i], 1, c);
        }
        *at2(sums, 0, c) = s0;
        *at2(sums, 1, c) = s1;
        vec_set(gw, c, s1 * vec_at(is, c));
        vec_set(gb, c, s0);
    }
    return PK_OK;
}

/* tile_bn_grad_input(go, x, mean, invstd, w | NONE, sums -> gi; count): one tile of the input gradient
   (training mode) from the whole-tensor sums, per element in double as the Python tile kernel */
PK_KERNEL(tile_bn_grad_input) {
    if (nt != 7 || ns != 1) return PK_EARGS;
    const pk_tensor *go = &t[0], *x = &t[1], *mn = &t[2], *is = &t[3], *wt = &t[4], *sums = &t[5], *gi = &t[6];
    if (!nc_ok(go) || !nc_ok(x) || gi->dtype != PK_F32) return PK_EDTYPE;
    const int32_t C = x->size[1];
    const double count = s[0].i > 0 ? (double)s[0].i : 1.0;
    if (!pk_same_shape(go, x) || !pk_same_shape(gi, x) || !vec_ok(mn, C, 0) || !vec_ok(is, C, 0) ||
        !vec_ok(wt, C, 1) || !stats_ok(sums, 2, C) || s[0].i <= 0)
        return PK_EARGS;
    for (int32_t c = 0; c < C; c++) {
        const double inv = vec_at(is, c), m = vec_at(mn, c);
        const double proj = *at2(sums, 1, c) * inv * inv / count, gmean = *at2(sums, 0, c) / count;
        const double wc = wt->dtype == PK_NONE ? 1.0 : vec_at(wt, c);
        const pk_tensor *v[3] = {go, x, gi};
        chan_walk w;
        if (chan_begin(&w, v, 3, c)) do {
                const float *g = chan_row(&w, 0), *p = chan_row(&w, 1);
                float *q = (float *)chan_row(&w, 2);
                for (int32_t j = 0; j < w.len; j++) {
                    const double xmu = (double)p[(int64_t)j * w.inner[1]] - m;
                    double r = ((double)g[(int64_t)j * w.inner[0]] - gmean - xmu * proj) * inv;
                    if (wt->dtype != PK_NONE) r = r * wc;
                    q[(int64_t)j * w.inner[2]] = (float)r;
                }
            } while (chan_next(&w));
    }
    return PK_OK;
}
