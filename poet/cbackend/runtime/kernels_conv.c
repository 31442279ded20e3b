/* Convolutions (2-d; 1-d as 2-d of height 1): forward, input/weight/bias gradients, and the tile
   kernels of poet/execute/tiled_ops.py (specs: poet/cbackend/ops_conv.py).  Any stride, padding,
   dilation and groups (depthwise included); float32 views of any strides.

   The input's rows come from a *row source*: `top` zero rows, then the rows of k pieces (views of
   one tensor's consecutive rows, e.g. a tile and its neighbours' halo rows), then zero rows to the
   end.  A whole convolution is the row source of one piece with `top` = the height padding; a tile
   is its pieces and the halo padding its position needs.  Nothing is copied or joined.

   Sums run in a fixed order (bias, then input channel, kernel row, kernel column), so every target
   gives the same bits; aten (oneDNN) sums in another order, so results differ from torch's within a
   few ulps of the sum of |terms| (tests/test_ckernels_conv.py measures it).  Weight and bias
   gradients sum each output row in float and the rows through a cascade (pk_cascade), so their error
   grows with the log of the batch times height, not linearly. */
#include "pk.h"
#include "pk_dense.h"

typedef struct {
    const pk_tensor *piece; /* k views (N, C, rows_i, W) */
    int k;
    int32_t top;   /* zero rows before the first piece */
    int32_t rows;  /* rows in all: top + the pieces' rows + zero rows after */
    int32_t n, c, w;
} rowsrc;

typedef struct {
    int32_t sh, sw, pw, dh, dw, groups;
} geom;

/* x as a (N, C, H, W) view: a 3-d (N, C, W) view gets height 1 */
static int as4d(const pk_tensor *x, pk_tensor *v) {
    *v = *x;
    if (x->ndim == 4) return 1;
    if (x->ndim != 3) return 0;
    v->ndim = 4;
    v->size[3] = x->size[2], v->stride[3] = x->stride[2];
    v->size[2] = 1, v->stride[2] = 0;
    return 1;
}

/* a row source over pieces p[0..k) with `top` zero rows first and `bottom` after; 0 if the pieces
   disagree on N, C or W or are not float32 4-d views */
static int rowsrc_init(rowsrc *s, const pk_tensor *p, int k, int32_t top, int32_t bottom) {
    if (k < 1 || top < 0 || bottom < 0) return 0;
    s->piece = p, s->k = k, s->top = top;
    int32_t rows = top + bottom;
    for (int i = 0; i < k; i++) {
        if (p[i].dtype != PK_F32 || p[i].ndim != 4) return 0;
        if (i && (p[i].size[0] != p[0].size[0] || p[i].size[1] != p[0].size[1] || p[i].size[3] != p[0].size[3]))
            return 0;
        rows += p[i].size[2];
    }
    s->rows = rows, s->n = p[0].size[0], s->c = p[0].size[1], s->w = p[0].size[3];
    return 1;
}

/* element (n, c, r, 0) of the row source, or NULL for a zero row; *ws: the row's stride along W, *cs
   (if not NULL) the stride from one channel's row r to the next's */
static const float *src_row_cs(const rowsrc *s, int32_t n, int32_t c, int32_t r, int32_t *ws, int32_t *cs) {
    r -= s->top;
    if (r < 0) return 0;
    for (int i = 0; i < s->k; i++) {
        const pk_tensor *p = &s->piece[i];
        if (r < p->size[2]) {
            *ws = p->stride[3];
            if (cs) *cs = p->stride[1];
            return (const float *)p->data + (int64_t)n * p->stride[0] + (int64_t)c * p->stride[1] +
                   (int64_t)r * p->stride[2];
        }
        r -= p->size[2];
    }
    return 0;
}

static const float *src_row(const rowsrc *s, int32_t n, int32_t c, int32_t r, int32_t *ws) {
    return src_row_cs(s, n, c, r, ws, 0);
}

static float *row4(const pk_tensor *t, int32_t a, int32_t b, int32_t r) {
    return (float *)t->data + (int64_t)a * t->stride[0] + (int64_t)b * t->stride[1] + (int64_t)r * t->stride[2];
}

/* the output columns ow in [*lo, *hi) whose input column ow*sw + off lies in [0, w) */
static void col_range(int32_t off, int32_t sw, int32_t w, int32_t ow_n, int32_t *lo, int32_t *hi) {
    int32_t a = off >= 0 ? 0 : (-off + sw - 1) / sw;
    int32_t b = w - 1 - off < 0 ? 0 : (w - 1 - off) / sw + 1;
    *lo = a;
    *hi = b < ow_n ? b : ow_n;
}

/* the weight's and output's shapes agree with the input rows: 0 if not */
static int check_shapes(const rowsrc *s, const pk_tensor *w, const pk_tensor *y, const geom *g) {
    if (g->sh < 1 || g->sw < 1 || g->dh < 1 || g->dw < 1 || g->pw < 0 || g->groups < 1) return 0;
    if (w->ndim != 4 || y->ndim != 4 || w->dtype != PK_F32 || y->dtype != PK_F32) return 0;
    const int32_t o = w->size[0], kh = w->size[2], kw = w->size[3];
    if (o % g->groups || s->c % g->groups || w->size[1] != s->c / g->groups) return 0;
    if (y->size[0] != s->n || y->size[1] != o) return 0;
    const int32_t eh = s->rows - g->dh * (kh - 1) - 1, ew = s->w + 2 * g->pw - g->dw * (kw - 1) - 1;
    if (eh < 0 || ew < 0) return 0;
    return y->size[2] == eh / g->sh + 1 && y->size[3] == ew / g->sw + 1;
}

#define MAX_TAPS 16

/* the output columns [*lo, *hi) where every tap of a kernel row reaches inside the input row (the
   first tap's and the last tap's ranges meet); both ow_n when there are none */
static void interior(int32_t kw_n, const geom *g, int32_t w_in, int32_t ow_n, int32_t *lo, int32_t *hi) {
    int32_t lo2, hi2;
    col_range(-g->pw, g->sw, w_in, ow_n, lo, hi);
    col_range((kw_n - 1) * g->dw - g->pw, g->sw, w_in, ow_n, &lo2, &hi2);
    *lo = lo2 > *lo ? lo2 : *lo;
    *hi = hi2 < *hi ? hi2 : *hi;
    if (*lo >= *hi) *lo = *hi = ow_n;
}

/* yr[ow] += the taps wk[0..kw_n) (in order) times the input columns ow*sw + kw*dw - pw they reach
   inside [0, w_in): each output column's sum stays in a register across its taps; [lo, hi) is
   interior()'s range, where no tap needs a check */
static void row_taps(float *yr, int32_t ys, int32_t ow_n, const float *xr, int32_t xs, int32_t w_in, const float *wk,
                     int32_t kw_n, const geom *g, int32_t lo, int32_t hi) {
    for (int32_t ow = 0; ow < ow_n; ow++) {
        if (ow == lo) {
            if (ys == 1 && xs == 1 && g->sw == 1 && kw_n == 3) {
                const float *q = xr + (lo - g->pw);
                const int32_t d = g->dw;
                for (; ow < hi; ow++, q++) {
                    float acc = yr[ow];
                    acc += wk[0] * q[0];
                    acc += wk[1] * q[d];
                    acc += wk[2] * q[2 * d];
                    yr[ow] = acc;
                }
            } else {
                for (; ow < hi; ow++) {
                    const float *q = xr + (int64_t)(ow * g->sw - g->pw) * xs;
                    float acc = yr[(int64_t)ow * ys];
                    for (int32_t kw = 0; kw < kw_n; kw++) acc += wk[kw] * q[(int64_t)kw * g->dw * xs];
                    yr[(int64_t)ow * ys] = acc;
                }
            }
            if (ow >= ow_n) break;
        }
        float acc = yr[(int64_t)ow * ys];
        for (int32_t kw = 0; kw < kw_n; kw++) {
            const int32_t iw = ow * g->sw + kw * g->dw - g->pw;
            if (iw >= 0 && iw < w_in) acc += wk[kw] * xr[(int64_t)iw * xs];
        }
        yr[(int64_t)ow * ys] = acc;
    }
}

/* a 1x1 convolution without width padding: each output element's sum over the input channels
   (bias first, channels in order) in a register */
static void conv_pointwise(const rowsrc *s, const pk_tensor *w, const pk_tensor *b, const pk_tensor *y, const geom *g) {
    const int32_t o = w->size[0], cg = w->size[1], og = o / g->groups, oh_n = y->size[2], ow_n = y->size[3];
    const int32_t ys = y->stride[3], wcs = w->stride[1];
    for (int32_t n = 0; n < s->n; n++)
        for (int32_t oc = 0; oc < o; oc++) {
            const float bias = b ? ((const float *)b->data)[(int64_t)oc * b->stride[0]] : 0.0f;
            const float *wr = (const float *)w->data + (int64_t)oc * w->stride[0];
            for (int32_t oh = 0; oh < oh_n; oh++) {
                int32_t xs, cs;
                const float *xr = src_row_cs(s, n, (oc / og) * cg, oh * g->sh, &xs, &cs);
                float *yr = row4(y, n, oc, oh);
                const int64_t step = (int64_t)g->sw * xs;
                for (int32_t ow = 0; ow < ow_n; ow++) {
                    float acc = bias;
                    if (xr) {
                        const float *q = xr + ow * step;
                        for (int32_t ic = 0; ic < cg; ic++) acc += wr[(int64_t)ic * wcs] * q[(int64_t)ic * cs];
                    }
                    yr[(int64_t)ow * ys] = acc;
                }
            }
        }
}

/* y = conv(rows, w) + b; per output element: bias, then input channel, kernel row, kernel column */
static void conv_forward(const rowsrc *s, const pk_tensor *w, const pk_tensor *b, const pk_tensor *y, const geom *g) {
    const int32_t o = w->size[0], cg = w->size[1], kh_n = w->size[2], kw_n = w->size[3];
    const int32_t og = o / g->groups, oh_n = y->size[2], ow_n = y->size[3], ys = y->stride[3];
    if (kh_n == 1 && kw_n == 1 && g->pw == 0) {
        conv_pointwise(s, w, b, y, g);
        return;
    }
    const float *wd = (const float *)w->data;
    int32_t lo, hi;
    interior(kw_n, g, s->w, ow_n, &lo, &hi);
    for (int32_t n = 0; n < s->n; n++) {
        for (int32_t oc = 0; oc < o; oc++) {
            const float bias = b ? ((const float *)b->data)[(int64_t)oc * b->stride[0]] : 0.0f;
            for (int32_t oh = 0; oh < oh_n; oh++) {
                float *yr = row4(y, n, oc, oh);
                for (int32_t ow = 0; ow < ow_n; ow++) yr[(int64_t)ow * ys] = bias;
            }
            const int32_t c0 = (oc / og) * cg;
            for (int32_t ic = 0; ic < cg; ic++) {
                for (int32_t kh = 0; kh < kh_n; kh++) {
                    float wk[MAX_TAPS];
                    for (int32_t kw = 0; kw < kw_n && kw < MAX_TAPS; kw++)
                        wk[kw] = wd[(int64_t)oc * w->stride[0] + (int64_t)ic * w->stride[1] + (int64_t)kh * w->stride[2] +
                                    (int64_t)kw * w->stride[3]];
                    for (int32_t oh = 0; oh < oh_n; oh++) {
                        int32_t xs;
                        const float *xr = src_row(s, n, c0 + ic, oh * g->sh + kh * g->dh, &xs);
                        if (!xr) continue;
                        float *yr = row4(y, n, oc, oh);
                        if (kw_n <= MAX_TAPS) {
                            row_taps(yr, ys, ow_n, xr, xs, s->w, wk, kw_n, g, lo, hi);
                            continue;
                        }
                        for (int32_t kw = 0; kw < kw_n; kw++) { /* a kernel wider than MAX_TAPS: tap by tap */
                            const float wv = wd[(int64_t)oc * w->stride[0] + (int64_t)ic * w->stride[1] +
                                                (int64_t)kh * w->stride[2] + (int64_t)kw * w->stride[3]];
                            const int32_t off = kw * g->dw - g->pw;
                            int32_t a, z;
                            col_range(off, g->sw, s->w, ow_n, &a, &z);
                            const float *xp = xr + (int64_t)off * xs;
                            for (int32_t ow = a; ow < z; ow++) yr[(int64_t)ow * ys] += wv * xp[(int64_t)ow * g->sw * xs];
                        }
                    }
                }
            }
        }
    }
}

/* stride 1: ir[iw] += the taps wk[0..kw_n) (in order) times the output-gradient columns iw + pw - kw*dw
   inside [0, ow_n): each input column's sum in a register across its taps (the order of the additions
   into each element is the tap-by-tap loop's); [lo, hi): the input columns every tap reaches */
static void row_taps_back(float *ir, int32_t is, int32_t w_in, const float *gr, int32_t os, int32_t ow_n,
                          const float *wk, int32_t kw_n, const geom *g, int32_t lo, int32_t hi) {
    for (int32_t iw = 0; iw < w_in; iw++) {
        if (iw == lo) {
            if (is == 1 && os == 1 && kw_n == 3) {
                const int32_t d = g->dw;
                const float *q = gr + (lo + g->pw);
                for (; iw < hi; iw++, q++) {
                    float acc = ir[iw];
                    acc += wk[0] * q[0];
                    acc += wk[1] * q[-d];
                    acc += wk[2] * q[-2 * d];
                    ir[iw] = acc;
                }
            } else {
                for (; iw < hi; iw++) {
                    float acc = ir[(int64_t)iw * is];
                    for (int32_t kw = 0; kw < kw_n; kw++) acc += wk[kw] * gr[(int64_t)(iw + g->pw - kw * g->dw) * os];
                    ir[(int64_t)iw * is] = acc;
                }
            }
            if (iw >= w_in) break;
        }
        float acc = ir[(int64_t)iw * is];
        for (int32_t kw = 0; kw < kw_n; kw++) {
            const int32_t ow = iw + g->pw - kw * g->dw;
            if (ow >= 0 && ow < ow_n) acc += wk[kw] * gr[(int64_t)ow * os];
        }
        ir[(int64_t)iw * is] = acc;
    }
}

/* gi (rows gi_rows of the input, N, C, ., W) += the windows of the output-gradient rows (row source
   `go`, no zero rows): output row j, kernel row kh reach gi row j*sh + kh*dh + base */
static void conv_input_grad(const rowsrc *go, const pk_tensor *w, const pk_tensor *gi, const geom *g, int32_t base) {
    const int32_t o = w->size[0], cg = w->size[1], kh_n = w->size[2], kw_n = w->size[3];
    const int32_t og = o / g->groups, gi_rows = gi->size[2], w_in = gi->size[3], gs = gi->stride[3];
    const float *wd = (const float *)w->data;
    const int taps = g->sw == 1 && kw_n > 1 && kw_n <= MAX_TAPS;
    int32_t lo = (kw_n - 1) * g->dw - g->pw, hi = go->w - g->pw; /* input columns every tap reaches */
    lo = lo < 0 ? 0 : lo;
    hi = hi > w_in ? w_in : hi;
    if (lo >= hi) lo = hi = w_in;
    for (int32_t n = 0; n < go->n; n++) {
        for (int32_t oc = 0; oc < o; oc++) {
            const int32_t c0 = (oc / og) * cg;
            for (int32_t j = 0; j < go->rows; j++) {
                int32_t os;
                const float *gr = src_row(go, n, oc, j, &os);
                for (int32_t kh = 0; kh < kh_n; kh++) {
                    const int32_t r = j * g->sh + kh * g->dh + base;
                    if (r < 0 || r >= gi_rows) continue;
                    for (int32_t ic = 0; ic < cg; ic++) {
                        float *ir = row4(gi, n, c0 + ic, r);
                        float wk[MAX_TAPS];
                        for (int32_t kw = 0; kw < kw_n && kw < MAX_TAPS; kw++)
                            wk[kw] = wd[(int64_t)oc * w->stride[0] + (int64_t)ic * w->stride[1] + (int64_t)kh * w->stride[2] +
                                        (int64_t)kw * w->stride[3]];
                        if (taps) {
                            row_taps_back(ir, gs, w_in, gr, os, go->w, wk, kw_n, g, lo, hi);
                            continue;
                        }
                        for (int32_t kw = 0; kw < kw_n; kw++) {
                            const float wv = wd[(int64_t)oc * w->stride[0] + (int64_t)ic * w->stride[1] +
                                                (int64_t)kh * w->stride[2] + (int64_t)kw * w->stride[3]];
                            const int32_t off = kw * g->dw - g->pw;
                            int32_t a, z;
                            col_range(off, g->sw, w_in, go->w, &a, &z);
                            float *ip = ir + (int64_t)off * gs;
                            const int64_t istep = (int64_t)g->sw * gs;
                            if (istep == 1 && os == 1) {
                                for (int32_t ow = a; ow < z; ow++) ip[ow] += wv * gr[ow];
                            } else {
                                for (int32_t ow = a; ow < z; ow++) ip[ow * istep] += wv * gr[(int64_t)ow * os];
                            }
                        }
                    }
                }
            }
        }
    }
}

/* gw = sum over n, oh, ow of go * x (the windows' inputs); go (N, O, OH, OW) */
static void conv_weight_grad(const pk_tensor *go, const rowsrc *s, const pk_tensor *gw, const geom *g) {
    const int32_t o = gw->size[0], cg = gw->size[1], kh_n = gw->size[2], kw_n = gw->size[3];
    const int32_t og = o / g->groups, oh_n = go->size[2], ow_n = go->size[3], gs = go->stride[3];
    for (int32_t oc = 0; oc < o; oc++) {
        const int32_t c0 = (oc / og) * cg;
        for (int32_t ic = 0; ic < cg; ic++) {
            for (int32_t kh = 0; kh < kh_n; kh++) {
                for (int32_t kw = 0; kw < kw_n; kw++) {
                    const int32_t off = kw * g->dw - g->pw;
                    int32_t lo, hi;
                    col_range(off, g->sw, s->w, ow_n, &lo, &hi);
                    pk_cascade acc;
                    pk_cascade_init(&acc);
                    for (int32_t n = 0; n < s->n; n++) {
                        for (int32_t oh = 0; oh < oh_n; oh++) {
                            int32_t xs;
                            const float *xr = src_row(s, n, c0 + ic, oh * g->sh + kh * g->dh, &xs);
                            if (!xr) continue;
                            const float *gr = row4(go, n, oc, oh);
                            const float *xp = xr + (int64_t)off * xs;
                            const int64_t xstep = (int64_t)g->sw * xs;
                            float row = 0.0f;
                            if (gs == 1 && xstep == 1) {
                                for (int32_t ow = lo; ow < hi; ow++) row += gr[ow] * xp[ow];
                            } else {
                                for (int32_t ow = lo; ow < hi; ow++) row += gr[(int64_t)ow * gs] * xp[ow * xstep];
                            }
                            pk_cascade_add(&acc, row);
                        }
                    }
                    ((float *)gw->data)[(int64_t)oc * gw->stride[0] + (int64_t)ic * gw->stride[1] +
                                        (int64_t)kh * gw->stride[2] + (int64_t)kw * gw->stride[3]] =
                        pk_cascade_total(&acc);
                }
            }
        }
    }
}

/* gb[o] = sum of go[:, o] */
static void conv_bias_grad(const pk_tensor *go, const pk_tensor *gb) {
    for (int32_t oc = 0; oc < go->size[1]; oc++) {
        pk_cascade acc;
        pk_cascade_init(&acc);
        for (int32_t n = 0; n < go->size[0]; n++)
            for (int32_t oh = 0; oh < go->size[2]; oh++)
                pk_cascade_add(&acc, pk_sum_f32(row4(go, n, oc, oh), go->size[3], go->stride[3]));
        ((float *)gb->data)[(int64_t)oc * gb->stride[0]] = pk_cascade_total(&acc);
    }
}

static int get_geom(const pk_scalar *s, geom *g) {
    g->sh = (int32_t)s[0].i, g->sw = (int32_t)s[1].i, g->pw = (int32_t)s[3].i;
    g->dh = (int32_t)s[4].i, g->dw = (int32_t)s[5].i, g->groups = (int32_t)s[6].i;
    return s[2].i >= 0;
}

static int bias_ok(const pk_tensor *b, int32_t o) {
    return b->dtype == PK_NONE || (b->dtype == PK_F32 && b->ndim == 1 && b->size[0] == o);
}

/* convolution(x, w, b | NONE -> y; sh, sw, ph, pw, dh, dw, groups): x, w, y 4-d (or 3-d for 1-d) */
PK_KERNEL(convolution) {
    if (nt != 4 || ns != 7) return PK_EARGS;
    geom g;
    pk_tensor x, w, y;
    if (!get_geom(s, &g) || !as4d(&t[0], &x) || !as4d(&t[1], &w) || !as4d(&t[3], &y)) return PK_EARGS;
    if (x.dtype != PK_F32 || w.dtype != PK_F32 || y.dtype != PK_F32) return PK_EDTYPE;
    rowsrc src;
    const int32_t ph = (int32_t)s[2].i;
    if (!rowsrc_init(&src, &x, 1, ph, ph) || !check_shapes(&src, &w, &y, &g) || !bias_ok(&t[2], w.size[0]))
        return PK_EARGS;
    conv_forward(&src, &w, t[2].dtype == PK_NONE ? 0 : &t[2], &y, &g);
    return PK_OK;
}

/* convolution_backward(go, x, w -> gi | NONE, gw | NONE, gb | NONE; sh, sw, ph, pw, dh, dw, groups) */
PK_KERNEL(convolution_backward) {
    if (nt != 6 || ns != 7) return PK_EARGS;
    geom g;
    pk_tensor go, x, w;
    if (!get_geom(s, &g) || !as4d(&t[0], &go) || !as4d(&t[1], &x) || !as4d(&t[2], &w)) return PK_EARGS;
    if (go.dtype != PK_F32 || x.dtype != PK_F32 || w.dtype != PK_F32) return PK_EDTYPE;
    const int32_t ph = (int32_t)s[2].i;
    rowsrc src, gsrc;
    if (!rowsrc_init(&src, &x, 1, ph, ph) || !check_shapes(&src, &w, &go, &g)) return PK_EARGS;
    if (t[3].dtype != PK_NONE) {
        pk_tensor gi;
        if (!as4d(&t[3], &gi) || gi.dtype != PK_F32) return PK_EDTYPE;
        if (!pk_same_shape(&gi, &x)) return PK_EARGS;
        if (!rowsrc_init(&gsrc, &go, 1, 0, 0)) return PK_EARGS;
        pk_zero_view(&gi);
        conv_input_grad(&gsrc, &w, &gi, &g, -ph);
    }
    if (t[4].dtype != PK_NONE) {
        pk_tensor gw;
        if (!as4d(&t[4], &gw) || gw.dtype != PK_F32) return PK_EDTYPE;
        if (!pk_same_shape(&gw, &w)) return PK_EARGS;
        conv_weight_grad(&go, &src, &gw, &g);
    }
    if (t[5].dtype != PK_NONE) {
        if (!bias_ok(&t[5], w.size[0]) || t[5].dtype != PK_F32) return PK_EARGS;
        conv_bias_grad(&go, &t[5]);
    }
    return PK_OK;
}

/* ------------------------------------------------------------------ tile kernels (poet/execute/tiled_ops.py) */

/* tile_conv(piece_0 .. piece_{k-1}, w, b | NONE -> y; k, top, bottom, sh, sw, pw, dh, dw, groups):
   output rows of a convolution from the input rows under them, `top`/`bottom` zero rows of halo
   padding at the tensor's border (the height padding is these rows; width padding pw as usual) */
PK_KERNEL(tile_conv) {
    if (ns != 9 || s[0].i < 1 || nt != s[0].i + 3) return PK_EARGS;
    const int k = (int)s[0].i;
    const pk_tensor *w = &t[k], *b = &t[k + 1], *y = &t[k + 2];
    const geom g = {(int32_t)s[3].i, (int32_t)s[4].i, (int32_t)s[5].i, (int32_t)s[6].i, (int32_t)s[7].i, (int32_t)s[8].i};
    rowsrc src;
    if (w->dtype != PK_F32 || y->dtype != PK_F32) return PK_EDTYPE;
    if (!rowsrc_init(&src, t, k, (int32_t)s[1].i, (int32_t)s[2].i) || !check_shapes(&src, w, y, &g) ||
        !bias_ok(b, w->size[0]))
        return PK_EARGS;
    conv_forward(&src, w, b->dtype == PK_NONE ? 0 : b, y, &g);
    return PK_OK;
}

/* tile_conv_input_grad(go_0 .. go_{k-1}, w -> gi; k, region_start, region_rows, a, b, sh, sw, pw, dh,
   dw, groups): rows [a, b) of a convolution's input gradient.  The output-gradient rows' windows
   start at input row region_start (padding rows counted: it may be negative) and cover region_rows
   rows; rows no window reaches are 0.  k = 0: no output row reaches the tile (all zeros). */
PK_KERNEL(tile_conv_input_grad) {
    if (ns != 11 || s[0].i < 0 || nt != s[0].i + 2) return PK_EARGS;
    const int k = (int)s[0].i;
    const pk_tensor *w = &t[k], *gi = &t[k + 1];
    const int32_t region_start = (int32_t)s[1].i, region_rows = (int32_t)s[2].i, a = (int32_t)s[3].i;
    const geom g = {(int32_t)s[5].i, (int32_t)s[6].i, (int32_t)s[7].i, (int32_t)s[8].i, (int32_t)s[9].i, (int32_t)s[10].i};
    if (w->dtype != PK_F32 || gi->dtype != PK_F32) return PK_EDTYPE;
    if (gi->ndim != 4 || w->ndim != 4 || gi->size[2] != s[4].i - a || region_rows < 0) return PK_EARGS;
    pk_zero_view((pk_tensor *)gi);
    if (k == 0) return PK_OK;
    rowsrc go;
    if (!rowsrc_init(&go, t, k, 0, 0)) return PK_EARGS;
    /* the region as the input of a convolution whose output is go: shapes must agree */
    rowsrc region = {gi, 1, 0, region_rows, gi->size[0], gi->size[1], gi->size[3]};
    pk_tensor out_shape = t[0];
    out_shape.size[2] = go.rows;
    if (!check_shapes(&region, w, &out_shape, &g)) return PK_EARGS;
    conv_input_grad(&go, w, gi, &g, region_start - a);
    return PK_OK;
}

/* tile_conv_weight_grad(acc_w | NONE, acc_b | NONE, go, piece_0 .. piece_{k-1} -> gw | NONE, gb | NONE;
   k, top, bottom, sh, sw, pw, dh, dw, groups): the weight and bias gradients of one more tile of
   output rows, added to the accumulators (absent at the first tile): acc + this tile's sum */
PK_KERNEL(tile_conv_weight_grad) {
    if (ns != 9 || s[0].i < 1 || nt != s[0].i + 5) return PK_EARGS;
    const int k = (int)s[0].i;
    const pk_tensor *acc_w = &t[0], *acc_b = &t[1], *go = &t[2], *gw = &t[3 + k], *gb = &t[4 + k];
    const geom g = {(int32_t)s[3].i, (int32_t)s[4].i, (int32_t)s[5].i, (int32_t)s[6].i, (int32_t)s[7].i, (int32_t)s[8].i};
    if (go->dtype != PK_F32 || go->ndim != 4) return PK_EDTYPE;
    if (gw->dtype != PK_NONE) {
        rowsrc src;
        if (gw->dtype != PK_F32) return PK_EDTYPE;
        if (!rowsrc_init(&src, &t[3], k, (int32_t)s[1].i, (int32_t)s[2].i) || !check_shapes(&src, gw, go, &g))
            return PK_EARGS;
        if (acc_w->dtype != PK_NONE && (acc_w->dtype != PK_F32 || !pk_same_shape(acc_w, gw))) return PK_EARGS;
        conv_weight_grad(go, &src, gw, &g);
        if (acc_w->dtype != PK_NONE) {
            PK_FOR3(gw, gw, acc_w, o, v, acc, { *o = *acc + *v; });
        }
    }
    if (gb->dtype != PK_NONE) {
        if (!bias_ok(gb, go->size[1]) || gb->dtype != PK_F32) return PK_EARGS;
        if (acc_b->dtype != PK_NONE && (acc_b->dtype != PK_F32 || !pk_same_shape(acc_b, gb))) return PK_EARGS;
        conv_bias_grad(go, gb);
        if (acc_b->dtype != PK_NONE) {
            PK_FOR3(gb, gb, acc_b, o, v, acc, { *o = *acc + *v; });
        }
    }
    return PK_OK;
}
