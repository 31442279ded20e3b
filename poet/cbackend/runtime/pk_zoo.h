/* pk_zoo.h: row sources, how the zoo-graph kernels (kernels_zoo*.c) read tensors split into tiles.

   A zoo node reads rows of a layer's output that live in several nodes, each an arena block holding
   rows [start, start + size[2]) and channels [cstart, cstart + size[1]) of the tensor for the whole
   batch (a tensor split by rows only: cstart 0, every channel); a gradient is moreover the sum of the
   pieces of every layer that reads that output.  Every tensor is seen as 4-D (B, C, rows, W): a
   feature map (C, H, W) as it is, a flat vector (F,) as (B, 1, F, 1).  A row source is

     tensors: the pieces, group after group (each a float32 4-D view, unit stride along W);
     scalars: ngroups, then per group: npieces, then per piece its first row and its first channel.

   Its value at (b, c, row, w) is the sum over groups of the one piece of that group holding (c, row);
   its channel count is the highest channel any piece holds, plus one.  A tile of channels [c0, c1)
   of a channel-wise layer is given views of its channels only, numbered from 0.  Kernels take the
   sources last among their inputs (tensors) and last among their scalars, in the order each kernel's
   comment gives; pkz_src_parse checks every count, size and dtype first. */
#ifndef PK_ZOO_H
#define PK_ZOO_H

#include "pk.h"

#define PKZ_MAXG 8 /* groups of one source (readers of one layer output) */

typedef struct {
    const pk_tensor *t; /* the first piece */
    const pk_scalar *s; /* at ngroups */
    int32_t ng;
    int32_t b, c, w;    /* batch, channels and width every piece has */
} pkz_src;

/* Parse a source at t[*ti] / s[*si] (both advanced past it).  0, or PK_EARGS / PK_EDTYPE. */
static inline int pkz_src_parse(pkz_src *src, pk_tensor *t, int nt, int *ti, const pk_scalar *s, int ns, int *si) {
    if (*si >= ns) return PK_EARGS;
    int64_t ng = s[*si].i;
    if (ng < 1 || ng > PKZ_MAXG) return PK_EARGS;
    src->t = t + *ti;
    src->s = s + *si;
    src->ng = (int32_t)ng;
    src->b = src->c = src->w = 0;
    int k = *si + 1, n = 0;
    for (int64_t g = 0; g < ng; g++) {
        if (k >= ns) return PK_EARGS;
        int64_t np = s[k].i;
        if (np < 1 || k + 1 + 2 * np > ns || *ti + n + np > nt) return PK_EARGS;
        for (int64_t q = 0; q < np; q++) {
            const pk_tensor *p = src->t + n + q;
            const int64_t row0 = s[k + 1 + 2 * q].i, ch0 = s[k + 2 + 2 * q].i;
            if (p->dtype != PK_F32) return PK_EDTYPE;
            if (p->ndim != 4 || (p->size[3] > 1 && p->stride[3] != 1) || row0 < 0 || ch0 < 0) return PK_EARGS;
            if (n + q == 0) {
                src->b = p->size[0];
                src->w = p->size[3];
            } else if (p->size[0] != src->b || p->size[3] != src->w) {
                return PK_EARGS;
            }
            if (ch0 + p->size[1] > src->c) src->c = (int32_t)(ch0 + p->size[1]);
        }
        k += 1 + 2 * (int)np;
        n += (int)np;
    }
    *ti += n;
    *si = k;
    return PK_OK;
}

/* Element (b, c, row, 0) of the piece of group g holding channel c and `row`, or NULL when none does. */
static inline const float *pkz_row(const pkz_src *src, int g, int32_t b, int32_t c, int32_t row) {
    const pk_scalar *s = src->s + 1;
    const pk_tensor *t = src->t;
    for (int gg = 0; gg < g; gg++) {
        t += s[0].i;
        s += 1 + 2 * s[0].i;
    }
    for (int64_t k = 0; k < s[0].i; k++) {
        const int64_t start = s[1 + 2 * k].i, cstart = s[2 + 2 * k].i;
        if (row >= start && row < start + t[k].size[2] && c >= cstart && c < cstart + t[k].size[1]) {
            const float *d = (const float *)t[k].data;
            return d + (int64_t)b * t[k].stride[0] + (int64_t)(c - cstart) * t[k].stride[1] +
                   (row - start) * (int64_t)t[k].stride[2];
        }
    }
    return 0;
}

/* Pieces of group g: count, and piece k's tensor (first[k]) and first row (starts[2 * k].i; its first
   channel is starts[2 * k + 1].i). */
static inline int32_t pkz_npieces(const pkz_src *src, int g, const pk_tensor **first, const pk_scalar **starts) {
    const pk_scalar *s = src->s + 1;
    const pk_tensor *t = src->t;
    for (int gg = 0; gg < g; gg++) {
        t += s[0].i;
        s += 1 + 2 * s[0].i;
    }
    *first = t;
    *starts = s + 1;
    return (int32_t)s[0].i;
}

/* a float32 4-D output of (b, c, rows, w) with unit stride along w */
static inline int pkz_out4(const pk_tensor *y, int32_t b, int32_t c, int32_t w) {
    if (y->dtype != PK_F32) return PK_EDTYPE;
    if (y->ndim != 4 || y->size[0] != b || y->size[1] != c || y->size[3] != w) return PK_EARGS;
    if (y->size[3] > 1 && y->stride[3] != 1) return PK_EARGS;
    return PK_OK;
}

static inline float *pkz_at(const pk_tensor *y, int32_t b, int32_t c, int32_t r) {
    return (float *)y->data + (int64_t)b * y->stride[0] + (int64_t)c * y->stride[1] + (int64_t)r * y->stride[2];
}

/* a float32 vector of n elements (a parameter, its gradient), or PK_NONE when optional */
static inline int pkz_vec(const pk_tensor *v, int64_t n, int optional) {
    if (v->dtype == PK_NONE) return optional ? PK_OK : PK_EARGS;
    if (v->dtype != PK_F32) return PK_EDTYPE;
    if (pk_numel(v) != n || !pk_contiguous(v)) return PK_EARGS;
    return PK_OK;
}

#endif
