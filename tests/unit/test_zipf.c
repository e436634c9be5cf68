/* Tests for the Zipf sampler: bad parameters refused with exact codes; the
 * same seed gives the same ranks; the frequencies of small vocabularies
 * against the exact probabilities by a chi-square test; the head of a
 * 10-million vocabulary against its probabilities; rank scrambling is a
 * bijection. Seeds are fixed, so every run draws the same numbers; the
 * bounds are set where a correct sampler fails with probability below
 * 1e-6 for a random seed, and a sampler off by 1% in one rank's mass fails
 * them. */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <errno.h>
#include <math.h>
#include <stdlib.h>

#include "zipf.h"

Test(zipf, refuses_bad_parameters)
{
    ps_zipf z;

    cr_assert_eq(ps_zipf_init(&z, 0, 1.05, 1), -EINVAL);
    cr_assert_eq(ps_zipf_init(&z, (1ULL << 53) + 1, 1.05, 1), -EINVAL);
    cr_assert_eq(ps_zipf_init(&z, 10, 0.0, 1), -EINVAL);
    cr_assert_eq(ps_zipf_init(&z, 10, -1.0, 1), -EINVAL);
    cr_assert_eq(ps_zipf_init(&z, 10, NAN, 1), -EINVAL);
    cr_assert_eq(ps_zipf_init(&z, 10, INFINITY, 1), -EINVAL);
    cr_assert_eq(ps_zipf_init(&z, 1, 1.05, 1), 0);
    for (int i = 0; i < 100; i++)
        cr_assert_eq(ps_zipf_next(&z), 0);
}

Test(zipf, same_seed_same_ranks)
{
    ps_zipf a, b, c;
    int differ = 0;

    cr_assert_eq(ps_zipf_init(&a, 10000000, 1.05, 42), 0);
    cr_assert_eq(ps_zipf_init(&b, 10000000, 1.05, 42), 0);
    cr_assert_eq(ps_zipf_init(&c, 10000000, 1.05, 43), 0);
    for (int i = 0; i < 10000; i++) {
        uint64_t x = ps_zipf_next(&a), y = ps_zipf_next(&b);
        cr_assert_eq(x, y);
        cr_assert_lt(x, 10000000);
        differ += ps_zipf_next(&c) != x;
    }
    /* About 80% of the ranks differ between two seeds (rank 0 alone has 9%). */
    cr_assert_gt(differ, 5000);
}

/* Chi-square of draws of ranks over n against k^-s, with n - 1 degrees of
 * freedom. */
static double chi_square(uint64_t n, double s, uint64_t seed, long draws)
{
    long *count = calloc(n, sizeof(long));
    double *p = malloc(n * sizeof(double)), sum = 0.0, chi = 0.0;
    ps_zipf z;

    cr_assert(count && p);
    for (uint64_t k = 0; k < n; k++)
        sum += p[k] = pow((double)(k + 1), -s);
    cr_assert_eq(ps_zipf_init(&z, n, s, seed), 0);
    for (long i = 0; i < draws; i++) {
        uint64_t r = ps_zipf_next(&z);
        cr_assert_lt(r, n);
        count[r]++;
    }
    for (uint64_t k = 0; k < n; k++) {
        double e = (double)draws * p[k] / sum;
        chi += ((double)count[k] - e) * ((double)count[k] - e) / e;
    }
    free(count);
    free(p);
    return chi;
}

/* n - 1 = 49 degrees of freedom: mean 49, sd 9.9; 110 is 6 sd above, a
 * tail below 1e-7. 400,000 draws put the expected count of rank 49 near
 * 1,700 at s = 1.05, and a 1% error in rank 0's mass (10% of the draws)
 * alone adds 40 to the statistic. */
Test(zipf, small_vocabularies_match_their_probabilities)
{
    const double exponents[] = {0.5, 1.0, 1.05, 1.5, 2.0};

    for (size_t i = 0; i < sizeof(exponents) / sizeof(exponents[0]); i++) {
        double chi = chi_square(50, exponents[i], 7 + i, 400000);
        cr_log_info("s = %.2f: chi-square %.1f on 49 degrees of freedom", exponents[i], chi);
        cr_assert_lt(chi, 110.0, "s = %g: chi-square %g", exponents[i], chi);
    }
}

/* sum_{k=1..n} k^-s: the first 10^6 terms added, the rest by Euler-Maclaurin
 * (integral, end corrections and the first derivative term; the error is
 * below 1e-15 relative at these sizes). */
static double harmonic(uint64_t n, double s)
{
    uint64_t m = n < 1000000 ? n : 1000000;
    double sum = 0.0, a = (double)m + 1.0, b = (double)n;

    for (uint64_t k = m; k >= 1; k--)
        sum += pow((double)k, -s);
    if (n > m)
        sum += (pow(b, 1.0 - s) - pow(a, 1.0 - s)) / (1.0 - s) + 0.5 * (pow(a, -s) + pow(b, -s)) +
               s / 12.0 * (pow(a, -s - 1.0) - pow(b, -s - 1.0));
    return sum;
}

/* A 10-million vocabulary at s = 1.05: the frequencies of ranks 0, 1, 9 and
 * of ranks below 1000 against their probabilities, within 5 binomial
 * standard deviations. */
Test(zipf, large_vocabulary_head)
{
    const uint64_t n = 10000000;
    const long draws = 400000;
    const double s = 1.05, h = harmonic(n, s);
    const uint64_t ranks[] = {0, 1, 9};
    long count[3] = {0}, below = 0;
    double p_below = 0.0;
    ps_zipf z;

    cr_assert_eq(ps_zipf_init(&z, n, s, 2024), 0);
    for (long i = 0; i < draws; i++) {
        uint64_t r = ps_zipf_next(&z);
        cr_assert_lt(r, n);
        for (int j = 0; j < 3; j++)
            count[j] += r == ranks[j];
        below += r < 1000;
    }
    for (int k = 1; k <= 1000; k++)
        p_below += pow(k, -s) / h;
    for (int j = 0; j < 3; j++) {
        double p = pow((double)(ranks[j] + 1), -s) / h, sd = sqrt(draws * p * (1 - p));
        cr_assert_lt(fabs((double)count[j] - draws * p), 5 * sd,
                     "rank %llu: %ld draws, %.0f expected", (unsigned long long)ranks[j], count[j],
                     draws * p);
    }
    cr_assert_lt(fabs((double)below - draws * p_below), 5 * sqrt(draws * p_below * (1 - p_below)),
                 "%ld below 1000, %.0f expected", below, draws * p_below);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

Test(zipf, scramble_is_a_bijection)
{
    enum { N = 100000 };
    uint64_t *ids = malloc(N * sizeof(uint64_t));
    int same = 0;

    cr_assert_not_null(ids);
    for (uint64_t r = 0; r < N; r++) {
        ids[r] = ps_zipf_scramble(r, 5);
        same += ids[r] == ps_zipf_scramble(r, 6);
    }
    qsort(ids, N, sizeof(uint64_t), cmp_u64);
    for (int i = 1; i < N; i++)
        cr_assert_neq(ids[i], ids[i - 1]);
    cr_assert_eq(same, 0);
    /* Popular ranks land all over the range, not near 0. */
    cr_assert_gt(ps_zipf_scramble(0, 5) | ps_zipf_scramble(1, 5), 1ULL << 40);
    free(ids);
}
