/* ps-hostile-client's scenarios on frames and requests (see
 * hostile_client.h): random bytes, impossible lengths, wrong versions,
 * models and ranks, requests before or outside the rules of the handshake,
 * a reader that never reads, a peer that never speaks, and a clean goodbye
 * for a borrowed rank. Each checks what the server did with the connection
 * it is given. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "clock.h"
#include "hostile_client.h"
#include "partition.h"
#include "ps_error.h"

/* Bytes of noise per garbage send: more than a maximal header and its
 * prefix, so whatever length the noise announces, the server must judge it. */
#define HC_GARBAGE_BYTES (PS_MAX_HEADER_BYTES + PS_FRAME_PREFIX_BYTES + 4096)
/* PULL frames encoded once and sent again and again by the slow reader. */
#define HC_PULL_BATCH 512
/* The slow reader gives up (and fails) after sending this much without the
 * server ever pushing back: a server that never stops reading. */
#define HC_FLOOD_CAP ((size_t)256 << 20)

static int send_garbage(hc_ctx *ctx, hc_conn *c, uint32_t header_len)
{
    uint8_t *buf = malloc(HC_GARBAGE_BYTES);
    int rc;

    if (buf == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < HC_GARBAGE_BYTES; i++)
        buf[i] = (uint8_t)next_rand(ctx);
    if (header_len) {
        buf[0] = (uint8_t)header_len;
        buf[1] = (uint8_t)(header_len >> 8);
        buf[2] = (uint8_t)(header_len >> 16);
        buf[3] = (uint8_t)(header_len >> 24);
    }
    rc = send_all(c->fd, buf, HC_GARBAGE_BYTES);
    free(buf);
    /* The server may hang up before it has read everything: that is fine. */
    return rc == -EPIPE || rc == -ECONNRESET ? 0 : rc;
}

int sc_random_bytes(hc_ctx *ctx, hc_conn *c)
{
    if (send_garbage(ctx, c, 0) < 0)
        return -1;
    return expect_refusal(ctx, c, 0, 0, NULL);
}

/* A believable length prefix, so the random header itself must be judged. */
int sc_random_header(hc_ctx *ctx, hc_conn *c)
{
    if (send_garbage(ctx, c, 200) < 0)
        return -1;
    return expect_refusal(ctx, c, 0, 0, NULL);
}

/* Half a HELLO, then our side closes: the server must forget the peer without
 * waiting for the rest (nothing to observe here but that it lives on). */
int sc_truncated(hc_ctx *ctx, hc_conn *c)
{
    Shardps__Header h;
    Shardps__Hello hello;
    uint8_t *buf;
    size_t len;
    int rc;

    make_hello(ctx, &h, &hello);
    if (ps_frame_encode(&h, NULL, 0, &buf, &len) < 0)
        return -1;
    rc = send_all(c->fd, buf, len / 2);
    free(buf);
    if (rc < 0) {
        note(c, "send: %s", strerror(-rc));
        return -1;
    }
    note(c, "sent %zu of %zu bytes of a HELLO and closed", len / 2, len);
    return 0;
}

/* A length prefix one past the largest header: refused before any header
 * byte arrives, so nothing follows it. */
int sc_big_header(hc_ctx *ctx, hc_conn *c)
{
    uint32_t n = PS_MAX_HEADER_BYTES + 1;
    uint8_t prefix[4] = {(uint8_t)n, (uint8_t)(n >> 8), (uint8_t)(n >> 16), (uint8_t)(n >> 24)};

    if (send_all(c->fd, prefix, sizeof(prefix)) < 0)
        return -1;
    return expect_refusal(ctx, c, 0, 0, NULL);
}

/* A HELLO whose version and announced payload length are as given, packed
 * by hand since ps_frame_encode would correct them; the decoder must refuse
 * it and the server answer with a REJECT of want_status naming want, then
 * hang up. */
static int lying_hello(hc_ctx *ctx, hc_conn *c, uint32_t version, uint64_t payload_bytes,
                       int want_status, const char *want)
{
    Shardps__Header h;
    Shardps__Hello hello;
    uint8_t *buf;
    size_t len;
    int rc;

    make_hello(ctx, &h, &hello);
    h.version = version;
    h.payload_bytes = payload_bytes;
    /* Unlike ps_frame_encode, this leaves version and payload fields alone. */
    if (ps_frame_pack_header(&h, &buf, &len) < 0)
        return -1;
    rc = send_all(c->fd, buf, len);
    free(buf);
    if (rc < 0)
        return -1;
    return expect_refusal(ctx, c, SHARDPS__MSG_TYPE__REJECT, want_status, want);
}

/* A payload past any --max-payload the server accepts. */
int sc_big_payload(hc_ctx *ctx, hc_conn *c)
{
    return lying_hello(ctx, c, PS_PROTOCOL_VERSION, ((uint64_t)1 << 40) + 1, -PS_ETOOBIG,
                       "exceeds");
}

/* A HELLO that would be accepted but for its protocol version: the REJECT
 * names both versions (issue 18: it was only logged). */
int sc_bad_version(hc_ctx *ctx, hc_conn *c)
{
    return lying_hello(ctx, c, PS_PROTOCOL_VERSION + 1, 0, -PS_EVERSION, "version");
}

int sc_wrong_model(hc_ctx *ctx, hc_conn *c)
{
    Shardps__Header h;
    Shardps__Hello hello;
    ps_model_spec other;
    int rc;

    if (ps_model_spec_copy(&other, &ctx->spec) < 0)
        return -1;
    other.seed ^= 1;
    make_hello_table(ctx, &h, &hello, &other);
    rc = send_hello(c, &h);
    ps_model_spec_free(&other);
    if (rc < 0)
        return -1;
    return expect_refusal(ctx, c, SHARDPS__MSG_TYPE__REJECT, -PS_EMISMATCH, "model mismatch");
}

/* Issue 22, cause 8: "fc1\0weight" in the table of an otherwise valid
 * HELLO's TABLE. protobuf-c hands it over as "fc1"; the server must refuse
 * the frame naming the NUL byte, not adopt or compare a table renamed. */
int sc_nul_name(hc_ctx *ctx, hc_conn *c)
{
    Shardps__Header h, t = SHARDPS__HEADER__INIT;
    Shardps__Hello hello;
    const uint8_t *table;
    uint8_t *buf, *at;
    size_t len;
    int rc;

    make_hello(ctx, &h, &hello);
    table = hello_table(&len);
    buf = malloc(len);
    if (buf == NULL)
        return -1;
    memcpy(buf, table, len);
    at = memmem(buf, len, "fc1.weight", 10);
    if (at)
        at[3] = '\0';
    t.type = SHARDPS__MSG_TYPE__TABLE;
    t.request_id = h.request_id;
    rc = at ? send_frame(c, &h, NULL, 0) : -EINVAL;
    if (rc == 0)
        rc = send_frame(c, &t, buf, len);
    free(buf);
    if (rc < 0)
        return -1;
    return expect_refusal(ctx, c, SHARDPS__MSG_TYPE__REJECT, -PS_EPROTO, "NUL byte");
}

int sc_bad_rank(hc_ctx *ctx, hc_conn *c)
{
    Shardps__Header h;
    Shardps__Hello hello;

    make_hello(ctx, &h, &hello);
    hello.rank = hello.world;
    if (send_hello(c, &h) < 0)
        return -1;
    return expect_refusal(ctx, c, SHARDPS__MSG_TYPE__REJECT, -PS_EMISMATCH, "rank");
}

int sc_pull_first(hc_ctx *ctx, hc_conn *c)
{
    Shardps__Header h = SHARDPS__HEADER__INIT;

    h.type = SHARDPS__MSG_TYPE__PULL;
    h.request_id = 1;
    h.n_keys = ctx->n_keys;
    h.keys = ctx->keys;
    if (send_frame(c, &h, NULL, 0) < 0)
        return -1;
    return expect_refusal(ctx, c, SHARDPS__MSG_TYPE__REJECT, -PS_EPROTO, "expected HELLO");
}

int sc_hello_garbage(hc_ctx *ctx, hc_conn *c)
{
    uint64_t clock;

    if (handshake(ctx, c, &clock) < 0 || send_garbage(ctx, c, 0) < 0)
        return -1;
    return expect_refusal(ctx, c, 0, 0, NULL);
}

/* After a good handshake, one request that breaks a rule the server checks:
 * it must answer ERROR with a reason containing want, then close. */
static int bad_request(hc_ctx *ctx, hc_conn *c, Shardps__Header *req, const void *payload,
                       size_t len, const char *want)
{
    uint64_t clock;

    if (handshake(ctx, c, &clock) < 0)
        return -1;
    req->request_id = 2;
    req->clock = clock;
    if (send_frame(c, req, payload, len) < 0)
        return -1;
    return expect_refusal(ctx, c, SHARDPS__MSG_TYPE__ERROR, -PS_EPROTO, want);
}

int sc_bad_key(hc_ctx *ctx, hc_conn *c)
{
    Shardps__Header h = SHARDPS__HEADER__INIT;
    uint64_t key = ps_key_make(PS_MAX_TENSORS + 7, 0);

    h.type = SHARDPS__MSG_TYPE__PULL;
    h.n_keys = 1;
    h.keys = &key;
    return bad_request(ctx, c, &h, NULL, 0, "not held");
}

int sc_dup_key(hc_ctx *ctx, hc_conn *c)
{
    Shardps__Header h = SHARDPS__HEADER__INIT;
    uint64_t keys[2] = {ctx->keys[0], ctx->keys[0]};

    h.type = SHARDPS__MSG_TYPE__PULL;
    h.n_keys = 2;
    h.keys = keys;
    return bad_request(ctx, c, &h, NULL, 0, "named twice");
}

/* A push of one key in dtype whose payload is the key's element count times
 * value_bytes, less short_by bytes: one value short, or values of the wrong
 * width. The server must refuse it with a reason containing want. */
static int sized_push(hc_ctx *ctx, hc_conn *c, Shardps__DType dtype, size_t value_bytes,
                      size_t short_by, const char *want)
{
    Shardps__Header h = SHARDPS__HEADER__INIT;
    uint64_t key = ctx->keys[0];
    const ps_chunk *chunk;
    ps_partition *part;
    uint8_t *payload;
    size_t n;
    int rc;

    if (ps_partition_init(&part, &ctx->spec, ctx->num_servers, ctx->chunk_bytes) < 0)
        return -1;
    chunk = ps_partition_find(part, key);
    n = chunk ? chunk->numel : 1;
    ps_partition_free(part);
    payload = calloc(n, value_bytes);
    if (payload == NULL)
        return -1;
    h.type = SHARDPS__MSG_TYPE__PUSH;
    h.dtype = dtype;
    h.n_keys = 1;
    h.keys = &key;
    rc = bad_request(ctx, c, &h, payload, n * value_bytes - short_by, want);
    free(payload);
    return rc;
}

int sc_short_push(hc_ctx *ctx, hc_conn *c)
{
    return sized_push(ctx, c, SHARDPS__DTYPE__DTYPE_F32, sizeof(float), sizeof(float), "payload");
}

/* --compress fp16 and bf16 pushes: one value short, and 2-byte values
 * announced but floats sent (the size a confused worker would send). */
int sc_short_f16_push(hc_ctx *ctx, hc_conn *c)
{
    return sized_push(ctx, c, SHARDPS__DTYPE__DTYPE_F16, sizeof(uint16_t), sizeof(uint16_t),
                      "float16 push payload");
}

int sc_f16_as_f32(hc_ctx *ctx, hc_conn *c)
{
    return sized_push(ctx, c, SHARDPS__DTYPE__DTYPE_F16, sizeof(float), 0, "float16 push payload");
}

int sc_short_bf16_push(hc_ctx *ctx, hc_conn *c)
{
    return sized_push(ctx, c, SHARDPS__DTYPE__DTYPE_BF16, sizeof(uint16_t), sizeof(uint16_t),
                      "bfloat16 push payload");
}

int sc_bf16_as_f32(hc_ctx *ctx, hc_conn *c)
{
    return sized_push(ctx, c, SHARDPS__DTYPE__DTYPE_BF16, sizeof(float), 0,
                      "bfloat16 push payload");
}

int sc_bad_dtype(hc_ctx *ctx, hc_conn *c)
{
    Shardps__Header h = SHARDPS__HEADER__INIT;
    uint64_t key = ctx->keys[0];

    h.type = SHARDPS__MSG_TYPE__PUSH;
    h.dtype = SHARDPS__DTYPE__DTYPE_UNKNOWN;
    h.n_keys = 1;
    h.keys = &key;
    return bad_request(ctx, c, &h, NULL, 0, "dtype");
}

/* Issue 18: a PULL at clock 2^64-1 must be refused, not become the rank's
 * clock (and, once it left, every later worker's). */
int sc_pull_far(hc_ctx *ctx, hc_conn *c)
{
    Shardps__Header h = SHARDPS__HEADER__INIT;
    uint64_t clock;

    if (handshake(ctx, c, &clock) < 0)
        return -1;
    h.type = SHARDPS__MSG_TYPE__PULL;
    h.request_id = 2;
    h.clock = UINT64_MAX;
    h.n_keys = ctx->n_keys;
    h.keys = ctx->keys;
    if (send_frame(c, &h, NULL, 0) < 0)
        return -1;
    return expect_refusal(ctx, c, SHARDPS__MSG_TYPE__ERROR, -PS_EPROTO, "clock");
}

/* Issue 18: a PUSH header announcing 32 MiB for one chunk, and no payload:
 * refused on the header, before the server sets anything aside for it. */
int sc_push_announced(hc_ctx *ctx, hc_conn *c)
{
    Shardps__Header h = SHARDPS__HEADER__INIT;
    uint64_t clock;
    uint8_t *buf;
    size_t len;
    int rc;

    if (handshake(ctx, c, &clock) < 0)
        return -1;
    h.type = SHARDPS__MSG_TYPE__PUSH;
    h.request_id = 2;
    h.clock = clock;
    h.dtype = SHARDPS__DTYPE__DTYPE_F32;
    h.n_keys = 1;
    h.keys = ctx->keys;
    h.version = PS_PROTOCOL_VERSION;
    h.payload_bytes = (uint64_t)32 << 20;
    if (ps_frame_pack_header(&h, &buf, &len) < 0)
        return -1;
    rc = send_all(c->fd, buf, len);
    free(buf);
    if (rc < 0)
        return -1;
    return expect_refusal(ctx, c, SHARDPS__MSG_TYPE__ERROR, -PS_EPROTO, "payload");
}

/* Issue 18: a HEARTBEAT carries nothing; 1 KiB of payload is refused. */
int sc_heartbeat_payload(hc_ctx *ctx, hc_conn *c)
{
    Shardps__Header h = SHARDPS__HEADER__INIT;
    uint8_t junk[1024] = {0};

    h.type = SHARDPS__MSG_TYPE__HEARTBEAT;
    return bad_request(ctx, c, &h, junk, sizeof(junk), "payload");
}

/* Resident memory of the server in MiB, or -1 when it cannot be read. */
double server_rss_mib(const hc_ctx *ctx)
{
    char path[64], line[256];
    double kb = -1;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%ld/status", ctx->server_pid);
    f = fopen(path, "r");
    if (f == NULL)
        return -1;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "VmRSS: %lf kB", &kb) == 1)
            break;
    fclose(f);
    return kb < 0 ? -1 : kb / 1024;
}

/* Encodes HC_PULL_BATCH pulls of every key at clock into one buffer. */
static int make_pull_batch(hc_ctx *ctx, uint64_t clock, uint8_t **out, size_t *out_len)
{
    Shardps__Header h = SHARDPS__HEADER__INIT;
    uint8_t *batch = NULL, *one;
    size_t one_len, cap = 0, len = 0;

    h.type = SHARDPS__MSG_TYPE__PULL;
    h.clock = clock;
    h.n_keys = ctx->n_keys;
    h.keys = ctx->keys;
    for (int i = 0; i < HC_PULL_BATCH; i++) {
        h.request_id = 100 + (uint64_t)i;
        if (ps_frame_encode(&h, NULL, 0, &one, &one_len) < 0)
            goto fail;
        if (len + one_len > cap) {
            size_t ncap = (len + one_len) * 2;
            uint8_t *p = realloc(batch, ncap);
            if (p == NULL) {
                free(one);
                goto fail;
            }
            batch = p;
            cap = ncap;
        }
        memcpy(batch + len, one, one_len);
        len += one_len;
        free(one);
    }
    *out = batch;
    *out_len = len;
    return 0;
fail:
    free(batch);
    return -ENOMEM;
}

/* Sends batch after batch until a send makes no progress for stall_ms (1),
 * the flood cap is reached (0), the server's RSS has grown past twice the
 * bound (2: there is no point going on) or the server hangs up (-1). Samples
 * the server's RSS after each batch into *peak. */
static int flood(hc_ctx *ctx, hc_conn *c, const uint8_t *batch, size_t len, size_t *sent,
                 double rss0, double *peak)
{
    size_t cap = *sent + HC_FLOOD_CAP;
    double rss;
    int rc;

    while (*sent < cap) {
        rc = send_all(c->fd, batch, len);
        if (rss0 >= 0 && (rss = server_rss_mib(ctx)) > *peak)
            *peak = rss;
        if (rc == -EAGAIN)
            return 1;
        if (rc < 0) {
            note(c, "the server hung up (%s); ", strerror(-rc));
            return -1;
        }
        *sent += len;
        if (rss0 >= 0 && *peak - rss0 > 2 * ctx->max_growth) {
            note(c, "stopped flooding: the server grew past twice the bound; ");
            return 2;
        }
    }
    note(c, "the server never stopped reading; ");
    return 0;
}

/* A wrong-model HELLO on a second connection, answered with a REJECT only
 * once the server's loop gets round to it: how long a flooding peer can hold
 * everyone else up. Returns the seconds it took, or -1. */
double probe(hc_ctx *ctx)
{
    double t0 = ps_clock_now();
    hc_conn p;
    int rc;

    if (conn_open(ctx, &p) < 0)
        return -1;
    rc = sc_wrong_model(ctx, &p);
    conn_close(&p);
    return rc < 0 ? -1 : ps_clock_now() - t0;
}

/* A worker that asks and asks and never reads the answers. Once training has
 * started (its first pull is answered) it floods pulls for every key; the
 * replies pile up in the server's write queue, and the server must stop
 * reading from this peer rather than grow without bound or stop serving the
 * others. From here: the flood stalls (no send progress for stall_ms); a
 * probe on a second connection must be answered (the server's loop is free
 * again); the server's RSS then, against its value before the flood, is the
 * growth; and a second flood must stall at once (it really stopped reading
 * from us, rather than being busy). */
int sc_slow_reader(hc_ctx *ctx, hc_conn *c)
{
    Shardps__Header h = SHARDPS__HEADER__INIT;
    double rss0 = -1, rss, peak = 0, wait_s;
    uint8_t *batch = NULL;
    size_t batch_len, sent = 0, more;
    uint64_t clock;
    ps_frame f;
    int rc, result = -1;

    if (handshake(ctx, c, &clock) < 0)
        return -1;
    /* Training starts when every rank has joined; until then pulls wait. */
    h.type = SHARDPS__MSG_TYPE__PULL;
    h.request_id = 2;
    h.clock = clock;
    h.n_keys = ctx->n_keys;
    h.keys = ctx->keys;
    rc = send_frame(c, &h, NULL, 0);
    do
        rc = rc < 0 ? rc : read_frame(c, &f);
    while (rc == 1 && f.hdr->type != SHARDPS__MSG_TYPE__PULL_REPLY);
    if (rc != 1) {
        note(c, "first pull not answered: %s", rc == 0 ? "the server closed" : ps_strerror(rc));
        return -1;
    }
    if (make_pull_batch(ctx, clock, &batch, &batch_len) < 0)
        return -1;
    if (set_timeouts(c->fd, ctx->timeout_ms, ctx->stall_ms) < 0)
        goto out;
    if (ctx->server_pid)
        peak = rss0 = server_rss_mib(ctx);
    rc = flood(ctx, c, batch, batch_len, &sent, rss0, &peak);
    note(c, "%zu pulls sent; ", sent / (batch_len / HC_PULL_BATCH));
    /* Stopping to read, or hanging up on us, are both fine; either way the
     * others must be served again soon. */
    if (rc == 1 || rc == -1) {
        wait_s = probe(ctx);
        if (wait_s < 0) {
            note(c, "a probe on another connection got no REJECT within %.0f s",
                 ctx->timeout_ms / 1000.0);
            goto out;
        }
        note(c, "another peer was answered %.1f s after the flood stopped; ", wait_s);
        if (rss0 >= 0 && (rss = server_rss_mib(ctx)) > peak)
            peak = rss;
    }
    if (rc == 1) {
        more = sent;
        rc = flood(ctx, c, batch, batch_len, &more, rss0, &peak);
        if (rc == 1)
            note(c, "it stopped reading from us (%zu more pulls, then no progress for %d ms); ",
                 (more - sent) / (batch_len / HC_PULL_BATCH), ctx->stall_ms);
    }
    /* Past twice the bound counts against the server only when enforced. */
    if (rc == 0 || (rc == 2 && ctx->growth_enforced))
        goto out;
    result = 0;
    if (rss0 >= 0) {
        note(c, "server RSS %.0f MiB before, peak %.0f MiB: grew %.0f MiB (bound %.0f MiB%s)", rss0,
             peak, peak - rss0, ctx->max_growth, ctx->growth_enforced ? "" : ", not enforced");
        if (peak - rss0 > ctx->max_growth && ctx->growth_enforced)
            result = -1;
    }
out:
    free(batch);
    return result;
}

/* A good HELLO and a BYE: the rank leaves as finished. Since the server
 * waits for every rank that joined and left without finishing, a test that
 * borrowed a rank for the scenarios above gives it back this way, so the
 * server can end on its own when the real workers are done. The rank may
 * still be held by the slow reader's connection, which the server only drops
 * once it gets round to its reset: each refusal naming that is answered by a
 * fresh attempt, so the retries follow the server's pace, not a clock. */
int sc_bye(hc_ctx *ctx, hc_conn *c)
{
    Shardps__Header h = SHARDPS__HEADER__INIT;
    uint64_t clock;
    int tries = 0;

    while (handshake(ctx, c, &clock) < 0) {
        if (strstr(c->detail, "already connected") == NULL || ++tries == 100)
            return -1;
        conn_close(c);
        if (conn_open(ctx, c) < 0)
            return -1;
    }
    h.type = SHARDPS__MSG_TYPE__BYE;
    h.request_id = 2;
    h.clock = clock;
    if (send_frame(c, &h, NULL, 0) < 0) {
        note(c, "BYE not sent");
        return -1;
    }
    note(c, "said BYE after %d refusal%s", tries, tries == 1 ? "" : "s");
    return 0;
}

/* Connects and says nothing until the server closes the connection (at its
 * shutdown); the test checks meanwhile that nobody else is held up. */
int sc_silent(hc_ctx *ctx, hc_conn *c)
{
    int ms = (int)(ctx->silent_s * 1000);
    double t0 = ps_clock_now();
    uint8_t b;
    ssize_t n;

    printf("CONNECTED silent %s\n", c->local);
    fflush(stdout);
    if (set_timeouts(c->fd, ms, ms) < 0)
        return -1;
    do
        n = recv(c->fd, &b, 1, 0);
    while (n < 0 && errno == EINTR);
    if (n > 0) {
        note(c, "the server sent bytes to a peer that never said hello");
        return -1;
    }
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        note(c, "still open after %.1f s", ctx->silent_s);
        return -1;
    }
    note(c, "closed by the server after %.1f s", ps_clock_now() - t0);
    return 0;
}
