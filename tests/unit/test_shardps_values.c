/* libshardps 1.3's model values (include/shardps.h), linked as the shared
 * library, against a real server in a thread (kv_fixture): a tensor declared
 * with the caller's own values, of any kind and dtype, and the buffers rank
 * 0 writes each step. Every refusal names the tensor and why; the values
 * travel exactly: rank 1, which declared values of its own, pulls rank 0's
 * bit for bit, and rank 0's buffers (an int64 counter past any float) each
 * step after. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "kv_fixture.h"
#include "shardps.h"

#define STEPS 3

/* What each rank declares: its own w, counter, mean and frozen values
 * (rank 0's differ from rank 1's in every element). */
typedef struct {
    shardps *h;
    int rank;
    float w[8];
    int64_t count[2];
    float mean[3];
    float frozen[5];
    char why[512];
    int ok;
} rank_state;

static const char *long_name = "encoder.layers.0.self_attn.in_proj_weight.a_name_past_31_bytes";

static shardps *new_rank(int rank)
{
    const char *addr[] = {fx.addr};
    shardps *h;

    cr_assert_eq(shardps_new(&h, addr, 1, rank, 2), 0);
    cr_assert_eq(shardps_set_option(h, "chunk-bytes", "64"), 0);
    cr_assert_eq(shardps_set_option(h, "connect-timeout", "10"), 0);
    cr_assert_eq(shardps_set_option(h, "log-level", "none"), 0);
    return h;
}

static void declare_all(rank_state *r)
{
    shardps *h = r->h;
    float base = r->rank == 0 ? 1.0f : -100.0f;

    for (int i = 0; i < 8; i++)
        r->w[i] = base + (float)i * 0.125f;
    r->w[0] = r->rank == 0 ? -0.0f : 0.0f;
    r->count[0] = r->rank == 0 ? INT64_MAX - 5 : 7;
    r->count[1] = r->rank == 0 ? INT64_MIN + 3 : 7;
    for (int i = 0; i < 3; i++)
        r->mean[i] = base * 0.5f + (float)i;
    for (int i = 0; i < 5; i++)
        r->frozen[i] = base * 2.0f - (float)i;
    cr_assert_eq(shardps_declare_values(h, long_name, 2, (int64_t[]){2, 4}, SHARDPS_KIND_PARAMETER,
                                        SHARDPS_DTYPE_FLOAT32, r->w, sizeof(r->w)),
                 0, "%s", shardps_last_error(h));
    cr_assert_eq(shardps_declare_values(h, "bn.num_batches_tracked", 1, (int64_t[]){2},
                                        SHARDPS_KIND_BUFFER, SHARDPS_DTYPE_INT64, r->count,
                                        sizeof(r->count)),
                 0, "%s", shardps_last_error(h));
    cr_assert_eq(shardps_declare_values(h, "bn.running_mean", 1, (int64_t[]){3},
                                        SHARDPS_KIND_BUFFER, SHARDPS_DTYPE_FLOAT32, r->mean,
                                        sizeof(r->mean)),
                 0);
    cr_assert_eq(shardps_declare_values(h, "emb.weight", 1, (int64_t[]){5}, SHARDPS_KIND_FROZEN,
                                        SHARDPS_DTYPE_FLOAT32, r->frozen, sizeof(r->frozen)),
                 0);
}

static void start_server(void)
{
    ps_kv_server_config cfg;

    kv_fixture_config(&cfg);
    cfg.table = NULL;
    cfg.world = 2;
    server_up_with(&cfg);
}

Test(shardps_values, declare_values_refuses_bad_sizes_kinds_and_dtypes)
{
    const char *addr[] = {"127.0.0.1:1"};
    float v[6] = {0};
    int64_t c[2] = {0};
    shardps *h;

    cr_assert_eq(shardps_new(&h, addr, 1, 0, 1), 0);
    expect_err(h, shardps_declare_values(h, "w", 2, (int64_t[]){2, 3}, 0, 0, v, 5 * 4), -EINVAL,
               "w: the values hold 20 bytes; 6 float32 elements take 24");
    expect_err(h,
               shardps_declare_values(h, "n", 1, (int64_t[]){2}, SHARDPS_KIND_BUFFER,
                                      SHARDPS_DTYPE_INT64, c, 2 * 4),
               -EINVAL, "n: the values hold 8 bytes; 2 int64 elements take 16");
    expect_err(h,
               shardps_declare_values(h, "n", 1, (int64_t[]){2}, SHARDPS_KIND_PARAMETER,
                                      SHARDPS_DTYPE_INT64, c, sizeof(c)),
               -EINVAL, "a parameter is float32");
    expect_err(h, shardps_declare_values(h, "w", 1, (int64_t[]){6}, 3, 0, v, sizeof(v)), -EINVAL,
               "no tensor kind 3");
    expect_err(h, shardps_declare_values(h, "w", 1, (int64_t[]){6}, 0, 2, v, sizeof(v)), -EINVAL,
               "no dtype 2");
    expect_err(h, shardps_declare_values(h, "w", 1, (int64_t[]){6}, 0, 0, NULL, sizeof(v)), -EINVAL,
               "the values");
    expect_err(h, shardps_declare_values(h, "w", 1, (int64_t[]){0}, 0, 0, v, 0), -EINVAL,
               "dimension 0 is 0");
    expect_err(h, shardps_declare_values(h, "a name", 1, (int64_t[]){6}, 0, 0, v, sizeof(v)),
               -EINVAL, "a bad name");
    cr_assert_eq(shardps_tensor_count(h), 0, "nothing refused was added");
    cr_assert_eq(shardps_declare_values(h, "w", 1, (int64_t[]){6}, 0, 0, v, sizeof(v)), 0);
    expect_err(h, shardps_write_buffers(h, (const void *[]){NULL}, (size_t[]){0}, 1), -EINVAL,
               "not connected");
    cr_assert_eq(shardps_tensor_kind(h, 1, NULL, NULL), -EINVAL);
    shardps_abandon(h);
}

/* One rank's whole run: connect, the first pull (rank 0's values), then
 * STEPS steps of rank 0 writing its buffers and both pushing w. */
static void *run_rank(void *arg)
{
    rank_state *r = arg;
    shardps *h = r->h;
    float w[8], mean[3], frozen[5];
    int64_t count[2];
    float *dest[4] = {w, (float *)count, mean, frozen};
    const size_t counts[4] = {8, 2, 3, 5};
    float g[8];
    uint64_t clock = 0;

    for (int i = 0; i < 8; i++)
        g[i] = (float)(r->rank + 1);
    if (shardps_connect(h) < 0)
        goto fail;
    for (int step = 0; step <= STEPS; step++) {
        if (shardps_pull_into(h, clock + (uint64_t)step, dest, counts, 4) < 0 ||
            shardps_wait(h) < 0)
            goto fail;
        /* Rank 0's values, moved by step steps of SGD on the mean gradient
         * 1.5 (w) and by rank 0's writes (buffers). */
        for (int i = 0; i < 8; i++) {
            float want = (i == 0 ? -0.0f : 1.0f + (float)i * 0.125f);
            for (int s = 0; s < step; s++)
                want -= LR * 1.5f;
            if (memcmp(&w[i], &want, 4) != 0) {
                snprintf(r->why, sizeof(r->why), "step %d: w[%d] %g, want %g", step, i,
                         (double)w[i], (double)want);
                return NULL;
            }
        }
        if (count[0] != INT64_MAX - 5 + step || count[1] != INT64_MIN + 3 + step ||
            mean[2] != 2.5f + (float)step || frozen[4] != -2.0f) {
            snprintf(r->why, sizeof(r->why), "step %d: count %lld, mean %g, frozen %g", step,
                     (long long)count[0], (double)mean[2], (double)frozen[4]);
            return NULL;
        }
        if (step == STEPS)
            break;
        if (r->rank == 0) {
            int64_t next[2] = {count[0] + 1, count[1] + 1};
            float m[3] = {mean[0], mean[1], mean[2] + 1.0f};
            const void *v[4] = {NULL, next, m, NULL};
            if (shardps_write_buffers(h, v, (size_t[]){0, sizeof(next), sizeof(m), 0}, 4) < 0)
                goto fail;
        }
        if (shardps_push(h, 0, g, 8) < 0)
            goto fail;
    }
    r->ok = 1;
    return NULL;
fail:
    snprintf(r->why, sizeof(r->why), "%s", shardps_last_error(h));
    return NULL;
}

Test(shardps_values, rank_0s_values_and_buffers_reach_every_rank_exactly, .timeout = 60)
{
    static rank_state r[2];
    pthread_t t[2];
    int kind, dtype;

    start_server();
    /* Rank 1 first: it waits for rank 0's values. */
    for (int k = 1; k >= 0; k--) {
        memset(&r[k], 0, sizeof(r[k]));
        r[k].rank = k;
        r[k].h = new_rank(k);
        declare_all(&r[k]);
        cr_assert_eq(pthread_create(&t[k], NULL, run_rank, &r[k]), 0);
    }
    for (int k = 0; k < 2; k++) {
        cr_assert_eq(pthread_join(t[k], NULL), 0);
        cr_assert(r[k].ok, "rank %d: %s", k, r[k].why);
    }
    cr_assert_eq(shardps_tensor_kind(r[1].h, 1, &kind, &dtype), 0);
    cr_assert_eq(kind, SHARDPS_KIND_BUFFER);
    cr_assert_eq(dtype, SHARDPS_DTYPE_INT64);
    cr_assert_eq(shardps_tensor_kind(r[1].h, 3, &kind, NULL), 0);
    cr_assert_eq(kind, SHARDPS_KIND_FROZEN);
    /* The refusals of a connected handle. */
    {
        int64_t c[2] = {0};
        float m[3] = {0}, w[8] = {0};
        expect_err(r[1].h,
                   shardps_write_buffers(r[1].h, (const void *[]){NULL, c, NULL, NULL},
                                         (size_t[]){0, sizeof(c), 0, 0}, 4),
                   -EINVAL, "only rank 0 writes the buffers");
        expect_err(r[0].h,
                   shardps_write_buffers(r[0].h, (const void *[]){w, NULL, NULL, NULL},
                                         (size_t[]){sizeof(w), 0, 0, 0}, 4),
                   -EINVAL, "is a parameter, not a buffer");
        expect_err(r[0].h,
                   shardps_write_buffers(r[0].h, (const void *[]){NULL, c, NULL, NULL},
                                         (size_t[]){0, 8, 0, 0}, 4),
                   -EINVAL, "the values of bn.num_batches_tracked hold 8 bytes; it takes 16");
        expect_err(r[0].h,
                   shardps_write_buffers(r[0].h, (const void *[]){NULL, NULL, m},
                                         (size_t[]){0, 0, sizeof(m)}, 3),
                   -EINVAL, "need 4 entries");
        expect_err(r[0].h, shardps_push(r[0].h, 3, m, 5), -EPERM,
                   "frozen tensors are never pushed");
        expect_err(r[0].h, shardps_declare_values(r[0].h, "x", 1, (int64_t[]){1}, 0, 0, m, 4),
                   -EBUSY, "already connected");
    }
    for (int k = 0; k < 2; k++)
        shardps_close(r[k].h);
    server_down();
}
