/* A server that starts with no tensors (tensors.c): the first worker's HELLO
 * declares them, later HELLOs must declare the same (refused with the first
 * difference named), and nothing a refused HELLO declares is adopted: not a
 * table over --max-model-bytes, a malformed one, or one sent with a HELLO
 * that fails another check. Raw peers over loopback against the server in a
 * thread (kv_fixture); the WELCOME or REJECT each gets is the evidence, and
 * the stats the server ended with. A HELLO that declares nothing joins the
 * job as declared: a TABLE frame tells it the tensors, its WELCOME their
 * digest. Tables the size of real models (4,096 tensors, 255-byte names)
 * are declared and joined; over the limits, refused naming what. */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
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
    cr_assert_eq(ps_frame_decoder_init(&dec, PS_TABLE_MAX_BYTES), 0);
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
        hello.table_digest.len = 0;
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
    uint8_t digest[PS_TABLE_DIGEST_BYTES];
    ps_frame f;
    char reason[512], why[256];
    int w0 = -1, fd;

    start(0);
    cr_assert_eq(hello_as(&fx.spec, 0, 2, reason, &w0), SHARDPS__MSG_TYPE__WELCOME, "%s", reason);
    fd = raw_connect();
    make_hello_as(&h, &hello, &fx.spec, 1, 2);
    hello.table_digest.len = 0;
    raw_send_frame(fd, &h);
    /* The table comes in a TABLE frame, then the WELCOME names its digest. */
    raw_read_frame(fd, dec, &f, "join without a table");
    cr_assert_eq(f.hdr->type, SHARDPS__MSG_TYPE__TABLE, "%s", f.hdr->reason ? f.hdr->reason : "");
    cr_assert_eq(ps_tensor_table_decode(f.payload, f.payload_len, 0, &told, why, sizeof(why)), 0,
                 "%s", why);
    cr_assert_eq(ps_tensor_table_diff(&told, &fx.spec, "told", "declared", why, sizeof(why)), 0,
                 "%s", why);
    ps_model_spec_digest(&told, digest);
    ps_model_spec_free(&told);
    raw_read_frame(fd, dec, &f, "the WELCOME after the table");
    cr_assert_eq(f.hdr->type, SHARDPS__MSG_TYPE__WELCOME);
    cr_assert_eq(f.hdr->welcome->table_digest.len, sizeof(digest));
    cr_assert_eq(memcmp(f.hdr->welcome->table_digest.data, digest, sizeof(digest)), 0);
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
    hello.table_digest.len = 0;
    raw_send_frame(joiner, &h);
    raw_read_frame(joiner, dec, &f, "joiner's table");
    cr_assert_eq(f.hdr->type, SHARDPS__MSG_TYPE__TABLE);
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

/* n tensors of 2 floats, each named with 255 bytes: a transformer's worth
 * of dotted names and then some. */
static void big_table(ps_model_spec *t, int n)
{
    int shape[1] = {2};
    char name[PS_MAX_NAME_BYTES + 1];

    memset(t, 0, sizeof(*t));
    t->seed = 7;
    for (int i = 0; i < n; i++) {
        int k = snprintf(name, sizeof(name), "encoder.layers.%d.self_attn.in_proj_weight.", i);
        memset(name + k, 'w', PS_MAX_NAME_BYTES - (size_t)k);
        name[PS_MAX_NAME_BYTES] = '\0';
        cr_assert_eq(ps_model_spec_add_tensor(t, name, 1, shape, PS_INIT_HE_UNIFORM, 2, 2), 0,
                     "tensor %d", i);
    }
}

Test(kv_tensors, a_table_of_4096_tensors_with_255_byte_names_is_declared_and_joined, .timeout = 60)
{
    Shardps__Header h;
    Shardps__Hello hello;
    ps_model_spec big, told;
    ps_frame f;
    char reason[512], why[256];
    int w0 = -1, fd;

    big_table(&big, PS_MAX_TENSORS);
    start(0);
    cr_assert_eq(hello_as(&big, 0, 2, reason, &w0), SHARDPS__MSG_TYPE__WELCOME, "%s", reason);
    fd = raw_connect();
    make_hello_as(&h, &hello, &big, 1, 2);
    hello.table_digest.len = 0;
    raw_send_frame(fd, &h);
    raw_read_frame(fd, dec, &f, "the big table");
    cr_assert_eq(f.hdr->type, SHARDPS__MSG_TYPE__TABLE, "%s", f.hdr->reason ? f.hdr->reason : "");
    cr_assert_gt(f.payload_len, (size_t)1 << 20, "over the old 64 KiB header by far");
    cr_assert_eq(ps_tensor_table_decode(f.payload, f.payload_len, 0, &told, why, sizeof(why)), 0,
                 "%s", why);
    cr_assert_eq(ps_tensor_table_diff(&told, &big, "told", "declared", why, sizeof(why)), 0, "%s",
                 why);
    raw_read_frame(fd, dec, &f, "its WELCOME");
    cr_assert_eq(f.hdr->type, SHARDPS__MSG_TYPE__WELCOME);
    stop();
    close(fd);
    close(w0);
    ps_model_spec_free(&told);
    ps_model_spec_free(&big);
}

/* A declaring HELLO (announcing digest) followed by a TABLE frame whose
 * header says payload_bytes and whose payload is payload (len bytes, sent
 * only when it matches); the server's refusal must name want. */
static void declare_raw(const uint8_t *digest, const void *payload, size_t len,
                        uint64_t payload_bytes, int want_status, const char *want)
{
    Shardps__Header h, t = SHARDPS__HEADER__INIT;
    Shardps__Hello hello;
    ps_frame f;
    uint8_t *buf;
    size_t n;
    int fd = raw_connect();

    make_hello_as(&h, &hello, &fx.spec, 0, 2);
    hello.table_digest.data = (uint8_t *)digest;
    cr_assert_eq(ps_frame_encode(&h, NULL, 0, &buf, &n), 0);
    cr_assert_eq(raw_send(fd, buf, n), 0);
    free(buf);
    t.type = SHARDPS__MSG_TYPE__TABLE;
    t.request_id = h.request_id;
    if (payload_bytes == len) {
        raw_send_payload(fd, &t, payload, len);
    } else {
        t.version = PS_PROTOCOL_VERSION;
        t.payload_bytes = payload_bytes;
        cr_assert_eq(ps_frame_pack_header(&t, &buf, &n), 0);
        cr_assert_eq(raw_send(fd, buf, n), 0);
        free(buf);
    }
    raw_read_frame(fd, dec, &f, want);
    cr_assert_eq(f.hdr->type, SHARDPS__MSG_TYPE__REJECT);
    cr_assert_eq(f.hdr->status, want_status, "%s", f.hdr->reason);
    cr_assert(f.hdr->reason && strstr(f.hdr->reason, want), "want \"%s\": \"%s\"", want,
              f.hdr->reason ? f.hdr->reason : "");
    expect_closed(fd, want);
}

Test(kv_tensors, tables_over_the_limits_are_refused_naming_what, .timeout = 60)
{
    ps_model_spec big, other;
    ps_tensor_table_wire w;
    Shardps__TensorDecl extra, **ptrs;
    static char name_256[PS_MAX_NAME_BYTES + 2];
    uint8_t digest[PS_TABLE_DIGEST_BYTES] = {0}, *packed;
    size_t len;

    start(0);
    /* 4,097 tensors: one more than a table holds. */
    big_table(&big, PS_MAX_TENSORS);
    cr_assert_eq(ps_tensor_table_to_wire(&big, &w), 0);
    ptrs = malloc((PS_MAX_TENSORS + 1) * sizeof(*ptrs));
    cr_assert_not_null(ptrs);
    memcpy(ptrs, w.msg.tensors, PS_MAX_TENSORS * sizeof(*ptrs));
    extra = *w.msg.tensors[0];
    extra.name = "extra";
    ptrs[PS_MAX_TENSORS] = &extra;
    w.msg.tensors = ptrs;
    w.msg.n_tensors = PS_MAX_TENSORS + 1;
    len = shardps__tensor_table__get_packed_size(&w.msg);
    packed = malloc(len);
    cr_assert_not_null(packed);
    shardps__tensor_table__pack(&w.msg, packed);
    declare_raw(digest, packed, len, len, -PS_ETOOBIG, "4097 tensors; at most 4096");
    free(packed);
    free(ptrs);
    ps_tensor_table_wire_free(&w);
    /* A 256-byte name. */
    memset(name_256, 'n', PS_MAX_NAME_BYTES + 1);
    cr_assert_eq(ps_tensor_table_to_wire(&fx.spec, &w), 0);
    w.decls[1].name = name_256;
    len = shardps__tensor_table__get_packed_size(&w.msg);
    packed = malloc(len);
    cr_assert_not_null(packed);
    shardps__tensor_table__pack(&w.msg, packed);
    declare_raw(digest, packed, len, len, -PS_EPROTO,
                "tensor 1 (\"nnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnnn...\", 256 bytes): a name is "
                "1-255 bytes");
    free(packed);
    ps_tensor_table_wire_free(&w);
    /* A TABLE announcing more than the limit: refused on its header. */
    declare_raw(digest, NULL, 0, PS_TABLE_MAX_BYTES + 1, -PS_ETOOBIG,
                "a TABLE of 2097153 bytes; the tensor table takes at most 2097152");
    /* A TABLE that is not the table the HELLO's digest announced. */
    mlp(&other, 8);
    cr_assert_eq(ps_tensor_table_pack(&other, &packed, &len), 0);
    ps_model_spec_digest(&fx.spec, digest);
    declare_raw(digest, packed, len, len, -PS_EPROTO,
                "its digest is not the one the HELLO announced");
    free(packed);
    /* None of it was adopted: the real table is declared afterwards. */
    {
        char reason[512];
        int w0 = -1;
        cr_assert_eq(hello_as(&fx.spec, 0, 2, reason, &w0), SHARDPS__MSG_TYPE__WELCOME, "%s",
                     reason);
        stop();
        close(w0);
    }
    ps_model_spec_free(&other);
    ps_model_spec_free(&big);
}

/* Issue 23, point 9: ranks whose tables differ are refused with the first
 * difference named: by count, by name, by shape (above), by kind; and a
 * rank started twice is refused as such. The server compares the tables
 * themselves, since the TABLE frame brings the whole table. */
Test(kv_tensors, differing_ranks_are_told_the_first_difference, .timeout = 60)
{
    ps_model_spec other;
    char reason[512];
    int w0 = -1, w1 = -1;
    int one[1] = {3};

    start(0);
    cr_assert_eq(hello_as(&fx.spec, 0, 2, reason, &w0), SHARDPS__MSG_TYPE__WELCOME, "%s", reason);
    /* One tensor more. */
    cr_assert_eq(ps_model_spec_copy(&other, &fx.spec), 0);
    cr_assert_eq(ps_model_spec_add_tensor(&other, "head.bias", 1, one, PS_INIT_ZERO, 1, 1), 0);
    cr_assert_eq(hello_as(&other, 1, 2, reason, &w1), SHARDPS__MSG_TYPE__REJECT);
    cr_assert(strstr(reason, "model mismatch: 5 tensors from the worker, 4 on this server (first "
                             "extra: head.bias)"),
              "%s", reason);
    ps_model_spec_free(&other);
    /* A tensor named otherwise. */
    cr_assert_eq(ps_model_spec_copy(&other, &fx.spec), 0);
    strcpy(other.tensors[2].name, "classifier.weight");
    cr_assert_eq(hello_as(&other, 1, 2, reason, &w1), SHARDPS__MSG_TYPE__REJECT);
    cr_assert(strstr(reason, "tensor 2: classifier.weight from the worker, fc2.weight on this "
                             "server"),
              "%s", reason);
    /* A buffer where the job has a parameter. */
    strcpy(other.tensors[2].name, "fc2.weight");
    other.tensors[3].kind = PS_KIND_BUFFER;
    cr_assert_eq(hello_as(&other, 1, 2, reason, &w1), SHARDPS__MSG_TYPE__REJECT);
    cr_assert(strstr(reason, "tensor fc2.bias: float32 buffer from the worker, float32 parameter "
                             "on this server"),
              "%s", reason);
    ps_model_spec_free(&other);
    /* Rank 0 started twice. */
    cr_assert_eq(hello_as(&fx.spec, 0, 2, reason, &w1), SHARDPS__MSG_TYPE__REJECT);
    cr_assert(strstr(reason, "rank 0 is already connected"), "%s", reason);
    stop();
    close(w0);
}

/* Issue 23 pt 2: the job's table is rank 0's whoever starts first. Rank 1
 * declares first; rank 0 then declares another table and is admitted with
 * it, rank 1 is told why its table went (naming both ranks and the first
 * difference), and rank 1 coming back with its old table is refused as any
 * rank whose table differs. Once rank 0's table is held, a rank 0 started
 * twice with yet another table withdraws nothing. */
Test(kv_tensors, rank_0s_table_wins_over_one_declared_before, .timeout = 60)
{
    ps_model_spec other;
    ps_frame f;
    char reason[512];
    int w0 = -1, w1 = -1, w2 = -1;

    start(0);
    mlp(&other, 9);
    cr_assert_eq(hello_as(&fx.spec, 1, 2, reason, &w1), SHARDPS__MSG_TYPE__WELCOME, "%s", reason);
    cr_assert_eq(hello_as(&other, 0, 2, reason, &w0), SHARDPS__MSG_TYPE__WELCOME, "%s", reason);
    raw_read_frame(w1, dec, &f, "rank 1 told its table was withdrawn");
    cr_assert_eq(f.hdr->type, SHARDPS__MSG_TYPE__ERROR);
    cr_assert(strstr(f.hdr->reason, "rank 0 declared another table than rank 1: tensor fc1.weight: "
                                    "9x5 from rank 0, 16x5 declared first"),
              "%s", f.hdr->reason);
    expect_closed(w1, "rank 1 after the withdrawal");
    cr_assert_eq(hello_as(&fx.spec, 1, 2, reason, &w1), SHARDPS__MSG_TYPE__REJECT);
    cr_assert(strstr(reason, "model mismatch: tensor fc1.weight: 16x5 from the worker, 9x5 on this "
                             "server"),
              "%s", reason);
    cr_assert_eq(hello_as(&fx.spec, 0, 2, reason, &w2), SHARDPS__MSG_TYPE__REJECT);
    cr_assert(strstr(reason, "model mismatch: tensor fc1.weight: 16x5 from the worker"), "%s",
              reason);
    cr_assert_eq(hello_as(&other, 1, 2, reason, &w1), SHARDPS__MSG_TYPE__WELCOME, "%s", reason);
    stop();
    close(w0);
    close(w1);
    ps_model_spec_free(&other);
}
