/* kernels_zoo.c: the windowed and dense layers of zoo graphs (poet/graph/zoo.py), on row tiles.

   Every kernel computes rows [lo, lo + rows) of its output from row sources (pk_zoo.h) holding the
   rows it needs, with zero padding outside the tensor; a whole (untiled) layer is the one tile
   lo = 0.  A tile of a group of channels is given the group's slice of the weight (output channels
   for the forward and the weight gradient, input channels for the grad-input: a strided view) and
   of the bias, so the kernels compute every channel of what they are given.  Sums are in float32
   in a fixed order, so a node computed again gives the same bytes.  poet/cbackend/lower_zoo.py makes the calls.

   zoo_conv               W, bias|NONE, x src, y           | stride, pad, lo, H_in, <x>
   zoo_conv_grad_input    W, dy src, dx                    | stride, pad, lo, H_out, <dy>
   zoo_conv_weight_grad   x src, dy src, dW, db|NONE       | stride, pad, lo, hi, H_in, accumulate, <x>, <dy>
   zoo_maxpool            x src, y                         | k, stride, pad, lo, H_in, <x>
   zoo_maxpool_grad       x src, dy src, dx                | k, stride, pad, lo, H_in, H_out, <x>, <dy>
   zoo_avgpool            x src, y                         | k, lo, <x>              (k x k windows, stride k)
   zoo_avgpool_partial    prev|NONE, x src, y              | k, lo, hi, c0, <x>      (global pooling's chain;
                                                                                     x: channels [c0, c0 + its C))
   zoo_avgpool_grad       dy src, dx                       | k, lo, H_out, <dy>
   zoo_linear             W, bias|NONE, x src, y           | lo, <x>                 (flat vectors)
   zoo_linear_grad_input  W, dy src, dx                    | lo, <dy>
   zoo_linear_weight_grad x src, dy src, dW, db|NONE       | lo, hi, accumulate, <x>, <dy>
   zoo_flatten            x src, y                         | lo, H, <x>              ((C,H,W) -> (C*H*W,))
   zoo_unflatten          dy src, dx                       | lo, H, c0, <dy>         (the way back; dx: channels
                                                                                     from c0) */
#include <string.h>

#include "pk.h"
#include "pk_math.h"
#include "pk_zoo.h"

#define TAKE(expr)                 \
    do {                           \
        int take_rc_ = (expr);     \
        if (take_rc_) return take_rc_; \
    } while (0)

/* a float32 (Cout, Cin, k, k) weight whose k x k kernels are contiguous; the channel strides may
   be those of a slice (a group of output or input channels of the layer's weight) */
static int weight4(const pk_tensor *w) {
    if (w->dtype != PK_F32) return PK_EDTYPE;
    if (w->ndim != 4 || w->size[2] != w->size[3]) return PK_EARGS;
    if ((w->size[3] > 1 && w->stride[3] != 1) || (w->size[2] > 1 && w->stride[2] != w->size[3])) return PK_EARGS;
    return PK_OK;
}

static inline int64_t widx(const pk_tensor *w, int32_t co, int32_t ci, int32_t kh) {
    return (int64_t)co * w->stride[0] + (int64_t)ci * w->stride[1] + (int64_t)kh * w->size[3];
}

static void zero_rows(const pk_tensor *y) {
    for (int32_t b = 0; b < y->size[0]; b++)
        for (int32_t c = 0; c < y->size[1]; c++)
            for (int32_t r = 0; r < y->size[2]; r++) memset(pkz_at(y, b, c, r), 0, (size_t)y->size[3] * sizeof(float));
}

/* ------------------------------------------------------------------ convolution */

PK_KERNEL(zoo_conv) {
    if (nt < 4 || ns < 5) return PK_EARGS;
    const pk_tensor *W = &t[0], *bias = &t[1];
    TAKE(weight4(W));
    const int32_t co_n = W->size[0], ci_n = W->size[1], k = W->size[2];
    TAKE(pkz_vec(bias, co_n, 1));
    const int32_t st = (int32_t)s[0].i, pad = (int32_t)s[1].i, lo = (int32_t)s[2].i, hin = (int32_t)s[3].i;
    int ti = 2, si = 4;
    pkz_src x;
    TAKE(pkz_src_parse(&x, t, nt, &ti, s, ns, &si));
    if (ti != nt - 1 || si != ns || st < 1 || x.c != ci_n || x.ng != 1) return PK_EARGS;
    const pk_tensor *y = &t[ti];
    const int32_t win = x.w, wo = (win + 2 * pad - k) / st + 1;
    TAKE(pkz_out4(y, x.b, co_n, wo));
    const float *w = (const float *)W->data;
    const float *bv = bias->dtype == PK_NONE ? 0 : (const float *)bias->data;
    for (int32_t b = 0; b < x.b; b++)
        for (int32_t co = 0; co < co_n; co++)
            for (int32_t r = 0; r < y->size[2]; r++) {
                float *yr = pkz_at(y, b, co, r);
                for (int32_t ow = 0; ow < wo; ow++) yr[ow] = 0.0f;
            }
    for (int32_t b = 0; b < x.b; b++)
        for (int32_t r = 0; r < y->size[2]; r++) {
            const int32_t oh = lo + r;
            for (int32_t kh = 0; kh < k; kh++) {
                const int32_t ih = oh * st - pad + kh;
                if (ih < 0 || ih >= hin) continue;
                for (int32_t ci = 0; ci < ci_n; ci++) {
                    const float *xr = pkz_row(&x, 0, b, ci, ih);
                    if (!xr) return PK_EARGS;
                    for (int32_t co = 0; co < co_n; co++) {
                        const float *wk = w + widx(W, co, ci, kh);
                        float *yr = pkz_at(y, b, co, r);
                        for (int32_t ow = 0; ow < wo; ow++) {
                            float acc = yr[ow];
                            const int32_t i0 = ow * st - pad;
                            for (int32_t kw = 0; kw < k; kw++) {
                                const int32_t iw = i0 + kw;
                                if (iw >= 0 && iw < win) acc += wk[kw] * xr[iw];
                            }
                            yr[ow] = acc;
                        }
                    }
                }
            }
        }
    if (bv)
        for (int32_t b = 0; b < x.b; b++)
            for (int32_t co = 0; co < co_n; co++)
                for (int32_t r = 0; r < y->size[2]; r++) {
                    float *yr = pkz_at(y, b, co, r);
                    for (int32_t ow = 0; ow < wo; ow++) yr[ow] += bv[co];
                }
    return PK_OK;
}

PK_KERNEL(zoo_conv_grad_input) {
    if (nt < 3 || ns < 5) return PK_EARGS;
    const pk_tensor *W = &t[0];
    TAKE(weight4(W));
    const int32_t co_n = W->size[0], ci_n = W->size[1], k = W->size[2];
    const int32_t st = (int32_t)s[0].i, pad = (int32_t)s[1].i, lo = (int32_t)s[2].i, hout = (int32_t)s[3].i;
    int ti = 1, si = 4;
    pkz_src dy;
    TAKE(pkz_src_parse(&dy, t, nt, &ti, s, ns, &si));
    if (ti != nt - 1 || si != ns || st < 1 || dy.c != co_n) return PK_EARGS;
    const pk_tensor *dx = &t[ti];
    if (dx->ndim != 4) return PK_EARGS;
    const int32_t win = dx->size[3], wo = dy.w;
    TAKE(pkz_out4(dx, dy.b, ci_n, win));
    if ((win + 2 * pad - k) / st + 1 != wo) return PK_EARGS;
    const float *w = (const float *)W->data;
    zero_rows(dx);
    for (int g = 0; g < dy.ng; g++)
        for (int32_t b = 0; b < dy.b; b++)
            for (int32_t r = 0; r < dx->size[2]; r++) {
                const int32_t ih = lo + r;
                for (int32_t kh = 0; kh < k; kh++) {
                    const int32_t num = ih + pad - kh;
                    if (num < 0 || num % st) continue;
                    const int32_t oh = num / st;
                    if (oh >= hout) continue;
                    for (int32_t co = 0; co < co_n; co++) {
                        const float *dyr = pkz_row(&dy, g, b, co, oh);
                        if (!dyr) return PK_EARGS;
                        for (int32_t ci = 0; ci < ci_n; ci++) {
                            const float *wk = w + widx(W, co, ci, kh);
                            float *dxr = pkz_at(dx, b, ci, r);
                            for (int32_t ow = 0; ow < wo; ow++) {
                                const float d = dyr[ow];
                                const int32_t i0 = ow * st - pad;
                                for (int32_t kw = 0; kw < k; kw++) {
                                    const int32_t iw = i0 + kw;
                                    if (iw >= 0 && iw < win) dxr[iw] += wk[kw] * d;
                                }
                            }
                        }
                    }
                }
            }
    return PK_OK;
}

PK_KERNEL(zoo_conv_weight_grad) {
    if (nt < 4 || ns < 8) return PK_EARGS;
    const int32_t st = (int32_t)s[0].i, pad = (int32_t)s[1].i, lo = (int32_t)s[2].i, hi = (int32_t)s[3].i;
    const int32_t hin = (int32_t)s[4].i;
    const int accumulate = s[5].i != 0;
    int ti = 0, si = 6;
    pkz_src x, dy;
    TAKE(pkz_src_parse(&x, t, nt, &ti, s, ns, &si));
    TAKE(pkz_src_parse(&dy, t, nt, &ti, s, ns, &si));
    if (ti != nt - 2 || si != ns || st < 1 || x.ng != 1 || x.b != dy.b) return PK_EARGS;
    const pk_tensor *dW = &t[ti], *db = &t[ti + 1];
    TAKE(weight4(dW));
    if (!pk_contiguous(dW)) return PK_EARGS; /* all of the layer's, or a group of its output channels */
    const int32_t co_n = dW->size[0], ci_n = dW->size[1], k = dW->size[2];
    if (x.c != ci_n || dy.c != co_n || (x.w + 2 * pad - k) / st + 1 != dy.w) return PK_EARGS;
    TAKE(pkz_vec(db, co_n, 1));
    float *dw = (float *)dW->data;
    float *dbv = db->dtype == PK_NONE ? 0 : (float *)db->data;
    if (!accumulate) {
        memset(dw, 0, (size_t)pk_numel(dW) * sizeof(float));
        if (dbv) memset(dbv, 0, (size_t)co_n * sizeof(float));
    }
    const int32_t win = x.w, wo = dy.w;
    for (int g = 0; g < dy.ng; g++)
        for (int32_t b = 0; b < x.b; b++)
            for (int32_t oh = lo; oh < hi; oh++) {
                for (int32_t co = 0; co < co_n; co++) {
                    const float *dyr = pkz_row(&dy, g, b, co, oh);
                    if (!dyr) return PK_EARGS;
                    if (dbv) {
                        float acc = 0.0f;
                        for (int32_t ow = 0; ow < wo; ow++) acc += dyr[ow];
                        dbv[co] += acc;
                    }
                }
                for (int32_t kh = 0; kh < k; kh++) {
                    const int32_t ih = oh * st - pad + kh;
                    if (ih < 0 || ih >= hin) continue;
                    for (int32_t co = 0; co < co_n; co++) {
                        const float *dyr = pkz_row(&dy, g, b, co, oh);
                        for (int32_t ci = 0; ci < ci_n; ci++) {
                            const float *xr = pkz_row(&x, 0, b, ci, ih);
                            if (!xr) return PK_EARGS;
                            float *wk = dw + (((int64_t)co * ci_n + ci) * k + kh) * k;
                            for (int32_t kw = 0; kw < k; kw++) {
                                float acc = 0.0f;
                                for (int32_t ow = 0; ow < wo; ow++) {
                                    const int32_t iw = ow * st - pad + kw;
                                    if (iw >= 0 && iw < win) acc += dyr[ow] * xr[iw];
                                }
                                wk[kw] += acc;
                            }
                        }
                    }
                }
            }
    return PK_OK;
}

/* ------------------------------------------------------------------ pooling */

PK_KERNEL(zoo_maxpool) {
    if (nt < 2 || ns < 6) return PK_EARGS;
    const int32_t k = (int32_t)s[0].i, st = (int32_t)s[1].i, pad = (int32_t)s[2].i, lo = (int32_t)s[3].i;
    const int32_t hin = (int32_t)s[4].i;
    int ti = 0, si = 5;
    pkz_src x;
    TAKE(pkz_src_parse(&x, t, nt, &ti, s, ns, &si));
    if (ti != nt - 1 || si != ns || k < 1 || st < 1 || x.ng != 1) return PK_EARGS;
    const pk_tensor *y = &t[ti];
    const int32_t win = x.w, wo = (win + 2 * pad - k) / st + 1;
    TAKE(pkz_out4(y, x.b, x.c, wo));
    for (int32_t b = 0; b < x.b; b++)
        for (int32_t c = 0; c < x.c; c++)
            for (int32_t r = 0; r < y->size[2]; r++) {
                float *yr = pkz_at(y, b, c, r);
                for (int32_t ow = 0; ow < wo; ow++) {
                    float m = -pk_inff();
                    for (int32_t kh = 0; kh < k; kh++) {
                        const int32_t ih = (lo + r) * st - pad + kh;
                        if (ih < 0 || ih >= hin) continue;
                        const float *xr = pkz_row(&x, 0, b, c, ih);
                        if (!xr) return PK_EARGS;
                        for (int32_t kw = 0; kw < k; kw++) {
                            const int32_t iw = ow * st - pad + kw;
                            if (iw < 0 || iw >= win) continue;
                            const float v = xr[iw];
                            if (v > m || v != v) m = v; /* aten's rule: a larger value or a NaN replaces */
                        }
                    }
                    yr[ow] = m;
                }
            }
    return PK_OK;
}

PK_KERNEL(zoo_maxpool_grad) {
    if (nt < 3 || ns < 8) return PK_EARGS;
    const int32_t k = (int32_t)s[0].i, st = (int32_t)s[1].i, pad = (int32_t)s[2].i, lo = (int32_t)s[3].i;
    const int32_t hin = (int32_t)s[4].i, hout = (int32_t)s[5].i;
    int ti = 0, si = 6;
    pkz_src x, dy;
    TAKE(pkz_src_parse(&x, t, nt, &ti, s, ns, &si));
    TAKE(pkz_src_parse(&dy, t, nt, &ti, s, ns, &si));
    if (ti != nt - 1 || si != ns || k < 1 || st < 1 || x.ng != 1 || dy.c != x.c || dy.b != x.b) return PK_EARGS;
    const pk_tensor *dx = &t[ti];
    const int32_t win = x.w, wo = dy.w;
    TAKE(pkz_out4(dx, x.b, x.c, win));
    const int32_t hi = lo + dx->size[2];
    zero_rows(dx);
    /* output rows whose window touches input rows [lo, hi) */
    int32_t first = lo + pad - k + 1;
    first = first <= 0 ? 0 : (first + st - 1) / st;
    int32_t last = (hi - 1 + pad) / st;
    if (last > hout - 1) last = hout - 1;
    for (int32_t b = 0; b < x.b; b++)
        for (int32_t c = 0; c < x.c; c++)
            for (int32_t oh = first; oh <= last; oh++)
                for (int32_t ow = 0; ow < wo; ow++) {
                    float m = -pk_inff();
                    int32_t ah = -1, aw = -1;
                    for (int32_t kh = 0; kh < k; kh++) {
                        const int32_t ih = oh * st - pad + kh;
                        if (ih < 0 || ih >= hin) continue;
                        const float *xr = pkz_row(&x, 0, b, c, ih);
                        if (!xr) return PK_EARGS;
                        for (int32_t kw = 0; kw < k; kw++) {
                            const int32_t iw = ow * st - pad + kw;
                            if (iw < 0 || iw >= win) continue;
                            const float v = xr[iw];
                            if (ah < 0 || v > m || v != v) { /* the window's first position, then aten's rule */
                                m = v;
                                ah = ih;
                                aw = iw;
                            }
                        }
                    }
                    if (ah < lo || ah >= hi) continue;
                    float d = 0.0f;
                    for (int g = 0; g < dy.ng; g++) {
                        const float *dyr = pkz_row(&dy, g, b, c, oh);
                        if (!dyr) return PK_EARGS;
                        d += dyr[ow];
                    }
                    pkz_at(dx, b, c, ah - lo)[aw] += d;
                }
    return PK_OK;
}

PK_KERNEL(zoo_avgpool) {
    if (nt < 2 || ns < 4) return PK_EARGS;
    const int32_t k = (int32_t)s[0].i, lo = (int32_t)s[1].i;
    int ti = 0, si = 2;
    pkz_src x;
    TAKE(pkz_src_parse(&x, t, nt, &ti, s, ns, &si));
    if (ti != nt - 1 || si != ns || k < 1 || x.ng != 1) return PK_EARGS;
    const pk_tensor *y = &t[ti];
    const int32_t wo = x.w / k;
    TAKE(pkz_out4(y, x.b, x.c, wo));
    const float scale = 1.0f / (float)(k * k);
    for (int32_t b = 0; b < x.b; b++)
        for (int32_t c = 0; c < x.c; c++)
            for (int32_t r = 0; r < y->size[2]; r++) {
                float *yr = pkz_at(y, b, c, r);
                for (int32_t ow = 0; ow < wo; ow++) {
                    float acc = 0.0f;
                    for (int32_t kh = 0; kh < k; kh++) {
                        const float *xr = pkz_row(&x, 0, b, c, (lo + r) * k + kh);
                        if (!xr) return PK_EARGS;
                        for (int32_t kw = 0; kw < k; kw++) acc += xr[ow * k + kw];
                    }
                    yr[ow] = acc * scale;
                }
            }
    return PK_OK;
}

PK_KERNEL(zoo_avgpool_partial) {
    if (nt < 3 || ns < 6) return PK_EARGS;
    const int32_t k = (int32_t)s[0].i, lo = (int32_t)s[1].i, hi = (int32_t)s[2].i, c0 = (int32_t)s[3].i;
    const pk_tensor *prev = &t[0];
    int ti = 1, si = 4;
    pkz_src x;
    TAKE(pkz_src_parse(&x, t, nt, &ti, s, ns, &si));
    if (ti != nt - 1 || si != ns || k < 1 || x.ng != 1 || x.w != k || c0 < 0) return PK_EARGS;
    const pk_tensor *y = &t[ti];
    if (y->ndim != 4) return PK_EARGS;
    const int32_t c_n = y->size[1];
    if (c0 + x.c > c_n) return PK_EARGS;
    TAKE(pkz_out4(y, x.b, c_n, 1));
    if (y->size[2] != 1) return PK_EARGS;
    if (prev->dtype != PK_NONE) {
        TAKE(pkz_out4(prev, x.b, c_n, 1));
        if (prev->size[2] != 1) return PK_EARGS;
    }
    const float scale = 1.0f / (float)(k * k);
    for (int32_t b = 0; b < x.b; b++)
        for (int32_t c = 0; c < c_n; c++) {
            const float before = prev->dtype == PK_NONE ? 0.0f : pkz_at(prev, b, c, 0)[0];
            if (c < c0 || c >= c0 + x.c) { /* channels this step's piece does not hold: carried over */
                pkz_at(y, b, c, 0)[0] = before;
                continue;
            }
            float acc = 0.0f;
            for (int32_t ih = lo; ih < hi; ih++) {
                const float *xr = pkz_row(&x, 0, b, c - c0, ih);
                if (!xr) return PK_EARGS;
                for (int32_t iw = 0; iw < k; iw++) acc += xr[iw];
            }
            pkz_at(y, b, c, 0)[0] = before + acc * scale;
        }
    return PK_OK;
}

PK_KERNEL(zoo_avgpool_grad) {
    if (nt < 2 || ns < 5) return PK_EARGS;
    const int32_t k = (int32_t)s[0].i, lo = (int32_t)s[1].i, hout = (int32_t)s[2].i;
    int ti = 0, si = 3;
    pkz_src dy;
    TAKE(pkz_src_parse(&dy, t, nt, &ti, s, ns, &si));
    if (ti != nt - 1 || si != ns || k < 1) return PK_EARGS;
    const pk_tensor *dx = &t[ti];
    if (dx->ndim != 4) return PK_EARGS;
    TAKE(pkz_out4(dx, dy.b, dy.c, dx->size[3]));
    const float scale = 1.0f / (float)(k * k);
    for (int32_t b = 0; b < dy.b; b++)
        for (int32_t c = 0; c < dy.c; c++)
            for (int32_t r = 0; r < dx->size[2]; r++) {
                float *dxr = pkz_at(dx, b, c, r);
                const int32_t oh = (lo + r) / k;
                for (int32_t iw = 0; iw < dx->size[3]; iw++) dxr[iw] = 0.0f;
                if (oh >= hout) continue;
                for (int g = 0; g < dy.ng; g++) {
                    const float *dyr = pkz_row(&dy, g, b, c, oh);
                    if (!dyr) return PK_EARGS;
                    for (int32_t iw = 0; iw < dx->size[3]; iw++)
                        if (iw / k < dy.w) dxr[iw] += dyr[iw / k] * scale;
                }
            }
    return PK_OK;
}

/* ------------------------------------------------------------------ dense layers on flat vectors */

static int weight2(const pk_tensor *w) {
    if (w->dtype != PK_F32) return PK_EDTYPE;
    return (w->ndim == 2 && pk_contiguous(w)) ? PK_OK : PK_EARGS;
}

PK_KERNEL(zoo_linear) {
    if (nt < 4 || ns < 3) return PK_EARGS;
    const pk_tensor *W = &t[0], *bias = &t[1];
    TAKE(weight2(W));
    const int32_t on = W->size[0], in = W->size[1];
    TAKE(pkz_vec(bias, on, 1));
    const int32_t lo = (int32_t)s[0].i;
    int ti = 2, si = 1;
    pkz_src x;
    TAKE(pkz_src_parse(&x, t, nt, &ti, s, ns, &si));
    if (ti != nt - 1 || si != ns || x.ng != 1 || x.c != 1 || x.w != 1) return PK_EARGS;
    const pk_tensor *y = &t[ti];
    TAKE(pkz_out4(y, x.b, 1, 1));
    if (lo < 0 || lo + y->size[2] > on) return PK_EARGS;
    const pk_tensor *p0;
    const pk_scalar *starts;
    const int32_t np = pkz_npieces(&x, 0, &p0, &starts);
    int64_t covered = 0;
    for (int32_t q = 0; q < np; q++) {
        if (starts[2 * q].i < 0 || starts[2 * q].i + p0[q].size[2] > in || starts[2 * q + 1].i != 0) return PK_EARGS;
        covered += p0[q].size[2];
    }
    if (covered != in) return PK_EARGS;
    const float *w = (const float *)W->data;
    const float *bv = bias->dtype == PK_NONE ? 0 : (const float *)bias->data;
    for (int32_t b = 0; b < x.b; b++)
        for (int32_t r = 0; r < y->size[2]; r++) {
            const int32_t o = lo + r;
            float acc = 0.0f;
            for (int32_t q = 0; q < np; q++) {
                const float *xp = (const float *)p0[q].data + (int64_t)b * p0[q].stride[0];
                const float *wr = w + (int64_t)o * in + starts[2 * q].i;
                for (int32_t i = 0; i < p0[q].size[2]; i++) acc += xp[(int64_t)i * p0[q].stride[2]] * wr[i];
            }
            pkz_at(y, b, 0, r)[0] = bv ? acc + bv[o] : acc;
        }
    return PK_OK;
}

PK_KERNEL(zoo_linear_grad_input) {
    if (nt < 3 || ns < 3) return PK_EARGS;
    const pk_tensor *W = &t[0];
    TAKE(weight2(W));
    const int32_t on = W->size[0], in = W->size[1];
    const int32_t lo = (int32_t)s[0].i;
    int ti = 1, si = 1;
    pkz_src dy;
    TAKE(pkz_src_parse(&dy, t, nt, &ti, s, ns, &si));
    if (ti != nt - 1 || si != ns || dy.c != 1 || dy.w != 1) return PK_EARGS;
    const pk_tensor *dx = &t[ti];
    TAKE(pkz_out4(dx, dy.b, 1, 1));
    if (lo < 0 || lo + dx->size[2] > in) return PK_EARGS;
    const float *w = (const float *)W->data;
    for (int32_t b = 0; b < dy.b; b++)
        for (int32_t r = 0; r < dx->size[2]; r++) {
            const int32_t i = lo + r;
            float acc = 0.0f;
            for (int g = 0; g < dy.ng; g++)
                for (int32_t o = 0; o < on; o++) {
                    const float *d = pkz_row(&dy, g, b, 0, o);
                    if (!d) return PK_EARGS;
                    acc += d[0] * w[(int64_t)o * in + i];
                }
            pkz_at(dx, b, 0, r)[0] = acc;
        }
    return PK_OK;
}

PK_KERNEL(zoo_linear_weight_grad) {
    if (nt < 4 || ns < 5) return PK_EARGS;
    const int32_t lo = (int32_t)s[0].i, hi = (int32_t)s[1].i;
    const int accumulate = s[2].i != 0;
    int ti = 0, si = 3;
    pkz_src x, dy;
    TAKE(pkz_src_parse(&x, t, nt, &ti, s, ns, &si));
    TAKE(pkz_src_parse(&dy, t, nt, &ti, s, ns, &si));
    if (ti != nt - 2 || si != ns || x.ng != 1 || x.b != dy.b || x.c != 1 || x.w != 1 || dy.c != 1 || dy.w != 1)
        return PK_EARGS;
    const pk_tensor *dW = &t[ti], *db = &t[ti + 1];
    TAKE(weight2(dW));
    const int32_t on = dW->size[0], in = dW->size[1];
    TAKE(pkz_vec(db, on, 1));
    if (lo < 0 || hi > on || lo > hi) return PK_EARGS;
    float *dw = (float *)dW->data;
    float *dbv = db->dtype == PK_NONE ? 0 : (float *)db->data;
    for (int32_t o = lo; o < hi; o++) {
        float bacc = 0.0f;
        for (int32_t i = 0; i < in; i++) {
            float acc = 0.0f;
            for (int g = 0; g < dy.ng; g++)
                for (int32_t b = 0; b < x.b; b++) {
                    const float *d = pkz_row(&dy, g, b, 0, o);
                    const float *xv = pkz_row(&x, 0, b, 0, i);
                    if (!d || !xv) return PK_EARGS;
                    acc += d[0] * xv[0];
                }
            dw[(int64_t)o * in + i] = accumulate ? dw[(int64_t)o * in + i] + acc : acc;
        }
        if (dbv) {
            for (int g = 0; g < dy.ng; g++)
                for (int32_t b = 0; b < x.b; b++) bacc += pkz_row(&dy, g, b, 0, o)[0];
            dbv[o] = accumulate ? dbv[o] + bacc : bacc;
        }
    }
    return PK_OK;
}

/* ------------------------------------------------------------------ flatten */

PK_KERNEL(zoo_flatten) {
    if (nt < 2 || ns < 4) return PK_EARGS;
    const int32_t lo = (int32_t)s[0].i, h = (int32_t)s[1].i;
    int ti = 0, si = 2;
    pkz_src x;
    TAKE(pkz_src_parse(&x, t, nt, &ti, s, ns, &si));
    if (ti != nt - 1 || si != ns || x.ng != 1 || h < 1) return PK_EARGS;
    const pk_tensor *y = &t[ti];
    TAKE(pkz_out4(y, x.b, 1, 1));
    const int32_t hw = h * x.w;
    if (lo < 0 || lo + y->size[2] > x.c * hw) return PK_EARGS;
    for (int32_t b = 0; b < x.b; b++)
        for (int32_t r = 0; r < y->size[2]; r++) {
            const int32_t f = lo + r;
            const float *xr = pkz_row(&x, 0, b, f / hw, (f % hw) / x.w);
            if (!xr) return PK_EARGS;
            pkz_at(y, b, 0, r)[0] = xr[f % x.w];
        }
    return PK_OK;
}

PK_KERNEL(zoo_unflatten) {
    if (nt < 2 || ns < 5) return PK_EARGS;
    const int32_t lo = (int32_t)s[0].i, h = (int32_t)s[1].i, c0 = (int32_t)s[2].i;
    int ti = 0, si = 3;
    pkz_src dy;
    TAKE(pkz_src_parse(&dy, t, nt, &ti, s, ns, &si));
    if (ti != nt - 1 || si != ns || dy.c != 1 || dy.w != 1 || h < 1 || c0 < 0) return PK_EARGS;
    const pk_tensor *dx = &t[ti];
    if (dx->ndim != 4) return PK_EARGS;
    TAKE(pkz_out4(dx, dy.b, dx->size[1], dx->size[3]));
    const int32_t w = dx->size[3];
    for (int32_t b = 0; b < dy.b; b++)
        for (int32_t c = 0; c < dx->size[1]; c++)
            for (int32_t r = 0; r < dx->size[2]; r++) {
                float *dxr = pkz_at(dx, b, c, r);
                for (int32_t iw = 0; iw < w; iw++) {
                    const int32_t f = ((c0 + c) * h + lo + r) * w + iw;
                    float acc = 0.0f;
                    for (int g = 0; g < dy.ng; g++) {
                        const float *d = pkz_row(&dy, g, b, 0, f);
                        if (!d) return PK_EARGS;
                        acc += d[0];
                    }
                    dxr[iw] = acc;
                }
            }
    return PK_OK;
}
