/* ps-hostile-client: a misbehaving peer for a real shardps-server, used by
 * tests/integration/hostile.sh while a real worker trains against the same
 * server. Each named scenario opens its own TCP connection and does one thing
 * a worker never would (random bytes, impossible lengths, a wrong version,
 * model or rank, requests before or outside the rules of the handshake, a
 * reader that never reads, a peer that never speaks), then checks what the
 * server did: close the connection, with a REJECT or ERROR naming the reason
 * where the protocol has room for one, or, for the slow reader, stop reading
 * before its resident memory (read from /proc/PID/status) grows past a bound.
 * It prints one line per scenario, "PASS|FAIL name local-address detail", so
 * the test can pair each connection with the server's "closing ..." log line,
 * and exits 1 if any scenario failed. Blocking sockets with receive and send
 * timeouts stand in for sleeps: a server that hangs fails a scenario instead
 * of hanging the tool. */
#include <arpa/inet.h>
#include <errno.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "frame.h"
#include "model_spec.h"
#include "partition.h"
#include "ps_error.h"
#include "tensor_table.h"
#include "transport.h"

#include "hostile_client.h"

/* Appends to the scenario's detail, so each step can add what it saw. */
void note(hc_conn *c, const char *fmt, ...)
{
    size_t used = strlen(c->detail);
    va_list ap;

    if (used + 1 >= sizeof(c->detail))
        return;
    va_start(ap, fmt);
    vsnprintf(c->detail + used, sizeof(c->detail) - used, fmt, ap);
    va_end(ap);
}

uint64_t next_rand(hc_ctx *ctx)
{
    ctx->rng = ctx->rng * 6364136223846793005ULL + 1442695040888963407ULL;
    return ctx->rng >> 33;
}

int set_timeouts(int fd, int recv_ms, int send_ms)
{
    struct timeval rt = {recv_ms / 1000, (recv_ms % 1000) * 1000};
    struct timeval st = {send_ms / 1000, (send_ms % 1000) * 1000};

    if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &rt, sizeof(rt)) < 0 ||
        setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &st, sizeof(st)) < 0)
        return -errno;
    return 0;
}

int conn_open(hc_ctx *ctx, hc_conn *c)
{
    struct sockaddr_storage local;
    socklen_t len = sizeof(local);
    socklen_t alen =
        ctx->addr.ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
    int rc;

    memset(c, 0, sizeof(*c));
    snprintf(c->local, sizeof(c->local), "?");
    c->fd = socket(ctx->addr.ss_family, SOCK_STREAM, 0);
    if (c->fd < 0)
        return -errno;
    rc = set_timeouts(c->fd, ctx->timeout_ms, ctx->timeout_ms);
    if (rc < 0)
        goto fail;
    if (connect(c->fd, (struct sockaddr *)&ctx->addr, alen) < 0) {
        rc = -errno;
        goto fail;
    }
    if (getsockname(c->fd, (struct sockaddr *)&local, &len) == 0)
        ps_format_addr((struct sockaddr *)&local, c->local, sizeof(c->local));
    rc = ps_frame_decoder_init(&c->dec, PS_DEFAULT_MAX_PAYLOAD);
    if (rc < 0)
        goto fail;
    return 0;
fail:
    close(c->fd);
    c->fd = -1;
    return rc;
}

void conn_close(hc_conn *c)
{
    if (c->fd >= 0)
        close(c->fd);
    c->fd = -1;
    ps_frame_decoder_free(c->dec);
    c->dec = NULL;
}

/* Sends everything. Returns 0, -EPIPE/-ECONNRESET when the server has hung
 * up (what garbage provokes), -EAGAIN when a send made no progress for the
 * send timeout, or another -errno. */
int send_all(int fd, const void *data, size_t len)
{
    const uint8_t *p = data;

    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0)
            return errno == EWOULDBLOCK ? -EAGAIN : -errno;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Encodes a correct frame (version, length and CRC filled in) and sends it
 * with its payload. */
int send_frame(hc_conn *c, Shardps__Header *h, const void *payload, size_t len)
{
    ps_iov iov = {payload, len};
    uint8_t *head;
    size_t head_len;
    int rc = ps_frame_encode(h, &iov, payload ? 1 : 0, &head, &head_len);

    if (rc < 0)
        return rc;
    rc = send_all(c->fd, head, head_len);
    free(head);
    if (rc == 0 && len > 0)
        rc = send_all(c->fd, payload, len);
    return rc;
}

/* Reads the next frame. Returns 1 and the frame (owned by the decoder until
 * the next call), 0 when the server closed the connection, -ETIMEDOUT, or
 * -PS_EPROTO when the server's own bytes do not decode. */
int read_frame(hc_conn *c, ps_frame *f)
{
    for (;;) {
        uint8_t *buf;
        size_t room;
        ssize_t n;
        int rc = ps_frame_decoder_next(c->dec, f);

        if (rc != 0)
            return rc < 0 ? -PS_EPROTO : 1;
        ps_frame_decoder_buf(c->dec, &buf, &room);
        n = recv(c->fd, buf, room, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n == 0 || (n < 0 && (errno == ECONNRESET || errno == EPIPE)))
            return 0;
        if (n < 0)
            return errno == EAGAIN || errno == EWOULDBLOCK ? -ETIMEDOUT : -errno;
        ps_frame_decoder_commit(c->dec, (size_t)n);
    }
}

/* The server must end the connection within the timeout. Frames it sends
 * first are allowed; a REJECT or ERROR must be of want_type with a reason
 * containing want (when want_type is not 0). Returns 0 or -1 (detail says
 * why). */
int expect_refusal(hc_ctx *ctx, hc_conn *c, Shardps__MsgType want_type, int want_status,
                   const char *want)
{
    double t0 = ps_clock_now();
    int told = 0;
    ps_frame f;
    int rc;

    while ((rc = read_frame(c, &f)) == 1) {
        Shardps__MsgType t = f.hdr->type;
        if (t != SHARDPS__MSG_TYPE__REJECT && t != SHARDPS__MSG_TYPE__ERROR)
            continue;
        note(c, "%s %s \"%s\"; ", t == SHARDPS__MSG_TYPE__REJECT ? "REJECT" : "ERROR",
             ps_err_name(f.hdr->status), f.hdr->reason ? f.hdr->reason : "");
        if (want_type != 0 && t == want_type && f.hdr->status == want_status && f.hdr->reason &&
            strstr(f.hdr->reason, want) != NULL)
            told = 1;
    }
    if (rc == -ETIMEDOUT) {
        note(c, "the server kept the connection open for %.1f s", ctx->timeout_ms / 1000.0);
        return -1;
    }
    if (rc < 0) {
        note(c, "the server's reply does not decode: %s", ps_frame_decoder_error(c->dec));
        return -1;
    }
    note(c, "closed by the server after %.0f ms", (ps_clock_now() - t0) * 1000);
    if (want_type != 0 && !told) {
        note(c, "; expected a %s %s naming \"%s\"",
             want_type == SHARDPS__MSG_TYPE__REJECT ? "REJECT" : "ERROR", ps_err_name(want_status),
             want);
        return -1;
    }
    return 0;
}

/* The tensor table the HELLOs declare, packed, and its digest; one at a
 * time, this tool is single-threaded. */
static uint8_t *hc_packed;
static size_t hc_packed_len;
static uint8_t hc_digest[PS_TABLE_DIGEST_BYTES];

void make_hello_table(const hc_ctx *ctx, Shardps__Header *h, Shardps__Hello *hello,
                      const ps_model_spec *table)
{
    shardps__header__init(h);
    shardps__hello__init(hello);
    hello->role = SHARDPS__ROLE__ROLE_WORKER;
    hello->rank = (uint32_t)ctx->rank;
    hello->world = (uint32_t)ctx->workers;
    free(hc_packed);
    hc_packed = NULL;
    if (ps_tensor_table_pack(table, &hc_packed, &hc_packed_len) < 0) {
        fprintf(stderr, "ps-hostile-client: cannot pack a tensor table\n");
        exit(2);
    }
    ps_model_spec_digest(table, hc_digest);
    hello->table_digest.len = sizeof(hc_digest);
    hello->table_digest.data = hc_digest;
    hello->num_servers = (uint32_t)ctx->num_servers;
    hello->chunk_bytes = ctx->chunk_bytes;
    hello->server_index = (uint32_t)ctx->server_index;
    h->type = SHARDPS__MSG_TYPE__HELLO;
    h->request_id = 1;
    h->hello = hello;
}

void make_hello(const hc_ctx *ctx, Shardps__Header *h, Shardps__Hello *hello)
{
    make_hello_table(ctx, h, hello, &ctx->spec);
}

const uint8_t *hello_table(size_t *len)
{
    *len = hc_packed_len;
    return hc_packed;
}

int send_hello(hc_conn *c, Shardps__Header *h)
{
    Shardps__Header t = SHARDPS__HEADER__INIT;
    int rc = send_frame(c, h, NULL, 0);

    if (rc < 0 || h->hello == NULL || h->hello->table_digest.len == 0)
        return rc;
    t.type = SHARDPS__MSG_TYPE__TABLE;
    t.request_id = h->request_id;
    return send_frame(c, &t, hc_packed, hc_packed_len);
}

/* Sends a valid HELLO and waits for the WELCOME. Returns 0 and the clock the
 * server starts this rank at, or -1 (detail says why). */
int handshake(hc_ctx *ctx, hc_conn *c, uint64_t *clock)
{
    Shardps__Header h;
    Shardps__Hello hello;
    ps_frame f;
    int rc;

    make_hello(ctx, &h, &hello);
    rc = send_hello(c, &h);
    if (rc == 0)
        rc = read_frame(c, &f);
    if (rc != 1) {
        note(c, "handshake failed: %s", rc == 0 ? "the server closed" : ps_strerror(rc));
        return -1;
    }
    if (f.hdr->type != SHARDPS__MSG_TYPE__WELCOME || f.hdr->welcome == NULL) {
        note(c, "handshake answered with type %d (%s) instead of WELCOME", f.hdr->type,
             f.hdr->reason ? f.hdr->reason : "");
        return -1;
    }
    *clock = f.hdr->welcome->clock;
    note(c, "WELCOME at clock %" PRIu64 "; ", *clock);
    return 0;
}

static const hc_scenario hc_scenarios[] = {
    {"random-bytes", "random bytes, random length prefix", sc_random_bytes, 1},
    {"random-header", "a plausible length, then a random header", sc_random_header, 1},
    {"truncated", "half a HELLO, then close", sc_truncated, 1},
    {"big-header", "a length prefix over the header limit", sc_big_header, 1},
    {"big-payload", "a HELLO announcing a payload over any limit", sc_big_payload, 1},
    {"bad-version", "a HELLO of another protocol version", sc_bad_version, 1},
    {"wrong-model", "a HELLO for another model", sc_wrong_model, 1},
    {"bad-rank", "a HELLO for a rank outside the job", sc_bad_rank, 1},
    {"nul-name", "a HELLO declaring a tensor named \"fc1\\0weight\"", sc_nul_name, 1},
    {"pull-first", "a PULL before any HELLO", sc_pull_first, 1},
    {"hello-garbage", "a good HELLO, then random bytes", sc_hello_garbage, 1},
    {"bad-key", "a PULL of a key no server holds", sc_bad_key, 1},
    {"dup-key", "a PULL naming a key twice", sc_dup_key, 1},
    {"short-push", "a PUSH one float short", sc_short_push, 1},
    {"short-f16-push", "a float16 PUSH one half short", sc_short_f16_push, 1},
    {"f16-as-f32", "a float16 PUSH carrying a float32-sized payload", sc_f16_as_f32, 1},
    {"short-bf16-push", "a bfloat16 PUSH one value short", sc_short_bf16_push, 1},
    {"bf16-as-f32", "a bfloat16 PUSH carrying a float32-sized payload", sc_bf16_as_f32, 1},
    {"bad-dtype", "a PUSH of an unknown dtype", sc_bad_dtype, 1},
    {"pull-far", "a PULL at clock 2^64-1", sc_pull_far, 1},
    {"push-announced", "a PUSH header announcing 32 MiB for one chunk", sc_push_announced, 1},
    {"heartbeat-payload", "a HEARTBEAT carrying 1 KiB", sc_heartbeat_payload, 1},
    {"slow-reader", "a flood of PULLs, never reading a reply", sc_slow_reader, 1},
    {"table-over-limit", "a declaring HELLO, then a TABLE announcing 2 MiB + 1",
     sc_table_over_limit, 1},
    {"table-digest-lie", "a HELLO with the job's digest, then a TABLE of another table",
     sc_table_digest_lie, 1},
    {"no-table", "a declaring HELLO, then a PULL where its TABLE should be", sc_no_table, 1},
    {"write-not-rank-0", "a WRITE of initial values from rank 1", sc_write_not_rank_0, 1},
    {"bye", "a good HELLO, then BYE: the rank leaves as finished", sc_bye, 0},
    {"stranger-table", "a HELLO declaring the table x[1], then gone", sc_stranger_table, 0},
    {"huge-table",
     "a HELLO declaring --table-floats; another peer's round trips and the "
     "server's RSS meanwhile",
     sc_huge_table, 0},
    {"idle-slots", "--idle connections that never speak, held until the tool is stopped",
     sc_idle_slots, 0},
    {"silent", "connect and say nothing until the server closes", sc_silent, 0},
    {"evaluator-push", "admitted as an evaluator, then a PUSH", sc_evaluator_push, 0},
    {"rows-too-many", "a rows pull of 100 million IDs (header only)", sc_rows_too_many, 0},
    {"rows-short", "a rows push 4 bytes short of its count", sc_rows_short, 0},
    {"rows-dup", "a rows pull naming an ID twice", sc_rows_dup, 0},
    {"rows-nan", "a rows push holding NaN, then the rows read back", sc_rows_nan, 0},
    {"rows-dim", "a second declarer of the row table with twice its dim", sc_rows_dim, 0},
};
#define HC_N_SCENARIOS ((int)(sizeof(hc_scenarios) / sizeof(hc_scenarios[0])))

static int run_scenario(hc_ctx *ctx, const hc_scenario *sc)
{
    hc_conn c;
    int rc = conn_open(ctx, &c);

    if (rc < 0) {
        printf("FAIL %s - cannot connect: %s\n", sc->name, strerror(-rc));
        fflush(stdout);
        return -1;
    }
    rc = sc->run(ctx, &c);
    printf("%s %s %s %s\n", rc == 0 ? "PASS" : "FAIL", sc->name, c.local, c.detail);
    fflush(stdout);
    conn_close(&c);
    return rc;
}

static void usage(FILE *out)
{
    fprintf(out,
            "usage: ps-hostile-client --server HOST:PORT [options] SCENARIO...\n"
            "Misbehaves against a shardps-server; prints PASS|FAIL NAME LOCAL-ADDR DETAIL per\n"
            "scenario and exits 1 if any failed. The model options must match the server's.\n"
            "  --hidden N,N (256,128)  --input N (784)  --classes N (10)  --seed N (1)\n"
            "  --num-servers S (1)  --server-index I (0)  --chunk-bytes B (%u)\n"
            "  --workers W (1)  --rank R (0): the rank used by scenarios that handshake\n"
            "  --timeout S (10): longest wait for the server to answer or hang up\n"
            "  --stall-ms MS (1000): a send stuck this long means the server stopped reading\n"
            "  --server-pid PID: lets slow-reader measure the server's RSS\n"
            "  --max-growth MIB (400): RSS growth slow-reader tolerates\n"
            "  --growth-report-only: print the growth without failing on it\n"
            "  --silent-wait S (60): how long silent waits for the server to close it\n"
            "  --table-floats N (2^30-16), --probes N (10), --max-rtt-ms MS (50),\n"
            "  --max-rss-mib MIB (64): huge-table's declaration and bounds\n"
            "  --idle N (40): idle-slots' connections\n"
            "  --row-dim D: declare the row table \"emb\" of dim D too (the rows-* scenarios)\n"
            "scenarios (\"all\": every one but the last eleven):\n",
            PS_DEFAULT_CHUNK_BYTES);
    for (int i = 0; i < HC_N_SCENARIOS; i++)
        fprintf(out, "  %-14s %s\n", hc_scenarios[i].name, hc_scenarios[i].what);
}

/* The keys the target server holds, from the same partition every process
 * computes. Returns 0 or a negative code. */
static int load_keys(hc_ctx *ctx)
{
    ps_partition *part;
    int n, rc = ps_partition_init(&part, &ctx->spec, ctx->num_servers, ctx->chunk_bytes);

    if (rc < 0)
        return rc;
    n = ps_partition_chunk_count(part);
    ctx->keys = calloc((size_t)n + 1, sizeof(uint64_t));
    if (ctx->keys == NULL) {
        ps_partition_free(part);
        return -ENOMEM;
    }
    for (int i = 0; i < n; i++) {
        const ps_chunk *c = ps_partition_chunk(part, i);
        if (c->server == ctx->server_index)
            ctx->keys[ctx->n_keys++] = c->key;
    }
    ps_partition_free(part);
    return ctx->n_keys > 0 ? 0 : -EINVAL;
}

/* One command-line option: a string (str) or a number within [min, max]
 * (num); min > max marks a switch that takes no value and sets num to 1. */
typedef struct {
    const char *name;
    const char **str;
    double *num;
    double min, max;
} hc_opt;

/* Parses the leading "--name value" options into their variables. Returns
 * the index of the first scenario name, 0 after --help, or -1 after saying
 * what is wrong on stderr. */
static int parse_options(const hc_opt *opts, int n, int argc, char **argv)
{
    int a;

    for (a = 1; a < argc && strncmp(argv[a], "--", 2) == 0; a++) {
        const hc_opt *o = NULL;
        char *end;
        double v;

        if (strcmp(argv[a], "--help") == 0)
            return 0;
        for (int i = 0; i < n && o == NULL; i++)
            if (strcmp(argv[a] + 2, opts[i].name) == 0)
                o = &opts[i];
        if (o == NULL) {
            fprintf(stderr, "ps-hostile-client: unknown option %s\n", argv[a]);
            return -1;
        }
        if (o->num && o->min > o->max) {
            *o->num = 1;
            continue;
        }
        if (a + 1 == argc) {
            fprintf(stderr, "ps-hostile-client: %s needs a value\n", argv[a]);
            return -1;
        }
        a++;
        if (o->str) {
            *o->str = argv[a];
            continue;
        }
        v = strtod(argv[a], &end);
        if (end == argv[a] || *end != '\0' || v < o->min || v > o->max) {
            fprintf(stderr, "ps-hostile-client: --%s: '%s' is not a number from %g to %g\n",
                    o->name, argv[a], o->min, o->max);
            return -1;
        }
        *o->num = v;
    }
    return a;
}

int main(int argc, char **argv)
{
    const char *server = NULL, *hidden = "256,128";
    char addr_err[256];
    double input = 784, classes = 10, seed = 1, num_servers = 1, server_index = 0, workers = 1;
    double rank = 0, chunk_bytes = PS_DEFAULT_CHUNK_BYTES, timeout = 10, stall_ms = 1000;
    double server_pid = 0, max_growth = 400, report_only = 0, silent_wait = 60;
    double table_floats = (1 << 30) - 16, probes = 10, max_rtt_ms = 50, max_rss_mib = 64;
    double idle = 40, row_dim = 0;
    const hc_opt opts[] = {
        {"server", &server, NULL, 0, 0},
        {"hidden", &hidden, NULL, 0, 0},
        {"input", NULL, &input, 1, 1 << 20},
        {"classes", NULL, &classes, 1, 1 << 20},
        {"seed", NULL, &seed, 0, 2147483647},
        {"num-servers", NULL, &num_servers, 1, 4096},
        {"server-index", NULL, &server_index, 0, 4095},
        {"chunk-bytes", NULL, &chunk_bytes, 4, 1 << 30},
        {"workers", NULL, &workers, 1, 65536},
        {"rank", NULL, &rank, 0, 65536},
        {"timeout", NULL, &timeout, 0.001, 3600},
        {"stall-ms", NULL, &stall_ms, 1, 3600000},
        {"server-pid", NULL, &server_pid, 1, 4194304},
        {"max-growth", NULL, &max_growth, 0, 1 << 20},
        {"growth-report-only", NULL, &report_only, 1, 0},
        {"silent-wait", NULL, &silent_wait, 0.001, 86400},
        {"table-floats", NULL, &table_floats, 1, 2147483647},
        {"probes", NULL, &probes, 1, 1000},
        {"max-rtt-ms", NULL, &max_rtt_ms, 0.001, 1e6},
        {"max-rss-mib", NULL, &max_rss_mib, 1, 1 << 20},
        {"idle", NULL, &idle, 1, 100000},
        {"row-dim", NULL, &row_dim, 1, 64},
    };
    int sizes[PS_MAX_LAYERS + 1], nh, first, failed = 0, ran = 0;
    hc_ctx ctx;

    first = parse_options(opts, (int)(sizeof(opts) / sizeof(opts[0])), argc, argv);
    if (first <= 0) {
        usage(first == 0 ? stdout : stderr);
        return first == 0 ? 0 : 2;
    }
    memset(&ctx, 0, sizeof(ctx));
    ctx.num_servers = (int)num_servers;
    ctx.server_index = (int)server_index;
    ctx.workers = (int)workers;
    ctx.rank = (int)rank;
    ctx.chunk_bytes = (size_t)chunk_bytes;
    ctx.timeout_ms = (int)(timeout * 1000);
    ctx.stall_ms = (int)stall_ms;
    ctx.server_pid = (long)server_pid;
    ctx.max_growth = max_growth;
    ctx.growth_enforced = !report_only;
    ctx.silent_s = silent_wait;
    ctx.table_floats = (int)table_floats;
    ctx.probes = (int)probes;
    ctx.max_rtt_ms = max_rtt_ms;
    ctx.max_rss_mib = max_rss_mib;
    ctx.idle = (int)idle;
    if (server == NULL || first >= argc) {
        usage(stderr);
        return 2;
    }
    nh = ps_model_spec_parse_sizes(hidden, sizes + 1, PS_MAX_LAYERS - 1);
    sizes[0] = (int)input;
    if (nh >= 0)
        sizes[nh + 1] = (int)classes;
    if (nh < 0 || ps_model_spec_init_mlp(&ctx.spec, sizes, nh + 2, (uint64_t)seed) < 0 ||
        ps_parse_hostport(server, &ctx.addr, 0, addr_err, sizeof(addr_err)) < 0 ||
        load_keys(&ctx) < 0 || (row_dim > 0 && hc_rows_declare(&ctx, (uint32_t)row_dim) < 0)) {
        fprintf(stderr, "ps-hostile-client: bad --server, model or partition options\n");
        free(ctx.keys);
        ps_model_spec_free(&ctx.spec);
        return 2;
    }
    /* A server that resets while we write must fail a send, not kill us. */
    signal(SIGPIPE, SIG_IGN);
    ctx.rng = (uint64_t)seed * 0x9e3779b97f4a7c15ULL + 1;
    for (int a = first; a < argc; a++) {
        int all = strcmp(argv[a], "all") == 0, found = 0;
        for (int i = 0; i < HC_N_SCENARIOS; i++) {
            const hc_scenario *sc = &hc_scenarios[i];
            if (all ? !sc->in_all : strcmp(argv[a], sc->name) != 0)
                continue;
            found = 1;
            ran++;
            failed += run_scenario(&ctx, sc) < 0;
        }
        if (!found) {
            fprintf(stderr, "ps-hostile-client: unknown scenario '%s'\n", argv[a]);
            failed++;
        }
    }
    free(ctx.keys);
    ps_model_spec_free(&ctx.spec);
    free(hc_packed);
    fprintf(stderr, "ps-hostile-client: %d scenario%s, %d failed\n", ran, ran == 1 ? "" : "s",
            failed);
    return failed ? 1 : 0;
}
