/* bench-pushpull: how close shardps's push+pull comes to the wire.
 *
 * For each tensor size and server count it starts real shardps-server
 * processes on loopback (async mode, plain SGD, so nothing waits on a barrier)
 * and a ps_kv_client in this process that repeats one step: push the gradient
 * of clock t, pull the weights of clock t+1, wait for both. In the same run it
 * starts the same number of raw TCP echo servers (this binary re-executed with
 * --raw-server) and moves the same bytes per server in the same pattern with
 * plain blocking sockets and the same option (TCP_NODELAY): a request of N
 * bytes, then a reply of N bytes. Blocks of raw and shardps steps alternate so
 * that a burst of load from elsewhere hits both. It prints a table and one
 * JSON line per result: payload GB/s (bytes pushed plus bytes pulled, per
 * second), the ratio shardps/raw, round-trip p50/p99, and per step the CPU
 * time and minor page faults of the client and of the servers, which are what
 * the analysis in docs/performance.md works from. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include "bench_raw.h"
#include "bench_util.h"
#include "clock.h"
#include "flags.h"
#include "kv_client.h"
#include "partition.h"
#include "ps_error.h"
#include "ps_log.h"

#ifndef PS_SERVER_BIN
#define PS_SERVER_BIN "shardps-server"
#endif

#define PS__MAX_SERVERS 8
#define PS__MAX_SIZES   16
/* Latency samples kept per measurement; a step of 4 KiB takes tens of
 * microseconds, so this bounds a measurement at a few seconds of them. */
#define PS__MAX_ITERS 200000

typedef struct {
    double seconds;  /* measured time per method and configuration */
    double warmup_s; /* unmeasured steps first, at least 1 */
    int rounds;      /* alternating raw/shardps blocks the time is split into */
    int min_steps;   /* measured steps per method at the least, over all rounds */
    double chunk_bytes;
    int server_logs;
    const char *server_bin;
    const char *self_bin;
} ps__opts;

/* What one method did over its measured steps. */
typedef struct {
    double *lat_us;
    size_t n;
    double total_s;
    double client_cpu_s, server_cpu_s;
    uint64_t client_minflt, server_minflt;
} ps__result;

/* A method is one step function and its state. */
typedef int (*ps__step_fn)(void *ctx);

typedef struct {
    ps_kv_client *kv;
    uint64_t clock;
    float *params[PS_MAX_TENSORS], *grads[PS_MAX_TENSORS];
    int n_tensors;
} ps__ps_client;

static void ps__self_usage(double *cpu_s, uint64_t *minflt)
{
    struct rusage ru;

    getrusage(RUSAGE_SELF, &ru);
    *cpu_s = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
             (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
    *minflt = (uint64_t)ru.ru_minflt;
}

/* ---- the shardps client ------------------------------------------------- */

static int ps__ps_step(void *ctx)
{
    ps__ps_client *p = ctx;
    int rc;

    rc = ps_kv_client_push(p->kv, (const float *const *)p->grads);
    if (rc == 0)
        rc = ps_kv_client_pull(p->kv, p->clock + 1, p->params);
    if (rc == 0)
        rc = ps_kv_client_wait(p->kv);
    p->clock++;
    return rc;
}

/* ---- measurement -------------------------------------------------------- */

static int ps__usage_of(const ps_bench_child *kids, int n, double *cpu_s, uint64_t *minflt)
{
    *cpu_s = 0;
    *minflt = 0;
    for (int i = 0; i < n; i++) {
        double c;
        uint64_t f;
        int rc = ps_bench_proc_usage(kids[i].pid, &c, &f);
        if (rc < 0)
            return rc;
        *cpu_s += c;
        *minflt += f;
    }
    return 0;
}

/* Runs steps for at least `seconds` and min_steps steps (unless the sample
 * store is full), appending each step's latency and the CPU time and faults
 * of this process and of the servers to res. */
static int ps__measure(ps__step_fn step, void *ctx, const ps_bench_child *kids, int n_kids,
                       double seconds, int min_steps, ps__result *res)
{
    double c_cpu0, c_cpu1, s_cpu0, s_cpu1, t0, start;
    uint64_t c_flt0, c_flt1, s_flt0, s_flt1;
    size_t done = 0;
    int rc;

    ps__self_usage(&c_cpu0, &c_flt0);
    rc = ps__usage_of(kids, n_kids, &s_cpu0, &s_flt0);
    if (rc < 0)
        return rc;
    start = ps_clock_now();
    while (res->n < PS__MAX_ITERS &&
           (done < (size_t)min_steps || ps_clock_now() - start < seconds)) {
        t0 = ps_clock_now();
        rc = step(ctx);
        if (rc < 0)
            return rc;
        res->lat_us[res->n++] = (ps_clock_now() - t0) * 1e6;
        res->total_s += ps_clock_now() - t0;
        done++;
    }
    ps__self_usage(&c_cpu1, &c_flt1);
    rc = ps__usage_of(kids, n_kids, &s_cpu1, &s_flt1);
    if (rc < 0)
        return rc;
    res->client_cpu_s += c_cpu1 - c_cpu0;
    res->client_minflt += c_flt1 - c_flt0;
    res->server_cpu_s += s_cpu1 - s_cpu0;
    res->server_minflt += s_flt1 - s_flt0;
    return 0;
}

static int ps__warmup(ps__step_fn step, void *ctx, double seconds)
{
    double start = ps_clock_now();

    for (int i = 0; i < 1 || ps_clock_now() - start < seconds; i++) {
        int rc = step(ctx);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* ---- one configuration -------------------------------------------------- */

/* The one-tensor model for size bytes: an MLP with no hidden layer whose
 * fc1.weight has size/4 floats ({n, 1}, or {n/1024, 1024} where n exceeds the
 * spec's per-layer limit); its bias adds 1 or 1024 floats. */
static int ps__model_for(size_t size, int *in, int *out)
{
    size_t n = size / sizeof(float);

    if (n == 0 || size % sizeof(float) != 0)
        return -EINVAL;
    if (n <= (1u << 20)) {
        *in = (int)n;
        *out = 1;
    } else if (n % 1024 == 0 && n / 1024 <= (1u << 20)) {
        *in = (int)(n / 1024);
        *out = 1024;
    } else {
        return -EINVAL;
    }
    return 0;
}

typedef struct {
    size_t size, payload, chunk;
    int servers;
    ps__result ps, raw;
} ps__config;

/* The servers hold whatever tensors the bench's client declares. */
static int ps__start_servers(const ps__opts *o, const ps__config *cf, ps_bench_child *kids)
{
    char a_chunk[32];
    const char *extra[] = {
        "--workers",     "1",          "--mode", "async",  "--optimizer",   "sgd",
        "--momentum",    "0",          "--lr",   "0.0001", "--chunk-bytes", a_chunk,
        "--max-payload", "2147483648", NULL};
    int rc;

    snprintf(a_chunk, sizeof(a_chunk), "%zu", cf->chunk);
    rc = ps_bench_start_servers(o->server_bin, cf->servers, extra, o->server_logs, kids);
    if (rc < 0)
        fprintf(stderr, "bench-pushpull: %s did not report a port (rerun with --server-logs)\n",
                o->server_bin);
    return rc;
}

/* Fills per-server byte counts from the same partition the servers use. */
static int ps__server_bytes(const ps_model_spec *spec, int servers, size_t chunk, size_t *bytes)
{
    ps_partition *part;
    int rc = ps_partition_init(&part, spec, servers, chunk);

    if (rc < 0)
        return rc;
    for (int s = 0; s < servers; s++)
        bytes[s] = ps_partition_server_numel(part, s) * sizeof(float);
    ps_partition_free(part);
    return 0;
}

static int ps__run_config(const ps__opts *o, ps__config *cf)
{
    ps_bench_child srv[PS__MAX_SERVERS] = {{0}}, raw[PS__MAX_SERVERS] = {{0}};
    char addr_buf[PS__MAX_SERVERS][32];
    const char *addrs[PS__MAX_SERVERS];
    ps_kv_client_config kc;
    ps__ps_client pc = {0};
    ps_bench_raw rawc = {.n = 0};
    int in, out, rc, rc2;

    for (int s = 0; s < PS__MAX_SERVERS; s++)
        rawc.fds[s] = -1;
    rc = ps__model_for(cf->size, &in, &out);
    if (rc < 0)
        return rc;
    memset(&kc, 0, sizeof(kc));
    rc = ps_model_spec_init_mlp(&kc.spec, (int[]){in, out}, 2, 1);
    if (rc < 0)
        return rc;
    cf->payload = kc.spec.total_numel * sizeof(float);
    rc = ps__server_bytes(&kc.spec, cf->servers, cf->chunk, rawc.req);
    memcpy(rawc.reply, rawc.req, sizeof(rawc.reply));
    if (rc < 0) {
        ps_model_spec_free(&kc.spec);
        return rc;
    }

    /* Buffers first, touched, so no step pays for their first-use faults. */
    rc = -ENOMEM;
    pc.n_tensors = kc.spec.n_tensors;
    for (int t = 0; t < pc.n_tensors; t++) {
        size_t n = kc.spec.tensors[t].numel;
        pc.params[t] = calloc(n, sizeof(float));
        pc.grads[t] = malloc(n * sizeof(float));
        if (pc.params[t] == NULL || pc.grads[t] == NULL)
            goto out;
        for (size_t i = 0; i < n; i++)
            pc.grads[t][i] = 1e-3f;
    }
    rawc.send = malloc(cf->payload);
    rawc.recv = calloc(1, cf->payload);
    if (rawc.send == NULL || rawc.recv == NULL)
        goto out;
    memset(rawc.send, 0x5a, cf->payload);

    rc = ps__start_servers(o, cf, srv);
    if (rc < 0)
        goto out;
    rc = ps_bench_raw_start(o->self_bin, cf->servers, raw);
    if (rc < 0) {
        fprintf(stderr, "bench-pushpull: the raw echo server did not report a port\n");
        goto out;
    }
    for (int s = 0; s < cf->servers; s++) {
        snprintf(addr_buf[s], sizeof(addr_buf[s]), "127.0.0.1:%d", srv[s].port);
        addrs[s] = addr_buf[s];
        rc = ps_bench_raw_connect(raw[s].port);
        if (rc < 0)
            goto out;
        rawc.fds[s] = rc;
        rawc.n = s + 1;
    }
    kc.rank = 0;
    kc.world = 1;
    kc.servers = addrs;
    kc.n_servers = cf->servers;
    kc.chunk_bytes = cf->chunk;
    kc.connect_timeout_s = 30;
    kc.max_payload = (size_t)2 << 30;
    rc = ps_kv_client_init(&pc.kv, &kc);
    if (rc < 0)
        goto out;
    rc = ps_kv_client_connect(pc.kv, &pc.clock);
    if (rc < 0)
        goto out;

    if ((rc = ps__warmup(ps_bench_raw_step, &rawc, o->warmup_s)) < 0 ||
        (rc = ps__warmup(ps__ps_step, &pc, o->warmup_s)) < 0)
        goto out;
    for (int r = 0; r < o->rounds; r++) {
        double each = o->seconds / o->rounds;
        int min = (o->min_steps + o->rounds - 1) / o->rounds;
        if ((rc = ps__measure(ps_bench_raw_step, &rawc, raw, cf->servers, each, min, &cf->raw)) <
                0 ||
            (rc = ps__measure(ps__ps_step, &pc, srv, cf->servers, each, min, &cf->ps)) < 0)
            goto out;
    }
out:
    if (rc < 0)
        fprintf(stderr, "bench-pushpull: %zu bytes over %d server(s) failed: %s\n", cf->size,
                cf->servers, ps_strerror(rc));
    /* The client's goodbye lets the servers exit 0; closing the raw sockets
     * ends the echo servers the same way. */
    ps_kv_client_close(pc.kv);
    for (int s = 0; s < rawc.n; s++)
        close(rawc.fds[s]);
    for (int s = 0; s < cf->servers; s++) {
        if (rc < 0) {
            if (srv[s].pid > 0)
                kill(srv[s].pid, SIGTERM);
            if (raw[s].pid > 0)
                kill(raw[s].pid, SIGTERM);
        }
        rc2 = ps_bench_reap(&srv[s], 10);
        if (rc == 0 && rc2 < 0) {
            fprintf(stderr, "bench-pushpull: server %d did not exit cleanly\n", s);
            rc = rc2;
        }
        rc2 = ps_bench_reap(&raw[s], 10);
        if (rc == 0 && rc2 < 0)
            rc = rc2;
    }
    for (int t = 0; t < pc.n_tensors; t++) {
        free(pc.params[t]);
        free(pc.grads[t]);
    }
    free(rawc.send);
    free(rawc.recv);
    ps_model_spec_free(&kc.spec);
    return rc;
}

/* ---- output ------------------------------------------------------------- */

typedef struct {
    double gbps, p50, p99, cli_cpu_us, srv_cpu_us, cli_flt, srv_flt;
} ps__summary;

static void ps__summarise(ps__result *r, size_t payload, ps__summary *s)
{
    double n = (double)r->n;

    ps_bench_sort(r->lat_us, r->n);
    /* Both directions move the payload once per step. */
    s->gbps = 2.0 * (double)payload * n / r->total_s / 1e9;
    s->p50 = ps_bench_pct(r->lat_us, r->n, 0.50);
    s->p99 = ps_bench_pct(r->lat_us, r->n, 0.99);
    s->cli_cpu_us = r->client_cpu_s / n * 1e6;
    s->srv_cpu_us = r->server_cpu_s / n * 1e6;
    s->cli_flt = (double)r->client_minflt / n;
    s->srv_flt = (double)r->server_minflt / n;
}

static void ps__print_header(void)
{
    printf("%-9s %2s %8s | %7s %9s %9s | %7s %9s %9s | %6s | %9s %9s %8s %8s\n", "size", "S",
           "chunk", "GB/s", "p50 us", "p99 us", "raw", "raw p50", "raw p99", "ratio", "cli cpu",
           "srv cpu", "cli flt", "srv flt");
    printf("%-9s %2s %8s | %7s %9s %9s | %7s %9s %9s | %6s | %9s %9s %8s %8s\n", "", "", "", "", "",
           "", "GB/s", "us", "us", "", "us/step", "us/step", "/step", "/step");
}

static void ps__report(const ps__config *cf, ps__summary *ps, ps__summary *raw, char *json,
                       size_t json_len)
{
    char sz[32], ch[32];
    double ratio = ps->gbps / raw->gbps;

    printf("%-9s %2d %8s | %7.3f %9.1f %9.1f | %7.3f %9.1f %9.1f | %6.3f | %9.0f %9.0f %8.0f "
           "%8.0f\n",
           ps_bench_size_text(cf->size, sz, sizeof(sz)), cf->servers,
           ps_bench_size_text(cf->chunk, ch, sizeof(ch)), ps->gbps, ps->p50, ps->p99, raw->gbps,
           raw->p50, raw->p99, ratio, ps->cli_cpu_us, ps->srv_cpu_us, ps->cli_flt, ps->srv_flt);
    fflush(stdout);
    snprintf(json, json_len,
             "{\"bench\":\"pushpull\",\"size_bytes\":%zu,\"payload_bytes\":%zu,\"servers\":%d,"
             "\"chunk_bytes\":%zu,\"iters\":%zu,\"raw_iters\":%zu,\"gbps\":%.4f,"
             "\"raw_gbps\":%.4f,\"ratio\":%.4f,\"p50_us\":%.2f,\"p99_us\":%.2f,"
             "\"raw_p50_us\":%.2f,\"raw_p99_us\":%.2f,\"client_cpu_us\":%.1f,"
             "\"server_cpu_us\":%.1f,\"raw_client_cpu_us\":%.1f,\"raw_server_cpu_us\":%.1f,"
             "\"client_minflt\":%.1f,\"server_minflt\":%.1f}",
             cf->size, cf->payload, cf->servers, cf->chunk, cf->ps.n, cf->raw.n, ps->gbps,
             raw->gbps, ratio, ps->p50, ps->p99, raw->p50, raw->p99, ps->cli_cpu_us, ps->srv_cpu_us,
             raw->cli_cpu_us, raw->srv_cpu_us, ps->cli_flt, ps->srv_flt);
}

int main(int argc, char **argv)
{
    const char *sizes_text = "4K,256K,4M,64M,256M", *servers_text = "1,2";
    int raw_server = 0, n_sizes, n_counts, rc = 0;
    size_t sizes[PS__MAX_SIZES], counts[PS__MAX_SIZES];
    char self[4096], json[PS__MAX_SIZES * 2][768];
    int n_json = 0;
    ps__opts o = {.seconds = 1.0,
                  .warmup_s = 0.2,
                  .rounds = 2,
                  .min_steps = 4,
                  .chunk_bytes = 0,
                  .server_bin = PS_SERVER_BIN};
    const ps_flag flags[] = {
        {"sizes", PS_FLAG_STRING, &sizes_text, "LIST", "tensor sizes (suffix K, M, G)", 0, 0, NULL,
         NULL, NULL},
        {"servers", PS_FLAG_STRING, &servers_text, "LIST", "server counts to try", 0, 0, NULL, NULL,
         NULL},
        {"seconds", PS_FLAG_DOUBLE, &o.seconds, "S",
         "measured time per method (shardps, raw) and configuration", 0.01, 600, NULL, NULL, NULL},
        {"warmup", PS_FLAG_DOUBLE, &o.warmup_s, "S", "unmeasured steps first (at least 1)", 0, 60,
         NULL, NULL, NULL},
        {"min-steps", PS_FLAG_INT, &o.min_steps, "N",
         "measured steps per method at the least (large tensors take seconds per step)", 1, 100000,
         NULL, NULL, NULL},
        {"rounds", PS_FLAG_INT, &o.rounds, "N", "alternating raw/shardps blocks per configuration",
         1, 100, NULL, NULL, NULL},
        {"chunk-bytes", PS_FLAG_DOUBLE, &o.chunk_bytes, "BYTES",
         "chunk size (0: min(1 MiB, size / servers), so every server holds part of the tensor)", 0,
         1 << 30, NULL, NULL, NULL},
        {"server-bin", PS_FLAG_STRING, &o.server_bin, "PATH", "the shardps-server to start", 0, 0,
         NULL, NULL, NULL},
        {"server-logs", PS_FLAG_BOOL, &o.server_logs, NULL, "let the servers log to stderr", 0, 0,
         NULL, NULL, NULL},
        {"raw-server", PS_FLAG_BOOL, &raw_server, NULL,
         "internal: be the raw TCP echo server, reporting its port on descriptor 3", 0, 0, NULL,
         NULL, NULL},
    };
    ssize_t self_len;

    signal(SIGPIPE, SIG_IGN);
    rc =
        ps_flags_parse(flags, (int)(sizeof(flags) / sizeof(flags[0])), argc, argv, "bench-pushpull",
                       "Push+pull throughput and latency of shardps against raw loopback TCP.");
    if (rc != 0)
        return rc > 0 ? 0 : 2;
    if (raw_server)
        return ps_bench_raw_serve(3) < 0 ? 1 : 0;
    ps_log_set_role("bench");
    n_sizes = ps_bench_parse_sizes(sizes_text, sizes, PS__MAX_SIZES);
    n_counts = ps_bench_parse_sizes(servers_text, counts, PS__MAX_SIZES);
    if (n_sizes <= 0 || n_counts <= 0) {
        fprintf(stderr, "bench-pushpull: --sizes and --servers take lists like 4K,4M and 1,2\n");
        return 2;
    }
    for (int c = 0; c < n_counts; c++) {
        if (counts[c] < 1 || counts[c] > PS__MAX_SERVERS) {
            fprintf(stderr, "bench-pushpull: server counts must be 1 to %d\n", PS__MAX_SERVERS);
            return 2;
        }
    }
    self_len = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (self_len <= 0) {
        fprintf(stderr, "bench-pushpull: cannot find its own executable\n");
        return 1;
    }
    self[self_len] = '\0';
    o.self_bin = self;
    if (access(o.server_bin, X_OK) != 0) {
        fprintf(stderr, "bench-pushpull: %s is not an executable; build it or pass --server-bin\n",
                o.server_bin);
        return 1;
    }

    printf("bench-pushpull: push(t)+pull(t+1) of one tensor, async, plain SGD; raw = blocking "
           "TCP echo, TCP_NODELAY; GB/s counts both directions; %.2g s per method in %d "
           "rounds\n\n",
           o.seconds, o.rounds);
    ps__print_header();
    for (int i = 0; i < n_sizes && n_json < PS__MAX_SIZES * 2; i++) {
        for (int c = 0; c < n_counts && n_json < PS__MAX_SIZES * 2; c++) {
            ps__config cf = {.size = sizes[i], .servers = (int)counts[c]};
            ps__summary a, b;
            size_t per = sizes[i] / counts[c];

            cf.chunk = o.chunk_bytes > 0              ? (size_t)o.chunk_bytes
                       : per > PS_DEFAULT_CHUNK_BYTES ? PS_DEFAULT_CHUNK_BYTES
                                                      : (per < 4 ? 4 : per);
            cf.ps.lat_us = malloc(PS__MAX_ITERS * sizeof(double));
            cf.raw.lat_us = malloc(PS__MAX_ITERS * sizeof(double));
            if (cf.ps.lat_us == NULL || cf.raw.lat_us == NULL)
                rc = -ENOMEM;
            else
                rc = ps__run_config(&o, &cf);
            if (rc == 0) {
                ps__summarise(&cf.ps, cf.payload, &a);
                ps__summarise(&cf.raw, cf.payload, &b);
                ps__report(&cf, &a, &b, json[n_json], sizeof(json[n_json]));
                n_json++;
            }
            free(cf.ps.lat_us);
            free(cf.raw.lat_us);
            if (rc < 0)
                goto done;
        }
    }
done:
    printf("\n");
    for (int j = 0; j < n_json; j++)
        printf("%s\n", json[j]);
    return rc < 0 ? 1 : 0;
}
