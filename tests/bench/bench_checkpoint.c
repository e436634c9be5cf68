/* bench-checkpoint: what checkpoints of embedding rows cost (issue 24
 * point 5), with the checkpoint module on real files.
 *
 *   --mode pause     the write of a dense-only checkpoint (one tensor of
 *                    --floats with Adam's state) and of a rows-only one
 *                    (--rows rows of dim 64 with Adagrad's state), each 3
 *                    times: the median time per byte of each, and their
 *                    ratio (a write holds the server's loop, so this is the
 *                    pause training sees per byte saved).
 *   --mode state     server --server of --servers: its share of a job of
 *                    both (dense partition, rows placed by row_place),
 *                    built and written to --dir at clock 1; prints its
 *                    resident memory once built (the steady state).
 *   --mode restore   server --server of --servers restores from --dir
 *                    (re-placing when the files were written for another
 *                    number of servers); prints its peak resident memory
 *                    (VmHWM) and its resident memory after.
 * One JSON line per result. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint.h"
#include "clock.h"
#include "flags.h"
#include "job_options.h"
#include "mix64.h"
#include "partition.h"
#include "row_place.h"

#define PS__DIM   64
#define PS__BATCH 65536

/* kB of a /proc/self/status field. */
static double ps__status_kb(const char *field)
{
    char line[256];
    double kb = 0;
    size_t n = strlen(field);
    FILE *f = fopen("/proc/self/status", "r");

    while (f && fgets(line, sizeof(line), f))
        if (strncmp(line, field, n) == 0)
            kb = strtod(line + n + 1, NULL);
    if (f)
        fclose(f);
    return kb;
}

/* The job: a dense tensor of floats (none when 0) and, with rows, one row
 * table of dim 64 with Adagrad rows. */
static int ps__spec(ps_model_spec *spec, long floats, int with_rows)
{
    int shape[2] = {(int)(floats / 1024 > 0 ? floats / 1024 : 1), floats >= 1024 ? 1024 : 16};
    ps_row_table_spec t = {.name = "emb", .dim = PS__DIM, .optimizer = "adagrad"};
    int rc;

    memset(spec, 0, sizeof(*spec));
    spec->seed = 5;
    rc = ps_model_spec_add_tensor(spec, "w", 2, shape, PS_INIT_HE_UNIFORM, 64, 64);
    if (rc == 0 && with_rows)
        rc = ps_model_spec_add_row_table(spec, &t, NULL, 0);
    return rc;
}

typedef struct {
    ps_optimizer_config opt;
    const ps_model_spec *spec;
    uint32_t servers, server;
    ps_partition *part;
    ps_shard *shard;
    ps_row_store *store;
    uint64_t *clock, *newest;
} ps__state;

static void ps__state_free(ps__state *st)
{
    ps_row_store_free(st->store);
    ps_shard_free(st->shard);
    ps_partition_free(st->part);
    free(st->clock);
    free(st->newest);
    st->store = NULL;
    st->shard = NULL;
    st->part = NULL;
    st->clock = st->newest = NULL;
}

/* This server's empty shard (filled with initial values) and row store. */
static int ps__state_init(ps__state *st)
{
    ps_row_store_config c;
    int n, rc;

    if ((rc = ps_partition_init(&st->part, st->spec, (int)st->servers, 1 << 20)) < 0 ||
        (rc = ps_shard_init(&st->shard, st->part, (int)st->server, st->spec, &st->opt, 0)) < 0)
        return rc;
    n = ps_shard_chunk_count(st->shard);
    st->clock = calloc((size_t)n + 1, sizeof(uint64_t));
    st->newest = calloc((size_t)n + 1, sizeof(uint64_t));
    if (st->clock == NULL || st->newest == NULL)
        return -ENOMEM;
    for (int i = 0; i < n; i++)
        if ((rc = ps_shard_fill(st->shard, i, 1)) < 0)
            return rc;
    if (st->spec->n_row_tables == 0)
        return 0;
    memset(&c, 0, sizeof(c));
    c.dim = PS__DIM;
    c.init = st->spec->row_tables[0].init;
    c.opt.opt = st->opt;
    if ((rc = ps_row_opt_parse("adagrad", &c.opt)) < 0)
        return rc;
    return ps_row_store_create(&st->store, &c, NULL, 0);
}

/* Rows 0 .. rows-1 (spread IDs) that row_place puts on this server,
 * stored by one apply each batch. */
static int ps__fill_rows(ps__state *st, long rows)
{
    uint64_t *ids = malloc(PS__BATCH * sizeof(*ids));
    float *grads = malloc((size_t)PS__BATCH * PS__DIM * sizeof(float));
    size_t n = 0;
    int rc = ids && grads ? 0 : -ENOMEM;

    for (size_t i = 0; grads && i < (size_t)PS__BATCH * PS__DIM; i++)
        grads[i] = 0.001f * (float)(i % 97);
    for (long r = 0; rc == 0 && r <= rows; r++) {
        uint64_t id = ps_mix64((uint64_t)r + 1);
        if (r < rows && ps_row_place(0, id, st->servers) == st->server)
            ids[n++] = id;
        if (n == PS__BATCH || (r == rows && n > 0)) {
            rc = ps_row_store_apply(st->store, ids, grads, n, 0, 0.01f, 1.0f, NULL);
            n = 0;
        }
    }
    free(ids);
    free(grads);
    return rc;
}

static int ps__write(const ps__state *st, const char *dir, const ps_model_spec *spec, double *ms,
                     long *bytes)
{
    ps_checkpoint_meta meta;
    ps_checkpoint_rows rows;
    ps_checkpoint_clocks clocks = {st->clock, st->newest};
    char path[4096];
    double t0 = ps_clock_now();
    FILE *f;
    int rc;

    memset(&meta, 0, sizeof(meta));
    meta.server_index = st->server;
    meta.num_servers = st->servers;
    meta.optimizer = (uint32_t)st->opt.kind;
    meta.fingerprint = ps_model_spec_fingerprint(spec);
    meta.chunk_bytes = 1 << 20;
    meta.clock = 1;
    meta.job = ps_job_fingerprint(NULL, 0);
    memset(&rows, 0, sizeof(rows));
    rows.n = spec->n_row_tables;
    rows.store[0] = st->store;
    rows.dim[0] = PS__DIM;
    rc = ps_checkpoint_write(dir, 1, &meta, spec, st->shard, &clocks, &rows, path, sizeof(path));
    *ms = (ps_clock_now() - t0) * 1e3;
    f = rc == 0 ? fopen(path, "rb") : NULL;
    if (f) {
        fseek(f, 0, SEEK_END);
        *bytes = ftell(f);
        fclose(f);
    }
    return rc;
}

static int ps__cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of 3 writes of one kind of checkpoint, in ns per byte. */
static int ps__pause(const char *dir, const char *kind, long floats, long rows, double *ns_byte)
{
    ps_model_spec spec;
    ps__state st = {.spec = &spec, .servers = 1};
    double ms[3];
    long bytes = 0;
    int rc;

    ps_optimizer_defaults(&st.opt, rows ? PS_OPT_ADAGRAD : PS_OPT_ADAM);
    if ((rc = ps__spec(&spec, floats, rows > 0)) < 0 || (rc = ps__state_init(&st)) < 0 ||
        (rows && (rc = ps__fill_rows(&st, rows)) < 0))
        goto out;
    for (int i = 0; i < 3 && rc == 0; i++)
        rc = ps__write(&st, dir, &spec, &ms[i], &bytes);
    if (rc < 0)
        goto out;
    qsort(ms, 3, sizeof(ms[0]), ps__cmp);
    *ns_byte = ms[1] * 1e6 / (double)bytes;
    printf("{\"mode\":\"pause\",\"kind\":\"%s\",\"bytes\":%ld,\"ms\":%.1f,\"ns_per_byte\":%.3f}\n",
           kind, bytes, ms[1], *ns_byte);
out:
    ps__state_free(&st);
    ps_model_spec_free(&spec);
    return rc;
}

/* A restore's sink: a shard and store of this server's plan. */
static ps_shard *ps__adopt(void *arg, const ps_model_spec *table, ps_checkpoint_clocks *clocks,
                           ps_checkpoint_rows *rows, char *why, size_t why_len)
{
    ps__state *st = arg;

    (void)table;
    if (ps__state_init(st) < 0) {
        snprintf(why, why_len, "cannot hold it");
        ps__state_free(st);
        return NULL;
    }
    rows->n = st->spec->n_row_tables;
    rows->store[0] = st->store;
    rows->dim[0] = PS__DIM;
    clocks->clock = st->clock;
    clocks->newest = st->newest;
    return st->shard;
}

static void ps__withdraw(void *arg)
{
    ps__state_free(arg);
}

static int ps__restore(ps__state *st, const char *dir)
{
    static ps_checkpoint_rows rows;
    ps_checkpoint_sink sink = {ps__adopt, ps__withdraw, st};
    ps_checkpoint_clocks clocks = {NULL, NULL};
    ps_checkpoint_meta meta;
    char path[4096], err[4096];
    double t0 = ps_clock_now();
    ps_row_counters c;
    int rc;

    memset(&meta, 0, sizeof(meta));
    meta.server_index = st->server;
    meta.num_servers = st->servers;
    meta.optimizer = (uint32_t)st->opt.kind;
    meta.chunk_bytes = 1 << 20;
    meta.job = ps_job_fingerprint(NULL, 0);
    meta.state_per_weight = ps_optimizer_state_floats(&st->opt, 1);
    rc = ps_checkpoint_restore(dir, UINT64_MAX, &meta, &sink, &clocks, &rows, path, sizeof(path),
                               err, sizeof(err));
    if (rc < 0) {
        fprintf(stderr, "bench-checkpoint: restore: %s\n", err);
        return rc;
    }
    ps_row_store_counters(st->store, &c);
    printf("{\"mode\":\"restore\",\"servers\":%" PRIu32 ",\"server\":%" PRIu32 ",\"rows\":%" PRIu64
           ",\"s\":%.2f,\"peak_rss_mib\":%.1f,\"rss_mib\":%.1f}\n",
           st->servers, st->server, c.stored, ps_clock_now() - t0, ps__status_kb("VmHWM:") / 1024,
           ps__status_kb("VmRSS:") / 1024);
    return 0;
}

int main(int argc, char **argv)
{
    const char *mode = "pause", *dir = "/tmp/bench-checkpoint";
    int rows = 1000000, floats = 1 << 26, servers = 1, server = 0, rc;
    const ps_flag flags[] = {
        {"mode", PS_FLAG_STRING, &mode, "MODE", "pause, state or restore", 0, 0, NULL, NULL, NULL},
        {"dir", PS_FLAG_STRING, &dir, "DIR", "where the checkpoints go", 0, 0, NULL, NULL, NULL},
        {"rows", PS_FLAG_INT, &rows, "N", "embedding rows of the job (dim 64, Adagrad)", 1,
         100000000, NULL, NULL, NULL},
        {"floats", PS_FLAG_INT, &floats, "N", "dense floats of the job (Adam)", 1024, 1 << 30, NULL,
         NULL, NULL},
        {"servers", PS_FLAG_INT, &servers, "S", "servers of the plan (state, restore)", 1, 64, NULL,
         NULL, NULL},
        {"server", PS_FLAG_INT, &server, "K", "this server's index (state, restore)", 0, 63, NULL,
         NULL, NULL},
    };
    ps_model_spec spec;
    ps__state st = {.spec = &spec};

    rc = ps_flags_parse(flags, (int)(sizeof(flags) / sizeof(flags[0])), argc, argv,
                        "bench-checkpoint", "Checkpoints of embedding rows: pause and memory.");
    if (rc != 0)
        return rc > 0 ? 0 : 2;
    if (server >= servers) {
        fprintf(stderr, "bench-checkpoint: --server %d of --servers %d\n", server, servers);
        return 2;
    }
    if (strcmp(mode, "pause") == 0) {
        double dense, sparse;
        /* The dense file: floats weights with Adam's two moments; the rows
         * file about as large. */
        rc = ps__pause(dir, "dense", floats, 0, &dense);
        if (rc == 0)
            rc = ps__pause(dir, "rows", 1024, (long)((double)floats * 12 / 528), &sparse);
        if (rc == 0)
            printf("{\"mode\":\"pause\",\"rows_over_dense_per_byte\":%.2f}\n", sparse / dense);
    } else if (strcmp(mode, "state") == 0 || strcmp(mode, "restore") == 0) {
        st.servers = (uint32_t)servers;
        st.server = (uint32_t)server;
        ps_optimizer_defaults(&st.opt, PS_OPT_ADAM);
        rc = ps__spec(&spec, floats, 1);
        if (rc == 0 && strcmp(mode, "state") == 0) {
            double ms;
            long bytes = 0;
            if ((rc = ps__state_init(&st)) == 0 && (rc = ps__fill_rows(&st, rows)) == 0) {
                /* A trained server's optimizer state is resident (an
                 * untouched calloc'd one is not). */
                for (int i = 0; i < ps_shard_chunk_count(st.shard); i++)
                    for (size_t j = 0; j < ps_shard_state_floats(st.shard, i); j++)
                        ps_shard_state_mut(st.shard, i)[j] = 1e-3f;
                printf("{\"mode\":\"state\",\"servers\":%d,\"server\":%d,\"rss_mib\":%.1f}\n",
                       servers, server, ps__status_kb("VmRSS:") / 1024);
                rc = ps__write(&st, dir, &spec, &ms, &bytes);
            }
        } else if (rc == 0) {
            rc = ps__restore(&st, dir);
        }
        ps__state_free(&st);
        ps_model_spec_free(&spec);
    } else {
        fprintf(stderr, "bench-checkpoint: --mode %s: pause, state or restore\n", mode);
        return 2;
    }
    if (rc < 0)
        fprintf(stderr, "bench-checkpoint: %s\n", strerror(-rc));
    return rc < 0;
}
