/* The pulls the server holds (see held.h). Calls the consistency view, the
 * tensors' shard and apply queue, the row stores, the durability's due
 * checkpoint and the peers' sends. */
#include "held.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clocks.h"
#include "ps_error.h"
#include "ps_log.h"

int ps_held_init(ps_held *h, uv_loop_t *loop, const ps_kv_server_config *cfg, const ps_job *job,
                 const ps_tensors *tensors, const ps_row_tables *rows, const ps_units *units,
                 const ps_durability *dur)
{
    memset(h, 0, sizeof(*h));
    h->loop = loop;
    h->cfg = cfg;
    h->job = job;
    h->tensors = tensors;
    h->rows = rows;
    h->units = units;
    h->dur = dur;
    h->report_ms = cfg->wait_report_ms > 0 ? cfg->wait_report_ms : PS_HELD_REPORT_MS;
    h->wait_ranks = calloc((size_t)cfg->world, 1);
    return h->wait_ranks ? 0 : -ENOMEM;
}

void ps_held_free(ps_held *h)
{
    ps_held_drop(h, NULL);
    free(h->wait_ranks);
    h->wait_ranks = NULL;
}

void ps_held_add(ps_held *h, ps_pull *q)
{
    ps_pull **tail = &h->head;
    ps_peer *p = q->peer;

    if (p->pending >= PS_HELD_PER_PEER) {
        ps_peer_fail(p, -PS_EPROTO, "more than %d pulls waiting", PS_HELD_PER_PEER);
        ps_pull_free(q);
        return;
    }
    q->since = uv_now(h->loop);
    p->pending++;
    while (*tail)
        tail = &(*tail)->next;
    *tail = q;
}

void ps_held_drop(ps_held *h, ps_peer *p)
{
    ps_pull **pp = &h->head;

    while (*pp) {
        ps_pull *q = *pp;
        if (p != NULL && q->peer != p) {
            pp = &q->next;
            continue;
        }
        *pp = q->next;
        ps_pull_free(q);
    }
    if (p != NULL)
        p->pending = 0;
}

/* A dense pull's reply, straight from the weights: ps_conn_send_transient
 * writes what the socket takes now and copies only the rest, because the
 * next update may change the weights as soon as this returns (updates that
 * could run meanwhile on the pool are held, see ps_held_release). */
static int ps__held_chunks(ps_held *h, const ps_pull *q, Shardps__Header *r, size_t *bytes)
{
    const ps_tensors *t = h->tensors;
    uint64_t *keys = malloc(q->n * sizeof(*keys));
    ps_iov *iov = malloc(q->n * sizeof(*iov));
    int rc = -ENOMEM;

    *bytes = 0;
    if (keys == NULL || iov == NULL)
        goto out;
    for (size_t i = 0; i < q->n; i++) {
        const ps_chunk *c = ps_shard_chunk(t->shard, q->locals[i]);
        keys[i] = c->key;
        iov[i].base = ps_shard_weights(t->shard, q->locals[i]);
        iov[i].len = c->numel * sizeof(float);
        *bytes += iov[i].len;
    }
    r->type = SHARDPS__MSG_TYPE__PULL_REPLY;
    if (q->snapshot) {
        /* The snapshot's steps: lowest, and how far its newest chunk is ahead. */
        r->clock = q->lo;
        r->staleness = (uint32_t)(q->hi - q->lo > UINT32_MAX ? UINT32_MAX : q->hi - q->lo);
    } else {
        r->clock = ps_consistency_reply_clock(h->cfg->staleness, ps_units_server_clock(h->units),
                                              q->clock);
    }
    r->n_keys = q->n;
    r->keys = keys;
    rc = ps_conn_send_transient(q->peer->conn, r, iov, (int)q->n, t->bufs);
    if (rc == 0)
        h->n.pulls++;
out:
    free(keys);
    free(iov);
    return rc;
}

/* A rows reply's buffer goes back to the pool once the socket took it. */
static void ps__held_rows_sent(ps_conn *c, int status, void *buf)
{
    (void)c;
    (void)status;
    ps_buf_pool_put(buf);
}

/* A rows pull's reply: the rows are gathered straight into a pooled buffer
 * that the reply is sent from, a snapshot of the rows as they are now, so
 * no later apply can change what goes out and nothing is copied again (a
 * fresh malloc of a 16 MiB reply cost its page faults on every pull). */
static int ps__held_rows(ps_held *h, const ps_pull *q, Shardps__Header *r, size_t *bytes)
{
    const ps_row_table *t = &h->rows->t[q->table];
    const ps_chunk_clock *c = &h->units->clock[ps_units_table(h->units, q->table)];
    uint32_t dim = h->tensors->table.row_tables[q->table].dim;
    ps_iov iov;
    float *out;
    int rc;

    *bytes = q->n * dim * sizeof(float);
    out = ps_buf_pool_get(h->tensors->bufs, *bytes ? *bytes : 1);
    if (out == NULL)
        return -ENOMEM;
    rc = ps_row_store_gather(t->store, q->ids, q->n, q->clock, out, NULL);
    if (rc < 0)
        goto fail;
    r->type = SHARDPS__MSG_TYPE__PULL_ROWS_REPLY;
    r->clock = ps_consistency_reply_clock(h->cfg->staleness, c->clock, q->clock);
    r->row_table = (uint32_t)q->table;
    r->row_count = q->n;
    iov.base = out;
    iov.len = *bytes;
    rc = ps_conn_send(q->peer->conn, r, &iov, 1, ps__held_rows_sent, out);
    if (rc < 0)
        goto fail;
    h->n.row_pulls++;
    h->n.rows_out += q->n;
    return 0;
fail:
    ps_buf_pool_put(out);
    return rc;
}

/* The one reply to a pull, of either kind: its header, the payload its
 * kind gathers, and the counts. A reply that cannot be sent closes the
 * connection (one closing already is left to close). */
static void ps__held_answer(ps_held *h, const ps_pull *q)
{
    Shardps__Header r = SHARDPS__HEADER__INIT;
    size_t bytes;
    int rc;

    r.request_id = q->request_id;
    r.dtype = SHARDPS__DTYPE__DTYPE_F32;
    rc = q->table < 0 ? ps__held_chunks(h, q, &r, &bytes) : ps__held_rows(h, q, &r, &bytes);
    if (rc < 0) {
        if (rc != -PS_ECLOSED)
            ps_conn_close(q->peer->conn, rc);
        return;
    }
    h->n.bytes_out += bytes;
    q->peer->n_pulls++;
    q->peer->bytes_out += bytes;
}

/* A snapshot's lowest and highest chunk steps applied. Every update
 * numbered before the pull is counted in `newest` already (it is set when
 * an update is submitted), and none numbered after it reaches the reply. */
static void ps__held_snapshot_clocks(const ps_held *h, ps_pull *q)
{
    q->lo = UINT64_MAX;
    q->hi = 0;
    for (size_t i = 0; i < q->n; i++) {
        uint64_t c = h->units->clock[q->locals[i]].newest;
        q->lo = c < q->lo ? c : q->lo;
        q->hi = c > q->hi ? c : q->hi;
    }
    if (q->n == 0)
        q->lo = 0;
}

/* Whether a dense pull may go now; *hold is lowered to its number when the
 * rule allows it but the updates before it (or a due checkpoint) have not
 * run yet. */
static int ps__held_chunks_ready(ps_held *h, ps_pull *q, const ps_consistency_view *v,
                                 uint64_t *hold)
{
    const ps_tensors *t = h->tensors;

    /* A table still waiting for rank 0's initial values (values.h) is seen
     * by nobody, so no rank starts from a partly written one. */
    if (!ps_table_life_filled(&t->life) ||
        (q->snapshot ? !h->job->started : !ps_consistency_pull_ready(v, q->clock, q->peer->fed)))
        return 0;
    if (q->seq == 0) {
        q->seq = ps_apply_queue_next_seq(t->updates);
        if (q->snapshot)
            ps__held_snapshot_clocks(h, q);
    }
    if ((h->dur->due && q->seq > h->dur->seq) ||
        !ps_apply_queue_settled_before(t->updates, q->seq)) {
        *hold = q->seq < *hold ? q->seq : *hold;
        return 0;
    }
    return 1;
}

void ps_held_release(ps_held *h)
{
    const ps_tensors *t = h->tensors;
    ps_pull **pp = &h->head;
    uint64_t hold;
    ps_consistency_view chunks, rows;

    /* Without a table (withdrawn and released) nothing is held: its peers
     * were let go with it. */
    if (t->updates == NULL)
        return;
    hold = h->dur->due ? h->dur->seq : UINT64_MAX;
    if (h->head == NULL) {
        ps_apply_queue_hold_from(t->updates, hold);
        return;
    }
    ps_clocks_view(h->job, h->units, -1, &chunks);
    while (*pp) {
        ps_pull *q = *pp;
        int ready;

        if (q->table < 0) {
            ready = ps__held_chunks_ready(h, q, &chunks, &hold);
        } else {
            ps_clocks_view(h->job, h->units, ps_units_table(h->units, q->table), &rows);
            ready = ps_consistency_pull_ready(&rows, q->clock, q->peer->fed);
        }
        if (!ready) {
            pp = &q->next;
            continue;
        }
        *pp = q->next;
        q->peer->pending--;
        ps__held_answer(h, q);
        ps_pull_free(q);
    }
    ps_apply_queue_hold_from(t->updates, hold);
}

/* Appends "rank 1" or "ranks 1, 3" (at most 16 named, then how many more),
 * for the ranks marked in want, to out at *at. Returns how many there are. */
static int ps__held_rank_list(const uint8_t *want, int world, char *out, size_t len, size_t *at)
{
    int n = 0, named = 0;

    for (int r = 0; r < world; r++)
        n += want[r] != 0;
    for (int r = 0; r < world && *at < len; r++) {
        if (!want[r])
            continue;
        if (named == 16) {
            *at += (size_t)snprintf(out + *at, len - *at, " and %d more", n - named);
            break;
        }
        *at += (size_t)snprintf(out + *at, len - *at, "%s%d",
                                named == 0 ? (n == 1 ? "rank " : "ranks ") : ", ", r);
        named++;
    }
    return n;
}

static int ps__held_no_reason(char *why, size_t len)
{
    if (len > 0)
        why[0] = '\0';
    return 0;
}

/* Why a held pull cannot be answered yet, in words for the log and the
 * worker: "waiting for ranks 1, 3 of 4 to join", "step 12 is waiting for
 * rank 1 of 2 to push it", "step 16 is waiting for rank 2 of 4 to come
 * within --staleness 4". Returns how many ranks it names; 0 (why "") when
 * no rank holds it (the updates before it are being applied, or a
 * checkpoint written). */
static int ps__held_reason(const ps_held *h, const ps_pull *q, char *why, size_t len)
{
    const ps_job *j = h->job;
    const ps_units *u = h->units;
    const ps_tensors *t = h->tensors;
    int world = h->cfg->world, unit, n;
    uint8_t *want = h->wait_ranks;
    uint64_t applied, clock = q->clock, fed = q->peer->fed;
    char tail[64];
    size_t at;

    memset(want, 0, (size_t)world);
    if (j->started && !ps_table_life_filled(&t->life) && t->values.left > 0) {
        snprintf(why, len, "waiting for rank 0's initial values of %d chunks", t->values.left);
        return 0;
    }
    if (!j->started) {
        for (int r = 0; r < world; r++)
            want[r] = !j->has_joined[r];
        at = (size_t)snprintf(why, len, "waiting for ");
        snprintf(tail, sizeof(tail), " of %d to join", world);
    } else if (h->cfg->staleness == 0) {
        /* The unit furthest behind holds the pull (the chunk of lowest
         * clock, or the row table): the live ranks that have not pushed its
         * step are the ones it waits for. */
        unit = q->table < 0 ? ps_units_lowest_chunk(u) : ps_units_table(u, q->table);
        applied = q->table < 0 ? ps_units_server_clock(u) : u->clock[unit].clock;
        if (clock <= applied && fed <= applied)
            return ps__held_no_reason(why, len);
        for (int r = 0; r < world && (q->table >= 0 || u->n_chunks > 0); r++)
            want[r] = j->workers[r] && ps_units_record(u, (uint32_t)r)[unit] <= applied;
        at = q->table < 0
                 ? 0
                 : (size_t)snprintf(why, len, "row table %s: ", t->table.row_tables[q->table].name);
        at += (size_t)snprintf(why + at, len > at ? len - at : 0,
                               "step %" PRIu64 " is waiting for ", applied + 1);
        snprintf(tail, sizeof(tail), " of %d to push it", world);
    } else if (h->cfg->staleness != PS_STALENESS_UNBOUNDED) {
        /* ssp: the live ranks more than the bound behind this pull. */
        for (int r = 0; r < world; r++)
            want[r] = j->workers[r] && j->workers[r]->clock + h->cfg->staleness < clock;
        at = (size_t)snprintf(why, len, "step %" PRIu64 " is waiting for ", clock + 1);
        snprintf(tail, sizeof(tail), " of %d to come within --staleness %" PRIu32, world,
                 h->cfg->staleness);
    } else {
        return ps__held_no_reason(why, len);
    }
    n = ps__held_rank_list(want, world, why, len, &at);
    if (n == 0)
        return ps__held_no_reason(why, len);
    if (at < len)
        snprintf(why + at, len - at, "%s", tail);
    return n;
}

/* The held pulls the log line counts: how many, the longest held, and the
 * first one's reason. */
typedef struct {
    int n;
    uint64_t longest;
    char first[512];
} ps__held_log;

/* One held pull's turn: its worker is told why when due; counted in log
 * once held long. */
static void ps__held_tell(ps_held *h, ps_pull *q, ps__held_log *log)
{
    Shardps__Header w = SHARDPS__HEADER__INIT;
    uint64_t now = uv_now(h->loop), held = now - q->since;
    int due = q->told ? now - q->told >= h->report_ms : !h->job->started || held >= h->report_ms;
    char why[512];
    int rc;

    if (!due || q->peer->failed)
        return;
    if (ps__held_reason(h, q, why, sizeof(why)) == 0)
        return;
    w.type = SHARDPS__MSG_TYPE__WAITING;
    w.request_id = q->request_id;
    w.clock = q->clock;
    w.reason = why;
    rc = ps_conn_send(q->peer->conn, &w, NULL, 0, NULL, NULL);
    if (rc < 0) {
        if (rc != -PS_ECLOSED)
            ps_conn_close(q->peer->conn, rc);
        return;
    }
    q->told = now;
    /* The log counts the workers the job holds; an evaluator is told. */
    if (held < h->report_ms || q->snapshot)
        return;
    if (log->n++ == 0)
        snprintf(log->first, sizeof(log->first), "%s", why);
    if (held > log->longest)
        log->longest = held;
}

/* A pull the job holds for long is explained, not left silent: its worker
 * learns which ranks the job waits for (and says so; its timeout then names
 * them rather than this server, and a stop it is asked for need not wait
 * for the step), and the log says it once for every worker held. Before
 * the job starts, the wait is for processes to start, always a long one: the
 * worker is told at once, the log only if it lasts. */
void ps_held_report(ps_held *h)
{
    ps__held_log log = {0, 0, ""};

    for (ps_pull *q = h->head; q; q = q->next)
        ps__held_tell(h, q, &log);
    if (log.n > 0)
        ps_info("%s (%d worker%s held, the longest for %.0f s)", log.first, log.n,
                log.n == 1 ? "" : "s", (double)log.longest / 1000);
}
