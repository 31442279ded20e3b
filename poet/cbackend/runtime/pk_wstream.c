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
    for (uint32_t s = 0; s < total; s += per) {
        uint32_t e = s + per < total ? s + per : total;
        int rc = rd(wfile, offset + 4 * s, staging, 4 * (e - s));
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
    for (uint32_t s = 0; s < total; s += per) {
        uint32_t e = s + per < total ? s + per : total;
        int rc = rd(wfile, offset + 4 * s, staging, 4 * (e - s));
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
    for (uint32_t s = 0; s < total; s += per) {
        uint32_t e = s + per < total ? s + per : total;
        if (!first) {
            int rc = rd(gfile, offset + 4 * s, staging, 4 * (e - s));
            if (rc) return rc;
        }
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
        int rc = wr(gfile, offset + 4 * s, staging, 4 * (e - s));
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
