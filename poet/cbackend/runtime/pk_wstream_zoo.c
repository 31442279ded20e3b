/* pk_wstream_zoo.c: the zoo graph's convolution and linear kernels with their weights in storage
   (--weights stream), on row tiles and groups of output channels, reading tensors through row sources
   (pk_zoo.h) like kernels_zoo.c.

   A layer's parameters are one block in the weight file (its gradient: the block at the same offset in
   the gradient file), one record per output channel: W[co] (cin x k x k, row-major; a linear layer's
   row W[o]) then b[co] when the layer has a bias.  A group of output channels [a, b) is records a..b,
   one contiguous range (its offset and channel count are given).  Every kernel moves its range through
   the staging buffer the step bound (pk_ws_bind), one counted transfer per chunk of at most the
   buffer's bytes, as poet.graph.weight_traffic prices it: the forward and the grad-input read the range
   (every chunk, also those a row tile does not use), the weight gradient writes it (first) or reads,
   adds to and writes back each chunk.  Each chunk adds what its elements contribute, so a record split
   between chunks keeps its order of summation.

   zoo_ws_conv              x src, y            | off, cout, cin, k, bias, stride, pad, lo, H_in, <x>
   zoo_ws_conv_grad_input   dy src, dx          | off, cout, cin, k, bias, stride, pad, lo, H_out, c0, c1, <dy>
                            (dx: input channels [c0, c1); it reads the whole block, as priced: a group of
                            input channels is a strided share of it, a segment of every record)
   zoo_ws_conv_weight_grad  x src, dy src       | off, cout, cin, k, bias, first, stride, pad, lo, hi, H_in, <x>, <dy>
   zoo_ws_linear            x src, y            | off, out, in, 1, bias, lo, <x>
   zoo_ws_linear_grad_input dy src, dx          | off, out, in, 1, bias, lo, <dy>
   zoo_ws_linear_weight_grad x src, dy src      | off, out, in, 1, bias, first, lo, hi, <x>, <dy>
   zoo_ws_read_zero         dx                  | off, floats     (a grad-input tile no output row reaches:
                                                                   it reads its weights as priced, dx = 0)
   BatchNorm: a record per channel is [gamma, beta] (its gradient [dgamma, dbeta]); chunks hold whole records
   (the staging buffer is a multiple of 8 B); each channel is computed by kernels_zoo_norm.c's own code:
   zoo_ws_bn                stats|NONE, x src, y                  | off, C, lo, H, eps, <x>
   zoo_ws_bn_grad           fstats|NONE, bstats|NONE, dy src, x src, dx
                                                                  | off, C, makes, first, lo, hi, H, eps, <dy>, <x>
                            (makes: it also adds rows [lo, hi)'s share of the parameter gradients, a second pass)
   zoo_ws_bn_grad_stats     as zoo_bn_grad_stats (its dgamma, dbeta NONE) | off, C, first, then its scalars:
                            the chain step, then rows [lo, hi)'s share added to the gradient in storage */
#include <string.h>

#include "pk.h"
#include "pk_wstream.h"
#include "pk_zoo.h"
#include "pk_zoo_norm.h"

PK_KERNEL(zoo_bn_grad_stats);

#define TAKE(expr)                     \
    do {                               \
        int take_rc_ = (expr);         \
        if (take_rc_) return take_rc_; \
    } while (0)

typedef struct {
    uint32_t off, total, rec, kk; /* byte offset, floats in the range, floats per record, k * k */
    int32_t cout, cin, k, bias;
} ws_block;

static int block_of(const pk_scalar *s, ws_block *b) {
    b->off = (uint32_t)s[0].i, b->cout = (int32_t)s[1].i, b->cin = (int32_t)s[2].i, b->k = (int32_t)s[3].i;
    b->bias = s[4].i != 0;
    if (b->cout < 1 || b->cin < 1 || b->k < 1 || s[0].i < 0) return PK_EARGS;
    b->kk = (uint32_t)(b->k * b->k);
    b->rec = (uint32_t)b->cin * b->kk + (uint32_t)b->bias;
    b->total = (uint32_t)b->cout * b->rec;
    return PK_OK;
}

/* The chunks of a range of `total` floats at byte `off` of a file, each in the staging buffer in turn. */
typedef struct {
    int file; /* where each chunk is read from; -1: zeroed instead (a gradient written first) */
    uint32_t off, total, per, c0, c1;
    float *buf;
} ws_chunks;

/* per: whole multiples of `multiple` floats a chunk (BatchNorm's records of 2) */
static int chunks_start(ws_chunks *it, int file, uint32_t off, uint32_t total, uint32_t multiple) {
    uint32_t bytes;
    it->buf = pk_ws_staging(&bytes);
    it->per = bytes / 4;
    it->file = file, it->off = off, it->total = total, it->c0 = it->c1 = 0;
    return (it->buf && it->per > 0 && it->per % multiple == 0) ? PK_OK : PK_EARGS;
}

/* the next chunk, floats [c0, c1) of the range, in buf: 1; 0 after the last; minus an error code */
static int chunks_next(ws_chunks *it) {
    it->c0 = it->c1;
    if (it->c0 >= it->total) return 0;
    it->c1 = it->c0 + it->per < it->total ? it->c0 + it->per : it->total;
    const uint32_t n = 4u * (it->c1 - it->c0);
    if (it->file < 0) {
        memset(it->buf, 0, n);
        return 1;
    }
    const int rc = pk_ws_read(it->file, it->off + 4u * it->c0, it->buf, n);
    return rc ? -rc : 1;
}

/* the current chunk written back to file f */
static int chunks_put(const ws_chunks *it, int f) {
    return pk_ws_write(f, it->off + 4u * it->c0, it->buf, 4u * (it->c1 - it->c0));
}

static void zero4(const pk_tensor *y) {
    for (int32_t b = 0; b < y->size[0]; b++)
        for (int32_t c = 0; c < y->size[1]; c++)
            for (int32_t r = 0; r < y->size[2]; r++) memset(pkz_at(y, b, c, r), 0, (size_t)y->size[3] * sizeof(float));
}

/* ------------------------------------------------------------------ convolution */

PK_KERNEL(zoo_ws_conv) {
    if (nt < 2 || ns < 10) return PK_EARGS;
    ws_block B;
    TAKE(block_of(s, &B));
    const int32_t st = (int32_t)s[5].i, pad = (int32_t)s[6].i, lo = (int32_t)s[7].i, hin = (int32_t)s[8].i;
    int ti = 0, si = 9;
    pkz_src x;
    TAKE(pkz_src_parse(&x, t, nt, &ti, s, ns, &si));
    if (ti != nt - 1 || si != ns || st < 1 || x.c != B.cin || x.ng != 1) return PK_EARGS;
    const pk_tensor *y = &t[ti];
    const int32_t win = x.w, wo = (win + 2 * pad - B.k) / st + 1, k = B.k;
    TAKE(pkz_out4(y, x.b, B.cout, wo));
    ws_chunks it;
    TAKE(chunks_start(&it, pk_ws_wfile(), B.off, B.total, 1));
    zero4(y);
    int more;
    while ((more = chunks_next(&it)) > 0)
        for (uint32_t e = it.c0; e < it.c1; e++) {
            const float w = it.buf[e - it.c0];
            const int32_t co = (int32_t)(e / B.rec);
            const uint32_t j = e % B.rec;
            if (j == (uint32_t)B.cin * B.kk) { /* the bias, after the channel's weights */
                for (int32_t b = 0; b < x.b; b++)
                    for (int32_t r = 0; r < y->size[2]; r++) {
                        float *yr = pkz_at(y, b, co, r);
                        for (int32_t ow = 0; ow < wo; ow++) yr[ow] += w;
                    }
                continue;
            }
            const int32_t ci = (int32_t)(j / B.kk), kh = (int32_t)((j % B.kk) / (uint32_t)k), kw = (int32_t)(j % (uint32_t)k);
            for (int32_t b = 0; b < x.b; b++)
                for (int32_t r = 0; r < y->size[2]; r++) {
                    const int32_t ih = (lo + r) * st - pad + kh;
                    if (ih < 0 || ih >= hin) continue;
                    const float *xr = pkz_row(&x, 0, b, ci, ih);
                    if (!xr) return PK_EARGS;
                    float *yr = pkz_at(y, b, co, r);
                    for (int32_t ow = 0; ow < wo; ow++) {
                        const int32_t iw = ow * st - pad + kw;
                        if (iw >= 0 && iw < win) yr[ow] += w * xr[iw];
                    }
                }
        }
    if (more < 0) return -more;
    return PK_OK;
}

PK_KERNEL(zoo_ws_conv_grad_input) {
    if (nt < 2 || ns < 12) return PK_EARGS;
    ws_block B;
    TAKE(block_of(s, &B));
    const int32_t st = (int32_t)s[5].i, pad = (int32_t)s[6].i, lo = (int32_t)s[7].i, hout = (int32_t)s[8].i;
    const int32_t c0 = (int32_t)s[9].i, c1 = (int32_t)s[10].i;
    int ti = 0, si = 11;
    pkz_src dy;
    TAKE(pkz_src_parse(&dy, t, nt, &ti, s, ns, &si));
    if (ti != nt - 1 || si != ns || st < 1 || dy.c != B.cout) return PK_EARGS;
    if (c0 < 0 || c1 <= c0 || c1 > B.cin) return PK_EARGS;
    const pk_tensor *dx = &t[ti];
    if (dx->ndim != 4) return PK_EARGS;
    const int32_t win = dx->size[3], wo = dy.w, k = B.k;
    TAKE(pkz_out4(dx, dy.b, c1 - c0, win));
    if ((win + 2 * pad - k) / st + 1 != wo) return PK_EARGS;
    ws_chunks it;
    TAKE(chunks_start(&it, pk_ws_wfile(), B.off, B.total, 1));
    zero4(dx);
    int more;
    while ((more = chunks_next(&it)) > 0)
        for (uint32_t e = it.c0; e < it.c1; e++) {
            const uint32_t j = e % B.rec;
            if (j == (uint32_t)B.cin * B.kk) continue; /* the bias takes no part */
            const float w = it.buf[e - it.c0];
            const int32_t co = (int32_t)(e / B.rec);
            const int32_t ci = (int32_t)(j / B.kk), kh = (int32_t)((j % B.kk) / (uint32_t)k), kw = (int32_t)(j % (uint32_t)k);
            if (ci < c0 || ci >= c1) continue; /* another group's input channel: read, not used */
            for (int g = 0; g < dy.ng; g++)
                for (int32_t b = 0; b < dy.b; b++)
                    for (int32_t r = 0; r < dx->size[2]; r++) {
                        const int32_t num = lo + r + pad - kh;
                        if (num < 0 || num % st) continue;
                        const int32_t oh = num / st;
                        if (oh >= hout) continue;
                        const float *dyr = pkz_row(&dy, g, b, co, oh);
                        if (!dyr) return PK_EARGS;
                        float *dxr = pkz_at(dx, b, ci - c0, r);
                        for (int32_t ow = 0; ow < wo; ow++) {
                            const int32_t iw = ow * st - pad + kw;
                            if (iw >= 0 && iw < win) dxr[iw] += w * dyr[ow];
                        }
                    }
        }
    if (more < 0) return -more;
    return PK_OK;
}

/* Each chunk of the gradient: zeroed (first) or read, the elements' contributions added, written back. */
PK_KERNEL(zoo_ws_conv_weight_grad) {
    if (nt < 2 || ns < 13) return PK_EARGS;
    ws_block B;
    TAKE(block_of(s, &B));
    const int first = s[5].i != 0;
    const int32_t st = (int32_t)s[6].i, pad = (int32_t)s[7].i, lo = (int32_t)s[8].i, hi = (int32_t)s[9].i;
    const int32_t hin = (int32_t)s[10].i, k = B.k;
    int ti = 0, si = 11;
    pkz_src x, dy;
    TAKE(pkz_src_parse(&x, t, nt, &ti, s, ns, &si));
    TAKE(pkz_src_parse(&dy, t, nt, &ti, s, ns, &si));
    if (ti != nt || si != ns || st < 1 || x.ng != 1 || x.b != dy.b || x.c != B.cin || dy.c != B.cout) return PK_EARGS;
    if ((x.w + 2 * pad - k) / st + 1 != dy.w || lo < 0 || hi < lo) return PK_EARGS;
    const int32_t win = x.w, wo = dy.w;
    const int gf = pk_ws_gfile();
    ws_chunks it;
    TAKE(chunks_start(&it, first ? -1 : gf, B.off, B.total, 1));
    int more;
    while ((more = chunks_next(&it)) > 0) {        for (uint32_t e = it.c0; e < it.c1; e++) {
            const int32_t co = (int32_t)(e / B.rec);
            const uint32_t j = e % B.rec;
            const int is_bias = j == (uint32_t)B.cin * B.kk;
            const int32_t ci = (int32_t)(j / B.kk), kh = (int32_t)((j % B.kk) / (uint32_t)k), kw = (int32_t)(j % (uint32_t)k);
            float acc = 0.0f;
            for (int g = 0; g < dy.ng; g++)
                for (int32_t b = 0; b < x.b; b++)
                    for (int32_t oh = lo; oh < hi; oh++) {
                        const float *dyr = pkz_row(&dy, g, b, co, oh);
                        if (!dyr) return PK_EARGS;
                        if (is_bias) {
                            for (int32_t ow = 0; ow < wo; ow++) acc += dyr[ow];
                            continue;
                        }
                        const int32_t ih = oh * st - pad + kh;
                        if (ih < 0 || ih >= hin) continue;
                        const float *xr = pkz_row(&x, 0, b, ci, ih);
                        if (!xr) return PK_EARGS;
                        for (int32_t ow = 0; ow < wo; ow++) {
                            const int32_t iw = ow * st - pad + kw;
                            if (iw >= 0 && iw < win) acc += dyr[ow] * xr[iw];
                        }
                    }
            it.buf[e - it.c0] += acc;
        }
        TAKE(chunks_put(&it, gf));
    }
    return more < 0 ? -more : PK_OK;
}

/* ------------------------------------------------------------------ linear (flat vectors: (B, 1, F, 1)) */

static const float *flat(const pkz_src *src, int g, int32_t b, int32_t f) { return pkz_row(src, g, b, 0, f); }

PK_KERNEL(zoo_ws_linear) {
    if (nt < 2 || ns < 7) return PK_EARGS;
    ws_block B;
    TAKE(block_of(s, &B));
    const int32_t lo = (int32_t)s[5].i;
    int ti = 0, si = 6;
    pkz_src x;
    TAKE(pkz_src_parse(&x, t, nt, &ti, s, ns, &si));
    if (ti != nt - 1 || si != ns || B.k != 1 || x.ng != 1 || x.c != 1 || x.w != 1) return PK_EARGS;
    const pk_tensor *y = &t[ti];
    TAKE(pkz_out4(y, x.b, 1, 1));
    const int32_t rows = y->size[2];
    if (lo < 0 || lo + rows > B.cout) return PK_EARGS;
    ws_chunks it;
    TAKE(chunks_start(&it, pk_ws_wfile(), B.off, B.total, 1));
    zero4(y);
    int more;
    while ((more = chunks_next(&it)) > 0)
        for (uint32_t e = it.c0; e < it.c1; e++) {
            const int32_t o = (int32_t)(e / B.rec), i = (int32_t)(e % B.rec);
            if (o < lo || o >= lo + rows) continue; /* read as priced (a row tile reads the block), not used */
            const float w = it.buf[e - it.c0];
            for (int32_t b = 0; b < x.b; b++) {
                float *yo = pkz_at(y, b, 0, o - lo);
                if (i == B.cin) {
                    *yo += w;
                } else {
                    const float *xi = flat(&x, 0, b, i);
                    if (!xi) return PK_EARGS;
                    *yo += w * *xi;
                }
            }
        }
    if (more < 0) return -more;
    return PK_OK;
}

PK_KERNEL(zoo_ws_linear_grad_input) {
    if (nt < 2 || ns < 7) return PK_EARGS;
    ws_block B;
    TAKE(block_of(s, &B));
    const int32_t lo = (int32_t)s[5].i;
    int ti = 0, si = 6;
    pkz_src dy;
    TAKE(pkz_src_parse(&dy, t, nt, &ti, s, ns, &si));
    if (ti != nt - 1 || si != ns || B.k != 1 || dy.c != 1 || dy.w != 1) return PK_EARGS;
    const pk_tensor *dx = &t[ti];
    TAKE(pkz_out4(dx, dy.b, 1, 1));
    const int32_t rows = dx->size[2];
    if (lo < 0 || lo + rows > B.cin) return PK_EARGS;
    ws_chunks it;
    TAKE(chunks_start(&it, pk_ws_wfile(), B.off, B.total, 1));
    zero4(dx);
    int more;
    while ((more = chunks_next(&it)) > 0)
        for (uint32_t e = it.c0; e < it.c1; e++) {
            const int32_t o = (int32_t)(e / B.rec), i = (int32_t)(e % B.rec);
            if (i == B.cin || i < lo || i >= lo + rows) continue;
            const float w = it.buf[e - it.c0];
            for (int g = 0; g < dy.ng; g++)
                for (int32_t b = 0; b < dy.b; b++) {
                    const float *d = flat(&dy, g, b, o);
                    if (!d) return PK_EARGS;
                    *pkz_at(dx, b, 0, i - lo) += w * *d;
                }
        }
    if (more < 0) return -more;
    return PK_OK;
}

PK_KERNEL(zoo_ws_linear_weight_grad) {
    if (nt < 2 || ns < 10) return PK_EARGS;
    ws_block B;
    TAKE(block_of(s, &B));
    const int first = s[5].i != 0;
    const int32_t lo = (int32_t)s[6].i, hi = (int32_t)s[7].i;
    int ti = 0, si = 8;
    pkz_src x, dy;
    TAKE(pkz_src_parse(&x, t, nt, &ti, s, ns, &si));
    TAKE(pkz_src_parse(&dy, t, nt, &ti, s, ns, &si));
    if (ti != nt || si != ns || B.k != 1 || x.ng != 1 || x.b != dy.b || lo < 0 || hi < lo || hi > B.cout) return PK_EARGS;
    const int gf = pk_ws_gfile();
    ws_chunks it;
    TAKE(chunks_start(&it, first ? -1 : gf, B.off, B.total, 1));
    int more;
    while ((more = chunks_next(&it)) > 0) {        for (uint32_t e = it.c0; e < it.c1; e++) {
            const int32_t o = (int32_t)(e / B.rec), i = (int32_t)(e % B.rec);
            if (o < lo || o >= hi) continue; /* another tile's rows: written back as they are */
            float acc = 0.0f;
            for (int g = 0; g < dy.ng; g++)
                for (int32_t b = 0; b < x.b; b++) {
                    const float *d = flat(&dy, g, b, o);
                    if (!d) return PK_EARGS;
                    if (i == B.cin) {
                        acc += *d;
                    } else {
                        const float *xi = flat(&x, 0, b, i);
                        if (!xi) return PK_EARGS;
                        acc += *d * *xi;
                    }
                }
            it.buf[e - it.c0] += acc;
        }
        TAKE(chunks_put(&it, gf));
    }
    return more < 0 ? -more : PK_OK;
}

PK_KERNEL(zoo_ws_read_zero) {
    if (nt != 1 || ns != 2 || s[0].i < 0 || s[1].i < 0 || t[0].ndim != 4 || t[0].dtype != PK_F32) return PK_EARGS;
    ws_chunks it;
    TAKE(chunks_start(&it, pk_ws_wfile(), (uint32_t)s[0].i, (uint32_t)s[1].i, 1));
    int more;
    while ((more = chunks_next(&it)) > 0) continue;
    zero4(&t[0]);
    return more < 0 ? -more : PK_OK;
}

/* ------------------------------------------------------------------ BatchNorm */

/* rows [lo, hi)'s share of channels [0, C)'s parameter gradients added to records at off (first: written) */
static int bn_add_grads(const pk_tensor *fst, const pkz_src *dy, const pkz_src *x, uint32_t off, int32_t nch, int first,
                        int32_t lo, int32_t hi, int32_t h, double eps) {
    const int gf = pk_ws_gfile();
    ws_chunks it;
    TAKE(chunks_start(&it, first ? -1 : gf, off, 2u * (uint32_t)nch, 2));
    int more;
    while ((more = chunks_next(&it)) > 0) {
        for (uint32_t e = it.c0; e < it.c1; e += 2) {
            double sdy, sdyx;
            TAKE(pkz_bn_tile_sums(fst, dy, x, (int32_t)(e / 2), lo, hi, h, eps, &sdy, &sdyx));
            it.buf[e - it.c0] += (float)sdyx;
            it.buf[e - it.c0 + 1] += (float)sdy;
        }
        TAKE(chunks_put(&it, gf));
    }
    return more < 0 ? -more : PK_OK;
}

PK_KERNEL(zoo_ws_bn) {
    if (nt < 3 || ns < 6 || s[0].i < 0) return PK_EARGS;
    const uint32_t off = (uint32_t)s[0].i;
    const int32_t nch = (int32_t)s[1].i, lo = (int32_t)s[2].i, h = (int32_t)s[3].i;
    const double eps = s[4].f;
    const pk_tensor *st = &t[0];
    int ti = 1, si = 5;
    pkz_src x;
    TAKE(pkz_src_parse(&x, t, nt, &ti, s, ns, &si));
    if (ti != nt - 1 || si != ns || x.ng != 1 || h < 1 || x.c != nch) return PK_EARGS;
    const pk_tensor *y = &t[ti];
    TAKE(pkz_bn_check(st, &x, y));
    ws_chunks it;
    TAKE(chunks_start(&it, pk_ws_wfile(), off, 2u * (uint32_t)nch, 2));
    int more;
    while ((more = chunks_next(&it)) > 0)
        for (uint32_t e = it.c0; e < it.c1; e += 2) {
            const float *rec = it.buf + (e - it.c0);
            TAKE(pkz_bn_forward_channel(st, &x, y, (int32_t)(e / 2), lo, h, eps, rec[0], rec[1]));
        }
    return more < 0 ? -more : PK_OK;
}

PK_KERNEL(zoo_ws_bn_grad) {
    if (nt < 5 || ns < 10 || s[0].i < 0) return PK_EARGS;
    const uint32_t off = (uint32_t)s[0].i;
    const int32_t nch = (int32_t)s[1].i, lo = (int32_t)s[4].i, hi = (int32_t)s[5].i, h = (int32_t)s[6].i;
    const int makes = s[2].i != 0, first = s[3].i != 0;
    const double eps = s[7].f;
    const pk_tensor *fst = &t[0], *bst = &t[1];
    int ti = 2, si = 8;
    pkz_src dy, x;
    TAKE(pkz_src_parse(&dy, t, nt, &ti, s, ns, &si));
    TAKE(pkz_src_parse(&x, t, nt, &ti, s, ns, &si));
    if (ti != nt - 1 || si != ns || x.ng != 1 || h < 1 || x.c != nch) return PK_EARGS;
    const pk_tensor *dx = &t[ti];
    TAKE(pkz_bn_grad_check(fst, bst, &dy, &x, dx));
    ws_chunks it;
    TAKE(chunks_start(&it, pk_ws_wfile(), off, 2u * (uint32_t)nch, 2));
    int more;
    while ((more = chunks_next(&it)) > 0)
        for (uint32_t e = it.c0; e < it.c1; e += 2) {
            double sdy, sdyx;
            TAKE(pkz_bn_grad_channel(fst, bst, &dy, &x, dx, (int32_t)(e / 2), lo, h, eps, it.buf[e - it.c0], &sdy, &sdyx));
        }
    if (more < 0) return -more;
    return makes ? bn_add_grads(fst, &dy, &x, off, nch, first, lo, hi, h, eps) : PK_OK;
}

PK_KERNEL(zoo_ws_bn_grad_stats) {
    if (nt < 7 || ns < 10 || s[0].i < 0) return PK_EARGS;
    const uint32_t off = (uint32_t)s[0].i;
    const int32_t nch = (int32_t)s[1].i;
    const int first = s[2].i != 0;
    const pk_scalar *cs = s + 3; /* zoo_bn_grad_stats' own scalars: lo, hi, H, eps, <dy>, <x> */
    if (t[nt - 2].dtype != PK_NONE || t[nt - 1].dtype != PK_NONE) return PK_EARGS;
    TAKE(pk_zoo_bn_grad_stats(t, nt, cs, ns - 3));
    int ti = 2, si = 4;
    pkz_src dy, x;
    TAKE(pkz_src_parse(&dy, t, nt, &ti, cs, ns - 3, &si));
    TAKE(pkz_src_parse(&x, t, nt, &ti, cs, ns - 3, &si));
    if (x.c != nch) return PK_EARGS;
    return bn_add_grads(&t[1], &dy, &x, off, nch, first, (int32_t)cs[0].i, (int32_t)cs[1].i, (int32_t)cs[2].i, cs[3].f);
}
