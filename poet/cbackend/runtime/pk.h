/* pk.h: the one calling convention of POET's C kernels.

   A kernel sees every tensor as a strided view (pk_tensor): the lowering resolves views (t, permute,
   expand, slice, view ...) at compile time, so a kernel reads its inputs through their strides and
   writes its outputs through theirs.  Inputs come first, then the outputs, in the order the op's
   spec in poet/cbackend/ops_*.py gives; scalars (ints, floats, bools, lists flattened) in the order
   that spec gives.  A kernel returns PK_OK or an error code; it never allocates. */
#ifndef PK_H
#define PK_H

#include <stddef.h>
#include <stdint.h>

enum pk_dtype { PK_NONE = 0, PK_F32 = 1, PK_F64 = 2, PK_I64 = 3, PK_I32 = 4, PK_BOOL = 5, PK_U8 = 6 };
enum pk_status { PK_OK = 0, PK_EARGS = 1, PK_EDTYPE = 2, PK_EUNSUPPORTED = 3, PK_EIO = 4, PK_ECHECKSUM = 5 };

#define PK_MAXDIM 8

typedef struct {
    void *data;                  /* address of element [0, ..., 0] of the view; NULL for PK_NONE */
    int32_t dtype;               /* enum pk_dtype; PK_NONE: an absent optional tensor (None in aten) */
    int32_t ndim;                /* 0: a 0-dim (scalar) tensor of one element */
    int32_t size[PK_MAXDIM];
    int32_t stride[PK_MAXDIM];   /* in elements; 0 where a dimension is broadcast (expand) */
} pk_tensor;

typedef union {
    double f;                    /* float scalars (alpha, eps, momentum, p ...) */
    int64_t i;                   /* ints, bools (0/1), list items, enum values */
} pk_scalar;

/* nt = inputs + outputs; ns = scalars.  A kernel checks nt/ns and dtypes and returns PK_EARGS /
   PK_EDTYPE instead of reading past what it was given. */
typedef int (*pk_kernel_fn)(pk_tensor *t, int nt, const pk_scalar *s, int ns);

#define PK_KERNEL(name) int pk_##name(pk_tensor *t, int nt, const pk_scalar *s, int ns)

/* number of elements of a view */
static inline int64_t pk_numel(const pk_tensor *x) {
    int64_t n = 1;
    for (int d = 0; d < x->ndim; d++) n *= x->size[d];
    return n;
}

/* 1 if the view is contiguous (row-major, no gaps); size-1 dimensions may have any stride */
static inline int pk_contiguous(const pk_tensor *x) {
    int64_t expect = 1;
    for (int d = x->ndim - 1; d >= 0; d--) {
        if (x->size[d] != 1 && x->stride[d] != expect) return 0;
        expect *= x->size[d];
    }
    return 1;
}

#endif
