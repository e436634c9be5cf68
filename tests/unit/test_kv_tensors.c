/* A server that starts with no tensors (tensors.c): the first worker's HELLO
 * declares them, later HELLOs must declare the same (refused with the first
 * difference named), and nothing a refused HELLO declares is adopted: not a
 * table over --max-model-bytes, a malformed one, or one sent with a HELLO
 * that fails another check. Raw peers over loopback against the server in a
 * thread (kv_fixture); the WELCOME or REJECT each gets is the evidence, and
 * the stats the server ended with. A HELLO that declares nothing joins the
 * job as declared, and its WELCOME carries the tensors. */
#include <criterion/criterion.h>

#include <errno.h>
#include <string.h>

#include "kv_fixture.h"
#include "ps_error.h"
#include "tensor_table.h"

static ps_frame_decoder *dec;

/* Sends a HELLO of rank/world declaring table; returns the answer's type and
 * copies its reason (REJECT) into reason. The connection is kept open while
 * admitted (its fd is returned through keep) and closed after a refusal. */
static int hello_as(const ps_model_spec *table, uint32_t rank, uint32_t world, char *reason,
                    int *keep)
{
    Shardps__Header h;
    Shardps__Hello hello;
    ps_frame f;
    int fd = raw_connect(), type;

    make_hello_as(&h, &hello, table, rank, world);
    raw_send_frame(fd, &h);
    raw_read_frame(fd, dec, &f, "handshake");
    type = f.hdr->type;
    snprintf(reason, 512, "%s", f.hdr->reason ? f.hdr->reason : "");
    if (type == SHARDPS__MSG_TYPE__REJECT) {
        cr_assert_lt(f.hdr->status, 0);
        expect_closed(fd, "refused");
    } else {
        *keep = fd;
    }
    return type;
}

static void mlp(ps_model_spec *spec, int hidden)
{
    const int sizes[] = {5, hidden, 3};

    cr_assert_eq(ps_model_spec_init_mlp(spec, sizes, 3, 1234), 0);
}

static void start(size_t max_model_bytes)
{
    ps_kv_server_config cfg;

    kv_fixture_config(&cfg);
    cfg.table = NULL;
    cfg.world = 2;
    cfg.max_model_bytes = max_model_bytes;
    server_up_with(&cfg);
    cr_assert_eq(ps_frame_decoder_init(&dec, 1 << 20), 0);
}

static void stop(void)
{
    server_down();
    ps_frame_decoder_free(dec);
}

Test(kv_tensors, first_hello_declares_the_tensors_and_others_are_refused, .timeout = 30)
{
    ps_model_spec other;
    char reason[512];
    int w0 = -1, w1 = -1;

    start(0);
    cr_assert_eq(hello_as(&fx.spec, 0, 2, reason, &w0), SHARDPS__MSG_TYPE__WELCOME, "%s", reason);
    mlp(&other, 8);
    cr_assert_eq(hello_as(&other, 1, 2, reason, &w1), SHARDPS__MSG_TYPE__REJECT);
    cr_assert(strstr(reason, "model mismatch: tensor fc1.weight: 8x5 from the worker, 16x5 on "
                             "this server"),
              "%s", reason);
    cr_assert_eq(hello_as(&fx.spec, 1, 2, reason, &w1), SHARDPS__MSG_TYPE__WELCOME, "%s", reason);
    /* Stopped first: workers that left before a step would withdraw it. */
    stop();
    close(w0);
    close(w1);
    /* One server holds every chunk of the 5-16-3 MLP. */
    cr_assert_eq(fx.stats.weight_bytes, fx.spec.total_numel * sizeof(float));
    cr_assert_gt(fx.stats.chunks, 0);
}

Test(kv_tensors, a_refused_hello_declares_nothing, .timeout = 30)
{
    ps_model_spec big, small;
    char reason[512];
    int w0 = -1;

    mlp(&big, 16);
    mlp(&small, 4);
    start(small.total_numel * sizeof(float));
    /* Over the limit: refused, and not adopted. */
    cr_assert_eq(hello_as(&big, 0, 2, reason, &w0), SHARDPS__MSG_TYPE__REJECT);
    cr_assert(strstr(reason, "tensor table refused:") && strstr(reason, "--max-model-bytes"), "%s",
              reason);
    /* Another check fails (the worker count): the table is not adopted either. */
    small.seed = 99;
    cr_assert_eq(hello_as(&small, 0, 3, reason, &w0), SHARDPS__MSG_TYPE__REJECT);
    cr_assert(strstr(reason, "expects 2 workers"), "%s", reason);
    /* No table at all: told to come back once a worker declared one. */
    {
        Shardps__Header h;
        Shardps__Hello hello;
        ps_frame f;
        int fd = raw_connect();
        make_hello_as(&h, &hello, &small, 0, 2);
        hello.table = NULL;
        raw_send_frame(fd, &h);
        raw_read_frame(fd, dec, &f, "no table");
        cr_assert_eq(f.hdr->type, SHARDPS__MSG_TYPE__REJECT);
        cr_assert_eq(f.hdr->status, -EAGAIN);
        cr_assert(strstr(f.hdr->reason, "no tensor table yet"), "%s", f.hdr->reason);
        expect_closed(fd, "no table");
    }
    /* The first acceptable HELLO's table is the one adopted: seed 99 too. */
    small.seed = 1234;
    mlp(&small, 4);
    small.seed = 99;
    cr_assert_eq(hello_as(&small, 0, 2, reason, &w0), SHARDPS__MSG_TYPE__WELCOME, "%s", reason);
    stop();
    close(w0);
    cr_assert_eq(fx.stats.weight_bytes, small.total_numel * sizeof(float));
}

Test(kv_tensors, a_hello_without_a_table_joins_and_is_told_the_tensors, .timeout = 30)
{
    Shardps__Header h;
    Shardps__Hello hello;
    ps_model_spec told;
    ps_frame f;
    char reason[512], why[256];
    int w0 = -1, fd;

    start(0);
    cr_assert_eq(hello_as(&fx.spec, 0, 2, reason, &w0), SHARDPS__MSG_TYPE__WELCOME, "%s", reason);
    fd = raw_connect();
    make_hello_as(&h, &hello, &fx.spec, 1, 2);
    hello.table = NULL;
    raw_send_frame(fd, &h);
    raw_read_frame(fd, dec, &f, "join without a table");
    cr_assert_eq(f.hdr->type, SHARDPS__MSG_TYPE__WELCOME, "%s", f.hdr->reason ? f.hdr->reason : "");
    cr_assert_not_null(f.hdr->welcome->table);
    cr_assert_eq(ps_tensor_table_from_wire(f.hdr->welcome->table, 0, &told, why, sizeof(why)), 0,
                 "%s", why);
    cr_assert_eq(ps_tensor_table_diff(&told, &fx.spec, "told", "declared", why, sizeof(why)), 0,
                 "%s", why);
    close(fd);
    close(w0);
    stop();
}

/* A one-tensor table x[n]: what a stranger declares. */
static void stranger_table(ps_model_spec *t, int n)
{
    memset(t, 0, sizeof(*t));
    t->seed = 1;
    cr_assert_eq(ps_model_spec_add_tensor(t, "x", 1, &n, PS_INIT_ZERO, 1, 1), 0);
}

/* Reads the next frame on fd; it must be a REJECT or ERROR containing want,
 * and the server must then close. */
static void expect_told(int fd, const char *want, const char *what)
{
    ps_frame f;

    for (;;) {
        raw_read_frame(fd, dec, &f, what);
        if (f.hdr->type == SHARDPS__MSG_TYPE__ERROR || f.hdr->type == SHARDPS__MSG_TYPE__REJECT)
            break;
    }
    cr_assert(f.hdr->reason && strstr(f.hdr->reason, want), "%s: \"%s\"", what,
              f.hdr->reason ? f.hdr->reason : "");
    expect_closed(fd, what);
}

/* Issue 22, cause 1: a stranger's HELLO declaring x[1] as a free rank, then
 * gone. The server used to adopt that table for good: every real worker was
 * refused "model mismatch". A declaration is now withdrawn when its last
 * declarer leaves before a step is applied, with everything joined to it (a
 * joiner welcomed to it is closed, told why), and the real workers declare
 * theirs. */
Test(kv_tensors, a_declaration_leaves_with_its_declarer, .timeout = 30)
{
    Shardps__Header h;
    Shardps__Hello hello;
    ps_model_spec x;
    ps_frame f;
    char reason[512];
    int stranger = -1, joiner, w0 = -1, w1 = -1;

    start(0);
    stranger_table(&x, 1);
    cr_assert_eq(hello_as(&x, 1, 2, reason, &stranger), SHARDPS__MSG_TYPE__WELCOME, "%s", reason);
    /* A joiner (no table) is welcomed to the stranger's table... */
    joiner = raw_connect();
    make_hello_as(&h, &hello, &fx.spec, 0, 2);
    hello.table = NULL;
    raw_send_frame(joiner, &h);
    raw_read_frame(joiner, dec, &f, "joiner");
    cr_assert_eq(f.hdr->type, SHARDPS__MSG_TYPE__WELCOME);
    /* ...and closed, told why, once the stranger has gone. */
    close(stranger);
    expect_told(joiner, "the tensor table this worker joined was withdrawn", "joiner");
    /* The table may still be draining: the real workers retry -EAGAIN as
     * ps_kv_client does. */
    while (hello_as(&fx.spec, 0, 2, reason, &w0) != SHARDPS__MSG_TYPE__WELCOME)
        cr_assert(strstr(reason, "being withdrawn"), "%s", reason);
    cr_assert_eq(hello_as(&fx.spec, 1, 2, reason, &w1), SHARDPS__MSG_TYPE__WELCOME, "%s", reason);
    stop();
    close(w0);
    close(w1);
    cr_assert_eq(fx.stats.weight_bytes, fx.spec.total_numel * sizeof(float));
}
