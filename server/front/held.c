/* Pulls: a pull waits in the server's queue until the consistency rules
 * allow it (consistency.h) and every update submitted before it has run,
 * then is answered straight from the weights; one held for long is
 * explained to its worker (WAITING) and in the log. An evaluator's pull is
 * a snapshot: no clock rule holds it, and its reply says the lowest and
 * highest steps applied among the chunks it carries. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "kv_internal.h"
#include "ps_error.h"
#include "ps_log.h"
#include "validate.h"

/* Pulls one worker may have waiting at once; a well-behaved worker has one. */
#define PS__MAX_PENDING_PER_PEER 16

/* Answers a pull straight from the weights: ps_conn_send_transient writes
 * what the socket takes now and copies only the rest, because the next update
 * may change the weights as soon as this returns (updates that could run
 * meanwhile on the pool are held, see ps__release_pulls). */
static void ps__answer_pull(ps_kv_server *s, const ps__pull *q)
{
    ps__peer *p = q->peer;
    const int *locals = q->locals;
    size_t n = q->n_keys;
    Shardps__Header h = SHARDPS__HEADER__INIT;
    uint64_t *keys = malloc(n * sizeof(*keys));
    ps_iov *iov = malloc(n * sizeof(*iov));
    size_t bytes = 0;
    int rc = -ENOMEM;

    if (keys == NULL || iov == NULL)
        goto fail;
    for (size_t i = 0; i < n; i++) {
        const ps_chunk *c = ps_shard_chunk(s->shard, locals[i]);
        keys[i] = c->key;
        iov[i].base = ps_shard_weights(s->shard, locals[i]);
        iov[i].len = c->numel * sizeof(float);
        bytes += iov[i].len;
    }
    h.type = SHARDPS__MSG_TYPE__PULL_REPLY;
    h.request_id = q->request_id;
    if (q->snapshot) {
        /* The snapshot's steps: lowest, and how far its newest chunk is ahead. */
        h.clock = q->lo;
        h.staleness = (uint32_t)(q->hi - q->lo > UINT32_MAX ? UINT32_MAX : q->hi - q->lo);
    } else {
        h.clock = ps_consistency_reply_clock(s->cfg.staleness, ps__server_clock(s), q->clock);
    }
    h.dtype = SHARDPS__DTYPE__DTYPE_F32;
    h.n_keys = n;
    h.keys = keys;
    rc = ps_conn_send_transient(p->conn, &h, iov, (int)n, s->bufs);
    if (rc < 0)
        goto fail;
    s->n_pulls++;
    s->bytes_out += bytes;
    p->n_pulls++;
    p->bytes_out += bytes;
    free(keys);
    free(iov);
    return;
fail:
    free(keys);
    free(iov);
    if (rc != -PS_ECLOSED)
        ps_conn_close(p->conn, rc);
}

/* A snapshot's lowest and highest chunk steps applied. Every update
 * numbered before the pull is counted in `newest` already (it is set when
 * an update is submitted), and none numbered after it reaches the reply. */
static void ps__snapshot_clocks(const ps_kv_server *s, ps__pull *q)
{
    q->lo = UINT64_MAX;
    q->hi = 0;
    for (size_t i = 0; i < q->n_keys; i++) {
        uint64_t c = s->sync[q->locals[i]].newest;
        q->lo = c < q->lo ? c : q->lo;
        q->hi = c > q->hi ? c : q->hi;
    }
    if (q->n_keys == 0)
        q->lo = 0;
}

/* Answers every pull the clock rule allows whose updates have been applied.
 * A pull the rule allows is numbered at that moment; updates numbered later
 * are held back until it is answered, so it cannot be starved by newer
 * pushes and never sees a chunk half updated. A due checkpoint holds back
 * the same way, and pulls numbered after it wait until it is written. */
void ps__release_pulls(ps_kv_server *s)
{
    ps__pull **pp = &s->pulls;
    uint64_t hold = UINT64_MAX;
    ps_consistency_view v;

    ps__try_checkpoint(s);
    ps__view(s, &v);
    if (s->ckpt_due)
        hold = s->ckpt_seq;
    while (*pp) {
        ps__pull *q = *pp;
        /* A table still waiting for rank 0's initial values (values.c) is
         * seen by nobody, so no rank starts from a partly written one. */
        if (!ps_table_life_filled(&s->life) ||
            (q->snapshot ? !s->started : !ps_consistency_pull_ready(&v, q->clock, q->peer->fed))) {
            pp = &q->next;
            continue;
        }
        if (q->seq == 0) {
            q->seq = ps_apply_queue_next_seq(s->updates);
            if (q->snapshot)
                ps__snapshot_clocks(s, q);
        }
        if ((s->ckpt_due && q->seq > s->ckpt_seq) ||
            !ps_apply_queue_settled_before(s->updates, q->seq)) {
            hold = q->seq < hold ? q->seq : hold;
            pp = &q->next;
            continue;
        }
        *pp = q->next;
        q->peer->pending--;
        ps__answer_pull(s, q);
        free(q->locals);
        free(q);
    }
    ps_apply_queue_hold_from(s->updates, hold);
    ps__release_row_pulls(s);
}

void ps__on_updates_settled(void *arg)
{
    ps__release_pulls(arg);
}

void ps__handle_pull(ps_kv_server *s, ps__peer *p, const ps_frame *f)
{
    const Shardps__Header *h = f->hdr;
    ps__pull *q = NULL;
    int *locals = malloc((h->n_keys ? h->n_keys : 1) * sizeof(int));
    ps_consistency_view v;
    ps_clock_verdict verdict;

    if (locals == NULL)
        goto oom;
    /* Everything is checked before anything changes; a payload never got
     * this far (ps__place_push refuses it). */
    if (ps__resolve_keys(s, p, h, locals) < 0)
        goto out;
    /* A worker's clock only moves forward, and only as far as the mode
     * allows: the step after its last push, a later one when it joins
     * mid-run or (sync) catches up to the steps already applied; never
     * anywhere a stranger asks. */
    ps__view(s, &v);
    verdict = p->state == PS__PEER_EVALUATOR
                  ? PS_CLOCK_OK
                  : ps_consistency_check_pull(&v, p->clock, p->earned, p->keys_pushed, h->clock);
    if (verdict != PS_CLOCK_OK) {
        ps__peer_fail(p, -PS_EPROTO,
                      "pull for clock %" PRIu64 " from a worker at clock %" PRIu64
                      ": %s (at most %" PRIu64 ")",
                      h->clock, p->clock, ps_consistency_verdict_text(verdict),
                      ps_consistency_clock_ceiling(&v, p->earned));
        goto out;
    }
    if (p->pending >= PS__MAX_PENDING_PER_PEER) {
        ps__peer_fail(p, -PS_EPROTO, "more than %d pulls waiting", PS__MAX_PENDING_PER_PEER);
        goto out;
    }
    if (h->clock > p->clock && p->state != PS__PEER_EVALUATOR)
        p->clock = h->clock;
    q = calloc(1, sizeof(*q));
    if (q == NULL)
        goto oom;
    q->snapshot = p->state == PS__PEER_EVALUATOR;
    q->peer = p;
    q->request_id = h->request_id;
    q->clock = h->clock;
    q->since = uv_now(s->loop);
    q->n_keys = h->n_keys;
    q->locals = locals;
    locals = NULL;
    p->pending++;
    {
        ps__pull **tail = &s->pulls;
        while (*tail)
            tail = &(*tail)->next;
        *tail = q;
    }
    ps__release_pulls(s);
    goto out;
oom:
    ps_conn_close(p->conn, -ENOMEM);
out:
    free(locals);
}

/* The held pulls the log line counts: how many, the longest held, and the
 * first one's reason. */
typedef struct {
    int n;
    uint64_t longest;
    char first[512];
} ps__held_log;

/* One held pull's turn (table: a rows pull's row table, or -1): its worker
 * is told why when due; counted in log once held long. */
static void ps__tell_held(ps_kv_server *s, ps__peer *peer, uint64_t request_id, uint64_t clock,
                          uint64_t since, uint64_t *told, int quiet, int table, ps__held_log *log)
{
    Shardps__Header h = SHARDPS__HEADER__INIT;
    uint64_t now = uv_now(s->loop), held = now - since;
    int due = *told ? now - *told >= s->wait_report_ms : !s->started || held >= s->wait_report_ms;
    char why[512];
    int rc;

    if (!due || peer->failed)
        return;
    rc = table < 0 ? ps__wait_reason(s, clock, peer->fed, why, sizeof(why))
                   : ps__row_wait_reason(s, (uint32_t)table, clock, peer->fed, why, sizeof(why));
    if (rc == 0)
        return;
    h.type = SHARDPS__MSG_TYPE__WAITING;
    h.request_id = request_id;
    h.clock = clock;
    h.reason = why;
    rc = ps_conn_send(peer->conn, &h, NULL, 0, NULL, NULL);
    if (rc < 0) {
        if (rc != -PS_ECLOSED)
            ps_conn_close(peer->conn, rc);
        return;
    }
    *told = now;
    /* The log counts the workers the job holds; an evaluator is told. */
    if (held < s->wait_report_ms || quiet)
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
 * worker is told at once, the log only if it lasts. Rows pulls alike. */
void ps__report_waits(ps_kv_server *s)
{
    ps__held_log log = {0, 0, ""};

    for (ps__pull *q = s->pulls; q; q = q->next)
        ps__tell_held(s, q->peer, q->request_id, q->clock, q->since, &q->told, q->snapshot, -1,
                      &log);
    for (ps__row_pull *q = s->row_pulls; q; q = q->next)
        ps__tell_held(s, q->peer, q->request_id, q->clock, q->since, &q->told, 0, (int)q->table,
                      &log);
    if (log.n > 0)
        ps_info("%s (%d worker%s held, the longest for %.0f s)", log.first, log.n,
                log.n == 1 ? "" : "s", (double)log.longest / 1000);
}

void ps__drop_pulls(ps_kv_server *s, ps__peer *p)
{
    ps__pull **pp = &s->pulls;

    ps__drop_row_pulls(s, p);
    while (*pp) {
        ps__pull *q = *pp;
        if (p != NULL && q->peer != p) {
            pp = &q->next;
            continue;
        }
        *pp = q->next;
        free(q->locals);
        free(q);
    }
    if (p != NULL)
        p->pending = 0;
}

void ps__handle_evaluator(ps_kv_server *s, ps__peer *p, const ps_frame *f)
{
    char why[160];

    if (ps_validate_evaluator_type(f->hdr->type, why, sizeof(why)) < 0) {
        ps__peer_fail(p, -PS_EPROTO, "%s", why);
        return;
    }
    if (f->hdr->type == SHARDPS__MSG_TYPE__PULL) {
        ps__handle_pull(s, p, f);
    } else if (f->hdr->type == SHARDPS__MSG_TYPE__BYE) {
        ps__evaluator_leave(s, p, "said goodbye");
        ps_conn_close(p->conn, 0);
    }
}

void ps__evaluator_leave(ps_kv_server *s, ps__peer *p, const char *why)
{
    if (p->state != PS__PEER_EVALUATOR)
        return;
    p->state = PS__PEER_GONE;
    s->n_evaluators--;
    ps__drop_pulls(s, p);
    ps_info("%s left (%s); the job goes on", p->name, why);
    /* Updates held back for its pull, if it was numbered, may run now. */
    ps__release_pulls(s);
}
