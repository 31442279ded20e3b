/* Dropout with counter-based masks (pk_rng.h) and its gradient (specs: poet/cbackend/ops_dropout.py).
   The arithmetic is aten's: output = (x * mask) * scale, grad_input = grad * (mask * scale), with
   scale = 1 / (1 - p) rounded to float. */
#include "pk.h"
#include "pk_dense.h"
#include "pk_elem.h"
#include "pk_rng.h"


/* a bijective 32-bit mixer (xor-shift / multiply; the finaliser of MurmurHash3) */
static uint32_t mix32(uint32_t x) {
    x ^= x >> 16;
    x *= 0x85ebca6bu;
    x ^= x >> 13;
    x *= 0xc2b2ae35u;
    x ^= x >> 16;
    return x;
}

uint32_t pk_rng_key(uint64_t seed, uint32_t unit) {
    return mix32(mix32(mix32((uint32_t)seed ^ 0x243f6a88u) ^ (uint32_t)(seed >> 32)) ^ unit);
}

uint32_t pk_rng_bits(uint32_t key, uint32_t index) { return mix32(mix32(index + key) ^ key); }

uint64_t pk_rng_keep_below(double p) {
    double keep = 1.0 - p;
    if (!(keep > 0.0)) return 0;
    if (keep >= 1.0) return (uint64_t)1 << 32;
    return (uint64_t)(keep * 4294967296.0);
}

/* native_dropout(x -> out, mask; p, train, unit): train: mask drawn for this step and node, out = x
   kept and scaled; not train: out = x, mask all true */
PK_KERNEL(native_dropout) {
    if (nt != 3 || ns != 3) return PK_EARGS;
    const pk_tensor *x = &t[0], *y = &t[1], *m = &t[2];
    if (x->dtype != PK_F32 || y->dtype != PK_F32 || (m->dtype != PK_BOOL && m->dtype != PK_U8)) return PK_EDTYPE;
    if (!pk_same_shape(x, y) || !pk_same_shape(x, m)) return PK_EARGS;
    const double p = s[0].f;
    const int train = s[1].i != 0;
    if (!(p >= 0.0 && p <= 1.0)) return PK_EARGS;
    const float scale = train ? (1.0 - p == 0.0 ? 0.0f : (float)(1.0 / (1.0 - p))) : 1.0f;
    const uint64_t below = train ? pk_rng_keep_below(p) : (uint64_t)1 << 32;
    const uint32_t key = pk_rng_key(pk_rng_seed(), (uint32_t)s[2].i);
    pk_walk w; /* row-major over out; element `index` is the index-th visited */
    pk_walk_init(&w, 3, y, x, m, 0);
    uint32_t index = 0;
    for (int64_t k = pk_numel(y); k > 0; k--, index++, pk_walk_next(&w)) {
        const int keep = (uint64_t)pk_rng_bits(key, index) < below;
        ((uint8_t *)m->data)[w.off[2]] = (uint8_t)keep;
        const float v = ((const float *)x->data)[w.off[1]];
        ((float *)y->data)[w.off[0]] = train ? (v * (keep ? 1.0f : 0.0f)) * scale : v;
    }
    return PK_OK;
}

/* native_dropout_backward(grad, mask -> grad_input; scale): grad * (mask * scale) */
PK_KERNEL(native_dropout_backward) {
    if (nt != 3 || ns != 1) return PK_EARGS;
    const pk_tensor *g = &t[0], *m = &t[1], *y = &t[2];
    if (g->dtype != PK_F32 || y->dtype != PK_F32 || (m->dtype != PK_BOOL && m->dtype != PK_U8)) return PK_EDTYPE;
    if (!pk_same_shape(g, y) || !pk_same_shape(m, y)) return PK_EARGS;
    const float scale = (float)s[0].f;
    pk_walk w;
    pk_walk_init(&w, 3, y, g, m, 0);
    for (int64_t k = pk_numel(y); k > 0; k--, pk_walk_next(&w)) {
        const float keep = ((const uint8_t *)m->data)[w.off[2]] ? 1.0f : 0.0f;
        ((float *)y->data)[w.off[0]] = ((const float *)g->data)[w.off[1]] * (keep * scale);
    }
    return PK_OK;
}
