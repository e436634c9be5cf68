/* Pushes: where a push's payload lands, its checks, and the optimizer work
 * it becomes: accumulated into the step it was computed for and applied once
 * the step completes (sync), or applied on arrival (async, ssp). The work is
 * submitted to the apply queue; pulls.c decides when replies may see it. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "half.h"
#include "kv_internal.h"
#include "validate.h"
#include "ps_error.h"
#include "ps_log.h"

/* Chunks from this size up are updated on the thread pool; smaller ones on
 * the loop, since handing a job to a pool thread and back costs tens of
 * microseconds (bench-pushpull's 4 KiB step took 81 instead of 31 us with
 * every update on the pool), more than updating 64K floats. */

static void ps__push_buf_release(ps__push_buf *b)
{
    if (b == NULL || --b->refs > 0)
        return;
    ps_buf_pool_put(b->data);
    free(b);
}

static void ps__update_run(ps_apply_job *j)
{
    ps__update *u = (ps__update *)j;

    switch (u->kind) {
    case PS__UPDATE_ACCUMULATE:
        ps_shard_accumulate(u->shard, u->local, u->grad);
        break;
    case PS__UPDATE_APPLY_SUM:
        u->rc = ps_shard_apply_accumulated(u->shard, u->local, u->count, u->lr);
        break;
    case PS__UPDATE_APPLY_GRAD:
        u->rc = ps_shard_apply_grad(u->shard, u->local, u->grad, u->lr);
        break;
    }
}

static void ps__update_done(ps_apply_job *j)
{
    ps__update *u = (ps__update *)j;
    ps_kv_server *s = u->srv;

    /* The shard refused an update that would have made the chunk
     * non-finite (finite gradients can still overflow, or square to Inf in
     * Adam's and Adagrad's state): the chunk is as it was. */
    if (u->rc < 0) {
        uint64_t key = ps_shard_chunk(s->shard, u->local)->key;
        s->n_unstable++;
        if (s->n_unstable == 1 || s->n_unstable % 100 == 0)
            ps_warn("refused an update of key %" PRIu64 ":%" PRIu64
                    " that would make its weights or optimizer state non-finite (%" PRIu64
                    " so far); the chunk is unchanged",
                    key >> 32, key & 0xffffffffu, s->n_unstable);
    }
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
    u->srv = s;
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
                                      s->cfg.pool_min_bytes) < 0) {
        if (buf)
            buf->refs--;
        free(u);
        return -ENOMEM;
    }
    return 0;
}

float ps__lr(const ps_kv_server *s, uint64_t step, uint64_t staleness)
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

/* Applies the averaged gradient of a chunk once no live worker still owes a
 * push for its current step. A step completes when enough live workers have pushed it. Pushes
 * rejected for non-finite values count toward that but add nothing; pushes marked unused add a
 * zero to the mean; a step with no usable gradient at all (the tensor no rank used, or every
 * gradient refused) is passed over, with no update, rather than left to block. */
void ps__maybe_apply(ps_kv_server *s, int local)
{
    ps_chunk_clock *c = &s->sync[local];
    int divisor = ps_consistency_step_divisor(c);

    if (!ps_consistency_step_complete(
            c, ps_consistency_pushes_needed(s->cfg.quorum, s->cfg.world, s->live)))
        return;
    if (divisor > 0 && ps__submit_update(s, PS__UPDATE_APPLY_SUM, local, NULL, NULL, divisor,
                                         ps__lr(s, c->clock, 0)) < 0)
        ps_error("out of memory applying step %" PRIu64 " of chunk %d; its gradients are lost",
                 c->clock, local);
    c->newest = c->clock + 1;
    c->clock++;
    c->pushes = 0;
    c->used = 0;
    c->live_pushes = 0;
    s->n_applied++;
}

static void ps__ack_push(ps__peer *p, uint64_t request_id, uint64_t clock, int dropped,
                         int rejected, uint64_t staleness)
{
    Shardps__Header h = SHARDPS__HEADER__INIT;
    int rc;

    h.type = SHARDPS__MSG_TYPE__PUSH_REPLY;
    h.request_id = request_id;
    h.clock = clock;
    h.status = dropped;
    h.rejected = (uint32_t)rejected;
    h.staleness = staleness > UINT32_MAX ? UINT32_MAX : (uint32_t)staleness;
    rc = ps_conn_send(p->conn, &h, NULL, 0, NULL, NULL);
    if (rc < 0 && rc != -PS_ECLOSED)
        ps_conn_close(p->conn, rc);
}

/* What one chunk of a push brings to its step. */
typedef enum {
    PS__GRAD,    /* a gradient, accumulated */
    PS__REFUSED, /* a gradient refused (non-finite, too large): counts toward completion only */
    PS__UNUSED,  /* marked unused: a zero in the mean, and no update if nobody used it */
} ps__contribution;

/* Sync: adds what one chunk's push brings to the step it was computed for,
 * or drops it when that step was already applied without it. Returns 1 when
 * dropped, 0 when counted, -1 after failing the peer. */
static int ps__push_sync(ps_kv_server *s, ps__peer *p, int local, uint64_t clock, const float *g,
                         ps__push_buf *buf, ps__contribution what)
{
    ps_chunk_clock *c = &s->sync[local];

    /* Pushes ahead of the chunk were refused before anything changed. */
    if (ps_consistency_sync_push(c->clock, clock) == PS_CLOCK_BEHIND) {
        s->n_dropped++;
        return 1;
    }
    if (what == PS__GRAD) {
        if (ps__submit_update(s, PS__UPDATE_ACCUMULATE, local, g, buf, 0, 0.0f) < 0) {
            ps_conn_close(p->conn, -ENOMEM);
            return -1;
        }
        ps__record_staleness(s, 0);
        c->used++;
    }
    if (what != PS__REFUSED)
        c->pushes++;
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
    ps_chunk_clock *c = &s->sync[local];
    uint64_t staleness = ps_consistency_staleness(c->newest, clock);

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

/* Checks everything a push's header says before any of it is used or
 * buffered: its keys, dtype and payload size (validate.h), and its clock,
 * for the whole frame and (sync) every chunk it names (consistency.h). Runs
 * in the place callback, before any payload byte is stored, and again when
 * the frame is handled, since the job may have moved while it arrived.
 * Fills locals; returns the float32 bytes of its keys, or -1 after failing
 * the peer. */
static long long ps__check_push(ps_kv_server *s, ps__peer *p, const Shardps__Header *h, int *locals)
{
    char why[256];
    ps_consistency_view v;
    ps_clock_verdict verdict;
    long long bytes = ps__resolve_keys(s, p, h, locals);

    if (bytes < 0)
        return -1;
    for (size_t i = 0; i < h->n_keys; i++)
        if (ps__chunk_static(s, locals[i])) {
            const ps_tensor_spec *t =
                &s->table.tensors[ps_shard_chunk(s->shard, locals[i])->tensor_id];
            ps__peer_fail(p, -PS_EPROTO, "a push to tensor %s, a %s: %s", t->name,
                          ps_tensor_kind_name(t->kind),
                          t->kind == PS_KIND_FROZEN ? "frozen tensors are never pushed"
                                                    : "buffers are written by rank 0 (WRITE), "
                                                      "never pushed");
            return -1;
        }
    if (ps_validate_payload(h->type, h->dtype, h->unused, (size_t)bytes, h->payload_bytes, why,
                            sizeof(why)) < 0) {
        ps__peer_fail(p, -PS_EPROTO, "%s", why);
        return -1;
    }
    ps__view(s, &v);
    verdict = ps_consistency_check_push(&v, p->clock, h->clock);
    if (verdict != PS_CLOCK_OK) {
        ps__peer_fail(p, -PS_EPROTO,
                      "push for clock %" PRIu64 " from a worker at clock %" PRIu64 ": %s", h->clock,
                      p->clock, ps_consistency_verdict_text(verdict));
        return -1;
    }
    for (size_t i = 0; s->cfg.staleness == 0 && i < h->n_keys; i++) {
        uint64_t applied = s->sync[locals[i]].clock;
        if (ps_consistency_sync_push(applied, h->clock) == PS_CLOCK_AHEAD) {
            ps__peer_fail(p, -PS_EPROTO,
                          "push for step %" PRIu64 " of key %" PRIu64 ":%" PRIu64
                          " before step %" PRIu64 " was applied: clock past what the mode allows",
                          h->clock, h->keys[i] >> 32, h->keys[i] & 0xffffffffu, applied);
            return -1;
        }
    }
    return bytes;
}

/* Where a frame's payload lands; every frame with a payload is judged here,
 * on its header alone, before a byte of it is stored. A push is read
 * straight into a pooled buffer rather than the connection's own, so the
 * updates can keep it after the frame is handled while the connection reads
 * the next one. Any other type carries no payload. A refusal (negative)
 * stops the connection reading; the ERROR naming why goes out first. */
int ps__place_push(ps_conn *c, const Shardps__Header *h, const ps_frame_piece **pieces)
{
    ps__peer *p = ps_conn_data(c);
    ps_kv_server *s = p->srv;
    char why[256];
    long long bytes;
    int *locals;

    /* A declarer's table lands in the connection's buffer, once its size
     * passes. */
    if (!p->failed && p->state == PS__PEER_TABLE) {
        int rc = ps_validate_table_frame(h->type, h->n_keys, h->payload_bytes, why, sizeof(why));
        if (rc < 0)
            ps__peer_fail(p, rc, "%s", why);
        return rc;
    }
    /* An evaluator is told why nothing it sends carries a payload. */
    if (!p->failed && p->state == PS__PEER_EVALUATOR &&
        ps_validate_evaluator_type(h->type, why, sizeof(why)) < 0)
        ps__peer_fail(p, -PS_EPROTO, "%s", why);
    /* Nothing more is read from a peer already refused or gone. */
    if (p->failed || p->state != PS__PEER_WORKER)
        return -PS_EPROTO;
    /* Initial values land in the connection's buffer; values.c checks
     * them against their keys (within --max-payload, like a push). */
    if (h->type == SHARDPS__MSG_TYPE__WRITE)
        return 0;
    if (ps_validate_worker_type(h->type, why, sizeof(why)) == 0 &&
        (h->type == SHARDPS__MSG_TYPE__PULL_ROWS || h->type == SHARDPS__MSG_TYPE__PUSH_ROWS))
        return ps__place_rows(s, p, h, pieces);
    if (ps_validate_worker_type(h->type, why, sizeof(why)) < 0 ||
        (h->type != SHARDPS__MSG_TYPE__PUSH &&
         ps_validate_payload(h->type, h->dtype, h->unused, 0, h->payload_bytes, why, sizeof(why)) <
             0)) {
        ps__peer_fail(p, -PS_EPROTO, "%s", why);
        return -PS_EPROTO;
    }
    locals = malloc((h->n_keys ? h->n_keys : 1) * sizeof(int));
    if (locals == NULL)
        return -ENOMEM;
    bytes = ps__check_push(s, p, h, locals);
    free(locals);
    if (bytes < 0)
        return -PS_EPROTO;
    return ps__place_payload(s, p, h->payload_bytes, pieces);
}

int ps__place_payload(ps_kv_server *s, ps__peer *p, uint64_t bytes, const ps_frame_piece **pieces)
{
    /* One placed for a frame that was then not handled. */
    ps_buf_pool_put(p->push_piece.base);
    p->push_piece.base = ps_buf_pool_get(s->bufs, (size_t)bytes);
    if (p->push_piece.base == NULL)
        return 0;
    p->push_piece.len = (size_t)bytes;
    *pieces = &p->push_piece;
    return 1;
}

/* A chunk's gradient may still be refused on its own: --max-grad-norm. */
static int ps__chunk_usable(ps_kv_server *s, ps__peer *p, uint64_t key, const float *g, size_t n)
{
    char why[128];

    if (ps_validate_grad_norm(g, n, s->cfg.max_grad_norm, why, sizeof(why)) == 0)
        return 1;
    s->n_too_large++;
    if (s->n_too_large == 1 || s->n_too_large % 100 == 0)
        ps_warn("refused key %" PRIu64 ":%" PRIu64 " of a push from %s: %s (%" PRIu64
                " so far); the chunk is unchanged",
                key >> 32, key & 0xffffffffu, p->name, why, s->n_too_large);
    return 0;
}

/* The push's values as float32 in a buffer the updates can share: the one
 * the payload was placed in, a pooled copy if it was not placed, or (float16,
 * bfloat16) a pooled buffer it is widened into. The caller holds one
 * reference. NULL when out of memory. */
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
        else if (f->hdr->dtype == SHARDPS__DTYPE__DTYPE_BF16)
            ps_bf16_to_f32((float *)b->data, (const uint16_t *)src, f32_bytes / sizeof(float));
        else
            memcpy(b->data, src, f32_bytes);
    }
    b->refs = 1;
    return b;
}

void ps__handle_push(ps_kv_server *s, ps__peer *p, const ps_frame *f)
{
    const Shardps__Header *h = f->hdr;
    int *locals = malloc((h->n_keys ? h->n_keys : 1) * sizeof(int));
    ps__push_buf *buf = NULL;
    const uint8_t *payload;
    long long bytes;
    uint64_t max_stale = 0;
    int dropped = 0, rejected = 0, usable;
    int sync = s->cfg.staleness == 0;

    if (locals == NULL) {
        ps_conn_close(p->conn, -ENOMEM);
        return;
    }
    /* Everything is checked before anything changes: a refused push leaves
     * no trace. */
    bytes = ps__check_push(s, p, h, locals);
    if (bytes < 0)
        goto out;
    /* A push marked unused has no payload to take: nothing is read from it. */
    buf = h->unused ? NULL : ps__take_push_payload(s, p, f, (size_t)bytes);
    if (buf == NULL && !h->unused) {
        ps_conn_close(p->conn, -ENOMEM);
        goto out;
    }
    payload = buf ? buf->data : NULL;
    /* The decoder scanned the payload as it arrived (see ps__on_connection);
     * float16 and bfloat16 Inf and NaN widen to float32 Inf and NaN, so it
     * is the same answer for every dtype. */
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
        size_t numel = ps_shard_chunk(s->shard, local)->numel;
        int rc, ok;

        if (payload)
            payload += numel * sizeof(float);
        if (p->pushed[local] > h->clock) {
            /* A repeat (typically resent after a reconnect): this rank's
             * gradient for this step is already in. */
            dropped++;
            s->n_dropped++;
            continue;
        }
        p->pushed[local] = h->clock + 1;
        /* Async and ssp apply nothing for an unused push: it only moves
         * this rank's clock. */
        if (h->unused && !sync)
            continue;
        ok = h->unused || (usable && ps__chunk_usable(s, p, h->keys[i], g, numel));
        rejected += !ok;
        if (!sync) {
            uint64_t st = ok ? ps__push_now(s, local, h->clock, g, buf) : 0;
            if (st > max_stale)
                max_stale = st;
            dropped += !ok;
            continue;
        }
        rc = ps__push_sync(s, p, local, h->clock, g, buf,
                           h->unused ? PS__UNUSED
                           : ok      ? PS__GRAD
                                     : PS__REFUSED);
        if (rc < 0)
            goto out;
        dropped += rc || !ok;
    }
    s->n_pushes++;
    s->bytes_in += f->payload_len;
    p->n_pushes++;
    p->bytes_in += f->payload_len;
    p->keys_pushed += (int)h->n_keys;
    if (p->keys_pushed >= s->n_pushable) {
        p->keys_pushed = 0;
        p->clock = h->clock + 1;
        p->earned = p->clock;
    }
    ps__ack_push(p, h->request_id, h->clock, dropped, rejected, max_stale);
    ps__maybe_checkpoint(s);
    ps__release_pulls(s);
    ps__maybe_quiesced(s);
out:
    ps__push_buf_release(buf);
    /* Placed but refused before it was taken. */
    ps_buf_pool_put(p->push_piece.base);
    p->push_piece.base = NULL;
    free(locals);
}
