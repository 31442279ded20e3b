/* pk_wstream.c: see pk_wstream.h. */
#include "pk_wstream.h"

#include "pk_platform.h"

static uint64_t moved[4];

void pk_ws_counters(uint64_t out[4]) {
    for (int k = 0; k < 4; k++) out[k] = moved[k];
}

void pk_ws_reset(void) {
    for (int k = 0; k < 4; k++) moved[k] = 0;
}

static int store_w = -1, store_g = -1;
static float *store_buf;
static uint32_t store_bytes;

void pk_ws_bind(int wfile, int gfile, float *staging, uint32_t staging_bytes) {
    store_w = wfile, store_g = gfile, store_buf = staging, store_bytes = staging_bytes;
}

int pk_ws_wfile(void) { return store_w; }
int pk_ws_gfile(void) { return store_g; }

float *pk_ws_staging(uint32_t *staging_bytes) {
    *staging_bytes = store_bytes;
    return store_buf;
}

static int rd(int f, uint32_t off, void *dst, uint32_t n) {
    moved[0] += n;
    moved[2] += 1;
    return pk_file_read(f, off, dst, n) == 0 ? 0 : 4;
}

static int wr(int f, uint32_t off, const void *src, uint32_t n) {
    moved[1] += n;
    moved[3] += 1;
    return pk_file_write(f, off, src, n) == 0 ? 0 : 4;
}

int pk_ws_read(int f, uint32_t off, void *dst, uint32_t n) { return rd(f, off, dst, n); }
int pk_ws_write(int f, uint32_t off, const void *src, uint32_t n) { return wr(f, off, src, n); }

/* the chunk of a block of `total` floats that starts at float s: its end (at most `per` floats on), and,
   with a file f >= 0, its read into staging */
static int chunk(uint32_t total, uint32_t per, int f, uint32_t offset, uint32_t s, uint32_t *e, float *staging) {
    *e = s + per < total ? s + per : total;
    return f >= 0 ? rd(f, offset + 4 * s, staging, 4 * (*e - s)) : 0;
}

static int bad(int n, int in, int out, uint32_t staging_bytes) {
    return n < 1 || in < 1 || out < 1 || staging_bytes < 8 || staging_bytes % 4 != 0;
}

/* y = x W^T + b: each chunk of the block adds what its elements contribute (W[o][i] to y[:, o] in
   order of i, then b[o]); a row of W may span chunks, the sums keep their order. */
int pk_ws_linear_forward(int wfile, uint32_t offset, int n, int in, int out, const float *x, float *y,
                         float *staging, uint32_t staging_bytes) {
    if (bad(n, in, out, staging_bytes)) return 1;
    const uint32_t total = (uint32_t)out * (uint32_t)(in + 1), per = staging_bytes / 4, nw = (uint32_t)out * in;
    for (int r = 0; r < n; r++)
        for (int o = 0; o < out; o++) y[r * out + o] = 0.0f;
    for (uint32_t s = 0, e; s < total; s = e) {
        int rc = chunk(total, per, wfile, offset, s, &e, staging);
        if (rc) return rc;
        for (uint32_t k = s; k < e; k++) {
            float w = staging[k - s];
            if (k < nw) {
                int o = (int)(k / (uint32_t)in), i = (int)(k % (uint32_t)in);
                for (int r = 0; r < n; r++) y[r * out + o] += x[r * in + i] * w;
            } else {
                int o = (int)(k - nw);
                for (int r = 0; r < n; r++) y[r * out + o] += w;
            }
        }
    }
    return 0;
}

/* dx = dy W (the block is read whole, bias included: one contiguous read per chunk). */
int pk_ws_linear_input_grad(int wfile, uint32_t offset, int n, int in, int out, const float *dy, float *dx,
                            float *staging, uint32_t staging_bytes) {
    if (bad(n, in, out, staging_bytes)) return 1;
    const uint32_t total = (uint32_t)out * (uint32_t)(in + 1), per = staging_bytes / 4, nw = (uint32_t)out * in;
    for (int r = 0; r < n; r++)
        for (int i = 0; i < in; i++) dx[r * in + i] = 0.0f;
    for (uint32_t s = 0, e; s < total; s = e) {
        int rc = chunk(total, per, wfile, offset, s, &e, staging);
        if (rc) return rc;
        for (uint32_t k = s; k < e && k < nw; k++) {
            int o = (int)(k / (uint32_t)in), i = (int)(k % (uint32_t)in);
            float w = staging[k - s];
            for (int r = 0; r < n; r++) dx[r * in + i] += dy[r * out + o] * w;
        }
    }
    return 0;
}

/* dW = dy^T x, db = sum of dy over the rows; written (first) or added to what storage holds. */
int pk_ws_linear_weight_grad(int gfile, uint32_t offset, int n, int in, int out, const float *x, const float *dy,
                             int first, float *staging, uint32_t staging_bytes) {
    if (bad(n, in, out, staging_bytes)) return 1;
    const uint32_t total = (uint32_t)out * (uint32_t)(in + 1), per = staging_bytes / 4, nw = (uint32_t)out * in;
    for (uint32_t s = 0, e; s < total; s = e) {
        int rc = chunk(total, per, first ? -1 : gfile, offset, s, &e, staging);
        if (rc) return rc;
        for (uint32_t k = s; k < e; k++) {
            float acc = 0.0f;
            if (k < nw) {
                int o = (int)(k / (uint32_t)in), i = (int)(k % (uint32_t)in);
                for (int r = 0; r < n; r++) acc += dy[r * out + o] * x[r * in + i];
            } else {
                int o = (int)(k - nw);
                for (int r = 0; r < n; r++) acc += dy[r * out + o];
            }
            staging[k - s] = first ? acc : staging[k - s] + acc;
        }
        rc = wr(gfile, offset + 4 * s, staging, 4 * (e - s));
        if (rc) return rc;
    }
    return 0;
}

/* w -= lr * g over nbytes at offset, half the staging buffer holding weights, half gradients. */
int pk_ws_sgd(int wfile, int gfile, uint32_t offset, uint32_t nbytes, float lr, float *staging,
              uint32_t staging_bytes) {
    if (staging_bytes < 8 || staging_bytes % 4 != 0 || nbytes % 4 != 0) return 1;
    const uint32_t per = staging_bytes / 8, total = nbytes / 4;
    float *w = staging, *g = staging + per;
    for (uint32_t s = 0; s < total; s += per) {
        uint32_t e = s + per < total ? s + per : total, b = 4 * (e - s);
        int rc = rd(wfile, offset + 4 * s, w, b);
        if (!rc) rc = rd(gfile, offset + 4 * s, g, b);
        if (rc) return rc;
        for (uint32_t k = 0; k < e - s; k++) w[k] -= lr * g[k];
        rc = wr(wfile, offset + 4 * s, w, b);
        if (rc) return rc;
    }
    return 0;
}

/* ---- convolution: each chunk of the block adds what its weights contribute (see pk_wstream.h) */

typedef struct {
    int n, cin, h, w, cout, hout, wout, k, stride, pad, has_bias, rows;
    uint32_t nw, total, per; /* weights in the block, block size (floats), floats per chunk */
} conv_geom;

static uint32_t conv_block(const conv_geom *c);

static int conv_geometry(const int32_t *g, int r0, int r1, int rows, conv_geom *c, uint32_t staging_bytes) {
    c->n = g[0], c->cin = g[1], c->h = g[2], c->w = g[3], c->cout = g[4], c->hout = g[5], c->wout = g[6];
    c->k = g[7], c->stride = g[8], c->pad = g[9], c->has_bias = g[10], c->rows = r1 - r0;
    c->nw = (uint32_t)c->cout * (uint32_t)c->cin * (uint32_t)(c->k * c->k), c->per = staging_bytes / 4;
    c->total = conv_block(c);
    if (c->n < 1 || c->cin < 1 || c->h < 1 || c->w < 1 || c->cout < 1 || c->hout < 1 || c->wout < 1 || c->k < 1 ||
        c->stride < 1 || c->pad < 0 || staging_bytes < 8 || staging_bytes % 4 != 0)
        return 1;
    return (r0 < 0 || r1 <= r0 || r1 > rows) ? 1 : 0;
}

static uint32_t conv_block(const conv_geom *c) {
    return (uint32_t)c->cout * (uint32_t)c->cin * (uint32_t)(c->k * c->k) + (c->has_bias ? (uint32_t)c->cout : 0u);
}

/* the weight element k of the block: output channel o, input channel i, kernel row kh, column kw */
static void conv_index(const conv_geom *c, uint32_t k, int *o, int *i, int *kh, int *kw) {
    uint32_t kk = (uint32_t)(c->k * c->k), per_o = (uint32_t)c->cin * kk;
    *o = (int)(k / per_o);
    uint32_t rest = k % per_o;
    *i = (int)(rest / kk);
    *kh = (int)((rest % kk) / (uint32_t)c->k);
    *kw = (int)(rest % (uint32_t)c->k);
}

int pk_ws_conv2d_forward(int wfile, uint32_t offset, const int32_t *geometry, int r0, int r1, const float *x,
                         float *y, float *staging, uint32_t staging_bytes) {
    conv_geom c;
    if (conv_geometry(geometry, r0, r1, geometry[5], &c, staging_bytes)) return 1;
    const int rows = c.rows;
    const uint32_t nw = c.nw;
    for (long q = 0; q < (long)c.n * c.cout * rows * c.wout; q++) y[q] = 0.0f;
    for (uint32_t s = 0, e; s < c.total; s = e) {
        int rc = chunk(c.total, c.per, wfile, offset, s, &e, staging);
        if (rc) return rc;
        for (uint32_t k = s; k < e; k++) {
            float wv = staging[k - s];
            if (k >= nw) { /* bias */
                int o = (int)(k - nw);
                for (int b = 0; b < c.n; b++)
                    for (int r = 0; r < rows * c.wout; r++) y[((long)b * c.cout + o) * rows * c.wout + r] += wv;
                continue;
            }
            int o, i, kh, kw;
            conv_index(&c, k, &o, &i, &kh, &kw);
            for (int b = 0; b < c.n; b++)
                for (int r = 0; r < rows; r++) {
                    int hi = (r0 + r) * c.stride - c.pad + kh;
                    if (hi < 0 || hi >= c.h) continue;
                    const float *xr = x + (((long)b * c.cin + i) * c.h + hi) * c.w;
                    float *yr = y + (((long)b * c.cout + o) * rows + r) * c.wout;
                    for (int col = 0; col < c.wout; col++) {
                        int wi = col * c.stride - c.pad + kw;
                        if (wi >= 0 && wi < c.w) yr[col] += xr[wi] * wv;
                    }
                }
        }
    }
    return 0;
}

int pk_ws_conv2d_input_grad(int wfile, uint32_t offset, const int32_t *geometry, int r0, int r1, const float *dy,
                            float *dx, float *staging, uint32_t staging_bytes) {
    conv_geom c;
    if (conv_geometry(geometry, r0, r1, geometry[2], &c, staging_bytes)) return 1;
    const int rows = c.rows;
    const uint32_t nw = c.nw;
    for (long q = 0; q < (long)c.n * c.cin * rows * c.w; q++) dx[q] = 0.0f;
    for (uint32_t s = 0, e; s < c.total; s = e) {
        int rc = chunk(c.total, c.per, wfile, offset, s, &e, staging);
        if (rc) return rc;
        for (uint32_t k = s; k < e && k < nw; k++) {
            float wv = staging[k - s];
            int o, i, kh, kw;
            conv_index(&c, k, &o, &i, &kh, &kw);
            for (int b = 0; b < c.n; b++)
                for (int r = 0; r < rows; r++) {
                    int t = r0 + r + c.pad - kh; /* = output row * stride */
                    if (t < 0 || t % c.stride != 0 || t / c.stride >= c.hout) continue;
                    const float *dyr = dy + (((long)b * c.cout + o) * c.hout + t / c.stride) * c.wout;
                    float *dxr = dx + (((long)b * c.cin + i) * rows + r) * c.w;
                    for (int col = 0; col < c.w; col++) {
                        int u = col + c.pad - kw;
                        if (u >= 0 && u % c.stride == 0 && u / c.stride < c.wout) dxr[col] += dyr[u / c.stride] * wv;
                    }
                }
        }
    }
    return 0;
}

int pk_ws_conv2d_weight_grad(int gfile, uint32_t offset, const int32_t *geometry, int r0, int r1, const float *x,
                             const float *dy, int first, float *staging, uint32_t staging_bytes) {
    conv_geom c;
    if (conv_geometry(geometry, r0, r1, geometry[5], &c, staging_bytes)) return 1;
    const int rows = c.rows;
    const uint32_t nw = c.nw;
    for (uint32_t s = 0, e; s < c.total; s = e) {
        int rc = chunk(c.total, c.per, first ? -1 : gfile, offset, s, &e, staging);
        if (rc) return rc;
        for (uint32_t k = s; k < e; k++) {
            float acc = 0.0f;
            if (k >= nw) {
                int o = (int)(k - nw);
                for (int b = 0; b < c.n; b++)
                    for (int r = 0; r < rows * c.wout; r++) acc += dy[((long)b * c.cout + o) * rows * c.wout + r];
            } else {
                int o, i, kh, kw;
                conv_index(&c, k, &o, &i, &kh, &kw);
                for (int b = 0; b < c.n; b++)
                    for (int r = 0; r < rows; r++) {
                        int hi = (r0 + r) * c.stride - c.pad + kh;
                        if (hi < 0 || hi >= c.h) continue;
                        const float *xr = x + (((long)b * c.cin + i) * c.h + hi) * c.w;
                        const float *dyr = dy + (((long)b * c.cout + o) * rows + r) * c.wout;
                        for (int col = 0; col < c.wout; col++) {
                            int wi = col * c.stride - c.pad + kw;
                            if (wi >= 0 && wi < c.w) acc += dyr[col] * xr[wi];
                        }
                    }
            }
            staging[k - s] = first ? acc : staging[k - s] + acc;
        }
        rc = wr(gfile, offset + 4 * s, staging, 4 * (e - s));
        if (rc) return rc;
    }
    return 0;
}
