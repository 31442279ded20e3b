/* pk_runtime.c: the interpreter of a compiled schedule (see pk_runtime.h), the paging store with
   size and CRC-32 checks, graph-output copies, and the SGD update.  No heap, no libc beyond
   <string.h>; everything the platform does goes through pk_platform.h. */
#include "pk_runtime.h"

#include <string.h>

#include "pk_config.h"
#include "pk_platform.h"
#include "pk_wstream.h"

/* ------------------------------------------------------------------ text without printf */

typedef struct {
    char buf[160];
    uint32_t n;
} pk_line;

static void put(pk_line *l, const char *s) {
    while (*s && l->n + 1 < sizeof l->buf) l->buf[l->n++] = *s++;
    l->buf[l->n] = 0;
}

static void put_int(pk_line *l, int64_t v) {
    char tmp[24];
    int i = 0;
    uint64_t u = v < 0 ? (uint64_t)(-(v + 1)) + 1u : (uint64_t)v;
    do {
        tmp[i++] = (char)('0' + (int)(u % 10u));
        u /= 10u;
    } while (u && i < 23);
    if (v < 0) tmp[i++] = '-';
    char out[24];
    for (int k = 0; k < i; k++) out[k] = tmp[i - 1 - k];
    out[i] = 0;
    put(l, out);
}

/* a double with 7 significant digits, as d.dddddde[+-]x (enough to read a loss; out.bin has bits) */
static void put_double(pk_line *l, double v) {
    if (v != v) {
        put(l, "nan");
        return;
    }
    if (v < 0) {
        put(l, "-");
        v = -v;
    }
    if (v > 1e300) {
        put(l, "inf");
        return;
    }
    int e = 0;
    if (v != 0.0) {
        while (v >= 10.0) { v /= 10.0; e++; }
        while (v < 1.0) { v *= 10.0; e--; }
    }
    int64_t digits = (int64_t)(v * 1e6 + 0.5);
    if (digits >= 10000000) { digits /= 10; e++; }
    char d[8];
    for (int k = 6; k >= 0; k--) { d[k] = (char)('0' + (int)(digits % 10)); digits /= 10; }
    char s[4] = {d[0], '.', 0, 0};
    put(l, s);
    char rest[7];
    for (int k = 0; k < 6; k++) rest[k] = d[k + 1];
    rest[6] = 0;
    put(l, rest);
    put(l, "e");
    put_int(l, e);
}

void pkr_print_kv(const char *label, const char *key, int64_t value, const char *key2, double value2) {
    pk_line l = {{0}, 0};
    put(&l, label);
    if (key) {
        put(&l, " ");
        put(&l, key);
        put(&l, " ");
        put_int(&l, value);
    }
    if (key2) {
        put(&l, " ");
        put(&l, key2);
        put(&l, " ");
        put_double(&l, value2);
    }
    pk_print(l.buf);
}

static void report(const pkr_model *m, uint32_t i, const char *what, const char *detail, int64_t code) {
    pk_line l = {{0}, 0};
    put(&l, "pk-error: step ");
    put_int(&l, i);
    put(&l, " (");
    put(&l, what);
    put(&l, " node ");
    put_int(&l, m->steps[i].node);
    if (m->node_names) {
        put(&l, " ");
        put(&l, m->node_names[m->steps[i].node]);
    }
    put(&l, "): ");
    put(&l, detail);
    put(&l, " ");
    put_int(&l, code);
    pk_print(l.buf);
}

/* ------------------------------------------------------------------ CRC-32 (zlib's) */

static uint32_t crc_table_entry(uint32_t c) {
    for (int k = 0; k < 8; k++) c = (c & 1u) ? 0xEDB88320u ^ (c >> 1) : c >> 1;
    return c;
}

uint32_t pkr_crc32(uint32_t crc, const uint8_t *p, uint32_t n) {
    static uint32_t table[16]; /* 4 bits at a time: 64 B of RAM, twice the speed of bitwise */
    static int ready = 0;
    if (!ready) {
        for (uint32_t i = 0; i < 16; i++) table[i] = crc_table_entry(i);
        ready = 1;
    }
    crc = ~crc;
    for (uint32_t i = 0; i < n; i++) {
        crc ^= p[i];
        crc = table[crc & 15u] ^ (crc >> 4);
        crc = table[crc & 15u] ^ (crc >> 4);
    }
    return ~crc;
}

/* ------------------------------------------------------------------ tensors and copies */

static uint32_t dtype_size(uint8_t dt) {
    switch (dt) {
        case PK_F32: case PK_I32: return 4;
        case PK_F64: case PK_I64: return 8;
        case PK_BOOL: case PK_U8: return 1;
        default: return 0;
    }
}

static void to_tensor(const pkr_model *m, const pkr_arg *a, pk_tensor *t) {
    t->dtype = a->dtype;
    t->ndim = a->ndim;
    if (a->dtype == PK_NONE) {
        t->data = NULL;
        return;
    }
    t->data = m->space[a->space] + a->offset;
    const int32_t *d = m->dims + a->dims;
    for (int k = 0; k < a->ndim; k++) {
        t->size[k] = d[k];
        t->stride[k] = d[a->ndim + k];
    }
}

/* dst[...] = src[...] element by element over dst's shape (same shape, any strides, one dtype) */
static int copy_view(const pk_tensor *dst, const pk_tensor *src) {
    uint32_t es = dtype_size((uint8_t)dst->dtype);
    if (es == 0 || dst->dtype != src->dtype || dst->ndim != src->ndim) return PK_EARGS;
    int32_t idx[PK_MAXDIM] = {0};
    uint8_t *d = (uint8_t *)dst->data;
    const uint8_t *s = (const uint8_t *)src->data;
    for (int64_t k = pk_numel(dst); k > 0; k--) {
        memcpy(d, s, es);
        for (int dd = dst->ndim - 1; dd >= 0; dd--) {
            if (++idx[dd] < dst->size[dd]) {
                d += (int64_t)dst->stride[dd] * es;
                s += (int64_t)src->stride[dd] * es;
                break;
            }
            d -= (int64_t)dst->stride[dd] * (dst->size[dd] - 1) * es;
            s -= (int64_t)src->stride[dd] * (src->size[dd] - 1) * es;
            idx[dd] = 0;
        }
    }
    return PK_OK;
}

/* ------------------------------------------------------------------ the paging store */

/* A page: its bytes, then [size, CRC-32] (the checksum lives with the page, not in RAM). */
static int page_out(const pkr_model *m, int f, const pkr_step *st) {
    const uint8_t *p = m->space[PK_SP_ARENA] + st->a;
    uint32_t head[2] = {st->b, pkr_crc32(0, p, st->b)};
    if (pk_file_write(f, st->c, p, st->b) != 0) return PK_EXIT_IO;
    if (pk_file_write(f, st->c + st->b, head, sizeof head) != 0) return PK_EXIT_IO;
    return 0;
}

static int page_in(const pkr_model *m, int f, const pkr_step *st, uint32_t i) {
    uint8_t *p = m->space[PK_SP_ARENA] + st->a;
    uint32_t head[2];
    if (pk_file_read(f, st->c + st->b, head, sizeof head) != 0) {
        report(m, i, "page_in", "cannot read the page's size and checksum at byte", (int64_t)st->c + st->b);
        return PK_EXIT_IO;
    }
    if (head[0] != st->b) {
        report(m, i, "page_in", "the page holds a different number of bytes:", (int64_t)head[0]);
        return PK_EXIT_PAGE;
    }
    if (pk_file_read(f, st->c, p, st->b) != 0) {
        report(m, i, "page_in", "cannot read the page at byte", (int64_t)st->c);
        return PK_EXIT_IO;
    }
    if (pkr_crc32(0, p, st->b) != head[1]) {
        report(m, i, "page_in", "the page is corrupt (CRC-32 mismatch); bytes", (int64_t)st->b);
        return PK_EXIT_PAGE;
    }
    return 0;
}

/* ------------------------------------------------------------------ the schedule */

#ifndef PK_MAX_TENSORS
#define PK_MAX_TENSORS 32
#endif

static int compute(const pkr_model *m, const pkr_step *st, uint32_t i) {
    pk_tensor t[PK_MAX_TENSORS];
    for (uint32_t c = st->a; c < st->a + st->b; c++) {
        const pkr_call *call = &m->calls[c];
        if (call->nt > PK_MAX_TENSORS) {
            report(m, i, "compute", "a call has more tensors than PK_MAX_TENSORS:", call->nt);
            return PK_EXIT_CONFIG;
        }
        for (int k = 0; k < call->nt; k++) to_tensor(m, &m->args[call->args + k], &t[k]);
        int rc = m->kernels[call->kernel](t, call->nt, m->scalars + call->scalars, call->ns);
        if (rc != PK_OK) {
            pk_line l = {{0}, 0};
            put(&l, "kernel pk_");
            put(&l, m->kernel_names[call->kernel]);
            put(&l, " returned");
            report(m, i, "compute", l.buf, rc);
            return PK_EXIT_KERNEL;
        }
    }
    for (uint32_t k = st->c; k < st->c + st->ncopies; k++) {
        pk_tensor d, s;
        to_tensor(m, &m->args[m->copies[k].dst], &d);
        to_tensor(m, &m->args[m->copies[k].src], &s);
        if (copy_view(&d, &s) != PK_OK) {
            report(m, i, "compute", "a graph output could not be copied; copy", k);
            return PK_EXIT_CONFIG;
        }
    }
    return 0;
}

int pkr_run_schedule(const pkr_model *m, int pages) {
    if (m->zero_grads) memset(m->space[PK_SP_GRAD], 0, m->grad_bytes);
    for (uint32_t i = 0; i < m->nsteps; i++) {
        const pkr_step *st = &m->steps[i];
        int rc = 0;
        switch (st->op) {
            case PK_OP_COMPUTE:
                rc = compute(m, st, i);
                break;
            case PK_OP_PAGE_OUT:
                rc = page_out(m, pages, st);
                if (rc) report(m, i, "page_out", "cannot write the page at byte", st->c);
                break;
            case PK_OP_PAGE_IN:
                rc = page_in(m, pages, st, i);
                break;
            case PK_OP_FREE:
                if (m->poison_freed) memset(m->space[PK_SP_ARENA] + st->a, 0xFF, st->b);
                break;
            default:
                report(m, i, "?", "unknown instruction", st->op);
                rc = PK_EXIT_CONFIG;
        }
        if (rc) return rc;
        pk_mark(i);
    }
    return 0;
}

/* ------------------------------------------------------------------ the update */

int pkr_apply_update(const pkr_model *m, uint32_t step, int out, uint32_t offset) {
    for (uint32_t k = 0; k < m->nbuffer_updates; k++) {
        const pkr_buffer_update *u = &m->buffer_updates[k];
        memcpy(m->space[PK_SP_BUFFER] + u->buffer, m->space[PK_SP_STAGING] + u->staging, u->nbytes);
    }
    const float lr = m->lr, mom = m->momentum;
    for (uint32_t k = 0; k < m->ws_nblocks; k++) {
        const pkr_ws_block *b = &m->ws_blocks[k];
        if (pk_ws_sgd(pk_ws_wfile(), pk_ws_gfile(), b->offset, b->nbytes, lr, m->ws_staging, m->ws_staging_bytes) != 0)
            return PK_EXIT_IO;
    }
    for (uint32_t k = 0; k < m->nupdates; k++) {
        const pkr_update *u = &m->updates[k];
        const float *g = (const float *)(const void *)(m->space[PK_SP_GRAD] + u->grad);
        float *p = (float *)(void *)(m->space[PK_SP_PARAM] + u->param);
        float *buf = m->momentum_buf ? m->momentum_buf + u->grad / 4u : NULL;
        float chunk[64];
        for (uint32_t j = 0; j < u->numel; j += 64) {
            uint32_t n = u->numel - j < 64 ? u->numel - j : 64;
            for (uint32_t e = 0; e < n; e++) {
                float d = g[j + e];
                if (buf) { /* torch.optim.SGD: buf = g at the first step, then momentum * buf + g */
                    float b = step == 0 ? d : mom * buf[j + e] + d;
                    buf[j + e] = b;
                    d = b;
                }
                chunk[e] = p[j + e] - lr * d;
            }
            if (m->params_writable) {
                memcpy(p + j, chunk, n * sizeof(float));
            } else if (pk_file_write(out, offset + (u->param + j * 4u), chunk, n * 4u) != 0) {
                return PK_EXIT_IO;
            }
        }
    }
    return 0;
}
