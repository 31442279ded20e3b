/* Moving elements between views (specs: poet/cbackend/ops_layout.py): copy (clone of any layout),
   cat, stack, the tiles joined again (tile_assemble, tile_gather), masked_fill and where, tril.
   Elements are moved as bits, so every dtype of the same size copies exactly. */
#include <string.h>

#include "pk.h"
#include "pk_dense.h"

/* n elements of es bytes, dst ds and src ss elements apart (src NULL: zeros); one loop per size, so
   each element is a single load and store */
#define MOVE_RUN(T)                                                                                   \
    do {                                                                                              \
        T *d_ = (T *)d;                                                                               \
        const T *s_ = (const T *)sp;                                                                  \
        if (s_)                                                                                       \
            for (int32_t i = 0; i < n; i++, d_ += ds, s_ += ss) memcpy(d_, s_, sizeof(T));            \
        else                                                                                          \
            for (int32_t i = 0; i < n; i++, d_ += ds) memset(d_, 0, sizeof(T));                       \
    } while (0)

static void move_run(void *d, const void *sp, int32_t n, int32_t ds, int32_t ss, int es) {
    switch (es) {
    case 8: MOVE_RUN(uint64_t); break;
    case 4: MOVE_RUN(uint32_t); break;
    case 2: MOVE_RUN(uint16_t); break;
    default: MOVE_RUN(uint8_t); break;
    }
}

/* rows of dst's last dimension, each copied (or zeroed when src is NULL) */
static void move_rows(pk_tensor *dst, const pk_tensor *src) {
    const int es = pk_esize(dst->dtype), nd = dst->ndim, last = nd - 1;
    const int32_t n = nd ? dst->size[last] : 1, ds = nd ? dst->stride[last] : 0, ss = nd && src ? src->stride[last] : 0;
    pk_rows r;
    if (n == 0 || !pk_rows_init(&r, dst, last)) return;
    int64_t off[2] = {0, 0};
    const int32_t *st[2] = {dst->stride, src ? src->stride : dst->stride};
    do {
        char *d = (char *)dst->data + off[0] * es;
        const char *sp = src ? (const char *)src->data + off[1] * es : 0;
        move_run(d, sp, n, ds, ss, es);
    } while (pk_rows_next(&r, st, 2, off));
}

int pk_copy_view(pk_tensor *dst, const pk_tensor *src) {
    if (!pk_same_shape(dst, src)) return PK_EARGS;
    if (dst->dtype != src->dtype || pk_esize(dst->dtype) == 0) return PK_EDTYPE;
    move_rows(dst, src);
    return PK_OK;
}

void pk_zero_view(pk_tensor *dst) { move_rows(dst, 0); }

/* copy(src -> dst): clone, lift_fresh_copy (any layout in, any layout out) */
PK_KERNEL(copy) {
    (void)s;
    if (nt != 2 || ns != 0) return PK_EARGS;
    return pk_copy_view(&t[1], &t[0]);
}

/* cat(x_0 .. x_{k-1} -> out; dim, k): out is the inputs joined along dim.  A 1-d input with no
   elements is skipped whatever the output's rank (aten's legacy rule). */
PK_KERNEL(cat) {
    if (ns != 2 || s[1].i < 1 || nt != s[1].i + 1) return PK_EARGS;
    const int k = (int)s[1].i;
    pk_tensor *out = &t[k];
    const int dim = pk_dim(s[0].i, out->ndim);
    if (dim < 0 || out->ndim == 0) return PK_EARGS;
    int64_t at = 0;
    for (int i = 0; i < k; i++) {
        if (t[i].ndim == 1 && t[i].size[0] == 0 && out->ndim != 1) continue;
        if (t[i].ndim != out->ndim || at + t[i].size[dim] > out->size[dim]) return PK_EARGS;
        pk_tensor part = pk_narrow(out, dim, at, t[i].size[dim], 1);
        int rc = pk_copy_view(&part, &t[i]);
        if (rc != PK_OK) return rc;
        at += t[i].size[dim];
    }
    return at == out->size[dim] ? PK_OK : PK_EARGS;
}

/* stack(x_0 .. x_{k-1} -> out; dim, k): out[..., i, ...] = x_i along a new dimension dim */
PK_KERNEL(stack) {
    if (ns != 2 || s[1].i < 1 || nt != s[1].i + 1) return PK_EARGS;
    const int k = (int)s[1].i;
    pk_tensor *out = &t[k];
    const int dim = pk_dim(s[0].i, out->ndim);
    if (dim < 0 || out->ndim == 0 || out->size[dim] != k) return PK_EARGS;
    for (int i = 0; i < k; i++) {
        pk_tensor part = pk_select(out, dim, i);
        int rc = pk_copy_view(&part, &t[i]);
        if (rc != PK_OK) return rc;
    }
    return PK_OK;
}

/* masked_fill(x, mask, value | NONE -> out; fill): out = mask ? value : x, where value is the
   tensor when given, else the scalar fill (converted to out's dtype).  Every input is viewed with
   out's shape (spec broadcast=True).  where(cond, a, b) is masked_fill(b, cond, a). */
PK_KERNEL(masked_fill) {
    if (nt != 4 || ns != 1) return PK_EARGS;
    const pk_tensor *x = &t[0], *mask = &t[1], *val = &t[2];
    pk_tensor *out = &t[3];
    const int es = pk_esize(out->dtype);
    if (es == 0 || x->dtype != out->dtype || (val->dtype != PK_NONE && val->dtype != out->dtype)) return PK_EDTYPE;
    if (mask->dtype != PK_BOOL && mask->dtype != PK_U8) return PK_EDTYPE;
    if (!pk_same_shape(x, out) || !pk_same_shape(mask, out) || (val->dtype != PK_NONE && !pk_same_shape(val, out)))
        return PK_EARGS;
    union {
        float f;
        double d;
        int64_t i;
        int32_t i32;
        uint8_t b;
    } fill;
    switch (out->dtype) {
    case PK_F32: fill.f = (float)s[0].f; break;
    case PK_F64: fill.d = s[0].f; break;
    case PK_I64: fill.i = (int64_t)s[0].f; break;
    case PK_I32: fill.i32 = (int32_t)s[0].f; break;
    default: fill.b = (uint8_t)(out->dtype == PK_BOOL ? s[0].f != 0.0 : (uint8_t)(int32_t)s[0].f); break;
    }
    const int nd = out->ndim, last = nd - 1;
    const int32_t n = nd ? out->size[last] : 1;
    pk_rows r;
    if (n == 0 || !pk_rows_init(&r, out, last)) return PK_OK;
    int64_t off[4] = {0, 0, 0, 0};
    const int32_t *st[4] = {out->stride, x->stride, mask->stride, val->dtype != PK_NONE ? val->stride : out->stride};
    const int32_t so = nd ? st[0][last] : 0, sx = nd ? st[1][last] : 0, sm = nd ? st[2][last] : 0, sv = nd ? st[3][last] : 0;
    do {
        char *o = (char *)out->data + off[0] * es;
        const char *xp = (const char *)x->data + off[1] * es;
        const uint8_t *mp = (const uint8_t *)mask->data + off[2];
        const char *vp = val->dtype != PK_NONE ? (const char *)val->data + off[3] * es : 0;
        for (int32_t i = 0; i < n; i++) {
            const void *from = !mp[(int64_t)i * sm] ? (const void *)(xp + (int64_t)i * sx * es)
                               : vp                 ? (const void *)(vp + (int64_t)i * sv * es)
                                                    : (const void *)&fill;
            pk_move1(o + (int64_t)i * so * es, from, es);
        }
    } while (pk_rows_next(&r, st, 4, off));
    return PK_OK;
}

/* tril(x -> out; diagonal): the last two dimensions' lower triangle (column - row <= diagonal), 0 above */
PK_KERNEL(tril) {
    if (nt != 2 || ns != 1) return PK_EARGS;
    const pk_tensor *x = &t[0];
    pk_tensor *out = &t[1];
    const int es = pk_esize(out->dtype);
    if (es == 0 || x->dtype != out->dtype) return PK_EDTYPE;
    if (out->ndim < 2 || !pk_same_shape(x, out)) return PK_EARGS;
    const int last = out->ndim - 1;
    const int32_t n = out->size[last], so = out->stride[last], sx = x->stride[last];
    const int64_t diag = s[0].i;
    pk_rows r;
    if (n == 0 || !pk_rows_init(&r, out, last)) return PK_OK;
    int64_t off[2] = {0, 0};
    const int32_t *st[2] = {out->stride, x->stride};
    static const uint64_t zero_bits = 0;
    do {
        const int64_t row = r.idx[last - 1];
        char *o = (char *)out->data + off[0] * es;
        const char *xp = (const char *)x->data + off[1] * es;
        for (int32_t j = 0; j < n; j++) {
            pk_move1(o + (int64_t)j * so * es, j - row <= diag ? (const void *)(xp + (int64_t)j * sx * es) : &zero_bits, es);
        }
    } while (pk_rows_next(&r, st, 2, off));
    return PK_OK;
}
