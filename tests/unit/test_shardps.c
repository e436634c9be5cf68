/* libshardps (include/shardps.h), linked as the shared library, against a
 * real server in a thread (kv_fixture): every refusal of bad input, with its
 * code and sentence, and the bytes of pushes and pulls checked against the
 * server's arithmetic (plain SGD: w - LR * g, bit for bit). A handle that
 * declares nothing joins: it adopts the server's table exactly, waits for a
 * declarer, gives up naming why, and refuses servers whose tables differ
 * (two fake servers played by the test, which welcome with tables it picks). */
#include <criterion/criterion.h>
#include <errno.h>
#include <signal.h>
#include <netinet/in.h>
#include <pthread.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "kv_fixture.h"
#include "model_spec.h"
#include "ps_log.h"
#include "shardps.h"
#include "tensor_table.h"

static const int sizes[] = {5, 16, 3};

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
    cr_assert_str_eq(shardps_version(), "1.6.0");
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
    expect_err(h, shardps_set_option(h, "compress", "zip"), -EINVAL, "accepted: none|fp16|bf16");
    expect_err(h, shardps_set_option(h, "log-level", "loud"), -EINVAL, "log-level");
    expect_err(h, shardps_set_option(h, "auth-token-file", "/nonexistent/token"), -ENOENT,
               "/nonexistent/token");
    /* Bounds and words are the job table's, as shardps-worker --help shows. */
    expect_err(h, shardps_set_option(h, "total-steps", "3000000000"), -EINVAL,
               "accepted: 0 to 2147483647");
    cr_assert_eq(shardps_set_option(h, "request-timeout", "auto"), 0);
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
    expect_err(h, shardps_reconnect(h), -EINVAL, "connect first");
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
    cr_assert_eq(shardps_tensor_shape(h, 4, NULL, 0), -EINVAL);
    cr_assert_eq(shardps_tensor_shape(h, 0, NULL, 2), -EINVAL);
    cr_assert_eq(shardps_tensor_shape(h, 0, NULL, 0), 2);
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

/* A program's stop flag (set by its signal handler) ends a connect that
 * would otherwise retry for its whole connect timeout (600 s here). */
Test(shardps, a_stop_flag_ends_a_connect)
{
    static volatile sig_atomic_t stop = 1;
    const char *addr[] = {"127.0.0.1:1"};
    shardps *h;

    cr_assert_eq(shardps_set_stop_flag(NULL, &stop), -EINVAL);
    cr_assert_eq(shardps_new(&h, addr, 1, 0, 1), 0);
    cr_assert_eq(shardps_set_option(h, "connect-timeout", "600"), 0);
    cr_assert_eq(shardps_set_option(h, "log-level", "none"), 0);
    cr_assert_eq(shardps_declare_mlp(h, sizes, 3), 0);
    cr_assert_eq(shardps_set_stop_flag(h, &stop), 0);
    expect_err(h, shardps_connect(h), -EINTR,
               "stopped on request while waiting for server 0 (127.0.0.1:1) to accept");
    shardps_abandon(h);
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
    ps_model_spec_free(&spec);
}

/* shardps_pull_into (1.3) is told each buffer's size: a short or long one is
 * refused naming its tensor, and nothing is written, not even into the
 * buffers that were right. shardps_push_copy (1.3) sends the gradient as it
 * was when the call returned: the caller overwrites it at once; after a
 * failed wait it refuses to overwrite copies that may still be queued. */
Test(shardps, a_sized_pull_checks_sizes_and_a_copied_push_is_free_at_once)
{
    ps_model_spec spec;
    float w[4][84], w1[4][80], g[4][80], sent[4][80];
    float *dest[4] = {w[0], w[1], w[2], w[3]}, *dest1[4] = {w1[0], w1[1], w1[2], w1[3]};
    size_t counts[4];
    shardps *h;

    server_up();
    cr_assert_eq(ps_model_spec_init_mlp(&spec, sizes, 3, 1234), 0);
    h = handle();
    cr_assert_eq(shardps_connect(h), 0);
    for (int i = 0; i < 4; i++) {
        counts[i] = spec.tensors[i].numel;
        for (int k = 0; k < 84; k++)
            w[i][k] = -7.0f;
    }
    counts[1] = 2; /* fc1.bias holds 16 */
    expect_err(h, shardps_pull_into(h, 0, dest, counts, 4), -EINVAL,
               "shardps_pull_into: the destination of fc1.bias holds 2 floats; it needs 16");
    counts[1] = 17;
    expect_err(h, shardps_pull_into(h, 0, dest, counts, 4), -EINVAL, "fc1.bias holds 17 floats");
    expect_err(h, shardps_pull_into(h, 0, dest, NULL, 4), -EINVAL, "counts is NULL");
    expect_err(h, shardps_pull_into(h, 0, dest, counts, 3), -EINVAL, "need 4 destinations");
    for (int i = 0; i < 4; i++)
        for (int k = 0; k < 84; k++)
            cr_assert_eq(w[i][k], -7.0f, "a refused pull wrote w[%d][%d]", i, k);
    counts[1] = 16;
    cr_assert_eq(shardps_pull_into(h, 0, dest, counts, 4), 0, "%s", shardps_last_error(h));
    cr_assert_eq(shardps_wait(h), 0, "%s", shardps_last_error(h));
    for (int i = 0; i < 4; i++) {
        float want[80];
        ps_model_spec_init_values(&spec, i, 0, counts[i], want);
        cr_assert_arr_eq(w[i], want, counts[i] * sizeof(float), "tensor %d", i);
        cr_assert_eq(w[i][counts[i]], -7.0f, "tensor %d: written past its end", i);
    }
    expect_err(h, shardps_push_copy(h, 0, g[0], counts[0] - 1), -EINVAL,
               "shardps_push_copy: fc1.weight holds 80 floats, got 79");
    for (int i = 0; i < 4; i++) {
        for (size_t k = 0; k < counts[i]; k++)
            g[i][k] = (float)(i + 1) * 0.25f - (float)k * 0.013f;
        memcpy(sent[i], g[i], counts[i] * sizeof(float));
        cr_assert_eq(shardps_push_copy(h, i, g[i], counts[i]), 0, "%s", shardps_last_error(h));
        memset(g[i], 0xff, sizeof(g[i])); /* NaNs: what a zero_grad() would do, and worse */
    }
    expect_err(h, shardps_push_copy(h, 2, g[2], counts[2]), -EBUSY, "already pushed");
    cr_assert_eq(shardps_pull_into(h, 1, dest1, counts, 4), 0);
    cr_assert_eq(shardps_wait(h), 0, "%s", shardps_last_error(h));
    for (int i = 0; i < 4; i++)
        for (size_t k = 0; k < counts[i]; k++) {
            float want = w[i][k] - LR * sent[i][k];
            cr_assert(memcmp(&w1[i][k], &want, sizeof(float)) == 0, "tensor %d [%zu]: %a != %a", i,
                      k, (double)w1[i][k], (double)want);
        }
    /* A wait that fails may leave the copies to sends still queued: they
     * are not written again before a reconnect. */
    cr_assert_eq(shardps_push_copy(h, 0, g[0], counts[0]), 0, "%s", shardps_last_error(h));
    server_down();
    cr_assert_lt(shardps_wait(h), 0);
    expect_err(h, shardps_push_copy(h, 0, g[0], counts[0]), -EBUSY,
               "the last wait failed and its sends may still read the copies");
    shardps_abandon(h);
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
    {
        char long_name[PS_MAX_NAME_BYTES + 2];
        memset(long_name, 'n', PS_MAX_NAME_BYTES + 1);
        long_name[PS_MAX_NAME_BYTES + 1] = '\0';
        expect_err(h, shardps_declare(h, long_name, 1, (int64_t[]){3}, 0, 1, 1), -EINVAL, "name");
    }
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

/* ---- joining a job whose tensors are declared --------------------------- */

/* h describes spec's tensors: names, shapes, element counts. */
static void expect_table(const shardps *h, const ps_model_spec *spec)
{
    cr_assert_eq(shardps_tensor_count(h), spec->n_tensors);
    for (int i = 0; i < spec->n_tensors; i++) {
        const ps_tensor_spec *t = &spec->tensors[i];
        int64_t shape[4] = {0};
        char name[32];
        size_t numel;

        cr_assert_eq(shardps_tensor_info(h, i, name, sizeof(name), &numel), 0);
        cr_assert_str_eq(name, t->name);
        cr_assert_eq(numel, t->numel, "tensor %d", i);
        cr_assert_eq(shardps_tensor_shape(h, i, shape, 4), t->ndim, "tensor %d", i);
        for (int d = 0; d < t->ndim; d++)
            cr_assert_eq(shape[d], t->shape[d], "tensor %d dimension %d", i, d);
        /* Room for fewer dimensions: those fit, the count is still ndim. */
        shape[1] = -1;
        cr_assert_eq(shardps_tensor_shape(h, i, shape, 1), t->ndim);
        cr_assert_eq(shape[1], -1);
    }
}

/* Pulls the weights of the start clock into w: spec's initial values, bit
 * for bit. */
static void expect_initial_weights(shardps *h, const ps_model_spec *spec, float w[4][80])
{
    float *dest[4] = {w[0], w[1], w[2], w[3]};
    uint64_t clock;

    cr_assert_eq(shardps_start_clock(h, &clock), 0);
    cr_assert_eq(shardps_pull(h, clock, dest, 4), 0, "%s", shardps_last_error(h));
    cr_assert_eq(shardps_wait(h), 0, "%s", shardps_last_error(h));
    for (int i = 0; i < 4; i++) {
        float want[80];
        ps_model_spec_init_values(spec, i, 0, spec->tensors[i].numel, want);
        cr_assert_arr_eq(w[i], want, spec->tensors[i].numel * sizeof(float), "tensor %d", i);
    }
}

/* A handle of rank of world to the fixture's server, declaring nothing. */
static shardps *joiner(int rank, int world, const char *connect_timeout)
{
    const char *addr[] = {fx.addr};
    shardps *h;

    cr_assert_eq(shardps_new(&h, addr, 1, rank, world), 0);
    cr_assert_eq(shardps_set_option(h, "chunk-bytes", "64"), 0);
    cr_assert_eq(shardps_set_option(h, "connect-timeout", connect_timeout), 0);
    cr_assert_eq(shardps_set_option(h, "log-level", "none"), 0);
    return h;
}

Test(shardps, a_handle_that_declares_nothing_joins_the_servers_table)
{
    float w[4][80], w1[4][80], g[4][80];
    float *dest1[4] = {w1[0], w1[1], w1[2], w1[3]};
    const ps_model_spec *spec = &fx.spec;
    shardps *h;

    server_up();
    /* The job's chunk size is the servers': another layout is refused by name. */
    h = joiner(0, 1, "5");
    cr_assert_eq(shardps_set_option(h, "chunk-bytes", "128"), 0);
    expect_err(h, shardps_connect(h), SHARDPS_EREJECTED, "--chunk-bytes");
    shardps_abandon(h);

    h = joiner(0, 1, "5");
    cr_assert_eq(shardps_tensor_count(h), 0);
    cr_assert_eq(shardps_connect(h), 0, "%s", shardps_last_error(h));
    expect_table(h, spec);
    /* The server's seed (1234), not the handle's default (1). */
    expect_initial_weights(h, spec, w);
    for (int i = 3; i >= 0; i--) {
        for (size_t k = 0; k < spec->tensors[i].numel; k++)
            g[i][k] = (float)(i + 1) * 0.29f - (float)k * 0.013f;
        cr_assert_eq(shardps_push(h, i, g[i], spec->tensors[i].numel), 0);
    }
    cr_assert_eq(shardps_pull(h, 1, dest1, 4), 0);
    cr_assert_eq(shardps_wait(h), 0, "%s", shardps_last_error(h));
    for (int i = 0; i < 4; i++)
        for (size_t k = 0; k < spec->tensors[i].numel; k++) {
            float want = w[i][k] - LR * g[i][k];
            cr_assert(memcmp(&w1[i][k], &want, sizeof(float)) == 0, "tensor %d [%zu]: %a != %a", i,
                      k, (double)w1[i][k], (double)want);
        }
    cr_assert_eq(shardps_close(h), 0);
    wait_done();
    server_down();
}

/* libshardps 1.6's evaluator: it joins the servers' table, which
 * shardps_table hands over whole; a pull is a snapshot that says which
 * steps it holds; it neither declares, pushes, writes nor reports; a
 * worker's handle has no snapshot. */
Test(shardps, an_evaluator_reads_snapshots_and_never_writes)
{
    const char *addr[] = {fx.addr}, *bad[] = {"127.0.0.1"};
    float w[4][80], g[80] = {0}, *dest[4] = {w[0], w[1], w[2], w[3]};
    const ps_model_spec *spec = &fx.spec;
    ps_model_spec held;
    uint8_t packed[4096];
    uint64_t lo, hi;
    char why[256];
    shardps *h, *worker;
    int len;

    server_up();
    /* A worker's table is what it declared; it has no snapshot. Its job
     * starts with it: an evaluator's snapshot waits for the workers to
     * join. */
    worker = handle();
    len = shardps_table(worker, NULL, 0);
    cr_assert_gt(len, 0);
    cr_assert_leq(len, (int)sizeof(packed));
    cr_assert_eq(shardps_connect(worker), 0, "%s", shardps_last_error(worker));
    cr_assert_eq(shardps_snapshot_clocks(worker, &lo, &hi), -EINVAL);
    expect_err(NULL, shardps_new_evaluator(&h, bad, 1), -EINVAL, "shardps_new_evaluator");
    cr_assert_eq(shardps_new_evaluator(&h, addr, 1), 0, "%s", shardps_last_error(NULL));
    cr_assert_eq(shardps_set_option(h, "chunk-bytes", "64"), 0);
    cr_assert_eq(shardps_set_option(h, "connect-timeout", "5"), 0);
    cr_assert_eq(shardps_set_option(h, "log-level", "none"), 0);
    expect_err(h, shardps_declare_mlp(h, sizes, 3), -EINVAL, "an evaluator declares nothing");
    cr_assert_eq(shardps_snapshot_clocks(h, &lo, &hi), -EINVAL);
    cr_assert_eq(shardps_connect(h), 0, "%s", shardps_last_error(h));
    expect_table(h, spec);
    cr_assert_eq(shardps_table(h, NULL, 0), len);
    memset(packed, 0, sizeof(packed));
    cr_assert_eq(shardps_table(h, packed, (size_t)len - 1), len);
    cr_assert_eq(packed[0], 0, "a buffer too small is left as it was");
    cr_assert_eq(shardps_table(h, packed, sizeof(packed)), len);
    cr_assert_eq(ps_tensor_table_decode(packed, (size_t)len, 0, &held, why, sizeof(why)), 0, "%s",
                 why);
    cr_assert_eq(
        ps_tensor_table_diff(&held, spec, "as handed over", "on the server", why, sizeof(why)), 0,
        "%s", why);
    ps_model_spec_free(&held);
    cr_assert_eq(shardps_snapshot_clocks(h, &lo, &hi), -EINVAL, "no snapshot yet");
    expect_initial_weights(h, spec, w);
    cr_assert_eq(shardps_snapshot_clocks(h, &lo, &hi), 0);
    cr_assert_eq(lo, 0);
    cr_assert_eq(hi, 0);
    expect_err(h, shardps_push(h, 0, g, spec->tensors[0].numel), -EPERM, "never writes");
    expect_err(h, shardps_push_unused(h, 0), -EPERM, "never writes");
    expect_err(h, shardps_report(h, 1, 0.5, 10), -EINVAL, "no worker");
    /* The evaluator's pull leaves at flush, before any wait. */
    cr_assert_eq(shardps_pull(h, 0, dest, 4), 0);
    cr_assert_eq(shardps_flush(h), 0, "%s", shardps_last_error(h));
    cr_assert_eq(shardps_wait(h), 0, "%s", shardps_last_error(h));
    cr_assert_eq(shardps_close(worker), 0);
    cr_assert_eq(shardps_close(h), 0);
    wait_done();
    server_down();
}

static double seconds_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* A loop that computes (or tests its model) for longer than the servers'
 * heartbeat timeout stays in the job if it calls shardps_progress meanwhile:
 * the heartbeats the servers asked for go out from there. The 20 ms naps
 * stand for the computation; nothing waits on them. */
Test(shardps, progress_keeps_a_computing_worker_in_the_job)
{
    ps_kv_server_config cfg;
    float w[4][80], g[80] = {0};
    float *dest[4] = {w[0], w[1], w[2], w[3]};
    size_t numel;
    double end;
    shardps *h;

    kv_fixture_config(&cfg);
    cfg.heartbeat_timeout_ms = 1500;
    server_up_with(&cfg);
    h = handle();
    cr_assert_eq(shardps_connect(h), 0);
    cr_assert_eq(shardps_pull(h, 0, dest, 4), 0);
    cr_assert_eq(shardps_wait(h), 0);
    for (end = seconds_now() + 3 * 1.5; seconds_now() < end;) {
        cr_assert_eq(shardps_progress(h), 0, "%s", shardps_last_error(h));
        nanosleep(&(struct timespec){0, 20 * 1000 * 1000}, NULL);
    }
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(shardps_tensor_info(h, i, NULL, 0, &numel), 0);
        cr_assert_eq(shardps_push(h, i, g, numel), 0, "%s", shardps_last_error(h));
    }
    cr_assert_eq(shardps_pull(h, 1, dest, 4), 0);
    cr_assert_eq(shardps_wait(h), 0, "%s", shardps_last_error(h));
    cr_assert_eq(shardps_close(h), 0);
    wait_done();
    server_down();
}

/* The server's refusals of joiners, seen through its log (the test's own
 * copy of ps_log; the library's is its own): a joiner has been told to come
 * back at least once. */
static struct {
    pthread_mutex_t lock;
    pthread_cond_t cond;
    int told_to_wait;
} sink = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, 0};

static void on_server_log(void *arg, const char *line, size_t len)
{
    (void)arg;
    (void)len;
    pthread_mutex_lock(&sink.lock);
    if (strstr(line, "no tensor table yet"))
        sink.told_to_wait++;
    pthread_cond_broadcast(&sink.cond);
    pthread_mutex_unlock(&sink.lock);
}

typedef struct {
    shardps *h;
    int rc;
} connecting;

static void *connect_thread(void *arg)
{
    connecting *c = arg;

    c->rc = shardps_connect(c->h);
    return NULL;
}

static void start_tableless(int world)
{
    ps_kv_server_config cfg;

    kv_fixture_config(&cfg);
    cfg.table = NULL;
    cfg.world = world;
    server_up_with(&cfg);
}

Test(shardps, a_joiner_waits_for_the_declarer)
{
    float w[4][80];
    connecting join;
    pthread_t t;
    shardps *declarer;

    ps_log_set_sink(on_server_log, NULL);
    start_tableless(2);
    join.h = joiner(1, 2, "30");
    cr_assert_eq(pthread_create(&t, NULL, connect_thread, &join), 0);
    pthread_mutex_lock(&sink.lock);
    while (sink.told_to_wait == 0)
        pthread_cond_wait(&sink.cond, &sink.lock);
    pthread_mutex_unlock(&sink.lock);
    /* The joiner is waiting: now rank 0 declares the fixture's MLP. */
    cr_assert_eq(shardps_new(&declarer, (const char *[]){fx.addr}, 1, 0, 2), 0);
    cr_assert_eq(shardps_set_option(declarer, "seed", "1234"), 0);
    cr_assert_eq(shardps_set_option(declarer, "chunk-bytes", "64"), 0);
    cr_assert_eq(shardps_set_option(declarer, "log-level", "none"), 0);
    cr_assert_eq(shardps_declare_mlp(declarer, sizes, 3), 0);
    cr_assert_eq(shardps_connect(declarer), 0, "%s", shardps_last_error(declarer));
    cr_assert_eq(pthread_join(t, NULL), 0);
    cr_assert_eq(join.rc, 0, "%s", shardps_last_error(join.h));
    expect_table(join.h, &fx.spec);
    expect_initial_weights(join.h, &fx.spec, w);
    cr_assert_eq(shardps_close(join.h), 0);
    cr_assert_eq(shardps_close(declarer), 0);
    wait_done();
    server_down();
    ps_log_set_sink(NULL, NULL);
}

Test(shardps, a_joiner_gives_up_when_nobody_declares)
{
    shardps *h;

    start_tableless(2);
    h = joiner(1, 2, "0.5");
    expect_err(h, shardps_connect(h), SHARDPS_ETIMEOUT,
               "still holds no tensors after the connect timeout");
    cr_assert(strstr(shardps_last_error(h), "no worker has declared"), "%s", shardps_last_error(h));
    shardps_abandon(h);
    server_down();
}

/* A listening socket on a free loopback port; writes "127.0.0.1:PORT". */
static int fake_listen(char *addr, size_t len)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    cr_assert_geq(fd, 0);
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    cr_assert_eq(listen(fd, 4), 0);
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &alen), 0);
    snprintf(addr, len, "127.0.0.1:%d", ntohs(a.sin_port));
    return fd;
}

/* Plays a server: accepts the joiner's connection on lfd, checks its HELLO
 * declares nothing, and welcomes it with table (NULL: none). Returns the
 * connection. */
static int fake_welcome(int lfd, const ps_model_spec *table, ps_frame_decoder *dec)
{
    struct timeval tv = {.tv_sec = 5};
    Shardps__Header h = SHARDPS__HEADER__INIT;
    Shardps__Welcome w = SHARDPS__WELCOME__INIT;
    uint8_t digest[PS_TABLE_DIGEST_BYTES];
    ps_frame f;
    int fd = accept(lfd, NULL, NULL);

    cr_assert_geq(fd, 0);
    cr_assert_eq(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
    raw_read_frame(fd, dec, &f, "the joiner's HELLO");
    cr_assert_eq(f.hdr->type, SHARDPS__MSG_TYPE__HELLO);
    cr_assert_eq(f.hdr->hello->table_digest.len, 0, "a joiner declares no tensors");
    h.request_id = f.hdr->request_id;
    if (table) {
        Shardps__Header t = SHARDPS__HEADER__INIT;
        uint8_t *packed;
        size_t len;
        cr_assert_eq(ps_tensor_table_pack(table, &packed, &len), 0);
        t.type = SHARDPS__MSG_TYPE__TABLE;
        t.request_id = h.request_id;
        raw_send_payload(fd, &t, packed, len);
        free(packed);
        ps_model_spec_digest(table, digest);
        w.table_digest.len = sizeof(digest);
        w.table_digest.data = digest;
    }
    h.type = SHARDPS__MSG_TYPE__WELCOME;
    w.mode = "sync";
    h.welcome = &w;
    raw_send_frame(fd, &h);
    return fd;
}

/* A joiner of two servers welcomed with tables a and b fails with code,
 * saying words. */
static void join_two(const ps_model_spec *a, const ps_model_spec *b, int code, const char *words)
{
    char addr[2][32];
    const char *addrs[] = {addr[0], addr[1]};
    int lfd[2] = {fake_listen(addr[0], 32), fake_listen(addr[1], 32)}, fd[2];
    ps_frame_decoder *dec;
    connecting join;
    pthread_t t;

    cr_assert_eq(ps_frame_decoder_init(&dec, 1 << 20), 0);
    cr_assert_eq(shardps_new(&join.h, addrs, 2, 0, 1), 0);
    cr_assert_eq(shardps_set_option(join.h, "connect-timeout", "10"), 0);
    cr_assert_eq(shardps_set_option(join.h, "max-payload", "1024"), 0);
    cr_assert_eq(shardps_set_option(join.h, "log-level", "none"), 0);
    cr_assert_eq(pthread_create(&t, NULL, connect_thread, &join), 0);
    fd[0] = fake_welcome(lfd[0], a, dec);
    fd[1] = fake_welcome(lfd[1], b, dec);
    cr_assert_eq(pthread_join(t, NULL), 0);
    expect_err(join.h, join.rc, code, words);
    shardps_abandon(join.h);
    for (int s = 0; s < 2; s++) {
        close(fd[s]);
        close(lfd[s]);
    }
    ps_frame_decoder_free(dec);
}

Test(shardps, a_joiner_refuses_servers_that_hold_different_tables)
{
    ps_model_spec a, b;

    cr_assert_eq(ps_model_spec_init_mlp(&a, sizes, 3, 1234), 0);
    cr_assert_eq(ps_model_spec_init_mlp(&b, (int[]){5, 17, 3}, 3, 1234), 0);
    join_two(&a, &b, SHARDPS_EMISMATCH,
             "the servers hold different tensor tables: tensor fc1.weight: 1");
    /* The same tensors from another seed are other weights. */
    ps_model_spec_free(&b);
    cr_assert_eq(ps_model_spec_init_mlp(&b, sizes, 3, 99), 0);
    join_two(&a, &b, SHARDPS_EMISMATCH, "seed");
    /* More than the servers' replies (2 of max-payload 1024 bytes) can carry. */
    ps_model_spec_free(&b);
    cr_assert_eq(ps_model_spec_init_mlp(&b, (int[]){5, 300, 3}, 3, 1234), 0);
    join_two(&b, &b, SHARDPS_EPROTO, "more than 2 servers answer in frames of at most 1024 bytes");
    /* A WELCOME that does not say the tensors leaves nothing to join. */
    join_two(&a, NULL, SHARDPS_EPROTO, "server 1");
    ps_model_spec_free(&b);
    cr_assert_eq(ps_model_spec_init_mlp(&b, sizes, 3, 1234), 0);
    /* Equal tables: joined. */
    join_two(&a, &b, 0, "");
    ps_model_spec_free(&a);
    ps_model_spec_free(&b);
}
