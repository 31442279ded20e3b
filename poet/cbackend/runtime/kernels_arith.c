/* Arithmetic, comparisons, dtype conversion and tensor creation (specs: poet/cbackend/ops_arith.py).

   Inputs are views of the output's shape (the spec asks the lowering to broadcast).  float32 is the
   fast path; other dtypes and the mixes aten's type promotion allows (an int64 counter plus one, a
   bool mask, a float64 statistic) go through pk_elem.h: the output's dtype decides how it is
   computed (float32: in float, as aten's CPU kernels do; float64: in double; integers: in int64).
   A scalar argument comes in the kind of the values it combines with: .f for floating, .i for
   integer and bool computations (the spec decides, poet/cbackend/ops_arith.py). */
#include "pk.h"
#include "pk_elem.h"
#include "pk_iter.h"

enum { OP_ADD, OP_SUB, OP_MUL, OP_DIV, OP_RSUB };

static float arith_f(int op, float a, float b, float alpha, int has_alpha) {
    switch (op) {
    case OP_ADD: return has_alpha ? a + alpha * b : a + b;
    case OP_SUB: return has_alpha ? a - alpha * b : a - b;
    case OP_RSUB: return has_alpha ? b - alpha * a : b - a;
    case OP_MUL: return a * b;
    default: return a / b;
    }
}

static double arith_d(int op, double a, double b, double alpha) {
    switch (op) {
    case OP_ADD: return a + alpha * b;
    case OP_SUB: return a - alpha * b;
    case OP_RSUB: return b - alpha * a;
    case OP_MUL: return a * b;
    default: return a / b;
    }
}

static int64_t arith_i(int op, int64_t a, int64_t b, int64_t alpha) {
    /* wrap-around as aten's int64 arithmetic (unsigned avoids C's signed-overflow UB) */
    uint64_t ua = (uint64_t)a, ub = (uint64_t)b, ual = (uint64_t)alpha;
    switch (op) {
    case OP_ADD: return (int64_t)(ua + ual * ub);
    case OP_SUB: return (int64_t)(ua - ual * ub);
    case OP_RSUB: return (int64_t)(ub - ual * ua);
    default: return (int64_t)(ua * ub);
    }
}

/* y = a (op) b, b a tensor (t[1]) or, with scalar_b, the scalar s[0]; then alpha for add/sub/rsub */
static int arith(pk_tensor *t, int nt, const pk_scalar *s, int ns, int op, int scalar_b) {
    const int nin = scalar_b ? 1 : 2;
    const int has_alpha = op == OP_ADD || op == OP_SUB || op == OP_RSUB;
    if (nt != nin + 1 || ns != (scalar_b ? 1 : 0) + (has_alpha ? 1 : 0)) return PK_EARGS;
    const pk_tensor *a = &t[0], *b = scalar_b ? 0 : &t[1], *y = &t[nin];
    if (!pk_same_shape(a, y) || (b && !pk_same_shape(b, y))) return PK_EARGS;
    for (int i = 0; i <= nin; i++)
        if (t[i].dtype == PK_NONE) return PK_EDTYPE;
    const pk_scalar *bs = scalar_b ? &s[0] : 0, *al = has_alpha ? &s[nin == 1 ? 1 : 0] : 0;
    if (pk_is_integral(y->dtype) && op == OP_DIV) return PK_EDTYPE; /* true division gives floats */
    if (y->dtype == PK_F32) {
        const float alpha = al ? (float)al->f : 1.0f;
        const int use_alpha = al && al->f != 1.0;
        if (a->dtype == PK_F32 && b && b->dtype == PK_F32) {
            PK_FOR3(y, a, b, o, x, z, { *o = arith_f(op, *x, *z, alpha, use_alpha); });
            return PK_OK;
        }
        if (a->dtype == PK_F32 && !b) {
            const float bv = (float)bs->f;
            PK_FOR2(y, a, o, x, { *o = arith_f(op, *x, bv, alpha, use_alpha); });
            return PK_OK;
        }
        pk_walk w;
        pk_walk_init(&w, 3, y, a, b ? b : a, 0);
        for (int64_t k = pk_numel(y); k > 0; k--, pk_walk_next(&w)) {
            float bv = b ? (float)pk_get(b, w.off[2]) : (float)bs->f;
            ((float *)y->data)[w.off[0]] = arith_f(op, (float)pk_get(a, w.off[1]), bv, alpha, use_alpha);
        }
        return PK_OK;
    }
    pk_walk w;
    pk_walk_init(&w, 3, y, a, b ? b : a, 0);
    if (pk_is_float(y->dtype)) {
        const double alpha = al ? al->f : 1.0;
        for (int64_t k = pk_numel(y); k > 0; k--, pk_walk_next(&w)) {
            double bv = b ? pk_get(b, w.off[2]) : bs->f;
            pk_set(y, w.off[0], arith_d(op, pk_get(a, w.off[1]), bv, alpha));
        }
        return PK_OK;
    }
    if (y->dtype == PK_BOOL && op != OP_ADD && op != OP_MUL) return PK_EDTYPE;
    const int64_t alpha = al ? al->i : 1;
    for (int64_t k = pk_numel(y); k > 0; k--, pk_walk_next(&w)) {
        int64_t bv = b ? pk_geti(b, w.off[2]) : bs->i;
        pk_seti(y, w.off[0], arith_i(op, pk_geti(a, w.off[1]), bv, alpha));
    }
    return PK_OK;
}

/* a (op) b for tensors a, b; add/sub/rsub take one scalar, alpha */
PK_KERNEL(add) { return arith(t, nt, s, ns, OP_ADD, 0); }
PK_KERNEL(sub) { return arith(t, nt, s, ns, OP_SUB, 0); }
PK_KERNEL(mul) { return arith(t, nt, s, ns, OP_MUL, 0); }
PK_KERNEL(div) { return arith(t, nt, s, ns, OP_DIV, 0); }
/* a (op) other for a tensor a and a scalar other: scalars (other[, alpha]) */
PK_KERNEL(add_scalar) { return arith(t, nt, s, ns, OP_ADD, 1); }
PK_KERNEL(sub_scalar) { return arith(t, nt, s, ns, OP_SUB, 1); }
PK_KERNEL(rsub_scalar) { return arith(t, nt, s, ns, OP_RSUB, 1); }
PK_KERNEL(mul_scalar) { return arith(t, nt, s, ns, OP_MUL, 1); }
PK_KERNEL(div_scalar) { return arith(t, nt, s, ns, OP_DIV, 1); }

/* ------------------------------------------------------------------ comparisons -> bool */

enum { CMP_EQ, CMP_NE, CMP_LT, CMP_LE, CMP_GT, CMP_GE };

static int cmp_d(int op, double a, double b) {
    switch (op) {
    case CMP_EQ: return a == b;
    case CMP_NE: return a != b;
    case CMP_LT: return a < b;
    case CMP_LE: return a <= b;
    case CMP_GT: return a > b;
    default: return a >= b;
    }
}

static int cmp_i(int op, int64_t a, int64_t b) {
    switch (op) {
    case CMP_EQ: return a == b;
    case CMP_NE: return a != b;
    case CMP_LT: return a < b;
    case CMP_LE: return a <= b;
    case CMP_GT: return a > b;
    default: return a >= b;
    }
}

/* compare(a, b) -> bool, or compare(a; other) with other always a double (.f): compared in int64 when
   a is an integer tensor and other an integer value (exact), else in double */
static int compare(pk_tensor *t, int nt, const pk_scalar *s, int ns, int op, int scalar_b) {
    const int nin = scalar_b ? 1 : 2;
    if (nt != nin + 1 || ns != (scalar_b ? 1 : 0)) return PK_EARGS;
    const pk_tensor *a = &t[0], *b = scalar_b ? 0 : &t[1], *y = &t[nin];
    if (y->dtype != PK_BOOL || a->dtype == PK_NONE || (b && b->dtype == PK_NONE)) return PK_EDTYPE;
    if (!pk_same_shape(a, y) || (b && !pk_same_shape(b, y))) return PK_EARGS;
    int floating = pk_is_float(a->dtype) || (b && pk_is_float(b->dtype));
    const double sv = scalar_b ? s[0].f : 0.0;
    const int64_t si = scalar_b ? pk_double_to_i64(sv) : 0;
    if (scalar_b && !floating && (double)si != sv) floating = 1; /* 0.5, NaN, or beyond int64 */
    uint8_t *out = (uint8_t *)y->data;
    pk_walk w;
    pk_walk_init(&w, 3, y, a, b ? b : a, 0);
    for (int64_t k = pk_numel(y); k > 0; k--, pk_walk_next(&w)) {
        int r;
        if (floating) r = cmp_d(op, pk_get(a, w.off[1]), b ? pk_get(b, w.off[2]) : sv);
        else r = cmp_i(op, pk_geti(a, w.off[1]), b ? pk_geti(b, w.off[2]) : si);
        out[w.off[0]] = (uint8_t)r;
    }
    return PK_OK;
}

PK_KERNEL(eq) { return compare(t, nt, s, ns, CMP_EQ, 0); }
PK_KERNEL(ne) { return compare(t, nt, s, ns, CMP_NE, 0); }
PK_KERNEL(lt) { return compare(t, nt, s, ns, CMP_LT, 0); }
PK_KERNEL(le) { return compare(t, nt, s, ns, CMP_LE, 0); }
PK_KERNEL(gt) { return compare(t, nt, s, ns, CMP_GT, 0); }
PK_KERNEL(ge) { return compare(t, nt, s, ns, CMP_GE, 0); }
PK_KERNEL(eq_scalar) { return compare(t, nt, s, ns, CMP_EQ, 1); }
PK_KERNEL(ne_scalar) { return compare(t, nt, s, ns, CMP_NE, 1); }
PK_KERNEL(lt_scalar) { return compare(t, nt, s, ns, CMP_LT, 1); }
PK_KERNEL(le_scalar) { return compare(t, nt, s, ns, CMP_LE, 1); }
PK_KERNEL(gt_scalar) { return compare(t, nt, s, ns, CMP_GT, 1); }
PK_KERNEL(ge_scalar) { return compare(t, nt, s, ns, CMP_GE, 1); }

/* bitwise_not(x) -> ~x (bool: logical not) */
PK_KERNEL(bitwise_not) {
    (void)s;
    if (nt != 2 || ns != 0) return PK_EARGS;
    if (!pk_same_shape(&t[0], &t[1])) return PK_EARGS;
    if (!pk_is_integral(t[0].dtype) || t[1].dtype != t[0].dtype) return PK_EDTYPE;
    pk_walk w;
    pk_walk_init(&w, 2, &t[1], &t[0], 0, 0);
    for (int64_t k = pk_numel(&t[1]); k > 0; k--, pk_walk_next(&w)) {
        int64_t v = pk_geti(&t[0], w.off[1]);
        pk_seti(&t[1], w.off[0], t[0].dtype == PK_BOOL ? !v : ~v);
    }
    return PK_OK;
}

/* ------------------------------------------------------------------ copies and creation */

/* convert(x) -> y: x's values in y's dtype and layout (_to_copy, copy; a same-dtype clone is
   kernels_layout.c's copy) */
PK_KERNEL(convert) {
    (void)s;
    if (nt != 2 || ns != 0) return PK_EARGS;
    const pk_tensor *x = &t[0], *y = &t[1];
    if (x->dtype == PK_NONE || y->dtype == PK_NONE) return PK_EDTYPE;
    if (!pk_same_shape(x, y)) return PK_EARGS;
    if (x->dtype == PK_F32 && y->dtype == PK_F32) {
        PK_FOR2(y, x, o, v, { *o = *v; });
        return PK_OK;
    }
    pk_walk w;
    pk_walk_init(&w, 2, y, x, 0, 0);
    for (int64_t k = pk_numel(y); k > 0; k--, pk_walk_next(&w)) {
        if (pk_is_float(x->dtype) || pk_is_float(y->dtype)) pk_set(y, w.off[0], pk_get(x, w.off[1]));
        else pk_seti(y, w.off[0], pk_geti(x, w.off[1]));
    }
    return PK_OK;
}

/* fill(; value) -> y filled with value (in y's kind): full, zeros, ones, fill, scalar_tensor ... */
PK_KERNEL(fill) {
    if (nt != 1 || ns != 1) return PK_EARGS;
    const pk_tensor *y = &t[0];
    if (y->dtype == PK_NONE) return PK_EDTYPE;
    if (y->dtype == PK_F32) {
        const float v = (float)s[0].f;
        PK_FOR2(y, y, o, unused, { (void)unused; *o = v; });
        return PK_OK;
    }
    pk_walk w;
    pk_walk_init(&w, 1, y, 0, 0, 0);
    for (int64_t k = pk_numel(y); k > 0; k--, pk_walk_next(&w)) {
        if (pk_is_float(y->dtype)) pk_set(y, w.off[0], s[0].f);
        else pk_seti(y, w.off[0], s[0].i);
    }
    return PK_OK;
}

/* arange(; start, step) -> y[i] = start + i * step (1-d; float outputs computed in double, as aten) */
PK_KERNEL(arange) {
    if (nt != 1 || ns != 2) return PK_EARGS;
    const pk_tensor *y = &t[0];
    if (y->ndim != 1 || y->dtype == PK_NONE) return PK_EARGS;
    for (int64_t i = 0; i < y->size[0]; i++) {
        const int64_t off = i * y->stride[0];
        if (pk_is_float(y->dtype)) pk_set(y, off, s[0].f + (double)i * s[1].f);
        else pk_seti(y, off, (int64_t)((uint64_t)s[0].i + (uint64_t)i * (uint64_t)s[1].i));
    }
    return PK_OK;
}
