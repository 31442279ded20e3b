/* Losses (specs: poet/cbackend/ops_loss.py): nll_loss forward and backward (reduction none, mean,
   sum; a class weight; ignore_index), the tiled loss's partial sums and their combination, mse_loss
   and its gradient.

   nll_loss sums in aten's CPU order (a cascade over the batch index: level j is carried into level
   j + 1 whenever the index's j-th group of 4 bits is zero), so loss and total weight equal aten's
   bit for bit; its gradient is one product per row, also exact. */
#include "pk.h"
#include "pk_dense.h"
#include "pk_iter.h"

static int is_target(const pk_tensor *t) { return pk_is_index(t) || t->dtype == PK_U8; }

static int64_t target_at(const pk_tensor *t, int64_t i) {
    const int64_t off = t->ndim ? i * t->stride[0] : 0;
    return t->dtype == PK_U8 ? (int64_t)((const uint8_t *)t->data)[off] : pk_index_at(t, off);
}

/* rows, classes and the row stride of log-probabilities [N, C] or [C]; 0 when target does not match */
static int nll_shape(const pk_tensor *logp, const pk_tensor *target, const pk_tensor *weight, int32_t *rows,
                     int32_t *classes) {
    if (logp->ndim == 2) *rows = logp->size[0], *classes = logp->size[1];
    else if (logp->ndim == 1) *rows = 1, *classes = logp->size[0];
    else return 0;
    if (logp->ndim == 2 ? (target->ndim != 1 || target->size[0] != *rows) : target->ndim > 1 || pk_numel(target) != 1)
        return 0;
    return weight->dtype == PK_NONE || (weight->ndim == 1 && weight->size[0] == *classes);
}

/* the summed loss and weight over the rows, in aten's cascade order; PK_EARGS for a target out of range */
static int nll_sum(const pk_tensor *logp, const pk_tensor *target, const pk_tensor *weight, int64_t ignore,
                   float *loss, float *total_weight) {
    int32_t rows, classes;
    nll_shape(logp, target, weight, &rows, &classes);
    const int32_t sr = logp->ndim == 2 ? logp->stride[0] : 0, sc = logp->stride[logp->ndim - 1];
    const float *w = (const float *)weight->data;
    int ceil_log2 = 0;
    while (((int64_t)1 << ceil_log2) < rows) ceil_log2++;
    const int power = ceil_log2 / 8 > 4 ? ceil_log2 / 8 : 4;
    const int64_t mask = ((int64_t)1 << power) - 1;
    float lsum[8] = {0}, wsum[8] = {0};
    int64_t ignored = 0;
    for (int64_t b = 0; b < rows; b++) {
        const int64_t k = target_at(target, b);
        if (k == ignore) {
            ignored++;
            continue;
        }
        if (k < 0 || k >= classes) return PK_EARGS;
        const float x = ((const float *)logp->data)[b * sr + k * sc];
        if (w) {
            const float wk = w[k * weight->stride[0]];
            lsum[0] -= x * wk;
            wsum[0] += wk;
        } else {
            lsum[0] -= x;
        }
        for (int j = 0; j < 7; j++) {
            if (b & (mask << (j * power))) break;
            wsum[j + 1] += wsum[j];
            lsum[j + 1] += lsum[j];
            wsum[j] = 0.0f;
            lsum[j] = 0.0f;
        }
    }
    float l = 0.0f, tw = 0.0f;
    for (int j = 0; j < 8; j++) l += lsum[j], tw += wsum[j];
    *loss = l;
    *total_weight = w ? tw : (float)(rows - ignored);
    return PK_OK;
}

enum { REDUCE_NONE = 0, REDUCE_MEAN = 1, REDUCE_SUM = 2 };

/* nll_loss(logp [N, C] | [C], target [N] | [], weight [C] | NONE -> out, total_weight; reduction, ignore_index) */
PK_KERNEL(nll_loss) {
    if (nt != 5 || ns != 2) return PK_EARGS;
    const pk_tensor *logp = &t[0], *target = &t[1], *weight = &t[2];
    pk_tensor *out = &t[3], *tw = &t[4];
    if (logp->dtype != PK_F32 || out->dtype != PK_F32 || tw->dtype != PK_F32 || !is_target(target)) return PK_EDTYPE;
    if (weight->dtype != PK_NONE && weight->dtype != PK_F32) return PK_EDTYPE;
    const int64_t reduction = s[0].i, ignore = s[1].i;
    int32_t rows, classes;
    if (!nll_shape(logp, target, weight, &rows, &classes) || tw->ndim != 0 || reduction < 0 || reduction > 2)
        return PK_EARGS;
    float *o = (float *)out->data;
    if (reduction == REDUCE_NONE && logp->ndim == 2) {
        if (out->ndim != 1 || out->size[0] != rows) return PK_EARGS;
        for (int32_t i = 0; i < rows; i++) {
            const int64_t k = target_at(target, i);
            float v = 0.0f;
            if (k != ignore) {
                if (k < 0 || k >= classes) return PK_EARGS;
                const float wk = weight->dtype != PK_NONE ? ((const float *)weight->data)[k * weight->stride[0]] : 1.0f;
                v = -((const float *)logp->data)[(int64_t)i * logp->stride[0] + k * logp->stride[1]] * wk;
            }
            o[(int64_t)i * out->stride[0]] = v;
        }
        *(float *)tw->data = 0.0f;
        return PK_OK;
    }
    if (out->ndim != 0) return PK_EARGS;
    float loss, total;
    int rc = nll_sum(logp, target, weight, ignore, &loss, &total);
    if (rc != PK_OK) return rc;
    *o = reduction == REDUCE_MEAN ? loss / total : loss;
    *(float *)tw->data = total;
    return PK_OK;
}

/* nll_loss_backward(grad, logp, target, weight | NONE, total_weight -> grad_input; reduction, ignore_index):
   0 but at each row's target, -weight * grad (divided by total_weight for the mean) */
PK_KERNEL(nll_loss_backward) {
    if (nt != 6 || ns != 2) return PK_EARGS;
    const pk_tensor *g = &t[0], *logp = &t[1], *target = &t[2], *weight = &t[3], *tw = &t[4];
    pk_tensor *gi = &t[5];
    if (!pk_all_f32(t, 2) || tw->dtype != PK_F32 || gi->dtype != PK_F32 || !is_target(target)) return PK_EDTYPE;
    if (weight->dtype != PK_NONE && weight->dtype != PK_F32) return PK_EDTYPE;
    const int64_t reduction = s[0].i, ignore = s[1].i;
    int32_t rows, classes;
    if (!nll_shape(logp, target, weight, &rows, &classes) || !pk_same_shape(gi, logp) || pk_numel(tw) != 1)
        return PK_EARGS;
    const int per_row = reduction == REDUCE_NONE && logp->ndim == 2;
    if (per_row ? g->ndim != 1 || g->size[0] != rows : pk_numel(g) != 1) return PK_EARGS;
    pk_zero_view(gi);
    const float *w = (const float *)weight->data, *gp = (const float *)g->data;
    float grad = 0.0f;
    if (!per_row) grad = -(reduction == REDUCE_MEAN ? *gp / *(const float *)tw->data : *gp);
    const int32_t sr = logp->ndim == 2 ? gi->stride[0] : 0, sc = gi->stride[gi->ndim - 1];
    for (int32_t i = 0; i < rows; i++) {
        const int64_t k = target_at(target, i);
        if (k == ignore) continue;
        if (k < 0 || k >= classes) return PK_EARGS;
        const float wk = w ? w[k * weight->stride[0]] : 1.0f;
        float v;
        if (per_row) v = -wk * gp[(int64_t)i * g->stride[0]];
        else v = w ? wk * grad : grad;
        ((float *)gi->data)[(int64_t)i * sr + k * sc] = v;
    }
    return PK_OK;
}

/* nll_partial(logp, target, weight | NONE -> out f64 [2]; ignore_index): one tile's [summed loss, summed
   weight] (tile_nll_partial: nll_loss with reduction sum, widened to float64) */
PK_KERNEL(nll_partial) {
    if (nt != 4 || ns != 1) return PK_EARGS;
    const pk_tensor *logp = &t[0], *target = &t[1], *weight = &t[2];
    pk_tensor *out = &t[3];
    if (logp->dtype != PK_F32 || out->dtype != PK_F64 || !is_target(target)) return PK_EDTYPE;
    if (weight->dtype != PK_NONE && weight->dtype != PK_F32) return PK_EDTYPE;
    int32_t rows, classes;
    if (!nll_shape(logp, target, weight, &rows, &classes) || out->ndim != 1 || out->size[0] != 2) return PK_EARGS;
    float loss = 0.0f, total = 0.0f;
    if (rows > 0) {
        int rc = nll_sum(logp, target, weight, s[0].i, &loss, &total);
        if (rc != PK_OK) return rc;
    }
    double *o = (double *)out->data;
    o[0] = (double)loss;
    o[out->stride[0]] = (double)total;
    return PK_OK;
}

/* nll_combine(p_0 .. p_{k-1} f64 [2] -> loss, total_weight; reduction, k): the partials summed in order
   (float64), the loss divided by the weight for the mean (tile_nll_combine) */
PK_KERNEL(nll_combine) {
    if (ns != 2 || s[1].i < 1 || nt != s[1].i + 2) return PK_EARGS;
    const int k = (int)s[1].i;
    pk_tensor *loss = &t[k], *tw = &t[k + 1];
    if (loss->dtype != PK_F32 || tw->dtype != PK_F32) return PK_EDTYPE;
    if (pk_numel(loss) != 1 || pk_numel(tw) != 1) return PK_EARGS;
    double sl = 0.0, sw = 0.0;
    for (int i = 0; i < k; i++) {
        if (t[i].dtype != PK_F64) return PK_EDTYPE;
        if (t[i].ndim != 1 || t[i].size[0] != 2) return PK_EARGS;
        const double *p = (const double *)t[i].data;
        sl = i ? sl + p[0] : p[0];
        sw = i ? sw + p[t[i].stride[0]] : p[t[i].stride[0]];
    }
    *(float *)loss->data = (float)(s[0].i == REDUCE_MEAN ? sl / sw : sl);
    *(float *)tw->data = (float)sw;
    return PK_OK;
}

/* mse_loss(x, target -> out; reduction): (x - target)^2 per element, or its sum or mean (cascaded sum) */
PK_KERNEL(mse_loss) {
    if (nt != 3 || ns != 1) return PK_EARGS;
    if (!pk_all_f32(t, 3)) return PK_EDTYPE;
    const pk_tensor *x = &t[0], *y = &t[1];
    pk_tensor *out = &t[2];
    const int64_t reduction = s[0].i;
    if (!pk_same_shape(x, y) || reduction < 0 || reduction > 2) return PK_EARGS;
    if (reduction == REDUCE_NONE) {
        if (!pk_same_shape(out, x)) return PK_EARGS;
        PK_FOR3(out, x, y, o, a, b, {
            const float d = *a - *b;
            *o = d * d;
        });
        return PK_OK;
    }
    if (pk_numel(out) != 1) return PK_EARGS;
    pk_cascade c;
    pk_cascade_init(&c);
    pk_rows r;
    const int last = x->ndim - 1;
    const int32_t n = x->ndim ? x->size[last] : 1, sx = x->ndim ? x->stride[last] : 0, sy = x->ndim ? y->stride[last] : 0;
    if (n > 0 && pk_rows_init(&r, x, last)) {
        int64_t off[2] = {0, 0};
        const int32_t *st[2] = {x->stride, y->stride};
        do {
            const float *a = (const float *)x->data + off[0], *b = (const float *)y->data + off[1];
            for (int32_t i = 0; i < n; i++) {
                const float d = a[(int64_t)i * sx] - b[(int64_t)i * sy];
                pk_cascade_add(&c, d * d);
            }
        } while (pk_rows_next(&r, st, 2, off));
    }
    const float sum = pk_cascade_total(&c);
    *(float *)out->data = reduction == REDUCE_MEAN ? sum / (float)pk_numel(x) : sum;
    return PK_OK;
}

/* mse_loss_backward(grad, x, target -> grad_input; reduction): norm * (x - target) * grad with norm =
   2 / numel for the mean, else 2 (as aten: the factor rounded to float first); every input is viewed
   with the output's shape (spec broadcast=True: grad is a 0-dim tensor unless reduction is none) */
PK_KERNEL(mse_loss_backward) {
    if (nt != 4 || ns != 1) return PK_EARGS;
    if (!pk_all_f32(t, 4)) return PK_EDTYPE;
    pk_tensor *gi = &t[3];
    if (!pk_same_shape(&t[0], gi) || !pk_same_shape(&t[1], gi) || !pk_same_shape(&t[2], gi)) return PK_EARGS;
    const int64_t numel = pk_numel(gi);
    const float norm = (float)(s[0].i == REDUCE_MEAN && numel > 0 ? 2.0 / (double)numel : 2.0);
    PK_EACH4(gi, &t[0], &t[1], &t[2], o, g, a, b, { *o = norm * (*a - *b) * *g; });
    return PK_OK;
}
