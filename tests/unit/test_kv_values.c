/* A model's own initial values (issue 23, point 2; server/dense/values.c and writes.c): the
 * rank 0 that declares a table with INIT_VALUES tensors WRITEs their values
 * once, and every rank's first pull equals them bit for bit, whichever rank
 * started first: rank 1 pulling before rank 0 has even connected waits for
 * the values rather than seeing a partly written table. Seeded tensors
 * beside them keep the servers' values. Anyone else's WRITE, or a second
 * one, is refused; a restored checkpoint's values win over rank 0's.
 * Buffers and frozen tensors (point 3) come from rank 0 and are never
 * pushed. Values are the rank 0's that wrote them only while it stays
 * (issue 34, points 2 and 3): a rank 0 that leaves before the table is
 * filled takes them with it, whether the table stays (the next rank 0 is
 * asked for its own) or is withdrawn (they are freed). Real ps_kv_clients
 * (each pull in a thread of its own) against the server in a thread
 * (kv_fixture). */
#include <criterion/criterion.h>

#include <errno.h>
#include <malloc.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#if defined(__SANITIZE_ADDRESS__)
/* The sanitizers' runtime's count of bytes allocated and not freed
 * (sanitizer/allocator_interface.h, which gcc does not ship). */
size_t __sanitizer_get_current_allocated_bytes(void);
#endif

#include "checkpoint.h"
#include "job_options.h"
#include "kv_client.h"
#include "kv_fixture.h"
#include "partition.h"
#include "shardps.h"
#include "ps_error.h"
#include "tensor_table.h"

#define KV_TENSORS 3

static ps_model_spec table;
/* Rank 0's values of each tensor (NULL for the seeded one). */
static float emb[40], fcw[7 * 40];
static const void *values[KV_TENSORS] = {emb, NULL, fcw};

/* emb.weight [40] and fc.weight [7, 40] from the declarer, fc.bias [7]
 * drawn by the servers; values with bit patterns a conversion would lose
 * (negative zero, subnormals, the largest float). */
static void make_table(void)
{
    int e[1] = {40}, b[1] = {7}, w[2] = {7, 40};
    ps_tensor_decl d[KV_TENSORS] = {
        {"encoder.embedding.weight", 1, e, PS_INIT_VALUES, 1, 1, PS_KIND_PARAMETER, PS_DTYPE_F32},
        {"fc.bias", 1, b, PS_INIT_XAVIER_UNIFORM, 40, 7, PS_KIND_PARAMETER, PS_DTYPE_F32},
        {"fc.weight", 2, w, PS_INIT_VALUES, 1, 1, PS_KIND_PARAMETER, PS_DTYPE_F32},
    };
    uint32_t bits = 0x9e3779b9u;

    memset(&table, 0, sizeof(table));
    table.seed = 77;
    for (int i = 0; i < KV_TENSORS; i++)
        cr_assert_eq(ps_model_spec_add(&table, &d[i]), 0);
    for (size_t i = 0; i < 40; i++)
        emb[i] = (float)i * 0.25f - 3.0f;
    emb[0] = -0.0f;
    emb[1] = 1e-42f; /* subnormal */
    emb[2] = 3.4028235e38f;
    for (size_t i = 0; i < 7 * 40; i++) {
        bits = bits * 1664525u + 1013904223u;
        fcw[i] = (float)(int32_t)bits * 1e-9f;
    }
}

/* Workers in the job: 2, unless a test sets more before start. */
static int job_world = 2;

static void start(void)
{
    ps_kv_server_config cfg;

    kv_fixture_config(&cfg);
    make_table();
    cfg.table = NULL;
    cfg.world = job_world;
    server_up_with(&cfg);
}

/* rank of job_world connected to the fixture's server, declaring spec with vals
 * (rank 0's own values; NULL for a rank that sends none); *clock is where
 * the server starts it. */
static ps_kv_client *connect_as(const ps_model_spec *spec, const void *const *vals, int rank,
                                uint64_t *clock)
{
    const char *servers[1] = {fx.addr};
    ps_kv_client_config cfg = {0};
    ps_kv_client *c = NULL;

    cfg.spec = *spec;
    cfg.values = vals;
    cfg.rank = rank;
    cfg.world = job_world;
    cfg.servers = servers;
    cfg.n_servers = 1;
    cfg.chunk_bytes = CHUNK_BYTES;
    cfg.connect_timeout_s = 5.0;
    cfg.request_timeout_s = 20.0;
    cfg.max_payload = (size_t)1 << 20;
    cr_assert_eq(ps_kv_client_init(&c, &cfg), 0);
    cr_assert_eq(ps_kv_client_connect(c, clock), 0, "%s", ps_kv_client_last_error(c));
    return c;
}

static ps_kv_client *connect_rank(int rank)
{
    uint64_t clock;
    ps_kv_client *c = connect_as(&table, rank == 0 ? values : NULL, rank, &clock);

    cr_assert_eq(clock, 0);
    return c;
}

typedef struct {
    ps_kv_client *c;
    float w[KV_TENSORS][7 * 40];
    int rc;
} puller;

static void *pull_first(void *arg)
{
    puller *p = arg;
    float *dest[KV_TENSORS] = {p->w[0], p->w[1], p->w[2]};

    p->rc = ps_kv_client_pull(p->c, 0, dest);
    if (p->rc == 0)
        p->rc = ps_kv_client_wait(p->c);
    return NULL;
}

/* What every rank's first pull must hold. */
static void expect_first(const puller *p, int rank)
{
    float seeded[7];

    cr_assert_eq(p->rc, 0, "rank %d: %s", rank, ps_kv_client_last_error(p->c));
    cr_assert_eq(memcmp(p->w[0], emb, sizeof(emb)), 0, "rank %d: emb differs", rank);
    cr_assert_eq(memcmp(p->w[2], fcw, sizeof(fcw)), 0, "rank %d: fc.weight differs", rank);
    ps_model_spec_init_values(&table, 1, 0, 7, seeded);
    cr_assert_eq(memcmp(p->w[1], seeded, sizeof(seeded)), 0, "rank %d: the seeded bias", rank);
}

/* first: the rank that connects (and starts pulling) first. */
static void run_two(int first)
{
    static puller p[2];
    pthread_t t[2];

    start();
    p[first].c = connect_rank(first);
    cr_assert_eq(pthread_create(&t[first], NULL, pull_first, &p[first]), 0);
    p[!first].c = connect_rank(!first);
    cr_assert_eq(pthread_create(&t[!first], NULL, pull_first, &p[!first]), 0);
    for (int r = 0; r < 2; r++)
        cr_assert_eq(pthread_join(t[r], NULL), 0);
    expect_first(&p[0], 0);
    expect_first(&p[1], 1);
    for (int r = 0; r < 2; r++)
        ps_kv_client_close(p[r].c);
    server_down();
    ps_model_spec_free(&table);
}

Test(kv_values, rank_1_first_waits_for_rank_0s_values, .timeout = 60)
{
    run_two(1);
}

Test(kv_values, rank_0_first_writes_before_the_table_fills, .timeout = 60)
{
    run_two(0);
}

/* A raw WRITE of the first chunk of tensor t from a connection welcomed as
 * rank (declaring the table); the server must refuse it naming want. */
static void refused_write(int rank, int tensor, const char *want)
{
    Shardps__Header h, w = SHARDPS__HEADER__INIT;
    Shardps__Hello hello;
    ps_frame_decoder *dec;
    ps_frame f;
    uint64_t key = ps_key_make((uint32_t)tensor, 0);
    float zero[16] = {0};
    int fd = raw_connect();

    cr_assert_eq(ps_frame_decoder_init(&dec, PS_TABLE_MAX_BYTES), 0);
    make_hello_as(&h, &hello, &table, (uint32_t)rank, 2);
    raw_send_frame(fd, &h);
    raw_read_frame(fd, dec, &f, "welcome");
    cr_assert_eq(f.hdr->type, SHARDPS__MSG_TYPE__WELCOME, "%s", f.hdr->reason ? f.hdr->reason : "");
    cr_assert_eq(f.hdr->welcome->values_wanted, rank == 0);
    w.type = SHARDPS__MSG_TYPE__WRITE;
    w.request_id = 2;
    w.n_keys = 1;
    w.keys = &key;
    raw_send_payload(fd, &w, zero, CHUNK_BYTES);
    for (;;) {
        raw_read_frame(fd, dec, &f, want);
        if (f.hdr->type == SHARDPS__MSG_TYPE__ERROR)
            break;
    }
    cr_assert(f.hdr->reason && strstr(f.hdr->reason, want), "want \"%s\": \"%s\"", want,
              f.hdr->reason ? f.hdr->reason : "");
    expect_closed(fd, want);
    ps_frame_decoder_free(dec);
}

Test(kv_values, writes_by_anyone_else_or_for_seeded_tensors_are_refused, .timeout = 60)
{
    start();
    refused_write(1, 0, "only the rank 0 that declared the tensors writes values");
    refused_write(0, 1, "of tensor fc.bias: the servers initialise it");
    server_down();
    ps_model_spec_free(&table);
}

/* ---- a rank 0 that leaves (issue 34, points 2 and 3) -------------------- */

/* A rank 0 of job_world on a raw connection declares spec (cut in chunk_bytes),
 * is asked for its values, WRITEs every value of every INIT_VALUES chunk
 * of this server as v, and goes: once the server has closed the
 * connection, it has read the WRITE and seen the peer leave. */
static void rank_0_writes_and_goes(const ps_model_spec *spec, size_t chunk_bytes, float v)
{
    Shardps__Header h, w = SHARDPS__HEADER__INIT;
    Shardps__Hello hello;
    ps_frame_decoder *dec;
    ps_partition *part;
    ps_frame f;
    uint64_t keys[64];
    size_t n = 0, words = 0;
    float *vals;
    int fd = raw_connect();

    cr_assert_eq(ps_partition_init(&part, spec, 1, chunk_bytes), 0);
    for (int i = 0; i < ps_partition_chunk_count(part); i++) {
        const ps_chunk *c = ps_partition_chunk(part, i);
        if (spec->tensors[c->tensor_id].init != PS_INIT_VALUES)
            continue;
        cr_assert_lt(n, 64);
        keys[n++] = c->key;
        words += c->numel;
    }
    ps_partition_free(part);
    vals = malloc(words * sizeof(float));
    cr_assert_not_null(vals);
    for (size_t i = 0; i < words; i++)
        vals[i] = v;
    cr_assert_eq(ps_frame_decoder_init(&dec, PS_TABLE_MAX_BYTES), 0);
    make_hello_as(&h, &hello, spec, 0, (uint32_t)job_world);
    hello.chunk_bytes = chunk_bytes;
    raw_send_frame(fd, &h);
    raw_read_frame(fd, dec, &f, "the leaving rank 0's welcome");
    cr_assert_eq(f.hdr->type, SHARDPS__MSG_TYPE__WELCOME, "%s", f.hdr->reason ? f.hdr->reason : "");
    cr_assert(f.hdr->welcome->values_wanted, "the first rank 0 is asked for its values");
    w.type = SHARDPS__MSG_TYPE__WRITE;
    w.request_id = 2;
    w.n_keys = n;
    w.keys = keys;
    raw_send_payload(fd, &w, vals, words * sizeof(float));
    cr_assert_eq(shutdown(fd, SHUT_WR), 0);
    expect_closed(fd, "the leaving rank 0");
    ps_frame_decoder_free(dec);
    free(vals);
}

/* Point 2: in a job of 3, a stranger posing as rank 0 declares the table
 * rank 1 declared, writes its own values and leaves before the job starts
 * (rank 2 is not there yet). Rank 1 still declares the table, so it stays;
 * the real rank 0 must be asked for its values (values_wanted), and every
 * rank must start from them. Before, it was welcomed with values_wanted 0
 * and every rank pulled the stranger's 42s. */
Test(kv_values, a_rank_0_that_leaves_takes_its_values_with_it, .timeout = 60)
{
    static puller p[3];

    job_world = 3;
    start();
    p[1].c = connect_rank(1);
    rank_0_writes_and_goes(&table, CHUNK_BYTES, 42.0f);
    p[0].c = connect_rank(0);
    p[2].c = connect_rank(2);
    for (int r = 0; r < 3; r++) {
        pull_first(&p[r]);
        expect_first(&p[r], r);
        ps_kv_client_close(p[r].c);
    }
    server_down();
    ps_model_spec_free(&table);
}

/* Bytes the process has allocated and not freed: the sanitizer's count
 * under ASan (its allocator replaces malloc's), else glibc's arenas and
 * mmapped chunks. */
static size_t live_bytes(void)
{
#if defined(__SANITIZE_ADDRESS__)
    return __sanitizer_get_current_allocated_bytes();
#else
    struct mallinfo2 m = mallinfo2();
    return m.uordblks + m.hblkhd;
#endif
}

/* Point 3: values written before the start are freed when the table is
 * withdrawn. Rank 0 declares a table of 4 MiB of its own values, writes
 * them and leaves, its table's only declarer, 4 times; with nobody
 * connected the server must hold none of them. On 26cad0c each round left
 * its 4 MiB behind (the values were freed by a count set to 0 first). */
Test(kv_values, values_written_before_the_start_are_freed_on_withdrawal, .timeout = 60)
{
    enum { rounds = 4, floats = 1 << 20 };
    int shape[1] = {floats};
    ps_tensor_decl d = {"encoder.embedding.weight", 1,           shape, PS_INIT_VALUES, 1, 1,
                        PS_KIND_PARAMETER,          PS_DTYPE_F32};
    ps_kv_server_config cfg;
    ps_model_spec big;
    size_t before, after;

    kv_fixture_config(&cfg);
    memset(&big, 0, sizeof(big));
    big.seed = 5;
    cr_assert_eq(ps_model_spec_add(&big, &d), 0);
    cfg.table = NULL;
    cfg.world = 2;
    cfg.chunk_bytes = (size_t)1 << 20;
    cfg.max_payload = (size_t)8 << 20;
    before = live_bytes();
    server_up_with(&cfg);
    for (int i = 0; i < rounds; i++)
        rank_0_writes_and_goes(&big, cfg.chunk_bytes, (float)i);
    server_down();
    after = live_bytes();
    cr_log_info("%zd bytes more allocated after %d withdrawn rounds of %zu bytes of values",
                (ssize_t)(after - before), rounds, (size_t)floats * sizeof(float));
    cr_assert_lt(after, before + (size_t)floats * sizeof(float),
                 "%zu bytes more allocated after %d rounds of %zu bytes of values, withdrawn",
                 after - before, rounds, (size_t)floats * sizeof(float));
    ps_model_spec_free(&big);
}

/* ---- through libshardps (shardps_declare_values) ----------------------- */

typedef struct {
    shardps *h;
    float w[3][7 * 40];
    int rc;
} lib_puller;

static void *lib_pull_first(void *arg)
{
    lib_puller *p = arg;
    float *dest[3] = {p->w[0], p->w[1], p->w[2]};
    uint64_t clock;

    p->rc = shardps_start_clock(p->h, &clock);
    if (p->rc == 0)
        p->rc = shardps_pull(p->h, clock, dest, 3);
    if (p->rc == 0)
        p->rc = shardps_wait(p->h);
    return NULL;
}

/* The table of make_table, declared through the library with mine as the
 * values (only rank 0's are sent). */
static shardps *lib_rank(int rank, const float *mine_emb, const float *mine_fcw)
{
    const char *addr[] = {fx.addr};
    shardps *h;

    cr_assert_eq(shardps_new(&h, addr, 1, rank, 2), 0);
    cr_assert_eq(shardps_set_option(h, "chunk-bytes", "64"), 0);
    cr_assert_eq(shardps_set_option(h, "seed", "77"), 0);
    cr_assert_eq(shardps_set_option(h, "log-level", "none"), 0);
    cr_assert_eq(shardps_declare_values(h, "encoder.embedding.weight", 1, (int64_t[]){40},
                                        SHARDPS_KIND_PARAMETER, SHARDPS_DTYPE_FLOAT32, mine_emb,
                                        40 * 4),
                 0, "%s", shardps_last_error(h));
    cr_assert_eq(
        shardps_declare(h, "fc.bias", 1, (int64_t[]){7}, SHARDPS_INIT_XAVIER_UNIFORM, 40, 7), 0);
    cr_assert_eq(shardps_declare_values(h, "fc.weight", 2, (int64_t[]){7, 40},
                                        SHARDPS_KIND_PARAMETER, SHARDPS_DTYPE_FLOAT32, mine_fcw,
                                        7 * 40 * 4),
                 0);
    return h;
}

Test(kv_values, through_libshardps_rank_0s_values_win, .timeout = 60)
{
    static lib_puller p[2];
    static float other[7 * 40];
    float seeded[7];
    pthread_t t[2];

    start();
    for (size_t i = 0; i < 7 * 40; i++)
        other[i] = 42.0f;
    /* Rank 1 first, with values of its own that nobody sees. */
    p[1].h = lib_rank(1, other, other);
    cr_assert_eq(shardps_connect(p[1].h), 0, "%s", shardps_last_error(p[1].h));
    cr_assert_eq(pthread_create(&t[1], NULL, lib_pull_first, &p[1]), 0);
    p[0].h = lib_rank(0, emb, fcw);
    cr_assert_eq(shardps_connect(p[0].h), 0, "%s", shardps_last_error(p[0].h));
    cr_assert_eq(pthread_create(&t[0], NULL, lib_pull_first, &p[0]), 0);
    ps_model_spec_init_values(&table, 1, 0, 7, seeded);
    for (int r = 0; r < 2; r++) {
        cr_assert_eq(pthread_join(t[r], NULL), 0);
        cr_assert_eq(p[r].rc, 0, "rank %d: %s", r, shardps_last_error(p[r].h));
        cr_assert_eq(memcmp(p[r].w[0], emb, sizeof(emb)), 0, "rank %d", r);
        cr_assert_eq(memcmp(p[r].w[1], seeded, sizeof(seeded)), 0, "rank %d", r);
        cr_assert_eq(memcmp(p[r].w[2], fcw, sizeof(fcw)), 0, "rank %d", r);
        shardps_close(p[r].h);
    }
    server_down();
    ps_model_spec_free(&table);
}

/* ---- buffers and frozen tensors (issue 23, point 3) --------------------- */

/* w [8] a parameter the servers draw; bn.num_batches_tracked [3] an int64
 * buffer and bn.running_mean [4] a float32 one, both from rank 0 and
 * rewritten by it every step; emb [5] frozen, from rank 0. */
static ps_model_spec kinds;
static int64_t counts[3] = {0, INT64_MAX, INT64_MIN + 8};
static float mean[4] = {0.5f, -0.25f, 1e-40f, -0.0f};
static float frozen[5] = {1, 2, 3, 4, 5};

static void make_kinds(void)
{
    int w[1] = {8}, c[1] = {3}, m[1] = {4}, e[1] = {5};
    ps_tensor_decl d[4] = {
        {"w", 1, w, PS_INIT_HE_UNIFORM, 8, 8, PS_KIND_PARAMETER, PS_DTYPE_F32},
        {"bn.num_batches_tracked", 1, c, PS_INIT_VALUES, 1, 1, PS_KIND_BUFFER, PS_DTYPE_I64},
        {"bn.running_mean", 1, m, PS_INIT_VALUES, 1, 1, PS_KIND_BUFFER, PS_DTYPE_F32},
        {"emb", 1, e, PS_INIT_VALUES, 1, 1, PS_KIND_FROZEN, PS_DTYPE_F32},
    };

    memset(&kinds, 0, sizeof(kinds));
    kinds.seed = 3;
    for (int i = 0; i < 4; i++)
        cr_assert_eq(ps_model_spec_add(&kinds, &d[i]), 0);
}

typedef struct {
    ps_kv_client *c;
    int rank, rc;
    char why[256];
} trainer;

#define KV_STEPS 3

/* rank 0's buffers as written before step `step`'s push (the initial
 * values at step 0). */
static void buffers_at(int step, int64_t *cnt, float *mn)
{
    for (int i = 0; i < 3; i++)
        cnt[i] = i == 1 ? counts[i] - step : counts[i] + step; /* no float holds these */
    for (int i = 0; i < 4; i++)
        mn[i] = step == 0 ? mean[i] : mean[i] + (float)step; /* -0.0 + 0 would be +0.0 */
}

static void *train(void *arg)
{
    trainer *t = arg;
    float w[8], want[8], g[8], mn[4], got_mn[4], emb_got[5];
    int64_t cnt[3], got_cnt[3];
    float *dest[4] = {w, (float *)got_cnt, got_mn, emb_got};

    ps_model_spec_init_values(&kinds, 0, 0, 8, want);
    for (int i = 0; i < 8; i++)
        g[i] = (float)(t->rank + 1);
    for (int step = 0; step <= KV_STEPS; step++) {
        if (ps_kv_client_pull(t->c, (uint64_t)step, dest) < 0 || ps_kv_client_wait(t->c) < 0) {
            snprintf(t->why, sizeof(t->why), "step %d: %s", step, ps_kv_client_last_error(t->c));
            return NULL;
        }
        /* Every rank sees rank 0's buffers of the step before, exactly. */
        buffers_at(step == 0 ? 0 : step - 1, cnt, mn);
        if (memcmp(got_cnt, cnt, sizeof(cnt)) != 0 || memcmp(got_mn, mn, sizeof(mn)) != 0 ||
            memcmp(emb_got, frozen, sizeof(frozen)) != 0) {
            snprintf(t->why, sizeof(t->why),
                     "step %d: buffers %lld, %g or the frozen tensor differ", step,
                     (long long)got_cnt[1], (double)got_mn[0]);
            return NULL;
        }
        for (int i = 0; i < 8; i++)
            if (fabsf(w[i] - want[i]) > 1e-6f) {
                snprintf(t->why, sizeof(t->why), "step %d: w[%d] %g, want %g", step, i,
                         (double)w[i], (double)want[i]);
                return NULL;
            }
        if (step == KV_STEPS)
            break;
        if (t->rank == 0) {
            const void *v[4] = {NULL, cnt, mn, NULL};
            buffers_at(step, cnt, mn);
            if (ps_kv_client_write_buffers(t->c, v) < 0) {
                snprintf(t->why, sizeof(t->why), "write: %s", ps_kv_client_last_error(t->c));
                return NULL;
            }
        }
        if (ps_kv_client_push_tensor(t->c, 3, frozen) != -EPERM ||
            ps_kv_client_push_tensor(t->c, 1, frozen) != -EPERM ||
            ps_kv_client_push_tensor(t->c, 0, g) < 0) {
            snprintf(t->why, sizeof(t->why), "push: frozen or buffer not refused, or w failed");
            return NULL;
        }
        /* The mean of ranks 0 and 1's gradients, 1.5, at LR. */
        for (int i = 0; i < 8; i++)
            want[i] -= LR * 1.5f;
    }
    t->rc = 1;
    return NULL;
}

Test(kv_values, buffers_come_from_rank_0_and_frozen_tensors_are_never_pushed, .timeout = 60)
{
    const void *v[4] = {NULL, counts, mean, frozen};
    static trainer t[2];
    pthread_t th[2];

    start();
    make_kinds();
    for (int r = 1; r >= 0; r--) {
        uint64_t clock;

        t[r].rank = r;
        t[r].c = connect_as(&kinds, r == 0 ? v : NULL, r, &clock);
        cr_assert_eq(pthread_create(&th[r], NULL, train, &t[r]), 0);
    }
    for (int r = 0; r < 2; r++) {
        cr_assert_eq(pthread_join(th[r], NULL), 0);
        cr_assert_eq(t[r].rc, 1, "rank %d: %s", r, t[r].why);
        ps_kv_client_close(t[r].c);
    }
    server_down();
    ps_model_spec_free(&kinds);
    ps_model_spec_free(&table);
}

/* One rank's pull of step `step` and the buffers it must find: rank 0's as
 * written before the push of step `as_of`. */
static void pull_buffers(ps_kv_client *c, int step, int as_of, const char *who)
{
    float w[8], got_mn[4], emb_got[5], mn[4];
    int64_t got_cnt[3], cnt[3];
    float *dest[4] = {w, (float *)got_cnt, got_mn, emb_got};

    cr_assert_eq(ps_kv_client_pull(c, (uint64_t)step, dest), 0);
    cr_assert_eq(ps_kv_client_wait(c), 0, "%s", ps_kv_client_last_error(c));
    buffers_at(as_of, cnt, mn);
    cr_assert(memcmp(got_cnt, cnt, sizeof(cnt)) == 0 && memcmp(got_mn, mn, sizeof(mn)) == 0,
              "%s, step %d: num_batches_tracked[1] %lld and running_mean[0] %g, want rank 0's "
              "of step %d (%lld, %g)",
              who, step, (long long)got_cnt[1], (double)got_mn[0], as_of, (long long)cnt[1],
              (double)mn[0]);
}

static void push_step(ps_kv_client *c, int rank, int step)
{
    float g[8];
    int64_t cnt[3];
    float mn[4];
    const void *v[4] = {NULL, cnt, mn, NULL};

    for (int i = 0; i < 8; i++)
        g[i] = (float)(rank + 1);
    if (rank == 0) {
        buffers_at(step, cnt, mn);
        cr_assert_eq(ps_kv_client_write_buffers(c, v), 0, "%s", ps_kv_client_last_error(c));
    }
    cr_assert_eq(ps_kv_client_push_tensor(c, 0, g), 0);
    cr_assert_eq(ps_kv_client_wait(c), 0, "%s", ps_kv_client_last_error(c));
}

/* Rank 0 refreshes its buffers during step 1 (as a forward leaves them:
 * DDP broadcasts them at the start of the next), and rank 1 pulls step 1
 * only after that refresh has reached the server: it still sees the
 * buffers step 1 began with, and both see the refresh at step 2. On one
 * thread, so the order is the test's, not the scheduler's. */
Test(kv_values, a_late_pull_sees_the_buffers_its_step_began_with, .timeout = 60)
{
    const void *v[4] = {NULL, counts, mean, frozen};
    ps_kv_client *c[2];
    uint64_t clock;

    start();
    make_kinds();
    c[1] = connect_as(&kinds, NULL, 1, &clock);
    c[0] = connect_as(&kinds, v, 0, &clock);
    for (int r = 0; r < 2; r++)
        pull_buffers(c[r], 0, 0, r ? "rank 1" : "rank 0");
    for (int r = 0; r < 2; r++)
        push_step(c[r], r, 0);
    pull_buffers(c[0], 1, 0, "rank 0");
    push_step(c[0], 0, 1);
    pull_buffers(c[1], 1, 0, "rank 1, after rank 0's refresh of step 1");
    push_step(c[1], 1, 1);
    for (int r = 0; r < 2; r++)
        pull_buffers(c[r], 2, 1, r ? "rank 1" : "rank 0");
    for (int r = 0; r < 2; r++)
        ps_kv_client_close(c[r]);
    server_down();
    ps_model_spec_free(&kinds);
    ps_model_spec_free(&table);
}

/* ---- a checkpoint wins over rank 0's values ------------------------------ */

/* A checkpoint of make_table's table at clock 5 in dir, its declared
 * tensors all 7. */
static void write_checkpoint(const char *dir, const ps_kv_server_config *cfg)
{
    ps_checkpoint_meta meta = {0};
    ps_partition *part;
    ps_shard *shard;
    uint64_t c[64], n[64];
    ps_checkpoint_clocks clocks = {c, n};

    cr_assert_eq(ps_partition_init(&part, &table, 1, CHUNK_BYTES), 0);
    cr_assert_eq(ps_shard_init(&shard, part, 0, &table, &cfg->opt, 0), 0);
    cr_assert_lt(ps_shard_chunk_count(shard), 64);
    for (int i = 0; i < ps_shard_chunk_count(shard); i++) {
        const ps_chunk *ch = ps_shard_chunk(shard, i);
        cr_assert_eq(ps_shard_fill(shard, i, 1), 0);
        if (table.tensors[ch->tensor_id].init == PS_INIT_VALUES)
            for (size_t k = 0; k < ch->numel; k++)
                ps_shard_weights_mut(shard, i)[k] = 7.0f;
        c[i] = n[i] = 5;
    }
    meta.num_servers = 1;
    meta.optimizer = (uint32_t)cfg->opt.kind;
    meta.fingerprint = ps_model_spec_fingerprint(&table);
    meta.chunk_bytes = CHUNK_BYTES;
    meta.clock = 5;
    meta.job = ps_job_fingerprint(NULL, 0);
    cr_assert_eq(ps_checkpoint_write(dir, 3, &meta, &table, shard, &clocks, NULL, NULL, 0), 0);
    ps_shard_free(shard);
    ps_partition_free(part);
}

Test(kv_values, a_restored_checkpoint_wins_over_rank_0s_values, .timeout = 60)
{
    ps_kv_server_config cfg;
    char dir[] = "/tmp/test_kv_values.XXXXXX", cmd[64];
    static puller p[2];

    cr_assert_not_null(mkdtemp(dir));
    kv_fixture_config(&cfg);
    make_table();
    cfg.table = NULL;
    cfg.world = 2;
    cfg.checkpoint_dir = dir;
    cfg.keep_checkpoints = 3;
    write_checkpoint(dir, &cfg);
    fx.restore = 1;
    server_up_with(&cfg);
    for (int r = 1; r >= 0; r--) {
        uint64_t clock;

        p[r].c = connect_as(&table, r == 0 ? values : NULL, r, &clock);
        cr_assert_eq(clock, 5, "resumed at the checkpoint's clock");
    }
    for (int r = 0; r < 2; r++) {
        float *dest[KV_TENSORS] = {p[r].w[0], p[r].w[1], p[r].w[2]};
        cr_assert_eq(ps_kv_client_pull(p[r].c, 5, dest), 0);
        cr_assert_eq(ps_kv_client_wait(p[r].c), 0, "%s", ps_kv_client_last_error(p[r].c));
        for (size_t k = 0; k < 40; k++)
            cr_assert_eq(p[r].w[0][k], 7.0f, "rank %d emb[%zu]: the checkpoint's, not rank 0's", r,
                         k);
        for (size_t k = 0; k < 7 * 40; k++)
            cr_assert_eq(p[r].w[2][k], 7.0f, "rank %d fc.weight[%zu]", r, k);
        ps_kv_client_close(p[r].c);
    }
    server_down();
    ps_model_spec_free(&table);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}
