/* Matrix products (specs: poet/cbackend/ops_matmul.py): mm, bmm, addmm and the tiled contraction
   tile_mm_accumulate are one kernel, pk_matmul.

   Every output element is one float accumulator summed over k in order, so a result depends on the
   shapes only, never on the strides or the target.  Four columns of a row are computed together
   (each element of A is loaded once per four products); any strides are read as given. */
#include "pk.h"
#include "pk_dense.h"

typedef struct {
    const float *p;
    int32_t r, c; /* row and column strides */
} mview;

/* out[i][j] = beta * add[i][j] + alpha * sum_q a[i][q] b[q][j]  (add.p NULL: no addend) */
static void gemm(int32_t m, int32_t n, int32_t k, mview a, mview b, float *out, int32_t orow, int32_t ocol,
                 mview add, float beta, float alpha) {
    for (int32_t i = 0; i < m; i++) {
        const float *ai = a.p + (int64_t)i * a.r;
        float *oi = out + (int64_t)i * orow;
        const float *addi = add.p ? add.p + (int64_t)i * add.r : 0;
        float acc[4];
        for (int32_t j = 0; j < n;) {
            int w = n - j >= 4 ? 4 : 1;
            const float *ap = ai, *bp = b.p + (int64_t)j * b.c;
            if (w == 4) {
                float s0 = 0.0f, s1 = 0.0f, s2 = 0.0f, s3 = 0.0f;
                const int32_t c1 = b.c, c2 = 2 * b.c, c3 = 3 * b.c;
                for (int32_t q = 0; q < k; q++) {
                    const float x = *ap;
                    s0 += x * bp[0];
                    s1 += x * bp[c1];
                    s2 += x * bp[c2];
                    s3 += x * bp[c3];
                    ap += a.c;
                    bp += b.r;
                }
                acc[0] = s0, acc[1] = s1, acc[2] = s2, acc[3] = s3;
            } else {
                float s = 0.0f;
                for (int32_t q = 0; q < k; q++) {
                    s += *ap * *bp;
                    ap += a.c;
                    bp += b.r;
                }
                acc[0] = s;
            }
            for (int u = 0; u < w; u++, j++) {
                float v = alpha == 1.0f ? acc[u] : alpha * acc[u];
                if (addi) {
                    const float x = addi[(int64_t)j * add.c];
                    v = (beta == 1.0f ? x : beta * x) + v;
                }
                oi[(int64_t)j * ocol] = v;
            }
        }
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
