/* kernels_zoo_norm.c: BatchNorm in training, ReLU, sums of row sources and the cross-entropy of zoo
   graphs, on row tiles (see kernels_zoo.c and pk_zoo.h for the conventions).

   BatchNorm's statistics chain keeps, per channel, (mean, M2) as two float32: step t merges its
   tile's own mean and M2 (each computed in double, two passes over the tile) into the running pair
   by Chan et al.'s update, the counts implied by the rows covered (B * rows * W), so the chain never
   sums squares of large values (no cancellation) and a node needs exactly 2 floats per channel.
   The backward chain keeps (sum dy, sum dy * xhat), each tile's share summed in double.  Without a
   statistics input (an untiled layer) the kernels compute the same quantities over all rows.

   zoo_bn_stats        prev|NONE, x src, out(C,2)                      | lo, hi, <x>
   zoo_bn              gamma, beta, stats|NONE, x src, y               | lo, H, eps, <x>
   zoo_bn_grad_stats   prev|NONE, fstats, dy src, x src, out(C,2), dgamma|NONE, dbeta|NONE
                                                                       | lo, hi, H, eps, <dy>, <x>
   zoo_bn_grad         gamma, fstats|NONE, bstats|NONE, dy src, x src, dx, dgamma|NONE, dbeta|NONE
                                                                       | lo, H, eps, <dy>, <x>
   zoo_relu            x src, y                                        | lo, <x>
   zoo_relu_grad       y src, dy src, dx                               | lo, <y>, <dy>
   zoo_sum             src, y        (y = the sum of the groups)       | lo, <src>
   zoo_zero            y             (rows no gradient reaches)        |
   zoo_cross_entropy   logits src, labels(int64 B), losses(B), loss|NONE   | K, <logits>
   zoo_cross_entropy_grad  logits src, labels, dlogits                 | lo, K, <logits>

   The loss is the mean over the batch of lse(z) - z[label] (torch's cross_entropy), in double. */
#include <string.h>

#include "pk.h"
#include "pk_math.h"
#include "pk_zoo.h"
#include "pk_zoo_norm.h"

#define TAKE(expr)                     \
    do {                               \
        int take_rc_ = (expr);         \
        if (take_rc_) return take_rc_; \
    } while (0)

static int stats_of(const pk_tensor *st, int32_t c, int optional) {
    if (st->dtype == PK_NONE) return optional ? PK_OK : PK_EARGS;
    if (st->dtype != PK_F32) return PK_EDTYPE;
    return (st->ndim == 2 && st->size[0] == c && st->size[1] == 2 && pk_contiguous(st)) ? PK_OK : PK_EARGS;
}

/* sum and count of channel c of x over rows [lo, hi) (group 0) */
static int channel_mean(const pkz_src *x, int32_t c, int32_t lo, int32_t hi, double *mean) {
    double s = 0.0;
    for (int32_t b = 0; b < x->b; b++)
        for (int32_t r = lo; r < hi; r++) {
            const float *xr = pkz_row(x, 0, b, c, r);
            if (!xr) return PK_EARGS;
            for (int32_t w = 0; w < x->w; w++) s += xr[w];
        }
    const double n = (double)x->b * (hi - lo) * x->w;
    *mean = n > 0 ? s / n : 0.0;
    return PK_OK;
}

static int channel_m2(const pkz_src *x, int32_t c, int32_t lo, int32_t hi, double mean, double *m2) {
    double s = 0.0;
    for (int32_t b = 0; b < x->b; b++)
        for (int32_t r = lo; r < hi; r++) {
            const float *xr = pkz_row(x, 0, b, c, r);
            if (!xr) return PK_EARGS;
            for (int32_t w = 0; w < x->w; w++) {
                const double d = xr[w] - mean;
                s += d * d;
            }
        }
    *m2 = s;
    return PK_OK;
}

/* sum dy and sum dy * xhat of channel c over rows [lo, hi) */
static int channel_grad_sums(const pkz_src *dy, const pkz_src *x, int32_t c, int32_t lo, int32_t hi, double mean,
                             double invstd, double *sdy, double *sdyx) {
    double a = 0.0, bsum = 0.0;
    for (int g = 0; g < dy->ng; g++)
        for (int32_t b = 0; b < x->b; b++)
            for (int32_t r = lo; r < hi; r++) {
                const float *dr = pkz_row(dy, g, b, c, r);
                const float *xr = pkz_row(x, 0, b, c, r);
                if (!dr || !xr) return PK_EARGS;
                for (int32_t w = 0; w < x->w; w++) {
                    a += dr[w];
                    bsum += dr[w] * ((xr[w] - mean) * invstd);
                }
            }
    *sdy = a;
    *sdyx = bsum;
    return PK_OK;
}

PK_KERNEL(zoo_bn_stats) {
    if (nt < 3 || ns < 4) return PK_EARGS;
    const int32_t lo = (int32_t)s[0].i, hi = (int32_t)s[1].i;
    const pk_tensor *prev = &t[0];
    int ti = 1, si = 2;
    pkz_src x;
    TAKE(pkz_src_parse(&x, t, nt, &ti, s, ns, &si));
    if (ti != nt - 1 || si != ns || x.ng != 1 || lo < 0 || hi <= lo) return PK_EARGS;
    const pk_tensor *out = &t[ti];
    TAKE(stats_of(prev, x.c, 1));
    TAKE(stats_of(out, x.c, 0));
    const double na = (double)x.b * lo * x.w, nb = (double)x.b * (hi - lo) * x.w, n = na + nb;
    float *o = (float *)out->data;
    const float *p = prev->dtype == PK_NONE ? 0 : (const float *)prev->data;
    if ((p == 0) != (lo == 0)) return PK_EARGS; /* the chain starts at row 0 and only there */
    for (int32_t c = 0; c < x.c; c++) {
        double mb, m2b;
        TAKE(channel_mean(&x, c, lo, hi, &mb));
        TAKE(channel_m2(&x, c, lo, hi, mb, &m2b));
        if (!p) {
            o[2 * c] = (float)mb;
            o[2 * c + 1] = (float)m2b;
        } else {
            const double ma = p[2 * c], m2a = p[2 * c + 1], delta = mb - ma;
            o[2 * c] = (float)(ma + delta * (nb / n));
            o[2 * c + 1] = (float)(m2a + m2b + delta * delta * (na * nb / n));
        }
    }
    return PK_OK;
}

/* mean and 1/sqrt(var + eps) of channel c: from the final statistics, or over rows [0, H) of x */
static int channel_norm(const pk_tensor *st, const pkz_src *x, int32_t c, int32_t h, double eps, double *mean,
                        double *invstd) {
    const double n = (double)x->b * h * x->w;
    double m, m2;
    if (st->dtype != PK_NONE) {
        m = ((const float *)st->data)[2 * c];
        m2 = ((const float *)st->data)[2 * c + 1];
    } else {
        TAKE(channel_mean(x, c, 0, h, &m));
        TAKE(channel_m2(x, c, 0, h, m, &m2));
    }
    *mean = m;
    *invstd = 1.0 / pk_sqrtd(m2 / n + eps); /* the biased variance, as BatchNorm in training */
    return PK_OK;
}

int pkz_bn_forward_channel(const pk_tensor *st, const pkz_src *x, const pk_tensor *y, int32_t c, int32_t lo,
                           int32_t h, double eps, float gamma, float beta) {
    double mean, invstd;
    TAKE(channel_norm(st, x, c, h, eps, &mean, &invstd));
    const float m = (float)mean, is = (float)invstd;
    for (int32_t b = 0; b < x->b; b++)
        for (int32_t r = 0; r < y->size[2]; r++) {
            const float *xr = pkz_row(x, 0, b, c, lo + r);
            if (!xr) return PK_EARGS;
            float *yr = pkz_at(y, b, c, r);
            for (int32_t w = 0; w < x->w; w++) yr[w] = (xr[w] - m) * is * gamma + beta;
        }
    return PK_OK;
}

int pkz_bn_check(const pk_tensor *st, const pkz_src *x, const pk_tensor *y) {
    TAKE(stats_of(st, x->c, 1));
    return pkz_out4(y, x->b, x->c, x->w);
}

PK_KERNEL(zoo_bn) {
    if (nt < 5 || ns < 5) return PK_EARGS;
    const pk_tensor *gamma = &t[0], *beta = &t[1], *st = &t[2];
    const int32_t lo = (int32_t)s[0].i, h = (int32_t)s[1].i;
    const double eps = s[2].f;
    int ti = 3, si = 3;
    pkz_src x;
    TAKE(pkz_src_parse(&x, t, nt, &ti, s, ns, &si));
    if (ti != nt - 1 || si != ns || x.ng != 1 || h < 1) return PK_EARGS;
    const pk_tensor *y = &t[ti];
    TAKE(pkz_vec(gamma, x.c, 0));
    TAKE(pkz_vec(beta, x.c, 0));
    TAKE(pkz_bn_check(st, &x, y));
    const float *gv = (const float *)gamma->data, *bv = (const float *)beta->data;
    for (int32_t c = 0; c < x.c; c++) TAKE(pkz_bn_forward_channel(st, &x, y, c, lo, h, eps, gv[c], bv[c]));
    return PK_OK;
}

static int param_grads(const pk_tensor *dgamma, const pk_tensor *dbeta, int32_t c) {
    TAKE(pkz_vec(dgamma, c, 1));
    TAKE(pkz_vec(dbeta, c, 1));
    return (dgamma->dtype == PK_NONE) == (dbeta->dtype == PK_NONE) ? PK_OK : PK_EARGS;
}

int pkz_bn_tile_sums(const pk_tensor *fst, const pkz_src *dy, const pkz_src *x, int32_t c, int32_t lo, int32_t hi,
                     int32_t h, double eps, double *sdy, double *sdyx) {
    double mean, invstd;
    TAKE(channel_norm(fst, x, c, h, eps, &mean, &invstd));
    return channel_grad_sums(dy, x, c, lo, hi, (float)mean, (float)invstd, sdy, sdyx);
}

PK_KERNEL(zoo_bn_grad_stats) {
    if (nt < 7 || ns < 6) return PK_EARGS;
    const pk_tensor *prev = &t[0], *fst = &t[1];
    const int32_t lo = (int32_t)s[0].i, hi = (int32_t)s[1].i, h = (int32_t)s[2].i;
    const double eps = s[3].f;
    int ti = 2, si = 4;
    pkz_src dy, x;
    TAKE(pkz_src_parse(&dy, t, nt, &ti, s, ns, &si));
    TAKE(pkz_src_parse(&x, t, nt, &ti, s, ns, &si));
    if (ti != nt - 3 || si != ns || x.ng != 1 || dy.c != x.c || dy.b != x.b || dy.w != x.w) return PK_EARGS;
    const pk_tensor *out = &t[ti], *dgamma = &t[ti + 1], *dbeta = &t[ti + 2];
    TAKE(stats_of(prev, x.c, 1));
    TAKE(stats_of(fst, x.c, 0));
    TAKE(stats_of(out, x.c, 0));
    TAKE(param_grads(dgamma, dbeta, x.c));
    const float *p = prev->dtype == PK_NONE ? 0 : (const float *)prev->data;
    if ((p == 0) != (lo == 0)) return PK_EARGS;
    float *o = (float *)out->data;
    for (int32_t c = 0; c < x.c; c++) {
        double sdy, sdyx;
        TAKE(pkz_bn_tile_sums(fst, &dy, &x, c, lo, hi, h, eps, &sdy, &sdyx));
        const float a = p ? (float)(p[2 * c] + sdy) : (float)sdy;
        const float b = p ? (float)(p[2 * c + 1] + sdyx) : (float)sdyx;
        o[2 * c] = a;
        o[2 * c + 1] = b;
        if (dgamma->dtype != PK_NONE) {
            ((float *)dgamma->data)[c] = b;
            ((float *)dbeta->data)[c] = a;
        }
    }
    return PK_OK;
}

int pkz_bn_grad_channel(const pk_tensor *fst, const pk_tensor *bst, const pkz_src *dy, const pkz_src *x,
                        const pk_tensor *dx, int32_t c, int32_t lo, int32_t h, double eps, float gamma, double *sdy,
                        double *sdyx) {
    double mean, invstd;
    TAKE(channel_norm(fst, x, c, h, eps, &mean, &invstd));
    const float m = (float)mean, is = (float)invstd;
    if (bst->dtype != PK_NONE) {
        *sdy = ((const float *)bst->data)[2 * c];
        *sdyx = ((const float *)bst->data)[2 * c + 1];
    } else {
        TAKE(channel_grad_sums(dy, x, c, 0, h, m, is, sdy, sdyx));
    }
    if (dx->dtype == PK_NONE) return PK_OK;
    const double n = (double)x->b * h * x->w;
    const float k = gamma * is, mdy = (float)(*sdy / n), mdyx = (float)(*sdyx / n);
    for (int32_t b = 0; b < x->b; b++)
        for (int32_t r = 0; r < dx->size[2]; r++) {
            const float *xr = pkz_row(x, 0, b, c, lo + r);
            if (!xr) return PK_EARGS;
            float *dxr = pkz_at(dx, b, c, r);
            for (int g = 0; g < dy->ng; g++) { /* dx holds dy (the sum of the groups) first */
                const float *dr = pkz_row(dy, g, b, c, lo + r);
                if (!dr) return PK_EARGS;
                for (int32_t w = 0; w < x->w; w++) dxr[w] = g ? dxr[w] + dr[w] : dr[w];
            }
            for (int32_t w = 0; w < x->w; w++) dxr[w] = k * (dxr[w] - mdy - (xr[w] - m) * is * mdyx);
        }
    return PK_OK;
}

int pkz_bn_grad_check(const pk_tensor *fst, const pk_tensor *bst, const pkz_src *dy, const pkz_src *x,
                      const pk_tensor *dx) {
    TAKE(stats_of(fst, x->c, 1));
    TAKE(stats_of(bst, x->c, 1));
    if (dy->c != x->c || dy->b != x->b || dy->w != x->w) return PK_EARGS;
    return dx->dtype != PK_NONE ? pkz_out4(dx, x->b, x->c, x->w) : PK_OK;
}

PK_KERNEL(zoo_bn_grad) {
    if (nt < 8 || ns < 5) return PK_EARGS;
    const pk_tensor *gamma = &t[0], *fst = &t[1], *bst = &t[2];
    const int32_t lo = (int32_t)s[0].i, h = (int32_t)s[1].i;
    const double eps = s[2].f;
    int ti = 3, si = 3;
    pkz_src dy, x;
    TAKE(pkz_src_parse(&dy, t, nt, &ti, s, ns, &si));
    TAKE(pkz_src_parse(&x, t, nt, &ti, s, ns, &si));
    if (ti != nt - 3 || si != ns || x.ng != 1 || dy.c != x.c || dy.b != x.b || dy.w != x.w || h < 1) return PK_EARGS;
    const pk_tensor *dx = &t[ti], *dgamma = &t[ti + 1], *dbeta = &t[ti + 2];
    TAKE(pkz_vec(gamma, x.c, 0));
    TAKE(pkz_bn_grad_check(fst, bst, &dy, &x, dx));
    TAKE(param_grads(dgamma, dbeta, x.c));
    const float *gv = (const float *)gamma->data;
    for (int32_t c = 0; c < x.c; c++) {
        double sdy, sdyx;
        TAKE(pkz_bn_grad_channel(fst, bst, &dy, &x, dx, c, lo, h, eps, gv[c], &sdy, &sdyx));
        if (dgamma->dtype != PK_NONE) {
            ((float *)dgamma->data)[c] = (float)sdyx;
            ((float *)dbeta->data)[c] = (float)sdy;
        }
    }
    return PK_OK;
}

/* ------------------------------------------------------------------ element by element */

PK_KERNEL(zoo_relu) {
    if (nt < 2 || ns < 3) return PK_EARGS;
    const int32_t lo = (int32_t)s[0].i;
    int ti = 0, si = 1;
    pkz_src x;
    TAKE(pkz_src_parse(&x, t, nt, &ti, s, ns, &si));
    if (ti != nt - 1 || si != ns || x.ng != 1) return PK_EARGS;
    const pk_tensor *y = &t[ti];
    TAKE(pkz_out4(y, x.b, x.c, x.w));
    for (int32_t b = 0; b < x.b; b++)
        for (int32_t c = 0; c < x.c; c++)
            for (int32_t r = 0; r < y->size[2]; r++) {
                const float *xr = pkz_row(&x, 0, b, c, lo + r);
                if (!xr) return PK_EARGS;
                float *yr = pkz_at(y, b, c, r);
                for (int32_t w = 0; w < x.w; w++) yr[w] = xr[w] > 0.0f || xr[w] != xr[w] ? xr[w] : 0.0f;
            }
    return PK_OK;
}

PK_KERNEL(zoo_relu_grad) {
    if (nt < 3 || ns < 5) return PK_EARGS;
    const int32_t lo = (int32_t)s[0].i;
    int ti = 0, si = 1;
    pkz_src y, dy;
    TAKE(pkz_src_parse(&y, t, nt, &ti, s, ns, &si));
    TAKE(pkz_src_parse(&dy, t, nt, &ti, s, ns, &si));
    if (ti != nt - 1 || si != ns || y.ng != 1 || y.b != dy.b || y.c != dy.c || y.w != dy.w) return PK_EARGS;
    const pk_tensor *dx = &t[ti];
    TAKE(pkz_out4(dx, y.b, y.c, y.w));
    for (int32_t b = 0; b < y.b; b++)
        for (int32_t c = 0; c < y.c; c++)
            for (int32_t r = 0; r < dx->size[2]; r++) {
                const float *yr = pkz_row(&y, 0, b, c, lo + r);
                if (!yr) return PK_EARGS;
                float *dxr = pkz_at(dx, b, c, r);
                for (int32_t w = 0; w < y.w; w++) dxr[w] = 0.0f;
                for (int g = 0; g < dy.ng; g++) {
                    const float *dr = pkz_row(&dy, g, b, c, lo + r);
                    if (!dr) return PK_EARGS;
                    for (int32_t w = 0; w < y.w; w++)
                        if (yr[w] > 0.0f) dxr[w] += dr[w]; /* threshold_backward: the gradient where y > 0 */
                }
            }
    return PK_OK;
}

PK_KERNEL(zoo_sum) {
    if (nt < 2 || ns < 3) return PK_EARGS;
    const int32_t lo = (int32_t)s[0].i;
    int ti = 0, si = 1;
    pkz_src x;
    TAKE(pkz_src_parse(&x, t, nt, &ti, s, ns, &si));
    if (ti != nt - 1 || si != ns) return PK_EARGS;
    const pk_tensor *y = &t[ti];
    TAKE(pkz_out4(y, x.b, x.c, x.w));
    for (int32_t b = 0; b < x.b; b++)
        for (int32_t c = 0; c < x.c; c++)
            for (int32_t r = 0; r < y->size[2]; r++) {
                float *yr = pkz_at(y, b, c, r);
                for (int g = 0; g < x.ng; g++) {
                    const float *xr = pkz_row(&x, g, b, c, lo + r);
                    if (!xr) return PK_EARGS;
                    for (int32_t w = 0; w < x.w; w++) yr[w] = g ? yr[w] + xr[w] : xr[w];
                }
            }
    return PK_OK;
}

/* rows no gradient reaches (the input rows a strided window skips) */
PK_KERNEL(zoo_zero) {
    (void)s;
    if (nt != 1 || ns != 0) return PK_EARGS;
    const pk_tensor *y = &t[0];
    if (y->dtype != PK_F32) return PK_EDTYPE;
    if (y->ndim != 4) return PK_EARGS;
    TAKE(pkz_out4(y, y->size[0], y->size[1], y->size[3]));
    for (int32_t b = 0; b < y->size[0]; b++)
        for (int32_t c = 0; c < y->size[1]; c++)
            for (int32_t r = 0; r < y->size[2]; r++) memset(pkz_at(y, b, c, r), 0, (size_t)y->size[3] * sizeof(float));
    return PK_OK;
}

/* ------------------------------------------------------------------ cross-entropy */

static int labels_of(const pk_tensor *l, int32_t b) {
    if (l->dtype != PK_I64) return PK_EDTYPE;
    return (l->ndim == 1 && l->size[0] == b) ? PK_OK : PK_EARGS;
}

/* log-sum-exp of sample b's logits (rows [0, k) of group 0) and its label's logit, in double */
static int sample_lse(const pkz_src *z, int32_t b, int32_t k, int64_t label, double *lse, double *zl) {
    double m = -pk_inf();
    for (int32_t j = 0; j < k; j++) {
        const float *v = pkz_row(z, 0, b, 0, j);
        if (!v) return PK_EARGS;
        if (v[0] > m) m = v[0];
    }
    double s = 0.0;
    for (int32_t j = 0; j < k; j++) s += pk_expd(pkz_row(z, 0, b, 0, j)[0] - m);
    *lse = m + pk_logd(s);
    *zl = pkz_row(z, 0, b, 0, (int32_t)label)[0];
    return PK_OK;
}

PK_KERNEL(zoo_cross_entropy) {
    if (nt < 4 || ns < 4) return PK_EARGS;
    const int32_t k = (int32_t)s[0].i;
    int ti = 0, si = 1;
    pkz_src z;
    TAKE(pkz_src_parse(&z, t, nt, &ti, s, ns, &si));
    if (ti != nt - 3 || si != ns || z.ng != 1 || z.c != 1 || z.w != 1 || k < 1) return PK_EARGS;
    const pk_tensor *labels = &t[ti], *losses = &t[ti + 1], *loss = &t[ti + 2];
    TAKE(labels_of(labels, z.b));
    TAKE(pkz_vec(losses, z.b, 0));
    TAKE(pkz_vec(loss, 1, 1));
    const int64_t *lab = (const int64_t *)labels->data;
    double total = 0.0;
    for (int32_t b = 0; b < z.b; b++) {
        const int64_t l = lab[(int64_t)b * labels->stride[0]];
        if (l < 0 || l >= k) return PK_EARGS; /* a label outside the classes */
        double lse, zl;
        TAKE(sample_lse(&z, b, k, l, &lse, &zl));
        ((float *)losses->data)[b] = (float)(lse - zl);
        total += lse - zl;
    }
    if (loss->dtype != PK_NONE) ((float *)loss->data)[0] = (float)(total / z.b);
    return PK_OK;
}

PK_KERNEL(zoo_cross_entropy_grad) {
    if (nt < 3 || ns < 5) return PK_EARGS;
    const int32_t lo = (int32_t)s[0].i, k = (int32_t)s[1].i;
    int ti = 0, si = 2;
    pkz_src z;
    TAKE(pkz_src_parse(&z, t, nt, &ti, s, ns, &si));
    if (ti != nt - 2 || si != ns || z.ng != 1 || z.c != 1 || z.w != 1 || k < 1) return PK_EARGS;
    const pk_tensor *labels = &t[ti], *dz = &t[ti + 1];
    TAKE(labels_of(labels, z.b));
    TAKE(pkz_out4(dz, z.b, 1, 1));
    if (lo < 0 || lo + dz->size[2] > k) return PK_EARGS;
    const int64_t *lab = (const int64_t *)labels->data;
    for (int32_t b = 0; b < z.b; b++) {
        const int64_t l = lab[(int64_t)b * labels->stride[0]];
        if (l < 0 || l >= k) return PK_EARGS;
        double lse, zl;
        TAKE(sample_lse(&z, b, k, l, &lse, &zl));
        for (int32_t r = 0; r < dz->size[2]; r++) {
            const int32_t j = lo + r;
            const double p = pk_expd(pkz_row(&z, 0, b, 0, j)[0] - lse);
            pkz_at(dz, b, 0, r)[0] = (float)((p - (j == l ? 1.0 : 0.0)) / z.b);
        }
    }
    return PK_OK;
}
