/* The client's embedding rows (kv_client.h, kv_rows.h): a call's IDs made unique (a
 * push's repeats summed), split by server with common/row_place, one
 * PULL_ROWS or PUSH_ROWS per server that holds some (a push: to every
 * server in sync mode, empty where none live), waited for, and each reply
 * checked by server_reply.h before a pull's rows are copied out. IDs travel
 * as raw little-endian uint64 in the payload; the header names the table
 * and the count. */
#include "kv_rows.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "half.h"
#include "ps_error.h"
#include "row_place.h"
#include "row_table.h"

long ps_kv_rows_unique(ps_id_set *seen, const uint64_t *ids, size_t n, uint64_t *uniq,
                       uint32_t *slot)
{
    size_t m = 0;

    if (ps_id_set_reset(seen, n) < 0)
        return -ENOMEM;
    for (size_t i = 0; i < n; i++) {
        int64_t at = ps_id_set_put(seen, ids[i], (uint32_t)m);
        if (at >= 0) {
            slot[i] = (uint32_t)at;
        } else {
            slot[i] = (uint32_t)m;
            uniq[m++] = ids[i];
        }
    }
    return (long)m;
}

/* The client's scratch of at least floats floats (contents undefined). */
static float *ps__rows_scratch_get(ps_kv_client *c, size_t floats)
{
    if (floats > c->rows.buf_floats) {
        float *b = malloc(floats * sizeof(float));
        if (b == NULL)
            return NULL;
        free(c->rows.buf);
        c->rows.buf = b;
        c->rows.buf_floats = floats;
    }
    return c->rows.buf;
}

int ps__rows_place(ps__remote *sv, const Shardps__Header *h, const ps_frame_piece **pieces)
{
    ps_frame f = {(Shardps__Header *)h, NULL, (size_t)h->payload_bytes, 0};
    char why[256];

    /* The header alone is judged here; the values' finiteness once they
     * landed (the decoder scans them on the way). */
    if (!sv->rows.busy || sv->rows.req.push ||
        ps_reply_check_rows(&f, &sv->rows.req, why, sizeof(why)) < 0)
        return 0;
    sv->rows.piece.base = sv->rows.dest;
    sv->rows.piece.len = f.payload_len;
    *pieces = &sv->rows.piece;
    return 1;
}

void ps__rows_on_reply(ps__remote *sv, const ps_frame *f)
{
    ps_kv_client *c = sv->cl;
    char why[256];

    if (ps_reply_check_rows(f, sv->rows.busy ? &sv->rows.req : NULL, why, sizeof(why)) < 0) {
        ps__distrust(sv, why);
        return;
    }
    if (sv->rows.req.push) {
        c->stats.dropped += (uint64_t)f->hdr->status;
        c->stats.rejected += f->hdr->rejected;
        c->stats.acked++;
    } else {
        /* Placed in rows_dest on the way in, unless the header was refused
         * (then the check above failed); a reply kept in the decoder's
         * buffer is copied. */
        if (f->payload != NULL)
            memcpy(sv->rows.dest, f->payload, f->payload_len);
        c->stats.bytes_received += f->payload_len;
        sv->owed.answered = 1;
    }
    if (!sv->rows.req.push)
        ps_conn_set_max_payload(sv->link.conn, ps__state_reply_limit(sv));
    sv->rows.busy = 0;
    sv->rows.dest = NULL;
    c->outstanding--;
}

/* One server's share of a call in one frame: its unique IDs and a push's
 * summed gradients (values: count x dim of dtype), both borrowed until the
 * call's wait returns. */
static int ps__rows_send(ps_kv_client *c, ps__remote *sv, const ps_reply_rows *r,
                         const uint64_t *ids, const void *values, Shardps__DType dtype, float *dest)
{
    Shardps__Header h = SHARDPS__HEADER__INIT;
    size_t value_bytes = dtype == SHARDPS__DTYPE__DTYPE_F32 ? sizeof(float) : sizeof(uint16_t);
    ps_iov iov[2] = {{ids, r->count * sizeof(uint64_t)},
                     {values, r->push ? r->count * r->dim * value_bytes : 0}};
    int rc;

    if (sv->link.conn == NULL)
        return -PS_ECLOSED;
    if (sv->rows.busy)
        return -EBUSY;
    h.type = r->push ? SHARDPS__MSG_TYPE__PUSH_ROWS : SHARDPS__MSG_TYPE__PULL_ROWS;
    h.request_id = ++c->next_id;
    h.clock = r->clock;
    h.row_table = r->table;
    h.row_count = r->count;
    h.dtype = dtype;
    if (!r->push) {
        /* The reply is allowed exactly the rows asked for, while it is owed. */
        size_t need = r->count * r->dim * sizeof(float), dense = ps__state_reply_limit(sv);
        if (need > c->cfg.max_payload) {
            ps__failf(c, -PS_ETOOBIG,
                      "a rows pull of %" PRIu64 " rows of dim %" PRIu32
                      " from server %d is %zu bytes, over max-payload %zu",
                      r->count, r->dim, sv->index, need, c->cfg.max_payload);
            return -PS_ETOOBIG;
        }
        ps_conn_set_max_payload(sv->link.conn, need > dense ? need : dense);
    }
    rc = ps_conn_send(sv->link.conn, &h, iov, r->push ? 2 : 1, NULL, NULL);
    if (rc < 0)
        return rc;
    sv->rows.req = *r;
    sv->rows.req.request_id = h.request_id;
    sv->rows.busy = 1;
    sv->rows.dest = dest;
    c->stats.bytes_sent += iov[0].len + iov[1].len;
    c->outstanding++;
    return 0;
}

/* A call split by server: IDs (and gradients) grouped per server, in the
 * order of the unique IDs. */
typedef struct {
    size_t m;         /* unique IDs */
    uint64_t *uniq;   /* m */
    uint32_t *slot;   /* n: position of the call's ID i in uniq */
    uint32_t *server; /* m: the server of uniq[j] */
    size_t *start;    /* n_servers + 1: server s's IDs at [start[s], start[s+1]) */
    uint64_t *by_srv; /* m IDs grouped by server */
    uint32_t *pos;    /* m: where uniq[j] went in by_srv */
} ps__rows_split;

static void ps__rows_split_free(ps__rows_split *sp)
{
    free(sp->uniq);
    free(sp->slot);
    free(sp->server);
    free(sp->start);
    free(sp->by_srv);
    free(sp->pos);
}

static int ps__rows_split_make(ps_kv_client *c, uint32_t table, const uint64_t *ids, size_t n,
                               ps__rows_split *sp)
{
    long m;

    memset(sp, 0, sizeof(*sp));
    sp->uniq = malloc((n + 1) * sizeof(*sp->uniq));
    sp->slot = malloc((n + 1) * sizeof(*sp->slot));
    sp->server = malloc((n + 1) * sizeof(*sp->server));
    sp->start = calloc((size_t)c->n_servers + 1, sizeof(*sp->start));
    sp->by_srv = malloc((n + 1) * sizeof(*sp->by_srv));
    sp->pos = malloc((n + 1) * sizeof(*sp->pos));
    if (!sp->uniq || !sp->slot || !sp->server || !sp->start || !sp->by_srv || !sp->pos)
        return -ENOMEM;
    m = ps_kv_rows_unique(&c->rows.seen, ids, n, sp->uniq, sp->slot);
    if (m < 0)
        return (int)m;
    sp->m = (size_t)m;
    ps_row_place_many(table, sp->uniq, sp->m, (uint32_t)c->n_servers, sp->server);
    for (size_t j = 0; j < sp->m; j++)
        sp->start[sp->server[j] + 1]++;
    for (int s = 0; s < c->n_servers; s++)
        sp->start[s + 1] += sp->start[s];
    {
        size_t *fill = calloc((size_t)c->n_servers + 1, sizeof(*fill));
        if (fill == NULL)
            return -ENOMEM;
        for (size_t j = 0; j < sp->m; j++) {
            uint32_t s = sp->server[j];
            sp->pos[j] = (uint32_t)(sp->start[s] + fill[s]++);
            sp->by_srv[sp->pos[j]] = sp->uniq[j];
        }
        free(fill);
    }
    return 0;
}

static int ps__rows_table_dim(ps_kv_client *c, uint32_t table, size_t n, uint32_t *dim)
{
    const ps_model_spec *spec = ps_kv_client_spec(c);

    if (table >= (uint32_t)spec->n_row_tables || n >= ((size_t)1 << 31))
        return -EINVAL;
    *dim = spec->row_tables[table].dim;
    return 0;
}

/* The most IDs one request may name: the job's --max-row-ids. */
static size_t ps__rows_limit(const ps_kv_client *c)
{
    return c->cfg.max_row_ids ? (size_t)c->cfg.max_row_ids : PS_ROWS_DEFAULT_MAX_IDS;
}

int ps_kv_client_pull_rows(ps_kv_client *c, uint32_t table, uint64_t clock, const uint64_t *ids,
                           size_t n, float *out)
{
    ps__rows_split sp;
    ps_reply_rows r = {0};
    float *got;
    size_t lim = ps__rows_limit(c);
    int rc = ps__rows_table_dim(c, table, n, &r.dim);

    if (rc < 0)
        return rc;
    rc = ps__rows_split_make(c, table, ids, n, &sp);
    if (rc < 0)
        goto out;
    /* Unique IDs that all live on one server arrive in the call's order:
     * their rows land in out itself. Else in the scratch, then copied out
     * in the call's order (repeats included). */
    got = out;
    for (int s = 0; s < c->n_servers && got == out; s++)
        if (sp.m != n || (sp.start[s + 1] - sp.start[s] != 0 && sp.start[s + 1] - sp.start[s] != n))
            got = NULL;
    rc = -ENOMEM;
    if (got == NULL && (got = ps__rows_scratch_get(c, sp.m * r.dim + 1)) == NULL)
        goto out;
    r.clock = clock;
    r.sync = c->mode.sync;
    r.max_clock = c->max_clock;
    r.table = table;
    /* A server's share over --max-row-ids goes in several requests, one
     * round at a time (one rows request per connection is in flight). */
    for (size_t off = 0, more = 1; more; off += lim) {
        more = 0;
        for (int s = 0; s < c->n_servers; s++) {
            size_t share = sp.start[s + 1] - sp.start[s], at = sp.start[s] + off;
            if (share <= off)
                continue;
            r.count = share - off < lim ? share - off : lim;
            rc = ps__rows_send(c, &c->servers[s], &r, sp.by_srv + at, NULL,
                               SHARDPS__DTYPE__DTYPE_F32, got + at * r.dim);
            if (rc < 0)
                goto out;
            more = 1;
        }
        rc = more ? ps_kv_client_wait(c) : 0;
        if (rc < 0)
            goto out;
    }
    for (size_t i = 0; got != out && i < n; i++)
        memcpy(out + i * r.dim, got + (size_t)sp.pos[sp.slot[i]] * r.dim, r.dim * sizeof(float));
out:
    ps__rows_split_free(&sp);
    return rc;
}

/* Whether this call may push table at clock: one push per table per step
 * (the server takes one, and drops a second as a repeat) and no server's
 * share over --max-row-ids (a push cannot be split, for the same reason).
 * Returns 0, -EALREADY or -E2BIG. */
static int ps__rows_push_allowed(ps_kv_client *c, uint32_t table, uint64_t clock,
                                 const ps__rows_split *sp)
{
    const ps_model_spec *spec = ps_kv_client_spec(c);

    if (c->rows.pushed == NULL &&
        (c->rows.pushed = calloc((size_t)spec->n_row_tables, sizeof(*c->rows.pushed))) == NULL)
        return -ENOMEM;
    if (c->rows.pushed[table] == clock + 1)
        return -EALREADY;
    for (int s = 0; s < c->n_servers; s++)
        if (sp->start[s + 1] - sp->start[s] > ps__rows_limit(c))
            return -E2BIG;
    return 0;
}

int ps_kv_client_push_rows(ps_kv_client *c, uint32_t table, const uint64_t *ids, size_t n,
                           const float *grads)
{
    ps__rows_split sp;
    ps_reply_rows r = {0};
    float *sums;
    uint16_t *half = NULL;
    const uint8_t *values;
    size_t value_bytes = sizeof(float), fresh = 0;
    Shardps__DType dtype = SHARDPS__DTYPE__DTYPE_F32;
    int rc = ps__rows_table_dim(c, table, n, &r.dim);

    if (rc < 0)
        return rc;
    rc = ps__rows_split_make(c, table, ids, n, &sp);
    r.clock = ps_kv_client_weights_clock(c);
    if (rc < 0 || (rc = ps__rows_push_allowed(c, table, r.clock, &sp)) < 0)
        goto out;
    sums = ps__rows_scratch_get(c, sp.m * r.dim + 1);
    rc = -ENOMEM;
    if (sums == NULL)
        goto out;
    /* Repeats summed in the call's order, grouped by server; an ID's first
     * gradient is added to 0 as before, so -0 still travels as +0. */
    for (size_t i = 0; i < n; i++) {
        float *to = sums + (size_t)sp.pos[sp.slot[i]] * r.dim;
        const float *g = grads + i * r.dim;
        if (sp.slot[i] == fresh) {
            fresh++;
            for (uint32_t k = 0; k < r.dim; k++)
                to[k] = 0.0f + g[k];
        } else {
            for (uint32_t k = 0; k < r.dim; k++)
                to[k] += g[k];
        }
    }
    values = (const uint8_t *)sums;
    if (c->cfg.compress != PS_COMPRESS_NONE) {
        half = malloc((sp.m * r.dim + 1) * sizeof(*half));
        if (half == NULL)
            goto out;
        dtype = c->cfg.compress == PS_COMPRESS_BF16 ? SHARDPS__DTYPE__DTYPE_BF16
                                                    : SHARDPS__DTYPE__DTYPE_F16;
        if (dtype == SHARDPS__DTYPE__DTYPE_BF16)
            ps_f32_to_bf16(half, sums, sp.m * r.dim);
        else
            ps_f32_to_f16(half, sums, sp.m * r.dim);
        values = (const uint8_t *)half;
        value_bytes = sizeof(uint16_t);
    }
    r.push = 1;
    r.sync = c->mode.sync;
    r.table = table;
    for (int s = 0; s < c->n_servers; s++) {
        r.count = sp.start[s + 1] - sp.start[s];
        if (r.count == 0 && !c->mode.sync)
            continue;
        rc = ps__rows_send(c, &c->servers[s], &r, sp.by_srv + sp.start[s],
                           values + sp.start[s] * r.dim * value_bytes, dtype, NULL);
        if (rc < 0)
            goto out;
    }
    c->rows.pushed[table] = r.clock + 1;
    rc = ps_kv_client_wait(c);
out:
    ps__rows_split_free(&sp);
    free(half);
    return rc;
}
