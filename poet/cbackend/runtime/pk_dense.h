/* pk_dense.h: what the dense kernels share (matmul, indexing, norms, softmax, losses, attention):
   argument checks, views broadcast to a shape, walking every position of a shape but one dimension
   (rows), index reads and a cascaded float sum.  Everything here is static inline: no state, no
   libc.  Index arithmetic is 32-bit where it divides (a Cortex-M4 divides 32-bit words in hardware,
   64-bit ones in a library call). */
#ifndef PK_DENSE_H
#define PK_DENSE_H

#include <string.h>

#include "pk.h"
#include "pk_iter.h"

/* 1 if every one of n views is float32 */
static inline int pk_all_f32(const pk_tensor *t, int n) {
    for (int i = 0; i < n; i++)
        if (t[i].dtype != PK_F32) return 0;
    return 1;
}

static inline int pk_is_index(const pk_tensor *t) { return t->dtype == PK_I64 || t->dtype == PK_I32; }

/* element at offset off (elements) of an int64 or int32 view */
static inline int64_t pk_index_at(const pk_tensor *t, int64_t off) {
    return t->dtype == PK_I64 ? ((const int64_t *)t->data)[off] : (int64_t)((const int32_t *)t->data)[off];
}

/* a dimension given as in aten (negative counts from the end) -> 0..ndim-1, or -1 when out of range;
   a 0-dim tensor accepts 0 and -1 */
static inline int pk_dim(int64_t d, int ndim) {
    int n = ndim > 0 ? ndim : 1;
    if (d < 0) d += n;
    return (d < 0 || d >= n) ? -1 : (int)d;
}

/* 1 if a and b have the same shape */
static inline int pk_same_shape(const pk_tensor *a, const pk_tensor *b) {
    if (a->ndim != b->ndim) return 0;
    for (int d = 0; d < a->ndim; d++)
        if (a->size[d] != b->size[d]) return 0;
    return 1;
}

/* strides (elements) that read x as a view of `shape` (ndim dims) by aten's broadcasting rule:
   trailing dimensions aligned, size-1 and missing dimensions read with stride 0.  0 when x does
   not broadcast to the shape. */
static inline int pk_broadcast(const pk_tensor *x, int ndim, const int32_t *shape, int32_t *stride) {
    if (x->ndim > ndim) return 0;
    int off = ndim - x->ndim;
    for (int d = 0; d < ndim; d++) {
        if (d < off) {
            stride[d] = 0;
            continue;
        }
        int32_t s = x->size[d - off];
        if (s == shape[d]) stride[d] = s == 1 ? 0 : x->stride[d - off];
        else if (s == 1) stride[d] = 0;
        else return 0;
    }
    return 1;
}

/* rows of a shape: every position of all dimensions but `skip` (-1: none).  pk_rows_next advances the
   index and returns the offsets' change per view as it goes; used as
       pk_rows r; pk_rows_init(&r, shape_view, skip);
       do { ... use off[0..n) ... } while (pk_rows_next(&r, views, n, off));  */
typedef struct {
    int ndim, skip;
    int32_t size[PK_MAXDIM];
    int32_t idx[PK_MAXDIM];
} pk_rows;

/* 0 when the shape has no rows (some dimension but skip is 0) */
static inline int pk_rows_init(pk_rows *r, const pk_tensor *shape, int skip) {
    r->ndim = shape->ndim;
    r->skip = skip;
    int any = 1;
    for (int d = 0; d < shape->ndim; d++) {
        r->size[d] = shape->size[d];
        r->idx[d] = 0;
        if (d != skip && shape->size[d] == 0) any = 0;
    }
    return any;
}

/* the next row: off[i] (element offset of views[i] at the row's start) updated from strides[i][d];
   returns 0 after the last row */
static inline int pk_rows_next(pk_rows *r, const int32_t *const *strides, int n, int64_t *off) {
    for (int d = r->ndim - 1; d >= 0; d--) {
        if (d == r->skip) continue;
        if (++r->idx[d] < r->size[d]) {
            for (int i = 0; i < n; i++) off[i] += strides[i][d];
            return 1;
        }
        for (int i = 0; i < n; i++) off[i] -= (int64_t)strides[i][d] * (r->size[d] - 1);
        r->idx[d] = 0;
    }
    return 0;
}

/* a float sum of a stream of terms whose error grows with log n, not n: terms are added to level 0;
   after every 16th term level 0 is carried into level 1, after every 256th level 1 into level 2, and
   so on (8 levels); the total adds the levels in order.  No memory but the eight partial sums, and the
   same order on every target. */
typedef struct {
    float part[8];
    uint32_t n;
} pk_cascade;

static inline void pk_cascade_init(pk_cascade *c) {
    for (int j = 0; j < 8; j++) c->part[j] = 0.0f;
    c->n = 0;
}

static inline void pk_cascade_add(pk_cascade *c, float x) {
    c->part[0] += x;
    c->n++;
    for (int j = 0; j < 7; j++) {
        if (c->n & (15u << (4 * j))) break;
        c->part[j + 1] += c->part[j];
        c->part[j] = 0.0f;
    }
}

static inline float pk_cascade_total(const pk_cascade *c) {
    float s = 0.0f;
    for (int j = 0; j < 8; j++) s += c->part[j];
    return s;
}

/* sum of n floats x[0], x[stride], ... (cascaded) */
static inline float pk_sum_f32(const float *x, int32_t n, int32_t stride) {
    pk_cascade c;
    pk_cascade_init(&c);
    for (int32_t i = 0; i < n; i++) pk_cascade_add(&c, x[(int64_t)i * stride]);
    return pk_cascade_total(&c);
}

/* bytes of one element of a dtype (0: PK_NONE or unknown) */
static inline int pk_esize(int32_t dtype) {
    switch (dtype) {
    case PK_F32: case PK_I32: return 4;
    case PK_F64: case PK_I64: return 8;
    case PK_BOOL: case PK_U8: return 1;
    default: return 0;
    }
}

/* one element of es bytes copied (a constant-size memcpy per case: inlined, no aliasing questions) */
static inline void pk_move1(void *dst, const void *src, int es) {
    switch (es) {
    case 8: memcpy(dst, src, 8); break;
    case 4: memcpy(dst, src, 4); break;
    case 2: memcpy(dst, src, 2); break;
    default: memcpy(dst, src, 1); break;
    }
}

/* view x narrowed along dim to `count` positions from `start`, `step` apart (count 0 ... ok) */
static inline pk_tensor pk_narrow(const pk_tensor *x, int dim, int64_t start, int32_t count, int32_t step) {
    pk_tensor v = *x;
    v.data = (char *)x->data + start * x->stride[dim] * pk_esize(x->dtype);
    v.size[dim] = count;
    v.stride[dim] = x->stride[dim] * step;
    return v;
}

/* view x at position `index` of dimension dim (that dimension removed) */
static inline pk_tensor pk_select(const pk_tensor *x, int dim, int64_t index) {
    pk_tensor v = pk_narrow(x, dim, index, 1, 1);
    for (int d = dim; d + 1 < v.ndim; d++) v.size[d] = v.size[d + 1], v.stride[d] = v.stride[d + 1];
    v.ndim--;
    return v;
}

/* PK_EACH4(out, in1, in2, in3, y, a, b, c, body): PK_FOR3 of pk_iter.h with one more float input */
#define PK_EACH4(TA, TB, TC, TD, A, B, C, D, BODY)                                                       \
    do {                                                                                                 \
        const pk_tensor *ta_ = (TA), *tb_ = (TB), *tc_ = (TC), *td_ = (TD);                              \
        int32_t idx_[PK_MAXDIM] = {0};                                                                   \
        float *A = (float *)ta_->data;                                                                   \
        const float *B = (const float *)tb_->data, *C = (const float *)tc_->data;                        \
        const float *D = (const float *)td_->data;                                                       \
        for (int64_t k_ = pk_numel(ta_); k_ > 0; k_--) {                                                 \
            BODY;                                                                                        \
            PK_ODOMETER_(ta_, (PK_STEP_(A, ta_), PK_STEP_(B, tb_), PK_STEP_(C, tc_), PK_STEP_(D, td_)),  \
                         (PK_BACK_(A, ta_), PK_BACK_(B, tb_), PK_BACK_(C, tc_), PK_BACK_(D, td_)))       \
        }                                                                                                \
    } while (0)

/* kernels_layout.c: strided copies that every dense family uses */
int pk_copy_view(pk_tensor *dst, const pk_tensor *src); /* same shape and dtype; PK_OK or an error */
void pk_zero_view(pk_tensor *dst);                        /* every element 0 (all bits zero) */

#endif
