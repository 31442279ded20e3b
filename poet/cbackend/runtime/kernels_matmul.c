/* Matrix products (specs: poet/cbackend/ops_matmul.py): mm, bmm, addmm and the tiled contraction
   tile_mm_accumulate are one kernel, pk_matmul.

   Every output element is one float accumulator summed over k in order, so a result depends on the
   shapes only, never on the strides, the blocking or the target.  Blocks of 2 rows x 4 columns are
   computed together (each loaded element of A serves four products, each of B two); any strides are
   read as given, with loops of their own for operands contiguous along k and for B's columns side by
   side. */
#include "pk.h"
#include "pk_dense.h"

typedef struct {
    const float *p;
    int32_t r, c; /* row and column strides */
} mview;

/* where a block's sums go: out = beta * add + alpha * sum, out and add (NULL: none) at the block's
   first element, with their row and column strides */
typedef struct {
    float *o;
    int32_t orow, ocol;
    const float *x;
    int32_t xrow, xcol;
    float beta, alpha;
} dest;

__attribute__((always_inline)) static inline void put(const dest *d, int r, int u, float sum) {
    float *o = d->o + (int64_t)r * d->orow + (int64_t)u * d->ocol;
    if (d->alpha != 1.0f) sum = d->alpha * sum;
    if (!d->x) {
        *o = sum;
        return;
    }
    const float x = d->x[(int64_t)r * d->xrow + (int64_t)u * d->xcol];
    *o = (d->beta == 1.0f ? x : d->beta * x) + sum;
}

/* The sums over k of a_r[q] * b_u[q] for R rows of a (1 or 2) and U columns of b (1 or 4), each in
   order, put in place: a_r[q] at a + r * sar + q * sak, b_u[q] at b + q * sbk + u * sbc.  Always
   inlined, so a call with constant strides (1: contiguous along k, or b's columns side by side) is
   compiled into a loop of its own with post-incremented or immediate-offset loads, and the sums go
   from registers to their place: on a Cortex-M4, 3 instructions per product for 2 x 4 contiguous
   operands, against 5.5 for one row of any strides. */
__attribute__((always_inline)) static inline void block(const int R, const int U, const float *a, int32_t sar,
                                                         int32_t sak, const float *b, int32_t sbk, int32_t sbc,
                                                         int32_t k, const dest *d) {
    float s00 = 0.0f, s01 = 0.0f, s02 = 0.0f, s03 = 0.0f, s10 = 0.0f, s11 = 0.0f, s12 = 0.0f, s13 = 0.0f;
    const float *a0 = a, *a1 = a + sar;
    const float *b0 = b, *b1 = b + sbc, *b2 = b + 2 * sbc, *b3 = b + 3 * sbc;
    for (int32_t q = k; q > 0; q--) {
        const float x0 = *a0, y0 = *b0;
        s00 += x0 * y0;
        if (U == 4) {
            const float y1 = *b1, y2 = *b2, y3 = *b3;
            s01 += x0 * y1, s02 += x0 * y2, s03 += x0 * y3;
            if (R == 2) {
                const float x1 = *a1;
                s10 += x1 * y0, s11 += x1 * y1, s12 += x1 * y2, s13 += x1 * y3;
            }
            b1 += sbk, b2 += sbk, b3 += sbk;
        } else if (R == 2) {
            s10 += *a1 * y0;
        }
        a0 += sak, a1 += sak, b0 += sbk;
    }
    put(d, 0, 0, s00);
    if (U == 4) put(d, 0, 1, s01), put(d, 0, 2, s02), put(d, 0, 3, s03);
    if (R == 2) {
        put(d, 1, 0, s10);
        if (U == 4) put(d, 1, 1, s11), put(d, 1, 2, s12), put(d, 1, 3, s13);
    }
}

/* the block of rows i.. (R of them) and columns j.. (U of them), its operands walked as their strides allow */
static void one_block(int R, int U, const float *ai, mview a, const float *bj, mview b, int32_t k, const dest *d) {
    if (a.c == 1 && b.r == 1) { /* x @ W^T, q . k: both contiguous along k */
        if (R == 2 && U == 4) block(2, 4, ai, a.r, 1, bj, 1, b.c, k, d);
        else if (U == 4) block(1, 4, ai, a.r, 1, bj, 1, b.c, k, d);
        else block(R, 1, ai, a.r, 1, bj, 1, b.c, k, d);
    } else if (a.c == 1 && b.c == 1) { /* x @ W: a contiguous along k, b's columns side by side */
        if (R == 2 && U == 4) block(2, 4, ai, a.r, 1, bj, b.r, 1, k, d);
        else if (U == 4) block(1, 4, ai, a.r, 1, bj, b.r, 1, k, d);
        else block(R, 1, ai, a.r, 1, bj, b.r, 1, k, d);
    } else if (b.c == 1) { /* g^T @ x: b's columns side by side */
        if (R == 2 && U == 4) block(2, 4, ai, a.r, a.c, bj, b.r, 1, k, d);
        else if (U == 4) block(1, 4, ai, a.r, a.c, bj, b.r, 1, k, d);
        else block(R, 1, ai, a.r, a.c, bj, b.r, 1, k, d);
    } else {
        if (U == 4) block(R, 4, ai, a.r, a.c, bj, b.r, b.c, k, d);
        else block(R, 1, ai, a.r, a.c, bj, b.r, b.c, k, d);
    }
}

/* out[i][j] = beta * add[i][j] + alpha * sum_q a[i][q] b[q][j]  (add.p NULL: no addend), in blocks of
   2 rows x 4 columns (1 row or 1 column at the edges) */
static void gemm(int32_t m, int32_t n, int32_t k, mview a, mview b, float *out, int32_t orow, int32_t ocol,
                 mview add, float beta, float alpha) {
    dest d = {out, orow, ocol, add.p, add.r, add.c, beta, alpha};
    for (int32_t i = 0; i < m;) {
        const int R = m - i >= 2 ? 2 : 1;
        for (int32_t j = 0; j < n;) {
            const int U = n - j >= 4 ? 4 : 1;
            d.o = out + (int64_t)i * orow + (int64_t)j * ocol;
            d.x = add.p ? add.p + (int64_t)i * add.r + (int64_t)j * add.c : 0;
            one_block(R, U, a.p + (int64_t)i * a.r, a, b.p + (int64_t)j * b.c, b, k, &d);
            j += U;
        }
        i += R;
    }
}

/* pk_matmul(add | NONE, a, b -> out; beta, alpha): out = beta * add + alpha * (a @ b).
   a [m, k], b [k, n], out [m, n], or all three with a leading batch dimension (bmm); add broadcasts
   to out's shape (addmm's bias); beta 0 never reads add (aten: NaN in it is not propagated). */
PK_KERNEL(matmul) {
    if (nt != 4 || ns != 2) return PK_EARGS;
    const pk_tensor *add = &t[0], *a = &t[1], *b = &t[2];
    pk_tensor *out = &t[3];
    if (!pk_all_f32(t + 1, 3) || (add->dtype != PK_NONE && add->dtype != PK_F32)) return PK_EDTYPE;
    const int nd = out->ndim;
    if ((nd != 2 && nd != 3) || a->ndim != nd || b->ndim != nd) return PK_EARGS;
    const int r = nd - 2; /* first matrix dimension */
    const int32_t batch = nd == 3 ? out->size[0] : 1, m = out->size[r], n = out->size[r + 1], k = a->size[r + 1];
    if (a->size[r] != m || b->size[r] != k || b->size[r + 1] != n) return PK_EARGS;
    if (nd == 3 && (a->size[0] != batch || b->size[0] != batch)) return PK_EARGS;
    const float beta = (float)s[0].f, alpha = (float)s[1].f;
    int32_t addst[PK_MAXDIM] = {0};
    const int use_add = add->dtype != PK_NONE && beta != 0.0f;
    if (use_add && !pk_broadcast(add, nd, out->size, addst)) return PK_EARGS;
    if (pk_numel(out) == 0) return PK_OK;
    for (int32_t g = 0; g < batch; g++) {
        const int64_t ga = nd == 3 ? (int64_t)g * a->stride[0] : 0, gb = nd == 3 ? (int64_t)g * b->stride[0] : 0;
        const int64_t go = nd == 3 ? (int64_t)g * out->stride[0] : 0, gadd = nd == 3 ? (int64_t)g * addst[0] : 0;
        mview av = {(const float *)a->data + ga, a->stride[r], a->stride[r + 1]};
        mview bv = {(const float *)b->data + gb, b->stride[r], b->stride[r + 1]};
        mview addv = {use_add ? (const float *)add->data + gadd : 0, addst[r], addst[r + 1]};
        gemm(m, n, k, av, bv, (float *)out->data + go, out->stride[r], out->stride[r + 1], addv, beta, alpha);
    }
    return PK_OK;
}
