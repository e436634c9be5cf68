/* The key-value server's front: the one place that sequences what follows
 * an event. Every event comes in here: a frame (to the handler of its
 * type), a peer leaving, a timer, and the apply queue's completions. A
 * handler judges its frame and changes only its own state; then the front
 * runs one fixed sequence (ps__kv_settle):
 *
 *   the table's fills settled -> the job started, once every rank is here
 *   -> the steps that completed applied, and the buffers' refreshes that
 *   waited for them queued -> a table whose last declarer left withdrawn,
 *   or one that stays forgetting the values of a rank 0 that left before
 *   it filled -> a checkpoint asked for if due, written once its updates
 *   ran -> the held pulls released -> a quiesce told -> the end.
 *
 * The checkpoint is decided before the pulls are released, so that in sync
 * mode a checkpoint of a step is on disk before any worker sees that
 * step's weights. Handlers never call each other, nor back up here.
 * Everything runs on the libuv loop thread, so shard state needs no locks. */
#include "kv_server.h"

#include <errno.h>
#include <inttypes.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "front.h"
#include "ps_error.h"
#include "ps_log.h"
#include "row_table.h"
#include "unit_wire.h"
#include "validate.h"
#include "writes.h"

/* Default deadline for a connection to say HELLO and finish its handshake,
 * and for a refused peer to take its reason and go. */
#define PS__KV_HANDSHAKE_MS 10000
/* How often (at most) the pulls held for other workers are looked at; each
 * is explained every wait_report_ms it waits (held.h). */
#define PS__KV_WAIT_CHECK_MS 1000

/* What an event changed that the sequence's later steps look at. */
enum {
    PS__KV_JOINED = 1 << 0, /* a worker was admitted: the job may start */
    PS__KV_LEFT = 1 << 1,   /* a worker left or a rank was lost: the job may be over */
    /* A dense push was taken, or the clock of a server without a pushable
     * chunk moved (a pull, a rows push): a periodic checkpoint may be due. */
    PS__KV_PUSHED = 1 << 2,
};

/* What the table's life counts as steps applied: the chunks' updates, and
 * on a server none of whose chunks is pushed the clock it follows the job
 * by (units.h), which moves with no update of its own; a table adopted
 * there starts at 0 of it. */
static uint64_t ps__kv_applied(const ps_kv_server *s)
{
    const ps_units *u = &s->units;

    return s->chunks.n.applied +
           (ps_units_stepless(u) ? ps_units_progress_clock(u, s->cfg.staleness) : 0);
}

/* A stepless server's clock moves with its pulls and rows pushes. */
static unsigned ps__kv_moved(const ps_kv_server *s)
{
    return ps_units_stepless(&s->units) ? PS__KV_PUSHED : 0;
}

/* ---- the sequence ------------------------------------------------------- */

/* Training starts once every rank has joined and the table is held: its
 * fills begin (a declared table) and are first in every chunk's queue, so a
 * pull is answered once they have run and an update runs after its
 * chunk's. */
static void ps__kv_maybe_start(ps_kv_server *s)
{
    ps_tensors *t = &s->tensors;

    if (!ps_job_complete(&s->job) || !ps_table_life_holds(&t->life))
        return;
    ps_tensors_event(t, PS_TABLE_START);
    if (ps_tensors_settle(t, ps__kv_applied(s)) == PS_TABLE_WITHDRAW)
        ps_front_withdraw(s, t->fill_why);
    if (!ps_table_life_holds(&t->life))
        return;
    ps_job_start(&s->job);
}

/* Sync: every unit whose step is complete (units.h), of either kind, has
 * it applied. With nobody live, a step half pushed stays as it is: the
 * ranks that fed it rejoin, their repeats are dropped and the rest
 * completes it exactly once, rather than the part that came being applied
 * alone. */
static void ps__kv_apply_completed(ps_kv_server *s)
{
    ps_units *u = &s->units;
    int unit, needed;

    if (!s->tensors.has_table)
        return;
    if (s->cfg.staleness != 0 || s->job.live == 0) {
        ps_units_clean(u);
        return;
    }
    needed = ps_consistency_pushes_needed(s->cfg.quorum, s->cfg.world, s->job.live);
    while ((unit = ps_units_next_complete(u, needed)) >= 0) {
        if (unit < u->n_chunks)
            ps_chunks_apply_step(&s->chunks, unit);
        else
            ps_rows_apply_step(&s->rows, unit - u->n_chunks);
        ps_units_advance(u, unit);
    }
}

/* A worker that declared the table left: if it was the last declarer and no
 * step was applied, the table is withdrawn. One that finished its run stays
 * counted (its table served); a server that is stopping withdraws nothing:
 * it goes away itself. A table that stays forgets the initial values a
 * rank 0 wrote unless it is filled by now (values.h): the next rank 0 is
 * asked for its own, so a stranger's do not outlive him. */
static void ps__kv_declarer_left(ps_kv_server *s, ps_peer *p)
{
    char why[200];
    int forgotten;

    if (!p->declarer || s->stopping)
        return;
    if (!(s->job.started && s->job.finished[p->rank])) {
        p->declarer = 0;
        ps_tensors_note_applied(&s->tensors, ps__kv_applied(s));
        snprintf(why, sizeof(why), "%s, its last declarer, left before a step was applied",
                 p->name);
        ps_front_table_event(s, PS_TABLE_DECLARER_LEFT, why);
    }
    /* A withdrawn table's values go with it (ps_values_forget: none). */
    if (p->rank == 0 && (forgotten = ps_values_forget(&s->tensors.values, &s->tensors.life)) > 0)
        ps_info("%s left before the tensor table was filled: the initial values it wrote (%d "
                "chunks) are forgotten, and the next rank 0 is asked for its own",
                p->name, forgotten);
}

/* Only a committed table (a step applied, or restored) is checkpointed. */
static int ps__kv_may_checkpoint(ps_kv_server *s)
{
    ps_tensors_note_applied(&s->tensors, ps__kv_applied(s));
    return ps_table_life_may_checkpoint(&s->tensors.life);
}

static int ps__kv_checkpoint(ps_kv_server *s, const char *why)
{
    if (s->cfg.checkpoint_dir == NULL)
        return 0;
    /* Before a step is applied there is nothing to keep: the table is only
     * declared (by whoever said HELLO first), and a checkpoint of it would
     * outlive a declaration that is withdrawn when its declarer leaves. */
    if (!ps__kv_may_checkpoint(s)) {
        ps_info("no checkpoint (%s): no step has been applied, so there is nothing to keep", why);
        return 0;
    }
    ps_durability_ask(&s->dur, why, &s->tensors, &s->units);
    return ps_durability_try_write(&s->dur, &s->tensors, &s->units, &s->tables, s->job.total_steps);
}

static void ps__kv_quiesced(ps_kv_server *s, int in_time)
{
    ps_kv_server_done_cb cb = s->quiesce_cb;

    if (cb == NULL)
        return;
    s->quiesce_cb = NULL;
    if (s->quiesce_timer_on)
        uv_timer_stop(&s->quiesce_timer);
    if (!in_time)
        ps_warn("the step in progress did not complete in time (%d worker%s live): the state "
                "is mid-step, and a run resumed from a checkpoint of it will not equal an "
                "uninterrupted one",
                s->job.live, s->job.live == 1 ? "" : "s");
    cb(s, s->quiesce_arg);
}

/* At a step boundary a checkpoint resumes exactly; with nobody live,
 * nothing more will complete the step: now, as it is. */
static void ps__kv_maybe_quiesced(ps_kv_server *s)
{
    int boundary;

    if (s->quiesce_cb == NULL)
        return;
    boundary = ps_units_at_boundary(&s->units, s->cfg.staleness);
    if (boundary || s->job.live == 0)
        ps__kv_quiesced(s, boundary);
}

/* The fixed sequence after every event; left: the worker that left in it,
 * if one did. */
static void ps__kv_settle(ps_kv_server *s, unsigned changes, ps_peer *left)
{
    ps_tensors *t = &s->tensors;

    /* Each step is skipped at the cost of one test when it has nothing to
     * do, as it mostly has: the sequence runs after every frame. */
    if (t->life.state == PS_TABLE_FILLING &&
        ps_tensors_settle(t, ps__kv_applied(s)) == PS_TABLE_WITHDRAW)
        ps_front_withdraw(s, t->fill_why);
    if (changes & PS__KV_JOINED)
        ps__kv_maybe_start(s);
    if (s->units.n_dirty > 0)
        ps__kv_apply_completed(s);
    if (t->values.parked)
        ps_writes_release(t, ps_units_server_clock(&s->units));
    if (left)
        ps__kv_declarer_left(s, left);
    if ((changes & PS__KV_PUSHED) && s->cfg.checkpoint_every != 0 &&
        ps_durability_periodic_due(&s->dur, ps_units_progress_clock(&s->units, s->cfg.staleness)))
        ps__kv_checkpoint(s, "periodic");
    if (s->dur.due)
        ps_durability_try_write(&s->dur, t, &s->units, &s->tables, s->job.total_steps);
    ps_held_release(&s->held);
    if (s->quiesce_cb)
        ps__kv_maybe_quiesced(s);
    if ((changes & PS__KV_LEFT) && ps_job_over(&s->job) && s->done)
        s->done(s, s->done_arg);
}

/* The apply queue's "settled": a withdrawn table is freed once the work
 * still in flight on it has drained; otherwise the fills, writes and
 * updates that finished may let the table fill and pulls go. */
static void ps__kv_on_settled(void *arg)
{
    ps_kv_server *s = arg;

    if (s->tensors.life.state == PS_TABLE_WITHDRAWN) {
        ps_front_release_withdrawn(s);
        return;
    }
    ps__kv_settle(s, 0, NULL);
}

/* ---- peers: admitted, leaving ------------------------------------------- */

/* p leaves every barrier (BYE, a lost connection, silence): its held pulls
 * are dropped, its pushes for unapplied steps stay, and the units that only
 * waited for it may complete. An evaluator just goes. Returns what changed. */
static unsigned ps__kv_leave(ps_kv_server *s, ps_peer *p, const char *why)
{
    if (ps_peers_evaluator_leave(&s->peers, p)) {
        ps_held_drop(&s->held, p);
        ps_info("%s left (%s); the job goes on", p->name, why);
        return 0;
    }
    if (!ps_job_leave(&s->job, p, why, uv_now(s->loop)))
        return 0;
    ps_held_drop(&s->held, p);
    if (s->tensors.has_table)
        ps_units_rank_left(&s->units, p->rank);
    return PS__KV_LEFT;
}

/* Every evaluator slot was taken: old, the evaluator that read least
 * lately, gives way to the newcomer (peer.h). Its connection is closed as
 * a silent evaluator's is, without an ERROR, so that an evaluator of the
 * job that was made to give way reconnects (shardps-eval --follow does on
 * a lost connection), and then it is the newcomer that read least. */
static void ps__kv_evaluator_gives_way(ps_kv_server *s, ps_peer *old, const ps_peer *newcomer)
{
    s->peers.replaced++;
    if (s->peers.replaced == 1 || s->peers.replaced % 100 == 0)
        ps_warn("closing %s for %s: every evaluator slot is taken, and it has gone longest "
                "without a pull (%" PRIu64 " so far)",
                old->name, newcomer->name, s->peers.replaced);
    ps__kv_leave(s, old, "gave way to a newer evaluator");
    ps_conn_close(old->conn, 0);
}

/* A HELLO is ready to be judged (handshake.h): the table it declares is
 * adopted, or replaces the one held, as the verdict says; then the worker
 * is admitted, counts again toward the steps it fed, and a declarer is
 * counted. Returns what changed. */
static unsigned ps__kv_admit(ps_kv_server *s, ps_peer *p, const Shardps__Hello *hello,
                             uint64_t request_id, const ps_model_spec *spec)
{
    char why[512];
    ps_hs_verdict v;

    if (hello != NULL && hello->role == SHARDPS__ROLE__ROLE_EVALUATOR) {
        ps_peer *old;
        if (ps_handshake_evaluator(&s->hs, p, hello, request_id, &old) == PS_HS_JOIN && old)
            ps__kv_evaluator_gives_way(s, old, p);
        return 0;
    }
    v = ps_handshake_judge(&s->hs, p, hello, spec, why, sizeof(why));
    if (v == PS_HS_OUTRANKS) {
        if (ps_front_outranked(s, p, why) < 0)
            return 0;
        v = PS_HS_ADOPT;
    }
    if (v == PS_HS_REFUSED || (v == PS_HS_ADOPT && ps_front_declare(s, p, hello, spec) < 0))
        return 0;
    ps_handshake_place(&s->hs, p, hello);
    ps_job_admit(&s->job, p);
    ps_units_rank_joined(&s->units, p->rank);
    if (spec != NULL) {
        p->declarer = 1;
        ps_tensors_event(&s->tensors, PS_TABLE_DECLARER_JOINED);
    }
    if (ps_handshake_welcome(&s->hs, p, request_id, spec != NULL) < 0)
        return 0;
    ps_job_joined(&s->job, p);
    return PS__KV_JOINED;
}

/* ---- frames ------------------------------------------------------------- */

/* A goodbye ends the connection. It counts as the rank finishing only once
 * the job has started: before that, a rank that says hello and goodbye
 * (anyone, without a token) is as if it never came, and training still
 * waits for every rank. */
static unsigned ps__kv_bye(ps_kv_server *s, ps_peer *p)
{
    unsigned changes;

    if (p->state == PS_PEER_EVALUATOR) {
        changes = ps__kv_leave(s, p, "said goodbye");
    } else if (s->job.started) {
        ps_job_finished(&s->job, p->rank);
        changes = ps__kv_leave(s, p, "finished");
    } else {
        changes = ps__kv_leave(s, p, "said goodbye before the job started");
    }
    ps_conn_close(p->conn, 0);
    return changes;
}

/* The handshake's frames, and a HELLO judged once it is ready. */
static unsigned ps__kv_handshake(ps_kv_server *s, ps_peer *p, const ps_frame *f)
{
    const Shardps__Hello *hello = NULL;
    uint64_t request_id = 0;
    ps_model_spec spec;
    int has_spec;
    unsigned changes = 0;

    if (ps_handshake_frame(&s->hs, p, f, &hello, &request_id, &spec, &has_spec) == PS_HS_READY)
        changes = ps__kv_admit(s, p, hello, request_id, has_spec ? &spec : NULL);
    if (has_spec)
        ps_model_spec_free(&spec);
    return changes;
}

/* A frame of an admitted worker, to its handler. Returns what changed. */
static unsigned ps__kv_worker_frame(ps_kv_server *s, ps_peer *p, const ps_frame *f)
{
    ps_pull *q;

    switch (f->hdr->type) {
    case SHARDPS__MSG_TYPE__PULL:
        q = ps_chunks_pull(&s->chunks, p, f);
        if (q == NULL)
            return 0;
        ps_held_add(&s->held, q);
        return ps__kv_moved(s);
    case SHARDPS__MSG_TYPE__PUSH:
        return ps_chunks_push(&s->chunks, p, f) == 0 ? PS__KV_PUSHED : 0;
    case SHARDPS__MSG_TYPE__PULL_ROWS:
        q = ps_rows_pull(&s->rows, p, f);
        if (q)
            ps_held_add(&s->held, q);
        return 0;
    case SHARDPS__MSG_TYPE__PUSH_ROWS:
        return ps_rows_push(&s->rows, p, f) == 0 ? ps__kv_moved(s) : 0;
    case SHARDPS__MSG_TYPE__WRITE:
        ps_writes_handle(&s->tensors, p, f, ps_units_server_clock(&s->units));
        return 0;
    case SHARDPS__MSG_TYPE__BYE:
        return ps__kv_bye(s, p);
    case SHARDPS__MSG_TYPE__HEARTBEAT:
        return 0;
    default:
        ps_peer_fail(p, -PS_EPROTO, "unexpected message type %d from a worker", f->hdr->type);
        return 0;
    }
}

/* An evaluator may send what its role allows (validate.h): PULL, HEARTBEAT
 * and BYE. */
static unsigned ps__kv_evaluator_frame(ps_kv_server *s, ps_peer *p, const ps_frame *f)
{
    char why[160];
    ps_pull *q;

    if (ps_validate_evaluator_type(f->hdr->type, why, sizeof(why)) < 0) {
        ps_peer_fail(p, -PS_EPROTO, "%s", why);
        return 0;
    }
    if (f->hdr->type == SHARDPS__MSG_TYPE__PULL)
        p->last_read = p->last_seen;
    if (f->hdr->type == SHARDPS__MSG_TYPE__PULL && (q = ps_chunks_pull(&s->chunks, p, f)) != NULL)
        ps_held_add(&s->held, q);
    else if (f->hdr->type == SHARDPS__MSG_TYPE__BYE)
        return ps__kv_bye(s, p);
    return 0;
}

static void ps__kv_on_frame(ps_conn *c, const ps_frame *f)
{
    ps_peer *p = ps_conn_data(c);
    ps_kv_server *s = ps_front_of(p);
    unsigned changes;

    if (p->failed || p->state == PS_PEER_GONE)
        return;
    p->last_seen = uv_now(s->loop);
    if (ps_peer_handshaking(p))
        changes = ps__kv_handshake(s, p, f);
    else if (p->state == PS_PEER_EVALUATOR)
        changes = ps__kv_evaluator_frame(s, p, f);
    else
        changes = ps__kv_worker_frame(s, p, f);
    ps__kv_settle(s, changes, (changes & PS__KV_LEFT) ? p : NULL);
}

/* The decoder refused what the peer sent (a wrong version, a size over a
 * limit, a bad checksum, a payload the place callback refused): the reason
 * goes back in a REJECT or ERROR before the connection closes. */
static void ps__kv_on_decode_error(ps_conn *c, int err)
{
    ps_peer *p = ps_conn_data(c);

    ps_peer_fail(p, err, "%s: %s", ps_strerror(err), ps_conn_error(c));
}

/* A connection closed: its peer leaves, and is freed once the sequence has
 * run. */
static void ps__kv_on_conn_close(ps_conn *c, int err)
{
    ps_peer *p = ps_conn_data(c);
    ps_kv_server *s = ps_front_of(p);
    unsigned changes;

    if (err < 0 && err != -PS_ECLOSED && !p->failed) {
        const char *detail = ps_conn_error(c);
        ps_warn("closing %s: %s%s%s", p->name, ps_strerror(err), *detail ? ": " : "", detail);
        s->peers.refused++;
    }
    changes =
        ps__kv_leave(s, p, err == -PS_ECLOSED || err == 0 ? "disconnected" : ps_strerror(err));
    ps__kv_settle(s, changes, (changes & PS__KV_LEFT) ? p : NULL);
    ps_peers_remove(&s->peers, p);
    ps_unit_wire_done(p);
    if (p->hello)
        shardps__hello__free_unpacked(p->hello, NULL);
    free(p);
}

/* ---- timers ------------------------------------------------------------- */

/* Every connection state has a deadline. Before HELLO and during the
 * handshake: the handshake timeout (a connection that never completes it
 * holds a descriptor for nothing); a refused peer that does not take its
 * reason: the same. An admitted worker that has sent nothing for the
 * heartbeat timeout (stopped, partitioned, hung, or stuck mid-frame) leaves
 * the barrier; its connection is closed so that, if it wakes up, it
 * reconnects and rejoins at the current clock. Each peer that leaves is an
 * event of its own. */
static void ps__kv_on_liveness(uv_timer_t *timer)
{
    ps_kv_server *s = timer->data;
    uint64_t now = uv_now(s->loop), silent = s->cfg.heartbeat_timeout_ms;
    unsigned changes;

    for (ps_peer *p = s->peers.head; p; p = p->next) {
        if (now - p->last_seen <= s->handshake_timeout_ms)
            continue;
        if (p->failed) {
            ps_conn_close(p->conn, -PS_ETIMEOUT);
        } else if (ps_peer_handshaking(p)) {
            ps_warn("closing %s: no handshake within %.1f s", p->name,
                    s->handshake_timeout_ms / 1000.0);
            s->peers.refused++;
            p->failed = 1;
            ps_conn_close(p->conn, -PS_ETIMEOUT);
        } else if (p->state == PS_PEER_EVALUATOR && silent > 0 && now - p->last_seen > silent) {
            /* Its slot is not held by a process that went silent; a live
             * one reconnects. */
            ps__kv_settle(s, ps__kv_leave(s, p, "heartbeat timeout"), NULL);
            ps_conn_close(p->conn, -PS_ETIMEOUT);
        }
    }
    for (int r = 0; silent > 0 && r < s->cfg.world; r++) {
        ps_peer *p = s->job.workers[r];
        if (p == NULL || now - p->last_seen <= silent)
            continue;
        ps_warn("%s silent for %.1f s (heartbeat timeout %.1f s)", p->name,
                (double)(now - p->last_seen) / 1000, silent / 1000.0);
        changes = ps__kv_leave(s, p, "heartbeat timeout");
        ps__kv_settle(s, changes, p);
        ps_conn_close(p->conn, -PS_ETIMEOUT);
    }
    if (ps_job_check_rejoins(&s->job, now) > 0)
        ps__kv_settle(s, PS__KV_LEFT, NULL);
}

static void ps__kv_on_waits(uv_timer_t *timer)
{
    ps_kv_server *s = timer->data;

    ps_held_report(&s->held);
    ps__kv_settle(s, 0, NULL);
}

static void ps__kv_on_checkpoint_timer(uv_timer_t *timer)
{
    ps_kv_server *s = timer->data;

    if (ps_durability_timer_due(&s->dur, ps_units_progress_clock(&s->units, s->cfg.staleness)))
        ps__kv_checkpoint(s, "timer");
    ps__kv_settle(s, 0, NULL);
}

static void ps__kv_on_quiesce_timeout(uv_timer_t *timer)
{
    ps_kv_server *s = timer->data;

    ps__kv_quiesced(s, ps_units_at_boundary(&s->units, s->cfg.staleness));
}

static void ps__kv_on_connection(uv_stream_t *listener, int status)
{
    ps_kv_server *s = listener->data;
    /* No payload until the peer is admitted: a HELLO carries none. */
    ps_conn_config cc = {.on_frame = ps__kv_on_frame,
                         .on_close = ps__kv_on_conn_close,
                         .place = ps_front_place,
                         .on_decode_error = ps__kv_on_decode_error,
                         /* Nothing large is sent before admission,
                          * which sets the limit for this server's
                          * share (handshake.c). */
                         .max_write_queue = PS_PEER_WRITE_QUEUE_HEADROOM,
                         .scan_nonfinite = s->cfg.reject_nonfinite};
    ps_peer *p;
    ps_conn *c;

    if (status < 0) {
        ps_warn("accept failed: %s", uv_strerror(status));
        return;
    }
    p = calloc(1, sizeof(*p));
    if (p == NULL) {
        ps_warn("out of memory accepting a connection");
        return;
    }
    if (ps_conn_accept(listener, &cc, p, &c) < 0) {
        free(p);
        return;
    }
    p->conn = c;
    p->last_seen = uv_now(s->loop);
    snprintf(p->name, sizeof(p->name), "peer %s", ps_conn_peer(c));
    ps_peers_add(&s->peers, p);
    ps_peers_make_room(&s->peers, p, s->hs.max_connections, s->cfg.world);
}

/* ---- lifecycle ---------------------------------------------------------- */

int ps_kv_server_init(ps_kv_server **out, uv_loop_t *loop, const ps_kv_server_config *cfg,
                      ps_kv_server_done_cb done, void *arg)
{
    ps_kv_server *s;
    int rc = -ENOMEM;

    if (cfg->world < 1 || cfg->num_servers < 1 || cfg->server_index < 0 ||
        cfg->server_index >= cfg->num_servers)
        return -EINVAL;
    s = calloc(1, sizeof(*s));
    if (s == NULL)
        return -ENOMEM;
    s->loop = loop;
    s->settled = ps__kv_on_settled;
    s->cfg = *cfg;
    s->cfg.table = NULL;
    if (s->cfg.max_row_ids == 0)
        s->cfg.max_row_ids = PS_ROWS_DEFAULT_MAX_IDS;
    s->done = done;
    s->done_arg = arg;
    s->handshake_timeout_ms =
        cfg->handshake_timeout_ms > 0 ? cfg->handshake_timeout_ms : PS__KV_HANDSHAKE_MS;
    ps_tensors_init(&s->tensors, loop, &s->cfg);
    ps_durability_init(&s->dur, &s->cfg);
    if (ps_job_init(&s->job, &s->cfg) < 0 ||
        ps_held_init(&s->held, loop, &s->cfg, &s->job, &s->tensors, &s->tables, &s->units,
                     &s->dur) < 0)
        goto fail;
    s->hs = (ps_handshake){
        &s->cfg,   &s->job,
        &s->peers, &s->tensors,
        &s->units, cfg->max_connections > 0 ? cfg->max_connections : 2 * cfg->world + 16};
    ps_chunks_init(&s->chunks, &s->cfg, &s->job, &s->tensors, &s->units);
    ps_rows_init(&s->rows, &s->cfg, &s->job, &s->tensors, &s->units, &s->tables);
    if (cfg->table && (rc = ps_front_adopt(s, cfg->table, PS_TABLE_CONFIGURE)) < 0)
        goto fail;
    *out = s;
    return 0;
fail:
    ps_kv_server_close(s);
    return rc;
}

static void ps__kv_timer(ps_kv_server *s, uv_timer_t *timer, int *on, uv_timer_cb cb,
                         uint64_t every)
{
    uv_timer_init(s->loop, timer);
    timer->data = s;
    *on = 1;
    uv_timer_start(timer, cb, every, every);
}

int ps_kv_server_start(ps_kv_server *s, const struct sockaddr *addr, int *bound_port)
{
    struct sockaddr_storage ss;
    int len = sizeof(ss);
    uint64_t every = s->handshake_timeout_ms;
    int rc;

    uv_tcp_init(s->loop, &s->listener);
    s->listener.data = s;
    s->listening = 1;
    rc = uv_tcp_bind(&s->listener, addr, 0);
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&s->listener, 128, ps__kv_on_connection);
    if (rc == 0)
        rc = uv_tcp_getsockname(&s->listener, (struct sockaddr *)&ss, &len);
    if (rc < 0)
        return rc;
    if (s->cfg.heartbeat_timeout_ms > 0 && s->cfg.heartbeat_timeout_ms < every)
        every = s->cfg.heartbeat_timeout_ms;
    if (s->job.rejoin_timeout_ms < every)
        every = s->job.rejoin_timeout_ms;
    every = every / 4 ? every / 4 : 1;
    ps__kv_timer(s, &s->liveness, &s->liveness_on, ps__kv_on_liveness, every);
    ps__kv_timer(s, &s->waits, &s->waits_on, ps__kv_on_waits,
                 s->held.report_ms < PS__KV_WAIT_CHECK_MS ? s->held.report_ms
                                                          : PS__KV_WAIT_CHECK_MS);
    ps_durability_survey(&s->dur, &s->tensors);
    if (s->cfg.checkpoint_dir != NULL && s->cfg.checkpoint_seconds > 0)
        ps__kv_timer(s, &s->ckpt_timer, &s->ckpt_timer_on, ps__kv_on_checkpoint_timer,
                     (uint64_t)(s->cfg.checkpoint_seconds * 1000));
    *bound_port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                 : ((struct sockaddr_in *)&ss)->sin_port);
    if (!s->tensors.has_table)
        ps_info("server %d of %d (mode %s) waits for the first worker to declare the tensors",
                s->cfg.server_index, s->cfg.num_servers, ps_mode_name(s->cfg.mode));
    ps_handshake_say_strangers(&s->cfg);
    return 0;
}

static void ps__kv_close_timer(uv_timer_t *timer, int *on)
{
    if (*on)
        uv_close((uv_handle_t *)timer, NULL);
    *on = 0;
}

void ps_kv_server_stop(ps_kv_server *s)
{
    if (s->stopping)
        return;
    s->stopping = 1;
    if (s->listening && !uv_is_closing((uv_handle_t *)&s->listener))
        uv_close((uv_handle_t *)&s->listener, NULL);
    ps__kv_close_timer(&s->liveness, &s->liveness_on);
    ps__kv_close_timer(&s->waits, &s->waits_on);
    ps__kv_close_timer(&s->ckpt_timer, &s->ckpt_timer_on);
    ps__kv_close_timer(&s->quiesce_timer, &s->quiesce_timer_on);
    for (ps_peer *p = s->peers.head; p; p = p->next)
        ps_conn_close(p->conn, 0);
}

void ps_kv_server_close(ps_kv_server *s)
{
    if (s == NULL)
        return;
    ps_front_free_table(s);
    ps_held_free(&s->held);
    ps_job_free(&s->job);
    free(s);
}

int ps_kv_server_checkpoint(ps_kv_server *s, const char *why)
{
    return ps__kv_checkpoint(s, why);
}

/* Calls cb at the next step boundary, or after timeout_ms all the same
 * (kv_server.h). */
void ps_kv_server_quiesce(ps_kv_server *s, uint32_t timeout_ms, ps_kv_server_done_cb cb, void *arg)
{
    s->quiesce_cb = cb;
    s->quiesce_arg = arg;
    ps__kv_maybe_quiesced(s);
    if (s->quiesce_cb == NULL)
        return;
    ps_info("waiting up to %.1f s for the step in progress to complete (a checkpoint at a step "
            "boundary resumes exactly)",
            timeout_ms / 1000.0);
    if (!s->quiesce_timer_on) {
        uv_timer_init(s->loop, &s->quiesce_timer);
        s->quiesce_timer.data = s;
        s->quiesce_timer_on = 1;
    }
    uv_timer_start(&s->quiesce_timer, ps__kv_on_quiesce_timeout, timeout_ms, 0);
}
