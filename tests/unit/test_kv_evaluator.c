/* The evaluator role against a real server in a thread (kv_fixture.h), with
 * raw sockets (kv_peer.h) sending exactly the evaluator's frames: it joins
 * the table the workers declared and holds no rank; evaluators have slots
 * of their own, so they can neither keep a worker out nor take every
 * handshake slot; its push is refused with the reason and the job goes on
 * as if it had never come; its pull is a snapshot answered while the sync
 * barrier holds the workers, carrying the lowest and highest steps applied
 * among its chunks; and the job ends while it is still connected.
 * Synchronisation is by replies and by the server closing connections. */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kv_fixture.h"
#include "kv_peer.h"
#include "ps_error.h"

TestSuite(evaluator, .fini = server_down, .timeout = 60);

/* Sends an evaluator's HELLO: no table, no rank. */
static void evaluator_hello(peer *p)
{
    Shardps__Header h;
    Shardps__Hello hello;

    peer_open(p);
    make_hello_as(&h, &hello, &fx.spec, 0, 0);
    hello.role = SHARDPS__ROLE__ROLE_EVALUATOR;
    hello.table_digest.len = 0;
    raw_send_frame(p->fd, &h);
}

static void evaluator_join(peer *p)
{
    ps_frame f;

    evaluator_hello(p);
    peer_expect(p, SHARDPS__MSG_TYPE__TABLE, &f, "evaluator's table");
    cr_assert_gt(f.payload_len, 0, "an evaluator learns the table from a TABLE frame");
    peer_expect(p, SHARDPS__MSG_TYPE__WELCOME, &f, "evaluator join");
    cr_assert_eq(f.hdr->welcome->table_digest.len, PS_TABLE_DIGEST_BYTES);
}

/* Reads a snapshot into w; its lowest and highest chunk steps into lo, hi. */
static void snapshot_reply(peer *p, float *w, uint64_t *lo, uint64_t *hi, const char *what)
{
    ps_frame f;

    peer_expect(p, SHARDPS__MSG_TYPE__PULL_REPLY, &f, what);
    cr_assert_eq(f.payload_len, ks.total * sizeof(float), "%s: reply size", what);
    memcpy(w, f.payload, f.payload_len);
    *lo = f.hdr->clock;
    *hi = f.hdr->clock + f.hdr->staleness;
}

/* A push of one key's chunk only (the client sends each chunk as its own
 * frame), every value v, at clock. */
static void push_first_key(peer *p, uint64_t clock, float v)
{
    Shardps__Header h = SHARDPS__HEADER__INIT;
    float *g = malloc(ks.numel[0] * sizeof(float));

    cr_assert_not_null(g);
    for (size_t i = 0; i < ks.numel[0]; i++)
        g[i] = v;
    h.type = SHARDPS__MSG_TYPE__PUSH;
    h.request_id = 2000 + clock;
    h.clock = clock;
    h.dtype = SHARDPS__DTYPE__DTYPE_F32;
    h.n_keys = 1;
    h.keys = ks.keys;
    peer_send(p, &h, g, ks.numel[0] * sizeof(float));
    free(g);
}

/* Before any worker declared the tensors there is nothing to read: come
 * back. Then it is admitted without a rank: both ranks of a 2-worker job
 * still join, and evaluators beyond their slots are told to come back while
 * a worker still gets in. */
Test(evaluator, holds_no_rank_and_no_worker_slot)
{
    ps_kv_server_config cfg;
    peer e1, e2, r0, r1;

    kv_fixture_config(&cfg);
    /* Two connections for the workers, one for a handshake, one for an
     * evaluator (validate.h); the tensors as a worker declares them. */
    cfg.max_connections = 3;
    cfg.table = NULL;
    peer_server_up(&cfg, 2, 0, "sync");
    evaluator_hello(&e1);
    peer_expect_refusal(&e1, SHARDPS__MSG_TYPE__REJECT, "no tensor table yet", "evaluator first");
    peer_join(&r0, 0, 2);
    evaluator_join(&e1);
    evaluator_hello(&e2);
    peer_expect_refusal(&e2, SHARDPS__MSG_TYPE__REJECT, "all 1 evaluator slots", "evaluator 2");
    /* Rank 1 is free, and a worker's connection is not an evaluator's. */
    peer_join(&r1, 1, 2);
    peer_close(&r0);
    peer_close(&r1);
    peer_close(&e1);
}

/* The refusal names the rule; the workers then train as if no evaluator had
 * come: the weights after one step are the worker's push applied alone. */
Test(evaluator, push_is_refused_and_the_job_goes_on)
{
    ps_kv_server_config cfg;
    peer e, r0;
    float *before, *after;

    kv_fixture_config(&cfg);
    peer_server_up(&cfg, 1, 0, "sync");
    before = malloc(ks.total * sizeof(float));
    after = malloc(ks.total * sizeof(float));
    cr_assert(before && after);
    peer_join(&r0, 0, 1);
    evaluator_join(&e);
    peer_push(&e, 0, 1000.0f);
    peer_expect_refusal(&e, SHARDPS__MSG_TYPE__ERROR, "an evaluator is read-only: it cannot push",
                        "evaluator push");
    peer_pull(&r0, 0);
    peer_pull_reply(&r0, before, "initial weights");
    peer_push(&r0, 0, 1.0f);
    cr_assert_eq(peer_push_reply(&r0, "push"), 0);
    peer_pull(&r0, 1);
    cr_assert_eq(peer_pull_reply(&r0, after, "step 1"), 1);
    for (size_t i = 0; i < ks.total; i++)
        cr_assert_float_eq(after[i], before[i] - LR * 1.0f, 1e-6, "weight %zu", i);
    peer_close(&r0);
    free(before);
    free(after);
}

/* Sync, 2 workers: rank 0 has pushed step 0 and waits for rank 1; the
 * evaluator's pull is not held with it, and shows step 0 everywhere. Once
 * rank 1 pushes, it shows step 1. The job then ends with the evaluator
 * still connected. */
Test(evaluator, snapshot_is_answered_while_the_barrier_holds)
{
    ps_kv_server_config cfg;
    peer e, r0, r1;
    float *w = NULL;
    uint64_t lo, hi;

    kv_fixture_config(&cfg);
    peer_server_up(&cfg, 2, 0, "sync");
    w = malloc(ks.total * sizeof(float));
    cr_assert_not_null(w);
    peer_join(&r0, 0, 2);
    peer_join(&r1, 1, 2);
    evaluator_join(&e);
    peer_push(&r0, 0, 1.0f);
    cr_assert_eq(peer_push_reply(&r0, "rank 0 push"), 0);
    peer_pull(&r0, 1); /* held: rank 1 has not pushed step 0 */
    peer_pull(&e, 0);
    snapshot_reply(&e, w, &lo, &hi, "snapshot during the barrier");
    cr_assert_eq(lo, 0);
    cr_assert_eq(hi, 0);
    peer_push(&r1, 0, 1.0f);
    cr_assert_eq(peer_push_reply(&r1, "rank 1 push"), 0);
    cr_assert_eq(peer_pull_reply(&r0, w, "rank 0 step 1"), 1);
    peer_pull(&e, 0);
    snapshot_reply(&e, w, &lo, &hi, "snapshot after step 0");
    cr_assert_eq(lo, 1);
    cr_assert_eq(hi, 1);
    peer_bye(&r0);
    peer_bye(&r1);
    wait_done();
    peer_close(&r0);
    peer_close(&r1);
    peer_close(&e);
    free(w);
}

/* Async: a push of one chunk moves that chunk alone; the snapshot says its
 * chunks span steps 0 to 1. */
Test(evaluator, snapshot_reports_its_lowest_and_highest_chunk_steps)
{
    ps_kv_server_config cfg;
    peer e, r0;
    float *w = NULL;
    uint64_t lo, hi;

    kv_fixture_config(&cfg);
    peer_server_up(&cfg, 1, UINT32_MAX, "async");
    cr_assert_gt(ks.n, 1, "the model spans several chunks");
    w = malloc(ks.total * sizeof(float));
    cr_assert_not_null(w);
    peer_join(&r0, 0, 1);
    evaluator_join(&e);
    push_first_key(&r0, 0, 1.0f);
    cr_assert_eq(peer_push_reply(&r0, "one chunk"), 0);
    peer_pull(&e, 0);
    snapshot_reply(&e, w, &lo, &hi, "snapshot");
    cr_assert_eq(lo, 0);
    cr_assert_eq(hi, 1);
    peer_close(&r0);
    peer_close(&e);
    free(w);
}
