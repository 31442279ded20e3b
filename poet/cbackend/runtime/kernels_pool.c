/* Max and average pooling (2-d, of (N, C, H, W) or (C, H, W) views), their gradients and their tile
   kernels (specs: poet/cbackend/ops_pool.py).  The loops are aten's CPU loops (window clipping,
   first maximum wins, NaN propagates, sums row by row in float), so results equal torch's bit for bit.

   Rows come from a row source as in kernels_conv.c: `top` extra rows, the pieces' rows, `bottom`
   extra rows; extra rows read as -inf (max) or 0 (average), as the Python tile kernels pad them. */
#include "pk.h"
#include "pk_dense.h"

typedef struct {
    const pk_tensor *piece;
    int k;
    int32_t top, rows, w;
} rows_t;

typedef struct {
    int32_t kh, kw, sh, sw, ph, pw, dh, dw;
} win_t;

/* x as (N, C, H, W): a 3-d (C, H, W) view gets N = 1 */
static void as4(const pk_tensor *x, pk_tensor *v) {
    *v = *x;
    if (x->ndim == 3) {
        v->ndim = 4;
        for (int d = 3; d > 0; d--) v->size[d] = x->size[d - 1], v->stride[d] = x->stride[d - 1];
        v->size[0] = 1, v->stride[0] = 0;
    }
}

/* pieces p[0..k) as 4-d views into v[0..k) (k <= 1 unless already 4-d) */
static int rows_init(rows_t *r, pk_tensor *v, const pk_tensor *p, int k, int32_t top, int32_t bottom) {
    if (k < 1 || top < 0 || bottom < 0) return 0;
    r->piece = v, r->k = k, r->top = top, r->rows = top + bottom;
    for (int i = 0; i < k; i++) {
        if (p[i].dtype != PK_F32 || (p[i].ndim != 4 && (p[i].ndim != 3 || k != 1))) return 0;
        as4(&p[i], &v[i]);
        if (i && (v[i].size[0] != v[0].size[0] || v[i].size[1] != v[0].size[1] || v[i].size[3] != v[0].size[3]))
            return 0;
        r->rows += v[i].size[2];
    }
    r->w = v[0].size[3];
    return 1;
}

static const float *row_at(const rows_t *r, int32_t n, int32_t c, int32_t i, int32_t *ws) {
    i -= r->top;
    if (i < 0) return 0;
    for (int j = 0; j < r->k; j++) {
        const pk_tensor *p = &r->piece[j];
        if (i < p->size[2]) {
            *ws = p->stride[3];
            return (const float *)p->data + (int64_t)n * p->stride[0] + (int64_t)c * p->stride[1] + (int64_t)i * p->stride[2];
        }
        i -= p->size[2];
    }
    return 0;
}

/* output size of a pooled dimension (aten's pooling_output_shape) */
static int32_t pooled(int32_t in, int32_t k, int32_t pad, int32_t stride, int32_t dil, int ceil_mode) {
    int64_t num = (int64_t)in + 2 * pad - (int64_t)dil * (k - 1) - 1 + (ceil_mode ? stride - 1 : 0);
    if (num < 0) return -1;
    int32_t out = (int32_t)(num / stride) + 1;
    if (ceil_mode && (int64_t)(out - 1) * stride >= (int64_t)in + pad) out--;
    return out;
}

static int win_ok(const win_t *g) {
    return g->kh > 0 && g->kw > 0 && g->sh > 0 && g->sw > 0 && g->dh > 0 && g->dw > 0 && g->ph >= 0 && g->pw >= 0 &&
           g->ph <= g->kh / 2 && g->pw <= g->kw / 2;
}

static void get_win(const pk_scalar *s, win_t *g) {
    g->kh = (int32_t)s[0].i, g->kw = (int32_t)s[1].i, g->sh = (int32_t)s[2].i, g->sw = (int32_t)s[3].i;
    g->ph = (int32_t)s[4].i, g->pw = (int32_t)s[5].i, g->dh = (int32_t)s[6].i, g->dw = (int32_t)s[7].i;
}

/* y (N, C, OH, OW) and idx: the maxima of the windows over rows r; index (row + start) * W + col */
static int max_pool(const rows_t *r, const pk_tensor *y, const pk_tensor *ix, const win_t *g, int ceil_mode,
                    int64_t start) {
    pk_tensor yv, iv;
    as4(y, &yv), as4(ix, &iv);
    const int32_t n_n = r->piece[0].size[0], c_n = r->piece[0].size[1], oh_n = yv.size[2], ow_n = yv.size[3];
    if (yv.dtype != PK_F32 || iv.dtype != PK_I64) return PK_EDTYPE;
    if (!win_ok(g) || !pk_same_shape(&yv, &iv) || yv.size[0] != n_n || yv.size[1] != c_n) return PK_EARGS;
    if (oh_n != pooled(r->rows, g->kh, g->ph, g->sh, g->dh, ceil_mode) ||
        ow_n != pooled(r->w, g->kw, g->pw, g->sw, g->dw, ceil_mode))
        return PK_EARGS;
    const float ninf = -__builtin_inff();
    for (int32_t n = 0; n < n_n; n++)
        for (int32_t c = 0; c < c_n; c++)
            for (int32_t oh = 0; oh < oh_n; oh++) {
                int32_t h0 = oh * g->sh - g->ph;
                const int32_t h1 = h0 + (g->kh - 1) * g->dh + 1 < r->rows ? h0 + (g->kh - 1) * g->dh + 1 : r->rows;
                while (h0 < 0) h0 += g->dh;
                for (int32_t ow = 0; ow < ow_n; ow++) {
                    int32_t w0 = ow * g->sw - g->pw;
                    const int32_t w1 = w0 + (g->kw - 1) * g->dw + 1 < r->w ? w0 + (g->kw - 1) * g->dw + 1 : r->w;
                    while (w0 < 0) w0 += g->dw;
                    float best = ninf;
                    int64_t at = (h0 + start) * r->w + w0;
                    for (int32_t h = h0; h < h1; h += g->dh) {
                        int32_t ws;
                        const float *xr = row_at(r, n, c, h, &ws);
                        for (int32_t w = w0; w < w1; w += g->dw) {
                            const float v = xr ? xr[(int64_t)w * ws] : ninf;
                            if (v > best || v != v) {
                                best = v;
                                at = (h + start) * r->w + w;
                            }
                        }
                    }
                    const int64_t yo = (int64_t)n * yv.stride[0] + (int64_t)c * yv.stride[1] + (int64_t)oh * yv.stride[2] +
                                       (int64_t)ow * yv.stride[3];
                    const int64_t io = (int64_t)n * iv.stride[0] + (int64_t)c * iv.stride[1] + (int64_t)oh * iv.stride[2] +
                                       (int64_t)ow * iv.stride[3];
                    ((float *)yv.data)[yo] = best;
                    ((int64_t *)iv.data)[io] = at;
                }
            }
    return PK_OK;
}

/* max_pool2d(x -> y, indices; kh, kw, sh, sw, ph, pw, dh, dw, ceil_mode) */
PK_KERNEL(max_pool2d) {
    if (nt != 3 || ns != 9) return PK_EARGS;
    win_t g;
    get_win(s, &g);
    pk_tensor v;
    rows_t r;
    if (!rows_init(&r, &v, &t[0], 1, 0, 0)) return t[0].dtype != PK_F32 ? PK_EDTYPE : PK_EARGS;
    return max_pool(&r, &t[1], &t[2], &g, s[8].i != 0, 0);
}

/* gi (N, C, rows, W) += go at the positions indices name, for indices in [lo, hi): position - lo */
static int max_pool_scatter(const pk_tensor *go, const pk_tensor *ix, const pk_tensor *gi, int64_t lo, int64_t hi) {
    pk_tensor gv, iv, gov;
    as4(go, &gov), as4(ix, &iv), as4(gi, &gv);
    if (gov.dtype != PK_F32 || iv.dtype != PK_I64 || gv.dtype != PK_F32) return PK_EDTYPE;
    if (!pk_same_shape(&gov, &iv) || gov.size[0] != gv.size[0] || gov.size[1] != gv.size[1]) return PK_EARGS;
    const int32_t w = gv.size[3];
    for (int32_t n = 0; n < gov.size[0]; n++)
        for (int32_t c = 0; c < gov.size[1]; c++)
            for (int32_t oh = 0; oh < gov.size[2]; oh++)
                for (int32_t ow = 0; ow < gov.size[3]; ow++) {
                    const int64_t at = ((const int64_t *)iv.data)[(int64_t)n * iv.stride[0] + (int64_t)c * iv.stride[1] +
                                                                  (int64_t)oh * iv.stride[2] + (int64_t)ow * iv.stride[3]];
                    if (at < lo || at >= hi) continue;
                    const int64_t p = at - lo;
                    float *dst = (float *)gv.data + (int64_t)n * gv.stride[0] + (int64_t)c * gv.stride[1] +
                                 (p / w) * gv.stride[2] + (p % w) * gv.stride[3];
                    *dst += ((const float *)gov.data)[(int64_t)n * gov.stride[0] + (int64_t)c * gov.stride[1] +
                                                      (int64_t)oh * gov.stride[2] + (int64_t)ow * gov.stride[3]];
                }
    return PK_OK;
}

/* max_pool2d_backward(go, indices -> gi): each output's gradient added at its maximum's position.
   An index outside the input is an error (before anything is written). */
PK_KERNEL(max_pool2d_backward) {
    (void)s;
    if (nt != 3 || ns != 0) return PK_EARGS;
    pk_tensor gv, iv;
    as4(&t[2], &gv), as4(&t[1], &iv);
    if (gv.ndim != 4 || iv.ndim != 4 || iv.dtype != PK_I64) return PK_EARGS;
    const int64_t plane = (int64_t)gv.size[2] * gv.size[3];
    pk_rows r;
    int64_t off[1] = {0};
    const int32_t *st[1] = {iv.stride};
    if (pk_numel(&iv) && pk_rows_init(&r, &iv, 3)) do {
            for (int32_t j = 0; j < iv.size[3]; j++) {
                const int64_t at = ((const int64_t *)iv.data)[off[0] + (int64_t)j * iv.stride[3]];
                if (at < 0 || at >= plane) return PK_EARGS;
            }
        } while (pk_rows_next(&r, st, 1, off));
    pk_zero_view(&t[2]);
    return max_pool_scatter(&t[0], &t[1], &t[2], 0, plane);
}

/* the average of each window of rows r: aten's clipping and divisor (count_include_pad counts the
   padding inside the padded extent; divisor > 0 overrides) */
static void avg_window(int32_t o, int32_t stride, int32_t pad, int32_t k, int32_t in, int32_t *a, int32_t *b,
                       int32_t *padded) {
    int32_t lo = o * stride - pad, hi = lo + k < in + pad ? lo + k : in + pad;
    *padded = hi - lo;
    *a = lo < 0 ? 0 : lo;
    *b = hi < in ? hi : in;
}

static int avg_pool(const rows_t *r, const pk_tensor *y, const win_t *g, int ceil_mode, int include_pad, int64_t div) {
    pk_tensor yv;
    as4(y, &yv);
    if (yv.dtype != PK_F32) return PK_EDTYPE;
    if (!win_ok(g) || g->dh != 1 || g->dw != 1 || yv.size[0] != r->piece[0].size[0] || yv.size[1] != r->piece[0].size[1])
        return PK_EARGS;
    if (yv.size[2] != pooled(r->rows, g->kh, g->ph, g->sh, 1, ceil_mode) ||
        yv.size[3] != pooled(r->w, g->kw, g->pw, g->sw, 1, ceil_mode))
        return PK_EARGS;
    for (int32_t n = 0; n < yv.size[0]; n++)
        for (int32_t c = 0; c < yv.size[1]; c++)
            for (int32_t oh = 0; oh < yv.size[2]; oh++) {
                int32_t h0, h1, ph_n;
                avg_window(oh, g->sh, g->ph, g->kh, r->rows, &h0, &h1, &ph_n);
                for (int32_t ow = 0; ow < yv.size[3]; ow++) {
                    int32_t w0, w1, pw_n;
                    avg_window(ow, g->sw, g->pw, g->kw, r->w, &w0, &w1, &pw_n);
                    float out = 0.0f;
                    if (h0 < h1 && w0 < w1) {
                        float sum = 0.0f;
                        for (int32_t h = h0; h < h1; h++) {
                            int32_t ws;
                            const float *xr = row_at(r, n, c, h, &ws);
                            if (xr)
                                for (int32_t w = w0; w < w1; w++) sum += xr[(int64_t)w * ws];
                        }
                        const int64_t f = div > 0 ? div : include_pad ? (int64_t)ph_n * pw_n : (int64_t)(h1 - h0) * (w1 - w0);
                        out = sum / (float)f;
                    }
                    ((float *)yv.data)[(int64_t)n * yv.stride[0] + (int64_t)c * yv.stride[1] + (int64_t)oh * yv.stride[2] +
                                       (int64_t)ow * yv.stride[3]] = out;
                }
            }
    return PK_OK;
}

/* avg_pool2d(x -> y; kh, kw, sh, sw, ph, pw, ceil_mode, count_include_pad, divisor (0: none)) */
PK_KERNEL(avg_pool2d) {
    if (nt != 2 || ns != 9) return PK_EARGS;
    const win_t g = {(int32_t)s[0].i, (int32_t)s[1].i, (int32_t)s[2].i, (int32_t)s[3].i, (int32_t)s[4].i, (int32_t)s[5].i, 1, 1};
    pk_tensor v;
    rows_t r;
    if (!rows_init(&r, &v, &t[0], 1, 0, 0)) return t[0].dtype != PK_F32 ? PK_EDTYPE : PK_EARGS;
    return avg_pool(&r, &t[1], &g, s[6].i != 0, s[7].i != 0, s[8].i);
}

/* gi rows (row + base) += each output's gradient / divisor over its window: go holds output rows
   first .. first + rows(go) of pooling an input of `rows` rows (aten's avg_pool2d_backward; base places
   a region's rows in a tile, first a piece's rows among the region's outputs) */
static int avg_pool_grad(const pk_tensor *go, const pk_tensor *gi, int32_t rows, int32_t first, int32_t base,
                         const win_t *g, int ceil_mode, int include_pad, int64_t div) {
    pk_tensor gv, ov;
    as4(go, &ov), as4(gi, &gv);
    if (ov.dtype != PK_F32 || gv.dtype != PK_F32) return PK_EDTYPE;
    const int32_t w_n = gv.size[3];
    if (!win_ok(g) || ov.size[0] != gv.size[0] || ov.size[1] != gv.size[1] || ov.size[3] != pooled(w_n, g->kw, g->pw, g->sw, 1, ceil_mode))
        return PK_EARGS;
    for (int32_t n = 0; n < ov.size[0]; n++)
        for (int32_t c = 0; c < ov.size[1]; c++)
            for (int32_t oh = 0; oh < ov.size[2]; oh++) {
                int32_t h0, h1, ph_n;
                avg_window(oh + first, g->sh, g->ph, g->kh, rows, &h0, &h1, &ph_n);
                for (int32_t ow = 0; ow < ov.size[3]; ow++) {
                    int32_t w0, w1, pw_n;
                    avg_window(ow, g->sw, g->pw, g->kw, w_n, &w0, &w1, &pw_n);
                    if (h0 >= h1 || w0 >= w1) continue;
                    const int64_t f = div > 0 ? div : include_pad ? (int64_t)ph_n * pw_n : (int64_t)(h1 - h0) * (w1 - w0);
                    const float d = ((const float *)ov.data)[(int64_t)n * ov.stride[0] + (int64_t)c * ov.stride[1] +
                                                             (int64_t)oh * ov.stride[2] + (int64_t)ow * ov.stride[3]] /
                                    (float)f;
                    for (int32_t h = h0; h < h1; h++) {
                        const int32_t gr = h + base;
                        if (gr < 0 || gr >= gv.size[2]) continue;
                        float *dst = (float *)gv.data + (int64_t)n * gv.stride[0] + (int64_t)c * gv.stride[1] + (int64_t)gr * gv.stride[2];
                        for (int32_t w = w0; w < w1; w++) dst[(int64_t)w * gv.stride[3]] += d;
                    }
                }
            }
    return PK_OK;
}

/* avg_pool2d_backward(go -> gi; kh, kw, sh, sw, ph, pw, ceil_mode, count_include_pad, divisor) */
PK_KERNEL(avg_pool2d_backward) {
    if (nt != 2 || ns != 9) return PK_EARGS;
    const win_t g = {(int32_t)s[0].i, (int32_t)s[1].i, (int32_t)s[2].i, (int32_t)s[3].i, (int32_t)s[4].i, (int32_t)s[5].i, 1, 1};
    pk_tensor gv;
    as4(&t[1], &gv);
    if (gv.ndim != 4) return PK_EARGS;
    if (gv.dtype != PK_F32) return PK_EDTYPE;
    pk_tensor ov;
    as4(&t[0], &ov);
    if (ov.ndim != 4 || ov.size[2] != pooled(gv.size[2], g.kh, g.ph, g.sh, 1, s[6].i != 0)) return PK_EARGS;
    pk_zero_view(&t[1]);
    return avg_pool_grad(&t[0], &t[1], gv.size[2], 0, 0, &g, s[6].i != 0, s[7].i != 0, s[8].i);
}

/* ------------------------------------------------------------------ tile kernels (poet/execute/tiled_ops.py) */

/* tile_max_pool(piece_0 .. piece_{k-1} -> y, indices; k, top, bottom, start, kh, kw, sh, sw, pw, dh, dw):
   output rows of max pooling from the rows under them (top/bottom rows of -inf at the border);
   indices are of the whole input: (row + start) * W + column, start the row of the first (padding) row */
PK_KERNEL(tile_max_pool) {
    if (ns != 11 || s[0].i < 1 || s[0].i > 8 || nt != s[0].i + 2) return PK_EARGS;
    const int k = (int)s[0].i;
    pk_tensor v[8];
    rows_t r;
    if (!rows_init(&r, v, t, k, (int32_t)s[1].i, (int32_t)s[2].i)) return PK_EARGS;
    const win_t g = {(int32_t)s[4].i, (int32_t)s[5].i, (int32_t)s[6].i, (int32_t)s[7].i, 0, (int32_t)s[8].i,
                     (int32_t)s[9].i, (int32_t)s[10].i};
    return max_pool(&r, &t[k], &t[k + 1], &g, 0, s[3].i);
}

/* tile_max_pool_grad(go_0 .. go_{k-1}, idx_0 .. idx_{k-1} -> gi; k, a, b): rows [a, b) of max pooling's
   input gradient from the output rows whose windows reach them (k = 0: none does) */
PK_KERNEL(tile_max_pool_grad) {
    if (ns != 3 || s[0].i < 0 || nt != 2 * s[0].i + 1) return PK_EARGS;
    const int k = (int)s[0].i;
    const pk_tensor *gi = &t[2 * k];
    if (gi->dtype != PK_F32) return PK_EDTYPE;
    if (gi->ndim != 4 || gi->size[2] != s[2].i - s[1].i) return PK_EARGS;
    pk_zero_view((pk_tensor *)gi);
    const int64_t w = gi->size[3], lo = s[1].i * w, hi = s[2].i * w;
    for (int i = 0; i < k; i++) {
        int rc = max_pool_scatter(&t[i], &t[k + i], gi, lo, hi);
        if (rc != PK_OK) return rc;
    }
    return PK_OK;
}

/* tile_avg_pool(piece_0 .. piece_{k-1} -> y; k, top, bottom, kh, kw, sh, sw, pw, count_include_pad, divisor):
   output rows of average pooling (top/bottom rows of zeros at the border, counted as rows) */
PK_KERNEL(tile_avg_pool) {
    if (ns != 10 || s[0].i < 1 || s[0].i > 8 || nt != s[0].i + 1) return PK_EARGS;
    const int k = (int)s[0].i;
    pk_tensor v[8];
    rows_t r;
    if (!rows_init(&r, v, t, k, (int32_t)s[1].i, (int32_t)s[2].i)) return PK_EARGS;
    const win_t g = {(int32_t)s[3].i, (int32_t)s[4].i, (int32_t)s[5].i, (int32_t)s[6].i, 0, (int32_t)s[7].i, 1, 1};
    return avg_pool(&r, &t[k], &g, 0, s[8].i != 0, s[9].i);
}

/* tile_avg_pool_grad(go_0 .. go_{k-1} -> gi; k, region_start, region_rows, a, b, kh, kw, sh, sw, pw,
   count_include_pad, divisor): rows [a, b) of average pooling's input gradient; the output rows' windows
   cover region_rows input rows from region_start (k = 0: none reaches the tile) */
PK_KERNEL(tile_avg_pool_grad) {
    if (ns != 12 || s[0].i < 0 || s[0].i > 8 || nt != s[0].i + 1) return PK_EARGS;
    const int k = (int)s[0].i;
    const pk_tensor *gi = &t[k];
    if (gi->dtype != PK_F32) return PK_EDTYPE;
    if (gi->ndim != 4 || gi->size[2] != s[4].i - s[3].i) return PK_EARGS;
    pk_zero_view((pk_tensor *)gi);
    if (k == 0) return PK_OK;
    const win_t g = {(int32_t)s[5].i, (int32_t)s[6].i, (int32_t)s[7].i, (int32_t)s[8].i, 0, (int32_t)s[9].i, 1, 1};
    /* the pieces are consecutive output rows of pooling the region (region_rows rows, no height padding) */
    const int32_t region_rows = (int32_t)s[2].i, base = (int32_t)s[1].i - (int32_t)s[3].i;
    int32_t first = 0;
    for (int i = 0; i < k; i++) {
        if (t[i].ndim != 4) return PK_EARGS;
        first += t[i].size[2];
    }
    if (first != pooled(region_rows, g.kh, 0, g.sh, 1, 0)) return PK_EARGS;
    first = 0;
    for (int i = 0; i < k; i++) {
        int rc = avg_pool_grad(&t[i], gi, region_rows, first, base, &g, 0, s[10].i != 0, s[11].i);
        if (rc != PK_OK) return rc;
        first += t[i].size[2];
    }
    return PK_OK;
}
