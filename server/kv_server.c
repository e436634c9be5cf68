/* Key-value server: handshake, pull gating, push accumulation and apply (see
 * kv_server.h for the consistency rules). Everything runs on the libuv loop
 * thread, so shard state needs no locks. */
#include "kv_server.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "apply_queue.h"
#include "buf_pool.h"
#include "checkpoint.h"
#include "half.h"
#include "job_options.h"
#include "partition.h"
#include "ps_error.h"
#include "ps_log.h"
#include "shard.h"
#include "transport.h"

/* Chunks from this size up are updated on the thread pool; smaller ones on
 * the loop, since handing a job to a pool thread and back costs tens of
 * microseconds (bench-pushpull's 4 KiB step took 81 instead of 31 us with
 * every update on the pool), more than updating 64K floats. */
#define PS__POOL_UPDATE_BYTES ((size_t)256 << 10)
/* Pulls one worker may have waiting at once; a well-behaved worker has one. */
#define PS__MAX_PENDING_PER_PEER 16
/* Queued reply bytes past which a peer's requests are no longer read: two
 * full pulls of this shard plus headroom, so a well-behaved worker (one pull
 * in flight) never waits on it and a peer that never reads costs little. */
#define PS__WRITE_QUEUE_HEADROOM ((size_t)16 << 20)

typedef enum {
    PS__PEER_HANDSHAKE, /* waiting for HELLO */
    PS__PEER_AUTH,      /* challenged; waiting for AUTH_RESPONSE */
    PS__PEER_WORKER,
    PS__PEER_GONE,
} ps__peer_state;

typedef struct ps__peer {
    struct ps__peer *next, *prev; /* every connection, for stop */
    ps_kv_server *srv;
    ps_conn *conn;
    ps__peer_state state;
    int failed; /* an ERROR is on its way; ignore further frames */
    uint32_t rank;
    uint64_t clock;   /* steps fully pushed to this server */
    int keys_pushed;  /* keys pushed so far at `clock` */
    uint64_t *pushed; /* the rank's push record (borrowed from the server) */
    int pending;      /* pulls waiting in the server's queue */
    uint64_t fed;     /* sync: 1 + step its last push went into (0: none) */
    uint64_t n_pushes, n_pulls, bytes_in, bytes_out;
    uint64_t last_seen; /* loop time (ms) of its last frame */
    char name[96];      /* "worker 1 (127.0.0.1:40000)" for logs */
    /* Authentication in progress: the HELLO waits here until it is proven;
     * its job settings are copied (owned), as the frame goes away. */
    Shardps__Hello hello;
    char *hello_settings;
    uint64_t hello_id;
    uint8_t client_nonce[PS_AUTH_NONCE_BYTES], server_nonce[PS_AUTH_NONCE_BYTES];
    /* Where the push frame being read lands: a buffer from the server's
     * pool, taken over by ps__handle_push (or returned when the peer goes). */
    ps_frame_piece push_piece;
} ps__peer;

typedef struct ps__pull {
    struct ps__pull *next;
    ps__peer *peer;
    uint64_t request_id;
    uint64_t clock;
    size_t n_keys;
    int *locals; /* local chunk indices, in the order requested */
    /* 0 until the clock rule allows an answer; then the apply queue's number
     * at that moment: the reply waits for every update submitted before. */
    uint64_t seq;
} ps__pull;

/* A push frame's payload, shared by the updates of its chunks and returned
 * to the pool when the last of them is done. */
typedef struct {
    uint8_t *data;
    int refs;
} ps__push_buf;

typedef enum {
    PS__UPDATE_ACCUMULATE, /* sync: add the gradient into the chunk's sum */
    PS__UPDATE_APPLY_SUM,  /* sync: apply the mean of `count` gradients */
    PS__UPDATE_APPLY_GRAD, /* async, ssp: apply the gradient now */
} ps__update_kind;

/* One chunk's share of the optimizer's work, run on the thread pool. */
typedef struct {
    ps_apply_job job;
    ps_shard *shard;
    ps__update_kind kind;
    int local, count;
    float lr;
    const float *grad; /* inside buf */
    ps__push_buf *buf;
} ps__update;

typedef struct {
    uint64_t clock;  /* sync: step whose pushes are being accumulated */
    int pushes;      /* contributions accumulated for `clock` */
    int live_pushes; /* of those, from workers still live */
    uint64_t newest; /* 1 + newest step applied (0: none), for staleness */
} ps__chunk_sync;

/* Staleness of applied gradients: exact counts up to PS__STALE_BINS - 1. */
#define PS__STALE_BINS 256

struct ps_kv_server {
    uv_loop_t *loop;
    ps_kv_server_config cfg;
    ps_partition *part;
    ps_shard *shard;
    int n_local;
    ps__chunk_sync *sync;
    uint32_t *seen; /* per local chunk: stamp of the request that last named it */
    uint32_t seen_stamp;
    uv_tcp_t listener;
    int listening;
    int stopping;
    ps__peer **workers; /* by rank; NULL while not live */
    /* By rank, per local chunk: 1 + the step of its last push (0: none). Kept
     * across reconnects, so a rank that rejoins and repeats a push for a step
     * it already fed is recognised and the repeat dropped: exactly once. */
    uint64_t **rank_pushed;
    uint8_t *finished;   /* by rank: said goodbye */
    uint8_t *has_joined; /* by rank: joined at least once (training starts when all have) */
    size_t max_write_queue;
    ps_buf_pool *bufs; /* push payloads and the unsent rest of pull replies, reused */
    ps_apply_queue *updates;
    /* A checkpoint asked for and waiting for the updates submitted before it
     * (number ckpt_seq) to finish; its clocks are taken when asked. */
    int ckpt_due, ckpt_again;
    uint64_t ckpt_seq, ckpt_due_clock;
    char ckpt_why[32], ckpt_again_why[32];
    uint64_t *ckpt_clocks, *ckpt_newest; /* per chunk, written and restored from here */
    int live;
    int started;           /* every rank has joined once */
    int joined;            /* ranks that have joined at least once */
    uint64_t resume_clock; /* where a worker joining with nobody live starts */
    ps__pull *pulls;       /* waiting pulls, oldest first */
    ps__peer *peers;       /* every open connection */
    ps_kv_server_done_cb done;
    void *done_arg;
    uv_timer_t heartbeat;
    int heartbeat_on;
    uv_timer_t ckpt_timer;
    int ckpt_timer_on;
    uint64_t ckpt_clock;  /* progress clock of the last checkpoint written or restored */
    uint64_t total_steps; /* for the lr schedule: configured, or the largest a worker planned */
    uint64_t stale_hist[PS__STALE_BINS];
    uint64_t stale_sum, stale_max;
    /* Counters for the summary line. */
    uint64_t n_pushes, n_pulls, bytes_in, bytes_out, n_applied, n_dropped, n_refused;
    uint64_t n_nonfinite;
};

static void ps__peer_fail(ps__peer *p, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void ps__on_error_sent(ps_conn *c, int status, void *arg)
{
    (void)status;
    (void)arg;
    ps_conn_close(c, 0);
}

/* A protocol violation: tell the peer why, log it, and close once the reason
 * is written. Nothing the peer sent after this is looked at. */
static void ps__peer_fail(ps__peer *p, int err, const char *fmt, ...)
{
    Shardps__Header h = SHARDPS__HEADER__INIT;
    char reason[1280];
    va_list ap;

    if (p->failed)
        return;
    p->failed = 1;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof(reason), fmt, ap);
    va_end(ap);
    ps_warn("closing %s: %s", p->name, reason);
    p->srv->n_refused++;
    h.type = p->state == PS__PEER_HANDSHAKE || p->state == PS__PEER_AUTH ? SHARDPS__MSG_TYPE__REJECT
                                                                         : SHARDPS__MSG_TYPE__ERROR;
    h.status = err;
    h.reason = reason;
    if (ps_conn_send(p->conn, &h, NULL, 0, ps__on_error_sent, NULL) < 0)
        ps_conn_close(p->conn, err);
}

static uint64_t ps__min_live_clock(const ps_kv_server *s)
{
    uint64_t m = UINT64_MAX;

    for (int r = 0; r < s->cfg.world; r++)
        if (s->workers[r] && s->workers[r]->clock < m)
            m = s->workers[r]->clock;
    return m;
}

/* Sync mode: steps applied to every chunk of this server. */
static uint64_t ps__server_clock(const ps_kv_server *s)
{
    uint64_t m = UINT64_MAX;

    for (int i = 0; i < s->n_local; i++)
        if (s->sync[i].clock < m)
            m = s->sync[i].clock;
    return m == UINT64_MAX ? 0 : m;
}

/* Whether a pull for `clock` by p may be answered now. In sync mode the
 * server's clock must have passed both the step asked for and the step p's
 * last push went into, so p never gets back the weights it just pushed for. */
/* How far training has come here: steps applied (sync) or the newest step
 * applied (async, ssp). */
static uint64_t ps__progress_clock(const ps_kv_server *s)
{
    uint64_t m = 0;

    if (s->cfg.staleness == 0)
        return ps__server_clock(s);
    for (int i = 0; i < s->n_local; i++)
        if (s->sync[i].newest > m)
            m = s->sync[i].newest;
    return m;
}

static int ps__pull_ready(const ps_kv_server *s, const ps__peer *p, uint64_t clock)
{
    uint64_t floor;

    if (!s->started)
        return 0;
    if (s->cfg.staleness == 0)
        return clock <= ps__server_clock(s) && p->fed <= ps__server_clock(s);
    if (s->cfg.staleness == PS_STALENESS_UNBOUNDED)
        return 1;
    floor = ps__min_live_clock(s);
    return floor == UINT64_MAX || clock <= floor + s->cfg.staleness;
}

/* The clock a pull reply reports: in sync mode the steps applied (a worker
 * that fell behind catches up to it); otherwise the worker's own step. */
static uint64_t ps__reply_clock(const ps_kv_server *s, uint64_t asked)
{
    uint64_t c;

    if (s->cfg.staleness != 0)
        return asked;
    c = ps__server_clock(s);
    return c > asked ? c : asked;
}

static void ps__push_buf_release(ps__push_buf *b)
{
    if (b == NULL || --b->refs > 0)
        return;
    ps_buf_pool_put(b->data);
    free(b);
}

/* Answers a pull straight from the weights: ps_conn_send_transient writes
 * what the socket takes now and copies only the rest, because the next update
 * may change the weights as soon as this returns (updates that could run
 * meanwhile on the pool are held, see ps__release_pulls). */
static void ps__answer_pull(ps_kv_server *s, ps__peer *p, uint64_t request_id, uint64_t clock,
                            const int *locals, size_t n)
{
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
    h.request_id = request_id;
    h.clock = ps__reply_clock(s, clock);
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

/* What a checkpoint of this server must say about itself, and where its
 * per-chunk clocks are: the server's own ckpt_clocks/ckpt_newest, which a
 * due checkpoint fills and a restore reads into (borrowed, not freed). */
static void ps__checkpoint_identity(const ps_kv_server *s, ps_checkpoint_meta *meta,
                                    ps_checkpoint_clocks *clocks)
{
    memset(meta, 0, sizeof(*meta));
    meta->server_index = (uint32_t)s->cfg.server_index;
    meta->num_servers = (uint32_t)s->cfg.num_servers;
    meta->optimizer = (uint32_t)s->cfg.opt.kind;
    meta->fingerprint = ps_model_spec_fingerprint(&s->cfg.spec);
    meta->chunk_bytes = s->cfg.chunk_bytes;
    meta->total_steps = s->total_steps;
    clocks->clock = s->ckpt_clocks;
    clocks->newest = s->ckpt_newest;
}

/* Writes the checkpoint that was due, with the clocks taken when it was
 * asked for: the updates before it are applied, none after it started. */
static int ps__write_checkpoint(ps_kv_server *s)
{
    ps_checkpoint_meta meta;
    ps_checkpoint_clocks clocks;
    char path[4096];
    const char *why = s->ckpt_why;
    uint64_t t0 = uv_hrtime();
    int rc;

    ps__checkpoint_identity(s, &meta, &clocks);
    meta.clock = s->ckpt_due_clock;
    rc = ps_checkpoint_write(s->cfg.checkpoint_dir, s->cfg.keep_checkpoints, &meta, s->shard,
                             &clocks, path, sizeof(path));
    if (rc < 0) {
        ps_error("checkpoint at clock %" PRIu64 " into %s failed: %s; the previous ones are kept",
                 meta.clock, s->cfg.checkpoint_dir, ps_strerror(rc));
        return rc;
    }
    s->ckpt_clock = meta.clock;
    ps_info("checkpoint (%s) at clock %" PRIu64 ": %s in %.1f ms", why, meta.clock, path,
            (double)(uv_hrtime() - t0) / 1e6);
    return 0;
}

/* Takes the clocks of everything submitted so far; the weights follow once
 * those updates have run. */
static void ps__checkpoint_due(ps_kv_server *s, const char *why)
{
    snprintf(s->ckpt_why, sizeof(s->ckpt_why), "%s", why);
    s->ckpt_due = 1;
    s->ckpt_seq = ps_apply_queue_next_seq(s->updates);
    s->ckpt_due_clock = ps__progress_clock(s);
    for (int i = 0; i < s->n_local; i++) {
        s->ckpt_clocks[i] = s->sync[i].clock;
        s->ckpt_newest[i] = s->sync[i].newest;
    }
}

/* Writes the due checkpoint once the updates before it are applied, then
 * the one asked for meanwhile, if any. */
static int ps__try_checkpoint(ps_kv_server *s)
{
    int rc;

    if (!s->ckpt_due || !ps_apply_queue_settled_before(s->updates, s->ckpt_seq))
        return 0;
    s->ckpt_due = 0;
    rc = ps__write_checkpoint(s);
    if (s->ckpt_again) {
        s->ckpt_again = 0;
        ps__checkpoint_due(s, s->ckpt_again_why);
        return ps__try_checkpoint(s);
    }
    return rc;
}

int ps_kv_server_checkpoint(ps_kv_server *s, const char *why)
{
    if (s->cfg.checkpoint_dir == NULL)
        return 0;
    if (s->ckpt_due) {
        s->ckpt_again = 1;
        snprintf(s->ckpt_again_why, sizeof(s->ckpt_again_why), "%s", why);
        return 0;
    }
    ps__checkpoint_due(s, why);
    return ps__try_checkpoint(s);
}

/* Called after every push, before waiting pulls are answered: in sync mode a
 * checkpoint of a step is on disk before any worker sees that step's weights,
 * so a restored server is never behind what a worker has already seen (pulls
 * numbered after a due checkpoint wait for it). */
static void ps__maybe_checkpoint(ps_kv_server *s)
{
    uint64_t clock;

    if (s->cfg.checkpoint_dir == NULL || s->cfg.checkpoint_every == 0 || s->ckpt_due)
        return;
    clock = ps__progress_clock(s);
    if (clock >= s->ckpt_clock + s->cfg.checkpoint_every)
        ps_kv_server_checkpoint(s, "periodic");
}

static void ps__on_checkpoint_timer(uv_timer_t *t)
{
    ps_kv_server *s = t->data;

    if (ps__progress_clock(s) != s->ckpt_clock && !s->ckpt_due)
        ps_kv_server_checkpoint(s, "timer");
}

int ps_kv_server_restore(ps_kv_server *s, uint64_t max_clock, char *err, size_t err_len)
{
    ps_checkpoint_meta meta;
    ps_checkpoint_clocks clocks;
    char path[4096];
    int rc;

    if (s->cfg.checkpoint_dir == NULL) {
        snprintf(err, err_len, "no checkpoint directory given");
        return -EINVAL;
    }
    ps__checkpoint_identity(s, &meta, &clocks);
    err[0] = '\0';
    rc = ps_checkpoint_restore(s->cfg.checkpoint_dir, max_clock, &meta, s->shard, &clocks, path,
                               sizeof(path), err, err_len);
    if (rc == 0) {
        for (int i = 0; i < s->n_local; i++) {
            s->sync[i].clock = clocks.clock[i];
            s->sync[i].newest = clocks.newest[i];
        }
        s->total_steps = meta.total_steps;
        s->resume_clock = meta.clock;
        s->ckpt_clock = meta.clock;
        if (*err)
            ps_warn("skipped unusable checkpoints: %s", err);
        ps_info("restored clock %" PRIu64 " from %s", meta.clock, path);
    }
    return rc;
}

/* Answers every pull the clock rule allows whose updates have been applied.
 * A pull the rule allows is numbered at that moment; updates numbered later
 * are held back until it is answered, so it cannot be starved by newer
 * pushes and never sees a chunk half updated. A due checkpoint holds back
 * the same way, and pulls numbered after it wait until it is written. */
static void ps__release_pulls(ps_kv_server *s)
{
    ps__pull **pp = &s->pulls;
    uint64_t hold = UINT64_MAX;

    ps__try_checkpoint(s);
    if (s->ckpt_due)
        hold = s->ckpt_seq;
    while (*pp) {
        ps__pull *q = *pp;
        if (!ps__pull_ready(s, q->peer, q->clock)) {
            pp = &q->next;
            continue;
        }
        if (q->seq == 0)
            q->seq = ps_apply_queue_next_seq(s->updates);
        if ((s->ckpt_due && q->seq > s->ckpt_seq) ||
            !ps_apply_queue_settled_before(s->updates, q->seq)) {
            hold = q->seq < hold ? q->seq : hold;
            pp = &q->next;
            continue;
        }
        *pp = q->next;
        q->peer->pending--;
        ps__answer_pull(s, q->peer, q->request_id, q->clock, q->locals, q->n_keys);
        free(q->locals);
        free(q);
    }
    ps_apply_queue_hold_from(s->updates, hold);
}

static void ps__on_updates_settled(void *arg)
{
    ps__release_pulls(arg);
}

static void ps__update_run(ps_apply_job *j)
{
    ps__update *u = (ps__update *)j;

    switch (u->kind) {
    case PS__UPDATE_ACCUMULATE:
        ps_shard_accumulate(u->shard, u->local, u->grad);
        break;
    case PS__UPDATE_APPLY_SUM:
        ps_shard_apply_accumulated(u->shard, u->local, u->count, u->lr);
        break;
    case PS__UPDATE_APPLY_GRAD:
        ps_shard_apply_grad(u->shard, u->local, u->grad, u->lr);
        break;
    }
}

static void ps__update_done(ps_apply_job *j)
{
    ps__update *u = (ps__update *)j;

    ps__push_buf_release(u->buf);
    free(u);
}

/* Hands one chunk's update to the thread pool; buf (may be NULL) stays
 * alive until it has run. Returns 0 or -ENOMEM. */
static int ps__submit_update(ps_kv_server *s, ps__update_kind kind, int local, const float *grad,
                             ps__push_buf *buf, int count, float lr)
{
    ps__update *u = calloc(1, sizeof(*u));

    if (u == NULL)
        return -ENOMEM;
    u->job.run = ps__update_run;
    u->job.done = ps__update_done;
    u->shard = s->shard;
    u->kind = kind;
    u->local = local;
    u->grad = grad;
    u->buf = buf;
    u->count = count;
    u->lr = lr;
    /* Taken before submitting: a job run at once releases it on return. */
    if (buf)
        buf->refs++;
    if (ps_apply_queue_submit(s->updates, local, &u->job,
                              !s->cfg.pool_updates ||
                                  ps_shard_chunk(s->shard, local)->numel * sizeof(float) <
                                      PS__POOL_UPDATE_BYTES) < 0) {
        if (buf)
            buf->refs--;
        free(u);
        return -ENOMEM;
    }
    return 0;
}

/* Applies the averaged gradient of a chunk once no live worker still owes a
 * push for its current step. */
static float ps__lr(const ps_kv_server *s, uint64_t step, uint64_t staleness)
{
    ps_lr_schedule sched = s->cfg.lr;
    double lr;

    sched.total_steps = s->total_steps;
    lr = ps_lr_schedule_at(&sched, step);
    if (s->cfg.staleness_damping)
        lr /= (double)(1 + staleness);
    return (float)lr;
}

static void ps__record_staleness(ps_kv_server *s, uint64_t staleness)
{
    s->stale_hist[staleness < PS__STALE_BINS ? staleness : PS__STALE_BINS - 1]++;
    s->stale_sum += staleness;
    if (staleness > s->stale_max)
        s->stale_max = staleness;
}

/* Pushes that complete a step: the quorum, or every live worker if fewer are
 * live. */
static int ps__pushes_needed(const ps_kv_server *s)
{
    int q = s->cfg.quorum > 0 ? s->cfg.quorum : s->cfg.world;
    return q < s->live ? q : s->live;
}

/* A step completes when enough live workers have pushed it. Pushes rejected
 * for non-finite values count toward that but add nothing; a step with no
 * usable gradient at all is passed over rather than left to block. */
static void ps__maybe_apply(ps_kv_server *s, int local)
{
    ps__chunk_sync *c = &s->sync[local];

    if (c->live_pushes == 0 && c->pushes == 0)
        return;
    if (c->live_pushes < ps__pushes_needed(s))
        return;
    if (c->pushes > 0 && ps__submit_update(s, PS__UPDATE_APPLY_SUM, local, NULL, NULL, c->pushes,
                                           ps__lr(s, c->clock, 0)) < 0)
        ps_error("out of memory applying step %" PRIu64 " of chunk %d; its gradients are lost",
                 c->clock, local);
    c->newest = c->clock + 1;
    c->clock++;
    c->pushes = 0;
    c->live_pushes = 0;
    s->n_applied++;
}

/* Resolves and checks a request's keys: each must exist on this server and
 * appear once. Fills locals; returns the payload bytes they span, or -1 after
 * failing the peer. */
static long long ps__resolve_keys(ps_kv_server *s, ps__peer *p, const Shardps__Header *h,
                                  int *locals)
{
    long long bytes = 0;

    if (h->n_keys == 0 || h->n_keys > (size_t)s->n_local) {
        ps__peer_fail(p, -PS_EPROTO, "request names %zu keys; this server holds %d", h->n_keys,
                      s->n_local);
        return -1;
    }
    if (++s->seen_stamp == 0) {
        memset(s->seen, 0, (size_t)s->n_local * sizeof(*s->seen));
        s->seen_stamp = 1;
    }
    for (size_t i = 0; i < h->n_keys; i++) {
        int local = ps_shard_find(s->shard, h->keys[i]);
        if (local < 0) {
            ps__peer_fail(p, -PS_EPROTO,
                          "key %" PRIu64 ":%" PRIu64 " is not held by server %d (wrong partition?)",
                          h->keys[i] >> 32, h->keys[i] & 0xffffffffu, s->cfg.server_index);
            return -1;
        }
        if (s->seen[local] == s->seen_stamp) {
            ps__peer_fail(p, -PS_EPROTO, "key %" PRIu64 ":%" PRIu64 " named twice in one request",
                          h->keys[i] >> 32, h->keys[i] & 0xffffffffu);
            return -1;
        }
        s->seen[local] = s->seen_stamp;
        locals[i] = local;
        bytes += (long long)(ps_shard_chunk(s->shard, local)->numel * sizeof(float));
    }
    return bytes;
}

static void ps__handle_pull(ps_kv_server *s, ps__peer *p, const ps_frame *f)
{
    const Shardps__Header *h = f->hdr;
    ps__pull *q = NULL;
    int *locals = malloc((h->n_keys ? h->n_keys : 1) * sizeof(int));

    if (locals == NULL)
        goto oom;
    if (f->payload_len != 0) {
        ps__peer_fail(p, -PS_EPROTO, "pull carries a %zu-byte payload", f->payload_len);
        goto out;
    }
    if (ps__resolve_keys(s, p, h, locals) < 0)
        goto out;
    /* A worker's clock only moves forward. It pulls the step after its last
     * push, or a later one when it joins mid-run or (sync) catches up to the
     * steps already applied. Going back would let it slip past the ssp gate. */
    if (h->clock < p->clock && s->cfg.staleness != 0) {
        ps__peer_fail(p, -PS_EPROTO, "pull for clock %" PRIu64 " from a worker at clock %" PRIu64,
                      h->clock, p->clock);
        goto out;
    }
    if (h->clock > p->clock) {
        if (p->keys_pushed != 0) {
            ps__peer_fail(p, -PS_EPROTO,
                          "pull for clock %" PRIu64 " in the middle of pushing step %" PRIu64,
                          h->clock, p->clock);
            goto out;
        }
        p->clock = h->clock;
    }
    if (p->pending >= PS__MAX_PENDING_PER_PEER) {
        ps__peer_fail(p, -PS_EPROTO, "more than %d pulls waiting", PS__MAX_PENDING_PER_PEER);
        goto out;
    }
    q = calloc(1, sizeof(*q));
    if (q == NULL)
        goto oom;
    q->peer = p;
    q->request_id = h->request_id;
    q->clock = h->clock;
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

static void ps__ack_push(ps__peer *p, uint64_t request_id, uint64_t clock, int dropped,
                         uint64_t staleness)
{
    Shardps__Header h = SHARDPS__HEADER__INIT;
    int rc;

    h.type = SHARDPS__MSG_TYPE__PUSH_REPLY;
    h.request_id = request_id;
    h.clock = clock;
    h.status = dropped;
    h.staleness = staleness > UINT32_MAX ? UINT32_MAX : (uint32_t)staleness;
    rc = ps_conn_send(p->conn, &h, NULL, 0, NULL, NULL);
    if (rc < 0 && rc != -PS_ECLOSED)
        ps_conn_close(p->conn, rc);
}

/* Sync: adds the gradient of one chunk to the step it was computed for, or
 * drops it when that step was already applied without it. Returns 1 when
 * dropped, 0 when accumulated, -1 after failing the peer. */
static int ps__push_sync(ps_kv_server *s, ps__peer *p, int local, uint64_t key, uint64_t clock,
                         const float *g, ps__push_buf *buf, int usable)
{
    ps__chunk_sync *c = &s->sync[local];

    if (clock < c->clock) {
        s->n_dropped++;
        return 1;
    }
    if (clock > c->clock) {
        ps__peer_fail(p, -PS_EPROTO,
                      "push for step %" PRIu64 " of key %" PRIu64 ":%" PRIu64
                      " before step %" PRIu64 " was applied",
                      clock, key >> 32, key & 0xffffffffu, c->clock);
        return -1;
    }
    if (usable) {
        if (ps__submit_update(s, PS__UPDATE_ACCUMULATE, local, g, buf, 0, 0.0f) < 0) {
            ps_conn_close(p->conn, -ENOMEM);
            return -1;
        }
        ps__record_staleness(s, 0);
        c->pushes++;
    }
    if (clock + 1 > p->fed)
        p->fed = clock + 1;
    c->live_pushes++;
    ps__maybe_apply(s, local);
    return 0;
}

/* Async and ssp: applies the gradient now; its staleness is how many newer
 * steps this chunk has already taken in. */
static uint64_t ps__push_now(ps_kv_server *s, int local, uint64_t clock, const float *g,
                             ps__push_buf *buf)
{
    ps__chunk_sync *c = &s->sync[local];
    uint64_t staleness = c->newest > clock + 1 ? c->newest - (clock + 1) : 0;

    if (ps__submit_update(s, PS__UPDATE_APPLY_GRAD, local, g, buf, 0, ps__lr(s, clock, staleness)) <
        0) {
        ps_error("out of memory applying a push to chunk %d; the gradient is lost", local);
        return staleness;
    }
    ps__record_staleness(s, staleness);
    if (clock + 1 > c->newest)
        c->newest = clock + 1;
    s->n_applied++;
    return staleness;
}

/* Checks a push's dtype and that its payload holds exactly the values its
 * keys need (f32_bytes in float32): float32, or float16 from a worker's
 * --compress fp16 at 2 bytes a value. Returns 0, or -1 after failing the
 * peer. */
static int ps__check_push_values(ps__peer *p, const ps_frame *f, size_t f32_bytes)
{
    int half = f->hdr->dtype == SHARDPS__DTYPE__DTYPE_F16;
    size_t numel = f32_bytes / sizeof(float), want = half ? numel * sizeof(uint16_t) : f32_bytes;

    if (!half && f->hdr->dtype != SHARDPS__DTYPE__DTYPE_F32) {
        ps__peer_fail(p, -PS_EPROTO,
                      "push with dtype %d; only float32 (1) and float16 (2) are supported",
                      f->hdr->dtype);
        return -1;
    }
    if (f->payload_len != want) {
        ps__peer_fail(p, -PS_EPROTO,
                      "%s push payload is %zu bytes, its keys need %zu (%zu values of %zu bytes)",
                      half ? "float16" : "float32", f->payload_len, want, numel,
                      half ? sizeof(uint16_t) : sizeof(float));
        return -1;
    }
    return 0;
}

/* A push payload is read straight into a pooled buffer rather than the
 * connection's own, so the updates can keep it after the frame is handled
 * while the connection reads the next one. */
static int ps__place_push(ps_conn *c, const Shardps__Header *h, const ps_frame_piece **pieces)
{
    ps__peer *p = ps_conn_data(c);

    if (h->type != SHARDPS__MSG_TYPE__PUSH || p->state != PS__PEER_WORKER || p->failed)
        return 0;
    /* One placed for a frame that was then ignored (the peer failed). */
    ps_buf_pool_put(p->push_piece.base);
    p->push_piece.base = ps_buf_pool_get(p->srv->bufs, (size_t)h->payload_bytes);
    if (p->push_piece.base == NULL)
        return 0;
    p->push_piece.len = (size_t)h->payload_bytes;
    *pieces = &p->push_piece;
    return 1;
}

/* The push's values as float32 in a buffer the updates can share: the one
 * the payload was placed in, a pooled copy if it was not placed, or (float16)
 * a pooled buffer it is widened into. The caller holds one reference. NULL when out of memory. */
static ps__push_buf *ps__take_push_payload(ps_kv_server *s, ps__peer *p, const ps_frame *f,
                                           size_t f32_bytes)
{
    ps__push_buf *b = calloc(1, sizeof(*b));
    const uint8_t *src = f->payload ? f->payload : p->push_piece.base;

    if (b == NULL)
        return NULL;
    if (f->hdr->dtype == SHARDPS__DTYPE__DTYPE_F32 && f->payload == NULL) {
        b->data = p->push_piece.base;
        p->push_piece.base = NULL;
    } else {
        b->data = ps_buf_pool_get(s->bufs, f32_bytes);
        if (b->data == NULL) {
            free(b);
            return NULL;
        }
        if (f->hdr->dtype == SHARDPS__DTYPE__DTYPE_F16)
            ps_f16_to_f32((float *)b->data, (const uint16_t *)src, f32_bytes / sizeof(float));
        else
            memcpy(b->data, src, f32_bytes);
    }
    b->refs = 1;
    return b;
}

static void ps__handle_push(ps_kv_server *s, ps__peer *p, const ps_frame *f)
{
    const Shardps__Header *h = f->hdr;
    int *locals = malloc((h->n_keys ? h->n_keys : 1) * sizeof(int));
    ps__push_buf *buf = NULL;
    const uint8_t *payload;
    long long bytes;
    uint64_t max_stale = 0;
    int dropped = 0, usable;
    int sync = s->cfg.staleness == 0;

    if (locals == NULL) {
        ps_conn_close(p->conn, -ENOMEM);
        return;
    }
    bytes = ps__resolve_keys(s, p, h, locals);
    if (bytes < 0)
        goto out;
    if (ps__check_push_values(p, f, (size_t)bytes) < 0)
        goto out;
    if (!sync && h->clock != p->clock) {
        ps__peer_fail(p, -PS_EPROTO, "push for clock %" PRIu64 " from a worker at clock %" PRIu64,
                      h->clock, p->clock);
        goto out;
    }
    buf = ps__take_push_payload(s, p, f, (size_t)bytes);
    if (buf == NULL) {
        ps_conn_close(p->conn, -ENOMEM);
        goto out;
    }
    payload = buf->data;
    /* The decoder scanned the payload as it arrived (see ps__on_connection);
     * float16 Inf and NaN widen to float32 Inf and NaN, so it is the same
     * answer for both dtypes. */
    usable = !s->cfg.reject_nonfinite || !f->nonfinite;
    if (!usable) {
        s->n_nonfinite++;
        if (s->n_nonfinite == 1 || s->n_nonfinite % 100 == 0)
            ps_warn("rejected a push from %s at clock %" PRIu64
                    ": gradient has NaN or Inf values (%" PRIu64 " such pushes so far); the model "
                    "is unchanged",
                    p->name, h->clock, s->n_nonfinite);
    }
    for (size_t i = 0; i < h->n_keys; i++) {
        int local = locals[i];
        const float *g = (const float *)payload;
        int rc;

        payload += ps_shard_chunk(s->shard, local)->numel * sizeof(float);
        if (p->pushed[local] > h->clock) {
            /* A repeat (typically resent after a reconnect): this rank's
             * gradient for this step is already in. */
            dropped++;
            s->n_dropped++;
            continue;
        }
        p->pushed[local] = h->clock + 1;
        if (!sync) {
            uint64_t st = usable ? ps__push_now(s, local, h->clock, g, buf) : 0;
            if (st > max_stale)
                max_stale = st;
            dropped += !usable;
            continue;
        }
        rc = ps__push_sync(s, p, local, h->keys[i], h->clock, g, buf, usable);
        if (rc < 0)
            goto out;
        dropped += rc || !usable;
    }
    s->n_pushes++;
    s->bytes_in += f->payload_len;
    p->n_pushes++;
    p->bytes_in += f->payload_len;
    p->keys_pushed += (int)h->n_keys;
    if (p->keys_pushed >= s->n_local) {
        p->keys_pushed = 0;
        p->clock = h->clock + 1;
    }
    ps__ack_push(p, h->request_id, h->clock, dropped, max_stale);
    ps__maybe_checkpoint(s);
    ps__release_pulls(s);
out:
    ps__push_buf_release(buf);
    /* Placed but refused before it was taken. */
    ps_buf_pool_put(p->push_piece.base);
    p->push_piece.base = NULL;
    free(locals);
}

static const char *ps__model_text(const ps_model_spec *m, char *buf, size_t len)
{
    size_t off = 0;

    for (int i = 0; i <= m->n_layers && off < len; i++)
        off += (size_t)snprintf(buf + off, len - off, "%s%d", i ? "-" : "", m->sizes[i]);
    return buf;
}

/* The job settings a worker sent (older workers send none) against ours. */
static int ps__check_job_settings(ps_kv_server *s, ps__peer *p, const Shardps__Hello *hello)
{
    char diff[1024];
    int n;

    if (s->cfg.job_settings == NULL || hello->job_settings == NULL || !*hello->job_settings)
        return 0;
    n = ps_job_settings_diff(hello->job_settings, s->cfg.job_settings, "the worker", "this server",
                             diff, sizeof(diff));
    if (n == 0)
        return 0;
    if (n < 0)
        ps__peer_fail(p, -PS_EPROTO, "the HELLO's job settings are malformed (or over %d bytes)",
                      PS_JOB_SETTINGS_MAX - 1);
    else
        ps__peer_fail(p, -PS_EMISMATCH,
                      "job settings differ (%d): %s; start every process "
                      "of the job with the same options",
                      n, diff);
    return -1;
}

static int ps__check_hello(ps_kv_server *s, ps__peer *p, const Shardps__Hello *hello)
{
    char model[128];

    if (hello == NULL || hello->role != SHARDPS__ROLE__ROLE_WORKER) {
        ps__peer_fail(p, -PS_EPROTO, "first message must be a worker HELLO");
        return -1;
    }
    if (ps__check_job_settings(s, p, hello) < 0)
        return -1;
    if (hello->model_fingerprint != ps_model_spec_fingerprint(&s->cfg.spec)) {
        ps__peer_fail(p, -PS_EMISMATCH,
                      "model mismatch: this server trains an MLP %s with seed %" PRIu64
                      "; start the worker with the same --hidden and --seed",
                      ps__model_text(&s->cfg.spec, model, sizeof(model)), s->cfg.spec.seed);
        return -1;
    }
    if (hello->num_servers != (uint32_t)s->cfg.num_servers ||
        hello->chunk_bytes != s->cfg.chunk_bytes) {
        ps__peer_fail(p, -PS_EMISMATCH,
                      "partition mismatch: worker has %u servers and %" PRIu64
                      "-byte chunks, this server %d and %zu; use the same server list and "
                      "--chunk-bytes everywhere",
                      hello->num_servers, hello->chunk_bytes, s->cfg.num_servers,
                      s->cfg.chunk_bytes);
        return -1;
    }
    if (hello->server_index != (uint32_t)s->cfg.server_index) {
        ps__peer_fail(p, -PS_EMISMATCH,
                      "the worker lists this address as server %u, but this is server %d; "
                      "fix the order of --servers",
                      hello->server_index, s->cfg.server_index);
        return -1;
    }
    if (hello->world != (uint32_t)s->cfg.world || hello->rank >= hello->world) {
        ps__peer_fail(p, -PS_EMISMATCH,
                      "worker says rank %u of %u, this server expects %d workers (ranks 0..%d)",
                      hello->rank, hello->world, s->cfg.world, s->cfg.world - 1);
        return -1;
    }
    if (s->workers[hello->rank]) {
        /* -EADDRINUSE tells a worker that is reconnecting to try again: its
         * old connection may simply not have been seen closing yet. */
        ps__peer_fail(p, -EADDRINUSE, "rank %u is already connected from %s", hello->rank,
                      ps_conn_peer(s->workers[hello->rank]->conn));
        return -1;
    }
    return 0;
}

/* Admits a worker whose HELLO has passed authentication (if any): model and
 * cluster checks, then WELCOME. */
static void ps__admit(ps_kv_server *s, ps__peer *p, const Shardps__Hello *hello,
                      uint64_t request_id)
{
    Shardps__Header h = SHARDPS__HEADER__INIT;
    Shardps__Welcome w = SHARDPS__WELCOME__INIT;
    uint64_t floor;
    int rc;

    if (ps__check_hello(s, p, hello) < 0)
        return;
    p->rank = hello->rank;
    if (hello->total_steps > s->total_steps)
        s->total_steps = hello->total_steps;
    /* A joining worker starts where the job is: the steps applied (sync), or
     * the clock every live worker has reached; a push of it for a chunk
     * already past that clock is dropped as late. */
    floor = ps__min_live_clock(s);
    if (s->cfg.staleness == 0)
        p->clock = ps__server_clock(s);
    else
        p->clock = floor == UINT64_MAX ? s->resume_clock : floor;
    if (s->rank_pushed[p->rank] == NULL &&
        (s->rank_pushed[p->rank] = calloc((size_t)s->n_local + 1, sizeof(uint64_t))) == NULL) {
        ps_conn_close(p->conn, -ENOMEM);
        return;
    }
    p->pushed = s->rank_pushed[p->rank];
    /* A rank that fed the step under way before it dropped out counts as
     * having pushed it again, now that it is back. */
    for (int i = 0; i < s->n_local; i++)
        if (p->pushed[i] == s->sync[i].clock + 1 && s->sync[i].pushes > 0)
            s->sync[i].live_pushes++;
    p->state = PS__PEER_WORKER;
    ps_conn_set_max_payload(p->conn, s->cfg.max_payload);
    s->workers[p->rank] = p;
    s->live++;
    snprintf(p->name, sizeof(p->name), "worker %u (%s)", p->rank, ps_conn_peer(p->conn));

    h.type = SHARDPS__MSG_TYPE__WELCOME;
    h.request_id = request_id;
    w.clock = p->clock;
    w.mode = (char *)s->cfg.mode;
    w.staleness = s->cfg.staleness;
    w.heartbeat_ms = s->cfg.heartbeat_timeout_ms / 4;
    h.welcome = &w;
    rc = ps_conn_send(p->conn, &h, NULL, 0, NULL, NULL);
    if (rc < 0) {
        ps_conn_close(p->conn, rc);
        return;
    }
    if (!s->started) {
        if (s->has_joined[p->rank]) {
            ps_info("%s joined again; waiting for %d more", p->name, s->cfg.world - s->joined);
            ps__release_pulls(s);
            return;
        }
        s->has_joined[p->rank] = 1;
        s->joined++;
        if (s->joined == s->cfg.world) {
            s->started = 1;
            ps_info("%s joined; all %d workers present, training starts", p->name, s->cfg.world);
        } else {
            ps_info("%s joined; waiting for %d more", p->name, s->cfg.world - s->joined);
        }
    } else {
        ps_info("%s joined at clock %" PRIu64 "; %d live", p->name, p->clock, s->live);
    }
    ps__release_pulls(s);
}

/* First frame: a HELLO. Without authentication it is judged at once; with
 * it, the server proves itself and waits for the worker's proof before
 * looking at anything else the HELLO says. */
static void ps__handle_hello(ps_kv_server *s, ps__peer *p, const ps_frame *f)
{
    const Shardps__Hello *hello = f->hdr->hello;
    Shardps__Header h = SHARDPS__HEADER__INIT;
    uint8_t mac[PS_AUTH_MAC_BYTES];
    int rc;

    if (f->hdr->type != SHARDPS__MSG_TYPE__HELLO || hello == NULL) {
        ps__peer_fail(p, -PS_EPROTO, "expected HELLO, got message type %d", f->hdr->type);
        return;
    }
    if (!s->cfg.auth) {
        ps__admit(s, p, hello, f->hdr->request_id);
        return;
    }
    if (hello->client_nonce.len != PS_AUTH_NONCE_BYTES) {
        ps__peer_fail(p, -PS_EREJECTED,
                      "this server requires authentication; start the worker with "
                      "--auth-token-file");
        return;
    }
    p->hello = *hello;
    p->hello.client_nonce.len = 0;
    p->hello.client_nonce.data = NULL;
    p->hello.job_settings = NULL;
    if (hello->job_settings && (p->hello_settings = strdup(hello->job_settings)) == NULL) {
        ps__peer_fail(p, -ENOMEM, "out of memory");
        return;
    }
    p->hello.job_settings = p->hello_settings;
    p->hello_id = f->hdr->request_id;
    memcpy(p->client_nonce, hello->client_nonce.data, PS_AUTH_NONCE_BYTES);
    ps_auth_nonce(p->server_nonce);
    ps_auth_mac(s->cfg.auth_key, "server", p->client_nonce, p->server_nonce, mac);
    h.type = SHARDPS__MSG_TYPE__AUTH_CHALLENGE;
    h.request_id = f->hdr->request_id;
    h.auth_nonce.len = PS_AUTH_NONCE_BYTES;
    h.auth_nonce.data = p->server_nonce;
    h.auth_mac.len = PS_AUTH_MAC_BYTES;
    h.auth_mac.data = mac;
    p->state = PS__PEER_AUTH;
    rc = ps_conn_send(p->conn, &h, NULL, 0, NULL, NULL);
    if (rc < 0)
        ps_conn_close(p->conn, rc);
}

static void ps__handle_auth(ps_kv_server *s, ps__peer *p, const ps_frame *f)
{
    const Shardps__Header *h = f->hdr;

    if (h->type != SHARDPS__MSG_TYPE__AUTH_RESPONSE ||
        !ps_auth_check(s->cfg.auth_key, "worker", p->server_nonce, p->client_nonce,
                       h->auth_mac.data, h->auth_mac.len)) {
        /* Deliberately vague to the peer; the log says who failed. */
        ps_warn("authentication failed for %s", p->name);
        ps__peer_fail(p, -PS_EREJECTED, "authentication failed");
        return;
    }
    p->state = PS__PEER_HANDSHAKE;
    ps__admit(s, p, &p->hello, p->hello_id);
}

/* Takes a worker out of every barrier: its pending pulls are dropped, its
 * pushes for unapplied steps stay in the average, and chunks that were only
 * waiting for it are applied now. */
static void ps__worker_leave(ps_kv_server *s, ps__peer *p, const char *why)
{
    ps__pull **pp = &s->pulls;

    if (p->state != PS__PEER_WORKER)
        return;
    p->state = PS__PEER_GONE;
    s->workers[p->rank] = NULL;
    s->live--;
    if (p->clock > s->resume_clock)
        s->resume_clock = p->clock;
    while (*pp) {
        ps__pull *q = *pp;
        if (q->peer != p) {
            pp = &q->next;
            continue;
        }
        *pp = q->next;
        free(q->locals);
        free(q);
    }
    p->pending = 0;
    for (int i = 0; i < s->n_local; i++)
        if (p->pushed[i] == s->sync[i].clock + 1 && s->sync[i].pushes > 0)
            s->sync[i].live_pushes--;
    if (s->cfg.staleness == 0)
        for (int i = 0; i < s->n_local; i++)
            ps__maybe_apply(s, i);
    if (s->live > 0)
        ps_info("%s left at clock %" PRIu64 " (%s); %d worker%s still live", p->name, p->clock, why,
                s->live, s->live == 1 ? "" : "s");
    else
        ps_info("%s left at clock %" PRIu64 " (%s); no workers live", p->name, p->clock, why);
    ps__release_pulls(s);
    if (!s->started || s->live > 0)
        return;
    for (int r = 0; r < s->cfg.world; r++) {
        if (!s->finished[r]) {
            ps_info("worker %d left without finishing; waiting for it to rejoin", r);
            return;
        }
    }
    if (s->done)
        s->done(s, s->done_arg);
}

static void ps__on_frame(ps_conn *c, const ps_frame *f)
{
    ps__peer *p = ps_conn_data(c);
    ps_kv_server *s = p->srv;

    if (p->failed || p->state == PS__PEER_GONE)
        return;
    p->last_seen = uv_now(s->loop);
    if (p->state == PS__PEER_HANDSHAKE) {
        ps__handle_hello(s, p, f);
        return;
    }
    if (p->state == PS__PEER_AUTH) {
        ps__handle_auth(s, p, f);
        return;
    }
    switch (f->hdr->type) {
    case SHARDPS__MSG_TYPE__PULL:
        ps__handle_pull(s, p, f);
        break;
    case SHARDPS__MSG_TYPE__PUSH:
        ps__handle_push(s, p, f);
        break;
    case SHARDPS__MSG_TYPE__BYE:
        s->finished[p->rank] = 1;
        ps__worker_leave(s, p, "finished");
        break;
    case SHARDPS__MSG_TYPE__HEARTBEAT:
        break;
    default:
        ps__peer_fail(p, -PS_EPROTO, "unexpected message type %d from a worker", f->hdr->type);
        break;
    }
}

static void ps__on_conn_close(ps_conn *c, int err)
{
    ps__peer *p = ps_conn_data(c);
    ps_kv_server *s = p->srv;

    if (err < 0 && err != -PS_ECLOSED && !p->failed) {
        const char *detail = ps_conn_error(c);
        ps_warn("closing %s: %s%s%s", p->name, ps_strerror(err), *detail ? ": " : "", detail);
        s->n_refused++;
    }
    ps__worker_leave(s, p, err == -PS_ECLOSED || err == 0 ? "disconnected" : ps_strerror(err));
    if (p->prev)
        p->prev->next = p->next;
    else
        s->peers = p->next;
    if (p->next)
        p->next->prev = p->prev;
    ps_buf_pool_put(p->push_piece.base);
    free(p->hello_settings);
    free(p);
}

/* A worker that has sent nothing for the heartbeat timeout (stopped,
 * partitioned, or hung) leaves the barrier; its connection is closed so that,
 * if it wakes up, it reconnects and rejoins at the current clock. */
static void ps__on_heartbeat_check(uv_timer_t *t)
{
    ps_kv_server *s = t->data;
    uint64_t now = uv_now(s->loop);

    /* A connection that never completes its handshake holds a descriptor
     * and a slot for nothing. */
    for (ps__peer *p = s->peers; p; p = p->next) {
        if ((p->state == PS__PEER_HANDSHAKE || p->state == PS__PEER_AUTH) && !p->failed &&
            now - p->last_seen > s->cfg.heartbeat_timeout_ms) {
            ps_warn("closing %s: no handshake within %.1f s", p->name,
                    s->cfg.heartbeat_timeout_ms / 1000.0);
            s->n_refused++;
            p->failed = 1;
            ps_conn_close(p->conn, -PS_ETIMEOUT);
        }
    }
    for (int r = 0; r < s->cfg.world; r++) {
        ps__peer *p = s->workers[r];
        if (p == NULL || now - p->last_seen <= s->cfg.heartbeat_timeout_ms)
            continue;
        ps_warn("%s silent for %.1f s (heartbeat timeout %.1f s)", p->name,
                (double)(now - p->last_seen) / 1000, s->cfg.heartbeat_timeout_ms / 1000.0);
        ps__worker_leave(s, p, "heartbeat timeout");
        ps_conn_close(p->conn, -PS_ETIMEOUT);
    }
}

static void ps__on_connection(uv_stream_t *listener, int status)
{
    ps_kv_server *s = listener->data;
    /* No payload until the peer is admitted: a HELLO carries none. */
    ps_conn_config cc = {.on_frame = ps__on_frame,
                         .on_close = ps__on_conn_close,
                         .place = ps__place_push,
                         .max_write_queue = s->max_write_queue,
                         .scan_nonfinite = s->cfg.reject_nonfinite};
    ps__peer *p;
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
    p->srv = s;
    if (ps_conn_accept(listener, &cc, p, &c) < 0) {
        free(p);
        return;
    }
    p->conn = c;
    p->last_seen = uv_now(s->loop);
    snprintf(p->name, sizeof(p->name), "peer %s", ps_conn_peer(c));
    p->next = s->peers;
    if (s->peers)
        s->peers->prev = p;
    s->peers = p;
}

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
    s->cfg = *cfg;
    s->done = done;
    s->done_arg = arg;
    s->cfg.lr.base_lr = cfg->opt.lr;
    s->total_steps = cfg->lr.total_steps;
    rc = ps_partition_init(&s->part, &cfg->spec, cfg->num_servers, cfg->chunk_bytes);
    if (rc < 0)
        goto fail;
    rc = ps_shard_init(&s->shard, s->part, cfg->server_index, &cfg->spec, &cfg->opt,
                       cfg->staleness == 0);
    if (rc < 0)
        goto fail;
    rc = -ENOMEM;
    s->n_local = ps_shard_chunk_count(s->shard);
    s->max_write_queue = 2 * ps_partition_server_numel(s->part, cfg->server_index) * sizeof(float) +
                         PS__WRITE_QUEUE_HEADROOM;
    /* In sync mode every worker's push of a step and every worker's reply
     * can be in flight at once: keep that many shard-sized buffers warm. */
    if (ps_buf_pool_init(&s->bufs, 2 * (size_t)cfg->world *
                                       ps_partition_server_numel(s->part, cfg->server_index) *
                                       sizeof(float)) < 0 ||
        ps_apply_queue_init(&s->updates, loop, s->n_local, ps__on_updates_settled, s) < 0)
        goto fail;
    s->sync = calloc((size_t)s->n_local + 1, sizeof(*s->sync));
    s->seen = calloc((size_t)s->n_local + 1, sizeof(*s->seen));
    s->workers = calloc((size_t)cfg->world, sizeof(*s->workers));
    s->rank_pushed = calloc((size_t)cfg->world, sizeof(*s->rank_pushed));
    s->finished = calloc((size_t)cfg->world, 1);
    s->has_joined = calloc((size_t)cfg->world, 1);
    s->ckpt_clocks = calloc((size_t)s->n_local + 1, sizeof(uint64_t));
    s->ckpt_newest = calloc((size_t)s->n_local + 1, sizeof(uint64_t));
    if (s->sync == NULL || s->seen == NULL || s->workers == NULL || s->rank_pushed == NULL ||
        s->finished == NULL || s->has_joined == NULL || s->ckpt_clocks == NULL ||
        s->ckpt_newest == NULL)
        goto fail;
    *out = s;
    return 0;
fail:
    ps_kv_server_close(s);
    return rc;
}

int ps_kv_server_start(ps_kv_server *s, const struct sockaddr *addr, int *bound_port)
{
    struct sockaddr_storage ss;
    int len = sizeof(ss);
    int rc;

    uv_tcp_init(s->loop, &s->listener);
    s->listener.data = s;
    s->listening = 1;
    rc = uv_tcp_bind(&s->listener, addr, 0);
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&s->listener, 128, ps__on_connection);
    if (rc == 0)
        rc = uv_tcp_getsockname(&s->listener, (struct sockaddr *)&ss, &len);
    if (rc < 0)
        return rc;
    if (s->cfg.heartbeat_timeout_ms > 0) {
        uint64_t every = s->cfg.heartbeat_timeout_ms / 4 ? s->cfg.heartbeat_timeout_ms / 4 : 1;
        uv_timer_init(s->loop, &s->heartbeat);
        s->heartbeat.data = s;
        s->heartbeat_on = 1;
        uv_timer_start(&s->heartbeat, ps__on_heartbeat_check, every, every);
    }
    if (s->cfg.checkpoint_dir && s->cfg.checkpoint_seconds > 0) {
        uint64_t every = (uint64_t)(s->cfg.checkpoint_seconds * 1000);
        uv_timer_init(s->loop, &s->ckpt_timer);
        s->ckpt_timer.data = s;
        s->ckpt_timer_on = 1;
        uv_timer_start(&s->ckpt_timer, ps__on_checkpoint_timer, every, every);
    }
    *bound_port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                 : ((struct sockaddr_in *)&ss)->sin_port);
    ps_info("server %d of %d holds %d chunks (%.1f MiB with optimizer state), mode %s",
            s->cfg.server_index, s->cfg.num_servers, s->n_local,
            (double)ps_shard_memory_bytes(s->shard) / (1 << 20), s->cfg.mode);
    return 0;
}

void ps_kv_server_stop(ps_kv_server *s)
{
    if (s->stopping)
        return;
    s->stopping = 1;
    if (s->listening && !uv_is_closing((uv_handle_t *)&s->listener))
        uv_close((uv_handle_t *)&s->listener, NULL);
    if (s->heartbeat_on)
        uv_close((uv_handle_t *)&s->heartbeat, NULL);
    if (s->ckpt_timer_on)
        uv_close((uv_handle_t *)&s->ckpt_timer, NULL);
    for (ps__peer *p = s->peers; p; p = p->next)
        ps_conn_close(p->conn, 0);
}

void ps_kv_server_close(ps_kv_server *s)
{
    if (s == NULL)
        return;
    while (s->pulls) {
        ps__pull *q = s->pulls;
        s->pulls = q->next;
        free(q->locals);
        free(q);
    }
    ps_apply_queue_close(s->updates);
    ps_buf_pool_close(s->bufs);
    free(s->ckpt_clocks);
    free(s->ckpt_newest);
    ps_shard_free(s->shard);
    ps_partition_free(s->part);
    free(s->sync);
    free(s->seen);
    for (int r = 0; s->rank_pushed && r < s->cfg.world; r++)
        free(s->rank_pushed[r]);
    free(s->rank_pushed);
    free(s->finished);
    free(s->has_joined);
    free(s->workers);
    free(s);
}

void ps_kv_server_stats_get(const ps_kv_server *s, ps_kv_server_stats *out)
{
    uint64_t n = 0, seen = 0;

    memset(out, 0, sizeof(*out));
    out->pushes = s->n_pushes;
    out->pulls = s->n_pulls;
    out->bytes_in = s->bytes_in;
    out->bytes_out = s->bytes_out;
    out->updates = s->n_applied;
    out->dropped = s->n_dropped;
    out->refused = s->n_refused;
    out->nonfinite = s->n_nonfinite;
    out->live_workers = s->live;
    out->clock = ps__progress_clock(s);
    for (int b = 0; b < PS__STALE_BINS; b++)
        n += s->stale_hist[b];
    out->staleness_count = n;
    out->staleness_max = s->stale_max;
    if (n == 0)
        return;
    out->staleness_mean = (double)s->stale_sum / (double)n;
    for (int b = 0; b < PS__STALE_BINS; b++) {
        seen += s->stale_hist[b];
        if ((double)seen >= 0.99 * (double)n) {
            out->staleness_p99 = b;
            break;
        }
    }
}

int ps_kv_server_worker_get(const ps_kv_server *s, int rank, ps_kv_server_worker *out)
{
    const ps__peer *p;

    if (rank < 0 || rank >= s->cfg.world || s->workers[rank] == NULL)
        return -ENOENT;
    p = s->workers[rank];
    memset(out, 0, sizeof(*out));
    out->rank = p->rank;
    out->clock = p->clock;
    out->pushes = p->n_pushes;
    out->pulls = p->n_pulls;
    out->bytes_in = p->bytes_in;
    out->bytes_out = p->bytes_out;
    out->seconds_since_seen = (double)(uv_now(s->loop) - p->last_seen) / 1000;
    snprintf(out->peer, sizeof(out->peer), "%s", ps_conn_peer(p->conn));
    return 0;
}

const ps_kv_server_config *ps_kv_server_config_get(const ps_kv_server *s)
{
    return &s->cfg;
}

void ps_kv_server_log_summary(const ps_kv_server *s)
{
    ps_kv_server_stats st;

    ps_kv_server_stats_get(s, &st);
    ps_info("summary: clock %" PRIu64 ", %" PRIu64 " pushes (%.1f MB in), %" PRIu64
            " pulls (%.1f MB out), %" PRIu64 " chunk updates, %" PRIu64
            " late pushes dropped, %" PRIu64 " non-finite pushes rejected, %" PRIu64
            " connections refused; staleness mean %.2f, p99 %.0f, max %" PRIu64,
            st.clock, st.pushes, (double)st.bytes_in / 1e6, st.pulls, (double)st.bytes_out / 1e6,
            st.updates, st.dropped, st.nonfinite, st.refused, st.staleness_mean, st.staleness_p99,
            st.staleness_max);
}
