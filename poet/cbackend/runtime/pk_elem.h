/* pk_elem.h: elements of any dtype, and walking several same-shaped views of mixed dtypes.

   Kernels whose float32 case is the fast path (pk_iter.h's typed walks) fall back to these for
   other dtypes and mixes aten allows (bool masks, int64 counters, float64 statistics): a walk keeps
   each view's element offset, and pk_get / pk_set convert through double (pk_geti / pk_seti through
   int64, exact for every integer).  Conversions of NaN or out-of-range floats to integers are
   defined here (NaN -> 0, saturation), where C leaves them undefined. */
#ifndef PK_ELEM_H
#define PK_ELEM_H

#include "pk.h"
#include "pk_dense.h"

#define PK_WALK_MAX 4

static inline int pk_is_float(int32_t dt) { return dt == PK_F32 || dt == PK_F64; }
static inline int pk_is_integral(int32_t dt) { return dt == PK_I64 || dt == PK_I32 || dt == PK_U8 || dt == PK_BOOL; }

static inline double pk_get(const pk_tensor *x, int64_t off) {
    switch (x->dtype) {
    case PK_F32: return (double)((const float *)x->data)[off];
    case PK_F64: return ((const double *)x->data)[off];
    case PK_I64: return (double)((const int64_t *)x->data)[off];
    case PK_I32: return (double)((const int32_t *)x->data)[off];
    case PK_U8: return (double)((const uint8_t *)x->data)[off];
    case PK_BOOL: return ((const uint8_t *)x->data)[off] ? 1.0 : 0.0;
    default: return 0.0;
    }
}

static inline int64_t pk_double_to_i64(double v) {
    if (v != v) return 0;
    if (v >= 9.2233720368547758e18) return INT64_MAX;
    if (v <= -9.2233720368547758e18) return INT64_MIN;
    return (int64_t)v;
}

static inline int64_t pk_geti(const pk_tensor *x, int64_t off) {
    switch (x->dtype) {
    case PK_I64: return ((const int64_t *)x->data)[off];
    case PK_I32: return ((const int32_t *)x->data)[off];
    case PK_U8: return ((const uint8_t *)x->data)[off];
    case PK_BOOL: return ((const uint8_t *)x->data)[off] ? 1 : 0;
    default: return pk_double_to_i64(pk_get(x, off));
    }
}

static inline void pk_set(const pk_tensor *x, int64_t off, double v) {
    switch (x->dtype) {
    case PK_F32: ((float *)x->data)[off] = (float)v; break;
    case PK_F64: ((double *)x->data)[off] = v; break;
    case PK_I64: ((int64_t *)x->data)[off] = pk_double_to_i64(v); break;
    case PK_I32: ((int32_t *)x->data)[off] = (int32_t)pk_double_to_i64(v); break;
    case PK_U8: ((uint8_t *)x->data)[off] = (uint8_t)pk_double_to_i64(v); break;
    case PK_BOOL: ((uint8_t *)x->data)[off] = v != 0.0; break;
    default: break;
    }
}

static inline void pk_seti(const pk_tensor *x, int64_t off, int64_t v) {
    switch (x->dtype) {
    case PK_I64: ((int64_t *)x->data)[off] = v; break;
    case PK_I32: ((int32_t *)x->data)[off] = (int32_t)v; break;
    case PK_U8: ((uint8_t *)x->data)[off] = (uint8_t)v; break;
    case PK_BOOL: ((uint8_t *)x->data)[off] = v != 0; break;
    default: pk_set(x, off, (double)v); break;
    }
}

/* An odometer over the first view's shape; off[i] is view i's element offset of the current element. */
typedef struct {
    int n;
    const pk_tensor *t[PK_WALK_MAX];
    int64_t off[PK_WALK_MAX];
    int32_t idx[PK_MAXDIM];
} pk_walk;

static inline void pk_walk_init(pk_walk *w, int n, const pk_tensor *a, const pk_tensor *b, const pk_tensor *c,
                                const pk_tensor *d) {
    w->n = n;
    w->t[0] = a;
    w->t[1] = b;
    w->t[2] = c;
    w->t[3] = d;
    for (int i = 0; i < PK_WALK_MAX; i++) w->off[i] = 0;
    for (int d_ = 0; d_ < PK_MAXDIM; d_++) w->idx[d_] = 0;
}

static inline void pk_walk_next(pk_walk *w) {
    const pk_tensor *t0 = w->t[0];
    for (int d = t0->ndim - 1; d >= 0; d--) {
        if (++w->idx[d] < t0->size[d]) {
            for (int i = 0; i < w->n; i++) w->off[i] += w->t[i]->stride[d];
            return;
        }
        w->idx[d] = 0;
        for (int i = 0; i < w->n; i++) w->off[i] -= (int64_t)w->t[i]->stride[d] * (t0->size[d] - 1);
    }
}

/* A float scalar argument given in the kind of the tensor it applies to (ints for integer dtypes). */
static inline double pk_scalar_as_double(const pk_scalar *s, int32_t dtype) {
    return pk_is_float(dtype) ? s->f : (double)s->i;
}

#endif
