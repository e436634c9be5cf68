/* libshardps 1.5's shardps_push_unused (a tensor no forward used this step),
 * linked as the shared library, against a real server in a thread
 * (kv_fixture): two ranks in sync train the fixture's MLP for a few steps in
 * which some tensors are used by both ranks, some by one rank only and some
 * by neither, under momentum SGD and under Adam, and rank 0's last pull is
 * compared bit for bit with a reference made of the server's own update rule
 * (optimizer.h) applied as DDP with find_unused_parameters=True and
 * torch.optim apply it: the mean over both ranks, the unused rank's share a
 * zero, when one rank used a tensor; no update at all (no momentum, no Adam
 * moments, no step count) when neither did. In async mode an unused push
 * applies nothing. Bad calls are refused with their reason. */
#include <criterion/criterion.h>
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "kv_fixture.h"
#include "model_spec.h"
#include "optimizer.h"
#include "shardps.h"

#define STEPS     5
#define N_TENSORS 4
#define MAX_NUMEL 80

static const int sizes[] = {5, 16, 3};

/* Whether rank used tensor t in step s. Tensor 1 (fc1.bias): by neither
 * rank in steps 1 and 2, by both otherwise; tensor 3 (fc2.bias): by rank 0
 * alone in step 1, by rank 1 alone in step 3, by neither in step 4 (its
 * momentum or moments then would still move it). */
static int used(int rank, int s, int t)
{
    if (t == 1)
        return s != 1 && s != 2;
    if (t == 3)
        return s == 1 ? rank == 0 : s == 3 ? rank == 1 : s != 4;
    return 1;
}

/* A gradient of rank's step s: every element non-zero, different per rank,
 * step and element. */
static float grad_of(int rank, int s, int t, size_t k)
{
    return (float)(rank + 1) * 0.25f - (float)s * 0.0625f + (float)t * 0.03125f -
           (float)k * 0.0078125f + 0.001f;
}

typedef struct {
    int rank;
    float w[N_TENSORS][MAX_NUMEL];
    size_t numel[N_TENSORS];
    char why[512];
    int ok;
} rank_run;

static shardps *new_rank(int rank, int world)
{
    const char *addr[] = {fx.addr};
    shardps *h;

    cr_assert_eq(shardps_new(&h, addr, 1, rank, world), 0);
    cr_assert_eq(shardps_set_option(h, "seed", "1234"), 0);
    cr_assert_eq(shardps_set_option(h, "chunk-bytes", "64"), 0);
    cr_assert_eq(shardps_set_option(h, "connect-timeout", "10"), 0);
    cr_assert_eq(shardps_set_option(h, "log-level", "none"), 0);
    cr_assert_eq(shardps_declare_mlp(h, sizes, 3), 0);
    return h;
}

/* One rank's steps: pull, then per tensor its gradient or unused; the last
 * pull's weights are kept. Runs on its own thread (a sync pull waits for the
 * other rank), so it reports instead of asserting. */
static void *rank_main(void *arg)
{
    rank_run *r = arg;
    shardps *h = new_rank(r->rank, 2);
    float *dest[N_TENSORS] = {r->w[0], r->w[1], r->w[2], r->w[3]};
    static float g[2][N_TENSORS][MAX_NUMEL];
    int rc = shardps_connect(h);

    for (int t = 0; rc == 0 && t < N_TENSORS; t++)
        rc = shardps_tensor_info(h, t, NULL, 0, &r->numel[t]);
    for (int s = 0; rc == 0 && s <= STEPS; s++) {
        rc = shardps_pull_into(h, (uint64_t)s, dest, r->numel, N_TENSORS);
        if (rc == 0)
            rc = shardps_wait(h);
        for (int t = N_TENSORS - 1; rc == 0 && s < STEPS && t >= 0; t--) {
            for (size_t k = 0; k < r->numel[t]; k++)
                g[r->rank][t][k] = grad_of(r->rank, s, t, k);
            rc = used(r->rank, s, t) ? shardps_push(h, t, g[r->rank][t], r->numel[t])
                                     : shardps_push_unused(h, t);
        }
    }
    snprintf(r->why, sizeof(r->why), "%s", shardps_last_error(h));
    r->ok = rc == 0;
    shardps_close(h);
    return NULL;
}

/* The weights DDP and torch.optim would reach, by the server's own rule at
 * the fixture's constant rate LR. */
static void reference(const ps_optimizer_config *opt, float want[N_TENSORS][MAX_NUMEL],
                      const size_t *numel)
{
    static float state[N_TENSORS][2 * MAX_NUMEL];
    uint64_t updates[N_TENSORS] = {0};

    memset(state, 0, sizeof(state));
    for (int t = 0; t < N_TENSORS; t++)
        ps_model_spec_init_values(&fx.spec, t, 0, numel[t], want[t]);
    for (int s = 0; s < STEPS; s++)
        for (int t = 0; t < N_TENSORS; t++) {
            float mean[MAX_NUMEL];
            if (!used(0, s, t) && !used(1, s, t))
                continue; /* torch.optim skips a parameter whose .grad is None */
            for (size_t k = 0; k < numel[t]; k++) {
                float sum = 0.0f;
                for (int r = 0; r < 2; r++)
                    if (used(r, s, t))
                        sum += grad_of(r, s, t, k);
                mean[k] = sum * (1.0f / 2.0f);
            }
            ps_optimizer_apply(opt, LR, want[t], state[t], mean, numel[t], ++updates[t]);
        }
}

static void train_two_ranks(const ps_optimizer_config *opt)
{
    ps_kv_server_config cfg;
    rank_run runs[2] = {{.rank = 0}, {.rank = 1}};
    pthread_t threads[2];
    float want[N_TENSORS][MAX_NUMEL];

    kv_fixture_config(&cfg);
    cfg.world = 2;
    cfg.opt = *opt;
    server_up_with(&cfg);
    for (int r = 0; r < 2; r++)
        cr_assert_eq(pthread_create(&threads[r], NULL, rank_main, &runs[r]), 0);
    for (int r = 0; r < 2; r++) {
        cr_assert_eq(pthread_join(threads[r], NULL), 0);
        cr_assert(runs[r].ok, "rank %d: %s", r, runs[r].why);
    }
    reference(opt, want, runs[0].numel);
    for (int t = 0; t < N_TENSORS; t++)
        for (size_t k = 0; k < runs[0].numel[t]; k++) {
            cr_assert(memcmp(&runs[0].w[t][k], &want[t][k], sizeof(float)) == 0,
                      "%s: tensor %d [%zu] is %a, DDP's %a", ps_optimizer_name(opt->kind), t, k,
                      (double)runs[0].w[t][k], (double)want[t][k]);
            cr_assert(memcmp(&runs[1].w[t][k], &want[t][k], sizeof(float)) == 0);
        }
    wait_done();
    server_down();
}

Test(shardps_unused, sync_momentum_skips_a_tensor_nobody_used, .timeout = 60)
{
    ps_optimizer_config opt;

    ps_optimizer_defaults(&opt, PS_OPT_SGD);
    opt.momentum = 0.9f;
    opt.weight_decay = 0.01f;
    train_two_ranks(&opt);
}

Test(shardps_unused, sync_adam_skips_a_tensor_nobody_used_and_its_step_count, .timeout = 60)
{
    ps_optimizer_config opt;

    ps_optimizer_defaults(&opt, PS_OPT_ADAM);
    opt.weight_decay = 0.01f;
    train_two_ranks(&opt);
}

/* Async: an unused push is taken (it moves the rank's clock) but applies
 * nothing; a gradient beside it is applied as ever. Bad calls are refused
 * before anything is sent. */
Test(shardps_unused, async_applies_nothing_for_an_unused_push, .timeout = 60)
{
    ps_kv_server_config cfg;
    float w[N_TENSORS][MAX_NUMEL], w1[N_TENSORS][MAX_NUMEL], g[MAX_NUMEL];
    float *dest[N_TENSORS] = {w[0], w[1], w[2], w[3]},
          *dest1[N_TENSORS] = {w1[0], w1[1], w1[2], w1[3]};
    size_t numel[N_TENSORS];
    shardps_stats st;
    shardps *h;

    kv_fixture_config(&cfg);
    cfg.staleness = UINT32_MAX;
    cfg.mode = PS_MODE_ASYNC;
    server_up_with(&cfg);
    h = new_rank(0, 1);
    expect_err(h, shardps_push_unused(h, 0), -EINVAL, "not connected");
    cr_assert_eq(shardps_connect(h), 0, "%s", shardps_last_error(h));
    for (int t = 0; t < N_TENSORS; t++)
        cr_assert_eq(shardps_tensor_info(h, t, NULL, 0, &numel[t]), 0);
    cr_assert_eq(shardps_pull_into(h, 0, dest, numel, N_TENSORS), 0);
    cr_assert_eq(shardps_wait(h), 0);
    expect_err(h, shardps_push_unused(h, 4), -EINVAL, "shardps_push_unused: no tensor 4");
    expect_err(h, shardps_push_unused(h, -1), -EINVAL, "no tensor -1");
    for (size_t k = 0; k < numel[2]; k++)
        g[k] = 0.5f - (float)k * 0.125f;
    cr_assert_eq(shardps_push_unused(h, 0), 0, "%s", shardps_last_error(h));
    expect_err(h, shardps_push_unused(h, 0), -EBUSY, "fc1.weight was already pushed this step");
    expect_err(h, shardps_push(h, 0, g, numel[0]), -EBUSY, "fc1.weight was already pushed");
    cr_assert_eq(shardps_push_unused(h, 1), 0);
    cr_assert_eq(shardps_push(h, 2, g, numel[2]), 0);
    cr_assert_eq(shardps_push_unused(h, 3), 0);
    cr_assert_eq(shardps_pull_into(h, 1, dest1, numel, N_TENSORS), 0);
    cr_assert_eq(shardps_wait(h), 0, "%s", shardps_last_error(h));
    for (int t = 0; t < N_TENSORS; t++)
        for (size_t k = 0; k < numel[t]; k++) {
            float want = t == 2 ? w[t][k] - LR * g[k] : w[t][k];
            cr_assert(memcmp(&w1[t][k], &want, sizeof(float)) == 0, "tensor %d [%zu]: %a != %a", t,
                      k, (double)w1[t][k], (double)want);
        }
    /* Nothing dropped or refused, and no gradient bytes for unused tensors. */
    cr_assert_eq(shardps_stats_get(h, &st), 0);
    cr_assert_eq(st.dropped, 0);
    cr_assert_eq(st.bytes_sent, numel[2] * sizeof(float));
    cr_assert_eq(shardps_close(h), 0);
    wait_done();
    server_down();
}
