/* Embedding rows over the wire (server/rows/rows.c, lib/transfer/kv_rows.c, the public
 * shardps_*_rows) against a real server in a thread (kv_fixture):
 *  - through libshardps, rows read as their initializer until pushed, a
 *    push's repeated IDs are summed, and the rows equal a plain-C per-row
 *    reference of the semantics bit for bit (SGD);
 *  - sync equivalence: two workers on the halves of each global batch give
 *    the very rows one worker gives on the whole batch (and the reference),
 *    bit for bit, over several steps, with gradients that depend on the
 *    rows pulled;
 *  - issue 24's bad input, each refused with the reason and the table
 *    unchanged: a table's dimension mismatched between ranks, a pull of 100
 *    million IDs (refused on its header, before a byte is buffered), an ID
 *    named twice, a payload whose size disagrees with its count, NaN rows;
 *  - the client's limits: a pull over --max-row-ids split into rounds, a
 *    push over it and a second push of a table in one step refused, and a
 *    rows pull the job holds explained (WAITING) as a dense pull is. */
#include <criterion/criterion.h>

#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kv_fixture.h"
#include "kv_peer.h"
#include "ps_error.h"
#include "row_init.h"
#include "row_optimizer.h"
#include "shardps.h"

#define DIM   4
#define SEED  1234
#define STEPS 4
/* Samples per worker per step: the global batch is W x B samples. */
#define B 6

static const int sizes[] = {5, 16, 3};
/* The server's wait_report_ms (0: its default). */
static uint32_t wait_ms;

static shardps_row_table emb(uint32_t dim)
{
    return (shardps_row_table){"emb", dim, SHARDPS_ROW_INIT_NORMAL, -0.5, 0.5, 0.0, 0.25, NULL, 0,
                               0,     0};
}

/* The fixture's server with the row table "emb" of dim DIM too. */
static void up(int world, uint64_t max_payload)
{
    ps_kv_server_config cfg;
    shardps_row_table t = emb(DIM);
    ps_row_table_spec r;

    kv_fixture_config(&cfg);
    memset(&r, 0, sizeof(r));
    strcpy(r.name, t.name);
    r.dim = DIM;
    r.init = (ps_row_init){PS_ROW_INIT_NORMAL, 0, t.mean, t.std, t.lo, t.hi};
    cr_assert_eq(ps_model_spec_add_row_table(&fx.spec, &r, NULL, 0), 0);
    cfg.world = world;
    cfg.max_payload = max_payload ? max_payload : cfg.max_payload;
    cfg.max_row_ids = 1024;
    cfg.wait_report_ms = wait_ms;
    server_up_with(&cfg);
}

static shardps *handle(int rank, int world, uint32_t dim)
{
    const char *addr[] = {fx.addr};
    shardps_row_table t = emb(dim);
    shardps *h;

    cr_assert_eq(shardps_new(&h, addr, 1, rank, world), 0);
    cr_assert_eq(shardps_set_option(h, "seed", "1234"), 0);
    cr_assert_eq(shardps_set_option(h, "chunk-bytes", "64"), 0);
    cr_assert_eq(shardps_set_option(h, "connect-timeout", "10"), 0);
    cr_assert_eq(shardps_set_option(h, "log-level", "none"), 0);
    cr_assert_eq(shardps_declare_mlp(h, sizes, 3), 0);
    cr_assert_eq(shardps_declare_rows(h, &t, sizeof(t)), 0, "%s", shardps_last_error(h));
    return h;
}

/* A row as the table's initializer gives it. */
static void init_row(uint64_t id, float *out)
{
    ps_row_init in = {PS_ROW_INIT_NORMAL, SEED, 0.0, 0.25, -0.5, 0.5};

    ps_row_init_values(&in, 0, id, 0, DIM, out);
}

/* The dense tensors' pull and a zero push: what a step does besides rows. */
typedef struct {
    float *w[8], *g[8];
    size_t numel[8];
    int n;
} dense;

static void dense_init(shardps *h, dense *d)
{
    d->n = shardps_tensor_count(h);
    for (int i = 0; i < d->n; i++) {
        cr_assert_eq(shardps_tensor_info(h, i, NULL, 0, &d->numel[i]), 0);
        d->w[i] = calloc(d->numel[i], sizeof(float));
        d->g[i] = calloc(d->numel[i], sizeof(float));
    }
}

static void dense_free(dense *d)
{
    for (int i = 0; i < d->n; i++) {
        free(d->w[i]);
        free(d->g[i]);
    }
}

/* ---- the plain-C reference of one table's semantics ----------------- */

typedef struct {
    uint64_t id[64];
    float w[64][DIM];
    int n;
} ref_table;

static float *ref_row(ref_table *t, uint64_t id)
{
    for (int i = 0; i < t->n; i++)
        if (t->id[i] == id)
            return t->w[i];
    cr_assert_lt(t->n, 64);
    t->id[t->n] = id;
    init_row(id, t->w[t->n]);
    return t->w[t->n++];
}

/* A sample's gradient for a row: depends on the row as pulled, so that a
 * wrong row read at any step changes every step after. */
static void sample_grad(const float *row, int sample, float scale, float *g)
{
    for (int k = 0; k < DIM; k++)
        g[k] = (row[k] * 0.75f + (float)(sample + 1) * 0.0625f - (float)k * 0.01f) * scale;
}

/* The global batch of step t: W x B IDs with repeats inside and across the
 * workers' halves, 0 and 2^64 - 1 among them. */
static uint64_t batch_id(int step, int i)
{
    static const uint64_t pool[] = {0, 7, UINT64_MAX, 42, 1ull << 63, 99, 7, 12345678901234567ull};

    return pool[(size_t)(step * 5 + i * 3) % (sizeof(pool) / sizeof(pool[0]))];
}

/* One step of the reference: each unique ID's gradient from the samples
 * of the step's global batch of world x B, computed on the rows at the
 * step's start, then the per-row SGD. One worker (halves 0) sums its
 * samples' gradients, each scaled by 1 / (W x B) (the mean over the global
 * batch), in batch order; W workers (halves 1) each sum their half's
 * scaled by 1 / B, the server adds the workers' sums and scales by 1 / W.
 * The two agree in exact arithmetic; in floats they sum in different
 * orders. */
static void ref_step(ref_table *t, int step, int world, int halves)
{
    ps_row_opt_config cfg;
    uint64_t ids[64];
    float sums[64][DIM], part[2][64][DIM], before[64][DIM], g[DIM], state[1];
    int n = 0, total = world * B;

    memset(&cfg, 0, sizeof(cfg));
    memset(part, 0, sizeof(part));
    ps_optimizer_defaults(&cfg.opt, PS_OPT_SGD);
    cfg.opt.momentum = 0.0f;
    for (int i = 0; i < total; i++) {
        uint64_t id = batch_id(step, i);
        int j = 0;
        while (j < n && ids[j] != id)
            j++;
        if (j == n) {
            ids[n] = id;
            memcpy(before[n], ref_row(t, id), sizeof(before[n]));
            memset(sums[n++], 0, sizeof(sums[0]));
        }
        sample_grad(before[j], i, halves ? 1.0f / (float)B : 1.0f / (float)total, g);
        for (int k = 0; k < DIM; k++) {
            if (halves)
                part[i / B][j][k] += g[k];
            else
                sums[j][k] += g[k];
        }
    }
    for (int j = 0; halves && j < n; j++)
        for (int k = 0; k < DIM; k++)
            sums[j][k] = (part[0][j][k] + part[1][j][k]) * (1.0f / (float)world);
    for (int j = 0; j < n; j++)
        cr_assert_eq(ps_row_opt_apply(&cfg, LR, ref_row(t, ids[j]), state, sums[j], DIM, 1), 0);
}

/* ---- a worker through libshardps ------------------------------------- */

typedef struct {
    int rank, world;
    float rows[STEPS + 1][8][DIM]; /* the rows of batch_id(STEPS, 0..7) after the steps */
    int rc;
    char why[512];
} worker;

/* STEPS steps of a worker: its half of each global batch's rows pulled,
 * each sample's gradient computed on them (scaled by 1 / B, its own mean;
 * the server divides by W), pushed; then the final rows of 8 IDs. */
static void *worker_run(void *arg)
{
    worker *wk = arg;
    shardps *h = handle(wk->rank, wk->world, DIM);
    int lo = wk->rank * B, n = B;
    uint64_t ids[B * 2], all[8];
    float rows[B * 2 * DIM], grads[B * 2 * DIM];
    dense d;

    wk->rc = shardps_connect(h);
    if (wk->rc < 0)
        goto out;
    dense_init(h, &d);
    for (int t = 0; t < STEPS && wk->rc == 0; t++) {
        if ((wk->rc = shardps_pull(h, (uint64_t)t, d.w, d.n)) < 0 || (wk->rc = shardps_wait(h)) < 0)
            break;
        for (int i = 0; i < n; i++)
            ids[i] = batch_id(t, lo + i);
        if ((wk->rc = shardps_pull_rows(h, 0, (uint64_t)t, ids, (size_t)n, rows, (size_t)n * DIM)) <
            0)
            break;
        for (int i = 0; i < n; i++)
            sample_grad(rows + i * DIM, lo + i, 1.0f / (float)B, grads + i * DIM);
        if ((wk->rc = shardps_push_rows(h, 0, ids, (size_t)n, grads, (size_t)n * DIM)) < 0)
            break;
        for (int i = 0; i < d.n && wk->rc == 0; i++)
            wk->rc = shardps_push(h, i, d.g[i], d.numel[i]);
        if (wk->rc == 0)
            wk->rc = shardps_wait(h);
    }
    if (wk->rc == 0 && (wk->rc = shardps_pull(h, STEPS, d.w, d.n)) == 0 &&
        (wk->rc = shardps_wait(h)) == 0) {
        for (int i = 0; i < 8; i++)
            all[i] = batch_id(STEPS, i);
        wk->rc = shardps_pull_rows(h, 0, STEPS, all, 8, &wk->rows[STEPS][0][0], 8 * DIM);
    }
    dense_free(&d);
out:
    snprintf(wk->why, sizeof(wk->why), "%s", shardps_last_error(h));
    shardps_close(h);
    return NULL;
}

TestSuite(rows, .fini = server_down, .timeout = 120);

Test(rows, a_pull_reads_the_initializer_and_a_push_sums_repeats)
{
    shardps *h;
    uint64_t ids[] = {7, 3, 7, UINT64_MAX}, bad = 1;
    float rows[4 * DIM], want[DIM], g[4 * DIM], got[4 * DIM];
    dense d;

    up(1, 0);
    h = handle(0, 1, DIM);
    cr_assert_eq(shardps_connect(h), 0, "%s", shardps_last_error(h));
    cr_assert_eq(shardps_row_table_find(h, "emb", NULL), 0);
    cr_assert_eq(shardps_row_table_find(h, "nope", NULL), -ENOENT);
    cr_assert_eq(shardps_pull_rows(h, 0, 0, ids, 4, rows, 4 * DIM), 0, "%s", shardps_last_error(h));
    for (int i = 0; i < 4; i++) {
        init_row(ids[i], want);
        cr_assert_eq(memcmp(rows + i * DIM, want, sizeof(want)), 0, "row of ID %d", i);
    }
    /* Sizes and tables are checked before anything is sent. */
    cr_assert_eq(shardps_pull_rows(h, 1, 0, ids, 4, rows, 4 * DIM), -EINVAL);
    cr_assert_eq(shardps_pull_rows(h, 0, 0, ids, 4, rows, 4 * DIM - 1), -EINVAL);
    cr_assert(strstr(shardps_last_error(h), "row table emb: 4 IDs take 4 x 4 floats, got 15"), "%s",
              shardps_last_error(h));
    cr_assert_eq(shardps_push_rows(h, 0, &bad, 1, NULL, DIM), -EINVAL);

    dense_init(h, &d);
    cr_assert_eq(shardps_pull(h, 0, d.w, d.n), 0);
    cr_assert_eq(shardps_wait(h), 0);
    for (int i = 0; i < 4 * DIM; i++)
        g[i] = 0.125f * (float)(i + 1);
    cr_assert_eq(shardps_push_rows(h, 0, ids, 4, g, 4 * DIM), 0, "%s", shardps_last_error(h));
    for (int i = 0; i < d.n; i++)
        cr_assert_eq(shardps_push(h, i, d.g[i], d.numel[i]), 0);
    cr_assert_eq(shardps_wait(h), 0);
    cr_assert_eq(shardps_pull_rows(h, 0, 1, ids, 4, got, 4 * DIM), 0, "%s", shardps_last_error(h));
    for (int i = 0; i < 4; i++) {
        init_row(ids[i], want);
        for (int k = 0; k < DIM; k++) {
            /* ID 7 twice: its gradients summed by the client. */
            float gk = ids[i] == 7 ? g[0 * DIM + k] + g[2 * DIM + k] : g[i * DIM + k];
            cr_assert_eq(got[i * DIM + k], want[k] - LR * gk, "ID %d element %d", i, k);
        }
    }
    dense_free(&d);
    shardps_close(h);
    server_down();
    cr_assert_eq(fx.stats.rows_stored, 3);
    cr_assert_eq(fx.stats.rows_created, 3);
    cr_assert_eq(fx.stats.row_pushes, 1);
}

/* Two workers on the halves equal one worker on the whole batch: each
 * equals the plain reference of its summation order bit for bit (two
 * workers' sums meet on the server as a + b in either order, exact for
 * two), and the two runs agree within the rounding of those orders: at
 * most 2B terms of magnitude below 1.2 / B per element and step, so
 * |difference| <= STEPS x LR x 2B x 2^-23 x 1.2 x 2 < 2e-6. */
Test(rows, sync_two_workers_equal_one_on_the_global_batch)
{
    static worker one, two[2];
    pthread_t th[2];
    ref_table ref = {0}, ref2 = {0};

    up(1, 0);
    one = (worker){.rank = 0, .world = 1};
    /* One worker does both halves: B samples of rank 0's and rank 1's. */
    {
        worker *wk = &one;
        shardps *h = handle(0, 1, DIM);
        uint64_t ids[2 * B], all[8];
        float rows[2 * B * DIM], grads[2 * B * DIM];
        dense d;

        cr_assert_eq(shardps_connect(h), 0, "%s", shardps_last_error(h));
        dense_init(h, &d);
        for (int t = 0; t < STEPS; t++) {
            cr_assert_eq(shardps_pull(h, (uint64_t)t, d.w, d.n), 0);
            cr_assert_eq(shardps_wait(h), 0);
            for (int i = 0; i < 2 * B; i++)
                ids[i] = batch_id(t, i);
            cr_assert_eq(shardps_pull_rows(h, 0, (uint64_t)t, ids, 2 * B, rows, 2 * B * DIM), 0);
            for (int i = 0; i < 2 * B; i++)
                sample_grad(rows + i * DIM, i, 1.0f / (2 * B), grads + i * DIM);
            cr_assert_eq(shardps_push_rows(h, 0, ids, 2 * B, grads, 2 * B * DIM), 0);
            for (int i = 0; i < d.n; i++)
                cr_assert_eq(shardps_push(h, i, d.g[i], d.numel[i]), 0);
            cr_assert_eq(shardps_wait(h), 0);
            ref_step(&ref, t, 2, 0);
            ref_step(&ref2, t, 2, 1);
        }
        cr_assert_eq(shardps_pull(h, STEPS, d.w, d.n), 0);
        cr_assert_eq(shardps_wait(h), 0);
        for (int i = 0; i < 8; i++)
            all[i] = batch_id(STEPS, i);
        cr_assert_eq(shardps_pull_rows(h, 0, STEPS, all, 8, &wk->rows[STEPS][0][0], 8 * DIM), 0);
        dense_free(&d);
        shardps_close(h);
    }
    server_down();

    up(2, 0);
    for (int r = 0; r < 2; r++) {
        two[r] = (worker){.rank = r, .world = 2};
        cr_assert_eq(pthread_create(&th[r], NULL, worker_run, &two[r]), 0);
    }
    for (int r = 0; r < 2; r++) {
        pthread_join(th[r], NULL);
        cr_assert_eq(two[r].rc, 0, "rank %d: %s", r, two[r].why);
    }
    for (int i = 0; i < 8; i++) {
        const float *want = ref_row(&ref, batch_id(STEPS, i));
        const float *want2 = ref_row(&ref2, batch_id(STEPS, i));
        for (int k = 0; k < DIM; k++) {
            cr_assert_eq(one.rows[STEPS][i][k], want[k], "one worker vs the reference, %d/%d", i,
                         k);
            cr_assert_eq(two[0].rows[STEPS][i][k], want2[k], "two workers vs the reference, %d/%d",
                         i, k);
            cr_assert_eq(two[1].rows[STEPS][i][k], two[0].rows[STEPS][i][k],
                         "rank 1 vs rank 0, %d/%d", i, k);
            cr_assert_leq(fabsf(two[0].rows[STEPS][i][k] - one.rows[STEPS][i][k]), 2e-6f,
                          "two workers vs one, %d/%d: %a vs %a", i, k, two[0].rows[STEPS][i][k],
                          one.rows[STEPS][i][k]);
        }
    }
}

/* A declarer whose table's dim differs from the server's is refused, the
 * difference named. */
Test(rows, a_dimension_mismatched_between_ranks_is_refused)
{
    shardps *h;

    up(1, 0);
    h = handle(0, 1, DIM * 2);
    cr_assert_lt(shardps_connect(h), 0);
    cr_assert(strstr(shardps_last_error(h), "row table emb: dim 8 from the worker, 4 on this"),
              "%s", shardps_last_error(h));
    shardps_close(h);
}

/* ---- bad input from raw peers ---------------------------------------- */

/* A rows request's header of count IDs of table at clock. */
static Shardps__Header rows_header(Shardps__MsgType type, uint32_t table, uint64_t count,
                                   uint64_t clock)
{
    Shardps__Header h = SHARDPS__HEADER__INIT;

    h.type = type;
    h.request_id = 77;
    h.clock = clock;
    h.dtype = SHARDPS__DTYPE__DTYPE_F32;
    h.row_table = table;
    h.row_count = count;
    return h;
}

/* A pull of ids[0..n) at clock from a raw peer; its rows into out. */
static void raw_pull_rows(peer *p, const uint64_t *ids, size_t n, uint64_t clock, float *out)
{
    Shardps__Header h = rows_header(SHARDPS__MSG_TYPE__PULL_ROWS, 0, n, clock);
    ps_frame f;

    peer_send(p, &h, ids, n * sizeof(uint64_t));
    peer_expect(p, SHARDPS__MSG_TYPE__PULL_ROWS_REPLY, &f, "a rows pull");
    cr_assert_eq(f.payload_len, n * DIM * sizeof(float));
    memcpy(out, f.payload, f.payload_len);
}

/* A push of ids with gradients g (n x DIM) at clock from a raw peer. */
static void raw_push_rows(peer *p, const uint64_t *ids, const float *g, size_t n, uint64_t clock)
{
    Shardps__Header h = rows_header(SHARDPS__MSG_TYPE__PUSH_ROWS, 0, n, clock);
    size_t len = n * (sizeof(uint64_t) + DIM * sizeof(float));
    uint8_t *buf = malloc(len + 1);

    memcpy(buf, ids, n * sizeof(uint64_t));
    memcpy(buf + n * sizeof(uint64_t), g, n * DIM * sizeof(float));
    peer_send(p, &h, buf, len);
    free(buf);
}

/* The table reads as its initializer at ids: nothing was stored. */
static void expect_initial(peer *p, const uint64_t *ids, size_t n, uint64_t clock)
{
    float got[8 * DIM], want[DIM];

    raw_pull_rows(p, ids, n, clock, got);
    for (size_t i = 0; i < n; i++) {
        init_row(ids[i], want);
        cr_assert_eq(memcmp(got + i * DIM, want, sizeof(want)), 0, "row %zu changed", i);
    }
}

/* 100 million IDs: refused on the header, before a byte of its 800 MB is
 * buffered (the peer sends none), the reason naming the limit. */
Test(rows, a_pull_over_the_id_limit_is_refused_on_its_header)
{
    Shardps__Header h = rows_header(SHARDPS__MSG_TYPE__PULL_ROWS, 0, 100000000, 0);
    uint8_t *head;
    size_t len;
    peer p;

    up(1, (uint64_t)1 << 30);
    peer_join(&p, 0, 1);
    h.version = PS_PROTOCOL_VERSION;
    h.payload_bytes = 100000000ull * 8;
    cr_assert_eq(ps_frame_pack_header(&h, &head, &len), 0);
    cr_assert_eq(raw_send(p.fd, head, len), 0);
    free(head);
    peer_expect_refusal(&p, SHARDPS__MSG_TYPE__ERROR,
                        "a request of 100000000 row IDs; this server takes at most 1024 "
                        "(--max-row-ids)",
                        "a pull of 100 million IDs");
}

Test(rows, a_payload_that_disagrees_with_its_count_is_refused)
{
    Shardps__Header h = rows_header(SHARDPS__MSG_TYPE__PUSH_ROWS, 0, 2, 0);
    uint8_t payload[2 * 8 + 2 * DIM * 4 - 4] = {0};
    uint64_t ids[] = {5, 6};
    peer p;

    up(1, 0);
    peer_join(&p, 0, 1);
    peer_send(&p, &h, payload, sizeof(payload));
    peer_expect_refusal(&p, SHARDPS__MSG_TYPE__ERROR, "carries 44 bytes; it needs 48",
                        "a push 4 bytes short");
    peer_join(&p, 0, 1);
    expect_initial(&p, ids, 2, 0);
    peer_close(&p);
    server_down();
    cr_assert_eq(fx.stats.rows_stored, 0);
}

/* An ID named twice in one request is the client's mistake to sum: a pull
 * and a push naming one are refused, and the table keeps nothing. */
Test(rows, an_id_named_twice_is_refused)
{
    uint64_t ids[] = {5, 6, 5};
    float g[3 * DIM];
    peer p;

    for (int i = 0; i < 3 * DIM; i++)
        g[i] = 1.0f;
    up(1, 0);
    peer_join(&p, 0, 1);
    {
        Shardps__Header h = rows_header(SHARDPS__MSG_TYPE__PULL_ROWS, 0, 3, 0);
        peer_send(&p, &h, ids, sizeof(ids));
    }
    peer_expect_refusal(&p, SHARDPS__MSG_TYPE__ERROR,
                        "row table emb: a rows request names ID 5 "
                        "twice (again at position 2 of 3)",
                        "a pull naming 5 twice");
    peer_join(&p, 0, 1);
    raw_push_rows(&p, ids, g, 3, 0);
    peer_expect_refusal(&p, SHARDPS__MSG_TYPE__ERROR, "names ID 5 twice", "a push naming 5 twice");
    peer_join(&p, 0, 1);
    expect_initial(&p, ids, 2, 0);
    peer_close(&p);
    server_down();
    cr_assert_eq(fx.stats.rows_stored, 0);
    cr_assert_eq(fx.stats.rows_refused, 2);
}

/* NaN rows: the push is refused (acknowledged with every row rejected,
 * logged, counted), the rows keep their values, the worker goes on and its
 * next push is applied. */
Test(rows, nan_rows_are_refused_and_the_table_unchanged)
{
    uint64_t ids[] = {5, 6};
    float g[2 * DIM], got[2 * DIM], want[DIM];
    ps_frame f;
    peer p;

    for (int i = 0; i < 2 * DIM; i++)
        g[i] = 0.5f;
    g[DIM + 1] = NAN;
    up(1, 0);
    peer_join(&p, 0, 1);
    raw_push_rows(&p, ids, g, 2, 0);
    peer_expect(&p, SHARDPS__MSG_TYPE__PUSH_ROWS_REPLY, &f, "the NaN push's acknowledgement");
    cr_assert_eq(f.hdr->status, 2);
    cr_assert_eq(f.hdr->rejected, 2);
    /* The step is complete without it (one worker): the rows read as before. */
    expect_initial(&p, ids, 2, 1);
    g[DIM + 1] = 0.5f;
    raw_push_rows(&p, ids, g, 2, 1);
    peer_expect(&p, SHARDPS__MSG_TYPE__PUSH_ROWS_REPLY, &f, "the good push's acknowledgement");
    cr_assert_eq(f.hdr->status, 0);
    raw_pull_rows(&p, ids, 2, 2, got);
    for (int i = 0; i < 2; i++) {
        init_row(ids[i], want);
        for (int k = 0; k < DIM; k++)
            cr_assert_eq(got[i * DIM + k], want[k] - LR * 0.5f);
    }
    peer_close(&p);
    server_down();
    cr_assert_eq(fx.stats.rows_refused, 1);
    cr_assert_eq(fx.stats.rows_stored, 2);
}

/* ---- the client's limits --------------------------------------------- */

/* The handle of up()'s job that knows its --max-row-ids (1024), after its
 * first dense pull. */
static shardps *limited(dense *d)
{
    shardps *h = handle(0, 1, DIM);

    cr_assert_eq(shardps_set_option(h, "max-row-ids", "1024"), 0, "%s", shardps_last_error(h));
    cr_assert_eq(shardps_connect(h), 0, "%s", shardps_last_error(h));
    dense_init(h, d);
    cr_assert_eq(shardps_pull(h, 0, d->w, d->n), 0);
    cr_assert_eq(shardps_wait(h), 0);
    return h;
}

/* 2,500 unique IDs (and 100 repeats) against a limit of 1,024: the pull
 * goes in three requests and reads as one; a push that would need more
 * than one request for the step is refused naming the limit, before
 * anything is sent, and the handle goes on. */
Test(rows, a_pull_over_the_id_limit_is_split_and_such_a_push_refused)
{
    enum { U = 2500, N = U + 100 };
    uint64_t *ids = malloc(N * sizeof(*ids));
    float *rows = malloc(N * DIM * sizeof(float)), want[DIM];
    dense d;
    shardps *h;

    for (int i = 0; i < N; i++)
        ids[i] = i < U ? (uint64_t)i * 0x9e3779b97f4a7c15ull : ids[(i - U) * 7];
    up(1, 0);
    h = limited(&d);
    cr_assert_eq(shardps_pull_rows(h, 0, 0, ids, N, rows, N * DIM), 0, "%s", shardps_last_error(h));
    for (int i = 0; i < N; i++) {
        init_row(ids[i], want);
        cr_assert_eq(memcmp(rows + i * DIM, want, sizeof(want)), 0, "row %d", i);
    }
    for (int i = 0; i < N * DIM; i++)
        rows[i] = 0.5f;
    expect_err(h, shardps_push_rows(h, 0, ids, N, rows, N * DIM), -E2BIG, "--max-row-ids");
    cr_assert_eq(shardps_push_rows(h, 0, ids, 1024, rows, 1024 * DIM), 0, "%s",
                 shardps_last_error(h));
    dense_free(&d);
    shardps_close(h);
    server_down();
    cr_assert_eq(fx.stats.row_pulls, 3, "2,500 IDs in requests of at most 1,024");
    cr_assert_eq(fx.stats.rows_refused, 0);
    cr_assert_eq(fx.stats.row_pushes, 1);
    cr_assert_eq(fx.stats.rows_stored, 1024);
    free(ids);
    free(rows);
}

/* The server takes one rows push per table per step from a worker and
 * drops a second as a repeat: the client refuses it, loudly, rather than
 * let its gradients vanish; the next step's push goes through. */
Test(rows, a_second_push_of_a_table_in_one_step_is_refused)
{
    uint64_t a[] = {1, 2}, b[] = {3};
    float g[2 * DIM];
    dense d;
    shardps *h;

    for (int i = 0; i < 2 * DIM; i++)
        g[i] = 1.0f;
    up(1, 0);
    h = limited(&d);
    cr_assert_eq(shardps_push_rows(h, 0, a, 2, g, 2 * DIM), 0, "%s", shardps_last_error(h));
    expect_err(h, shardps_push_rows(h, 0, b, 1, g, DIM), -EALREADY, "already pushed");
    for (int i = 0; i < d.n; i++)
        cr_assert_eq(shardps_push(h, i, d.g[i], d.numel[i]), 0);
    cr_assert_eq(shardps_wait(h), 0);
    cr_assert_eq(shardps_pull(h, 1, d.w, d.n), 0);
    cr_assert_eq(shardps_wait(h), 0);
    cr_assert_eq(shardps_push_rows(h, 0, b, 1, g, DIM), 0, "%s", shardps_last_error(h));
    dense_free(&d);
    shardps_close(h);
    server_down();
    cr_assert_eq(fx.stats.row_pushes, 2);
    cr_assert_eq(fx.stats.rows_stored, 3);
}

/* Sync, 2 workers, rank 1 silent: rank 0's rows pull of step 1 waits for
 * step 0, which waits for rank 1's push. The server says so (WAITING), so
 * rank 0's timeout names rank 1 rather than blaming the server. */
Test(rows, a_held_rows_pull_says_why)
{
    uint64_t id = 5;
    float row[DIM], g[DIM] = {1, 1, 1, 1};
    dense d;
    peer p;
    shardps *h;

    wait_ms = 50;
    up(2, 0);
    wait_ms = 0;
    peer_join(&p, 1, 2);
    h = handle(0, 2, DIM);
    cr_assert_eq(shardps_set_option(h, "request-timeout", "1"), 0);
    cr_assert_eq(shardps_connect(h), 0, "%s", shardps_last_error(h));
    dense_init(h, &d);
    cr_assert_eq(shardps_pull(h, 0, d.w, d.n), 0);
    cr_assert_eq(shardps_wait(h), 0, "%s", shardps_last_error(h));
    cr_assert_eq(shardps_pull_rows(h, 0, 0, &id, 1, row, DIM), 0, "%s", shardps_last_error(h));
    cr_assert_eq(shardps_push_rows(h, 0, &id, 1, g, DIM), 0, "%s", shardps_last_error(h));
    expect_err(h, shardps_pull_rows(h, 0, 1, &id, 1, row, DIM), -PS_ETIMEOUT,
               "which is waiting for other workers: row table emb: step 1 is waiting for rank 1 "
               "of 2 to push it");
    dense_free(&d);
    shardps_close(h);
    peer_close(&p);
}

/* Sync, 2 workers, rank 1 not there yet: a rows pull before the job starts
 * may wait for the whole job to join, as a dense pull may: the request
 * timeout plus the connect timeout (1.5 s here), not the request timeout
 * alone, and its timeout names the rank the server waits for. */
Test(rows, a_rows_pull_before_the_start_waits_as_a_dense_one)
{
    uint64_t id = 5;
    float row[DIM];
    double waited = 0;
    const char *at;
    shardps *h;

    wait_ms = 50;
    up(2, 0);
    wait_ms = 0;
    h = handle(0, 2, DIM);
    cr_assert_eq(shardps_set_option(h, "request-timeout", "0.5"), 0);
    cr_assert_eq(shardps_set_option(h, "connect-timeout", "1"), 0);
    cr_assert_eq(shardps_connect(h), 0, "%s", shardps_last_error(h));
    expect_err(h, shardps_pull_rows(h, 0, 0, &id, 1, row, DIM), -PS_ETIMEOUT,
               "the answer to a rows pull from server 0");
    cr_assert(strstr(shardps_last_error(h), "waiting for rank 1 of 2 to join"), "%s",
              shardps_last_error(h));
    at = strstr(shardps_last_error(h), "gave up after ");
    cr_assert(at && sscanf(at, "gave up after %lf s", &waited) == 1, "%s", shardps_last_error(h));
    cr_assert_geq(waited, 1.5, "gave up after %.1f s, before the connect timeout", waited);
    shardps_abandon(h);
}
