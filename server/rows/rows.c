/* Embedding rows on the wire: the server's side of PULL_ROWS and PUSH_ROWS
 * (proto/shardps.proto). Each row table of the job's table gets one row
 * store here (server/row_store) holding the rows common/row_place puts on
 * this server; requests are judged by server/row_wire's pure rules, on the
 * header before a payload byte is stored and on the payload before
 * anything changes, so a refused request leaves every table as it was.
 *
 * Consistency as for dense chunks, with a table standing for a chunk:
 *   sync   every live worker sends one push per table per step (empty when
 *          none of its IDs live here); pushes are summed per ID in arrival
 *          order (server/row_accum) and the step applied once enough have
 *          come (the chunks' quorum rule), each row taking sum / pushes, as
 *          a chunk takes the mean. A pull for step t waits until the
 *          table's step t - 1 is applied (the chunks' pull rule).
 *   async  a push is applied on arrival at the rate of its step, damped by
 *   ssp    its staleness as a chunk's is; a pull is answered when the
 *          chunks' rule would answer it.
 * Rows are read and applied on the loop (not the thread pool): a pull's
 * reply is the rows as they are when it is answered. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "kv_internal.h"
#include "ps_error.h"
#include "ps_log.h"
#include "row_accum.h"
#include "row_store.h"
#include "row_wire.h"

/* Admission sketches: 4 rows of 2^20 counters (8 MiB per table that uses
 * admission), about 1% overcounting at a few million distinct IDs. */
#define PS__ADMIT_DEPTH 4
#define PS__ADMIT_WIDTH (1u << 20)
/* Held rows pulls per connection, as for dense pulls. */
#define PS__MAX_ROW_PULLS 16

void ps__rows_free(ps_kv_server *s)
{
    ps__drop_row_pulls(s, NULL);
    for (int i = 0; s->rows && i < s->n_rows; i++) {
        ps_row_store_free(s->rows[i].store);
        ps_row_accum_free(s->rows[i].accum);
    }
    free(s->rows);
    free(s->row_pushed);
    ps_id_set_free(&s->row_seen);
    s->rows = NULL;
    s->row_pushed = NULL;
    s->n_rows = 0;
}

/* The per-row optimizer of a declaration: the job's, or the one it names
 * with the job's momentum and weight decay. */
static void ps__row_opt(const ps_kv_server *s, const ps_row_table_spec *t, ps_row_opt_config *o)
{
    memset(o, 0, sizeof(*o));
    o->opt = s->cfg.opt;
    if (t->optimizer[0] == '\0' || ps_row_opt_parse(t->optimizer, o) < 0)
        return;
    o->opt.momentum = s->cfg.opt.momentum;
    o->opt.weight_decay = s->cfg.opt.weight_decay;
}

int ps__rows_build(ps_kv_server *s)
{
    int n = s->table.n_row_tables;
    char why[256];
    int rc = -ENOMEM;

    if (n == 0)
        return 0;
    s->rows = calloc((size_t)n, sizeof(*s->rows));
    s->row_pushed = calloc((size_t)n * (size_t)s->cfg.world, sizeof(*s->row_pushed));
    if (s->rows == NULL || s->row_pushed == NULL)
        goto fail;
    s->n_rows = n;
    for (int i = 0; i < n; i++) {
        const ps_row_table_spec *t = &s->table.row_tables[i];
        ps_row_store_config c;

        memset(&c, 0, sizeof(c));
        c.table_id = (uint32_t)i;
        c.dim = t->dim;
        c.init = t->init;
        c.init.seed = s->table.seed;
        ps__row_opt(s, t, &c.opt);
        c.admit_after = t->admit_after;
        c.sketch_depth = PS__ADMIT_DEPTH;
        c.sketch_width = PS__ADMIT_WIDTH;
        c.sketch_seed = s->table.seed ^ (uint64_t)i;
        c.expire_after = t->expire_after;
        c.capacity = t->capacity;
        s->rows[i].dim = t->dim;
        rc = ps_row_store_create(&s->rows[i].store, &c, why, sizeof(why));
        if (rc == 0 && s->cfg.staleness == 0)
            rc = ps_row_accum_create(&s->rows[i].accum, t->dim);
        if (rc < 0) {
            ps_error("row table %s: %s", t->name, rc == -ENOMEM ? "out of memory" : why);
            goto fail;
        }
    }
    ps_info("server %d of %d holds its share of %d row table%s", s->cfg.server_index,
            s->cfg.num_servers, n, n == 1 ? "" : "s");
    return 0;
fail:
    ps__rows_free(s);
    return rc;
}

void ps__rows_stats(const ps_kv_server *s, ps_kv_server_stats *out)
{
    out->row_tables = s->n_rows;
    out->row_pulls = s->n_row_pulls;
    out->row_pushes = s->n_row_pushes;
    out->rows_out = s->rows_out;
    out->rows_in = s->rows_in;
    out->rows_refused = s->n_row_refused;
    for (int i = 0; i < s->n_rows; i++) {
        ps_row_counters c;
        ps_row_store_counters(s->rows[i].store, &c);
        out->rows_stored += c.stored;
        out->rows_created += c.created;
        out->rows_admitted += c.admitted;
        out->rows_evicted += c.evicted;
        out->rows_memory += c.bytes;
    }
}

static int ps__rows_check(ps_kv_server *s, ps__peer *p, const Shardps__Header *h)
{
    uint32_t dims[PS_MAX_ROW_TABLES];
    ps_rows_limits lim = {(uint32_t)s->n_rows, dims, s->cfg.max_row_ids};
    char why[256];
    int rc;

    for (int i = 0; i < s->n_rows; i++)
        dims[i] = s->rows[i].dim;
    rc = ps_rows_check_header(&lim, h, why, sizeof(why));
    if (rc < 0)
        ps__peer_fail(p, rc, "%s", why);
    return rc;
}

int ps__place_rows(ps_kv_server *s, ps__peer *p, const Shardps__Header *h,
                   const ps_frame_piece **pieces)
{
    if (ps__rows_check(s, p, h) < 0)
        return -PS_EPROTO;
    return ps__place_payload(s, p, h->payload_bytes, pieces);
}

/* The request's payload: where it was placed, or the connection's buffer. */
static const uint8_t *ps__rows_payload(ps__peer *p, const ps_frame *f)
{
    return f->payload ? f->payload : p->push_piece.base;
}

/* The view the clock rules take, with the table standing for the chunks. */
static void ps__rows_view(ps_kv_server *s, const ps__row_table *t, ps_consistency_view *v)
{
    ps__view(s, v);
    if (s->cfg.staleness == 0)
        v->server_clock = t->clock.clock;
}

/* A pull reply's buffer goes back to the pool once the socket took it. */
static void ps__rows_sent(ps_conn *c, int status, void *buf)
{
    (void)c;
    (void)status;
    ps_buf_pool_put(buf);
}

/* The rows are gathered straight into a pooled buffer that the reply is
 * sent from: a snapshot of the rows as they are now, so no later apply can
 * change what goes out and nothing is copied again (a fresh malloc of a
 * 16 MiB reply cost its page faults on every pull). */
static void ps__answer_rows(ps_kv_server *s, ps__peer *p, uint64_t request_id, uint64_t clock,
                            uint32_t table, const uint64_t *ids, size_t n)
{
    Shardps__Header h = SHARDPS__HEADER__INIT;
    ps__row_table *t = &s->rows[table];
    size_t bytes = n * t->dim * sizeof(float);
    ps_iov iov;
    float *out = ps_buf_pool_get(s->bufs, bytes ? bytes : 1);
    int rc = -ENOMEM;

    if (out == NULL)
        goto fail;
    rc = ps_row_store_gather(t->store, ids, n, clock, out, NULL);
    if (rc < 0)
        goto fail;
    h.type = SHARDPS__MSG_TYPE__PULL_ROWS_REPLY;
    h.request_id = request_id;
    h.clock = ps_consistency_reply_clock(s->cfg.staleness, t->clock.clock, clock);
    h.dtype = SHARDPS__DTYPE__DTYPE_F32;
    h.row_table = table;
    h.row_count = n;
    iov.base = out;
    iov.len = bytes;
    rc = ps_conn_send(p->conn, &h, &iov, 1, ps__rows_sent, out);
    if (rc < 0)
        goto fail;
    s->n_row_pulls++;
    s->rows_out += n;
    s->bytes_out += bytes;
    p->n_pulls++;
    p->bytes_out += bytes;
    return;
fail:
    ps_buf_pool_put(out);
    if (rc != -PS_ECLOSED)
        ps_conn_close(p->conn, rc);
}

void ps__release_row_pulls(ps_kv_server *s)
{
    ps__row_pull **pp = &s->row_pulls;

    while (*pp) {
        ps__row_pull *q = *pp;
        ps_consistency_view v;

        ps__rows_view(s, &s->rows[q->table], &v);
        if (!ps_consistency_pull_ready(&v, q->clock, q->peer->fed)) {
            pp = &q->next;
            continue;
        }
        *pp = q->next;
        q->peer->pending--;
        ps__answer_rows(s, q->peer, q->request_id, q->clock, q->table, q->ids, q->n);
        free(q->ids);
        free(q);
    }
}

void ps__drop_row_pulls(ps_kv_server *s, ps__peer *p)
{
    ps__row_pull **pp = &s->row_pulls;

    while (*pp) {
        ps__row_pull *q = *pp;
        if (p != NULL && q->peer != p) {
            pp = &q->next;
            continue;
        }
        *pp = q->next;
        free(q->ids);
        free(q);
    }
}

/* The clock of a rows request: not before the job starts, and not past
 * what the mode allows this rank (the chunks' ceiling). */
static int ps__rows_clock_ok(ps_kv_server *s, ps__peer *p, const Shardps__Header *h,
                             const ps_consistency_view *v)
{
    uint64_t ceiling = ps_consistency_clock_ceiling(v, p->earned);

    if (!s->started && h->type == SHARDPS__MSG_TYPE__PUSH_ROWS) {
        ps__peer_fail(p, -PS_EPROTO, "rows push before every rank has joined");
        return 0;
    }
    if (h->clock > ceiling) {
        ps__peer_fail(p, -PS_EPROTO,
                      "rows request for clock %" PRIu64 " from a worker at clock %" PRIu64
                      ": clock past what the mode allows (at most %" PRIu64 ")",
                      h->clock, p->clock, ceiling);
        return 0;
    }
    return 1;
}

/* The request's IDs (and a push's gradients) taken apart and checked. The
 * caller frees *ids and *widened; *grads points into the payload or at
 * *widened. Returns 0; 1 for a push holding a NaN or Inf gradient (refused,
 * logged and counted here; the peer goes on, as with a dense push's); or -1
 * after failing the peer (an ID named twice). */
static int ps__rows_parse(ps_kv_server *s, ps__peer *p, const ps_frame *f, uint64_t **ids,
                          float **widened, const float **grads)
{
    const Shardps__Header *h = f->hdr;
    size_t n = (size_t)h->row_count, dim = s->rows[h->row_table].dim;
    int wide = h->type == SHARDPS__MSG_TYPE__PUSH_ROWS && h->dtype != SHARDPS__DTYPE__DTYPE_F32;
    const char *name = s->table.row_tables[h->row_table].name;
    char why[256];
    int rc;

    *ids = malloc((n + 1) * sizeof(**ids));
    *widened = wide ? malloc((n * dim + 1) * sizeof(**widened)) : NULL;
    *grads = NULL;
    if (*ids == NULL || (wide && *widened == NULL)) {
        ps_conn_close(p->conn, -ENOMEM);
        return -1;
    }
    rc = ps_rows_parse(ps__rows_payload(p, f), h->type, h->dtype, h->row_count, (uint32_t)dim, *ids,
                       *widened, grads, &s->row_seen, why, sizeof(why));
    if (rc == 0)
        return 0;
    if (rc == -ENOMEM) {
        ps_conn_close(p->conn, rc);
        return -1;
    }
    s->n_row_refused++;
    if (rc == -ERANGE) {
        s->n_row_nonfinite++;
        if (s->n_row_nonfinite == 1 || s->n_row_nonfinite % 100 == 0)
            ps_warn("refused a rows push from %s at clock %" PRIu64 ": row table %s: %s (%" PRIu64
                    " such pushes so far)",
                    p->name, h->clock, name, why, s->n_row_nonfinite);
        return 1;
    }
    ps__peer_fail(p, rc, "row table %s: %s", name, why);
    return -1;
}

void ps__handle_pull_rows(ps_kv_server *s, ps__peer *p, const ps_frame *f)
{
    const Shardps__Header *h = f->hdr;
    uint64_t *ids = NULL;
    float *widened = NULL;
    const float *grads;
    ps__row_pull *q;
    ps_consistency_view v;

    if (ps__rows_check(s, p, h) < 0)
        goto out;
    ps__rows_view(s, &s->rows[h->row_table], &v);
    if (!ps__rows_clock_ok(s, p, h, &v) || ps__rows_parse(s, p, f, &ids, &widened, &grads) != 0)
        goto out;
    if (ps_consistency_pull_ready(&v, h->clock, p->fed)) {
        ps__answer_rows(s, p, h->request_id, h->clock, h->row_table, ids, (size_t)h->row_count);
        goto out;
    }
    if (p->pending >= PS__MAX_ROW_PULLS) {
        ps__peer_fail(p, -PS_EPROTO, "more than %d pulls waiting", PS__MAX_ROW_PULLS);
        goto out;
    }
    q = calloc(1, sizeof(*q));
    if (q == NULL) {
        ps_conn_close(p->conn, -ENOMEM);
        goto out;
    }
    *q = (ps__row_pull){NULL,          p,   h->request_id,     h->clock, h->row_table,
                        (size_t)h->row_count, ids, uv_now(s->loop), 0};
    ids = NULL;
    p->pending++;
    {
        ps__row_pull **tail = &s->row_pulls;
        while (*tail)
            tail = &(*tail)->next;
        *tail = q;
    }
out:
    free(ids);
    free(widened);
    ps_buf_pool_put(p->push_piece.base);
    p->push_piece.base = NULL;
}

/* Counts and logs what an apply refused or did. */
static void ps__rows_applied(ps_kv_server *s, uint32_t table, int rc, const ps_row_apply_result *r)
{
    const char *name = s->table.row_tables[table].name;

    if (rc < 0) {
        ps_error("row table %s: an update of the step failed (%s); its gradients are lost", name,
                 ps_strerror(rc));
        return;
    }
    if (r->refused > 0) {
        s->n_unstable += r->refused;
        ps_warn("row table %s: refused %zu row updates that would make a row non-finite; those "
                "rows are unchanged",
                name, r->refused);
    }
}

/* Sync: applies a table's step once enough live workers have pushed it. */
static void ps__rows_maybe_apply(ps_kv_server *s, uint32_t table)
{
    ps__row_table *t = &s->rows[table];
    ps_chunk_clock *c = &t->clock;
    ps_row_apply_result res;
    const uint64_t *ids;
    const float *sums;
    size_t n;
    int rc = 0;

    if (!ps_consistency_step_complete(
            c, ps_consistency_pushes_needed(s->cfg.quorum, s->cfg.world, s->live)))
        return;
    n = ps_row_accum_rows(t->accum, &ids, &sums);
    memset(&res, 0, sizeof(res));
    if (c->pushes > 0 && n > 0)
        rc = ps_row_store_apply(t->store, ids, sums, n, c->clock, ps__lr(s, c->clock, 0),
                                1.0f / (float)c->pushes, &res);
    ps__rows_applied(s, table, rc, &res);
    ps_row_accum_reset(t->accum);
    c->newest = c->clock + 1;
    c->clock++;
    c->pushes = 0;
    c->live_pushes = 0;
}

void ps__rows_peer_joined(ps_kv_server *s, ps__peer *p)
{
    for (int i = 0; s->cfg.staleness == 0 && i < s->n_rows; i++) {
        ps_chunk_clock *c = &s->rows[i].clock;
        if (s->row_pushed[(size_t)p->rank * s->n_rows + i] == c->clock + 1 && c->pushes > 0)
            c->live_pushes++;
    }
}

void ps__rows_peer_left(ps_kv_server *s, ps__peer *p)
{
    ps__drop_row_pulls(s, p);
    for (int i = 0; s->cfg.staleness == 0 && i < s->n_rows; i++) {
        ps_chunk_clock *c = &s->rows[i].clock;
        if (s->row_pushed[(size_t)p->rank * s->n_rows + i] == c->clock + 1 && c->pushes > 0)
            c->live_pushes--;
        /* As for chunks: with nobody live a half-pushed step waits. */
        if (s->live > 0)
            ps__rows_maybe_apply(s, (uint32_t)i);
    }
}

static void ps__ack_rows(ps__peer *p, const Shardps__Header *req, int dropped, int rejected,
                         uint64_t staleness)
{
    Shardps__Header h = SHARDPS__HEADER__INIT;
    int rc;

    h.type = SHARDPS__MSG_TYPE__PUSH_ROWS_REPLY;
    h.request_id = req->request_id;
    h.clock = req->clock;
    h.row_table = req->row_table;
    h.row_count = req->row_count;
    h.status = dropped;
    h.rejected = (uint32_t)rejected;
    h.staleness = staleness > UINT32_MAX ? UINT32_MAX : (uint32_t)staleness;
    rc = ps_conn_send(p->conn, &h, NULL, 0, NULL, NULL);
    if (rc < 0 && rc != -PS_ECLOSED)
        ps_conn_close(p->conn, rc);
}

void ps__handle_push_rows(ps_kv_server *s, ps__peer *p, const ps_frame *f)
{
    const Shardps__Header *h = f->hdr;
    uint64_t *ids = NULL, *pushed, staleness = 0;
    float *widened = NULL;
    const float *grads = NULL;
    ps__row_table *t;
    ps_consistency_view v;
    size_t n = (size_t)h->row_count;
    int dropped = 0, rejected = 0, usable;

    if (ps__rows_check(s, p, h) < 0)
        goto out;
    t = &s->rows[h->row_table];
    ps__rows_view(s, t, &v);
    if (!ps__rows_clock_ok(s, p, h, &v))
        goto out;
    if (s->cfg.staleness == 0 &&
        ps_consistency_sync_push(t->clock.clock, h->clock) == PS_CLOCK_AHEAD) {
        ps__peer_fail(p, -PS_EPROTO,
                      "rows push for step %" PRIu64 " of row table %s before step %" PRIu64
                      " was applied: clock past what the mode allows",
                      h->clock, s->table.row_tables[h->row_table].name, t->clock.clock);
        goto out;
    }
    usable = ps__rows_parse(s, p, f, &ids, &widened, &grads);
    if (usable < 0)
        goto out;
    usable = usable == 0;
    rejected = usable ? 0 : (int)(n < INT32_MAX ? n : INT32_MAX);
    pushed = &s->row_pushed[(size_t)p->rank * s->n_rows + h->row_table];
    if (*pushed > h->clock ||
        (s->cfg.staleness == 0 &&
         ps_consistency_sync_push(t->clock.clock, h->clock) == PS_CLOCK_BEHIND)) {
        /* A repeat after a reconnect, or late for a step applied without
         * it: dropped, as a chunk's. */
        dropped = (int)(n < INT32_MAX ? n : INT32_MAX);
        s->n_dropped++;
    } else if (s->cfg.staleness == 0) {
        /* A refused push counts toward the step but adds nothing, as a
         * chunk's: the rows take the mean of the usable pushes. */
        int rc = usable ? ps_row_accum_add(t->accum, ids, grads, n) : 0;
        if (rc < 0) {
            ps_conn_close(p->conn, rc);
            goto out;
        }
        *pushed = h->clock + 1;
        if (h->clock + 1 > p->fed)
            p->fed = h->clock + 1;
        t->clock.pushes += usable;
        t->clock.live_pushes++;
        ps__rows_maybe_apply(s, h->row_table);
    } else if (usable) {
        ps_row_apply_result res;
        int rc;

        staleness = ps_consistency_staleness(t->clock.newest, h->clock);
        memset(&res, 0, sizeof(res));
        rc = ps_row_store_apply(t->store, ids, grads, n, h->clock, ps__lr(s, h->clock, staleness),
                                1.0f, &res);
        ps__rows_applied(s, h->row_table, rc, &res);
        *pushed = h->clock + 1;
        if (h->clock + 1 > t->clock.newest)
            t->clock.newest = h->clock + 1;
    }
    s->n_row_pushes++;
    s->rows_in += n;
    s->bytes_in += f->payload_len;
    p->n_pushes++;
    p->bytes_in += f->payload_len;
    ps__ack_rows(p, h, dropped + rejected, rejected, staleness);
    ps__release_pulls(s);
out:
    free(ids);
    free(widened);
    ps_buf_pool_put(p->push_piece.base);
    p->push_piece.base = NULL;
}
