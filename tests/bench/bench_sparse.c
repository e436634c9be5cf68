/* bench-sparse: embedding rows on the wire against raw loopback TCP.
 *
 * For each server count it starts real shardps-server processes (async,
 * Adagrad) and, through libshardps in this process, declares one row table
 * of dim 64 (and a two-float dense model: pushes take their clock from the
 * dense pulls), stores N rows (pushes of 65,536 unique IDs at increasing
 * clocks: a rank pushes a table once per clock) and measures the servers'
 * resident memory per stored row against its bytes (values + optimizer
 * state). Then it times, on requests of unique IDs drawn Zipf(1.05) over the
 * N stored rows (fixed seed, random order), shardps_pull_rows and
 * shardps_push_rows (push + apply; the tiny dense pull and push that advance
 * the clock between them are not timed), and in the same run, alternating
 * with them, raw TCP echo servers moving the same bytes per server (a pull:
 * 8 bytes an ID out, dim x 4 an ID back; a push: 8 + dim x 4 an ID out, an
 * 8-byte ack back). One JSON line per case; with --memory-optimizer, one
 * more fill on the first server count measures another optimizer's memory.
 * docs/performance.md holds the numbers. */
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_raw.h"
#include "bench_util.h"
#include "clock.h"
#include "flags.h"
#include "ps_error.h"
#include "ps_log.h"
#include "row_place.h"
#include "shardps.h"
#include "zipf.h"

#ifndef PS_SERVER_BIN
#define PS_SERVER_BIN "shardps-server"
#endif

#define PS__MAX_SIZES 8
#define PS__FILL_IDS  65536
/* Distinct requests drawn per size, used in turn. */
#define PS__REQUESTS 8
#define PS__SEED     20240
#define PS__SALT     0x5eedULL

typedef struct {
    uint64_t rows;
    int dim;
    double seconds, zipf_s;
    int rounds, server_logs;
    const char *optimizer, *memory_optimizer, *server_bin, *self_bin;
} ps__opts;

typedef struct {
    shardps *h;
    uint64_t clock;
    float dense_w[2], dense_g[2];
} ps__client;

/* One size's requests: PS__REQUESTS x size unique IDs, each request in random order. */
typedef struct {
    size_t size;
    uint64_t *ids;
} ps__requests;

/* Resident bytes of process pid (VmRSS). */
static int ps__rss(pid_t pid, double *bytes)
{
    char path[64], line[256];
    FILE *f;
    int rc = -PS_EFORMAT;

    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    f = fopen(path, "r");
    if (f == NULL)
        return -errno;
    while (fgets(line, sizeof(line), f) != NULL) {
        unsigned long long kb;
        if (sscanf(line, "VmRSS: %llu kB", &kb) == 1) {
            *bytes = (double)kb * 1024.0;
            rc = 0;
            break;
        }
    }
    fclose(f);
    return rc;
}

static int ps__rss_sum(const ps_bench_child *kids, int n, double *bytes)
{
    *bytes = 0;
    for (int i = 0; i < n; i++) {
        double b;
        int rc = ps__rss(kids[i].pid, &b);
        if (rc < 0)
            return rc;
        *bytes += b;
    }
    return 0;
}

/* Optimizer state floats per row of dim. */
static double ps__state_floats(const char *opt, int dim)
{
    if (strcmp(opt, "adam") == 0 || strcmp(opt, "adamw") == 0)
        return 2.0 * dim;
    if (strcmp(opt, "adagrad") == 0 || strcmp(opt, "nesterov") == 0)
        return dim;
    if (strcmp(opt, "rowwise-adagrad") == 0)
        return 1;
    return 0;
}

/* The stored row of rank r. */
static uint64_t ps__id(uint64_t rank)
{
    return ps_zipf_scramble(rank, PS__SALT);
}

/* PS__REQUESTS requests of size unique ranks drawn Zipf over [0, rows),
 * shuffled, as IDs. seen (rows bits, zero) is left zero. */
static int ps__make_requests(const ps__opts *o, size_t size, uint8_t *seen, ps__requests *out)
{
    ps_zipf z;
    uint64_t *ranks;
    int rc;

    out->size = size;
    out->ids = malloc(PS__REQUESTS * size * sizeof(uint64_t));
    if (out->ids == NULL)
        return -ENOMEM;
    rc = ps_zipf_init(&z, o->rows, o->zipf_s, PS__SEED + size);
    if (rc < 0)
        return rc;
    for (int q = 0; q < PS__REQUESTS; q++) {
        ranks = out->ids + (size_t)q * size;
        for (size_t n = 0; n < size;) {
            uint64_t r = ps_zipf_next(&z);
            if (seen[r >> 3] & (1u << (r & 7)))
                continue;
            seen[r >> 3] |= (uint8_t)(1u << (r & 7));
            ranks[n++] = r;
        }
        for (size_t i = 0; i < size; i++)
            seen[ranks[i] >> 3] = 0;
        for (size_t i = size - 1; i > 0; i--) {
            size_t j = (size_t)(ps_zipf_bits(&z) % (i + 1));
            uint64_t t = ranks[i];
            ranks[i] = ranks[j];
            ranks[j] = t;
        }
        for (size_t i = 0; i < size; i++)
            ranks[i] = ps__id(ranks[i]);
    }
    return 0;
}

/* The dense step that moves the clock on: pull clock, then (after the rows
 * push of that clock) push. */
static int ps__dense_pull(ps__client *c)
{
    float *w[2] = {&c->dense_w[0], &c->dense_w[1]};
    int rc = shardps_pull(c->h, c->clock, w, 2);

    return rc < 0 ? rc : shardps_wait(c->h);
}

static int ps__dense_push(ps__client *c)
{
    int rc = shardps_push(c->h, 0, c->dense_g, 1);

    if (rc == 0)
        rc = shardps_push(c->h, 1, c->dense_g + 1, 1);
    if (rc == 0)
        rc = shardps_wait(c->h);
    c->clock++;
    return rc;
}

/* One push of rows at the current clock, between the clock's dense pull and push. */
static int ps__push_step(ps__client *c, const uint64_t *ids, size_t n, const float *g, int dim,
                         double *elapsed)
{
    double t0;
    int rc = ps__dense_pull(c);

    if (rc < 0)
        goto fail;
    t0 = ps_clock_now();
    rc = shardps_push_rows(c->h, 0, ids, n, g, n * (size_t)dim);
    *elapsed += ps_clock_now() - t0;
    if (rc == 0)
        rc = ps__dense_push(c);
fail:
    if (rc < 0)
        fprintf(stderr, "bench-sparse: %s\n", shardps_last_error(c->h));
    return rc;
}

static int ps__fill(const ps__opts *o, ps__client *c, const float *g)
{
    uint64_t *ids = malloc(PS__FILL_IDS * sizeof(uint64_t));
    double unused = 0;
    int rc = 0;

    if (ids == NULL)
        return -ENOMEM;
    for (uint64_t lo = 0; lo < o->rows && rc == 0; lo += PS__FILL_IDS) {
        size_t n = o->rows - lo < PS__FILL_IDS ? (size_t)(o->rows - lo) : PS__FILL_IDS;
        for (size_t i = 0; i < n; i++)
            ids[i] = ps__id(lo + i);
        rc = ps__push_step(c, ids, n, g, o->dim, &unused);
    }
    free(ids);
    return rc;
}

static int ps__connect(const ps__opts *o, const char *opt, const ps_bench_child *srv, int n,
                       ps__client *c)
{
    char addr_buf[PS_BENCH_RAW_MAX][32];
    const char *addrs[PS_BENCH_RAW_MAX];
    const int sizes[] = {1, 1};
    shardps_row_table t = {
        "emb", (uint32_t)o->dim, SHARDPS_ROW_INIT_UNIFORM, -0.05, 0.05, 0, 0, opt, 0, 0, 0};
    int rc;

    for (int s = 0; s < n; s++) {
        snprintf(addr_buf[s], sizeof(addr_buf[s]), "127.0.0.1:%d", srv[s].port);
        addrs[s] = addr_buf[s];
    }
    rc = shardps_new(&c->h, addrs, n, 0, 1);
    if (rc < 0)
        return rc;
    if ((rc = shardps_set_option(c->h, "log-level", "warn")) < 0 ||
        (rc = shardps_declare_mlp(c->h, sizes, 2)) < 0 ||
        (rc = shardps_declare_rows(c->h, &t, sizeof(t))) < 0 || (rc = shardps_connect(c->h)) < 0 ||
        (rc = shardps_start_clock(c->h, &c->clock)) < 0)
        fprintf(stderr, "bench-sparse: %s\n", shardps_last_error(c->h));
    c->dense_g[0] = c->dense_g[1] = 1e-3f;
    return rc;
}

/* ---- one configuration -------------------------------------------------- */

typedef struct {
    double ps_rows, ps_s, raw_rows, raw_s;
} ps__rate;

typedef struct {
    int servers;
    const char *optimizer;
    int timed; /* 0: fill and memory only */
    double rss_per_row, row_bytes;
    ps__rate rate[PS__MAX_SIZES][2]; /* [size][0 pull, 1 push] */
} ps__config;

/* The raw client's bytes per server for request ids[0..n) of op. */
static void ps__raw_bytes(ps_bench_raw *r, const uint64_t *ids, size_t n, int dim, int push)
{
    size_t k[PS_BENCH_RAW_MAX] = {0};

    for (size_t i = 0; i < n; i++)
        k[ps_row_place(0, ids[i], (uint32_t)r->n)]++;
    for (int s = 0; s < r->n; s++) {
        r->req[s] = k[s] * (push ? 8 + (size_t)dim * 4 : 8);
        r->reply[s] = push ? 8 : k[s] * (size_t)dim * 4;
    }
}

static int ps__time_case(const ps__opts *o, ps__client *c, ps_bench_raw *raw, const ps__requests *q,
                         const float *g, float *out, int push, ps__rate *rate)
{
    size_t n = q->size, dim = (size_t)o->dim;
    int rc = 0, k = 0;

    ps__raw_bytes(raw, q->ids, n, o->dim, push);
    /* One unmeasured step of each first. */
    if ((rc = ps_bench_raw_step(raw)) < 0)
        return rc;
    rc = push ? ps__push_step(c, q->ids, n, g, o->dim, &(double){0})
              : shardps_pull_rows(c->h, 0, c->clock, q->ids, n, out, n * dim);
    for (int r = 0; r < o->rounds && rc == 0; r++) {
        double each = o->seconds / o->rounds, start = ps_clock_now();
        do {
            if ((rc = ps_bench_raw_step(raw)) < 0)
                return rc;
            rate->raw_rows += (double)n;
        } while (ps_clock_now() - start < each);
        rate->raw_s += ps_clock_now() - start;
        start = ps_clock_now();
        do {
            const uint64_t *ids = q->ids + (size_t)(k++ % PS__REQUESTS) * n;
            if (push) {
                rc = ps__push_step(c, ids, n, g, o->dim, &rate->ps_s);
            } else {
                double t0 = ps_clock_now();
                rc = shardps_pull_rows(c->h, 0, c->clock, ids, n, out, n * dim);
                rate->ps_s += ps_clock_now() - t0;
            }
            rate->ps_rows += (double)n;
        } while (rc == 0 && ps_clock_now() - start < each);
    }
    return rc;
}

static int ps__run(const ps__opts *o, ps__config *cf, const ps__requests *req, int n_req)
{
    ps_bench_child srv[PS_BENCH_RAW_MAX] = {{0}}, rawk[PS_BENCH_RAW_MAX] = {{0}};
    const char *extra[] = {"--workers", "1",    "--mode", "async", "--optimizer",
                           "adagrad",   "--lr", "0.01",   NULL};
    ps__client c = {0};
    ps_bench_raw raw = {.n = 0};
    size_t max = PS__FILL_IDS;
    float *g = NULL, *out = NULL;
    double rss0, rss1;
    int rc, rc2;

    for (int i = 0; i < n_req; i++)
        max = req[i].size > max ? req[i].size : max;
    rc = -ENOMEM;
    g = malloc(max * (size_t)o->dim * sizeof(float));
    out = calloc(max * (size_t)o->dim, sizeof(float));
    if (g == NULL || out == NULL)
        goto out;
    for (size_t i = 0; i < max * (size_t)o->dim; i++)
        g[i] = 1e-3f;
    rc = ps_bench_start_servers(o->server_bin, cf->servers, extra, o->server_logs, srv);
    if (rc < 0) {
        fprintf(stderr, "bench-sparse: %s did not report a port\n", o->server_bin);
        goto out;
    }
    if ((rc = ps__connect(o, cf->optimizer, srv, cf->servers, &c)) < 0)
        goto out;
    if ((rc = ps__rss_sum(srv, cf->servers, &rss0)) < 0 || (rc = ps__fill(o, &c, g)) < 0 ||
        (rc = ps__rss_sum(srv, cf->servers, &rss1)) < 0)
        goto out;
    cf->rss_per_row = (rss1 - rss0) / (double)o->rows;
    cf->row_bytes = 4.0 * (o->dim + ps__state_floats(cf->optimizer, o->dim));
    if (!cf->timed)
        goto out;

    raw.send = calloc(max, 8 + (size_t)o->dim * 4);
    raw.recv = calloc(max, 8 + (size_t)o->dim * 4);
    if (raw.send == NULL || raw.recv == NULL) {
        rc = -ENOMEM;
        goto out;
    }
    if ((rc = ps_bench_raw_start(o->self_bin, cf->servers, rawk)) < 0)
        goto out;
    for (int s = 0; s < cf->servers; s++) {
        if ((rc = ps_bench_raw_connect(rawk[s].port)) < 0)
            goto out;
        raw.fds[s] = rc;
        raw.n = s + 1;
    }
    rc = 0;
    for (int i = 0; i < n_req && rc == 0; i++)
        for (int push = 0; push < 2 && rc == 0; push++)
            rc = ps__time_case(o, &c, &raw, &req[i], g, out, push, &cf->rate[i][push]);
out:
    if (rc < 0)
        fprintf(stderr, "bench-sparse: %d server(s), %s: %s\n", cf->servers, cf->optimizer,
                ps_strerror(rc));
    /* The client's goodbye lets the servers exit 0; closing the raw sockets
     * ends the echo servers. */
    if (c.h != NULL)
        shardps_close(c.h);
    for (int s = 0; s < raw.n; s++)
        close(raw.fds[s]);
    for (int s = 0; s < cf->servers; s++) {
        if (rc < 0 && srv[s].pid > 0)
            kill(srv[s].pid, SIGTERM);
        if (rc < 0 && rawk[s].pid > 0)
            kill(rawk[s].pid, SIGTERM);
        rc2 = ps_bench_reap(&srv[s], 30);
        if (rc == 0 && rc2 < 0) {
            fprintf(stderr, "bench-sparse: server %d did not exit cleanly\n", s);
            rc = rc2;
        }
        rc2 = ps_bench_reap(&rawk[s], 10);
        if (rc == 0 && rc2 < 0)
            rc = rc2;
    }
    free(raw.send);
    free(raw.recv);
    free(g);
    free(out);
    return rc;
}

static void ps__print(const ps__opts *o, const ps__config *cf, const ps__requests *req, int n_req)
{
    double mem = cf->rss_per_row / cf->row_bytes;

    if (!cf->timed) {
        printf("{\"bench\":\"sparse\",\"op\":\"memory\",\"optimizer\":\"%s\",\"dim\":%d,"
               "\"servers\":%d,\"rows_stored\":%" PRIu64 ",\"row_bytes\":%.0f,"
               "\"rss_bytes_per_row\":%.1f,\"memory_ratio\":%.3f}\n",
               cf->optimizer, o->dim, cf->servers, o->rows, cf->row_bytes, cf->rss_per_row, mem);
        return;
    }
    for (int i = 0; i < n_req; i++) {
        for (int push = 0; push < 2; push++) {
            const ps__rate *r = &cf->rate[i][push];
            double ps = r->ps_rows / r->ps_s, rw = r->raw_rows / r->raw_s;
            printf("{\"bench\":\"sparse\",\"op\":\"%s\",\"ids\":%zu,\"dim\":%d,\"servers\":%d,"
                   "\"optimizer\":\"%s\",\"rows_stored\":%" PRIu64 ",\"rows_per_second\":%.0f,"
                   "\"rows_per_second_per_server\":%.0f,\"raw_rows_per_second\":%.0f,"
                   "\"ratio\":%.3f,\"row_bytes\":%.0f,\"rss_bytes_per_row\":%.1f,"
                   "\"memory_ratio\":%.3f}\n",
                   push ? "push" : "pull", req[i].size, o->dim, cf->servers, cf->optimizer, o->rows,
                   ps, ps / cf->servers, rw, ps / rw, cf->row_bytes, cf->rss_per_row, mem);
        }
    }
    fflush(stdout);
}

int main(int argc, char **argv)
{
    const char *sizes_text = "4K,64K", *servers_text = "1,2";
    double rows_d = 10e6;
    int raw_server = 0, n_sizes, n_counts, rc = 0;
    size_t sizes[PS__MAX_SIZES], counts[PS__MAX_SIZES];
    ps__requests req[PS__MAX_SIZES] = {{0}};
    uint8_t *seen = NULL;
    char self[4096];
    ssize_t self_len;
    ps__opts o = {.dim = 64,
                  .seconds = 2.0,
                  .zipf_s = 1.05,
                  .rounds = 2,
                  .optimizer = "adagrad",
                  .memory_optimizer = "adam",
                  .server_bin = PS_SERVER_BIN};
    const ps_flag flags[] = {
        {"rows", PS_FLAG_DOUBLE, &rows_d, "N", "rows stored before timing", 1, 1e9, NULL, NULL,
         NULL},
        {"servers", PS_FLAG_STRING, &servers_text, "LIST", "server counts to try (1 to 8)", 0, 0,
         NULL, NULL, NULL},
        {"sizes", PS_FLAG_STRING, &sizes_text, "LIST", "unique IDs per request (suffix K)", 0, 0,
         NULL, NULL, NULL},
        {"seconds", PS_FLAG_DOUBLE, &o.seconds, "S",
         "measured time per case and method (shardps, raw)", 0.01, 600, NULL, NULL, NULL},
        {"rounds", PS_FLAG_INT, &o.rounds, "N", "alternating raw/shardps blocks per case", 1, 100,
         NULL, NULL, NULL},
        {"dim", PS_FLAG_INT, &o.dim, "D", "floats per row", 1, 65536, NULL, NULL, NULL},
        {"zipf", PS_FLAG_DOUBLE, &o.zipf_s, "S", "the IDs' Zipf exponent", 0.01, 100, NULL, NULL,
         NULL},
        {"optimizer", PS_FLAG_STRING, &o.optimizer, "NAME",
         "the row table's optimizer in the timed runs", 0, 0, NULL, NULL, NULL},
        {"memory-optimizer", PS_FLAG_STRING, &o.memory_optimizer, "NAME",
         "one more fill (first server count) to measure this optimizer's memory; none: skip", 0, 0,
         NULL, NULL, NULL},
        {"server-bin", PS_FLAG_STRING, &o.server_bin, "PATH", "the shardps-server to start", 0, 0,
         NULL, NULL, NULL},
        {"server-logs", PS_FLAG_BOOL, &o.server_logs, NULL, "let the servers log to stderr", 0, 0,
         NULL, NULL, NULL},
        {"raw-server", PS_FLAG_BOOL, &raw_server, NULL,
         "internal: be the raw TCP server, reporting its port on descriptor 3", 0, 0, NULL, NULL,
         NULL},
    };

    signal(SIGPIPE, SIG_IGN);
    rc = ps_flags_parse(flags, (int)(sizeof(flags) / sizeof(flags[0])), argc, argv, "bench-sparse",
                        "Embedding rows pulled and pushed through real servers against raw "
                        "loopback TCP.");
    if (rc != 0)
        return rc > 0 ? 0 : 2;
    if (raw_server)
        return ps_bench_raw_serve(3) < 0 ? 1 : 0;
    ps_log_set_role("bench");
    o.rows = (uint64_t)rows_d;
    n_sizes = ps_bench_parse_sizes(sizes_text, sizes, PS__MAX_SIZES);
    n_counts = ps_bench_parse_sizes(servers_text, counts, PS__MAX_SIZES);
    if (n_sizes <= 0 || n_counts <= 0) {
        fprintf(stderr, "bench-sparse: --sizes and --servers take lists like 4K,64K and 1,2\n");
        return 2;
    }
    for (int i = 0; i < n_sizes; i++) {
        if (sizes[i] < 1 || sizes[i] > o.rows || sizes[i] > ((size_t)1 << 20)) {
            fprintf(stderr, "bench-sparse: a request holds 1 to min(--rows, 1M) IDs\n");
            return 2;
        }
    }
    for (int c = 0; c < n_counts; c++) {
        if (counts[c] < 1 || counts[c] > PS_BENCH_RAW_MAX) {
            fprintf(stderr, "bench-sparse: server counts must be 1 to %d\n", PS_BENCH_RAW_MAX);
            return 2;
        }
    }
    self_len = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (self_len <= 0 || access(o.server_bin, X_OK) != 0) {
        fprintf(stderr, "bench-sparse: cannot find itself or %s (--server-bin)\n", o.server_bin);
        return 1;
    }
    self[self_len] = '\0';
    o.self_bin = self;

    seen = calloc(o.rows / 8 + 1, 1);
    if (seen == NULL)
        rc = -ENOMEM;
    for (int i = 0; i < n_sizes && rc == 0; i++)
        rc = ps__make_requests(&o, sizes[i], seen, &req[i]);
    free(seen);
    fprintf(stderr,
            "bench-sparse: %" PRIu64 " rows of %d floats stored, then requests of unique IDs "
            "Zipf(%.2f), %.2g s per case and method in %d rounds\n",
            o.rows, o.dim, o.zipf_s, o.seconds, o.rounds);
    for (int c = 0; c < n_counts && rc == 0; c++) {
        ps__config *cf = calloc(1, sizeof(*cf));
        if (cf == NULL) {
            rc = -ENOMEM;
            break;
        }
        *cf = (ps__config){.servers = (int)counts[c], .optimizer = o.optimizer, .timed = 1};
        rc = ps__run(&o, cf, req, n_sizes);
        if (rc == 0)
            ps__print(&o, cf, req, n_sizes);
        free(cf);
    }
    if (rc == 0 && strcmp(o.memory_optimizer, "none") != 0) {
        ps__config cf = {.servers = (int)counts[0], .optimizer = o.memory_optimizer};
        rc = ps__run(&o, &cf, req, n_sizes);
        if (rc == 0)
            ps__print(&o, &cf, req, n_sizes);
    }
    for (int i = 0; i < n_sizes; i++)
        free(req[i].ids);
    return rc < 0 ? 1 : 0;
}
