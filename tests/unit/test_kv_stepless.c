/* A server none of whose chunks is ever pushed (issue 34 point 13, issue
 * 33 point 1): real servers on one loop in a second thread, two libshardps
 * ranks of a model whose placement leaves one server with buffers and
 * frozen tensors only, the shape of a frozen backbone fine-tuned on two
 * servers. Before, that server never advanced its clock: in sync mode every
 * pull past clock 0 waited for good ("step 1 is waiting for ranks 0, 1 of 2
 * to push it"), in async its ceiling refused the workers' clocks ("pull for
 * clock 2 from a worker at clock 1: clock past what the mode allows"), and
 * it checkpointed nothing ("no step has been applied"). Now:
 *  - the job trains in sync and in async, the parameters moving by exactly
 *    the steps' mean gradients, the frozen tensor as rank 0 declared it, the
 *    buffer as rank 0 writes it;
 *  - with checkpoints every 2 steps both servers write the same clocks, and
 *    that set restored onto 3 servers (which leaves the new server 2 a
 *    buffer alone: the restore that hung) trains on from where it stopped. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#include "kv_server.h"
#include "partition.h"
#include "shardps.h"

#define MAX_SERVERS 3
#define LR          0.125f
#define HEAD        40 /* placed first, alone on server 0 */
#define BACKBONE    32 /* frozen: server 1 */
#define BN          20 /* a buffer: server 1 of 2, server 2 of 3 */

/* The servers under test, on one loop in one thread. */
typedef struct {
    uv_loop_t loop;
    uv_async_t stop;
    pthread_t thread;
    int n;
    ps_kv_server *srv[MAX_SERVERS];
    char addr[MAX_SERVERS][32];
    const char *addrs[MAX_SERVERS];
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int done; /* servers whose job is over, under lock */
    int checkpoint_at_end;
    int sync;
} cluster;

static cluster cl;
static char dir[64];

static void on_stop(uv_async_t *a)
{
    for (int i = 0; i < cl.n; i++)
        ps_kv_server_stop(cl.srv[i]);
    uv_close((uv_handle_t *)a, NULL);
}

/* The job is over on server s: it checkpoints as shardps-server does then. */
static void on_done(ps_kv_server *s, void *arg)
{
    (void)arg;
    if (cl.checkpoint_at_end)
        ps_kv_server_checkpoint(s, "end");
    pthread_mutex_lock(&cl.lock);
    cl.done++;
    pthread_cond_signal(&cl.cond);
    pthread_mutex_unlock(&cl.lock);
}

static void *loop_thread(void *arg)
{
    (void)arg;
    uv_run(&cl.loop, UV_RUN_DEFAULT);
    return NULL;
}

static void config(ps_kv_server_config *cfg, int index, int n, uint32_t staleness)
{
    memset(cfg, 0, sizeof(*cfg));
    ps_optimizer_defaults(&cfg->opt, PS_OPT_SGD);
    cfg->opt.momentum = 0.0f;
    cfg->lr.base_lr = LR;
    cfg->server_index = index;
    cfg->num_servers = n;
    cfg->chunk_bytes = PS_DEFAULT_CHUNK_BYTES;
    cfg->world = 2;
    cfg->staleness = staleness;
    cfg->mode = staleness == 0 ? PS_MODE_SYNC : PS_MODE_ASYNC;
    cfg->max_payload = (size_t)1 << 20;
    cfg->reject_nonfinite = 1;
    cfg->handshake_timeout_ms = 600000;
}

/* n servers, restored from dir first when restore is set; checkpoints into
 * dir every `every` steps when every is not 0. */
static void cluster_up(int n, uint32_t staleness, uint32_t every, int restore)
{
    struct sockaddr_in addr;

    signal(SIGPIPE, SIG_IGN);
    memset(&cl, 0, sizeof(cl));
    cl.n = n;
    cl.checkpoint_at_end = every != 0;
    cl.sync = staleness == 0;
    pthread_mutex_init(&cl.lock, NULL);
    pthread_cond_init(&cl.cond, NULL);
    cr_assert_eq(uv_loop_init(&cl.loop), 0);
    cr_assert_eq(uv_ip4_addr("127.0.0.1", 0, &addr), 0);
    for (int i = 0; i < n; i++) {
        ps_kv_server_config cfg;
        char err[2048];
        int port;
        config(&cfg, i, n, staleness);
        if (every || restore) {
            cfg.checkpoint_dir = dir;
            cfg.checkpoint_every = every;
            cfg.keep_checkpoints = 10;
        }
        cr_assert_eq(ps_kv_server_init(&cl.srv[i], &cl.loop, &cfg, on_done, NULL), 0);
        if (restore)
            cr_assert_eq(ps_kv_server_restore(cl.srv[i], UINT64_MAX, err, sizeof(err)), 0,
                         "server %d: %s", i, err);
        cr_assert_eq(ps_kv_server_start(cl.srv[i], (const struct sockaddr *)&addr, &port), 0);
        snprintf(cl.addr[i], sizeof(cl.addr[i]), "127.0.0.1:%d", port);
        cl.addrs[i] = cl.addr[i];
    }
    cr_assert_eq(uv_async_init(&cl.loop, &cl.stop, on_stop), 0);
    cr_assert_eq(pthread_create(&cl.thread, NULL, loop_thread, NULL), 0);
}

/* Waits for every server's job to end, then stops them. */
static void cluster_down(void)
{
    pthread_mutex_lock(&cl.lock);
    while (cl.done < cl.n)
        pthread_cond_wait(&cl.cond, &cl.lock);
    pthread_mutex_unlock(&cl.lock);
    cr_assert_eq(uv_async_send(&cl.stop), 0);
    cr_assert_eq(pthread_join(cl.thread, NULL), 0);
    for (int i = 0; i < cl.n; i++)
        ps_kv_server_close(cl.srv[i]);
    cr_assert_eq(uv_loop_close(&cl.loop), 0);
}

typedef struct {
    int rank;
    uint64_t steps; /* to train, from the start clock */
    uint64_t start; /* the clock the job welcomed it at */
    float head0;    /* head[0] at the start clock */
    int sync;
    float head[HEAD], backbone[BACKBONE], bn[BN]; /* declared */
    int ok;
    char why[512];
} rank_state;

/* What each rank declares (rank 0's values are the job's), into r's
 * arrays, which the handle borrows until it has connected. */
static void declare(shardps *h, rank_state *r)
{
    for (int i = 0; i < HEAD; i++)
        r->head[i] = (r->rank == 0 ? 1.0f : -9.0f) + (float)i;
    for (int i = 0; i < BACKBONE; i++)
        r->backbone[i] = (r->rank == 0 ? 2.0f : -9.0f) * (float)i;
    for (int i = 0; i < BN; i++)
        r->bn[i] = r->rank == 0 ? 0.5f : -9.0f;
    cr_assert_eq(shardps_declare_values(h, "head", 1, (int64_t[]){HEAD}, SHARDPS_KIND_PARAMETER,
                                        SHARDPS_DTYPE_FLOAT32, r->head, sizeof(r->head)),
                 0, "%s", shardps_last_error(h));
    cr_assert_eq(shardps_declare_values(h, "backbone", 1, (int64_t[]){BACKBONE},
                                        SHARDPS_KIND_FROZEN, SHARDPS_DTYPE_FLOAT32, r->backbone,
                                        sizeof(r->backbone)),
                 0, "%s", shardps_last_error(h));
    cr_assert_eq(shardps_declare_values(h, "bn", 1, (int64_t[]){BN}, SHARDPS_KIND_BUFFER,
                                        SHARDPS_DTYPE_FLOAT32, r->bn, sizeof(r->bn)),
                 0, "%s", shardps_last_error(h));
}

static int fail_with(rank_state *r, shardps *h)
{
    snprintf(r->why, sizeof(r->why), "%s", shardps_last_error(h));
    return -1;
}

/* The pulled values at step (from start) are what the job gives them. */
static int check(rank_state *r, uint64_t step, const float *head, const float *backbone,
                 const float *bn)
{
    float want = r->head0;

    /* Sync: each step applies the mean gradient, 1.5. Async applies each
     * push as it comes (1 or 2): at least step of them have. */
    for (uint64_t s = 0; s < step; s++)
        want -= LR * (r->sync ? 1.5f : 1.0f);
    if ((r->sync ? head[0] != want : head[0] > want) ||
        backbone[BACKBONE - 1] != 2.0f * (BACKBONE - 1)) {
        snprintf(r->why, sizeof(r->why), "step %llu: head[0] %g (want %g), backbone %g",
                 (unsigned long long)step, (double)head[0], (double)want,
                 (double)backbone[BACKBONE - 1]);
        return -1;
    }
    /* Rank 0 sees its own write of the step before (it goes out before its
     * pull). A buffer on a server without a step of its own is refreshed as
     * it comes: in sync mode rank 1 sees it one step either side; in async
     * the ranks are not in step at all. */
    float mine = 0.5f + (float)(r->start + step);
    int bad = r->rank == 0 ? bn[0] != mine
              : r->sync    ? bn[0] + 1.0f < mine || bn[0] > mine + 1.0f
                           : bn[0] < 0.5f;
    if (bad) {
        snprintf(r->why, sizeof(r->why), "step %llu: bn[0] %g", (unsigned long long)step,
                 (double)bn[0]);
        return -1;
    }
    return 0;
}

static int train(rank_state *r, shardps *h)
{
    float head[HEAD], backbone[BACKBONE], bn[BN], g[HEAD];
    float *dest[3] = {head, backbone, bn};
    const size_t counts[3] = {HEAD, BACKBONE, BN};

    for (int i = 0; i < HEAD; i++)
        g[i] = (float)(r->rank + 1);
    if (shardps_connect(h) < 0 || shardps_start_clock(h, &r->start) < 0)
        return fail_with(r, h);
    for (uint64_t step = 0; step <= r->steps; step++) {
        if (shardps_pull_into(h, r->start + step, dest, counts, 3) < 0 || shardps_wait(h) < 0)
            return fail_with(r, h);
        if (step == 0)
            r->head0 = head[0];
        if (check(r, step, head, backbone, bn) < 0)
            return -1;
        if (step == r->steps)
            break;
        if (r->rank == 0) {
            float next[BN];
            for (int i = 0; i < BN; i++)
                next[i] = bn[i] + 1.0f;
            if (shardps_write_buffers(h, (const void *[]){NULL, NULL, next},
                                      (size_t[]){0, 0, sizeof(next)}, 3) < 0)
                return fail_with(r, h);
        }
        if (shardps_push(h, 0, g, HEAD) < 0)
            return fail_with(r, h);
    }
    return 0;
}

static void *run_rank(void *arg)
{
    rank_state *r = arg;
    shardps *h;

    if (shardps_new(&h, cl.addrs, cl.n, r->rank, 2) < 0) {
        snprintf(r->why, sizeof(r->why), "%s", shardps_last_error(NULL));
        return NULL;
    }
    /* A server that holds a step back fails the rank in seconds, naming
     * what it waits for, rather than the test's timeout. */
    if (shardps_set_option(h, "request-timeout", "5") < 0 ||
        shardps_set_option(h, "connect-timeout", "10") < 0 ||
        shardps_set_option(h, "log-level", "none") < 0) {
        fail_with(r, h);
        shardps_abandon(h);
        return NULL;
    }
    declare(h, r);
    r->ok = train(r, h) == 0;
    shardps_close(h);
    return NULL;
}

/* Both ranks train steps steps from where the job is; returns the clock
 * they started at. */
static uint64_t job(uint64_t steps)
{
    static rank_state r[2];
    pthread_t t[2];

    for (int k = 0; k < 2; k++) {
        memset(&r[k], 0, sizeof(r[k]));
        r[k].rank = k;
        r[k].steps = steps;
        r[k].sync = cl.sync;
        cr_assert_eq(pthread_create(&t[k], NULL, run_rank, &r[k]), 0);
    }
    for (int k = 0; k < 2; k++) {
        cr_assert_eq(pthread_join(t[k], NULL), 0);
        cr_assert(r[k].ok, "rank %d: %s", k, r[k].why);
    }
    cr_assert_eq(r[0].start, r[1].start);
    return r[0].start;
}

/* The server each tensor of the model lies on, for n servers. */
static void expect_placement(int n, const int *want)
{
    ps_model_spec spec;
    ps_partition *part;

    memset(&spec, 0, sizeof(spec));
    cr_assert_eq(ps_model_spec_add_tensor(&spec, "head", 1, (int[]){HEAD}, PS_INIT_ZERO, 1, 1), 0);
    cr_assert_eq(
        ps_model_spec_add_tensor(&spec, "backbone", 1, (int[]){BACKBONE}, PS_INIT_ZERO, 1, 1), 0);
    cr_assert_eq(ps_model_spec_add_tensor(&spec, "bn", 1, (int[]){BN}, PS_INIT_ZERO, 1, 1), 0);
    cr_assert_eq(ps_partition_init(&part, &spec, n, PS_DEFAULT_CHUNK_BYTES), 0);
    for (int t = 0; t < 3; t++)
        cr_assert_eq(ps_partition_chunk(part, t)->server, want[t], "tensor %d on %d servers", t, n);
    ps_partition_free(part);
    ps_model_spec_free(&spec);
}

static void setup(void)
{
    snprintf(dir, sizeof(dir), "/tmp/test_kv_stepless.XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    expect_placement(2, (int[]){0, 1, 1});
    expect_placement(3, (int[]){0, 1, 2});
}

static void teardown(void)
{
    char cmd[128];

    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

static int exists(uint32_t server, uint64_t clock)
{
    char path[160];
    struct stat st;

    snprintf(path, sizeof(path), "%s/server-%u-clock-%012llu.ckpt", dir, server,
             (unsigned long long)clock);
    return stat(path, &st) == 0;
}

Test(kv_stepless, a_sync_job_trains_past_a_server_of_frozen_tensors_and_buffers, .init = setup,
     .fini = teardown, .timeout = 60)
{
    cluster_up(2, 0, 0, 0);
    cr_assert_eq(job(5), 0);
    cluster_down();
}

Test(kv_stepless, an_async_job_trains_past_a_server_of_frozen_tensors_and_buffers, .init = setup,
     .fini = teardown, .timeout = 60)
{
    cluster_up(2, PS_STALENESS_UNBOUNDED, 0, 0);
    cr_assert_eq(job(5), 0);
    cluster_down();
}

Test(kv_stepless, its_checkpoints_keep_the_jobs_clocks_and_restore_onto_three_servers,
     .init = setup, .fini = teardown, .timeout = 90)
{
    cluster_up(2, 0, 2, 0);
    cr_assert_eq(job(4), 0);
    cluster_down();
    /* Server 1 holds no parameter: its files are at the job's clocks too,
     * so the set of each clock is whole. */
    for (uint32_t s = 0; s < 2; s++)
        for (uint64_t c = 2; c <= 4; c += 2)
            cr_assert(exists(s, c), "server %u wrote no checkpoint at clock %llu", s,
                      (unsigned long long)c);
    /* Onto 3 servers the new server 2 holds the buffer alone; it trains on
     * from clock 4 with the others. */
    cluster_up(3, 0, 0, 1);
    cr_assert_eq(job(3), 4);
    cluster_down();
}
