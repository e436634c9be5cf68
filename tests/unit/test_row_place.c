/* Tests for row placement. The hash is part of the stored format, so a few
 * values are pinned. Sequential and patterned IDs spread within 6 binomial
 * standard deviations. The balance figures on Zipf-distributed IDs
 * (exponent 1.05, 20 tables with vocabularies from 1,000 to 10 million,
 * 8 servers), measured as follows:
 *
 *   stored   distinct (table, ID) pairs over a run of 20 steps of 4,096
 *            samples (one ID per table per sample): each server's count
 *            against the mean over servers; what the servers would store
 *            without admission or eviction.
 *   unique   per step, the distinct (table, ID) pairs of that step's batch
 *            each server holds (what a client sends it after removing
 *            repeats); the worst step's most loaded server against that
 *            step's mean.
 *   raw      every (table, ID) occurrence over the run, repeats counted
 *            (what servers would receive without deduplication); the most
 *            loaded server against the mean.
 *
 * Measured: stored 1.007, unique 1.045 (worst of 20 steps), raw 1.175.
 * Stored and unique counts are sums of many independent placements, far
 * inside 1.10x (standard deviations of about 0.3% and 1.5%). Raw lookups are
 * not: each table's most popular row carries 6-15% of its lookups and goes
 * to one server, so their balance depends on where 20 tables' few hot rows
 * happen to land. The test checks the fixed configuration against 1.2x, and
 * separately that the hash behaves as random placement would: over 200
 * other sets of table ids, the share of sets within 1.2x (computed from the
 * exact probabilities of each table's first 2,000 ranks) is at least what
 * random placement gives with a wide margin. */
#include <criterion/criterion.h>
#include <criterion/logging.h>

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "row_place.h"
#include "zipf.h"

#define SERVERS 8
#define TABLES  20

Test(row_place, pinned_values)
{
    /* Computed once from the definition in row_place.h; a change here moves
     * every row of every checkpoint. */
    cr_assert_eq(ps_row_hash(0, 0), 0xa706dd2f4d197e6fULL);
    cr_assert_eq(ps_row_hash(1, 12345), 0x13fc06247e2add28ULL);
    cr_assert_eq(ps_row_hash(7, UINT64_MAX), 0xa9a96b699dc41760ULL);
    cr_assert_eq(ps_row_place(3, 42, 8), 2);
    cr_assert_eq(ps_row_place(3, 43, 5), 4);
}

Test(row_place, server_range)
{
    uint32_t out[64];
    uint64_t ids[64];

    for (uint32_t s = 1; s <= 64; s++) {
        cr_assert_eq(ps_row_server_of(0, s), 0);
        cr_assert_eq(ps_row_server_of(UINT64_MAX, s), s - 1);
        for (uint64_t id = 0; id < 1000; id++)
            cr_assert_lt(ps_row_place(9, id, s), s);
    }
    for (int i = 0; i < 64; i++)
        ids[i] = (uint64_t)i * 0x100000001ULL;
    cr_assert_eq(ps_row_place_many(4, ids, 64, 7, out), 0);
    for (int i = 0; i < 64; i++)
        cr_assert_eq(out[i], ps_row_place(4, ids[i], 7));
    cr_assert_eq(ps_row_place_many(4, ids, 64, 0, out), -EINVAL);
}

/* n IDs from next(i) over s servers: every server within 6 standard
 * deviations of n / s. */
static void check_spread(uint32_t table, uint64_t (*next)(uint64_t), uint64_t n, uint32_t s)
{
    uint64_t count[64] = {0};
    double mean = (double)n / s, sd = sqrt(n * (1.0 / s) * (1.0 - 1.0 / s));

    for (uint64_t i = 0; i < n; i++)
        count[ps_row_place(table, next(i), s)]++;
    for (uint32_t k = 0; k < s; k++)
        cr_assert_lt(fabs((double)count[k] - mean), 6 * sd,
                     "%u servers: server %u holds %llu, %.0f expected", s, k,
                     (unsigned long long)count[k], mean);
}

static uint64_t sequential(uint64_t i)
{
    return i;
}

static uint64_t high_bits(uint64_t i)
{
    return i << 40;
}

static uint64_t strided(uint64_t i)
{
    return i * 1024;
}

Test(row_place, sequential_and_patterned_ids_spread)
{
    const uint32_t servers[] = {2, 3, 7, 8, 16, 64};

    for (size_t k = 0; k < sizeof(servers) / sizeof(servers[0]); k++) {
        check_spread(0, sequential, 200000, servers[k]);
        check_spread(1, high_bits, 200000, servers[k]);
        check_spread(2, strided, 200000, servers[k]);
    }
}

/* One (table, ID) occurrence, sortable. */
typedef struct {
    uint64_t id;
    uint32_t table;
    uint32_t server;
} row_ref;

static int cmp_ref(const void *a, const void *b)
{
    const row_ref *x = a, *y = b;
    if (x->table != y->table)
        return x->table < y->table ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* Per-server counts of the distinct entries of refs[0..n) (sorted here). */
static void count_distinct(row_ref *refs, size_t n, uint64_t *count)
{
    qsort(refs, n, sizeof(row_ref), cmp_ref);
    for (size_t i = 0; i < n; i++)
        if (i == 0 || cmp_ref(&refs[i], &refs[i - 1]) != 0)
            count[refs[i].server]++;
}

static double max_over_mean(const uint64_t *count)
{
    double max = 0.0, sum = 0.0;
    for (int s = 0; s < SERVERS; s++) {
        sum += (double)count[s];
        max = fmax(max, (double)count[s]);
    }
    return max / (sum / SERVERS);
}

/* Vocabularies from 10^3 to 10^7, evenly spaced in log. */
static uint64_t vocab(int t)
{
    return (uint64_t)llround(pow(10.0, 3.0 + 4.0 * t / (TABLES - 1)));
}

Test(row_place, zipf_balance, .timeout = 60)
{
    enum { STEPS = 20, BATCH = 4096, PER_STEP = BATCH * TABLES };
    row_ref *run = malloc((size_t)STEPS * PER_STEP * sizeof(row_ref));
    row_ref *step = malloc(PER_STEP * sizeof(row_ref));
    uint64_t raw[SERVERS] = {0}, stored[SERVERS] = {0};
    double worst_unique = 0.0;
    ps_zipf z[TABLES];

    cr_assert(run && step);
    for (int t = 0; t < TABLES; t++)
        cr_assert_eq(ps_zipf_init(&z[t], vocab(t), 1.05, 1000 + t), 0);
    for (int k = 0; k < STEPS; k++) {
        uint64_t unique[SERVERS] = {0};
        for (int i = 0; i < BATCH; i++)
            for (int t = 0; t < TABLES; t++) {
                /* Ranks are the IDs: popular IDs are small and sequential. */
                uint64_t id = ps_zipf_next(&z[t]);
                row_ref r = {
                    .id = id, .table = (uint32_t)t, .server = ps_row_place(t, id, SERVERS)};
                step[i * TABLES + t] = r;
                run[(size_t)k * PER_STEP + i * TABLES + t] = r;
                raw[r.server]++;
            }
        count_distinct(step, PER_STEP, unique);
        worst_unique = fmax(worst_unique, max_over_mean(unique));
    }
    count_distinct(run, (size_t)STEPS * PER_STEP, stored);
    cr_log_info(
        "8 servers, Zipf 1.05, 20 tables: stored %.4f, unique per step (worst) %.4f, raw %.4f",
        max_over_mean(stored), worst_unique, max_over_mean(raw));
    cr_assert_leq(max_over_mean(stored), 1.10);
    cr_assert_leq(worst_unique, 1.10);
    cr_assert_leq(max_over_mean(raw), 1.20);
    free(run);
    free(step);
}

/* The expected raw-lookup ratio of tables first, first + 1, ... from the
 * exact probabilities of each table's first `head` ranks; the rest of each
 * table's mass (many rows, each tiny) is spread evenly. */
static double raw_ratio_exact(uint32_t first, int head)
{
    double load[SERVERS] = {0}, max = 0.0;

    for (int t = 0; t < TABLES; t++) {
        uint64_t n = vocab(t);
        double h = 0.0, part = 0.0;
        /* The normaliser: exact sum over the head, integral for the tail. */
        int m = n < (uint64_t)head ? (int)n : head;
        for (int k = 1; k <= m; k++)
            h += pow(k, -1.05);
        if (n > (uint64_t)m)
            h += (pow(n + 0.5, -0.05) - pow(m + 0.5, -0.05)) / -0.05;
        for (int k = 1; k <= m; k++) {
            double p = pow(k, -1.05) / h;
            load[ps_row_place(first + t, (uint64_t)(k - 1), SERVERS)] += p;
            part += p;
        }
        for (int s = 0; s < SERVERS; s++)
            load[s] += (1.0 - part) / SERVERS;
    }
    for (int s = 0; s < SERVERS; s++)
        max = fmax(max, load[s]);
    return max / (TABLES / (double)SERVERS);
}

/* Random placement keeps these 20 tables within 1.2x in about 89% of
 * cases (a simulation with independent uniform server choices for each
 * table's 5,000 most popular IDs: 89% of 300 trials, mean ratio 1.14); the
 * hash gives 181 of 200 (90.5%), mean 1.134. The test asks for 150: six
 * standard deviations of a binomial(200, 0.89) below its mean, so a hash as
 * good as random placement does not fail it, while one that sends hot rows
 * of different tables to the same servers does. */
Test(row_place, raw_balance_as_random_placement)
{
    int within = 0;
    double sum = 0.0;

    for (uint32_t set = 0; set < 200; set++) {
        double r = raw_ratio_exact(1000 + set * TABLES, 2000);
        within += r <= 1.2;
        sum += r;
    }
    cr_log_info("raw lookups over 200 table-id sets: %d within 1.2x, mean ratio %.3f", within,
                sum / 200);
    cr_assert_geq(within, 150);
}
