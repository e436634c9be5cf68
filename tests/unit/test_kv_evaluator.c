/* The evaluator role against a real server in a thread (kv_fixture.h), with
 * raw sockets (kv_peer.h) sending exactly the evaluator's frames: it joins
 * the table the workers declared and holds no rank; evaluators have slots
 * of their own, so they can neither keep a worker out nor take every
 * handshake slot; its push is refused with the reason and the job goes on
 * as if it had never come; its pull is a snapshot answered while the sync
 * barrier holds the workers, carrying the lowest and highest steps applied
 * among its chunks; and the job ends while it is still connected. When
 * every evaluator slot is taken, the one that read least lately gives way
 * (issue 34, point 12); a table withdrawn before the start closes its
 * evaluators with the reason, with and without auth (point 1).
 * Synchronisation is by replies and by the server closing connections. */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "auth.h"
#include "kv_client.h"
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
 * still join, and an evaluator beyond the slots takes the slot of the one
 * there (which is closed) while a worker still gets in. */
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
    evaluator_join(&e2);
    expect_closed(e1.fd, "the evaluator that gave way");
    e1.fd = -1;
    /* Rank 1 is free, and a worker's connection is not an evaluator's. */
    peer_join(&r1, 1, 2);
    peer_close(&r0);
    peer_close(&r1);
    peer_close(&e1);
    peer_close(&e2);
}

/* A job of one worker, r0, admitted, on a server of max_connections: the
 * worker's and max_connections - 1 beside it, half of them for evaluators.
 * Returns room for a snapshot (ks.total floats; the caller frees it). */
static float *one_worker_job(int max_connections, peer *r0)
{
    ps_kv_server_config cfg;
    float *w;

    kv_fixture_config(&cfg);
    cfg.max_connections = max_connections;
    peer_server_up(&cfg, 1, 0, "sync");
    w = malloc(ks.total * sizeof(float));
    cr_assert_not_null(w);
    peer_join(r0, 0, 1);
    return w;
}

/* A snapshot pull and its reply, after a pause that puts it later on the
 * server's millisecond clock than whatever happened before it. */
static void read_snapshot(peer *e, float *w, const char *what)
{
    uint64_t lo, hi;

    usleep(20 * 1000);
    peer_pull(e, 0);
    snapshot_reply(e, w, &lo, &hi, what);
}

/* Issue 34, point 12: strangers that take every evaluator slot and hold it
 * keep nobody out. The evaluator that has gone longest without a pull gives
 * way to a newcomer, closed without an ERROR as a silent one is, so that
 * the job's evaluator reconnects if it was the one; an evaluator that reads
 * keeps its slot while newcomers take the idle ones'. Before, the newcomer
 * was refused ("all 2 evaluator slots ... are taken") for as long as the
 * strangers stayed. */
Test(evaluator, a_slot_held_without_reading_gives_way)
{
    peer r0, s1, s2, s3, e;
    float *w = one_worker_job(6, &r0); /* 2 evaluator slots */

    evaluator_join(&s1);
    usleep(20 * 1000);
    evaluator_join(&e);
    read_snapshot(&e, w, "the job's evaluator");
    /* Both slots are taken: the stranger, which never read, gives way. */
    evaluator_join(&s2);
    expect_closed(s1.fd, "the first stranger");
    s1.fd = -1;
    /* The job's evaluator reads after the second stranger came: the
     * stranger has read least lately, and gives way to the third. */
    read_snapshot(&e, w, "after the second stranger");
    evaluator_join(&s3);
    expect_closed(s2.fd, "the second stranger");
    s2.fd = -1;
    read_snapshot(&e, w, "after the third stranger");
    peer_close(&s1);
    peer_close(&s2);
    peer_close(&s3);
    peer_close(&e);
    peer_close(&r0);
    free(w);
}

/* The job's evaluator as shardps-eval --follow connects it: a library
 * client (kv_client.h) in the evaluator's role. */
static ps_kv_client *library_evaluator(void)
{
    const char *servers[1] = {fx.addr};
    ps_kv_client_config cfg = {.servers = servers,
                               .n_servers = 1,
                               .chunk_bytes = CHUNK_BYTES,
                               .connect_timeout_s = 5.0,
                               .request_timeout_s = 5.0,
                               .max_payload = (size_t)1 << 20,
                               .evaluator = 1};
    ps_kv_client *c = NULL;
    uint64_t clock;

    cr_assert_eq(ps_kv_client_init(&c, &cfg), 0);
    cr_assert_eq(ps_kv_client_connect(c, &clock), 0, "%s", ps_kv_client_last_error(c));
    return c;
}

/* A snapshot into w, one tensor after another (ks.total floats). Returns
 * the client's code. */
static int library_snapshot(ps_kv_client *c, float *w)
{
    float *params[64];
    size_t at = 0;
    int rc;

    cr_assert_lt(fx.spec.n_tensors, 64);
    for (int t = 0; t < fx.spec.n_tensors; t++) {
        params[t] = w + at;
        at += fx.spec.tensors[t].numel;
    }
    rc = ps_kv_client_pull(c, 0, params);
    return rc < 0 ? rc : ps_kv_client_wait(c);
}

/* The job's evaluator made to give way (here a stranger takes the one
 * slot) sees its connection lost, not a refusal: shardps-eval --follow
 * reconnects on a lost connection (follow.c) and ends on anything else.
 * Reconnected, it takes the slot back from the stranger, which never
 * read. */
Test(evaluator, the_evaluator_made_to_give_way_sees_a_lost_connection)
{
    peer r0, s1;
    float *w = one_worker_job(3, &r0); /* 1 evaluator slot */
    ps_kv_client *e = library_evaluator();
    int rc;

    cr_assert_eq(library_snapshot(e, w), 0, "%s", ps_kv_client_last_error(e));
    evaluator_join(&s1);
    rc = library_snapshot(e, w);
    cr_assert(ps_error_is_connection_loss(rc), "the evaluator that gave way got %d (%s)", rc,
              ps_kv_client_last_error(e));
    ps_kv_client_abandon(e);
    e = library_evaluator();
    expect_closed(s1.fd, "the stranger");
    s1.fd = -1;
    cr_assert_eq(library_snapshot(e, w), 0, "%s", ps_kv_client_last_error(e));
    ps_kv_client_close(e);
    peer_close(&s1);
    peer_close(&r0);
    free(w);
}

/* ---- a withdrawn table (issue 34, point 1) ------------------------------- */

static const uint8_t auth_key[PS_AUTH_KEY_BYTES] = {7, 1, 2, 3, 4, 5, 6, 7, 8, 9};

/* p's HELLO h, proven with auth_key (--auth-token-file): the HELLO alone
 * (its TABLE, if it declares one, must wait for the proof), the server's
 * challenge checked, our answer. */
static void auth_prove(peer *p, Shardps__Header *h)
{
    uint8_t nonce[PS_AUTH_NONCE_BYTES], mac[PS_AUTH_MAC_BYTES];
    ps_frame f;
    Shardps__Header r = SHARDPS__HEADER__INIT;

    ps_auth_nonce(nonce);
    h->hello->client_nonce.len = sizeof(nonce);
    h->hello->client_nonce.data = nonce;
    peer_send(p, h, NULL, 0);
    peer_expect(p, SHARDPS__MSG_TYPE__AUTH_CHALLENGE, &f, "challenge");
    cr_assert_eq(f.hdr->auth_nonce.len, PS_AUTH_NONCE_BYTES);
    cr_assert(ps_auth_check(auth_key, "server", nonce, f.hdr->auth_nonce.data, f.hdr->auth_mac.data,
                            f.hdr->auth_mac.len),
              "the server proves the token");
    ps_auth_mac(auth_key, "worker", f.hdr->auth_nonce.data, nonce, mac);
    r.type = SHARDPS__MSG_TYPE__AUTH_RESPONSE;
    r.request_id = h->request_id;
    r.auth_mac.len = sizeof(mac);
    r.auth_mac.data = mac;
    peer_send(p, &r, NULL, 0);
}

/* A declarer of rank of 2 (proven first with auth), retried while the old
 * table drains (-EAGAIN), as ps_kv_client retries. */
static void declarer_join(peer *p, uint32_t rank, int auth)
{
    Shardps__Header h, t = SHARDPS__HEADER__INIT;
    Shardps__Hello hello;
    uint8_t *packed;
    size_t len;
    ps_frame f;

    cr_assert_eq(ps_tensor_table_pack(&fx.spec, &packed, &len), 0);
    for (;;) {
        peer_open(p);
        make_hello_as(&h, &hello, &fx.spec, rank, 2);
        if (auth) {
            auth_prove(p, &h);
            t.type = SHARDPS__MSG_TYPE__TABLE;
            t.request_id = h.request_id;
            peer_send(p, &t, packed, len);
        } else {
            raw_send_frame(p->fd, &h); /* with its TABLE */
        }
        raw_read_frame(p->fd, p->dec, &f, "declarer");
        if (f.hdr->type == SHARDPS__MSG_TYPE__WELCOME)
            break;
        cr_assert(f.hdr->type == SHARDPS__MSG_TYPE__REJECT && f.hdr->status == -EAGAIN,
                  "declarer refused: %s", f.hdr->reason ? f.hdr->reason : "");
        peer_close(p);
        usleep(10 * 1000);
    }
    free(packed);
}

/* An evaluator admitted (proven first with auth). */
static void evaluator_join_as(peer *p, int auth)
{
    Shardps__Header h;
    Shardps__Hello hello;
    ps_frame f;

    if (!auth) {
        evaluator_join(p);
        return;
    }
    peer_open(p);
    make_hello_as(&h, &hello, &fx.spec, 0, 0);
    hello.role = SHARDPS__ROLE__ROLE_EVALUATOR;
    hello.table_digest.len = 0;
    auth_prove(p, &h);
    peer_expect(p, SHARDPS__MSG_TYPE__TABLE, &f, "proven evaluator's table");
    peer_expect(p, SHARDPS__MSG_TYPE__WELCOME, &f, "proven evaluator");
}

/* A table withdrawn before the start (its last declarer left) closes the
 * evaluators that joined it, told why, as it closes its workers: one left
 * admitted would read, or leave with a held pull against, a table that is
 * gone (on 26cad0c its pull or its leaving touched the freed apply queue:
 * SIGSEGV, or UBSan in ps_apply_queue_hold_from). The server then serves a
 * table declared anew to a new evaluator. With auth, the evaluator holds
 * the token and the worker that declared the table dies before the first
 * step. */
static void withdrawn_table_closes_its_evaluator(int auth)
{
    ps_kv_server_config cfg;
    peer r0, r1, e, e2;
    float *w;
    uint64_t lo, hi;

    kv_fixture_config(&cfg);
    cfg.table = NULL;
    cfg.auth = auth;
    memcpy(cfg.auth_key, auth_key, sizeof(auth_key));
    peer_server_up(&cfg, 2, 0, "sync");
    w = malloc(ks.total * sizeof(float));
    cr_assert_not_null(w);
    declarer_join(&r0, 0, auth);
    evaluator_join_as(&e, auth);
    /* Held: no snapshot before the job starts. */
    peer_pull(&e, 0);
    /* The declarer dies before the first step. */
    peer_close(&r0);
    peer_expect_refusal(&e, SHARDPS__MSG_TYPE__ERROR,
                        "the tensor table this evaluator read was withdrawn",
                        "the evaluator of the withdrawn table");
    /* The job declared anew; a new evaluator reads it. */
    declarer_join(&r0, 0, auth);
    declarer_join(&r1, 1, auth);
    evaluator_join_as(&e2, auth);
    peer_pull(&e2, 0);
    snapshot_reply(&e2, w, &lo, &hi, "the table declared anew");
    cr_assert_eq(lo, 0);
    peer_close(&e2);
    peer_close(&r0);
    peer_close(&r1);
    free(w);
}

Test(evaluator, a_withdrawn_table_closes_its_evaluators)
{
    withdrawn_table_closes_its_evaluator(0);
}

Test(evaluator, with_auth_a_withdrawn_table_closes_its_evaluators)
{
    withdrawn_table_closes_its_evaluator(1);
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
