/* libshardps (include/shardps.h), linked as the shared library, against a
 * real server in a thread (kv_fixture): every refusal of bad input, with its
 * code and sentence, and the bytes of pushes and pulls checked against the
 * server's arithmetic (plain SGD: w - LR * g, bit for bit). */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "kv_fixture.h"
#include "model_spec.h"
#include "shardps.h"

static const int sizes[] = {5, 16, 3};

/* code, and the handle's sentence holds words. */
#define expect_err(h, call, code, words)                                                           \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        cr_assert_eq(rc_, (code), "%s returned %d, not %d (%s)", #call, rc_, (code),               \
                     shardps_last_error(h));                                                       \
        cr_assert(strstr(shardps_last_error(h), (words)) != NULL, "'%s' not in '%s'", (words),     \
                  shardps_last_error(h));                                                          \
    } while (0)

/* A handle to the fixture's server, declared like it (seed 1234, 64-byte
 * chunks), not yet connected. */
static shardps *handle(void)
{
    const char *addr[] = {fx.addr};
    shardps *h;

    cr_assert_eq(shardps_new(&h, addr, 1, 0, 1), 0);
    cr_assert_eq(shardps_set_option(h, "seed", "1234"), 0);
    cr_assert_eq(shardps_set_option(h, "chunk-bytes", "64"), 0);
    cr_assert_eq(shardps_set_option(h, "connect-timeout", "5"), 0);
    cr_assert_eq(shardps_set_option(h, "log-level", "none"), 0);
    cr_assert_eq(shardps_declare_mlp(h, sizes, 3), 0);
    return h;
}

Test(shardps, new_refuses_bad_arguments)
{
    const char *good[] = {"127.0.0.1:7000"}, *bad[] = {"127.0.0.1"}, *null[] = {NULL};
    shardps *h = (shardps *)&h;

    cr_assert_eq(shardps_new(NULL, good, 1, 0, 1), -EINVAL);
    expect_err(NULL, shardps_new(&h, NULL, 1, 0, 1), -EINVAL, "server addresses");
    cr_assert_null(h);
    expect_err(NULL, shardps_new(&h, good, 0, 0, 1), -EINVAL, "server addresses");
    expect_err(NULL, shardps_new(&h, good, 1, 1, 1), -EINVAL, "rank 1");
    expect_err(NULL, shardps_new(&h, good, 1, -1, 2), -EINVAL, "rank -1");
    expect_err(NULL, shardps_new(&h, good, 1, 0, 0), -EINVAL, "world 0");
    expect_err(NULL, shardps_new(&h, bad, 1, 0, 1), -EINVAL, "'127.0.0.1'");
    expect_err(NULL, shardps_new(&h, null, 1, 0, 1), -EINVAL, "(null)");
    cr_assert_null(h);
    cr_assert_str_eq(shardps_strerror(SHARDPS_ETIMEOUT), "timed out");
    cr_assert_str_eq(shardps_version(), "1.0.0");
    shardps_abandon(NULL);
    cr_assert_eq(shardps_close(NULL), 0);
}

Test(shardps, options_refuse_bad_values)
{
    const char *addr[] = {"127.0.0.1:7000"};
    shardps *h;

    cr_assert_eq(shardps_new(&h, addr, 1, 0, 1), 0);
    cr_assert_eq(shardps_set_option(NULL, "seed", "1"), -EINVAL);
    expect_err(h, shardps_set_option(h, NULL, "1"), -EINVAL, "NULL");
    expect_err(h, shardps_set_option(h, "speed", "1"), -EINVAL, "unknown option 'speed'");
    expect_err(h, shardps_set_option(h, "seed", "-1"), -EINVAL, "option seed");
    expect_err(h, shardps_set_option(h, "seed", "1x"), -EINVAL, "'1x'");
    expect_err(h, shardps_set_option(h, "chunk-bytes", "2"), -EINVAL, "option chunk-bytes");
    expect_err(h, shardps_set_option(h, "connect-timeout", "nan"), -EINVAL, "connect-timeout");
    expect_err(h, shardps_set_option(h, "compress", "zip"), -EINVAL, "none, fp16 or bf16");
    expect_err(h, shardps_set_option(h, "log-level", "loud"), -EINVAL, "log-level");
    expect_err(h, shardps_set_option(h, "auth-token-file", "/nonexistent/token"), -ENOENT,
               "/nonexistent/token");
    cr_assert_eq(shardps_set_option(h, "compress", "fp16"), 0);
    cr_assert_eq(shardps_set_option(h, "job-settings", "anything"), 0);
    /* Declaring: a bad table, then a good one; the seed is fixed by then. */
    expect_err(h, shardps_declare_mlp(h, NULL, 3), -EINVAL, "NULL");
    expect_err(h, shardps_declare_mlp(h, sizes, 1), -EINVAL, "sizes");
    expect_err(h, shardps_declare_mlp(h, (int[]){5, 0}, 2), -EINVAL, "sizes");
    cr_assert_eq(shardps_tensor_count(h), 0);
    cr_assert_eq(shardps_declare_mlp(h, sizes, 3), 0);
    expect_err(h, shardps_set_option(h, "seed", "2"), -EBUSY, "before declaring");
    cr_assert_eq(shardps_tensor_count(h), 4);
    shardps_abandon(h);
}

Test(shardps, calls_out_of_order_are_refused)
{
    const char *addr[] = {"127.0.0.1:7000"};
    float buf[80], *dest[4] = {buf, buf, buf, buf};
    uint64_t clock;
    shardps_stats st;
    shardps *h;

    cr_assert_eq(shardps_new(&h, addr, 1, 0, 1), 0);
    expect_err(h, shardps_connect(h), -EINVAL, "declare the tensors first");
    expect_err(h, shardps_reconnect(h), -EINVAL, "declare the tensors first");
    cr_assert_eq(shardps_declare_mlp(h, sizes, 3), 0);
    expect_err(h, shardps_push(h, 0, buf, 80), -EINVAL, "not connected");
    expect_err(h, shardps_pull(h, 0, dest, 4), -EINVAL, "not connected");
    expect_err(h, shardps_wait(h), -EINVAL, "not connected");
    expect_err(h, shardps_progress(h), -EINVAL, "not connected");
    cr_assert_eq(shardps_start_clock(h, &clock), -EINVAL);
    cr_assert_eq(shardps_weights_clock(h, &clock), -EINVAL);
    cr_assert_eq(shardps_stats_get(h, &st), -EINVAL);
    cr_assert_eq(shardps_tensor_info(h, 4, NULL, 0, NULL), -EINVAL);
    cr_assert_eq(shardps_tensor_info(h, -1, NULL, 0, NULL), -EINVAL);
    cr_assert_eq(shardps_tensor_count(NULL), -EINVAL);
    shardps_abandon(h);
}

Test(shardps, unreachable_and_mismatched_servers_fail_with_a_reason)
{
    const char *addr[] = {"127.0.0.1:1"};
    shardps *h;

    cr_assert_eq(shardps_new(&h, addr, 1, 0, 1), 0);
    cr_assert_eq(shardps_set_option(h, "connect-timeout", "0.2"), 0);
    cr_assert_eq(shardps_set_option(h, "log-level", "none"), 0);
    cr_assert_eq(shardps_declare_mlp(h, sizes, 3), 0);
    expect_err(h, shardps_connect(h), SHARDPS_ETIMEOUT, "cannot reach server 0 at 127.0.0.1:1");
    shardps_abandon(h);

    server_up();
    h = handle();
    cr_assert_eq(shardps_declare_mlp(h, (int[]){5, 17, 3}, 3), 0);
    expect_err(h, shardps_connect(h), SHARDPS_EREJECTED, "refused us: model mismatch");
    shardps_abandon(h);
    server_down();
}

Test(shardps, pushes_and_pulls_carry_the_exact_bytes)
{
    ps_model_spec spec;
    float w[4][80], w1[4][80], g[4][80];
    float *dest[4] = {w[0], w[1], w[2], w[3]}, *dest1[4] = {w1[0], w1[1], w1[2], w1[3]};
    size_t numel[4];
    char name[32];
    uint64_t clock;
    shardps_stats st;
    shardps *h;

    server_up();
    cr_assert_eq(ps_model_spec_init_mlp(&spec, sizes, 3, 1234), 0);
    h = handle();
    cr_assert_eq(shardps_connect(h), 0);
    expect_err(h, shardps_connect(h), -EBUSY, "already connected");
    expect_err(h, shardps_set_option(h, "seed", "1"), -EBUSY, "before shardps_connect");
    expect_err(h, shardps_declare_mlp(h, sizes, 3), -EBUSY, "already connected");
    cr_assert_eq(shardps_start_clock(h, &clock), 0);
    cr_assert_eq(clock, 0);
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(shardps_tensor_info(h, i, name, sizeof(name), &numel[i]), 0);
        cr_assert_str_eq(name, spec.tensors[i].name);
        cr_assert_eq(numel[i], spec.tensors[i].numel);
    }
    /* The initial weights are the spec's, bit for bit. */
    expect_err(h, shardps_pull(h, 0, dest, 3), -EINVAL, "need 4 destinations");
    expect_err(h, shardps_pull(h, 0, (float *[]){w[0], NULL, w[2], w[3]}, 4), -EINVAL,
               "fc1.bias is NULL");
    cr_assert_eq(shardps_pull(h, 0, dest, 4), 0);
    expect_err(h, shardps_pull(h, 0, dest, 4), -EBUSY, "already in flight");
    cr_assert_eq(shardps_wait(h), 0);
    for (int i = 0; i < 4; i++) {
        float want[80];
        ps_model_spec_init_values(&spec, i, 0, numel[i], want);
        cr_assert_arr_eq(w[i], want, numel[i] * sizeof(float), "tensor %d", i);
        for (size_t k = 0; k < numel[i]; k++)
            g[i][k] = (float)(i + 1) * 0.37f - (float)k * 0.011f;
    }
    /* Bad pushes are refused before anything is sent. */
    expect_err(h, shardps_push(h, 4, g[0], numel[0]), -EINVAL, "no tensor 4");
    expect_err(h, shardps_push(h, 0, g[0], numel[0] - 1), -EINVAL, "fc1.weight holds 80");
    expect_err(h, shardps_push(h, 1, NULL, numel[1]), -EINVAL, "(NULL)");
    for (int i = 3; i >= 0; i--)
        cr_assert_eq(shardps_push(h, i, g[i], numel[i]), 0, "%s", shardps_last_error(h));
    expect_err(h, shardps_push(h, 2, g[2], numel[2]), -EBUSY, "fc2.weight was already pushed");
    cr_assert_eq(shardps_progress(h), 0);
    cr_assert_eq(shardps_pull(h, 1, dest1, 4), 0);
    cr_assert_eq(shardps_wait(h), 0, "%s", shardps_last_error(h));
    cr_assert_eq(shardps_weights_clock(h, &clock), 0);
    cr_assert_eq(clock, 1);
    for (int i = 0; i < 4; i++)
        for (size_t k = 0; k < numel[i]; k++) {
            float want = w[i][k] - LR * g[i][k];
            cr_assert(memcmp(&w1[i][k], &want, sizeof(float)) == 0, "tensor %d [%zu]: %a != %a", i,
                      k, (double)w1[i][k], (double)want);
        }
    cr_assert_eq(shardps_stats_get(h, &st), 0);
    cr_assert_eq(st.bytes_sent, (spec.total_numel) * sizeof(float));
    cr_assert_eq(st.bytes_received, 2 * spec.total_numel * sizeof(float));
    cr_assert_eq(shardps_close(h), 0);
    wait_done();
    server_down();
}

Test(shardps, declared_tensors_match_the_servers_table)
{
    const char *addr[] = {fx.addr};
    shardps *h;

    server_up();
    cr_assert_eq(shardps_new(&h, addr, 1, 0, 1), 0);
    cr_assert_eq(shardps_set_option(h, "seed", "1234"), 0);
    cr_assert_eq(shardps_set_option(h, "chunk-bytes", "64"), 0);
    cr_assert_eq(shardps_set_option(h, "log-level", "none"), 0);
    expect_err(h, shardps_declare(h, NULL, 1, (int64_t[]){3}, 0, 1, 1), -EINVAL, "name");
    expect_err(h, shardps_declare(h, "x", 5, (int64_t[]){1, 1, 1, 1, 1}, 0, 1, 1), -EINVAL,
               "dimensions");
    expect_err(h, shardps_declare(h, "x", 1, (int64_t[]){0}, 0, 1, 1), -EINVAL, "dimension 0");
    expect_err(h, shardps_declare(h, "x", 1, (int64_t[]){3}, 7, 1, 1), -EINVAL, "kind 7");
    expect_err(h, shardps_declare(h, "x", 1, (int64_t[]){3}, 0, 0, 1), -EINVAL, "fan");
    expect_err(h,
               shardps_declare(h, "a-name-longer-than-31-bytes-in-all", 1, (int64_t[]){3}, 0, 1, 1),
               -EINVAL, "name");
    expect_err(h, shardps_declare(h, "x", 2, (int64_t[]){65536, 65536}, 0, 1, 1), -E2BIG, "2^31");
    cr_assert_eq(shardps_tensor_count(h), 0);
    /* The fixture's 5-16-3 MLP, one tensor at a time: the same fingerprint. */
    cr_assert_eq(
        shardps_declare(h, "fc1.weight", 2, (int64_t[]){16, 5}, SHARDPS_INIT_HE_UNIFORM, 5, 16), 0);
    cr_assert_eq(shardps_declare(h, "fc1.bias", 1, (int64_t[]){16}, SHARDPS_INIT_ZERO, 5, 16), 0);
    cr_assert_eq(
        shardps_declare(h, "fc2.weight", 2, (int64_t[]){3, 16}, SHARDPS_INIT_XAVIER_UNIFORM, 16, 3),
        0);
    cr_assert_eq(shardps_declare(h, "fc2.bias", 1, (int64_t[]){3}, SHARDPS_INIT_ZERO, 16, 3), 0);
    cr_assert_eq(shardps_connect(h), 0, "%s", shardps_last_error(h));
    expect_err(h, shardps_declare(h, "x", 1, (int64_t[]){3}, 0, 1, 1), -EBUSY, "connected");
    shardps_close(h);
    wait_done();
    server_down();
}
