/* Issue 18: what a client written from proto/shardps.proto alone did to the
 * server, one test per root cause, each against a real server in a thread
 * (kv_fixture.h) with raw blocking sockets playing the strangers and the real
 * workers, so every frame is exactly the one that did the damage:
 *  1. a refused PUSH must change nothing (it used to record the rank's push
 *     and make the real rank's pushes look like repeats: the job stopped);
 *  2. a PULL clock outside what the mode allows is refused (one PULL at
 *     2^64-1 used to become the job's resume clock);
 *  3. BYE closes the connection, and every connection state has a deadline;
 *  4. a PUSH whose announced payload does not fit its keys is refused before
 *     any payload byte is buffered;
 *  5. an update that would make a weight or optimizer state non-finite is
 *     refused and the chunk left as it was;
 *  7. a BYE before the job has started does not count as the rank finishing;
 *  8. a version mismatch gets a REJECT; a REJECT of a taken rank does not
 *     name the live worker's address; a HEARTBEAT carries no payload.
 * Synchronisation is by replies and by the server closing connections. */
#include <criterion/criterion.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kv_fixture.h"
#include "kv_peer.h"
#include "ps_error.h"

TestSuite(hostile, .fini = server_down, .timeout = 60);

/* Cause 1. Before the fix the stranger's push was recorded as rank 1's push
 * of step 1 before it was refused, the real rank 1's step-0 push of the
 * first chunk was then dropped as a repeat, and step 1 never came. */
Test(hostile, refused_push_changes_nothing)
{
    ps_kv_server_config cfg;
    peer stranger, r0, r1;
    float *w;

    kv_fixture_config(&cfg);
    peer_server_up(&cfg, 2, 0, "sync");
    w = malloc(ks.total * sizeof(float));
    peer_join(&stranger, 1, 2);
    peer_push(&stranger, 1, 0.5f);
    peer_expect_refusal(&stranger, SHARDPS__MSG_TYPE__ERROR, "push", "the stranger's push");

    peer_join(&r0, 0, 2);
    peer_join(&r1, 1, 2);
    peer_pull(&r0, 0);
    peer_pull(&r1, 0);
    peer_pull_reply(&r0, w, "rank 0 pulls step 0");
    peer_pull_reply(&r1, w, "rank 1 pulls step 0");
    peer_push(&r0, 0, 0.25f);
    peer_push(&r1, 0, 0.25f);
    cr_assert_eq(peer_push_reply(&r0, "rank 0 pushes step 0"), 0);
    cr_assert_eq(peer_push_reply(&r1, "rank 1 pushes step 0"), 0,
                 "rank 1's push was dropped as a repeat of the stranger's");
    peer_pull(&r0, 1);
    cr_assert_eq(peer_pull_reply(&r0, w, "step 1 after both pushed step 0"), 1);
    peer_close(&r0);
    peer_close(&r1);
    free(w);
}

/* Cause 2. Before the fix the PULL's clock became the rank's clock without
 * an upper bound and, once it left, the clock every later worker was
 * welcomed at. */
Test(hostile, pull_clock_outside_the_mode_is_refused)
{
    ps_kv_server_config cfg;
    peer stranger, r0;

    kv_fixture_config(&cfg);
    peer_server_up(&cfg, 2, PS_STALENESS_UNBOUNDED, "async");
    peer_join(&stranger, 1, 2);
    peer_pull(&stranger, UINT64_MAX);
    peer_expect_refusal(&stranger, SHARDPS__MSG_TYPE__ERROR, "clock", "a pull at 2^64-1");
    peer_join(&stranger, 1, 2);
    peer_pull(&stranger, 1000);
    peer_expect_refusal(&stranger, SHARDPS__MSG_TYPE__ERROR, "clock", "a pull at 1000");

    peer_join(&r0, 0, 2);
    cr_assert_eq(r0.clock, 0, "a worker was welcomed at clock %llu", (unsigned long long)r0.clock);
    peer_close(&r0);
}

/* Sync allows a pull at most one step past the steps applied. */
Test(hostile, sync_pull_past_the_next_step_is_refused)
{
    ps_kv_server_config cfg;
    peer r0;

    kv_fixture_config(&cfg);
    peer_server_up(&cfg, 1, 0, "sync");
    peer_join(&r0, 0, 1);
    peer_pull(&r0, 2);
    peer_expect_refusal(&r0, SHARDPS__MSG_TYPE__ERROR, "clock", "a pull two steps ahead");
}

/* Cause 3. Before the fix the connection stayed open after BYE, with no
 * deadline: a thousand of them used up the server's descriptors. */
Test(hostile, bye_closes_the_connection)
{
    ps_kv_server_config cfg;
    peer p;

    kv_fixture_config(&cfg);
    peer_server_up(&cfg, 2, 0, "sync");
    peer_join(&p, 0, 2);
    peer_bye(&p);
    expect_closed(p.fd, "after BYE");
    p.fd = -1;
    peer_close(&p);
}

/* Cause 4. Before the fix the server set aside a buffer of the announced
 * size and waited for the payload: 32 MiB (1 GiB in the attack) held for a
 * 64-byte chunk. Now the header alone is refused. */
Test(hostile, push_payload_is_sized_before_it_is_buffered)
{
    ps_kv_server_config cfg;
    Shardps__Header h = SHARDPS__HEADER__INIT;
    uint8_t *buf;
    size_t len;
    peer p;

    kv_fixture_config(&cfg);
    cfg.max_payload = (size_t)64 << 20;
    peer_server_up(&cfg, 1, 0, "sync");
    peer_join(&p, 0, 1);
    h.type = SHARDPS__MSG_TYPE__PUSH;
    h.request_id = 2;
    h.dtype = SHARDPS__DTYPE__DTYPE_F32;
    h.n_keys = 1;
    h.keys = ks.keys;
    h.version = PS_PROTOCOL_VERSION;
    h.payload_bytes = (uint64_t)32 << 20;
    cr_assert_eq(ps_frame_pack_header(&h, &buf, &len), 0);
    cr_assert_eq(raw_send(p.fd, buf, len), 0);
    free(buf);
    peer_expect_refusal(&p, SHARDPS__MSG_TYPE__ERROR, "payload", "a 32 MiB push of one chunk");
}

/* A push marked unused (no forward used its tensor) carries no gradient: one
 * that does anyway, or names a dtype, is refused with the reason. */
Test(hostile, unused_push_with_a_payload_is_refused)
{
    ps_kv_server_config cfg;
    Shardps__Header h = SHARDPS__HEADER__INIT;
    float g[64] = {0};
    peer p;

    kv_fixture_config(&cfg);
    peer_server_up(&cfg, 1, 0, "sync");
    peer_join(&p, 0, 1);
    h.type = SHARDPS__MSG_TYPE__PUSH;
    h.request_id = 2;
    h.n_keys = 1;
    h.keys = ks.keys;
    h.unused = 1;
    h.dtype = SHARDPS__DTYPE__DTYPE_F32;
    peer_send(&p, &h, g, ks.numel[0] * sizeof(float));
    peer_expect_refusal(&p, SHARDPS__MSG_TYPE__ERROR,
                        "a push marked unused carries no gradient, but this one has a",
                        "an unused push with a payload");
    peer_join(&p, 0, 1);
    peer_send(&p, &h, NULL, 0);
    peer_expect_refusal(&p, SHARDPS__MSG_TYPE__ERROR, "0-byte payload of dtype 1",
                        "an unused push with a dtype");
}

/* Cause 5, SGD. Two finite pushes of 3e38 overflow the sum to Inf; before
 * the fix the weights became -Inf and were served to every pull. */
Test(hostile, update_that_overflows_is_refused)
{
    ps_kv_server_config cfg;
    peer r0, r1;
    float *w0 = malloc(sizeof(float) * 4096), *w = malloc(sizeof(float) * 4096);

    kv_fixture_config(&cfg);
    peer_server_up(&cfg, 2, 0, "sync");
    cr_assert_leq(ks.total, 4096);
    peer_join(&r0, 0, 2);
    peer_join(&r1, 1, 2);
    peer_pull(&r0, 0);
    peer_pull(&r1, 0);
    peer_pull_reply(&r0, w0, "step 0");
    peer_pull_reply(&r1, w0, "step 0");
    peer_push(&r0, 0, 3e38f);
    peer_push(&r1, 0, 3e38f);
    peer_push_reply(&r0, "push 3e38");
    peer_push_reply(&r1, "push 3e38");
    peer_pull(&r0, 1);
    cr_assert_eq(peer_pull_reply(&r0, w, "step 1"), 1);
    for (size_t i = 0; i < ks.total; i++)
        cr_assert(isfinite(w[i]) && w[i] == w0[i], "weight %zu is %g (was %g)", i, (double)w[i],
                  (double)w0[i]);
    peer_close(&r0);
    peer_close(&r1);
    free(w0);
    free(w);
}

/* Cause 5, Adam. 3e38 squared is Inf in the second moment: before the fix the
 * weights stayed finite but never moved again (every later step divided by
 * Inf). Now the update is refused and the next one moves every weight. */
Test(hostile, adam_state_stays_finite)
{
    ps_kv_server_config cfg;
    peer r0;
    float *w0 = malloc(sizeof(float) * 4096), *w = malloc(sizeof(float) * 4096);

    kv_fixture_config(&cfg);
    ps_optimizer_defaults(&cfg.opt, PS_OPT_ADAM);
    cfg.lr.base_lr = 0.01;
    peer_server_up(&cfg, 1, 0, "sync");
    cr_assert_leq(ks.total, 4096);
    peer_join(&r0, 0, 1);
    peer_pull(&r0, 0);
    peer_pull_reply(&r0, w0, "step 0");
    peer_push(&r0, 0, 3e38f);
    peer_push_reply(&r0, "push 3e38");
    peer_pull(&r0, 1);
    peer_pull_reply(&r0, w, "step 1");
    for (size_t i = 0; i < ks.total; i++)
        cr_assert(w[i] == w0[i], "weight %zu moved to %g under a refused update", i, (double)w[i]);
    peer_push(&r0, 1, 1.0f);
    peer_push_reply(&r0, "push 1.0");
    peer_pull(&r0, 2);
    peer_pull_reply(&r0, w, "step 2");
    for (size_t i = 0; i < ks.total; i++)
        cr_assert(isfinite(w[i]) && w[i] != w0[i], "weight %zu did not move (%g)", i, (double)w[i]);
    peer_close(&r0);
    free(w0);
    free(w);
}

/* Cause 7, first half. Before the fix HELLO+BYE for every rank ended the job
 * before it started (the server without --linger exited 0). */
Test(hostile, bye_before_the_start_does_not_finish_the_rank)
{
    ps_kv_server_config cfg;
    peer p, r0, r1;
    float *w;

    kv_fixture_config(&cfg);
    peer_server_up(&cfg, 2, 0, "sync");
    w = malloc(ks.total * sizeof(float));
    for (uint32_t r = 0; r < 2; r++) {
        peer_join(&p, r, 2);
        peer_bye(&p);
        expect_closed(p.fd, "BYE before the start");
        p.fd = -1;
        peer_close(&p);
    }
    cr_assert_eq(done_calls(), 0, "the job ended before it started");
    /* The real workers still train a step and finish the job. */
    peer_join(&r0, 0, 2);
    peer_join(&r1, 1, 2);
    peer_pull(&r0, 0);
    peer_pull(&r1, 0);
    peer_pull_reply(&r0, w, "step 0");
    peer_pull_reply(&r1, w, "step 0");
    peer_push(&r0, 0, 0.5f);
    peer_push(&r1, 0, 0.5f);
    peer_push_reply(&r0, "step 0");
    peer_push_reply(&r1, "step 0");
    peer_bye(&r0);
    peer_bye(&r1);
    wait_done();
    peer_close(&r0);
    peer_close(&r1);
    free(w);
}

/* Cause 8: a HELLO of another protocol version is answered with a REJECT
 * naming both versions (it was only logged). */
Test(hostile, version_mismatch_is_rejected_with_a_reason)
{
    ps_kv_server_config cfg;
    Shardps__Header h;
    Shardps__Hello hello;
    uint8_t *buf;
    size_t len;
    peer p;

    kv_fixture_config(&cfg);
    peer_server_up(&cfg, 1, 0, "sync");
    peer_open(&p);
    make_hello(&h, &hello, &fx.spec);
    h.version = PS_PROTOCOL_VERSION + 1;
    cr_assert_eq(ps_frame_pack_header(&h, &buf, &len), 0);
    cr_assert_eq(raw_send(p.fd, buf, len), 0);
    free(buf);
    peer_expect_refusal(&p, SHARDPS__MSG_TYPE__REJECT, "version", "another protocol version");
}

/* Cause 8: the REJECT of a taken rank does not tell a stranger where the
 * live worker is. */
Test(hostile, taken_rank_reject_does_not_name_the_worker)
{
    ps_kv_server_config cfg;
    Shardps__Header h;
    Shardps__Hello hello;
    ps_frame f;
    peer r0, p;

    kv_fixture_config(&cfg);
    peer_server_up(&cfg, 1, 0, "sync");
    peer_join(&r0, 0, 1);
    peer_open(&p);
    make_hello(&h, &hello, &fx.spec);
    raw_send_frame(p.fd, &h);
    raw_read_frame(p.fd, p.dec, &f, "a second rank 0");
    cr_assert_eq(f.hdr->type, SHARDPS__MSG_TYPE__REJECT);
    cr_assert_eq(f.hdr->status, -EADDRINUSE);
    cr_assert(strstr(f.hdr->reason, "127.0.0.1") == NULL, "the reason names the worker: %s",
              f.hdr->reason);
    peer_close(&p);
    peer_close(&r0);
}

/* Cause 8: a HEARTBEAT carries nothing; one with 1 KiB is refused. */
Test(hostile, heartbeat_with_a_payload_is_refused)
{
    ps_kv_server_config cfg;
    Shardps__Header h = SHARDPS__HEADER__INIT;
    uint8_t junk[1024] = {0};
    peer p;

    kv_fixture_config(&cfg);
    peer_server_up(&cfg, 1, 0, "sync");
    peer_join(&p, 0, 1);
    h.type = SHARDPS__MSG_TYPE__HEARTBEAT;
    h.request_id = 3;
    peer_send(&p, &h, junk, sizeof(junk));
    peer_expect_refusal(&p, SHARDPS__MSG_TYPE__ERROR, "payload", "a 1 KiB heartbeat");
}

/* Cause 3, and issue 22 cause 5: --max-connections holds, but an admitted
 * worker keeps its slot and, with the handshake slots all taken, the
 * connection that waited longest gives way (a REJECT saying to come back),
 * not the newcomer. Idle strangers used to keep real workers out for good:
 * a worker was refused "this server takes at most N connections". */
Test(hostile, idle_connections_give_way_to_a_worker)
{
    ps_kv_server_config cfg;
    peer idle[4], r0, r1;

    kv_fixture_config(&cfg);
    cfg.max_connections = 4; /* 2 for the workers, 2 for handshakes */
    peer_server_up(&cfg, 2, 0, "sync");
    /* The server accepts connections in the order they were made. */
    for (int i = 0; i < 4; i++)
        peer_open(&idle[i]);
    peer_expect_refusal(&idle[0], SHARDPS__MSG_TYPE__REJECT, "waited longest", "idle 0");
    peer_expect_refusal(&idle[1], SHARDPS__MSG_TYPE__REJECT, "waited longest", "idle 1");
    /* A worker makes the third handshake: idle 2 gives way. Admitted, the
     * worker holds a worker's slot, so the other worker fits beside idle 3.
     * Both are welcomed. */
    peer_join(&r0, 0, 2);
    peer_expect_refusal(&idle[2], SHARDPS__MSG_TYPE__REJECT, "waited longest", "idle 2");
    peer_join(&r1, 1, 2);
    peer_close(&idle[3]);
    peer_close(&r0);
    peer_close(&r1);
}

/* Cause 3: a connection that never says HELLO is closed after the handshake
 * timeout, even with heartbeats off. */
Test(hostile, silent_connection_times_out_without_heartbeats)
{
    ps_kv_server_config cfg;
    int fd;

    kv_fixture_config(&cfg);
    cfg.heartbeat_timeout_ms = 0;
    cfg.handshake_timeout_ms = 200;
    peer_server_up(&cfg, 1, 0, "sync");
    fd = raw_connect();
    expect_closed(fd, "a connection that never says HELLO");
}

/* --max-grad-norm: a finite but absurd gradient is refused per chunk (the
 * push is acknowledged with every chunk dropped) and the model unchanged. */
Test(hostile, gradient_over_the_norm_limit_is_refused)
{
    ps_kv_server_config cfg;
    peer r0;
    float *w0 = malloc(sizeof(float) * 4096), *w = malloc(sizeof(float) * 4096);

    kv_fixture_config(&cfg);
    cfg.max_grad_norm = 10;
    peer_server_up(&cfg, 1, 0, "sync");
    cr_assert_leq(ks.total, 4096);
    peer_join(&r0, 0, 1);
    peer_pull(&r0, 0);
    peer_pull_reply(&r0, w0, "step 0");
    peer_push(&r0, 0, 1e6f);
    cr_assert_eq(peer_push_reply(&r0, "push 1e6"), ks.n, "every chunk is over the norm");
    peer_pull(&r0, 1);
    peer_pull_reply(&r0, w, "step 1");
    for (size_t i = 0; i < ks.total; i++)
        cr_assert(w[i] == w0[i], "weight %zu moved to %g", i, (double)w[i]);
    peer_close(&r0);
    free(w0);
    free(w);
}

/* A HELLO of rank/world with the job settings and planned steps given
 * (settings NULL: none, as a stranger sends); returns 1 and the joined peer
 * on a WELCOME, 0 (peer closed) when the server asks to come back: the
 * rank's previous connection not yet seen closing, or a table being
 * withdrawn. */
static int peer_try_join_plan(peer *p, uint32_t rank, uint32_t world, const char *settings,
                              uint64_t total_steps)
{
    Shardps__Header h;
    Shardps__Hello hello;
    ps_frame f;

    peer_open(p);
    make_hello_as(&h, &hello, &fx.spec, rank, world);
    hello.job_settings = (char *)settings;
    hello.total_steps = total_steps;
    raw_send_frame(p->fd, &h);
    raw_read_frame(p->fd, p->dec, &f, "join");
    if (f.hdr->type == SHARDPS__MSG_TYPE__WELCOME) {
        p->clock = f.hdr->welcome->clock;
        return 1;
    }
    cr_assert(f.hdr->status == -EADDRINUSE || f.hdr->status == -EAGAIN, "join refused: %s",
              f.hdr->reason ? f.hdr->reason : "");
    peer_close(p);
    return 0;
}

/* Issue 22, cause 6: a HELLO with no job settings, planning 2^64-1 steps,
 * then gone. The server kept the largest plan any HELLO named and fed the
 * cosine schedule with it. The span is now the servers' to decide: set, or
 * fixed when training starts from the plans of the ranks there, each HELLO
 * having passed the settings comparison; a HELLO without settings takes the
 * servers' and plans nothing. The rate of step 1 shows the span: cosine
 * over 4 steps, not over 2^64-1 (where it is still the base rate). */
Test(hostile, a_stranger_does_not_set_the_schedule)
{
    static const char settings[] = "mode=sync\nlr-schedule=cosine\n";
    ps_kv_server_config cfg;
    peer stranger, r0, r1;
    float *w1, *w2;
    double want = LR * 0.5 * (1 + cos(M_PI / 4));

    kv_fixture_config(&cfg);
    cfg.lr.kind = PS_LR_COSINE;
    cfg.lr.total_steps = 0;
    cfg.job_settings = settings;
    peer_server_up(&cfg, 2, 0, "sync");
    w1 = malloc(ks.total * sizeof(float));
    w2 = malloc(ks.total * sizeof(float));
    cr_assert_eq(peer_try_join_plan(&stranger, 1, 2, NULL, UINT64_MAX), 1);
    peer_close(&stranger);
    while (!peer_try_join_plan(&r0, 0, 2, settings, 4))
        ;
    while (!peer_try_join_plan(&r1, 1, 2, settings, 4))
        ;
    for (uint64_t step = 0; step < 2; step++) {
        peer_pull(&r0, step);
        peer_pull(&r1, step);
        peer_pull_reply(&r0, w1, "rank 0 pulls");
        peer_pull_reply(&r1, w1, "rank 1 pulls");
        peer_push(&r0, step, 1.0f);
        peer_push(&r1, step, 1.0f);
        peer_push_reply(&r0, "rank 0 pushes");
        peer_push_reply(&r1, "rank 1 pushes");
    }
    peer_pull(&r0, 2);
    peer_pull_reply(&r0, w2, "step 2");
    /* SGD without momentum: step 1 moved every weight by its rate. */
    for (size_t i = 0; i < ks.total; i++)
        cr_assert_float_eq(w1[i] - w2[i], want, 1e-6, "weight %zu moved %g, want %g", i,
                           (double)(w1[i] - w2[i]), want);
    peer_close(&r0);
    peer_close(&r1);
    free(w1);
    free(w2);
}
