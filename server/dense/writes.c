/* WRITE frames (see writes.h). Calls the tensors' state, their keys and
 * values, and the peer's refusal. */
#include "writes.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "ps_error.h"
#include "ps_log.h"

/* One chunk's values, copied in behind its fill. */
typedef struct {
    ps_apply_job job;
    ps_tensors *t;
    int local;
    float *vals; /* owned */
    int counted; /* in values.inflight: the table waits for it to fill */
} ps__writes_job;

static void ps__writes_run(ps_apply_job *j)
{
    ps__writes_job *w = (ps__writes_job *)j;
    ps_shard *shard = w->t->shard;

    /* A table withdrawn meanwhile is only drained. */
    if (!atomic_load_explicit(&w->t->fills_cancelled, memory_order_relaxed) &&
        ps_shard_filled(shard, w->local))
        memcpy(ps_shard_weights_mut(shard, w->local), w->vals,
               ps_shard_chunk(shard, w->local)->numel * sizeof(float));
}

static void ps__writes_done(ps_apply_job *j)
{
    ps__writes_job *w = (ps__writes_job *)j;
    ps_tensors *t = w->t;

    if (w->counted && t->life.state == PS_TABLE_FILLING)
        t->values.inflight--;
    free(w->vals);
    free(w);
}

/* What a WRITE may do to chunk l: give its initial values (an INIT_VALUES
 * tensor's chunk not written yet, before the table is set: it is then
 * declared or filling), or refresh a buffer's (rank 0's running
 * statistics, once the table is filled). */
static int ps__writes_initial(const ps_tensors *t, int l)
{
    return ps_values_takes(t->shard, &t->table, l) && !t->values.written[l] &&
           t->life.state != PS_TABLE_COMMITTED;
}

static int ps__writes_refresh(const ps_tensors *t, int l)
{
    return ps_tensors_of(t, l)->kind == PS_KIND_BUFFER && ps_table_life_filled(&t->life);
}

static const char *ps__writes_why_not(const ps_tensors *t, int l)
{
    const ps_tensor_spec *ts = ps_tensors_of(t, l);

    if (ts->kind == PS_KIND_BUFFER)
        return "a buffer is written for its initial values, or once the table is filled";
    if (ts->init == PS_INIT_VALUES)
        return "its initial values are set (written once, or restored from a checkpoint)";
    return "the servers initialise it, and only buffers are written after";
}

/* The WRITE's keys against the rules, before anything is kept: each a chunk
 * of this server that takes its initial values or a buffer's refresh, named
 * once; the payload exactly their words. Fills locals. Returns 0 or -1
 * after failing the peer. */
static int ps__writes_check(ps_tensors *t, ps_peer *p, const ps_frame *f, int *locals)
{
    const Shardps__Header *h = f->hdr;
    size_t words = 0;

    if (p->rank != 0 || !p->declarer) {
        ps_peer_fail(p, -PS_EPROTO, "only the rank 0 that declared the tensors writes values");
        return -1;
    }
    if (h->n_keys == 0) {
        ps_peer_fail(p, -PS_EPROTO, "a WRITE names no keys");
        return -1;
    }
    ps_keys_begin(&t->keys);
    for (size_t i = 0; i < h->n_keys; i++) {
        int l = ps_shard_find(t->shard, h->keys[i]);
        int twice = l >= 0 && ps_keys_named(&t->keys, l);

        if (l < 0 || twice || !(ps__writes_initial(t, l) || ps__writes_refresh(t, l))) {
            ps_peer_fail(p, -PS_EPROTO, "a WRITE names key %" PRIu64 ":%" PRIu64 "%s%s: %s",
                         h->keys[i] >> 32, h->keys[i] & 0xffffffffu, l < 0 ? "" : " of tensor ",
                         l < 0 ? "" : ps_tensors_of(t, l)->name,
                         l < 0   ? "not on this server"
                         : twice ? "named twice"
                                 : ps__writes_why_not(t, l));
            return -1;
        }
        locals[i] = l;
        words += ps_shard_chunk(t->shard, l)->numel;
    }
    if (f->payload_len != words * sizeof(float)) {
        ps_peer_fail(p, -PS_EPROTO, "a WRITE of %zu bytes; its keys take %zu", f->payload_len,
                     words * sizeof(float));
        return -1;
    }
    return 0;
}

/* Queues chunk l's values behind its fill and the updates before it, so
 * the pulls numbered after it see them. counted: initial values the table
 * waits for. Takes vals. Returns 0 or -ENOMEM (vals freed). */
static int ps__writes_submit(ps_tensors *t, int l, float *vals, int counted)
{
    ps__writes_job *w = calloc(1, sizeof(*w));

    if (w != NULL) {
        *w =
            (ps__writes_job){{.run = ps__writes_run, .done = ps__writes_done}, t, l, vals, counted};
        t->values.inflight += counted;
        if (ps_apply_queue_submit(t->updates, l, &w->job, 0) == 0)
            return 0;
        t->values.inflight -= counted;
    }
    free(vals);
    free(w);
    return -ENOMEM;
}

/* Sync: a buffer rank 0 refreshes while it computes step `step` is its
 * state for the next step's pulls (DDP broadcasts buffers at the start of
 * each forward), so it waits until that step is applied here: a pull of
 * the current step, however late it comes, sees the buffers the step began
 * with. A server that holds no parameter has no step of its own: there the
 * refresh is queued at once. Takes vals. Returns 0 or -ENOMEM (vals
 * freed). */
static int ps__writes_park(ps_tensors *t, int l, float *vals, uint64_t step)
{
    ps_values_refresh *r = calloc(1, sizeof(*r));

    if (r == NULL) {
        free(vals);
        return -ENOMEM;
    }
    *r = (ps_values_refresh){NULL, step, l, vals};
    *t->values.parked_tail = r;
    t->values.parked_tail = &r->next;
    return 0;
}

void ps_writes_release(ps_tensors *t, uint64_t server_clock)
{
    ps_values *v = &t->values;

    while (v->parked && v->parked->step < server_clock) {
        ps_values_refresh *r = v->parked;
        v->parked = r->next;
        if (v->parked == NULL)
            v->parked_tail = &v->parked;
        if (ps__writes_submit(t, r->local, r->vals, 0) < 0)
            ps_error("out of memory for a refresh of tensor %s; its next refresh replaces it",
                     ps_tensors_of(t, r->local)->name);
        free(r);
    }
}

int ps_writes_handle(ps_tensors *t, ps_peer *p, const ps_frame *f, uint64_t server_clock)
{
    const Shardps__Header *h = f->hdr;
    const uint8_t *at = f->payload;
    int *locals = malloc((h->n_keys ? h->n_keys : 1) * sizeof(int));
    int sync = t->cfg->staleness == 0, rc = -1;

    if (locals == NULL) {
        ps_peer_fail(p, -ENOMEM, "out of memory");
        return -1;
    }
    if (ps__writes_check(t, p, f, locals) < 0)
        goto out;
    for (size_t i = 0; i < h->n_keys; i++) {
        int l = locals[i], initial = ps__writes_initial(t, l);
        size_t bytes = ps_shard_chunk(t->shard, l)->numel * sizeof(float);
        float *vals = malloc(bytes ? bytes : 1);

        if (vals == NULL) {
            ps_peer_fail(p, -ENOMEM, "out of memory for the values of a chunk");
            goto out;
        }
        memcpy(vals, at, bytes);
        at += bytes;
        if (initial) {
            t->values.written[l] = 1;
            t->values.left--;
        }
        /* Not filled yet: the fill copies it in. */
        if (t->life.state == PS_TABLE_DECLARED) {
            t->values.pending[l] = vals;
            continue;
        }
        if ((!initial && sync && t->n_pushable > 0 && server_clock <= p->clock
                 ? ps__writes_park(t, l, vals, p->clock)
                 : ps__writes_submit(t, l, vals, initial)) < 0) {
            ps_peer_fail(p, -ENOMEM, "out of memory for the values of a chunk");
            goto out;
        }
    }
    ps_debug("%s wrote the values of %zu chunks; %d initial ones to come", p->name, h->n_keys,
             t->values.left);
    rc = 0;
out:
    free(locals);
    return rc;
}
