/* ps-hostile-client's scenarios about embedding rows (issue 24, point 9),
 * run against a server whose table declares the row table "emb"
 * (--row-dim D adds it to the table the tool declares; see
 * tests/integration/rows_hostile.sh): a rows pull of 100 million IDs, a
 * rows push whose payload is 4 bytes short of its count, a pull naming an
 * ID twice, NaN rows (refused, the rows unchanged, the connection kept),
 * and a declarer of the same table with another dim. See
 * hostile_client.h. */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "hostile_client.h"
#include "ps_error.h"
#include "row_init.h"

int hc_rows_declare(hc_ctx *ctx, uint32_t dim)
{
    ps_row_table_spec r;

    memset(&r, 0, sizeof(r));
    strcpy(r.name, "emb");
    r.dim = dim;
    r.init = (ps_row_init){PS_ROW_INIT_UNIFORM, 0, 0, 0, -0.5, 0.5};
    return ps_model_spec_add_row_table(&ctx->spec, &r, NULL, 0);
}

static uint32_t rows_dim(const hc_ctx *ctx)
{
    return ctx->spec.n_row_tables > 0 ? ctx->spec.row_tables[0].dim : 0;
}

static Shardps__Header rows_header(Shardps__MsgType type, uint64_t count, uint64_t clock)
{
    Shardps__Header h = SHARDPS__HEADER__INIT;

    h.type = type;
    h.request_id = 5;
    h.clock = clock;
    h.dtype = SHARDPS__DTYPE__DTYPE_F32;
    h.row_table = 0;
    h.row_count = count;
    return h;
}

/* A handshake, then the request, whose refusal must name want. */
static int refused_request(hc_ctx *ctx, hc_conn *c, Shardps__Header *h, const void *payload,
                           size_t len, int status, const char *want)
{
    uint64_t clock;

    if (rows_dim(ctx) == 0) {
        note(c, "needs --row-dim");
        return -1;
    }
    if (handshake(ctx, c, &clock) < 0)
        return -1;
    h->clock = clock;
    if (send_frame(c, h, payload, len) < 0) {
        note(c, "the server closed before the request was sent");
        return -1;
    }
    return expect_refusal(ctx, c, SHARDPS__MSG_TYPE__ERROR, status, want);
}

int sc_rows_too_many(hc_ctx *ctx, hc_conn *c)
{
    Shardps__Header h = rows_header(SHARDPS__MSG_TYPE__PULL_ROWS, 100000000, 0);
    uint8_t *head;
    size_t len;
    uint64_t clock;
    int rc;

    if (rows_dim(ctx) == 0 || handshake(ctx, c, &clock) < 0)
        return -1;
    /* The header alone, announcing 800 MB of IDs: refused before any is read. */
    h.clock = clock;
    h.version = PS_PROTOCOL_VERSION;
    h.payload_bytes = 100000000ull * sizeof(uint64_t);
    if (ps_frame_pack_header(&h, &head, &len) < 0)
        return -1;
    rc = send_all(c->fd, head, len);
    free(head);
    if (rc < 0)
        return -1;
    return expect_refusal(ctx, c, SHARDPS__MSG_TYPE__ERROR, -E2BIG, "(--max-row-ids)");
}

int sc_rows_short(hc_ctx *ctx, hc_conn *c)
{
    Shardps__Header h = rows_header(SHARDPS__MSG_TYPE__PUSH_ROWS, 2, 0);
    size_t len = 2 * (8 + (size_t)rows_dim(ctx) * 4) - 4;
    uint8_t *payload = calloc(len + 1, 1);
    int rc;

    if (payload == NULL)
        return -1;
    rc = refused_request(ctx, c, &h, payload, len, -PS_EPROTO, "it needs");
    free(payload);
    return rc;
}

int sc_rows_dup(hc_ctx *ctx, hc_conn *c)
{
    Shardps__Header h = rows_header(SHARDPS__MSG_TYPE__PULL_ROWS, 3, 0);
    uint64_t ids[] = {5, 6, 5};

    return refused_request(ctx, c, &h, ids, sizeof(ids), -PS_EPROTO, "names ID 5 twice");
}

/* Sends a rows request and reads the answer of type want into *f. */
static int rows_round_trip(hc_conn *c, Shardps__Header *h, const void *payload, size_t len,
                           Shardps__MsgType want, ps_frame *f)
{
    int rc = send_frame(c, h, payload, len);

    while (rc == 0 && (rc = read_frame(c, f)) == 1 && f->hdr->type != want)
        if (f->hdr->type == SHARDPS__MSG_TYPE__ERROR) {
            note(c, "refused: %s", f->hdr->reason ? f->hdr->reason : "");
            return -1;
        }
    if (rc != 1) {
        note(c, "no answer of type %d (%s)", want, rc == 0 ? "closed" : ps_strerror(rc));
        return -1;
    }
    return 0;
}

/* NaN rows: the push is acknowledged with every row refused, and the rows
 * then read exactly as the initializer gives them. Needs a sync server of
 * one worker (the step completes without the refused push). */
int sc_rows_nan(hc_ctx *ctx, hc_conn *c)
{
    uint32_t dim = rows_dim(ctx);
    uint64_t ids[2] = {11, 1ull << 63}, clock;
    size_t len = 2 * (8 + (size_t)dim * 4);
    uint8_t *buf = calloc(len, 1);
    float *g = (float *)(void *)(buf + sizeof(ids)), want[64];
    ps_row_init init = ctx->spec.n_row_tables ? ctx->spec.row_tables[0].init : (ps_row_init){0};
    Shardps__Header h;
    ps_frame f;
    int rc = -1;

    if (buf == NULL || dim == 0 || dim > 64 || handshake(ctx, c, &clock) < 0)
        goto out;
    memcpy(buf, ids, sizeof(ids));
    for (uint32_t k = 0; k < 2 * dim; k++)
        g[k] = 1.0f;
    g[dim] = NAN;
    h = rows_header(SHARDPS__MSG_TYPE__PUSH_ROWS, 2, clock);
    if (rows_round_trip(c, &h, buf, len, SHARDPS__MSG_TYPE__PUSH_ROWS_REPLY, &f) < 0)
        goto out;
    note(c, "PUSH_ROWS_REPLY status %d, rejected %u; ", f.hdr->status, f.hdr->rejected);
    if (f.hdr->rejected != 2) {
        note(c, "the NaN push was not refused");
        goto out;
    }
    h = rows_header(SHARDPS__MSG_TYPE__PULL_ROWS, 2, clock + 1);
    if (rows_round_trip(c, &h, ids, sizeof(ids), SHARDPS__MSG_TYPE__PULL_ROWS_REPLY, &f) < 0)
        goto out;
    init.seed = ctx->spec.seed;
    for (int i = 0; i < 2; i++) {
        ps_row_init_values(&init, 0, ids[i], 0, dim, want);
        if (f.payload_len != 2 * dim * sizeof(float) ||
            memcmp(f.payload + (size_t)i * dim * sizeof(float), want, dim * sizeof(float)) != 0) {
            note(c, "row %d changed", i);
            goto out;
        }
    }
    note(c, "the rows are unchanged");
    rc = 0;
out:
    free(buf);
    return rc;
}

/* While c holds the table as its declarer, a second HELLO declaring the
 * row table with twice the dim is refused, the difference named. */
int sc_rows_dim(hc_ctx *ctx, hc_conn *c)
{
    hc_conn other;
    Shardps__Header h;
    Shardps__Hello hello;
    ps_model_spec wrong;
    uint64_t clock;
    int rc = -1;

    memset(&other, 0, sizeof(other));
    other.fd = -1;
    if (rows_dim(ctx) == 0 || handshake(ctx, c, &clock) < 0 ||
        ps_model_spec_copy(&wrong, &ctx->spec) < 0)
        return -1;
    wrong.row_tables[0].dim *= 2;
    if (conn_open(ctx, &other) == 0) {
        make_hello_table(ctx, &h, &hello, &wrong);
        if (send_hello(&other, &h) == 0)
            rc = expect_refusal(ctx, &other, SHARDPS__MSG_TYPE__REJECT, -PS_EMISMATCH,
                                "row table emb: dim");
        note(c, "%s", other.detail);
    }
    conn_close(&other);
    ps_model_spec_free(&wrong);
    return rc;
}
