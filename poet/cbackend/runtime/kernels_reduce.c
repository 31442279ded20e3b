/* Sums and means over any dimensions, and the tiled sum's combination (specs: poet/cbackend/ops_pool.py).

   The output's dtype decides the accumulation: float32 sums each row of the innermost reduced
   dimension by a cascade and the rows by another (pk_dense.h's pk_cascade: error growing with log n,
   like aten's cascade sum), float64 sums in double in order (the tile partials, as the Python's
   x.double().sum()), integers in int64. */
#include "pk.h"
#include "pk_dense.h"
#include "pk_elem.h"

/* an odometer over sizes[0..n) advancing element offsets into two views */
typedef struct {
    int n;
    int32_t size[PK_MAXDIM], sa[PK_MAXDIM], sb[PK_MAXDIM], idx[PK_MAXDIM];
    int64_t a, b;
} odo;

static void odo_init(odo *o) {
    for (int d = 0; d < o->n; d++) o->idx[d] = 0;
    o->a = o->b = 0;
}

/* 0 after the last position */
static int odo_next(odo *o) {
    for (int d = o->n - 1; d >= 0; d--) {
        if (++o->idx[d] < o->size[d]) {
            o->a += o->sa[d], o->b += o->sb[d];
            return 1;
        }
        o->idx[d] = 0;
        o->a -= (int64_t)o->sa[d] * (o->size[d] - 1), o->b -= (int64_t)o->sb[d] * (o->size[d] - 1);
    }
    return 0;
}

static int64_t odo_count(const odo *o) {
    int64_t c = 1;
    for (int d = 0; d < o->n; d++) c *= o->size[d];
    return c;
}

/* the sum of x over the reduced positions from element offset base; red: sizes and x strides (sb unused) */
static void reduce_at(const pk_tensor *x, const pk_tensor *y, int64_t yoff, int64_t base, odo *red, int64_t count,
                      int mean) {
    if (y->dtype == PK_F32) {
        pk_cascade acc;
        pk_cascade_init(&acc);
        const int last = red->n - 1;
        if (count > 0) {
            if (x->dtype == PK_F32 && last >= 0) {
                /* rows of the innermost reduced dimension: the outer odometer walks the others */
                const int32_t len = red->size[last], st = red->sa[last];
                odo outer = *red;
                outer.n = last;
                odo_init(&outer);
                do pk_cascade_add(&acc, pk_sum_f32((const float *)x->data + base + outer.a, len, st));
                while (odo_next(&outer));
            } else {
                odo_init(red);
                do pk_cascade_add(&acc, (float)pk_get(x, base + red->a));
                while (odo_next(red));
            }
        }
        float total = pk_cascade_total(&acc);
        if (mean) total = total / (float)count;
        ((float *)y->data)[yoff] = total;
    } else if (pk_is_float(y->dtype)) {
        double total = 0.0;
        odo_init(red);
        if (count > 0) do total += pk_get(x, base + red->a);
            while (odo_next(red));
        pk_set(y, yoff, mean ? total / (double)count : total);
    } else {
        uint64_t total = 0;
        odo_init(red);
        if (count > 0) do total += (uint64_t)pk_geti(x, base + red->a);
            while (odo_next(red));
        pk_seti(y, yoff, (int64_t)total);
    }
}

/* sum(x -> y; mean, mask): the sum (mean = 1: the mean) of x over the dimensions whose bit is set in
   mask; y keeps them as size 1 (keepdim) or drops them */
PK_KERNEL(sum) {
    if (nt != 2 || ns != 2) return PK_EARGS;
    const pk_tensor *x = &t[0], *y = &t[1];
    const int mean = s[0].i != 0;
    const int64_t mask = s[1].i;
    if (x->dtype == PK_NONE || y->dtype == PK_NONE) return PK_EDTYPE;
    if (mean && !pk_is_float(y->dtype)) return PK_EDTYPE;
    if (mask < 0 || mask >= ((int64_t)1 << x->ndim)) return PK_EARGS;
    odo kept = {0}, red = {0};
    int reduced = 0;
    for (int d = 0; d < x->ndim; d++) reduced += (int)((mask >> d) & 1);
    const int keepdim = y->ndim == x->ndim;
    if (!keepdim && y->ndim != x->ndim - reduced) return PK_EARGS;
    int yd = 0;
    for (int d = 0; d < x->ndim; d++) {
        if ((mask >> d) & 1) {
            if (keepdim && y->size[d] != 1) return PK_EARGS;
            red.size[red.n] = x->size[d], red.sa[red.n] = x->stride[d], red.sb[red.n] = 0;
            red.n++;
            yd += keepdim;
        } else {
            if (y->size[yd] != x->size[d]) return PK_EARGS;
            kept.size[kept.n] = x->size[d], kept.sa[kept.n] = x->stride[d], kept.sb[kept.n] = y->stride[yd];
            kept.n++;
            yd++;
        }
    }
    const int64_t count = odo_count(&red);
    if (odo_count(&kept) == 0) return PK_OK;
    odo_init(&kept);
    do reduce_at(x, y, kept.b, kept.a, &red, count, mean);
    while (odo_next(&kept));
    return PK_OK;
}

/* tile_sum_combine(partial_0 .. partial_{k-1} -> y; k, scale): (sum of the float64 partials, in order)
   * scale, in y's dtype (scale: 1 for a sum, 1/count for a mean) */
PK_KERNEL(tile_sum_combine) {
    if (ns != 2 || s[0].i < 1 || nt != s[0].i + 1) return PK_EARGS;
    const int k = (int)s[0].i;
    const pk_tensor *y = &t[k];
    const double scale = s[1].f;
    if (!pk_is_float(y->dtype)) return PK_EDTYPE;
    for (int i = 0; i < k; i++) {
        if (t[i].dtype != PK_F64) return PK_EDTYPE;
        if (!pk_same_shape(&t[i], y)) return PK_EARGS;
    }
    pk_walk w;
    pk_walk_init(&w, 2, y, &t[0], 0, 0);
    for (int64_t n = pk_numel(y); n > 0; n--, pk_walk_next(&w)) {
        double acc = ((const double *)t[0].data)[w.off[1]];
        for (int i = 1; i < k; i++) {
            int64_t off = 0;
            for (int d = 0; d < y->ndim; d++) off += (int64_t)w.idx[d] * t[i].stride[d];
            acc = acc + ((const double *)t[i].data)[off];
        }
        pk_set(y, w.off[0], acc * scale);
    }
    return PK_OK;
}
