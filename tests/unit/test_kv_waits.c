/* A job held by other workers, end to end in one process: a real server (in
 * the fixture's thread) and real clients (ps_kv_client) over loopback.
 * - The server explains a pull it holds (WAITING), naming the ranks: before
 *   the job starts, in sync for a missing push, in ssp for a rank beyond the
 *   staleness bound; a client that then times out names them, not the
 *   server.
 * - A client's stop flag ends a connect at once, and a wait the server
 *   holds for other workers once the client's pushes are acknowledged,
 *   with -EINTR and the sentence of what it waited for; a step that
 *   completes as usual is not cut.
 * The server explains after 100 ms here (wait_report_ms) and the clients
 * give up after 1 s (their request timeout): the timeout is the event each
 * test waits for, and no test sleeps. */
#include <criterion/criterion.h>

#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "kv_client.h"
#include "kv_fixture.h"
#include "kv_server.h"
#include "partition.h"
#include "ps_error.h"

typedef struct {
    float *t[PS_MAX_TENSORS];
} bufs;

static void bufs_alloc(bufs *b)
{
    for (int i = 0; i < fx.spec.n_tensors; i++) {
        b->t[i] = calloc(fx.spec.tensors[i].numel, sizeof(float));
        cr_assert_not_null(b->t[i]);
    }
}

static void bufs_free(bufs *b)
{
    for (int i = 0; i < fx.spec.n_tensors; i++)
        free(b->t[i]);
}

/* A server for world workers with the given staleness (0: sync), which
 * explains a pull held for 100 ms. */
static void up(int world, uint32_t staleness)
{
    ps_kv_server_config cfg;

    kv_fixture_config(&cfg);
    cfg.world = world;
    cfg.staleness = staleness;
    cfg.mode = staleness ? PS_MODE_SSP : PS_MODE_SYNC;
    cfg.wait_report_ms = 100;
    server_up_with(&cfg);
}

/* A client of rank of world, connected when expect is 0; it gives up on a
 * server owing an answer after 1 s (a first pull: plus 1 s of connecting). */
static ps_kv_client *client(const char *addr, int rank, int world, int expect,
                            const volatile sig_atomic_t *stop)
{
    const char *servers[1] = {addr};
    ps_kv_client_config cfg = {0};
    ps_kv_client *c = NULL;
    uint64_t start;
    int rc;

    cfg.spec = fx.spec;
    cfg.rank = rank;
    cfg.world = world;
    cfg.servers = servers;
    cfg.n_servers = 1;
    cfg.chunk_bytes = CHUNK_BYTES;
    cfg.connect_timeout_s = 1.0;
    cfg.request_timeout_s = 1.0;
    cfg.max_payload = (size_t)1 << 20;
    cfg.stop = stop;
    cr_assert_eq(ps_kv_client_init(&c, &cfg), 0);
    rc = ps_kv_client_connect(c, &start);
    cr_assert_eq(rc, expect, "connect: %s, want %s (%s)", ps_err_name(rc), ps_err_name(expect),
                 ps_kv_client_last_error(c));
    return c;
}

/* Pulls clock into w and waits, which must end with want. */
static void pull(ps_kv_client *c, uint64_t clock, bufs *w, int want)
{
    int rc;

    cr_assert_eq(ps_kv_client_pull(c, clock, w->t), 0);
    rc = ps_kv_client_wait(c);
    cr_assert_eq(rc, want, "pull %llu: %s, want %s (%s)", (unsigned long long)clock,
                 ps_err_name(rc), ps_err_name(want), ps_kv_client_last_error(c));
}

static void push(ps_kv_client *c, const bufs *g)
{
    cr_assert_eq(ps_kv_client_push(c, (const float *const *)g->t), 0);
}

static void expect_error(const ps_kv_client *c, const char *want)
{
    cr_assert(strstr(ps_kv_client_last_error(c), want), "'%s' lacks '%s'",
              ps_kv_client_last_error(c), want);
}

TestSuite(kv_waits, .fini = server_down, .timeout = 60);

Test(kv_waits, before_the_start_the_missing_ranks_are_named)
{
    bufs w;
    ps_kv_client *a;

    up(3, 0);
    bufs_alloc(&w);
    a = client(fx.addr, 1, 3, 0, NULL);
    pull(a, 0, &w, -PS_ETIMEOUT);
    expect_error(a, "which is waiting for other workers: waiting for ranks 0, 2 of 3 to join");
    cr_assert_null(strstr(ps_kv_client_last_error(a), "sent nothing"));
    ps_kv_client_abandon(a);
    bufs_free(&w);
}

/* Two workers of a job with the given staleness, both joined: a (rank 0,
 * with stop) and b (rank 1, which does nothing); w and g their buffers. */
typedef struct {
    ps_kv_client *a, *b;
    bufs w, g;
} pair;

static void pair_up(pair *p, uint32_t staleness, const volatile sig_atomic_t *stop)
{
    up(2, staleness);
    bufs_alloc(&p->w);
    bufs_alloc(&p->g);
    p->a = client(fx.addr, 0, 2, 0, stop);
    p->b = client(fx.addr, 1, 2, 0, NULL);
    pull(p->a, 0, &p->w, 0);
}

static void pair_down(pair *p)
{
    ps_kv_client_abandon(p->a);
    ps_kv_client_abandon(p->b);
    bufs_free(&p->w);
    bufs_free(&p->g);
}

Test(kv_waits, sync_names_the_rank_whose_push_is_missing)
{
    pair p;

    pair_up(&p, 0, NULL);
    push(p.a, &p.g);
    pull(p.a, 1, &p.w, -PS_ETIMEOUT);
    expect_error(p.a, "which is waiting for other workers: step 1 is waiting for rank 1 of 2 to "
                      "push it");
    pair_down(&p);
}

Test(kv_waits, ssp_names_the_rank_beyond_the_bound)
{
    pair p;

    /* Rank 1 stays at clock 0; rank 0 may run one step ahead of it. */
    pair_up(&p, 1, NULL);
    push(p.a, &p.g);
    pull(p.a, 1, &p.w, 0);
    push(p.a, &p.g);
    pull(p.a, 2, &p.w, -PS_ETIMEOUT);
    expect_error(p.a, "which is waiting for other workers: step 3 is waiting for rank 1 of 2 to "
                      "come within --staleness 1");
    pair_down(&p);
}

Test(kv_waits, a_stop_ends_a_wait_once_the_pushes_are_in)
{
    static volatile sig_atomic_t stop;
    ps_kv_client_stats st;
    ps_partition *part;
    double t0;
    pair p;

    stop = 0;
    pair_up(&p, 0, &stop);
    /* Asked to stop with its step's pushes on the way: they are
     * acknowledged first, then the pull the job holds is given up, long
     * before the request timeout. */
    push(p.a, &p.g);
    stop = 1;
    t0 = ps_clock_now();
    pull(p.a, 1, &p.w, -EINTR);
    cr_assert_lt(ps_clock_now() - t0, 0.9, "the stop waited for the request timeout");
    expect_error(p.a, "stopped on request while waiting for server 0");
    expect_error(p.a, "to answer a pull");
    ps_kv_client_stats_get(p.a, &st);
    cr_assert_eq(ps_partition_init(&part, &fx.spec, 1, CHUNK_BYTES), 0);
    cr_assert_eq(st.acked, (uint64_t)ps_partition_chunk_count(part),
                 "%llu chunks acknowledged of %d", (unsigned long long)st.acked,
                 ps_partition_chunk_count(part));
    ps_partition_free(part);
    pair_down(&p);
}

/* A stop asked while a step completes as usual does not cut it: the pull
 * is answered, and the program stops at the step's boundary. */
Test(kv_waits, a_stop_lets_a_step_that_completes_end)
{
    static volatile sig_atomic_t stop;
    pair p;

    stop = 0;
    pair_up(&p, 0, &stop);
    push(p.b, &p.g);
    cr_assert_eq(ps_kv_client_wait(p.b), 0, "%s", ps_kv_client_last_error(p.b));
    push(p.a, &p.g);
    stop = 1;
    pull(p.a, 1, &p.w, 0);
    pair_down(&p);
}

Test(kv_waits, a_stop_ends_a_connect_at_once)
{
    static volatile sig_atomic_t stop = 1;
    ps_kv_client *c;

    up(1, 0);
    /* Nothing listens on port 1: without the stop this retries for 1 s. */
    c = client("127.0.0.1:1", 0, 1, -EINTR, &stop);
    expect_error(c, "stopped on request while waiting for server 0 (127.0.0.1:1) to accept a "
                    "connection");
    ps_kv_client_abandon(c);
}
