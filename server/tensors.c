/* The tensors this server holds, through their life (table_life.h). A
 * server starts with no table: a worker's HELLO declares it (or a verified
 * checkpoint brings it, or the embedding program configures it), and
 * adopting it cuts the partition and sets up the shard, the per-chunk clocks
 * and the apply queue. Every later HELLO must declare the same table, or it
 * is refused with the first difference named, or declare none and join the
 * job as it is (the WELCOME tells it the tensors; before any table, it is
 * told to come back). Until a step is applied the declaration is only as
 * real as the peers that made it: when the last of them leaves, the table
 * is withdrawn and nothing of it survives. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv_internal.h"
#include "ps_error.h"
#include "ps_log.h"
#include "tensor_table.h"

void ps__free_table(ps_kv_server *s)
{
    ps__rows_free(s);
    ps_apply_queue_close(s->updates);
    ps_buf_pool_close(s->bufs);
    free(s->ckpt_clocks);
    free(s->ckpt_newest);
    ps_shard_free(s->shard);
    ps_partition_free(s->part);
    free(s->sync);
    free(s->seen);
    /* The ranks' push records are sized by this table's chunks. */
    for (int r = 0; s->rank_pushed && r < s->cfg.world; r++) {
        free(s->rank_pushed[r]);
        s->rank_pushed[r] = NULL;
    }
    s->updates = NULL;
    s->bufs = NULL;
    s->ckpt_clocks = s->ckpt_newest = NULL;
    s->shard = NULL;
    s->part = NULL;
    s->sync = NULL;
    s->seen = NULL;
    s->n_local = 0;
    s->has_table = 0;
    ps__values_free(s);
    ps_model_spec_free(&s->table);
    memset(&s->life, 0, sizeof(s->life));
}

/* The apply queue's "settled": a withdrawn table is freed once the work
 * still in flight on it has drained; otherwise waiting pulls may go. */
static void ps__on_settled(void *arg)
{
    ps_kv_server *s = arg;

    if (s->life.state == PS_TABLE_WITHDRAWN) {
        if (ps_apply_queue_idle(s->updates)) {
            ps__free_table(s);
            ps_info("the withdrawn tensor table is released; waiting for a worker to declare the "
                    "tensors");
        }
        return;
    }
    ps__on_updates_settled(s);
}

int ps__adopt_table(ps_kv_server *s, const ps_model_spec *spec, ps_table_event how)
{
    size_t share;
    int rc;

    if (s->has_table)
        return -EEXIST;
    rc = ps_model_spec_copy(&s->table, spec);
    if (rc < 0)
        goto fail;
    ps_model_spec_digest(&s->table, s->table_digest);
    rc = ps_partition_init(&s->part, &s->table, s->cfg.num_servers, s->cfg.chunk_bytes);
    if (rc < 0)
        goto fail;
    rc = ps_shard_init(&s->shard, s->part, s->cfg.server_index, &s->table, &s->cfg.opt,
                       s->cfg.staleness == 0);
    if (rc < 0)
        goto fail;
    rc = -ENOMEM;
    s->n_local = ps_shard_chunk_count(s->shard);
    share = ps_partition_server_numel(s->part, s->cfg.server_index) * sizeof(float);
    s->max_write_queue = 2 * share + PS__WRITE_QUEUE_HEADROOM;
    /* In sync mode every worker's push of a step and every worker's reply
     * can be in flight at once: keep that many shard-sized buffers warm. */
    if (ps_buf_pool_init(&s->bufs, 2 * (size_t)s->cfg.world * share) < 0 ||
        ps_apply_queue_init(&s->updates, s->loop, s->n_local, ps__on_settled, s) < 0)
        goto fail;
    if (ps__values_init(s) < 0)
        goto fail;
    s->sync = calloc((size_t)s->n_local + 1, sizeof(*s->sync));
    s->seen = calloc((size_t)s->n_local + 1, sizeof(*s->seen));
    s->ckpt_clocks = calloc((size_t)s->n_local + 1, sizeof(uint64_t));
    s->ckpt_newest = calloc((size_t)s->n_local + 1, sizeof(uint64_t));
    if (s->sync == NULL || s->seen == NULL || s->ckpt_clocks == NULL || s->ckpt_newest == NULL)
        goto fail;
    rc = ps__rows_build(s);
    if (rc < 0)
        goto fail;
    /* Buffers and frozen tensors are never pushed: their chunks hold no
     * step back (the server's clock is the least of the others'). */
    s->n_pushable = s->n_local;
    for (int i = 0; i < s->n_local; i++)
        if (ps__chunk_static(s, i)) {
            s->sync[i].clock = UINT64_MAX;
            s->n_pushable--;
        }
    s->has_table = 1;
    s->applied_base = s->n_applied;
    ps_table_life_step(&s->life, how);
    ps_info("server %d of %d holds %d chunks of %d tensors: %zu bytes of weights (%.1f MiB with "
            "optimizer state), mode %s",
            s->cfg.server_index, s->cfg.num_servers, s->n_local, s->table.n_tensors, share,
            (double)ps_shard_memory_bytes(s->shard) / (1 << 20), ps_mode_name(s->cfg.mode));
    return 0;
fail:
    ps__free_table(s);
    return rc;
}

/* A step has been applied since the table was adopted: it is committed.
 * Looked at lazily, wherever the difference matters (a declarer leaving, a
 * checkpoint), rather than on every update. */
static void ps__note_applied(ps_kv_server *s)
{
    /* A step applied while other chunks were still filling commits the
     * table once they all are. */
    if (s->life.state == PS_TABLE_FILLED && s->n_applied > s->applied_base)
        ps_table_life_step(&s->life, PS_TABLE_APPLIED);
}

int ps__chunk_static(const ps_kv_server *s, int local)
{
    return s->table.tensors[ps_shard_chunk(s->shard, local)->tensor_id].kind != PS_KIND_PARAMETER;
}

int ps__table_may_checkpoint(ps_kv_server *s)
{
    ps__note_applied(s);
    return ps_table_life_may_checkpoint(&s->life);
}

/* Nothing of a withdrawn table survives: the peers that joined it are
 * closed, who joined the job and what the job was to do is forgotten, and
 * the table itself is freed once the work in flight on it has drained: now
 * if none is, unless called from inside the apply queue (in_queue), which
 * calls ps__on_settled itself afterwards. */
static void ps__withdraw(ps_kv_server *s, const char *why, int in_queue)
{
    char reason[1024];
    ps__peer *p;

    ps_warn("the tensor table of %d tensors is withdrawn: %s; nothing of it is kept, and the next "
            "worker to declare the tensors declares them anew",
            s->table.n_tensors, why);
    snprintf(reason, sizeof(reason),
             "the tensor table this worker joined was withdrawn (%s); connect again to declare or "
             "join the job's tensors",
             why);
    atomic_store(&s->fills_cancelled, 1);
    /* Not started any more first, so the peers leaving below are not waited
     * for as ranks that left a running job. */
    s->started = 0;
    for (p = s->peers; p; p = p->next) {
        if (p->state != PS__PEER_WORKER)
            continue;
        ps__worker_leave(s, p, "its tensor table was withdrawn");
        ps__peer_fail(p, -PS_EMISMATCH, "%s", reason);
    }
    s->joined = 0;
    s->n_lost = 0;
    memset(s->has_joined, 0, (size_t)s->cfg.world);
    memset(s->finished, 0, (size_t)s->cfg.world);
    memset(s->lost, 0, (size_t)s->cfg.world);
    memset(s->left_at, 0, (size_t)s->cfg.world * sizeof(*s->left_at));
    s->resume_clock = s->restored_clock = s->ckpt_clock = 0;
    s->rows_note = NULL;
    s->total_steps = s->cfg.lr.total_steps;
    ps__drop_pulls(s, NULL);
    if (!in_queue)
        ps__on_settled(s);
}

/* One chunk's memory and initial values, made on the thread pool: a large
 * table filled on the loop stalled every peer for seconds. */
typedef struct {
    ps_apply_job job;
    ps_kv_server *srv;
    ps_shard *shard;
    int local, rc;
} ps__fill;

static void ps__fill_run(ps_apply_job *j)
{
    ps__fill *f = (ps__fill *)j;

    /* A table withdrawn meanwhile is only drained: no memory for it. */
    if (!atomic_load_explicit(&f->srv->fills_cancelled, memory_order_relaxed) &&
        (f->rc = ps_shard_fill(f->shard, f->local, 1)) == 0)
        ps__values_fill(f->srv, f->local);
}

static void ps__table_event(ps_kv_server *s, ps_table_event ev, const char *why, int in_queue);

static void ps__fill_done(ps_apply_job *j)
{
    ps__fill *f = (ps__fill *)j;
    ps_kv_server *s = f->srv;
    char why[160];

    /* A withdrawn table only drains. */
    if (s->life.state == PS_TABLE_FILLING && f->rc < 0) {
        snprintf(why, sizeof(why), "no memory to fill chunk %d of this server's %d", f->local,
                 s->n_local);
        ps__table_event(s, PS_TABLE_CHECK_FAILED, why, 1);
    } else if (s->life.state == PS_TABLE_FILLING) {
        s->fills_left--;
        free(s->pending[f->local]);
        s->pending[f->local] = NULL;
        ps__maybe_filled(s, 1);
    }
    free(f);
}

void ps__maybe_filled(ps_kv_server *s, int in_queue)
{
    if (s->life.state != PS_TABLE_FILLING || s->fills_left > 0 || !ps__values_done(s))
        return;
    ps__table_event(s, PS_TABLE_FILL_DONE, NULL, in_queue);
    ps__note_applied(s);
    ps_info("the %d chunks of this server are filled (%.1f MiB)", s->n_local,
            (double)ps_shard_memory_bytes(s->shard) / (1 << 20));
    /* Pulls held for the values may go now. */
    if (!in_queue)
        ps__release_pulls(s);
}

/* Hands every chunk's fill to the thread pool (never run here: that is the
 * point), in the apply queue, so whatever is submitted for a chunk later
 * runs after its fill. */
static void ps__fill_all(ps_kv_server *s)
{
    atomic_store(&s->fills_cancelled, 0);
    s->fills_left = s->n_local;
    for (int i = 0; i < s->n_local; i++) {
        ps__fill *f = calloc(1, sizeof(*f));
        if (f != NULL) {
            f->job.run = ps__fill_run;
            f->job.done = ps__fill_done;
            f->srv = s;
            f->shard = s->shard;
            f->local = i;
        }
        if (f == NULL || ps_apply_queue_submit(s->updates, i, &f->job, 0) < 0) {
            free(f);
            ps__table_event(s, PS_TABLE_CHECK_FAILED, "no memory to fill its chunks", 0);
            return;
        }
    }
    if (s->n_local == 0)
        ps__maybe_filled(s, 0);
}

/* Carries out what a lifecycle event asks for; in_queue: called from a
 * job's done callback inside the apply queue (see ps__withdraw). */
static void ps__table_event(ps_kv_server *s, ps_table_event ev, const char *why, int in_queue)
{
    switch (ps_table_life_step(&s->life, ev)) {
    case PS_TABLE_FILL:
        ps__fill_all(s);
        break;
    case PS_TABLE_WITHDRAW:
        ps__withdraw(s, why, in_queue);
        break;
    default:
        break;
    }
}

void ps__table_abandoned(ps_kv_server *s)
{
    if (s->life.state != PS_TABLE_NONE && s->life.declarers == 0 && !s->life.pinned &&
        s->life.state != PS_TABLE_COMMITTED)
        ps__table_event(s, PS_TABLE_CHECK_FAILED, "the worker that declared it was not admitted",
                        0);
}

void ps__table_declarer_joined(ps_kv_server *s, ps__peer *p)
{
    p->declarer = 1;
    ps_table_life_step(&s->life, PS_TABLE_DECLARER_JOINED);
}

void ps__table_peer_left(ps_kv_server *s, ps__peer *p)
{
    char why[200];

    /* Before training starts, a rank that leaves (however) is as if it
     * never came: training waits for every rank to be there. */
    if (!s->started && s->has_joined[p->rank]) {
        s->has_joined[p->rank] = 0;
        s->joined--;
    }
    /* A declarer that finished its run stays counted: its table served.
     * A server that is stopping withdraws nothing: it goes away itself. */
    if (!p->declarer || (s->started && s->finished[p->rank]) || s->stopping)
        return;
    p->declarer = 0;
    ps__note_applied(s);
    snprintf(why, sizeof(why), "%s, its last declarer, left before a step was applied", p->name);
    ps__table_event(s, PS_TABLE_DECLARER_LEFT, why, 0);
}

/* The schedule's span is the servers' to decide: --total-steps, or a
 * checkpoint's, or else fixed now from the steps the ranks starting the job
 * plan (the most of any), each from a HELLO whose job settings were
 * compared; no later HELLO moves it. */
static void ps__fix_span(ps_kv_server *s)
{
    if (s->total_steps == 0)
        for (int r = 0; r < s->cfg.world; r++)
            if (s->workers[r] && s->workers[r]->planned > s->total_steps)
                s->total_steps = s->workers[r]->planned;
    if (s->cfg.lr.kind != PS_LR_COSINE)
        return;
    if (s->total_steps == 0)
        ps_warn("the cosine schedule has no span: no worker with the job's settings planned its "
                "steps, so the rate stays at --lr; set --total-steps on the servers");
    else
        ps_info("the cosine schedule spans %" PRIu64 " steps", s->total_steps);
}

void ps__maybe_start(ps_kv_server *s)
{
    if (s->started || s->joined < s->cfg.world || !ps_table_life_holds(&s->life))
        return;
    /* The fills begin (a declared table) and are first in every chunk's
     * queue: a pull is answered once they have run, an update runs after
     * its chunk's. */
    ps__table_event(s, PS_TABLE_START, NULL, 0);
    if (!ps_table_life_holds(&s->life))
        return;
    s->started = 1;
    ps__fix_span(s);
    ps_info("all %d workers present, training starts", s->cfg.world);
    ps__release_pulls(s);
}

int ps__table_may_outrank(const ps_kv_server *s, const Shardps__Hello *hello,
                          const ps_model_spec *spec)
{
    return spec != NULL && hello->rank == 0 && s->workers[0] == NULL &&
           ps_table_life_may_outrank(&s->life);
}

/* Rank 0's table over one other ranks declared first (issue 23 pt 2: the
 * job starts from rank 0's model, whoever came first): the held table is
 * withdrawn, its declarers told that rank 0 declared another and how the
 * two differ. Returns 1 when the server now holds no table (rank 0's is
 * adopted next), or -1 after failing rank 0 with -EAGAIN (the old table is
 * still draining: come back). */
static int ps__outranked(ps_kv_server *s, ps__peer *p, const char *diff)
{
    char ranks[128] = "", why[800];
    size_t n = 0;
    int count = 0;

    for (ps__peer *q = s->peers; q; q = q->next)
        if (q->state == PS__PEER_WORKER && q->declarer && n < sizeof(ranks)) {
            n += (size_t)snprintf(ranks + n, sizeof(ranks) - n, "%s%u", count ? ", " : "", q->rank);
            count++;
        }
    snprintf(why, sizeof(why), "rank 0 declared another table than rank%s %s: %s",
             count == 1 ? "" : "s", ranks, diff);
    ps_table_life_step(&s->life, PS_TABLE_OUTRANKED);
    ps__withdraw(s, why, 0);
    if (!s->has_table)
        return 1;
    ps__peer_fail(p, -EAGAIN,
                  "the tensor table other ranks declared gives way to rank 0's and is still "
                  "being withdrawn; come back in a moment");
    return -1;
}

int ps__check_table(ps_kv_server *s, ps__peer *p, const Shardps__Hello *hello,
                    const ps_model_spec *spec)
{
    uint8_t digest[PS_TABLE_DIGEST_BYTES];
    char why[512];
    int rc;

    /* A table being withdrawn is neither compared with nor replaced until
     * the work still in flight on it has drained: come back. */
    if (s->life.state == PS_TABLE_WITHDRAWN) {
        ps__peer_fail(p, -EAGAIN,
                      "the tensor table declared before is being withdrawn (its declarers left); "
                      "come back in a moment");
        return -1;
    }
    /* No table: the client joins the job as declared (and learns the
     * tensors from a TABLE frame), which needs a table to join. Until a
     * worker declares one, -EAGAIN tells a joiner to come back (ps_kv_client
     * waits within its connect timeout); nothing about it is kept here. */
    if (spec == NULL) {
        if (s->has_table)
            return 0;
        ps__peer_fail(p, -EAGAIN,
                      "no tensor table yet: no worker has declared the job's tensors to this "
                      "server, so there is nothing to join");
        return -1;
    }
    if (s->has_table) {
        ps_model_spec_digest(spec, digest);
        if (memcmp(digest, s->table_digest, sizeof(digest)) == 0)
            return 0;
        /* Both tables are here: the refusal names the first difference. */
        if (ps__table_may_outrank(s, hello, spec)) {
            if (ps_tensor_table_diff(spec, &s->table, "from rank 0", "declared first", why,
                                     sizeof(why)) == 0)
                snprintf(why, sizeof(why), "the tables' digests differ");
            if (ps__outranked(s, p, why) < 0)
                return -1;
        } else {
            if (ps_tensor_table_diff(spec, &s->table, "from the worker", "on this server", why,
                                     sizeof(why)) == 0)
                snprintf(why, sizeof(why), "the tables' digests differ");
            ps__peer_fail(p, -PS_EMISMATCH,
                          "model mismatch: %s; every process of a job must declare the same "
                          "tensors and --seed",
                          why);
            return -1;
        }
    }
    rc = ps__adopt_table(s, spec, PS_TABLE_DECLARE);
    if (rc < 0) {
        ps__peer_fail(p, rc == -ENOMEM ? -ENOMEM : -PS_EPROTO,
                      "this server cannot hold the declared tensors in %d servers of "
                      "%zu-byte chunks: %s",
                      s->cfg.num_servers, s->cfg.chunk_bytes, ps_strerror(rc));
        return -1;
    }
    ps_info(
        "tensor table of %d tensors (%zu bytes) declared by worker %u (%s); it is the job's once "
        "a step is applied, and withdrawn if every worker that declared it leaves before",
        spec->n_tensors, spec->total_words * sizeof(float), hello->rank, ps_conn_peer(p->conn));
    return 0;
}
