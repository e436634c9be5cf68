/* The client's embedding rows (kv_client.h): a call's IDs made unique (a
 * push's repeats summed), split by server with common/row_place, one
 * PULL_ROWS or PUSH_ROWS per server that holds some (a push: to every
 * server in sync mode, empty where none live), waited for, and each reply
 * checked by server_reply.h before a pull's rows are copied out. IDs travel
 * as raw little-endian uint64 in the payload; the header names the table
 * and the count. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "half.h"
#include "kv_client_internal.h"
#include "ps_error.h"
#include "row_place.h"

typedef struct {
    uint64_t id;
    uint32_t at; /* position in the call's ids */
} ps__id_at;

static int ps__cmp_id_at(const void *a, const void *b)
{
    const ps__id_at *x = a, *y = b;

    if (x->id != y->id)
        return x->id < y->id ? -1 : 1;
    return x->at < y->at ? -1 : x->at > y->at;
}

long ps_kv_rows_unique(const uint64_t *ids, size_t n, uint64_t *uniq, uint32_t *slot)
{
    ps__id_at *v = malloc((n + 1) * sizeof(*v));
    uint32_t *first = malloc((n + 1) * sizeof(*first));
    size_t m = 0;

    if (v == NULL || first == NULL) {
        free(v);
        free(first);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++)
        v[i] = (ps__id_at){ids[i], (uint32_t)i};
    qsort(v, n, sizeof(*v), ps__cmp_id_at);
    /* Mark each ID's first appearance, then number them in call order. */
    for (size_t i = 0; i < n; i++)
        first[i] = UINT32_MAX;
    for (size_t i = 0; i < n; i++)
        if (i == 0 || v[i].id != v[i - 1].id)
            first[v[i].at] = 0;
    for (size_t i = 0; i < n; i++)
        if (first[i] == 0) {
            first[i] = (uint32_t)m;
            uniq[m++] = ids[i];
        }
    for (size_t i = 0, head = 0; i < n; i++) {
        if (i == 0 || v[i].id != v[i - 1].id)
            head = first[v[i].at];
        slot[v[i].at] = (uint32_t)head;
    }
    free(v);
    free(first);
    return (long)m;
}

/* The largest answer sv may send besides a rows pull's: a dense pull of
 * all its keys (kv_conn.c). */
static size_t ps__dense_limit(const ps__server *sv)
{
    return sv->bytes < sv->cl->cfg.max_payload ? sv->bytes : sv->cl->cfg.max_payload;
}

void ps__handle_rows_reply(ps__server *sv, const ps_frame *f)
{
    ps_kv_client *c = sv->cl;
    char why[256];

    if (ps_reply_check_rows(f, sv->rows_busy ? &sv->rows : NULL, why, sizeof(why)) < 0) {
        ps__distrust(sv, why);
        return;
    }
    if (sv->rows.push) {
        c->stats.dropped += (uint64_t)f->hdr->status;
        c->stats.rejected += f->hdr->rejected;
        c->stats.acked++;
    } else {
        memcpy(sv->rows_dest, f->payload, f->payload_len);
        c->stats.bytes_received += f->payload_len;
    }
    if (!sv->rows.push)
        ps_conn_set_max_payload(sv->conn, ps__dense_limit(sv));
    sv->rows_busy = 0;
    sv->rows_dest = NULL;
    c->outstanding--;
}

/* One server's share of a call in one frame: its unique IDs and a push's
 * summed gradients (values: count x dim of dtype), both borrowed until the
 * call's wait returns. */
static int ps__send_rows(ps_kv_client *c, ps__server *sv, const ps_reply_rows *r,
                         const uint64_t *ids, const void *values, Shardps__DType dtype, float *dest)
{
    Shardps__Header h = SHARDPS__HEADER__INIT;
    size_t value_bytes = dtype == SHARDPS__DTYPE__DTYPE_F32 ? sizeof(float) : sizeof(uint16_t);
    ps_iov iov[2] = {{ids, r->count * sizeof(uint64_t)},
                     {values, r->push ? r->count * r->dim * value_bytes : 0}};
    int rc;

    if (sv->conn == NULL)
        return -PS_ECLOSED;
    if (sv->rows_busy)
        return -EBUSY;
    h.type = r->push ? SHARDPS__MSG_TYPE__PUSH_ROWS : SHARDPS__MSG_TYPE__PULL_ROWS;
    h.request_id = ++c->next_id;
    h.clock = r->clock;
    h.row_table = r->table;
    h.row_count = r->count;
    h.dtype = dtype;
    if (!r->push) {
        /* The reply is allowed exactly the rows asked for, while it is owed. */
        size_t need = r->count * r->dim * sizeof(float), dense = ps__dense_limit(sv);
        if (need > c->cfg.max_payload) {
            ps__failf(c, -PS_ETOOBIG,
                      "a rows pull of %" PRIu64 " rows of dim %" PRIu32
                      " from server %d is %zu bytes, over max-payload %zu",
                      r->count, r->dim, sv->index, need, c->cfg.max_payload);
            return -PS_ETOOBIG;
        }
        ps_conn_set_max_payload(sv->conn, need > dense ? need : dense);
    }
    rc = ps_conn_send(sv->conn, &h, iov, r->push ? 2 : 1, NULL, NULL);
    if (rc < 0)
        return rc;
    sv->rows = *r;
    sv->rows.request_id = h.request_id;
    sv->rows_busy = 1;
    sv->rows_dest = dest;
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

static void ps__split_free(ps__rows_split *sp)
{
    free(sp->uniq);
    free(sp->slot);
    free(sp->server);
    free(sp->start);
    free(sp->by_srv);
    free(sp->pos);
}

static int ps__split(ps_kv_client *c, uint32_t table, const uint64_t *ids, size_t n,
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
    m = ps_kv_rows_unique(ids, n, sp->uniq, sp->slot);
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

static int ps__rows_table(ps_kv_client *c, uint32_t table, size_t n, uint32_t *dim)
{
    const ps_model_spec *spec = ps_kv_client_spec(c);

    if (table >= (uint32_t)spec->n_row_tables || n >= ((size_t)1 << 31))
        return -EINVAL;
    *dim = spec->row_tables[table].dim;
    return 0;
}

int ps_kv_client_pull_rows(ps_kv_client *c, uint32_t table, uint64_t clock, const uint64_t *ids,
                           size_t n, float *out)
{
    ps__rows_split sp;
    ps_reply_rows r = {0};
    float *got = NULL;
    int rc = ps__rows_table(c, table, n, &r.dim);

    if (rc < 0)
        return rc;
    rc = ps__split(c, table, ids, n, &sp);
    if (rc < 0)
        goto out;
    got = malloc((sp.m * r.dim + 1) * sizeof(float));
    rc = -ENOMEM;
    if (got == NULL)
        goto out;
    r.clock = clock;
    r.sync = c->mode.sync;
    r.max_clock = c->max_clock;
    r.table = table;
    for (int s = 0; s < c->n_servers; s++) {
        r.count = sp.start[s + 1] - sp.start[s];
        if (r.count == 0)
            continue;
        rc = ps__send_rows(c, &c->servers[s], &r, sp.by_srv + sp.start[s], NULL,
                           SHARDPS__DTYPE__DTYPE_F32, got + sp.start[s] * r.dim);
        if (rc < 0)
            goto out;
    }
    rc = ps_kv_client_wait(c);
    if (rc < 0)
        goto out;
    for (size_t i = 0; i < n; i++)
        memcpy(out + i * r.dim, got + (size_t)sp.pos[sp.slot[i]] * r.dim, r.dim * sizeof(float));
out:
    ps__split_free(&sp);
    free(got);
    return rc;
}

int ps_kv_client_push_rows(ps_kv_client *c, uint32_t table, const uint64_t *ids, size_t n,
                           const float *grads)
{
    ps__rows_split sp;
    ps_reply_rows r = {0};
    float *sums = NULL;
    uint16_t *half = NULL;
    const uint8_t *values;
    size_t value_bytes = sizeof(float);
    Shardps__DType dtype = SHARDPS__DTYPE__DTYPE_F32;
    int rc = ps__rows_table(c, table, n, &r.dim);

    if (rc < 0)
        return rc;
    rc = ps__split(c, table, ids, n, &sp);
    if (rc < 0)
        goto out;
    sums = calloc(sp.m * r.dim + 1, sizeof(float));
    rc = -ENOMEM;
    if (sums == NULL)
        goto out;
    /* Repeats summed in the call's order, grouped by server. */
    for (size_t i = 0; i < n; i++) {
        float *to = sums + (size_t)sp.pos[sp.slot[i]] * r.dim;
        for (uint32_t k = 0; k < r.dim; k++)
            to[k] += grads[i * r.dim + k];
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
    r.clock = ps_kv_client_weights_clock(c);
    r.sync = c->mode.sync;
    r.table = table;
    for (int s = 0; s < c->n_servers; s++) {
        r.count = sp.start[s + 1] - sp.start[s];
        if (r.count == 0 && !c->mode.sync)
            continue;
        rc = ps__send_rows(c, &c->servers[s], &r, sp.by_srv + sp.start[s],
                           values + sp.start[s] * r.dim * value_bytes, dtype, NULL);
        if (rc < 0)
            goto out;
    }
    rc = ps_kv_client_wait(c);
out:
    ps__split_free(&sp);
    free(sums);
    free(half);
    return rc;
}
