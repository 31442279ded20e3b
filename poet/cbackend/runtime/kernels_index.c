/* Indexing and its gradients (specs: poet/cbackend/ops_index.py): embedding (+ dense backward and
   its tiled accumulation), gather / scatter_add, index_select / index_add, select_backward,
   slice_backward.  Indices are int64 or int32; one out of range is an error (PK_EARGS), never a
   read or write outside a view.  Gradients are summed in the order of the indices, as aten's CPU
   kernels do, so they equal aten's bit for bit. */
#include "pk.h"
#include "pk_dense.h"

/* embedding(weight [V, D], idx -> out [*idx, D]) */
PK_KERNEL(embedding) {
    (void)s;
    if (nt != 3 || ns != 0) return PK_EARGS;
    const pk_tensor *w = &t[0], *idx = &t[1];
    pk_tensor *out = &t[2];
    if (w->dtype != PK_F32 || out->dtype != PK_F32 || !pk_is_index(idx)) return PK_EDTYPE;
    const int nd = out->ndim, last = nd - 1;
    if (w->ndim != 2 || nd != idx->ndim + 1 || out->size[last] != w->size[1]) return PK_EARGS;
    for (int d = 0; d < idx->ndim; d++)
        if (idx->size[d] != out->size[d]) return PK_EARGS;
    int32_t ist[PK_MAXDIM] = {0};
    for (int d = 0; d < idx->ndim; d++) ist[d] = idx->stride[d];
    const int32_t n = out->size[last], so = out->stride[last], sw = w->stride[1];
    pk_rows r;
    if (!pk_rows_init(&r, out, last) || pk_numel(out) == 0) return PK_OK;
    int64_t off[2] = {0, 0};
    const int32_t *st[2] = {out->stride, ist};
    do {
        const int64_t k = pk_index_at(idx, off[1]);
        if (k < 0 || k >= w->size[0]) return PK_EARGS;
        const float *src = (const float *)w->data + k * w->stride[0];
        float *dst = (float *)out->data + off[0];
        for (int32_t j = 0; j < n; j++) dst[(int64_t)j * so] = src[(int64_t)j * sw];
    } while (pk_rows_next(&r, st, 2, off));
    return PK_OK;
}

/* number of positions of idx holding k (scale_grad_by_freq: counted without a table) */
static int64_t occurrences(const pk_tensor *idx, int64_t k) {
    int64_t c = 0;
    pk_tensor whole = *idx;
    const int32_t *st[1] = {idx->stride};
    int64_t off[1] = {0};
    pk_rows r;
    if (!pk_rows_init(&r, &whole, -1)) return 0;
    do c += pk_index_at(idx, off[0]) == k;
    while (pk_rows_next(&r, st, 1, off));
    return c;
}

/* embedding_backward(acc | NONE, grad [*idx, D], idx -> out [V, D]; padding_idx, scale_grad_by_freq):
   out = acc + embedding_dense_backward(grad, idx, V, padding_idx, scale_grad_by_freq), the rows of grad
   added to out's rows in the order of idx (the positions holding padding_idx skipped); with
   scale_grad_by_freq each is scaled by 1 / (how often its index occurs). */
PK_KERNEL(embedding_backward) {
    if (nt != 4 || ns != 2) return PK_EARGS;
    const pk_tensor *acc = &t[0], *g = &t[1], *idx = &t[2];
    pk_tensor *out = &t[3];
    if (g->dtype != PK_F32 || out->dtype != PK_F32 || !pk_is_index(idx)) return PK_EDTYPE;
    if (acc->dtype != PK_NONE && acc->dtype != PK_F32) return PK_EDTYPE;
    if (acc->dtype != PK_NONE && !pk_same_shape(acc, out)) return PK_EARGS;
    const int gd = g->ndim, last = gd - 1;
    if (out->ndim != 2 || gd != idx->ndim + 1 || g->size[last] != out->size[1]) return PK_EARGS;
    for (int d = 0; d < idx->ndim; d++)
        if (idx->size[d] != g->size[d]) return PK_EARGS;
    const int64_t padding = s[0].i, by_freq = s[1].i;
    const int32_t n = out->size[1], so = out->stride[1], sg = g->stride[last];
    pk_zero_view(out);
    int32_t ist[PK_MAXDIM] = {0};
    for (int d = 0; d < idx->ndim; d++) ist[d] = idx->stride[d];
    pk_rows r;
    if (pk_rows_init(&r, g, last) && pk_numel(g) > 0) {
        int64_t off[2] = {0, 0};
        const int32_t *st[2] = {g->stride, ist};
        do {
            const int64_t k = pk_index_at(idx, off[1]);
            if (k == padding) continue;
            if (k < 0 || k >= out->size[0]) return PK_EARGS;
            float *dst = (float *)out->data + k * out->stride[0];
            const float *src = (const float *)g->data + off[0];
            if (by_freq) {
                const float scale = (float)(1.0 / (double)occurrences(idx, k));
                for (int32_t j = 0; j < n; j++) dst[(int64_t)j * so] += scale * src[(int64_t)j * sg];
            } else {
                for (int32_t j = 0; j < n; j++) dst[(int64_t)j * so] += src[(int64_t)j * sg];
            }
        } while (pk_rows_next(&r, st, 2, off));
    }
    if (acc->dtype != PK_NONE) {
        for (int32_t i = 0; i < out->size[0]; i++) {
            float *o = (float *)out->data + (int64_t)i * out->stride[0];
            const float *a = (const float *)acc->data + (int64_t)i * acc->stride[0];
            for (int32_t j = 0; j < n; j++) o[(int64_t)j * so] = a[(int64_t)j * acc->stride[1]] + o[(int64_t)j * so];
        }
    }
    return PK_OK;
}

/* the rows along dim of x, index and out (gather / scatter_add): index's shape, x's strides; 0 if
   index does not fit in x and out */
static int fits_along(const pk_tensor *x, const pk_tensor *index, const pk_tensor *out, int dim, int out_is_index_shaped) {
    if (x->ndim != index->ndim || out->ndim != index->ndim) return 0;
    for (int d = 0; d < index->ndim; d++) {
        if (d != dim && index->size[d] > x->size[d]) return 0;
        if (out_is_index_shaped ? out->size[d] != index->size[d] : out->size[d] != x->size[d]) return 0;
    }
    return 1;
}

/* gather(x, index -> out [index's shape]; dim): out[p] = x[p with p[dim] = index[p]] (any dtype) */
PK_KERNEL(gather) {
    if (nt != 3 || ns != 1) return PK_EARGS;
    const pk_tensor *x = &t[0], *index = &t[1];
    pk_tensor *out = &t[2];
    const int es = pk_esize(out->dtype);
    if (es == 0 || x->dtype != out->dtype || !pk_is_index(index)) return PK_EDTYPE;
    const int dim = pk_dim(s[0].i, out->ndim);
    if (dim < 0 || !fits_along(x, index, out, dim, 1)) return PK_EARGS;
    if (pk_numel(out) == 0) return PK_OK;
    const int32_t n = out->ndim ? out->size[dim] : 1;
    const int32_t so = out->ndim ? out->stride[dim] : 0, si = out->ndim ? index->stride[dim] : 0;
    const int32_t sx = x->ndim ? x->stride[dim] : 0, limit = x->ndim ? x->size[dim] : 1;
    pk_rows r;
    pk_rows_init(&r, out, out->ndim ? dim : -1);
    int64_t off[3] = {0, 0, 0};
    const int32_t *st[3] = {out->stride, index->stride, x->stride};
    do {
        for (int32_t j = 0; j < n; j++) {
            const int64_t k = pk_index_at(index, off[1] + (int64_t)j * si);
            if (k < 0 || k >= limit) return PK_EARGS;
            pk_move1((char *)out->data + (off[0] + (int64_t)j * so) * es, (const char *)x->data + (off[2] + k * sx) * es, es);
        }
    } while (pk_rows_next(&r, st, 3, off));
    return PK_OK;
}

/* scatter_add(x, index, src -> out [x's shape]; dim): out = x, then out[p with p[dim] = index[p]] +=
   src[p] for every position p of index, in order along dim (gather's gradient) */
PK_KERNEL(scatter_add) {
    if (nt != 4 || ns != 1) return PK_EARGS;
    const pk_tensor *x = &t[0], *index = &t[1], *src = &t[2];
    pk_tensor *out = &t[3];
    if (!pk_all_f32(t, 1) || src->dtype != PK_F32 || out->dtype != PK_F32 || !pk_is_index(index)) return PK_EDTYPE;
    const int dim = pk_dim(s[0].i, out->ndim);
    if (dim < 0 || !fits_along(out, index, x, dim, 0) || src->ndim != index->ndim) return PK_EARGS;
    for (int d = 0; d < index->ndim; d++)
        if (index->size[d] > src->size[d]) return PK_EARGS;
    int rc = pk_copy_view(out, x);
    if (rc != PK_OK || pk_numel(index) == 0) return rc;
    const int32_t n = index->ndim ? index->size[dim] : 1, si = index->ndim ? index->stride[dim] : 0;
    const int32_t ss = src->ndim ? src->stride[dim] : 0, so = out->ndim ? out->stride[dim] : 0;
    const int32_t limit = out->ndim ? out->size[dim] : 1;
    pk_rows r;
    pk_rows_init(&r, index, index->ndim ? dim : -1);
    int64_t off[3] = {0, 0, 0};
    const int32_t *st[3] = {index->stride, src->stride, out->stride};
    do {
        for (int32_t j = 0; j < n; j++) {
            const int64_t k = pk_index_at(index, off[0] + (int64_t)j * si);
            if (k < 0 || k >= limit) return PK_EARGS;
            float *o = (float *)out->data + off[2] + k * so;
            *o = *o + ((const float *)src->data)[off[1] + (int64_t)j * ss];
        }
    } while (pk_rows_next(&r, st, 3, off));
    return PK_OK;
}

/* index_select(x, index [n] -> out; dim): out's positions along dim are x's at index[0..n) (any dtype) */
PK_KERNEL(index_select) {
    if (nt != 3 || ns != 1) return PK_EARGS;
    const pk_tensor *x = &t[0], *index = &t[1];
    pk_tensor *out = &t[2];
    if (pk_esize(out->dtype) == 0 || x->dtype != out->dtype || !pk_is_index(index)) return PK_EDTYPE;
    const int dim = pk_dim(s[0].i, x->ndim);
    const int64_t n = pk_numel(index);
    if (dim < 0 || index->ndim > 1 || out->ndim != x->ndim) return PK_EARGS;
    const int32_t si = index->ndim ? index->stride[0] : 0;
    for (int64_t j = 0; j < n; j++) {
        const int64_t k = pk_index_at(index, j * si);
        if (k < 0 || k >= (x->ndim ? x->size[dim] : 1)) return PK_EARGS;
        pk_tensor from = x->ndim ? pk_narrow(x, dim, k, 1, 1) : *x, to = out->ndim ? pk_narrow(out, dim, j, 1, 1) : *out;
        int rc = pk_copy_view(&to, &from);
        if (rc != PK_OK) return rc;
    }
    return (out->ndim ? out->size[dim] : 1) == n ? PK_OK : PK_EARGS;
}

/* index_add(x, index [n], src -> out; dim, alpha): out = x, then out's position index[j] along dim +=
   alpha * src's position j, for j in order (index_select's gradient) */
PK_KERNEL(index_add) {
    if (nt != 4 || ns != 2) return PK_EARGS;
    const pk_tensor *x = &t[0], *index = &t[1], *src = &t[2];
    pk_tensor *out = &t[3];
    if (x->dtype != PK_F32 || src->dtype != PK_F32 || out->dtype != PK_F32 || !pk_is_index(index)) return PK_EDTYPE;
    const int dim = pk_dim(s[0].i, out->ndim);
    const float alpha = (float)s[1].f;
    const int64_t n = pk_numel(index);
    if (dim < 0 || index->ndim > 1 || src->ndim != out->ndim || (out->ndim && src->size[dim] != n)) return PK_EARGS;
    int rc = pk_copy_view(out, x);
    if (rc != PK_OK) return rc;
    const int32_t si = index->ndim ? index->stride[0] : 0;
    for (int64_t j = 0; j < n; j++) {
        const int64_t k = pk_index_at(index, j * si);
        if (k < 0 || k >= (out->ndim ? out->size[dim] : 1)) return PK_EARGS;
        pk_tensor to = out->ndim ? pk_narrow(out, dim, k, 1, 1) : *out, from = src->ndim ? pk_narrow(src, dim, j, 1, 1) : *src;
        if (!pk_same_shape(&to, &from)) return PK_EARGS;
        pk_rows r;
        if (!pk_rows_init(&r, &to, -1)) continue;
        int64_t off[2] = {0, 0};
        const int32_t *st[2] = {to.stride, from.stride};
        do {
            float *o = (float *)to.data + off[0];
            const float v = ((const float *)from.data)[off[1]];
            *o = *o + (alpha == 1.0f ? v : alpha * v);
        } while (pk_rows_next(&r, st, 2, off));
    }
    return PK_OK;
}

/* select_backward(grad -> out; dim, index): out = 0 but its position index along dim, which is grad */
PK_KERNEL(select_backward) {
    if (nt != 2 || ns != 2) return PK_EARGS;
    pk_tensor *out = &t[1];
    if (t[0].dtype != PK_F32 || out->dtype != PK_F32) return PK_EDTYPE;
    const int dim = pk_dim(s[0].i, out->ndim);
    if (dim < 0 || out->ndim == 0) return PK_EARGS;
    int64_t index = s[1].i < 0 ? s[1].i + out->size[dim] : s[1].i;
    if (index < 0 || index >= out->size[dim]) return PK_EARGS;
    pk_zero_view(out);
    pk_tensor part = pk_select(out, dim, index);
    return pk_copy_view(&part, &t[0]);
}

/* slice_backward(grad -> out; dim, start, end, step): out = 0 but positions start, start + step, ...
   along dim, which are grad (start and end as aten takes them: negative from the end, clamped) */
PK_KERNEL(slice_backward) {
    if (nt != 2 || ns != 4) return PK_EARGS;
    pk_tensor *out = &t[1];
    if (t[0].dtype != PK_F32 || out->dtype != PK_F32) return PK_EDTYPE;
    const int dim = pk_dim(s[0].i, out->ndim);
    if (dim < 0 || out->ndim == 0 || s[3].i < 1 || t[0].ndim != out->ndim) return PK_EARGS;
    const int64_t size = out->size[dim], step = s[3].i;
    int64_t start = s[1].i < 0 ? s[1].i + size : s[1].i;
    start = start < 0 ? 0 : start > size ? size : start;
    const int32_t count = t[0].size[dim];
    if (count > 0 && start + (int64_t)(count - 1) * step >= size) return PK_EARGS;
    pk_zero_view(out);
    pk_tensor part = pk_narrow(out, dim, start, count, (int32_t)step);
    return pk_copy_view(&part, &t[0]);
}
