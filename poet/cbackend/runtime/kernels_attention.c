/* Attention (specs: poet/cbackend/ops_attention.py): scaled dot-product attention as torch traces
   F.scaled_dot_product_attention on the CPU (_scaled_dot_product_flash_attention_for_cpu and its
   backward: is_causal, an additive mask, a scale), and the streamed attention tiles of
   poet/execute/tiled_ops.py (tile_attention_step, tile_attention_grad_stats, tile_attention_grad_kv,
   tile_attention_grad_q, tile_zeros_like_pair).

   No S x S block is ever stored: forward walks the keys of each query row once with an online softmax
   (running maximum, sum and output row; the output is rescaled only when the maximum grows); backward
   recomputes each probability from the row's log-sum-exp.  A masked score is -inf and contributes
   nothing; a row whose every key is masked gives a zero output row and lse 0, as aten's flash kernel
   on the CPU does (and no gradient). */
#include "pk.h"
#include "pk_dense.h"
#include "pk_math.h"

/* a batch of matrices: element (g, r, c) at base + (g / heads) * sb + (g % heads) * sh + r * sr + c * sc */
typedef struct {
    float *p;
    int32_t sb, sh, heads, sr, sc;
} mats;

static float *at(const mats *m, int32_t g, int32_t r, int32_t c) {
    const int64_t grp = m->heads == 1 ? (int64_t)g * m->sb : (int64_t)(g / m->heads) * m->sb + (int64_t)(g % m->heads) * m->sh;
    return m->p + grp + (int64_t)r * m->sr + (int64_t)c * m->sc;
}

/* x [B, H, R, C] (4-D) or [G, R, C] (3-D) as matrices; transposed: rows and columns swapped (K^T as K) */
static mats as_mats(const pk_tensor *x, int transposed) {
    mats m = {(float *)x->data, 0, 0, 1, 0, 0};
    const int nd = x->ndim;
    if (nd == 4) m.sb = x->stride[0], m.sh = x->stride[1], m.heads = x->size[1];
    else m.sb = x->stride[0];
    m.sr = x->stride[nd - (transposed ? 1 : 2)];
    m.sc = x->stride[nd - (transposed ? 2 : 1)];
    return m;
}

/* 1 if x is [groups..., rows, cols] as 3-D [G, R, C] or 4-D [B, H, R, C] with B * H = G */
static int shaped(const pk_tensor *x, int nd, const int32_t *lead, int32_t rows, int32_t cols) {
    if (x->dtype != PK_F32 || x->ndim != nd) return 0;
    for (int d = 0; d < nd - 2; d++)
        if (x->size[d] != lead[d]) return 0;
    return x->size[nd - 2] == rows && x->size[nd - 1] == cols;
}

/* how scores are made: q . k_j, then the scale operations in order (multiply or divide by a float),
   then an additive float mask, then the causal rule: key k0 + j of query q0 + i is
   masked where (k0 + j) - (q0 + i) > causal */
typedef struct {
    mats q, k, v;
    int32_t e, ev;  /* q/k columns, v columns */
    int nops;
    int op[4];      /* 0: multiply, 1: divide */
    float c[4];
    const pk_tensor *mask; /* NULL, or viewed as [B, H, L, S] through mstride */
    int32_t mstride[4];
    int causal_on;
    int64_t causal, q0, k0;
} scores;

/* sum over d < n of x[d] y[d], in order (a loop of its own for unit strides: head dims are contiguous) */
static float dot(const float *x, int32_t sx, const float *y, int32_t sy, int32_t n) {
    float s = 0.0f;
    if (sx == 1 && sy == 1)
        for (int32_t d = 0; d < n; d++) s += x[d] * y[d];
    else
        for (int32_t d = 0; d < n; d++) s += x[(int64_t)d * sx] * y[(int64_t)d * sy];
    return s;
}

/* y[d] += alpha * x[d] for d < n */
static void axpy(float *y, int32_t sy, float alpha, const float *x, int32_t sx, int32_t n) {
    if (sx == 1 && sy == 1)
        for (int32_t d = 0; d < n; d++) y[d] += alpha * x[d];
    else
        for (int32_t d = 0; d < n; d++) y[(int64_t)d * sy] += alpha * x[(int64_t)d * sx];
}

/* the score of key j for query row i of group g, whose q row is qi */
static float score(const scores *a, const float *qi, int32_t g, int32_t i, int32_t j) {
    if (a->causal_on && (a->k0 + j) - (a->q0 + i) > a->causal) return -pk_inff();
    const float *kj = at(&a->k, g, j, 0);
    float s = dot(qi, a->q.sc, kj, a->k.sc, a->e);
    for (int o = 0; o < a->nops; o++) s = a->op[o] ? s / a->c[o] : s * a->c[o];
    if (a->mask) {
        const int64_t off = (int64_t)(g / a->q.heads) * a->mstride[0] + (int64_t)(g % a->q.heads) * a->mstride[1] +
                            (int64_t)i * a->mstride[2] + (int64_t)j * a->mstride[3];
        s = s + ((const float *)a->mask->data)[off];
    }
    return s;
}

/* keys [0, n) of query row i of group g, added to the running (o row, m, l): online softmax.  m is the
   running maximum (-inf: nothing seen), l the running sum of exp(s - m), o the running sum of
   exp(s - m) v_j.  Within the walk the maximum so far is the reference; o and l are rescaled when it grows. */
static void attend(const scores *a, int32_t g, int32_t i, int32_t n, float *o, int32_t so, float *m, float *l) {
    const float *qi = at(&a->q, g, i, 0);
    for (int32_t j = 0; j < n; j++) {
        const float s = score(a, qi, g, i, j);
        if (s == -pk_inff()) continue;
        const float *vj = at(&a->v, g, j, 0);
        float p;
        if (s > *m) {
            const float alpha = *m == -pk_inff() ? 0.0f : pk_expf(*m - s);
            for (int32_t d = 0; d < a->ev; d++) o[(int64_t)d * so] *= alpha;
            *l = *l * alpha;
            *m = s;
            p = 1.0f;
        } else {
            p = pk_expf(s - *m);
        }
        *l = *l + p;
        axpy(o, so, p, vj, a->v.sc, a->ev);
    }
}

/* sdpa's scores from q [B,H,L,E], k [B,H,S,E], v [B,H,S,Ev] and mask | NONE, checked with out [B,H,L,Ev]
   and lse [B,H,L]; scalars (causal, has_scale, scale), the scale aten's default 1 / sqrt(E) (double)
   when absent */
static int sdpa_scores(scores *a, const pk_tensor *q, const pk_tensor *k, const pk_tensor *v, const pk_tensor *mask,
                       const pk_tensor *out, const pk_tensor *lse, const pk_scalar *s) {
    if (q->dtype != PK_F32 || k->dtype != PK_F32 || v->dtype != PK_F32 || lse->dtype != PK_F32) return PK_EDTYPE;
    if (q->ndim != 4 || k->ndim != 4 || v->ndim != 4) return PK_EARGS;
    const int32_t lead[2] = {q->size[0], q->size[1]}, L = q->size[2], E = q->size[3], S = k->size[2], Ev = v->size[3];
    if (!shaped(k, 4, lead, S, E) || !shaped(v, 4, lead, S, Ev) || !shaped(out, 4, lead, L, Ev) || lse->ndim != 3 ||
        lse->size[0] != lead[0] || lse->size[1] != lead[1] || lse->size[2] != L)
        return PK_EARGS;
    const float scale = (float)(s[1].i ? s[2].f : 1.0 / pk_sqrtd((double)E));
    const scores init = {as_mats(q, 0), as_mats(k, 0), as_mats(v, 0), E, Ev, 1, {0}, {scale}, 0, {0}, 0, 0, 0, 0};
    *a = init;
    if (mask->dtype != PK_NONE) {
        if (mask->dtype != PK_F32) return PK_EDTYPE; /* aten: the mask has the query's dtype */
        const int32_t shape[4] = {lead[0], lead[1], L, S};
        if (!pk_broadcast(mask, 4, shape, a->mstride)) return PK_EARGS;
        a->mask = mask;
    }
    a->causal_on = s[0].i != 0;
    return PK_OK;
}

/* the lse element of query row i of group g (lse [B, H, L]) */
static float *lse_at(const pk_tensor *lse, int32_t g, int32_t i) {
    return (float *)lse->data + (int64_t)(g / lse->size[1]) * lse->stride[0] + (int64_t)(g % lse->size[1]) * lse->stride[1] +
           (int64_t)i * lse->stride[2];
}

/* sdpa(q, k, v, mask | NONE -> out, lse; causal, has_scale, scale) */
PK_KERNEL(sdpa) {
    if (nt != 6 || ns != 3) return PK_EARGS;
    pk_tensor *out = &t[4], *lse = &t[5];
    scores a;
    const int rc = sdpa_scores(&a, &t[0], &t[1], &t[2], &t[3], out, lse, s);
    if (rc != PK_OK) return rc;
    const int32_t groups = out->size[0] * out->size[1], L = out->size[2], S = t[1].size[2], Ev = a.ev;
    mats o = as_mats(out, 0);
    for (int32_t g = 0; g < groups; g++) {
        for (int32_t i = 0; i < L; i++) {
            float *oi = at(&o, g, i, 0), m = -pk_inff(), l = 0.0f;
            for (int32_t d = 0; d < Ev; d++) oi[(int64_t)d * o.sc] = 0.0f;
            attend(&a, g, i, a.causal_on && i + 1 < S ? i + 1 : S, oi, o.sc, &m, &l);
            if (l > 0.0f)
                for (int32_t d = 0; d < Ev; d++) oi[(int64_t)d * o.sc] = oi[(int64_t)d * o.sc] / l;
            *lse_at(lse, g, i) = l > 0.0f ? m + pk_logf(l) : 0.0f; /* a row with every key masked: 0, as aten's CPU kernel */
        }
    }
    return PK_OK;
}

/* p = exp(s - L) of key j of query row i (0 where masked) and the score gradient before scaling,
   ds = p * (dO_i . v_j - D); qi and di (column stride dsc) are the row's q and dO */
static float prob_and_grad(const scores *a, const float *qi, const float *di, int32_t dsc, int32_t g, int32_t i,
                           int32_t j, float L, float D, float *ds) {
    const float s = score(a, qi, g, i, j);
    if (s == -pk_inff()) {
        *ds = 0.0f;
        return 0.0f;
    }
    const float p = pk_expf(s - L);
    const float *vj = at(&a->v, g, j, 0);
    *ds = p * (dot(di, dsc, vj, a->v.sc, a->ev) - D);
    return p;
}

/* the score gradient through the scale operations (as the scores were made) */
static float scaled(const scores *a, float ds) {
    for (int o = 0; o < a->nops; o++) ds = a->op[o] ? ds / a->c[o] : ds * a->c[o];
    return ds;
}

static void zero_mats(const mats *m, int32_t groups, int32_t rows, int32_t cols) {
    for (int32_t g = 0; g < groups; g++)
        for (int32_t r = 0; r < rows; r++)
            for (int32_t c = 0; c < cols; c++) *at(m, g, r, c) = 0.0f;
}

/* sdpa_backward(dout, q, k, v, out, lse, mask | NONE -> dq, dk, dv; causal, has_scale, scale) */
PK_KERNEL(sdpa_backward) {
    if (nt != 10 || ns != 3) return PK_EARGS;
    const pk_tensor *dout = &t[0], *q = &t[1], *k = &t[2], *out = &t[4], *lse = &t[5];
    scores a;
    const int rc = sdpa_scores(&a, q, k, &t[3], &t[6], out, lse, s);
    if (rc != PK_OK) return rc;
    if (!pk_all_f32(t, 6) || !pk_all_f32(t + 7, 3)) return PK_EDTYPE;
    const int32_t L = q->size[2], E = a.e, S = k->size[2], Ev = a.ev;
    if (!pk_same_shape(dout, out) || !pk_same_shape(&t[7], q) || !pk_same_shape(&t[8], k) || !pk_same_shape(&t[9], &t[3]))
        return PK_EARGS;
    const float scale = a.c[0];
    const mats mo = as_mats(out, 0), md = as_mats(dout, 0), dq = as_mats(&t[7], 0), dk = as_mats(&t[8], 0),
               dv = as_mats(&t[9], 0);
    const int32_t groups = q->size[0] * q->size[1];
    zero_mats(&dq, groups, L, E);
    zero_mats(&dk, groups, S, E);
    zero_mats(&dv, groups, S, Ev);
    for (int32_t g = 0; g < groups; g++) {
        for (int32_t i = 0; i < L; i++) {
            const float Li = *lse_at(lse, g, i);
            const float *oi = at(&mo, g, i, 0), *di = at(&md, g, i, 0), *qi = at(&a.q, g, i, 0);
            const float D = dot(di, md.sc, oi, mo.sc, Ev);
            float *dqi = at(&dq, g, i, 0);
            const int32_t n = a.causal_on && i + 1 < S ? i + 1 : S;
            for (int32_t j = 0; j < n; j++) {
                float ds;
                const float p = prob_and_grad(&a, qi, di, md.sc, g, i, j, Li, D, &ds);
                if (p == 0.0f) continue;
                ds = ds * scale;
                float *dvj = at(&dv, g, j, 0), *dkj = at(&dk, g, j, 0);
                const float *kj = at(&a.k, g, j, 0);
                axpy(dvj, dv.sc, p, di, md.sc, Ev);
                axpy(dqi, dq.sc, ds, kj, a.k.sc, E);
                axpy(dkj, dk.sc, ds, qi, a.q.sc, E);
            }
        }
    }
    return PK_OK;
}

/* ------------------------------------------------------------------ streamed attention tiles
   Tensors are [G, rows, cols] (G = batch x heads): q [G, a, E], kt [G, E, b] (keys transposed), v [G, b, Ev],
   dout and o [G, a, Ev], m, l and lse [G, a, 1], stats [G, a, 2] = [lse, rowsum(dout * o)].
   Scalars: nops, then (op, c) per scale operation (op 0 multiply, 1 divide), has_causal, causal, q0, k0. */

/* the tile's scores from q, kt, v and the scalars from s[0]; the index of the next scalar, or -1 */
static int tile_scores(scores *a, const pk_tensor *q, const pk_tensor *kt, const pk_tensor *v, const pk_scalar *s, int ns) {
    if (ns < 1 || s[0].i < 0 || s[0].i > 4 || ns < 5 + 2 * s[0].i) return -1;
    if (q->ndim != 3 || !pk_all_f32(q, 1)) return -1;
    const int32_t lead[1] = {q->size[0]}, E = q->size[2], keys = kt->ndim == 3 ? kt->size[2] : -1;
    if (!shaped(kt, 3, lead, E, keys) || v->ndim != 3 || !shaped(v, 3, lead, keys, v->size[2])) return -1;
    a->q = as_mats(q, 0), a->k = as_mats(kt, 1), a->v = as_mats(v, 0);
    a->e = E, a->ev = v->size[2], a->nops = (int)s[0].i, a->mask = 0;
    for (int o = 0; o < a->nops; o++) a->op[o] = (int)s[1 + 2 * o].i, a->c[o] = (float)s[2 + 2 * o].f;
    const int at_ = 1 + 2 * a->nops;
    a->causal_on = s[at_].i != 0, a->causal = s[at_ + 1].i, a->q0 = s[at_ + 2].i, a->k0 = s[at_ + 3].i;
    return at_ + 4;
}

/* attention_step(o | NONE, m | NONE, l | NONE, q, kt, v -> o', m', l' | out, lse; tile scalars, last):
   one key tile added to a query tile's running state (tile_attention_step); the last step returns the
   normalised context tile and the rows' log-sum-exp */
PK_KERNEL(attention_step) {
    scores a;
    const int next = nt >= 8 ? tile_scores(&a, &t[3], &t[4], &t[5], s, ns) : -1;
    if (next < 0 || ns != next + 1) return PK_EARGS;
    const int last = s[next].i != 0;
    if (nt != (last ? 8 : 9)) return PK_EARGS;
    const pk_tensor *o_in = &t[0], *m_in = &t[1], *l_in = &t[2];
    const int32_t G = t[3].size[0], rows = t[3].size[1], keys = t[4].size[2], Ev = a.ev;
    const int32_t lead[1] = {G};
    const int have = o_in->dtype != PK_NONE;
    if (have != (m_in->dtype != PK_NONE) || have != (l_in->dtype != PK_NONE)) return PK_EARGS;
    if (have && (!shaped(o_in, 3, lead, rows, Ev) || !shaped(m_in, 3, lead, rows, 1) || !shaped(l_in, 3, lead, rows, 1)))
        return PK_EARGS;
    if (!shaped(&t[6], 3, lead, rows, Ev) || !shaped(&t[7], 3, lead, rows, 1) || (!last && !shaped(&t[8], 3, lead, rows, 1)))
        return PK_EARGS;
    const mats oi_m = have ? as_mats(o_in, 0) : as_mats(&t[6], 0), mi = have ? as_mats(m_in, 0) : oi_m,
               li = have ? as_mats(l_in, 0) : oi_m, oo = as_mats(&t[6], 0), mo = as_mats(&t[7], 0);
    const mats lo = last ? mo : as_mats(&t[8], 0);
    for (int32_t g = 0; g < G; g++) {
        for (int32_t i = 0; i < rows; i++) {
            float *orow = at(&oo, g, i, 0), m = -pk_inff(), l = 0.0f;
            if (have) {
                const float *src = at(&oi_m, g, i, 0);
                for (int32_t d = 0; d < Ev; d++) orow[(int64_t)d * oo.sc] = src[(int64_t)d * oi_m.sc];
                m = *at(&mi, g, i, 0), l = *at(&li, g, i, 0);
            } else {
                for (int32_t d = 0; d < Ev; d++) orow[(int64_t)d * oo.sc] = 0.0f;
            }
            attend(&a, g, i, keys, orow, oo.sc, &m, &l);
            if (last) {
                for (int32_t d = 0; d < Ev; d++) orow[(int64_t)d * oo.sc] = orow[(int64_t)d * oo.sc] / l;
                *at(&mo, g, i, 0) = (m == -pk_inff() ? 0.0f : m) + pk_logf(l);
            } else {
                *at(&mo, g, i, 0) = m;
                *at(&lo, g, i, 0) = l;
            }
        }
    }
    return PK_OK;
}

/* attention_grad_stats(dout, o, lse -> stats): [lse, rowsum(dout * o)] per row, the sum in float64 */
PK_KERNEL(attention_grad_stats) {
    (void)s;
    if (nt != 4 || ns != 0) return PK_EARGS;
    if (!pk_all_f32(t, 4)) return PK_EDTYPE;
    if (t[0].ndim != 3) return PK_EARGS;
    const int32_t lead[1] = {t[0].size[0]}, rows = t[0].size[1], Ev = t[0].size[2];
    if (!shaped(&t[1], 3, lead, rows, Ev) || !shaped(&t[2], 3, lead, rows, 1) || !shaped(&t[3], 3, lead, rows, 2))
        return PK_EARGS;
    const mats md = as_mats(&t[0], 0), mo = as_mats(&t[1], 0), ml = as_mats(&t[2], 0), ms = as_mats(&t[3], 0);
    for (int32_t g = 0; g < lead[0]; g++) {
        for (int32_t i = 0; i < rows; i++) {
            const float *di = at(&md, g, i, 0), *oi = at(&mo, g, i, 0);
            double sum = 0.0;
            for (int32_t d = 0; d < Ev; d++) sum += (double)di[(int64_t)d * md.sc] * (double)oi[(int64_t)d * mo.sc];
            *at(&ms, g, i, 0) = *at(&ml, g, i, 0);
            *at(&ms, g, i, 1) = (float)sum;
        }
    }
    return PK_OK;
}

/* the inputs every backward tile reads after its accumulators: q, kt, v, dout, stats (checked) */
static int tile_backward_args(scores *a, pk_tensor *t, const pk_scalar *s, int ns, mats *md, mats *ms) {
    if (tile_scores(a, &t[0], &t[1], &t[2], s, ns) != ns) return 0;
    const int32_t lead[1] = {t[0].size[0]}, rows = t[0].size[1];
    if (!shaped(&t[3], 3, lead, rows, a->ev) || !shaped(&t[4], 3, lead, rows, 2)) return 0;
    *md = as_mats(&t[3], 0), *ms = as_mats(&t[4], 0);
    return 1;
}

/* out = acc + out where acc is given (the accumulators of a chain of tiles) */
static int add_acc(const pk_tensor *acc, const pk_tensor *out) {
    if (acc->dtype == PK_NONE) return 1;
    if (acc->dtype != PK_F32 || !pk_same_shape(acc, out)) return 0;
    const mats ma = as_mats(acc, 0), mo = as_mats(out, 0);
    for (int32_t g = 0; g < out->size[0]; g++)
        for (int32_t r = 0; r < out->size[1]; r++)
            for (int32_t c = 0; c < out->size[2]; c++) *at(&mo, g, r, c) = *at(&ma, g, r, c) + *at(&mo, g, r, c);
    return 1;
}

/* attention_grad_kv(acc_kt | NONE, acc_v | NONE, q, kt, v, dout, stats -> dkt, dv; tile scalars):
   a key tile's (dK^T, dV) accumulated over one more query tile (tile_attention_grad_kv) */
PK_KERNEL(attention_grad_kv) {
    if (nt != 9) return PK_EARGS;
    scores a;
    mats md, ms;
    if (!tile_backward_args(&a, t + 2, s, ns, &md, &ms)) return PK_EARGS;
    const int32_t G = t[2].size[0], rows = t[2].size[1], keys = t[3].size[2], lead[1] = {G};
    if (!shaped(&t[7], 3, lead, a.e, keys) || !shaped(&t[8], 3, lead, keys, a.ev)) return PK_EARGS;
    const mats dkt = as_mats(&t[7], 1), dv = as_mats(&t[8], 0);
    zero_mats(&dkt, G, keys, a.e);
    zero_mats(&dv, G, keys, a.ev);
    for (int32_t g = 0; g < G; g++) {
        for (int32_t i = 0; i < rows; i++) {
            const float L = *at(&ms, g, i, 0), D = *at(&ms, g, i, 1);
            const float *qi = at(&a.q, g, i, 0), *di = at(&md, g, i, 0);
            for (int32_t j = 0; j < keys; j++) {
                float ds;
                const float p = prob_and_grad(&a, qi, di, md.sc, g, i, j, L, D, &ds);
                if (p == 0.0f) continue;
                ds = scaled(&a, ds);
                float *dvj = at(&dv, g, j, 0), *dkj = at(&dkt, g, j, 0);
                axpy(dvj, dv.sc, p, di, md.sc, a.ev);
                axpy(dkj, dkt.sc, ds, qi, a.q.sc, a.e);
            }
        }
    }
    return add_acc(&t[0], &t[7]) && add_acc(&t[1], &t[8]) ? PK_OK : PK_EARGS;
}

/* attention_grad_q(acc | NONE, q, kt, v, dout, stats -> dq; tile scalars): a query tile's dQ accumulated
   over one more key tile (tile_attention_grad_q) */
PK_KERNEL(attention_grad_q) {
    if (nt != 7) return PK_EARGS;
    scores a;
    mats md, ms;
    if (!tile_backward_args(&a, t + 1, s, ns, &md, &ms)) return PK_EARGS;
    const int32_t G = t[1].size[0], rows = t[1].size[1], keys = t[2].size[2], lead[1] = {G};
    if (!shaped(&t[6], 3, lead, rows, a.e)) return PK_EARGS;
    const mats dq = as_mats(&t[6], 0);
    for (int32_t g = 0; g < G; g++) {
        for (int32_t i = 0; i < rows; i++) {
            const float L = *at(&ms, g, i, 0), D = *at(&ms, g, i, 1);
            const float *qi = at(&a.q, g, i, 0), *di = at(&md, g, i, 0);
            float *dqi = at(&dq, g, i, 0);
            for (int32_t d = 0; d < a.e; d++) dqi[(int64_t)d * dq.sc] = 0.0f;
            for (int32_t j = 0; j < keys; j++) {
                float ds;
                if (prob_and_grad(&a, qi, di, md.sc, g, i, j, L, D, &ds) == 0.0f) continue;
                ds = scaled(&a, ds);
                const float *kj = at(&a.k, g, j, 0);
                axpy(dqi, dq.sc, ds, kj, a.k.sc, a.e);
            }
        }
    }
    return add_acc(&t[0], &t[6]) ? PK_OK : PK_EARGS;
}

/* zeros_like(x_0 .. x_{n-1} -> z_0 .. z_{n-1}; n): every output all zeros (tile_zeros_like_pair: the
   gradients of a key tile no query sees) */
PK_KERNEL(zeros_like) {
    if (ns != 1 || s[0].i < 1 || nt != 2 * s[0].i) return PK_EARGS;
    for (int i = (int)s[0].i; i < nt; i++) {
        if (pk_esize(t[i].dtype) == 0) return PK_EDTYPE;
        pk_zero_view(&t[i]);
    }
    return PK_OK;
}
