/* Tests for the row initializer: the rules on its parameters; values pinned
 * bit for bit (they are part of what a checkpoint means); the fast path
 * against the plain reference; the same values whatever the order or
 * grouping of the calls; moments of each distribution against their exact
 * values within 6 standard errors (fixed seeds); truncation respected; no
 * correlation between neighbouring elements, rows or tables. */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "row_init.h"

static const ps_row_init uniform = {.kind = PS_ROW_INIT_UNIFORM, .seed = 11, .lo = -0.5, .hi = 1.5};
static const ps_row_init normal = {.kind = PS_ROW_INIT_NORMAL,
                                   .seed = 12,
                                   .mean = 0.25,
                                   .std = 2.0,
                                   .lo = -INFINITY,
                                   .hi = INFINITY};
/* Truncated at 2 std either side, as torch.nn.init.trunc_normal_'s defaults
 * are used for embeddings. */
static const ps_row_init truncated = {
    .kind = PS_ROW_INIT_NORMAL, .seed = 13, .mean = 0.0, .std = 0.01, .lo = -0.02, .hi = 0.02};

Test(row_init, parameter_rules)
{
    ps_row_init bad;
    ps_row_init_kind kind;
    char why[200];

    cr_assert_eq(ps_row_init_check(&uniform, why, sizeof(why)), 0);
    cr_assert_eq(ps_row_init_check(&normal, why, sizeof(why)), 0);
    cr_assert_eq(ps_row_init_check(&truncated, why, sizeof(why)), 0);
    bad = uniform;
    bad.lo = 2.0;
    cr_assert_eq(ps_row_init_check(&bad, why, sizeof(why)), -EINVAL);
    cr_assert(strstr(why, "low <= high"), "%s", why);
    bad.lo = -INFINITY;
    cr_assert_eq(ps_row_init_check(&bad, why, sizeof(why)), -EINVAL);
    bad = uniform;
    bad.hi = 1e39;
    cr_assert_eq(ps_row_init_check(&bad, why, sizeof(why)), -EINVAL);
    bad = normal;
    bad.std = -1.0;
    cr_assert_eq(ps_row_init_check(&bad, why, sizeof(why)), -EINVAL);
    bad.std = NAN;
    cr_assert_eq(ps_row_init_check(&bad, why, sizeof(why)), -EINVAL);
    bad = normal;
    bad.std = FLT_MAX / 4;
    cr_assert_eq(ps_row_init_check(&bad, why, sizeof(why)), -EINVAL);
    bad = truncated;
    bad.lo = 0.001; /* the mean outside the bounds */
    cr_assert_eq(ps_row_init_check(&bad, why, sizeof(why)), -EINVAL);
    cr_assert(strstr(why, "hold the mean"), "%s", why);
    bad = truncated;
    bad.lo = -0.004;
    bad.hi = 0.004; /* narrower than one std */
    cr_assert_eq(ps_row_init_check(&bad, why, sizeof(why)), -EINVAL);
    bad.kind = (ps_row_init_kind)7;
    cr_assert_eq(ps_row_init_check(&bad, why, sizeof(why)), -EINVAL);
    cr_assert_eq(ps_row_init_parse("normal", &kind), 0);
    cr_assert_eq(kind, PS_ROW_INIT_NORMAL);
    cr_assert_eq(ps_row_init_parse("gaussian", &kind), -EINVAL);
    cr_assert_str_eq(ps_row_init_name(PS_ROW_INIT_ZEROS), "zeros");
}

static uint32_t bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    return u;
}

Test(row_init, pinned_values)
{
    float v[3];

    /* Computed once from the definition in row_init.h. */
    ps_row_init_values(&uniform, 3, 1000001, 0, 3, v);
    cr_assert_eq(bits(v[0]), 0xbeebb6c0u);
    cr_assert_eq(bits(v[2]), 0x3f99c368u);
    ps_row_init_values(&normal, 3, 1000001, 5, 3, v);
    cr_assert_eq(bits(v[0]), 0x3d1c044du);
    cr_assert_eq(bits(v[2]), 0x3ee1901cu);
    ps_row_init_values(&truncated, 0, UINT64_MAX, 63, 1, v);
    cr_assert_eq(bits(v[0]), 0xbb96f28au);
}

Test(row_init, zeros)
{
    ps_row_init z = {.kind = PS_ROW_INIT_ZEROS};
    float v[17];

    memset(v, 0xff, sizeof(v));
    ps_row_init_values(&z, 1, 2, 0, 17, v);
    for (int i = 0; i < 17; i++)
        cr_assert_eq(bits(v[i]), 0);
    cr_assert_eq(bits(ps_row_init_value_ref(&z, 1, 2, 3)), 0);
}

/* The fast path against the reference over many rows: the uniform is the
 * same arithmetic and must match bit for bit; the normal's rational quantile
 * is within 1.2e-9 relative of the exact one, which moves the float result
 * by at most one unit in the last place plus std |z| 1.2e-9 (and mostly not
 * at all). */
static void check_against_ref(const ps_row_init *init, int exact)
{
    enum { D = 37, ROWS = 300 };
    float v[D];
    int differ = 0;

    for (uint64_t id = 0; id < ROWS; id++) {
        uint64_t row = id * 0x9e3779b97f4a7c15ULL;
        ps_row_init_values(init, 5, row, 0, D, v);
        for (uint32_t e = 0; e < D; e++) {
            float r = ps_row_init_value_ref(init, 5, row, e);
            if (exact) {
                cr_assert_eq(bits(v[e]), bits(r), "row %llu element %u: %a against %a",
                             (unsigned long long)row, e, v[e], r);
                continue;
            }
            /* Where mean + std z nearly cancels, the quantile's relative
             * error of std |z| is what shows. */
            double tol =
                nextafterf(fabsf(r), INFINITY) - fabsf(r) + 1.2e-9 * fabs((double)r - init->mean);
            cr_assert_leq(fabs((double)v[e] - r), tol, "row %llu element %u: %a against %a",
                          (unsigned long long)row, e, v[e], r);
            differ += v[e] != r;
        }
    }
    cr_log_info("%s: %d of %d elements one ulp from the reference", ps_row_init_name(init->kind),
                differ, D * ROWS);
    cr_assert_lt(differ, D * ROWS / 100);
}

Test(row_init, fast_path_against_reference)
{
    check_against_ref(&uniform, 1);
    check_against_ref(&normal, 0);
    check_against_ref(&truncated, 0);
}

/* Any slice of a row, asked for in any order, is the same as the whole row
 * asked for at once: values depend on (seed, table, ID, element) alone. */
Test(row_init, independent_of_call_order)
{
    enum { D = 64 };
    const ps_row_init *inits[] = {&uniform, &normal, &truncated};
    float whole[D], piece[D];

    for (int k = 0; k < 3; k++) {
        ps_row_init_values(inits[k], 2, 77, 0, D, whole);
        /* Backwards, one element at a time, with other rows between. */
        for (int e = D - 1; e >= 0; e--) {
            ps_row_init_values(inits[k], 2, 78, 0, D, piece);
            ps_row_init_values(inits[k], 2, 77, (uint32_t)e, 1, &piece[e]);
            cr_assert_eq(bits(piece[e]), bits(whole[e]));
        }
        ps_row_init_values(inits[k], 2, 77, 10, 20, piece);
        cr_assert_eq(memcmp(piece, whole + 10, 20 * sizeof(float)), 0);
    }
}

typedef struct {
    double n, m1, m2, m3, m4; /* count; sums of x, x^2, x^3, x^4 */
    double n_lag, lag;        /* neighbouring pairs in a row; sum of x_i x_{i+1} */
    float min, max;
} moments;

/* Moments of `rows` rows of d elements of table 1, rows `stride` IDs apart. */
static moments sample(const ps_row_init *init, int rows, int d, uint64_t stride)
{
    float *v = malloc((size_t)d * sizeof(float));
    moments m = {.min = INFINITY, .max = -INFINITY};

    cr_assert_not_null(v);
    for (int r = 0; r < rows; r++) {
        ps_row_init_values(init, 1, (uint64_t)r * stride, 0, (size_t)d, v);
        for (int e = 0; e < d; e++) {
            double x = v[e];
            m.n += 1;
            m.m1 += x;
            m.m2 += x * x;
            m.m3 += x * x * x;
            m.m4 += x * x * x * x;
            if (e + 1 < d) {
                m.n_lag += 1;
                m.lag += x * v[e + 1];
            }
            m.min = fminf(m.min, v[e]);
            m.max = fmaxf(m.max, v[e]);
        }
    }
    free(v);
    return m;
}

/* Mean, variance, skewness, excess kurtosis and the neighbours' correlation
 * against the exact values of a distribution with mean mu, std sd, third
 * standardised moment skew and excess kurtosis kurt. The standard errors of
 * the sample estimates over n values are about sd/sqrt(n), sd^2 sqrt(2/n),
 * sqrt(6/n), sqrt(24/n) and 1/sqrt(n); each is checked within 6 of them. */
static void check_moments(moments m, double mu, double sd, double skew, double kurt)
{
    double n = m.n, mean = m.m1 / n, var = m.m2 / n - mean * mean;
    double c3 = m.m3 / n - 3 * mean * m.m2 / n + 2 * mean * mean * mean;
    double c4 = m.m4 / n - 4 * mean * m.m3 / n + 6 * mean * mean * m.m2 / n - 3 * pow(mean, 4);
    double corr = (m.lag / m.n_lag - mean * mean) / var;

    cr_log_info("mean %.5g (%.5g) sd %.5g (%.5g) skew %.4f (%.4f) kurt %.4f (%.4f) corr %.4f", mean,
                mu, sqrt(var), sd, c3 / pow(var, 1.5), skew, c4 / (var * var) - 3, kurt, corr);
    cr_assert_lt(fabs(mean - mu), 6 * sd / sqrt(n));
    cr_assert_lt(fabs(var - sd * sd), 6 * sd * sd * sqrt((2 + kurt) / n));
    cr_assert_lt(fabs(c3 / pow(var, 1.5) - skew), 6 * sqrt(6 / n) * 2);
    cr_assert_lt(fabs(c4 / (var * var) - 3 - kurt), 6 * sqrt(24 / n) * 2);
    cr_assert_lt(fabs(corr), 6 / sqrt(n));
}

Test(row_init, distributions, .timeout = 60)
{
    moments m;
    /* Truncated at +-2 std: variance 1 - 2*2*phi(2)/(2*Phi(2) - 1) of std^2,
     * and the fourth moment from the same formula one order up. */
    double a = 2.0, phi = exp(-a * a / 2) / sqrt(2 * M_PI), z = erf(a / sqrt(2));
    double tvar = 1 - 2 * a * phi / z, tm4 = 3 - (2 * a * a * a * phi + 6 * a * phi) / z;

    m = sample(&uniform, 4000, 50, 1);
    check_moments(m, 0.5, 2.0 / sqrt(12.0), 0.0, -1.2);
    cr_assert_geq(m.min, -0.5f);
    cr_assert_leq(m.max, 1.5f);
    m = sample(&normal, 4000, 50, 0x10000000ULL);
    check_moments(m, 0.25, 2.0, 0.0, 0.0);
    m = sample(&truncated, 4000, 50, 3);
    check_moments(m, 0.0, 0.01 * sqrt(tvar), 0.0, tm4 / (tvar * tvar) - 3);
    cr_assert_geq(m.min, -0.02f);
    cr_assert_leq(m.max, 0.02f);
    /* The tails are reached: beyond 1.9 std on both sides. */
    cr_assert_lt(m.min, -0.019f);
    cr_assert_gt(m.max, 0.019f);
}

/* The same element of different rows and of different tables is as
 * uncorrelated as different elements of one row. */
Test(row_init, rows_and_tables_independent)
{
    enum { ROWS = 20000 };
    double sxy = 0, sxz = 0, sxx = 0;

    for (uint64_t r = 0; r < ROWS; r++) {
        float x, y, z;
        ps_row_init_values(&normal, 1, r, 0, 1, &x);
        ps_row_init_values(&normal, 1, r + 1, 0, 1, &y);
        ps_row_init_values(&normal, 2, r, 0, 1, &z);
        sxy += ((double)x - 0.25) * ((double)y - 0.25);
        sxz += ((double)x - 0.25) * ((double)z - 0.25);
        sxx += ((double)x - 0.25) * ((double)x - 0.25);
    }
    cr_assert_lt(fabs(sxy / sxx), 6 / sqrt(ROWS));
    cr_assert_lt(fabs(sxz / sxx), 6 / sqrt(ROWS));
}
