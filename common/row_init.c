/* Initial values of rows not yet stored (see row_init.h for the definition,
 * which is part of what a checkpoint means). */
#include "row_init.h"

#include <errno.h>
#include <float.h>
#include <math.h>
#include <string.h>

#include "mix64.h"
#include "ps_error.h"

/* No fused multiply-adds: they round once where the code says twice, and
 * would make the values depend on the target. GCC contracts nothing in ISO C
 * mode (-std=c11) and does not know this pragma (it would warn); clang
 * contracts within an expression unless told. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#define PS__GOLDEN       0x9e3779b97f4a7c15ULL
#define PS__MAX_ATTEMPTS 128

static const char *const ps__row_init_names[] = {
    [PS_ROW_INIT_ZEROS] = "zeros",
    [PS_ROW_INIT_UNIFORM] = "uniform",
    [PS_ROW_INIT_NORMAL] = "normal",
};
#define PS__ROW_INIT_KINDS ((int)(sizeof(ps__row_init_names) / sizeof(ps__row_init_names[0])))

int ps_row_init_parse(const char *name, ps_row_init_kind *kind)
{
    for (int k = 0; k < PS__ROW_INIT_KINDS; k++)
        if (strcmp(name, ps__row_init_names[k]) == 0) {
            *kind = (ps_row_init_kind)k;
            return 0;
        }
    return -EINVAL;
}

const char *ps_row_init_name(ps_row_init_kind kind)
{
    return (int)kind >= 0 && (int)kind < PS__ROW_INIT_KINDS ? ps__row_init_names[kind] : "unknown";
}

int ps_row_init_check(const ps_row_init *init, char *why, size_t why_len)
{
    switch (init->kind) {
    case PS_ROW_INIT_ZEROS:
        return 0;
    case PS_ROW_INIT_UNIFORM:
        if (!(isfinite(init->lo) && isfinite(init->hi) && init->lo <= init->hi &&
              fabs(init->lo) <= FLT_MAX && fabs(init->hi) <= FLT_MAX))
            return ps_err_printf(why, why_len, -EINVAL,
                                 "uniform initializer: bounds [%g, %g] must be finite floats, "
                                 "low <= high",
                                 init->lo, init->hi);
        return 0;
    case PS_ROW_INIT_NORMAL:
        /* Quantiles stay within +-8.3 (u' >= 2^-53), so 9 std from the mean
         * bounds every draw. */
        if (!(isfinite(init->mean) && isfinite(init->std) && init->std >= 0.0 &&
              fabs(init->mean) + 9.0 * init->std <= FLT_MAX))
            return ps_err_printf(why, why_len, -EINVAL,
                                 "normal initializer: mean %g and std %g must be finite, std >= 0, "
                                 "|mean| + 9 std within float range",
                                 init->mean, init->std);
        if (!(init->lo <= init->mean && init->mean <= init->hi &&
              (init->std == 0.0 || init->hi - init->lo >= init->std)))
            return ps_err_printf(why, why_len, -EINVAL,
                                 "normal initializer: bounds [%g, %g] must hold the mean %g and be "
                                 "at least one std (%g) apart",
                                 init->lo, init->hi, init->mean, init->std);
        return 0;
    }
    return ps_err_printf(why, why_len, -EINVAL, "unknown initializer kind %d", (int)init->kind);
}

/* The stream key of one row. */
static uint64_t ps__row_key(const ps_row_init *init, uint32_t table_id, uint64_t id)
{
    return ps_mix64(ps_mix64(ps_mix64(init->seed) ^ (uint64_t)table_id) ^ id);
}

static uint64_t ps__row_init_word(uint64_t key, uint32_t e, uint32_t attempt)
{
    return ps_mix64(key + (((uint64_t)attempt << 32) | e) * PS__GOLDEN);
}

/* A uniform in (0, 1) with 1 - u exact: an odd multiple of 2^-53. */
static double ps__open_unit(uint64_t word)
{
    return ((double)(word >> 12) + 0.5) * 0x1.0p-52;
}

/* log x for a positive normal x from + - * / alone: x = m 2^e with m in
 * [sqrt(1/2), sqrt(2)), log m = 2 atanh(s) with s = (m - 1) / (m + 1),
 * |s| <= 0.172, summed to s^21 (the next term is below 1e-18). frexp is an
 * exact bit operation. */
static double ps__log(double x)
{
    static const double ln2_hi = 6.93147180369123816490e-01, ln2_lo = 1.90821492927058770002e-10;
    int e;
    double m = frexp(x, &e), s, s2, p;

    if (m < 0.70710678118654752440) {
        m *= 2.0;
        e -= 1;
    }
    s = (m - 1.0) / (m + 1.0);
    s2 = s * s;
    p = 1.0 / 21.0;
    for (int k = 19; k >= 1; k -= 2)
        p = p * s2 + 1.0 / (double)k;
    return (double)e * ln2_hi + (2.0 * s * p + (double)e * ln2_lo);
}

/* The standard normal quantile of p in (0, 1), Acklam's approximation. The
 * tails use the same formula on min(p, 1 - p), so z(1 - p) = -z(p). */
static double ps__normal_quantile(double p)
{
    static const double a[6] = {-3.969683028665376e+01, 2.209460984245205e+02,
                                -2.759285104469687e+02, 1.383577518672690e+02,
                                -3.066479806614716e+01, 2.506628277459239e+00};
    static const double b[5] = {-5.447609879822406e+01, 1.615858368580409e+02,
                                -1.556989798598866e+02, 6.680131188771972e+01,
                                -1.328068155288572e+01};
    static const double c[6] = {-7.784894002430293e-03, -3.223964580411365e-01,
                                -2.400758277161838e+00, -2.549732539343734e+00,
                                4.374664141464968e+00,  2.938163982698783e+00};
    static const double d[4] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
                                3.754408661907416e+00};
    const double p_low = 0.02425;
    double q, r, tail;

    if (p >= p_low && p <= 1.0 - p_low) {
        q = p - 0.5;
        r = q * q;
        return (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
               (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1.0);
    }
    tail = p < 0.5 ? p : 1.0 - p;
    q = sqrt(-2.0 * ps__log(tail));
    r = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1.0);
    return p < 0.5 ? r : -r;
}

/* One truncated normal element from its attempts' words; quantile is the
 * standard normal quantile function to use. */
static float ps__normal(const ps_row_init *init, uint64_t key, uint32_t e,
                        double (*quantile)(double))
{
    for (uint32_t attempt = 0; attempt < PS__MAX_ATTEMPTS; attempt++) {
        double z = quantile(ps__open_unit(ps__row_init_word(key, e, attempt)));
        float v = (float)(init->mean + init->std * z);
        if ((double)v >= init->lo && (double)v <= init->hi)
            return v;
    }
    return (float)init->mean;
}

void ps_row_init_values(const ps_row_init *init, uint32_t table_id, uint64_t id, uint32_t first,
                        size_t n, float *out)
{
    uint64_t key = ps__row_key(init, table_id, id);
    double lo = init->lo, width = init->hi - init->lo;

    switch (init->kind) {
    case PS_ROW_INIT_UNIFORM:
        for (size_t i = 0; i < n; i++)
            out[i] =
                (float)(lo + width * ps_mix64_unit(ps__row_init_word(key, first + (uint32_t)i, 0)));
        return;
    case PS_ROW_INIT_NORMAL:
        for (size_t i = 0; i < n; i++)
            out[i] = ps__normal(init, key, first + (uint32_t)i, ps__normal_quantile);
        return;
    case PS_ROW_INIT_ZEROS:
        break;
    }
    memset(out, 0, n * sizeof(float));
}

/* The reference's quantile: bisection on libm's erfc, on the tail that p is
 * in (so a p near 1 loses no precision), until the interval stops
 * shrinking. */
static double ps__quantile_ref(double p)
{
    double tail = p < 0.5 ? p : 1.0 - p, lo = 0.0, hi = 40.0;

    /* Find z >= 0 with Q(z) = 0.5 erfc(z / sqrt 2) = tail; Q decreases. */
    for (int i = 0; i < 2000; i++) {
        double mid = 0.5 * (lo + hi);
        if (mid <= lo || mid >= hi)
            break;
        if (0.5 * erfc(mid / sqrt(2.0)) > tail)
            lo = mid;
        else
            hi = mid;
    }
    return p < 0.5 ? -lo : lo;
}

float ps_row_init_value_ref(const ps_row_init *init, uint32_t table_id, uint64_t id, uint32_t e)
{
    uint64_t key = ps__row_key(init, table_id, id);

    switch (init->kind) {
    case PS_ROW_INIT_UNIFORM: {
        double u = (double)(ps__row_init_word(key, e, 0) >> 11) / 9007199254740992.0;
        return (float)(init->lo + (init->hi - init->lo) * u);
    }
    case PS_ROW_INIT_NORMAL:
        return ps__normal(init, key, e, ps__quantile_ref);
    case PS_ROW_INIT_ZEROS:
        break;
    }
    return 0.0f;
}
