/* In-process tests of the key-value server over real loopback TCP. The server
 * runs on its own libuv loop in a second thread, listening on an ephemeral
 * port that is read back from ps_kv_server_start; the test thread plays the
 * peers. Misbehaving peers are plain blocking sockets with a 5-second receive
 * timeout, so a server that fails to hang up makes the test fail instead of
 * hang: random bytes, an impossible length prefix, a frame of the wrong
 * protocol version, a HELLO for another model, and garbage after a good
 * handshake must each end with the server closing the connection. A real
 * worker built on ps_kv_client must meanwhile still join, pull the initial
 * weights and see its gradients applied by plain SGD, and a second worker
 * claiming a rank that is live must be refused. Nothing here waits on a
 * sleep: the port read-back, blocking receives and a uv_async_t that stops
 * the server on its own thread are the only synchronisation. */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <netinet/in.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>
#include <uv.h>

#include "frame.h"
#include "half.h"
#include "kv_client.h"
#include "kv_fixture.h"
#include "kv_server.h"
#include "partition.h"
#include "ps_error.h"

/* More than a maximal header plus its prefix: whatever length random bytes
 * announce, the header is complete and the server must judge it. */
#define GARBAGE_BYTES (PS_MAX_HEADER_BYTES + 4 + 4096)
/* SGD results are compared with w - LR * g computed here in float; the server
 * averages one push (an exact division by 1) and may round the product
 * differently, so allow a few ulps of the O(1) weights. */
#define TOL 1e-6f

static uint64_t ps__dropped(const ps_kv_client *c)
{
    ps_kv_client_stats st;
    ps_kv_client_stats_get(c, &st);
    return st.dropped;
}

/* Random bytes, after an optional length prefix of header_len (0: none, so
 * the prefix is random too and almost surely over the limit). */
static void send_garbage(int fd, uint64_t seed, uint32_t header_len)
{
    uint8_t *buf = malloc(GARBAGE_BYTES);
    uint64_t x = seed;

    cr_assert_not_null(buf);
    for (size_t i = 0; i < GARBAGE_BYTES; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        buf[i] = (uint8_t)(x >> 56);
    }
    if (header_len) {
        buf[0] = (uint8_t)header_len;
        buf[1] = (uint8_t)(header_len >> 8);
        buf[2] = (uint8_t)(header_len >> 16);
        buf[3] = (uint8_t)(header_len >> 24);
    }
    raw_send(fd, buf, GARBAGE_BYTES);
    free(buf);
}

/* ---- the well-behaved worker ------------------------------------------ */

/* Full-model buffers indexed by tensor id, as ps_kv_client wants them. */
typedef struct {
    float *t[PS_MAX_TENSORS];
} model_bufs;

static void bufs_alloc(model_bufs *b)
{
    for (int i = 0; i < fx.spec.n_tensors; i++) {
        b->t[i] = calloc(fx.spec.tensors[i].numel, sizeof(float));
        cr_assert_not_null(b->t[i]);
    }
}

static void bufs_free(model_bufs *b)
{
    for (int i = 0; i < fx.spec.n_tensors; i++)
        free(b->t[i]);
}

/* A gradient that differs per tensor, element and step, with both signs. */
static void fill_grad(model_bufs *g, int step)
{
    for (int i = 0; i < fx.spec.n_tensors; i++)
        for (size_t j = 0; j < fx.spec.tensors[i].numel; j++)
            g->t[i][j] =
                (float)((int)((j * 7 + (size_t)i * 3 + (size_t)step * 5) % 11) - 5) * 0.25f;
}

static void check_weights(const model_bufs *got, const model_bufs *want, const char *when)
{
    for (int i = 0; i < fx.spec.n_tensors; i++)
        for (size_t j = 0; j < fx.spec.tensors[i].numel; j++) {
            float w = want->t[i][j], g = got->t[i][j];
            cr_assert(fabsf(g - w) <= TOL * (1.0f + fabsf(w)), "%s: %s[%zu] = %.9g, want %.9g",
                      when, fx.spec.tensors[i].name, j, (double)g, (double)w);
        }
}

static ps_kv_client *worker_connect_as(int expect_rc, ps_compress compress)
{
    const char *servers[1] = {fx.addr};
    ps_kv_client_config cfg = {0};
    ps_kv_client *c = NULL;
    uint64_t start_clock = UINT64_MAX;
    int rc;

    cfg.spec = fx.spec;
    cfg.rank = 0;
    cfg.world = 1;
    cfg.servers = servers;
    cfg.n_servers = 1;
    cfg.chunk_bytes = CHUNK_BYTES;
    cfg.connect_timeout_s = 5.0;
    cfg.max_payload = (size_t)1 << 20;
    cfg.compress = compress;
    cr_assert_eq(ps_kv_client_init(&c, &cfg), 0);
    rc = ps_kv_client_connect(c, &start_clock);
    cr_assert_eq(rc, expect_rc, "connect returned %s, want %s", ps_err_name(rc),
                 ps_err_name(expect_rc));
    if (expect_rc == 0)
        cr_assert_eq(start_clock, 0);
    return c;
}

static ps_kv_client *worker_connect(int expect_rc)
{
    return worker_connect_as(expect_rc, PS_COMPRESS_NONE);
}

/* Pulls at clock 0 and checks the weights are the spec's initial values. */
static void pull_initial(ps_kv_client *c, model_bufs *w)
{
    model_bufs want;

    bufs_alloc(&want);
    for (int i = 0; i < fx.spec.n_tensors; i++)
        ps_model_spec_init_values(&fx.spec, i, 0, fx.spec.tensors[i].numel, want.t[i]);
    cr_assert_eq(ps_kv_client_pull(c, 0, w->t), 0);
    cr_assert_eq(ps_kv_client_wait(c), 0);
    for (int i = 0; i < fx.spec.n_tensors; i++)
        cr_assert(memcmp(w->t[i], want.t[i], fx.spec.tensors[i].numel * sizeof(float)) == 0,
                  "initial %s differs from ps_model_spec_init_values", fx.spec.tensors[i].name);
    bufs_free(&want);
}

/* Trains two steps of plain SGD and checks w <- w - LR * g after each. The
 * second step overlaps the push with the next pull, as a worker does. */
/* One plain SGD step: pushes gradient number `seed` (into g), pulls `clock`
 * into w and checks that w became w - LR * g (want is scratch). */
static void sgd_step_checked(ps_kv_client *c, model_bufs *w, model_bufs *g, model_bufs *want,
                             int seed, uint64_t clock, const char *when)
{
    fill_grad(g, seed);
    for (int i = 0; i < fx.spec.n_tensors; i++)
        for (size_t j = 0; j < fx.spec.tensors[i].numel; j++)
            want->t[i][j] = w->t[i][j] - LR * g->t[i][j];
    cr_assert_eq(ps_kv_client_push(c, (const float *const *)g->t), 0);
    cr_assert_eq(ps_kv_client_pull(c, clock, w->t), 0);
    cr_assert_eq(ps_kv_client_wait(c), 0);
    check_weights(w, want, when);
}

static void train_two_steps(ps_kv_client *c)
{
    model_bufs w, g, want;

    bufs_alloc(&w);
    bufs_alloc(&g);
    bufs_alloc(&want);
    pull_initial(c, &w);

    fill_grad(&g, 0);
    for (int i = 0; i < fx.spec.n_tensors; i++)
        for (size_t j = 0; j < fx.spec.tensors[i].numel; j++)
            want.t[i][j] = w.t[i][j] - LR * g.t[i][j];
    cr_assert_eq(ps_kv_client_push(c, (const float *const *)g.t), 0);
    cr_assert_eq(ps_kv_client_wait(c), 0);
    cr_assert_eq(ps__dropped(c), 0);
    cr_assert_eq(ps_kv_client_pull(c, 1, w.t), 0);
    cr_assert_eq(ps_kv_client_wait(c), 0);
    check_weights(&w, &want, "after step 0");

    sgd_step_checked(c, &w, &g, &want, 1, 2, "after step 1");
    cr_assert_eq(ps__dropped(c), 0);

    bufs_free(&w);
    bufs_free(&g);
    bufs_free(&want);
}

/* ---- tests ------------------------------------------------------------- */

TestSuite(kv_server, .init = server_up, .fini = server_down, .timeout = 30);

Test(kv_server, random_bytes_are_refused, .timeout = 30)
{
    int fd = raw_connect();

    send_garbage(fd, 1, 0);
    expect_closed(fd, "random bytes");

    /* A believable length, so the random header itself must be judged. */
    fd = raw_connect();
    send_garbage(fd, 5, 200);
    expect_closed(fd, "random header");
}

Test(kv_server, impossible_length_prefix_is_refused, .timeout = 30)
{
    static const uint8_t prefix[4] = {0xff, 0xff, 0xff, 0xff};
    int fd = raw_connect();

    /* Nothing follows: the server must not wait for 4 GiB of header. */
    cr_assert_eq(raw_send(fd, prefix, sizeof(prefix)), 0);
    expect_closed(fd, "length 0xFFFFFFFF");
}

Test(kv_server, wrong_protocol_version_is_refused, .timeout = 30)
{
    Shardps__Header h;
    Shardps__Hello hello;
    size_t hlen;
    uint8_t *buf;
    int fd = raw_connect();

    /* A HELLO that would be accepted but for its version; ps_frame_encode
     * always writes the right version, so pack it by hand. */
    make_hello(&h, &hello, &fx.spec);
    h.version = PS_PROTOCOL_VERSION + 1;
    hlen = shardps__header__get_packed_size(&h);
    buf = malloc(4 + hlen);
    cr_assert_not_null(buf);
    buf[0] = (uint8_t)hlen;
    buf[1] = (uint8_t)(hlen >> 8);
    buf[2] = (uint8_t)(hlen >> 16);
    buf[3] = (uint8_t)(hlen >> 24);
    shardps__header__pack(&h, buf + 4);
    cr_assert_eq(raw_send(fd, buf, 4 + hlen), 0);
    free(buf);
    expect_closed(fd, "wrong version");
}

Test(kv_server, hello_for_another_model_is_rejected_with_a_reason, .timeout = 30)
{
    Shardps__Header h;
    Shardps__Hello hello;
    ps_model_spec other;
    ps_frame_decoder *d;
    ps_frame f;
    int fd = raw_connect();

    cr_assert_eq(ps_frame_decoder_init(&d, 1 << 20), 0);
    cr_assert_eq(ps_model_spec_copy(&other, &fx.spec), 0);
    other.seed++;
    make_hello(&h, &hello, &other);
    ps_model_spec_free(&other);
    raw_send_frame(fd, &h);
    raw_read_frame(fd, d, &f, "wrong model");
    cr_assert_eq(f.hdr->type, SHARDPS__MSG_TYPE__REJECT);
    cr_assert_eq(f.hdr->status, -PS_EMISMATCH);
    cr_assert_not_null(f.hdr->reason);
    cr_assert(
        strstr(f.hdr->reason, "model mismatch: seed 1235 from the worker, 1234 on this server"),
        "reason: %s", f.hdr->reason);
    ps_frame_decoder_free(d);
    expect_closed(fd, "wrong model");
}

Test(kv_server, request_before_hello_is_rejected, .timeout = 30)
{
    Shardps__Header h = SHARDPS__HEADER__INIT;
    uint64_t key = 0;
    ps_frame_decoder *d;
    ps_frame f;
    int fd = raw_connect();

    cr_assert_eq(ps_frame_decoder_init(&d, 1 << 20), 0);
    h.type = SHARDPS__MSG_TYPE__PULL;
    h.request_id = 1;
    h.n_keys = 1;
    h.keys = &key;
    raw_send_frame(fd, &h);
    raw_read_frame(fd, d, &f, "pull before hello");
    cr_assert_eq(f.hdr->type, SHARDPS__MSG_TYPE__REJECT);
    cr_assert_eq(f.hdr->status, -PS_EPROTO);
    cr_assert(f.hdr->reason && strstr(f.hdr->reason, "HELLO"), "reason: %s", f.hdr->reason);
    ps_frame_decoder_free(d);
    expect_closed(fd, "pull before hello");
}

Test(kv_server, garbage_after_handshake_is_refused, .timeout = 30)
{
    Shardps__Header h;
    Shardps__Hello hello;
    ps_frame_decoder *d;
    ps_frame f;
    int fd = raw_connect();

    cr_assert_eq(ps_frame_decoder_init(&d, 1 << 20), 0);
    make_hello(&h, &hello, &fx.spec);
    raw_send_frame(fd, &h);
    raw_read_frame(fd, d, &f, "hello");
    cr_assert_eq(f.hdr->type, SHARDPS__MSG_TYPE__WELCOME);
    cr_assert_not_null(f.hdr->welcome);
    cr_assert_eq(f.hdr->welcome->clock, 0);
    send_garbage(fd, 2, 0);
    ps_frame_decoder_free(d);
    expect_closed(fd, "garbage after hello");
}

Test(kv_server, key_not_on_this_server_gets_an_error, .timeout = 30)
{
    Shardps__Header h, req = SHARDPS__HEADER__INIT;
    Shardps__Hello hello;
    uint64_t key = (uint64_t)99 << 32; /* tensor 99 does not exist */
    ps_frame_decoder *d;
    ps_frame f;
    int fd = raw_connect();

    cr_assert_eq(ps_frame_decoder_init(&d, 1 << 20), 0);
    make_hello(&h, &hello, &fx.spec);
    raw_send_frame(fd, &h);
    raw_read_frame(fd, d, &f, "hello");
    cr_assert_eq(f.hdr->type, SHARDPS__MSG_TYPE__WELCOME);
    req.type = SHARDPS__MSG_TYPE__PULL;
    req.request_id = 2;
    req.n_keys = 1;
    req.keys = &key;
    raw_send_frame(fd, &req);
    raw_read_frame(fd, d, &f, "pull of a missing key");
    cr_assert_eq(f.hdr->type, SHARDPS__MSG_TYPE__ERROR);
    cr_assert_eq(f.hdr->status, -PS_EPROTO);
    cr_assert(f.hdr->reason && strstr(f.hdr->reason, "not held"), "reason: %s", f.hdr->reason);
    ps_frame_decoder_free(d);
    expect_closed(fd, "missing key");
}

Test(kv_server, good_worker_trains_after_and_beside_bad_peers, .timeout = 30)
{
    static const uint8_t huge[4] = {0xff, 0xff, 0xff, 0xff};
    static const uint8_t half_prefix[2] = {0x10, 0x00};
    Shardps__Header h;
    Shardps__Hello hello;
    ps_frame_decoder *d;
    ps_frame f;
    ps_kv_client *c;
    ps_model_spec other;
    uint8_t probe;
    int fd, idle;

    cr_assert_eq(ps_frame_decoder_init(&d, 1 << 20), 0);

    /* A peer that stalls mid-prefix stays connected through everything; the
     * server must keep serving others around it. */
    idle = raw_connect();
    cr_assert_eq(raw_send(idle, half_prefix, sizeof(half_prefix)), 0);

    fd = raw_connect();
    send_garbage(fd, 3, 0);
    expect_closed(fd, "random bytes");

    fd = raw_connect();
    cr_assert_eq(raw_send(fd, huge, sizeof(huge)), 0);
    expect_closed(fd, "length 0xFFFFFFFF");

    fd = raw_connect();
    cr_assert_eq(ps_model_spec_copy(&other, &fx.spec), 0);
    other.tensors[0].fan_in++;
    make_hello(&h, &hello, &other);
    ps_model_spec_free(&other);
    raw_send_frame(fd, &h);
    raw_read_frame(fd, d, &f, "wrong model");
    cr_assert_eq(f.hdr->type, SHARDPS__MSG_TYPE__REJECT);
    cr_assert(f.hdr->reason && strstr(f.hdr->reason, "model"), "reason: %s", f.hdr->reason);
    expect_closed(fd, "wrong model");

    /* This one takes rank 0 and is then thrown out for garbage. The server
     * frees the rank in the close callback, which libuv runs in the same loop
     * iteration as the close; our EOF can only come after the close, and the
     * worker's HELLO below is read in a later iteration, so the rank is free
     * by then. */
    ps_frame_decoder_free(d);
    cr_assert_eq(ps_frame_decoder_init(&d, 1 << 20), 0);
    fd = raw_connect();
    make_hello(&h, &hello, &fx.spec);
    raw_send_frame(fd, &h);
    raw_read_frame(fd, d, &f, "hello");
    cr_assert_eq(f.hdr->type, SHARDPS__MSG_TYPE__WELCOME);
    send_garbage(fd, 4, 0);
    expect_closed(fd, "garbage after hello");

    c = worker_connect(0);
    train_two_steps(c);
    ps_kv_client_close(c);

    /* The stalled peer was neither served nor dropped: nothing to read, and
     * no EOF. */
    cr_assert_eq(recv(idle, &probe, 1, MSG_DONTWAIT), -1);
    cr_assert(errno == EAGAIN || errno == EWOULDBLOCK, "stalled peer: %s", strerror(errno));
    close(idle);
    ps_frame_decoder_free(d);
}

Test(kv_server, second_worker_with_a_live_rank_is_refused, .timeout = 30)
{
    Shardps__Header h;
    Shardps__Hello hello;
    ps_frame_decoder *d;
    ps_frame f;
    ps_kv_client *first, *second;
    model_bufs w;
    int fd;

    first = worker_connect(0);
    /* The same configuration again: rank 0 is live, so the handshake fails
     * once the client has retried until its connect timeout (a reconnecting
     * worker's old connection may just not have been seen closing yet). */
    second = worker_connect(-PS_EREJECTED);

    /* The reason names the rank that is taken. */
    cr_assert_eq(ps_frame_decoder_init(&d, 1 << 20), 0);
    fd = raw_connect();
    make_hello(&h, &hello, &fx.spec);
    raw_send_frame(fd, &h);
    raw_read_frame(fd, d, &f, "duplicate rank");
    cr_assert_eq(f.hdr->type, SHARDPS__MSG_TYPE__REJECT);
    cr_assert_eq(f.hdr->status, -EADDRINUSE);
    cr_assert(f.hdr->reason && strstr(f.hdr->reason, "rank 0"), "reason: %s", f.hdr->reason);
    expect_closed(fd, "duplicate rank");
    ps_frame_decoder_free(d);
    ps_kv_client_close(second);

    /* The refusals did not disturb the worker that holds the rank. */
    bufs_alloc(&w);
    pull_initial(first, &w);
    bufs_free(&w);
    ps_kv_client_close(first);
}

Test(kv_server, worker_of_another_world_is_refused, .timeout = 30)
{
    const char *servers[1] = {fx.addr};
    ps_kv_client_config cfg = {0};
    ps_kv_client *c = NULL;
    uint64_t start_clock;

    cfg.spec = fx.spec;
    cfg.rank = 1;
    cfg.world = 2;
    cfg.servers = servers;
    cfg.n_servers = 1;
    cfg.chunk_bytes = CHUNK_BYTES;
    cfg.connect_timeout_s = 5.0;
    cfg.max_payload = (size_t)1 << 20;
    cr_assert_eq(ps_kv_client_init(&c, &cfg), 0);
    cr_assert_eq(ps_kv_client_connect(c, &start_clock), -PS_EREJECTED);
    ps_kv_client_close(c);

    /* The server is still fine for the right worker. */
    c = worker_connect(0);
    train_two_steps(c);
    ps_kv_client_close(c);

    /* The refused worker never joined, so only the good worker's goodbye
     * ends the job. */
    wait_done();
    server_down();
    cr_assert_eq(fx.done_calls, 1);
}

/* A chunk of gradient holding NaN or Inf (bad0 and bad1, at the first
 * element of the first and last tensors) is refused: that chunk of the model
 * is unchanged, the rest of the push (each chunk is its own frame) is
 * applied, the model stays finite, the worker is told chunks were dropped,
 * the step still completes (nobody waits for a usable push that will never
 * come), and the next good push is applied as usual. */
/* A 16-bit push encoding: the conversions the worker uses and their plain
 * references (the tests' independent account of what the server sees). */
typedef struct {
    const char *name;
    void (*narrow)(uint16_t *, const float *, size_t);
    void (*widen)(float *, const uint16_t *, size_t);
    void (*narrow_ref)(uint16_t *, const float *, size_t);
    void (*widen_ref)(float *, const uint16_t *, size_t);
} narrowing;

static const narrowing *narrowing_of(ps_compress compress)
{
    static const narrowing fp16 = {"fp16", ps_f32_to_f16, ps_f16_to_f32, ps_f32_to_f16_ref,
                                   ps_f16_to_f32_ref};
    static const narrowing bf16 = {"bf16", ps_f32_to_bf16, ps_bf16_to_f32, ps_f32_to_bf16_ref,
                                   ps_bf16_to_f32_ref};

    cr_assert(compress == PS_COMPRESS_FP16 || compress == PS_COMPRESS_BF16);
    return compress == PS_COMPRESS_FP16 ? &fp16 : &bf16;
}

static void check_nonfinite_rejected(ps_compress compress, float bad0, float bad1)
{
    ps_kv_client *c = worker_connect_as(0, compress);
    model_bufs w, g, before, want;
    ps_partition *part = NULL;
    int bad_chunks = 0;

    bufs_alloc(&w);
    bufs_alloc(&g);
    bufs_alloc(&before);
    bufs_alloc(&want);
    pull_initial(c, &w);
    for (int i = 0; i < fx.spec.n_tensors; i++)
        memcpy(before.t[i], w.t[i], fx.spec.tensors[i].numel * sizeof(float));

    fill_grad(&g, 0);
    g.t[0][0] = bad0;
    g.t[fx.spec.n_tensors - 1][0] = bad1;
    cr_assert_eq(ps_partition_init(&part, &fx.spec, 1, CHUNK_BYTES), 0);
    for (int k = 0; k < ps_partition_chunk_count(part); k++) {
        const ps_chunk *ch = ps_partition_chunk(part, k);
        float gc[CHUNK_BYTES / sizeof(float)];
        int finite = 1;
        /* What the server sees: the gradient, or its rounding to 16 bits. */
        memcpy(gc, g.t[ch->tensor_id] + ch->offset, ch->numel * sizeof(float));
        if (compress != PS_COMPRESS_NONE) {
            uint16_t h[CHUNK_BYTES / sizeof(float)];
            const narrowing *nw = narrowing_of(compress);
            nw->narrow(h, gc, ch->numel);
            nw->widen(gc, h, ch->numel);
        }
        for (size_t j = 0; j < ch->numel; j++)
            finite &= isfinite(gc[j]) != 0;
        bad_chunks += !finite;
        for (size_t j = 0; j < ch->numel; j++)
            want.t[ch->tensor_id][ch->offset + j] =
                before.t[ch->tensor_id][ch->offset + j] - (finite ? LR * gc[j] : 0.0f);
    }
    ps_partition_free(part);
    cr_assert_eq(bad_chunks, 2);
    cr_assert_eq(ps_kv_client_push(c, (const float *const *)g.t), 0);
    cr_assert_eq(ps_kv_client_pull(c, 1, w.t), 0);
    cr_assert_eq(ps_kv_client_wait(c), 0);
    cr_assert_eq(ps__dropped(c), 2, "the rejected chunks were not reported as dropped");
    check_weights(&w, &want, "after a push with a NaN and an Inf chunk");

    sgd_step_checked(c, &w, &g, &want, 1, 2, "after a good push following a NaN push");
    for (int i = 0; i < fx.spec.n_tensors; i++)
        for (size_t j = 0; j < fx.spec.tensors[i].numel; j++)
            cr_assert(isfinite(w.t[i][j]));

    ps_kv_client_close(c);
    bufs_free(&w);
    bufs_free(&g);
    bufs_free(&before);
    bufs_free(&want);
}

Test(kv_server, nonfinite_push_is_rejected_and_the_model_stays_finite, .timeout = 30)
{
    check_nonfinite_rejected(PS_COMPRESS_NONE, NAN, INFINITY);
}

/* In float16 a NaN stays NaN, and a finite float of 65520 or more becomes
 * Inf: both are refused like float32's NaN and Inf. */
Test(kv_server, nonfinite_fp16_push_is_rejected_and_the_model_stays_finite, .timeout = 30)
{
    check_nonfinite_rejected(PS_COMPRESS_FP16, 1e5f, NAN);
}

/* In bfloat16 1e5 is finite, but FLT_MAX rounds up to Inf (its dropped bits
 * are over half a step), and the server's scan must know bfloat16's
 * exponent field to see it and the NaN. */
Test(kv_server, nonfinite_bf16_push_is_rejected_and_the_model_stays_finite, .timeout = 30)
{
    check_nonfinite_rejected(PS_COMPRESS_BF16, FLT_MAX, NAN);
}

/* --compress fp16 or bf16: the server applies the gradient the worker
 * rounded to 16 bits, exactly (SGD on w - LR * g16), and the worker counts
 * half the bytes of a float32 push. The gradient's values are not 16-bit
 * ones: rounding moves a weight by up to LR * |g| * 2^-11 (2^-8 in
 * bfloat16), and the test makes sure that is over ten times TOL for some
 * weights, so a worker that rounded another way (or a server that widened
 * wrongly) fails here. */
static void check_rounded_push(ps_compress compress)
{
    const narrowing *nw = narrowing_of(compress);
    ps_kv_client *c = worker_connect_as(0, compress);
    ps_kv_client_stats st;
    model_bufs w, g, want, exact;
    size_t numel = 0;

    bufs_alloc(&w);
    bufs_alloc(&g);
    bufs_alloc(&want);
    bufs_alloc(&exact);
    pull_initial(c, &w);
    for (int step = 0; step < 2; step++) {
        int differs = 0;

        fill_grad(&g, step);
        for (int i = 0; i < fx.spec.n_tensors; i++) {
            size_t n = fx.spec.tensors[i].numel;
            uint16_t *h = malloc(n * sizeof(*h));
            float *rounded = malloc(n * sizeof(*rounded));

            cr_assert(h && rounded);
            for (size_t j = 0; j < n; j++)
                g.t[i][j] = g.t[i][j] / 3.0f + 1e-3f * (float)j;
            nw->narrow_ref(h, g.t[i], n);
            nw->widen_ref(rounded, h, n);
            for (size_t j = 0; j < n; j++) {
                want.t[i][j] = w.t[i][j] - LR * rounded[j];
                exact.t[i][j] = w.t[i][j] - LR * g.t[i][j];
                differs += fabsf(want.t[i][j] - exact.t[i][j]) > 10 * TOL;
            }
            free(h);
            free(rounded);
        }
        cr_assert_gt(differs, 0, "the gradient is too round to tell %s from fp32", nw->name);
        cr_assert_eq(ps_kv_client_push(c, (const float *const *)g.t), 0);
        cr_assert_eq(ps_kv_client_pull(c, (uint64_t)step + 1, w.t), 0);
        cr_assert_eq(ps_kv_client_wait(c), 0);
        check_weights(&w, &want, step ? "after step 1" : "after step 0");
    }
    cr_assert_eq(ps__dropped(c), 0);
    for (int i = 0; i < fx.spec.n_tensors; i++)
        numel += fx.spec.tensors[i].numel;
    ps_kv_client_stats_get(c, &st);
    cr_assert_eq(st.bytes_sent, 2 * numel * sizeof(uint16_t), "bytes_sent %llu for 2 pushes of %zu",
                 (unsigned long long)st.bytes_sent, numel);

    ps_kv_client_close(c);
    bufs_free(&w);
    bufs_free(&g);
    bufs_free(&want);
    bufs_free(&exact);
}

Test(kv_server, fp16_push_applies_the_rounded_gradient, .timeout = 30)
{
    check_rounded_push(PS_COMPRESS_FP16);
}

Test(kv_server, bf16_push_applies_the_rounded_gradient, .timeout = 30)
{
    check_rounded_push(PS_COMPRESS_BF16);
}
