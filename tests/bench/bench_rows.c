/* bench-rows: the embedding row store on one thread, at the size where a
 * table does not fit any cache.
 *
 * For each optimizer (Adagrad and Adam by default) it fills a store with
 * --rows rows of --dim floats through the apply path (each row created
 * from its initializer and updated once), in a random order of a
 * vocabulary of --rows IDs, and reports:
 *   fill     rows created per second;
 *   memory   resident bytes the store added (RSS, /proc/self/statm) per
 *            stored row, against the row's values + optimizer state;
 *   apply    rows per second of ps_row_store_apply on batches of unique IDs
 *            (--sizes), drawn Zipf(--zipf) over the vocabulary in the
 *            order first drawn (random), with random gradients;
 *   gather   rows per second of ps_row_store_gather of the same batches.
 * Baselines in the same run, once the store is freed: the same per-row
 * update (ps_row_opt_apply) and the same copy on the same rows laid out as
 * one plain array indexed by vocabulary rank, no index, no bookkeeping;
 * ratio = store / baseline. Each rate is given per second of wall time and
 * per second of this process's CPU time (getrusage), the figure that holds
 * on a machine other programs share. One JSON line per case. Not in ctest, but for
 * a small smoke run (--rows 20000), which checks only that it runs: its
 * numbers mean nothing under the sanitizers. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"
#include "clock.h"
#include "flags.h"
#include "mix64.h"
#include "row_store.h"
#include "zipf.h"

#define PS__MAX_SIZES 4
#define PS__SALT      0x5eed

/* Batches of unique IDs and their ranks, with gradients. */
typedef struct {
    size_t size, count;
    uint64_t *ids;   /* count * size */
    uint32_t *ranks; /* count * size */
    float *grads;    /* size * dim, shared by all batches */
} ps__batches;

static double ps__rss_bytes(void)
{
    long pages = 0, resident = 0;
    FILE *f = fopen("/proc/self/statm", "r");

    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &resident) != 2)
            resident = 0;
        fclose(f);
    }
    return (double)resident * (double)sysconf(_SC_PAGESIZE);
}

/* count batches of size unique ranks drawn from z, in the order drawn. */
static int ps__make_batches(ps_zipf *z, uint64_t vocab, size_t size, size_t count, uint32_t dim,
                            ps__batches *b)
{
    size_t cap = 1;
    uint32_t *seen, stamp = 0;
    uint32_t *slot;

    while (cap < 2 * size)
        cap *= 2;
    *b = (ps__batches){.size = size, .count = count};
    b->ids = malloc(count * size * sizeof(uint64_t));
    b->ranks = malloc(count * size * sizeof(uint32_t));
    b->grads = malloc(size * dim * sizeof(float));
    seen = calloc(cap, sizeof(uint32_t));
    slot = malloc(cap * sizeof(uint32_t));
    if (!b->ids || !b->ranks || !b->grads || !seen || !slot) {
        free(seen);
        free(slot);
        return -ENOMEM;
    }
    for (size_t i = 0; i < size * dim; i++)
        b->grads[i] = (float)(ps_mix64_unit(ps_zipf_bits(z)) - 0.5) * 0.1f;
    for (size_t k = 0; k < count; k++) {
        size_t n = 0;
        stamp++;
        while (n < size && n < vocab) {
            uint32_t r = (uint32_t)ps_zipf_next(z);
            size_t h = (size_t)ps_mix64(r) & (cap - 1);
            int dup = 0;
            for (; seen[h] == stamp; h = (h + 1) & (cap - 1))
                if (slot[h] == r) {
                    dup = 1;
                    break;
                }
            if (dup)
                continue;
            seen[h] = stamp;
            slot[h] = r;
            b->ranks[k * size + n] = r;
            b->ids[k * size + n] = ps_zipf_scramble(r, PS__SALT);
            n++;
        }
    }
    free(seen);
    free(slot);
    return 0;
}

static void ps__batches_free(ps__batches *b)
{
    free(b->ids);
    free(b->ranks);
    free(b->grads);
}

/* Fills st with every rank of the vocabulary in a random order, through the
 * apply path. Returns the seconds it took, or a negative code. */
static double ps__fill(ps_row_store *st, ps_zipf *z, uint32_t vocab, uint32_t dim)
{
    enum { CHUNK = 65536 };
    uint32_t *order = malloc((size_t)vocab * sizeof(uint32_t));
    uint64_t *ids = malloc(CHUNK * sizeof(uint64_t));
    float *g = calloc((size_t)CHUNK * dim, sizeof(float));
    double t0;
    int rc = 0;

    if (!order || !ids || !g) {
        rc = -ENOMEM;
        goto out;
    }
    for (uint32_t i = 0; i < vocab; i++)
        order[i] = i;
    for (uint32_t i = vocab - 1; i > 0; i--) {
        uint32_t j = (uint32_t)(ps_zipf_bits(z) % ((uint64_t)i + 1)), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    for (size_t i = 0; i < (size_t)CHUNK * dim; i++)
        g[i] = 0.01f;
    t0 = ps_clock_now();
    for (uint32_t first = 0; first < vocab && rc == 0; first += CHUNK) {
        size_t n = vocab - first < CHUNK ? vocab - first : CHUNK;
        for (size_t i = 0; i < n; i++)
            ids[i] = ps_zipf_scramble(order[first + i], PS__SALT);
        rc = ps_row_store_apply(st, ids, g, n, 0, 0.01f, 1.0f, NULL);
    }
    t0 = ps_clock_now() - t0;
out:
    free(order);
    free(ids);
    free(g);
    return rc < 0 ? rc : t0;
}

/* Wall and own CPU seconds of the timed loops. */
typedef struct {
    double apply_s, gather_s, apply_cpu, gather_cpu;
} ps__times;

/* The store's apply, then gather, of every batch (steps 1, 2, ...). */
static int ps__time_store(ps_row_store *st, const ps__batches *b, float *out, ps__times *t)
{
    double t0 = ps_clock_now(), c0 = ps_bench_own_cpu();
    int rc = 0;

    for (size_t k = 0; k < b->count && rc == 0; k++)
        rc = ps_row_store_apply(st, b->ids + k * b->size, b->grads, b->size, k + 1, 0.01f, 1.0f,
                                NULL);
    t->apply_s = ps_clock_now() - t0;
    t->apply_cpu = ps_bench_own_cpu() - c0;
    t0 = ps_clock_now();
    c0 = ps_bench_own_cpu();
    for (size_t k = 0; k < b->count && rc == 0; k++)
        rc = ps_row_store_gather(st, b->ids + k * b->size, b->size, b->count + 1, out, NULL);
    t->gather_s = ps_clock_now() - t0;
    t->gather_cpu = ps_bench_own_cpu() - c0;
    return rc;
}

/* The baseline: the same update and copy on a plain array of rows
 * (values then state, by rank), found by index. */
static void ps__time_plain(const ps_row_opt_config *opt, float *rows, size_t stride, uint32_t dim,
                           const ps__batches *b, float *out, ps__times *t)
{
    double t0 = ps_clock_now(), c0 = ps_bench_own_cpu();
    volatile int sink = 0;

    for (size_t k = 0; k < b->count; k++)
        for (size_t i = 0; i < b->size; i++) {
            float *row = rows + (size_t)b->ranks[k * b->size + i] * stride;
            sink += ps_row_opt_apply(opt, 0.01f, row, row + dim, b->grads + i * dim, dim, k + 2);
        }
    t->apply_s = ps_clock_now() - t0;
    t->apply_cpu = ps_bench_own_cpu() - c0;
    t0 = ps_clock_now();
    c0 = ps_bench_own_cpu();
    for (size_t k = 0; k < b->count; k++)
        for (size_t i = 0; i < b->size; i++)
            memcpy(out + i * dim, rows + (size_t)b->ranks[k * b->size + i] * stride,
                   dim * sizeof(float));
    t->gather_s = ps_clock_now() - t0;
    t->gather_cpu = ps_bench_own_cpu() - c0;
    (void)sink;
}

/* Figures of one optimizer's run. */
typedef struct {
    double fill_s, rss_per_row, store_bytes_per_row;
    ps__times store[PS__MAX_SIZES], plain[PS__MAX_SIZES];
} ps__result;

static int ps__run(const char *opt_name, uint32_t rows, uint32_t dim, double zipf_s,
                   const size_t *sizes, int n_sizes, size_t rows_per_case, ps__result *res)
{
    ps_row_store_config cfg = {
        .table_id = 1,
        .dim = dim,
        .init = {.kind = PS_ROW_INIT_UNIFORM, .seed = 1, .lo = -0.05, .hi = 0.05},
        .expect_rows = rows,
    };
    ps__batches b[PS__MAX_SIZES] = {{0}};
    ps_row_store *st = NULL;
    ps_row_counters c;
    float *out = NULL, *plain = NULL;
    size_t stride, max_size = 0;
    double rss0;
    char why[256];
    ps_zipf z;
    int rc;

    if ((rc = ps_row_opt_parse(opt_name, &cfg.opt)) < 0) {
        fprintf(stderr, "bench-rows: unknown optimizer %s\n", opt_name);
        return rc;
    }
    ps_zipf_init(&z, rows, zipf_s, 7);
    for (int k = 0; k < n_sizes; k++) {
        size_t count = rows_per_case / sizes[k] ? rows_per_case / sizes[k] : 1;
        if ((rc = ps__make_batches(&z, rows, sizes[k], count, dim, &b[k])) < 0)
            goto fail;
        max_size = sizes[k] > max_size ? sizes[k] : max_size;
    }
    if (!(out = malloc(max_size * dim * sizeof(float)))) {
        rc = -ENOMEM;
        goto fail;
    }
    rss0 = ps__rss_bytes();
    if ((rc = ps_row_store_create(&st, &cfg, why, sizeof(why))) < 0) {
        fprintf(stderr, "bench-rows: %s\n", why);
        goto fail;
    }
    res->fill_s = ps__fill(st, &z, rows, dim);
    if (res->fill_s < 0) {
        rc = (int)res->fill_s;
        goto fail;
    }
    res->rss_per_row = (ps__rss_bytes() - rss0) / rows;
    ps_row_store_counters(st, &c);
    res->store_bytes_per_row = (double)c.bytes / rows;
    for (int k = 0; k < n_sizes; k++)
        if ((rc = ps__time_store(st, &b[k], out, &res->store[k])) < 0)
            goto fail;
    stride = dim + ps_row_store_state_floats(st);
    ps_row_store_free(st);
    st = NULL;
    /* The baseline's rows, made as the store made them. */
    if (!(plain = malloc((size_t)rows * stride * sizeof(float)))) {
        rc = -ENOMEM;
        goto fail;
    }
    for (uint32_t r = 0; r < rows; r++) {
        float *row = plain + (size_t)r * stride;
        ps_row_init_values(&cfg.init, cfg.table_id, ps_zipf_scramble(r, PS__SALT), 0, dim, row);
        memset(row + dim, 0, (stride - dim) * sizeof(float));
    }
    for (int k = 0; k < n_sizes; k++)
        ps__time_plain(&cfg.opt, plain, stride, dim, &b[k], out, &res->plain[k]);
    rc = 0;
fail:
    ps_row_store_free(st);
    free(plain);
    free(out);
    for (int k = 0; k < n_sizes; k++)
        ps__batches_free(&b[k]);
    return rc;
}

int main(int argc, char **argv)
{
    const char *sizes_text = "4K,64K", *opts_text = "adagrad,adam";
    int rows = 10000000, dim = 64, per_case = 1 << 20, rc;
    double zipf_s = 1.05, busy0 = 0, busy1 = 0, own0, wall0;
    size_t sizes[PS__MAX_SIZES];
    int n_sizes;
    const ps_flag flags[] = {
        {"rows", PS_FLAG_INT, &rows, "N", "rows stored before timing (the vocabulary)", 1000,
         100000000, NULL, NULL, NULL},
        {"dim", PS_FLAG_INT, &dim, "D", "floats per row", 1, 1024, NULL, NULL, NULL},
        {"sizes", PS_FLAG_STRING, &sizes_text, "LIST", "unique IDs per batch (suffix K)", 0, 0,
         NULL, NULL, NULL},
        {"rows-per-case", PS_FLAG_INT, &per_case, "N",
         "rows applied per timed case (batches = this / size, at least 1)", 1, 1 << 26, NULL, NULL,
         NULL},
        {"optimizers", PS_FLAG_STRING, &opts_text, "LIST", "per-row optimizers, comma-separated", 0,
         0, NULL, NULL, NULL},
        {"zipf", PS_FLAG_DOUBLE, &zipf_s, "S", "Zipf exponent of the batches' IDs", 0.1, 10, NULL,
         NULL, NULL},
    };
    char opts[256], *save = NULL;

    rc = ps_flags_parse(flags, (int)(sizeof(flags) / sizeof(flags[0])), argc, argv, "bench-rows",
                        "Embedding row store: fill, memory, apply and gather rows/s.");
    if (rc != 0)
        return rc > 0 ? 0 : 2;
    n_sizes = ps_bench_parse_sizes(sizes_text, sizes, PS__MAX_SIZES);
    for (int k = 0; k < n_sizes; k++)
        if (sizes[k] < 1 || sizes[k] > (size_t)rows)
            n_sizes = -EINVAL;
    if (n_sizes <= 0) {
        fprintf(stderr,
                "bench-rows: --sizes takes up to %d batch sizes like 4K,64K, each at most "
                "--rows\n",
                PS__MAX_SIZES);
        return 2;
    }
    snprintf(opts, sizeof(opts), "%s", opts_text);
    printf("bench-rows: %d rows of %d floats stored before timing, batches of unique IDs drawn "
           "Zipf(%.2f) in random order, 1 thread;\nbaseline = the same update and copy on a plain "
           "array indexed by rank; ratio = store / baseline\n",
           rows, dim, zipf_s);
    fflush(stdout);
    for (char *name = strtok_r(opts, ",", &save); name; name = strtok_r(NULL, ",", &save)) {
        ps__result res = {0};
        ps_row_opt_config oc;
        double row_bytes;

        if (ps_row_opt_parse(name, &oc) < 0) {
            fprintf(stderr, "bench-rows: unknown optimizer %s\n", name);
            return 2;
        }
        row_bytes = 4.0 * (dim + (double)ps_row_opt_state_floats(&oc, (uint32_t)dim));
        own0 = ps_bench_own_cpu();
        wall0 = ps_clock_now();
        ps_bench_machine_busy(&busy0);
        if ((rc = ps__run(name, (uint32_t)rows, (uint32_t)dim, zipf_s, sizes, n_sizes,
                          (size_t)per_case, &res)) < 0) {
            fprintf(stderr, "bench-rows: %s: %s\n", name, strerror(-rc));
            return 1;
        }
        ps_bench_machine_busy(&busy1);
        printf("{\"bench\":\"rows\",\"case\":\"fill\",\"opt\":\"%s\",\"dim\":%d,\"rows\":%d,"
               "\"rows_per_second\":%.0f}\n",
               name, dim, rows, rows / res.fill_s);
        printf("{\"bench\":\"rows\",\"case\":\"memory\",\"opt\":\"%s\",\"dim\":%d,\"rows\":%d,"
               "\"row_bytes\":%.0f,\"rss_bytes_per_row\":%.1f,\"store_bytes_per_row\":%.1f,"
               "\"ratio\":%.3f}\n",
               name, dim, rows, row_bytes, res.rss_per_row, res.store_bytes_per_row,
               res.rss_per_row / row_bytes);
        for (int k = 0; k < n_sizes; k++) {
            size_t count = (size_t)per_case / sizes[k] ? (size_t)per_case / sizes[k] : 1;
            double n = (double)count * sizes[k];
            const char *op[2] = {"apply", "gather"};
            double st[2] = {res.store[k].apply_s, res.store[k].gather_s};
            double pl[2] = {res.plain[k].apply_s, res.plain[k].gather_s};
            double stc[2] = {res.store[k].apply_cpu, res.store[k].gather_cpu};
            double plc[2] = {res.plain[k].apply_cpu, res.plain[k].gather_cpu};
            for (int o = 0; o < 2; o++)
                printf("{\"bench\":\"rows\",\"case\":\"%s\",\"opt\":\"%s\",\"ids\":%zu,\"dim\":%d,"
                       "\"rows\":%d,\"batches\":%zu,\"rows_per_second\":%.0f,"
                       "\"baseline_rows_per_second\":%.0f,\"ratio\":%.3f,"
                       "\"rows_per_cpu_second\":%.0f,\"baseline_rows_per_cpu_second\":%.0f,"
                       "\"cpu_ratio\":%.3f}\n",
                       op[o], name, sizes[k], dim, rows, count, n / st[o], n / pl[o], pl[o] / st[o],
                       n / stc[o], n / plc[o], plc[o] / stc[o]);
        }
        /* How much of the machine others took meanwhile (2 cores here). */
        printf("{\"bench\":\"rows\",\"case\":\"load\",\"opt\":\"%s\",\"wall_s\":%.1f,"
               "\"own_cpu_s\":%.1f,\"machine_busy_s\":%.1f}\n",
               name, ps_clock_now() - wall0, ps_bench_own_cpu() - own0, busy1 - busy0);
        fflush(stdout);
    }
    return 0;
}
