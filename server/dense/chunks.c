/* Dense chunks as units (see chunks.h): pushes and pulls of chunks, and the
 * optimizer work on the tensors' apply queue. Calls the tensors, their keys
 * and shard, the units, the membership's view and rate, the pure rules and
 * the peer's refusal. */
#include "chunks.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "clocks.h"
#include "half.h"
#include "ps_error.h"
#include "ps_log.h"
#include "unit_wire.h"
#include "validate.h"

/* A push frame's payload, shared by the updates of its chunks and returned
 * to the pool when the last of them is done. */
typedef struct {
    uint8_t *data;
    int refs;
} ps__chunks_buf;

typedef enum {
    PS__CHUNKS_ACCUMULATE, /* sync: add the gradient into the chunk's sum */
    PS__CHUNKS_APPLY_SUM,  /* sync: apply the mean of `count` gradients */
    PS__CHUNKS_APPLY_GRAD, /* async, ssp: apply the gradient now */
} ps__chunks_kind;

/* One chunk's share of the optimizer's work, run on the thread pool. */
typedef struct {
    ps_apply_job job;
    ps_chunks *d; /* for done's counters */
    ps_shard *shard;
    ps__chunks_kind kind;
    int local, count;
    int rc; /* the shard's answer, read by done */
    float lr;
    const float *grad; /* inside buf */
    ps__chunks_buf *buf;
} ps__chunks_update;

void ps_chunks_init(ps_chunks *d, const ps_kv_server_config *cfg, const ps_job *job,
                    ps_tensors *tensors, ps_units *units)
{
    memset(d, 0, sizeof(*d));
    d->cfg = cfg;
    d->job = job;
    d->tensors = tensors;
    d->units = units;
}

static void ps__chunks_buf_release(ps__chunks_buf *b)
{
    if (b == NULL || --b->refs > 0)
        return;
    ps_buf_pool_put(b->data);
    free(b);
}

static void ps__chunks_update_run(ps_apply_job *j)
{
    ps__chunks_update *u = (ps__chunks_update *)j;

    switch (u->kind) {
    case PS__CHUNKS_ACCUMULATE:
        ps_shard_accumulate(u->shard, u->local, u->grad);
        break;
    case PS__CHUNKS_APPLY_SUM:
        u->rc = ps_shard_apply_accumulated(u->shard, u->local, u->count, u->lr);
        break;
    case PS__CHUNKS_APPLY_GRAD:
        u->rc = ps_shard_apply_grad(u->shard, u->local, u->grad, u->lr);
        break;
    }
}

static void ps__chunks_update_done(ps_apply_job *j)
{
    ps__chunks_update *u = (ps__chunks_update *)j;
    ps_chunks_counters *n = &u->d->n;

    /* The shard refused an update that would have made the chunk
     * non-finite (finite gradients can still overflow, or square to Inf in
     * Adam's and Adagrad's state): the chunk is as it was. */
    if (u->rc < 0) {
        uint64_t key = ps_shard_chunk(u->shard, u->local)->key;
        n->unstable++;
        if (n->unstable == 1 || n->unstable % 100 == 0)
            ps_warn("refused an update of key %" PRIu64 ":%" PRIu64
                    " that would make its weights or optimizer state non-finite (%" PRIu64
                    " so far); the chunk is unchanged",
                    key >> 32, key & 0xffffffffu, n->unstable);
    }
    ps__chunks_buf_release(u->buf);
    free(u);
}

/* Hands one chunk's update to the apply queue; buf (may be NULL) stays
 * alive until it has run. Chunks below --pool-min-bytes are updated on the
 * loop: handing a job to a pool thread and back costs tens of microseconds
 * (bench-pushpull's 4 KiB step took 81 instead of 31 us with every update
 * on the pool), more than updating 64K floats. Returns 0 or -ENOMEM. */
static int ps__chunks_submit(ps_chunks *d, ps__chunks_kind kind, int local, const float *grad,
                             ps__chunks_buf *buf, int count, float lr)
{
    ps_tensors *t = d->tensors;
    ps__chunks_update *u = calloc(1, sizeof(*u));

    if (u == NULL)
        return -ENOMEM;
    u->job.run = ps__chunks_update_run;
    u->job.done = ps__chunks_update_done;
    u->d = d;
    u->shard = t->shard;
    u->kind = kind;
    u->local = local;
    u->grad = grad;
    u->buf = buf;
    u->count = count;
    u->lr = lr;
    /* Taken before submitting: a job run at once releases it on return. */
    if (buf)
        buf->refs++;
    if (ps_apply_queue_submit(t->updates, local, &u->job,
                              !d->cfg->pool_updates ||
                                  ps_shard_chunk(t->shard, local)->numel * sizeof(float) <
                                      d->cfg->pool_min_bytes) < 0) {
        if (buf)
            buf->refs--;
        free(u);
        return -ENOMEM;
    }
    return 0;
}

static void ps__chunks_record_staleness(ps_chunks_counters *n, uint64_t staleness)
{
    n->stale_hist[staleness < PS_CHUNKS_STALE_BINS ? staleness : PS_CHUNKS_STALE_BINS - 1]++;
    n->stale_sum += staleness;
    if (staleness > n->stale_max)
        n->stale_max = staleness;
}

/* Applies the averaged gradient of a chunk once no live worker still owes a
 * push for its current step. Pushes rejected for non-finite values count
 * toward that but add nothing; pushes marked unused add a zero to the mean;
 * a step with no usable gradient at all (the tensor no rank used, or every
 * gradient refused) is passed over, with no update, rather than left to
 * block. */
void ps_chunks_apply_step(ps_chunks *d, int local)
{
    const ps_chunk_clock *c = &d->units->clock[local];
    int divisor = ps_consistency_step_divisor(c);

    if (divisor > 0 && ps__chunks_submit(d, PS__CHUNKS_APPLY_SUM, local, NULL, NULL, divisor,
                                         ps_job_rate(d->job, c->clock, 0)) < 0)
        ps_error("out of memory applying step %" PRIu64 " of chunk %d; its gradients are lost",
                 c->clock, local);
    d->n.applied++;
}

/* Async and ssp: applies the gradient now; its staleness is how many newer
 * steps this chunk has already taken in. */
static uint64_t ps__chunks_push_now(ps_chunks *d, uint32_t rank, int local, uint64_t clock,
                                    const float *g, ps__chunks_buf *buf)
{
    uint64_t staleness = ps_consistency_staleness(d->units->clock[local].newest, clock);

    if (ps__chunks_submit(d, PS__CHUNKS_APPLY_GRAD, local, g, buf, 0,
                          ps_job_rate(d->job, clock, staleness)) < 0) {
        ps_error("out of memory applying a push to chunk %d; the gradient is lost", local);
        return staleness;
    }
    ps__chunks_record_staleness(&d->n, staleness);
    ps_units_applied(d->units, rank, local, clock);
    d->n.applied++;
    return staleness;
}

/* Checks everything a push's header says before any of it is used or
 * buffered: its keys, dtype and payload size (validate.h), and its clock,
 * for the whole frame and (sync) every chunk it names (consistency.h). Runs
 * in the place callback, before any payload byte is stored, and again when
 * the frame is handled, since the job may have moved while it arrived.
 * Fills locals; returns the float32 bytes of its keys, or -1 after failing
 * the peer. */
static long long ps__chunks_check_push(ps_chunks *d, ps_peer *p, const Shardps__Header *h,
                                       int *locals)
{
    ps_tensors *t = d->tensors;
    char why[256];
    ps_consistency_view v;
    ps_clock_verdict verdict;
    long long bytes = ps_keys_resolve(&t->keys, t->shard, d->cfg->server_index, p, h, locals);

    if (bytes < 0)
        return -1;
    for (size_t i = 0; i < h->n_keys; i++)
        if (ps_tensors_chunk_static(t, locals[i])) {
            const ps_tensor_spec *ts = ps_tensors_of(t, locals[i]);
            ps_peer_fail(p, -PS_EPROTO, "a push to tensor %s, a %s: %s", ts->name,
                         ps_tensor_kind_name(ts->kind),
                         ts->kind == PS_KIND_FROZEN ? "frozen tensors are never pushed"
                                                    : "buffers are written by rank 0 (WRITE), "
                                                      "never pushed");
            return -1;
        }
    if (ps_validate_payload(h->type, h->dtype, h->unused, (size_t)bytes, h->payload_bytes, why,
                            sizeof(why)) < 0) {
        ps_peer_fail(p, -PS_EPROTO, "%s", why);
        return -1;
    }
    ps_clocks_view(d->job, d->units, -1, &v);
    verdict = ps_consistency_check_push(&v, p->clock, h->clock);
    if (verdict != PS_CLOCK_OK) {
        ps_peer_fail(p, -PS_EPROTO,
                     "push for clock %" PRIu64 " from a worker at clock %" PRIu64 ": %s", h->clock,
                     p->clock, ps_consistency_verdict_text(verdict));
        return -1;
    }
    for (size_t i = 0; d->cfg->staleness == 0 && i < h->n_keys; i++) {
        uint64_t applied = d->units->clock[locals[i]].clock;
        if (ps_consistency_sync_push(applied, h->clock) == PS_CLOCK_AHEAD) {
            ps_peer_fail(p, -PS_EPROTO,
                         "push for step %" PRIu64 " of key %" PRIu64 ":%" PRIu64
                         " before step %" PRIu64 " was applied: clock past what the mode allows",
                         h->clock, h->keys[i] >> 32, h->keys[i] & 0xffffffffu, applied);
            return -1;
        }
    }
    return bytes;
}

int ps_chunks_judge_push(ps_chunks *d, ps_peer *p, const Shardps__Header *h)
{
    int *locals = malloc((h->n_keys ? h->n_keys : 1) * sizeof(int));
    long long bytes;

    if (locals == NULL)
        return -ENOMEM;
    bytes = ps__chunks_check_push(d, p, h, locals);
    free(locals);
    return bytes < 0 ? -PS_EPROTO : 0;
}

/* A chunk's gradient may still be refused on its own: --max-grad-norm. */
static int ps__chunks_chunk_usable(ps_chunks *d, ps_peer *p, uint64_t key, const float *g, size_t n)
{
    char why[128];

    if (ps_validate_grad_norm(g, n, d->cfg->max_grad_norm, why, sizeof(why)) == 0)
        return 1;
    d->n.too_large++;
    if (d->n.too_large == 1 || d->n.too_large % 100 == 0)
        ps_warn("refused key %" PRIu64 ":%" PRIu64 " of a push from %s: %s (%" PRIu64
                " so far); the chunk is unchanged",
                key >> 32, key & 0xffffffffu, p->name, why, d->n.too_large);
    return 0;
}

/* The push's values as float32 in a buffer the updates can share: the one
 * the payload was placed in, a pooled copy if it was not placed, or (float16,
 * bfloat16) a pooled buffer it is widened into. The caller holds one
 * reference. NULL when out of memory. */
static ps__chunks_buf *ps__chunks_take_payload(ps_chunks *d, ps_peer *p, const ps_frame *f,
                                               size_t f32_bytes)
{
    ps__chunks_buf *b = calloc(1, sizeof(*b));
    const uint8_t *src = ps_unit_wire_payload(p, f);

    if (b == NULL)
        return NULL;
    if (f->hdr->dtype == SHARDPS__DTYPE__DTYPE_F32 && f->payload == NULL) {
        b->data = p->piece.base;
        p->piece.base = NULL;
    } else {
        b->data = ps_buf_pool_get(d->tensors->bufs, f32_bytes);
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

/* Sync: what one chunk's share of a push brings to the step it was
 * computed for. Returns 0, or -1 after closing the peer. */
static int ps__chunks_push_sync(ps_chunks *d, ps_peer *p, int local, uint64_t clock, const float *g,
                                ps__chunks_buf *buf, ps_unit_part part)
{
    if (part == PS_UNIT_GRAD) {
        if (ps__chunks_submit(d, PS__CHUNKS_ACCUMULATE, local, g, buf, 0, 0.0f) < 0) {
            ps_conn_close(p->conn, -ENOMEM);
            return -1;
        }
        ps__chunks_record_staleness(&d->n, 0);
    }
    ps_units_count(d->units, p->rank, local, clock, part);
    if (clock + 1 > p->fed)
        p->fed = clock + 1;
    return 0;
}

int ps_chunks_push(ps_chunks *d, ps_peer *p, const ps_frame *f)
{
    const Shardps__Header *h = f->hdr;
    int *locals = malloc((h->n_keys ? h->n_keys : 1) * sizeof(int));
    ps__chunks_buf *buf = NULL;
    const uint8_t *payload;
    long long bytes;
    uint64_t max_stale = 0;
    int dropped = 0, rejected = 0, usable, rc = -1;
    int sync = d->cfg->staleness == 0;
    Shardps__Header ack = SHARDPS__HEADER__INIT;

    if (locals == NULL) {
        ps_conn_close(p->conn, -ENOMEM);
        goto out;
    }
    /* Everything is checked before anything changes: a refused push leaves
     * no trace. */
    bytes = ps__chunks_check_push(d, p, h, locals);
    if (bytes < 0)
        goto out;
    /* A push marked unused has no payload to take: nothing is read from it. */
    buf = h->unused ? NULL : ps__chunks_take_payload(d, p, f, (size_t)bytes);
    if (buf == NULL && !h->unused) {
        ps_conn_close(p->conn, -ENOMEM);
        goto out;
    }
    payload = buf ? buf->data : NULL;
    /* The decoder scanned the payload as it arrived; float16 and bfloat16
     * Inf and NaN widen to float32 Inf and NaN, so it is the same answer
     * for every dtype. */
    usable = !d->cfg->reject_nonfinite || !f->nonfinite;
    if (!usable) {
        d->n.nonfinite++;
        if (d->n.nonfinite == 1 || d->n.nonfinite % 100 == 0)
            ps_warn("rejected a push from %s at clock %" PRIu64
                    ": gradient has NaN or Inf values (%" PRIu64 " such pushes so far); the model "
                    "is unchanged",
                    p->name, h->clock, d->n.nonfinite);
    }
    for (size_t i = 0; i < h->n_keys; i++) {
        int local = locals[i];
        const float *g = (const float *)payload;
        size_t numel = ps_shard_chunk(d->tensors->shard, local)->numel;
        ps_unit_verdict verdict;
        int ok;

        if (payload)
            payload += numel * sizeof(float);
        verdict = ps_units_judge(d->units, p->rank, local, h->clock, sync);
        if (verdict == PS_UNIT_REPEAT) {
            /* A repeat (typically resent after a reconnect): this rank's
             * gradient for this step is already in. */
            dropped++;
            d->n.dropped++;
            continue;
        }
        /* Async and ssp apply nothing for an unused push: it only moves
         * this rank's clock. */
        if (h->unused && !sync)
            continue;
        ok = h->unused || (usable && ps__chunks_chunk_usable(d, p, h->keys[i], g, numel));
        rejected += !ok;
        if (!sync) {
            uint64_t st = ok ? ps__chunks_push_now(d, p->rank, local, h->clock, g, buf) : 0;
            if (st > max_stale)
                max_stale = st;
            dropped += !ok;
            continue;
        }
        if (verdict == PS_UNIT_LATE) {
            /* That step was applied without it. */
            d->n.dropped++;
            dropped++;
            continue;
        }
        if (ps__chunks_push_sync(d, p, local, h->clock, g, buf,
                                 h->unused ? PS_UNIT_UNUSED
                                 : ok      ? PS_UNIT_GRAD
                                           : PS_UNIT_REFUSED) < 0)
            goto out;
        dropped += !ok;
    }
    d->n.pushes++;
    d->n.bytes_in += f->payload_len;
    p->n_pushes++;
    p->bytes_in += f->payload_len;
    p->keys_pushed += (int)h->n_keys;
    if (p->keys_pushed >= d->tensors->n_pushable) {
        p->keys_pushed = 0;
        p->clock = h->clock + 1;
        p->earned = p->clock;
    }
    ack.type = SHARDPS__MSG_TYPE__PUSH_REPLY;
    ack.request_id = h->request_id;
    ack.clock = h->clock;
    ps_unit_wire_ack(p, &ack, dropped, rejected, max_stale);
    rc = 0;
out:
    ps__chunks_buf_release(buf);
    /* Placed but refused before it was taken. */
    ps_unit_wire_done(p);
    free(locals);
    return rc;
}

ps_pull *ps_chunks_pull(ps_chunks *d, ps_peer *p, const ps_frame *f)
{
    const Shardps__Header *h = f->hdr;
    ps_tensors *t = d->tensors;
    int *locals = malloc((h->n_keys ? h->n_keys : 1) * sizeof(int));
    ps_consistency_view v;
    ps_clock_verdict verdict;
    ps_pull *q;

    if (locals == NULL)
        goto oom;
    /* Everything is checked before anything changes; a payload never got
     * this far (the place callback refuses it). */
    if (ps_keys_resolve(&t->keys, t->shard, d->cfg->server_index, p, h, locals) < 0)
        goto fail;
    /* A worker's clock only moves forward, and only as far as the mode
     * allows: the step after its last push, a later one when it joins
     * mid-run or (sync) catches up to the steps already applied; never
     * anywhere a stranger asks. */
    ps_clocks_view(d->job, d->units, -1, &v);
    verdict = p->state == PS_PEER_EVALUATOR
                  ? PS_CLOCK_OK
                  : ps_consistency_check_pull(&v, p->clock, p->earned, p->keys_pushed, h->clock);
    if (verdict != PS_CLOCK_OK) {
        ps_peer_fail(p, -PS_EPROTO,
                     "pull for clock %" PRIu64 " from a worker at clock %" PRIu64
                     ": %s (at most %" PRIu64 ")",
                     h->clock, p->clock, ps_consistency_verdict_text(verdict),
                     ps_consistency_clock_ceiling(&v, p->earned));
        goto fail;
    }
    q = ps_pull_new(p, h->request_id, h->clock, -1, h->n_keys, locals, NULL);
    if (q == NULL) {
        locals = NULL;
        goto oom;
    }
    if (h->clock > p->clock && p->state != PS_PEER_EVALUATOR)
        p->clock = h->clock;
    /* A server none of whose chunks is pushed has nothing to push for: a
     * worker's step there is complete once it asks for the next, so the
     * pull earns its clock, and the server's clock follows its slowest live
     * worker (units.h). */
    if (v.stepless && p->state != PS_PEER_EVALUATOR) {
        p->earned = p->clock;
        ps_units_follow(d->units, ps_job_min_live_clock(d->job));
    }
    return q;
oom:
    ps_conn_close(p->conn, -ENOMEM);
fail:
    free(locals);
    return NULL;
}
