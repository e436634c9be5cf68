/* ps-hostile-client's scenarios about the tensor table (issue 22): a
 * stranger that declares a table of its own and leaves, and one that
 * declares a table just under --max-model-bytes while another peer's round
 * trips and the server's memory are measured; and an evaluator, which
 * joins the table without a rank, that pushes. See hostile_client.h. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "clock.h"
#include "hostile_client.h"
#include "partition.h"
#include "ps_error.h"
#include "tensor_table.h"

/* A HELLO for ctx's job and rank, but declaring one tensor x[numel]. */
static int stranger_hello(hc_ctx *ctx, hc_conn *c, int numel)
{
    Shardps__Header h;
    Shardps__Hello hello;
    ps_model_spec x;
    int rc;

    memset(&x, 0, sizeof(x));
    x.seed = 1;
    if (ps_model_spec_add_tensor(&x, "x", 1, &numel, PS_INIT_ZERO, 1, 1) < 0)
        return -EINVAL;
    make_hello_table(ctx, &h, &hello, &x);
    ps_model_spec_free(&x);
    rc = send_hello(c, &h);
    return rc;
}

/* Reads the answer to a HELLO: 1 for a WELCOME, 0 for a refusal (noted),
 * -1 when there is none. */
static int hello_answer(hc_conn *c)
{
    ps_frame f;
    int rc = read_frame(c, &f);

    /* A joiner (an evaluator) is told the table before its WELCOME. */
    if (rc == 1 && f.hdr->type == SHARDPS__MSG_TYPE__TABLE)
        rc = read_frame(c, &f);
    if (rc != 1) {
        note(c, "no answer to the HELLO: %s", rc == 0 ? "the server closed" : ps_strerror(rc));
        return -1;
    }
    if (f.hdr->type == SHARDPS__MSG_TYPE__WELCOME)
        return 1;
    note(c, "refused: %s; ", f.hdr->reason ? f.hdr->reason : "(no reason)");
    return 0;
}

/* Issue 22, cause 1: a HELLO declaring the one-tensor table x[1] as this
 * rank, then gone. Passes once the server welcomed it (it adopted the
 * declaration): what the server keeps of it afterwards is the test's to
 * judge. */
int sc_stranger_table(hc_ctx *ctx, hc_conn *c)
{
    if (stranger_hello(ctx, c, 1) < 0)
        return -1;
    if (hello_answer(c) != 1)
        return -1;
    note(c, "declared x[1] and was welcomed; leaving");
    return 0;
}

/* Issue 22, cause 3: a HELLO of about 100 bytes declaring table_floats
 * floats (4 GiB less 64 bytes by default, just under --max-model-bytes).
 * Right after it, another peer asks probes times for its round trip (a
 * HELLO refused "model mismatch" on a fresh connection): the slowest must
 * stay under max_rtt_ms while the declaration is handled; then, with the
 * declaration held, the server's RSS must stay under max_rss_mib. The
 * server used to allocate and fill the table on its event loop: 8.6 s in
 * which nobody was answered, 4.2 GB resident. */
int sc_huge_table(hc_ctx *ctx, hc_conn *c)
{
    double slowest = 0, rss;
    int rc;

    if (stranger_hello(ctx, c, ctx->table_floats) < 0)
        return -1;
    for (int i = 0; i < ctx->probes; i++) {
        double t = probe(ctx);
        if (t < 0) {
            note(c, "probe %d got no REJECT within the timeout; ", i + 1);
            return -1;
        }
        slowest = t > slowest ? t : slowest;
    }
    rc = hello_answer(c);
    if (rc < 0)
        return -1;
    rss = server_rss_mib(ctx);
    note(c,
         "declared %d floats (%s); another peer's slowest of %d round trips %.1f ms (bound %.0f); "
         "server RSS %.1f MiB (bound %.0f)",
         ctx->table_floats, rc == 1 ? "welcomed" : "refused", ctx->probes, slowest * 1000,
         ctx->max_rtt_ms, rss, ctx->max_rss_mib);
    return slowest * 1000 < ctx->max_rtt_ms && rss >= 0 && rss < ctx->max_rss_mib ? 0 : -1;
}

/* Issue 22, cause 5: ctx->idle connections that never say a word, held
 * until the tool's stdin ends ("HELD ..." on stdout once they are made, so
 * the test knows when). Against a server with --auth-token-file none of
 * them can get past a handshake; they used to take every slot, and workers
 * holding the token were refused "this server takes at most N connections".
 * Those the server closes (to make room) stay closed. */
int sc_idle_slots(hc_ctx *ctx, hc_conn *c)
{
    hc_conn *held = calloc((size_t)ctx->idle, sizeof(*held));
    int open = 0;

    if (held == NULL)
        return -1;
    for (int i = 0; i < ctx->idle; i++)
        if (conn_open(ctx, &held[i]) == 0)
            open++;
        else
            held[i].fd = -1;
    printf("HELD %d open\n", open);
    fflush(stdout);
    /* Held until the test closes our stdin. */
    {
        char b[64];
        ssize_t n;
        do
            n = read(0, b, sizeof(b));
        while (n > 0 || (n < 0 && errno == EINTR));
    }
    for (int i = 0; i < ctx->idle; i++)
        if (held[i].fd >= 0)
            conn_close(&held[i]);
    free(held);
    note(c, "held %d idle connections", open);
    return 0;
}

/* Issue 23: the table in a TABLE frame of its own. A TABLE announcing more
 * than PS_TABLE_MAX_BYTES is refused on its header (nothing buffered). */
int sc_table_over_limit(hc_ctx *ctx, hc_conn *c)
{
    Shardps__Header h, t = SHARDPS__HEADER__INIT;
    Shardps__Hello hello;
    uint8_t *buf;
    size_t len;
    int rc;

    make_hello(ctx, &h, &hello);
    if (send_frame(c, &h, NULL, 0) < 0)
        return -1;
    t.type = SHARDPS__MSG_TYPE__TABLE;
    t.request_id = h.request_id;
    t.version = PS_PROTOCOL_VERSION;
    t.payload_bytes = PS_TABLE_MAX_BYTES + 1;
    if (ps_frame_pack_header(&t, &buf, &len) < 0)
        return -1;
    rc = send_all(c->fd, buf, len);
    free(buf);
    if (rc < 0)
        return -1;
    return expect_refusal(ctx, c, SHARDPS__MSG_TYPE__REJECT, -PS_ETOOBIG,
                          "the tensor table takes at most");
}

/* A HELLO announcing the job's table by digest, then a TABLE of another. */
int sc_table_digest_lie(hc_ctx *ctx, hc_conn *c)
{
    Shardps__Header h, t = SHARDPS__HEADER__INIT;
    Shardps__Hello hello;
    const uint8_t *table;
    uint8_t digest[PS_TABLE_DIGEST_BYTES], *copy;
    ps_model_spec other;
    size_t len;
    int rc;

    if (ps_model_spec_copy(&other, &ctx->spec) < 0)
        return -1;
    other.seed ^= 1;
    make_hello_table(ctx, &h, &hello, &other);
    ps_model_spec_free(&other);
    table = hello_table(&len);
    copy = malloc(len);
    if (copy == NULL)
        return -1;
    memcpy(copy, table, len);
    /* The HELLO says the job's table; the TABLE is the other one. */
    ps_model_spec_digest(&ctx->spec, digest);
    hello.table_digest.data = digest;
    t.type = SHARDPS__MSG_TYPE__TABLE;
    t.request_id = h.request_id;
    rc = send_frame(c, &h, NULL, 0);
    if (rc == 0)
        rc = send_frame(c, &t, copy, len);
    free(copy);
    if (rc < 0)
        return -1;
    return expect_refusal(ctx, c, SHARDPS__MSG_TYPE__REJECT, -PS_EPROTO,
                          "not the one the HELLO announced");
}

/* A declaring HELLO followed by a PULL where its TABLE should be. */
int sc_no_table(hc_ctx *ctx, hc_conn *c)
{
    Shardps__Header h, p = SHARDPS__HEADER__INIT;
    Shardps__Hello hello;

    make_hello(ctx, &h, &hello);
    p.type = SHARDPS__MSG_TYPE__PULL;
    p.request_id = 2;
    p.n_keys = ctx->n_keys;
    p.keys = ctx->keys;
    if (send_frame(c, &h, NULL, 0) < 0 || send_frame(c, &p, NULL, 0) < 0)
        return -1;
    return expect_refusal(ctx, c, SHARDPS__MSG_TYPE__REJECT, -PS_EPROTO, "expected the TABLE");
}

/* A WRITE of initial values from a rank other than 0 (issue 23, point 2). */
int sc_write_not_rank_0(hc_ctx *ctx, hc_conn *c)
{
    Shardps__Header h = SHARDPS__HEADER__INIT;
    uint64_t clock;
    float zero[64] = {0};

    if (handshake(ctx, c, &clock) < 0)
        return -1;
    h.type = SHARDPS__MSG_TYPE__WRITE;
    h.request_id = 2;
    h.n_keys = 1;
    h.keys = ctx->keys;
    if (send_frame(c, &h, zero, sizeof(float)) < 0)
        return -1;
    return expect_refusal(ctx, c, SHARDPS__MSG_TYPE__ERROR, -PS_EPROTO,
                          ctx->rank == 0 ? "WRITE names key" : "only the rank 0");
}

/* The evaluator role (read-only): a HELLO as shardps-eval --follow sends it
 * (no table, no rank), its WELCOME, then a well-formed PUSH of the first
 * key, which the server must refuse naming the rule. Passes when it did;
 * that the job goes on is the test's to judge. */
int sc_evaluator_push(hc_ctx *ctx, hc_conn *c)
{
    Shardps__Header h;
    Shardps__Hello hello;
    const ps_chunk *chunk;
    ps_partition *part;
    float *grad;
    size_t n;
    int rc;

    make_hello(ctx, &h, &hello);
    hello.role = SHARDPS__ROLE__ROLE_EVALUATOR;
    hello.rank = hello.world = 0;
    hello.table_digest.len = 0;
    if (send_frame(c, &h, NULL, 0) < 0 || hello_answer(c) != 1)
        return -1;
    if (ps_partition_init(&part, &ctx->spec, ctx->num_servers, ctx->chunk_bytes) < 0)
        return -1;
    chunk = ps_partition_find(part, ctx->keys[0]);
    n = chunk ? chunk->numel : 1;
    ps_partition_free(part);
    grad = calloc(n, sizeof(float));
    if (grad == NULL)
        return -1;
    shardps__header__init(&h);
    h.type = SHARDPS__MSG_TYPE__PUSH;
    h.request_id = 2;
    h.dtype = SHARDPS__DTYPE__DTYPE_F32;
    h.n_keys = 1;
    h.keys = ctx->keys;
    rc = send_frame(c, &h, grad, n * sizeof(float));
    free(grad);
    if (rc < 0)
        return -1;
    note(c, "admitted as an evaluator; pushed; ");
    return expect_refusal(ctx, c, SHARDPS__MSG_TYPE__ERROR, -PS_EPROTO,
                          "an evaluator is read-only: it cannot push");
}
