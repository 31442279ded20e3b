/* pk_math.c: deterministic elementary functions (see pk_math.h for the accuracy measured).

   Every function reduces its argument exactly (Cody-Waite splitting of ln 2, powers of two built
   from bits), evaluates a short polynomial whose coefficients are Taylor coefficients or, for erf,
   a Chebyshev fit (bench/pk_math_fit.py prints them), and rounds once more at the end.  Only
   + - * / and integer operations are used; no libm. */
#include "pk_math.h"

#include <string.h>

uint32_t pk_f32_bits(float x) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

float pk_f32_from_bits(uint32_t u) {
    float x;
    memcpy(&x, &u, sizeof x);
    return x;
}

uint64_t pk_f64_bits(double x) {
    uint64_t u;
    memcpy(&u, &x, sizeof u);
    return u;
}

double pk_f64_from_bits(uint64_t u) {
    double x;
    memcpy(&x, &u, sizeof x);
    return x;
}

float pk_nanf(void) { return pk_f32_from_bits(0x7fc00000u); }
float pk_inff(void) { return pk_f32_from_bits(0x7f800000u); }
double pk_nan(void) { return pk_f64_from_bits(0x7ff8000000000000ull); }
double pk_inf(void) { return pk_f64_from_bits(0x7ff0000000000000ull); }

/* x * 2^k for any k in [-300, 300], with at most one rounding (at the last multiplication) */
static float scale2f(float x, int k) {
    while (k > 127) {
        x *= 1.7014118e38f; /* 2^127 */
        k -= 127;
    }
    while (k < -126) {
        x *= 1.1754944e-38f; /* 2^-126: exact while the product stays normal */
        k += 126;
    }
    return x * pk_f32_from_bits((uint32_t)(k + 127) << 23);
}

static double scale2(double x, int k) {
    while (k > 1023) {
        x *= pk_f64_from_bits((uint64_t)(1023 + 1023) << 52);
        k -= 1023;
    }
    while (k < -1022) {
        x *= pk_f64_from_bits((uint64_t)1 << 52); /* 2^-1022 */
        k += 1022;
    }
    return x * pk_f64_from_bits((uint64_t)(k + 1023) << 52);
}

/* nearest integer of a float/double of magnitude < 2^30 */
static int round_to_int(float t) { return (int)(t >= 0.0f ? t + 0.5f : t - 0.5f); }
static int round_to_int_d(double t) { return (int)(t >= 0.0 ? t + 0.5 : t - 0.5); }

/* ------------------------------------------------------------------ square roots */

/* floor(sqrt(R)) and its remainder, where R = m * 2^k (2 bits at a time, from the top; R has at most
   `bits` bits, bits even, and the root fits 54 bits, so the remainder fits 56). */
static uint64_t isqrt_shifted(uint64_t m, int k, int bits, uint64_t *rem) {
    uint64_t q = 0, r = 0;
    for (int i = bits - 2; i >= 0; i -= 2) {
        uint64_t two; /* bits i+1, i of m << k */
        if (i >= k) two = (m >> (i - k)) & 3u;
        else if (i + 1 == k) two = (m << 1) & 2u;
        else two = 0;
        r = (r << 2) | two;
        uint64_t t = (q << 2) | 1u;
        q <<= 1;
        if (r >= t) {
            r -= t;
            q |= 1u;
        }
    }
    *rem = r;
    return q;
}

float pk_sqrtf(float x) {
    uint32_t u = pk_f32_bits(x);
    if ((u & 0x7fffffffu) == 0) return x;               /* +-0 */
    if (u >> 31) return pk_nanf();                      /* negative or -NaN */
    if ((u >> 23) == 0xff) return x + x;                /* +inf, NaN */
    int e = (int)(u >> 23);
    uint64_t m = u & 0x7fffffu;
    int E; /* x = m * 2^E, m with its top bit at 23 */
    if (e == 0) {
        E = -149;
        while (m < 0x800000u) {
            m <<= 1;
            E--;
        }
    } else {
        m |= 0x800000u;
        E = e - 150;
    }
    int k = ((E - 23) & 1) ? 24 : 23; /* E - k even; m * 2^k in [2^46, 2^48): root in [2^23, 2^24) */
    uint64_t rem;
    uint64_t q = isqrt_shifted(m, k, 48, &rem);
    if (rem > q) q++; /* R - q^2 > q  <=>  sqrt(R) > q + 1/2 (no ties: R is an integer) */
    int E2 = (E - k) / 2;
    return pk_f32_from_bits(((uint32_t)(E2 + 150) << 23) + (uint32_t)(q - 0x800000u));
}

double pk_sqrtd(double x) {
    uint64_t u = pk_f64_bits(x);
    if ((u << 1) == 0) return x;
    if (u >> 63) return pk_nan();
    if ((u >> 52) == 0x7ff) return x + x;
    int e = (int)(u >> 52);
    uint64_t m = u & 0xfffffffffffffull;
    int E;
    if (e == 0) {
        E = -1074;
        while (m < ((uint64_t)1 << 52)) {
            m <<= 1;
            E--;
        }
    } else {
        m |= (uint64_t)1 << 52;
        E = e - 1075;
    }
    int k = ((E - 52) & 1) ? 53 : 52; /* m * 2^k in [2^104, 2^106): root in [2^52, 2^53) */
    uint64_t rem;
    uint64_t q = isqrt_shifted(m, k, 106, &rem);
    if (rem > q) q++;
    int E2 = (E - k) / 2;
    return pk_f64_from_bits(((uint64_t)(E2 + 1075) << 52) + (q - ((uint64_t)1 << 52)));
}

/* ------------------------------------------------------------------ exp family (float) */

#define LOG2E_F 1.44269504f
#define LN2_HI_F 0.693145751953125f      /* ln 2 to 16 bits: k * LN2_HI_F is exact for |k| < 256 */
#define LN2_LO_F 1.4286068e-06f          /* ln 2 - LN2_HI_F */

/* x = k ln2 + r with |r| <= ln2/2 (plus rounding); returns k */
static int reduce_ln2f(float x, float *r) {
    int k = round_to_int(x * LOG2E_F);
    float kf = (float)k;
    *r = (x - kf * LN2_HI_F) - kf * LN2_LO_F;
    return k;
}

/* e^r - 1 for |r| <= 0.35: r + r^2 (1/2 + r/6 + ... + r^7/9!) (Taylor; the tail is < 2e-10 r) */
static float expm1_small(float r) {
    float p = 2.7557319e-06f;          /* 1/9! */
    p = 2.4801587e-05f + r * p;        /* 1/8! */
    p = 1.9841270e-04f + r * p;        /* 1/7! */
    p = 1.3888889e-03f + r * p;        /* 1/6! */
    p = 8.3333333e-03f + r * p;        /* 1/5! */
    p = 4.1666667e-02f + r * p;        /* 1/4! */
    p = 1.6666667e-01f + r * p;        /* 1/3! */
    p = 0.5f + r * p;
    return r + (r * r) * p;
}

float pk_expf(float x) {
    if (x != x) return x;
    if (x > 89.0f) return pk_inff();
    if (x < -104.0f) return 0.0f;
    float r;
    int k = reduce_ln2f(x, &r);
    float y = 1.0f + expm1_small(r);
    return scale2f(y, k);
}

float pk_expm1f(float x) {
    if (x != x) return x;
    if (x > 89.0f) return pk_inff();
    if (x < -17.5f) return -1.0f; /* expm1 rounds to -1 below ln(2^-25) */
    float ax = x < 0.0f ? -x : x;
    if (ax < 2.9802322e-08f) return x; /* |x| < 2^-25: x + x^2/2 rounds to x */
    float r;
    int k = reduce_ln2f(x, &r);
    float em = expm1_small(r);
    if (k == 0) return em;
    if (k >= -24 && k <= 23) {
        /* 2^k - 1 and 2^k em are exact here: one rounding */
        float t = scale2f(1.0f, k);
        return (t - 1.0f) + t * em;
    }
    if (k < -24) return scale2f(1.0f + em, k) - 1.0f;
    return scale2f((em - scale2f(1.0f, -k)) + 1.0f, k); /* k > 23 */
}

/* 1 / (1 + e) with the rounding error of 1 + e (e in [0, 1]: Fast2Sum) corrected to first order */
static float inv_one_plus(float e, float num) {
    float s = 1.0f + e;
    float err = (1.0f - s) + e;
    float q = num / s;
    return q - q * (err / s);
}

float pk_sigmoidf(float x) {
    if (x != x) return x;
    if (x >= 0.0f) return inv_one_plus(pk_expf(-x), 1.0f);
    float e = pk_expf(x);
    return inv_one_plus(e, e);
}

/* tanh x = x + x z P(z), z = x^2, for |x| < 0.55: Taylor (2^2n (2^2n - 1) B_2n / (2n)!), terms to x^23 */
static float tanh_small(float x) {
    float z = x * x;
    float p = -3.9278324e-05f;
    p = 9.6915380e-05f + z * p;
    p = -2.3912911e-04f + z * p;
    p = 5.9002744e-04f + z * p;
    p = -1.4558344e-03f + z * p;
    p = 3.5921280e-03f + z * p;
    p = -8.8632355e-03f + z * p;
    p = 2.1869489e-02f + z * p;
    p = -5.3968254e-02f + z * p;
    p = 1.3333333e-01f + z * p;
    p = -3.3333333e-01f + z * p;
    return x + x * (z * p);
}

float pk_tanhf(float x) {
    if (x != x) return x;
    float a = x < 0.0f ? -x : x;
    if (a < 2.4414062e-04f) return x; /* 2^-12: tanh x = x (1 - x^2/3) rounds to x */
    if (a < 0.55f) return tanh_small(x);
    float y = a > 9.0f ? 1.0f : 1.0f - 2.0f / (pk_expf(2.0f * a) + 1.0f);
    return x < 0.0f ? -y : y;
}

/* ------------------------------------------------------------------ log family (float) */

/* log(2^e (1 + f)) + c, with 1 + f in [sqrt(1/2), sqrt(2)] and c a small correction:
   log(1 + f) = 2 atanh(s), s = f / (2 + f), = f - s (f - T), T = s^2 (2/3 + 2 s^2/5 + ... + 2 s^8/11) */
static float log_core(int e, float f, float c) {
    float s = f / (2.0f + f);
    float z = s * s;
    float t = 0.18181818f;            /* 2/11 */
    t = 0.22222222f + z * t;          /* 2/9 */
    t = 0.28571429f + z * t;          /* 2/7 */
    t = 0.4f + z * t;                 /* 2/5 */
    t = 0.66666667f + z * t;          /* 2/3 */
    t = z * t;
    float ef = (float)e;
    float corr = s * (f - t) - ef * LN2_LO_F - c;
    return ef * LN2_HI_F + (f - corr);
}

/* split a positive finite normal u into 2^e * m, m in [sqrt(1/2), sqrt(2)); returns m */
static float split_mantissa(float u, int *e) {
    uint32_t b = pk_f32_bits(u);
    int ex = (int)((b >> 23) & 0xff) - 127;
    float m = pk_f32_from_bits((b & 0x7fffffu) | 0x3f800000u);
    if (m > 1.41421356f) {
        m *= 0.5f;
        ex += 1;
    }
    *e = ex;
    return m;
}

float pk_logf(float x) {
    if (x != x) return x;
    if (x < 0.0f) return pk_nanf();
    if (x == 0.0f) return -pk_inff();
    if (x == pk_inff()) return x;
    int adj = 0;
    if (x < 1.1754944e-38f) { /* subnormal: scale by 2^23 */
        x *= 8388608.0f;
        adj = -23;
    }
    int e;
    float m = split_mantissa(x, &e);
    return log_core(e + adj, m - 1.0f, 0.0f);
}

float pk_log1pf(float x) {
    if (x != x) return x;
    if (x < -1.0f) return pk_nanf();
    if (x == -1.0f) return -pk_inff();
    if (x == pk_inff()) return x;
    float ax = x < 0.0f ? -x : x;
    if (ax < 5.9604645e-08f) return x; /* |x| < 2^-24 */
    float u = 1.0f + x;
    /* c = (1 + x) - u exactly: log(1 + x) = log(u) + log(1 + c/u) ~ log(u) + c/u */
    float c = x < 1.0f ? x - (u - 1.0f) : 1.0f - (u - x);
    int e;
    float m = split_mantissa(u, &e);
    return log_core(e, m - 1.0f, c / u);
}

/* ------------------------------------------------------------------ erf (float) */

/* erf on [0.5 + i/2, 1 + i/2], i = 0..6, as a polynomial in t = |x| - (0.75 + i/2): constant term
   as a hi + lo pair, then the coefficients of t .. t^8 (Chebyshev fits, bench/pk_math_fit.py). */
static const float ERF_POLY[7][10] = {
    {0.7111556529998779f, -1.9346050095236933e-08f, 0.6429310441017151f, -0.4821982979774475f,
     0.02678835019469261f, 0.15068700909614563f, -0.0532170906662941f, -0.026873977854847908f,
     0.017885494977235794f, 0.002329175593331456f},
    {0.9229001402854919f, -1.2027571827388783e-08f, 0.23652112483978271f, -0.2956514060497284f,
     0.16753588616847992f, -0.006159254349768162f, -0.04718655347824097f, 0.021294554695487022f,
     0.0037451107054948807f, -0.005574545357376337f},
    {0.9866716861724854f, -1.495410550944598e-08f, 0.05277499556541443f, -0.09235624223947525f,
     0.0901573896408081f, -0.04810229316353798f, 0.0066184732131659985f, 0.008966748602688313f,
     -0.005933099426329136f, 0.0006619721534661949f},
    {0.9985373020172119f, -1.8603920182158618e-08f, 0.007142319343984127f, -0.01607021689414978f,
     0.021724512800574303f, -0.019083386287093163f, 0.010660059750080109f, -0.0029042328242212534f,
     -0.0007215269142761827f, 0.0009973417036235332f},
    {0.9998993873596191f, -9.28163590430131e-09f, 0.0005862772813998163f, -0.0016122625675052404f,
     0.0027603802736848593f, -0.003258103271946311f, 0.0027562910690903664f, -0.0016577960923314095f,
     0.0006358154932968318f, -8.04360824986361e-05f},
    {0.9999957084655762f, -1.1245043118890408e-08f, 2.9189011911512353e-05f, -9.486432827543467e-05f,
     0.00019581262313295156f, -0.0002865697315428406f, 0.000313628843287006f, -0.0002635108830872923f,
     0.00017359654884785414f, -8.1980339018628e-05f},
    {0.9999998807907104f, 5.4820281647494085e-09f, 8.814288321445929e-07f, -3.305366817585309e-06f,
     7.9703277151566e-06f, -1.3841738109476864e-05f, 1.8330059901927598e-05f, -1.9250392142566852e-05f,
     1.7144726371043362e-05f, -1.1536236343090422e-05f},
};

float pk_erff(float x) {
    if (x != x) return x;
    float a = x < 0.0f ? -x : x;
    float y;
    if (a < 0.5f) {
        /* erf x = x + x Q(x^2), Q(z) = (2/sqrt(pi) - 1) + 2/sqrt(pi) sum_n>=1 (-z)^n / (n! (2n+1)) */
        float z = x * x;
        float q = 1.6462114e-06f;           /* n = 8 */
        q = -1.4925650e-05f + z * q;        /* n = 7 */
        q = 1.2055333e-04f + z * q;         /* n = 6 */
        q = -8.5483270e-04f + z * q;        /* n = 5 */
        q = 5.2239778e-03f + z * q;         /* n = 4 */
        q = -2.6866172e-02f + z * q;        /* n = 3 */
        q = 1.1283792e-01f + z * q;         /* n = 2 */
        q = -3.7612638e-01f + z * q;        /* n = 1 */
        q = 1.2837917e-01f + z * q;         /* 2/sqrt(pi) - 1 */
        return x + x * q;
    }
    if (a >= 4.0f) {
        y = 1.0f;
    } else {
        int i = (int)((a - 0.5f) * 2.0f);
        const float *c = ERF_POLY[i];
        float t = a - (0.75f + 0.5f * (float)i);
        float p = c[9];
        for (int j = 8; j >= 2; j--) p = c[j] + t * p;
        y = c[0] + (c[1] + t * p);
    }
    return x < 0.0f ? -y : y;
}

/* ------------------------------------------------------------------ double exp / log */

#define LOG2E 1.4426950408889634
#define LN2_HI 6.93147180369123816490e-01 /* ln 2 to 32 bits: k * LN2_HI exact for |k| < 2^20 */
#define LN2_LO 1.90821492927058770002e-10

double pk_expd(double x) {
    if (x != x) return x;
    if (x > 710.0) return pk_inf();
    if (x < -746.0) return 0.0;
    int k = round_to_int_d(x * LOG2E);
    double kd = (double)k;
    double r = (x - kd * LN2_HI) - kd * LN2_LO;
    /* e^r - 1 = r + r^2 (1/2 + r/3! + ... + r^11/13!) */
    static const double inv_fact[] = {1.0 / 6227020800.0, 1.0 / 479001600.0, 1.0 / 39916800.0,
                                      1.0 / 3628800.0,    1.0 / 362880.0,    1.0 / 40320.0,
                                      1.0 / 5040.0,       1.0 / 720.0,       1.0 / 120.0,
                                      1.0 / 24.0,         1.0 / 6.0,         0.5};
    double p = inv_fact[0];
    for (int j = 1; j < 12; j++) p = inv_fact[j] + r * p;
    double y = 1.0 + (r + (r * r) * p);
    return scale2(y, k);
}

double pk_logd(double x) {
    if (x != x) return x;
    if (x < 0.0) return pk_nan();
    if (x == 0.0) return -pk_inf();
    if (x == pk_inf()) return x;
    int adj = 0;
    if (x < 2.2250738585072014e-308) {
        x *= 4503599627370496.0; /* 2^52 */
        adj = -52;
    }
    uint64_t b = pk_f64_bits(x);
    int e = (int)((b >> 52) & 0x7ff) - 1023;
    double m = pk_f64_from_bits((b & 0xfffffffffffffull) | 0x3ff0000000000000ull);
    if (m > 1.4142135623730951) {
        m *= 0.5;
        e += 1;
    }
    e += adj;
    double f = m - 1.0;
    double s = f / (2.0 + f);
    double z = s * s;
    double t = 2.0 / 25.0;
    for (int n = 11; n >= 1; n--) t = 2.0 / (double)(2 * n + 1) + z * t;
    t = z * t;
    double ed = (double)e;
    double corr = s * (f - t) - ed * LN2_LO;
    return ed * LN2_HI + (f - corr);
}

/* ------------------------------------------------------------------ powers */

float pk_powf(float x, float y) {
    if (y == 0.0f) return 1.0f;
    if (x == 1.0f) return 1.0f;
    if (x != x || y != y) return pk_nanf();
    if (y == 1.0f) return x;
    if (y == 2.0f) return x * x;
    if (y == 0.5f) return pk_sqrtf(x);
    float ay = y < 0.0f ? -y : y;
    if (x == -1.0f && ay == pk_inff()) return 1.0f;
    int big = ay >= 16777216.0f; /* every float this large is an even integer */
    int yi = big ? 0 : (int)ay;
    int is_int = big || (float)yi == ay;
    int odd = !big && (yi & 1);
    if (x == 0.0f) {
        float zero_pow = y > 0.0f ? 0.0f : pk_inff();
        return (odd && pk_f32_bits(x) >> 31) ? -zero_pow : zero_pow;
    }
    double ax = x < 0.0f ? -(double)x : (double)x;
    if (x < 0.0f && !is_int) return pk_nanf();
    if (ax == pk_inf()) {
        float r = y > 0.0f ? pk_inff() : 0.0f;
        return (x < 0.0f && odd) ? -r : r;
    }
    double r = pk_expd((double)y * pk_logd(ax));
    float rf = (float)r;
    return (x < 0.0f && odd) ? -rf : rf;
}
