/* Values rank 0 writes (issue 23 points 2 and 3): a model's own initial
 * values (INIT_VALUES tensors), and buffers refreshed every step. The
 * rank 0 that declares the table is told in its WELCOME that this server
 * wants them (ps__values_wanted), and WRITEs them once, each chunk once.
 * Until every one has come the table does not count as filled
 * (ps__values_done): pulls wait, so no rank sees a partly written table,
 * whatever order the ranks started in. A value that arrives before its
 * chunk is filled waits beside it (pending) and the fill copies it in; one
 * that arrives later is copied in by a job queued behind the fill. A
 * restored table is committed: its values are the checkpoint's, and none is
 * wanted. A buffer (its chunks out of the sync barrier and never pushed) is
 * rewritten by rank 0 whenever it likes once the table is filled: each
 * WRITE is queued behind the chunk's updates, so the pulls numbered after it
 * see it, and int64 buffers are carried as their bytes. */
#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "kv_internal.h"
#include "ps_error.h"
#include "ps_log.h"

static int ps__takes_values(const ps_kv_server *s, int local)
{
    const ps_chunk *c = ps_shard_chunk(s->shard, local);

    return s->table.tensors[c->tensor_id].init == PS_INIT_VALUES;
}

int ps__values_init(ps_kv_server *s)
{
    s->values_left = s->writes_inflight = 0;
    s->written = calloc((size_t)s->n_local + 1, 1);
    s->pending = calloc((size_t)s->n_local + 1, sizeof(*s->pending));
    if (s->written == NULL || s->pending == NULL)
        return -ENOMEM;
    for (int i = 0; i < s->n_local; i++)
        s->values_left += ps__takes_values(s, i);
    return 0;
}

void ps__values_free(ps_kv_server *s)
{
    for (int i = 0; s->pending && i < s->n_local; i++)
        free(s->pending[i]);
    free(s->pending);
    free(s->written);
    s->pending = NULL;
    s->written = NULL;
    s->values_left = s->writes_inflight = 0;
}

int ps__values_wanted(const ps_kv_server *s)
{
    return s->values_left > 0 && s->life.state != PS_TABLE_COMMITTED;
}

int ps__values_done(const ps_kv_server *s)
{
    return s->values_left == 0 && s->writes_inflight == 0;
}

void ps__values_fill(ps_kv_server *s, int local)
{
    /* Set on the loop before the fill was submitted; read-only since. */
    if (s->pending[local] != NULL)
        memcpy(ps_shard_weights_mut(s->shard, local), s->pending[local],
               ps_shard_chunk(s->shard, local)->numel * sizeof(float));
}

/* One chunk's values, copied in behind its fill. */
typedef struct {
    ps_apply_job job;
    ps_kv_server *srv;
    ps_shard *shard;
    int local;
    float *vals; /* owned */
    int counted; /* in writes_inflight: the table waits for it to fill */
} ps__write;

static void ps__write_run(ps_apply_job *j)
{
    ps__write *w = (ps__write *)j;

    /* A table withdrawn meanwhile is only drained. */
    if (!atomic_load_explicit(&w->srv->fills_cancelled, memory_order_relaxed) &&
        ps_shard_filled(w->shard, w->local))
        memcpy(ps_shard_weights_mut(w->shard, w->local), w->vals,
               ps_shard_chunk(w->shard, w->local)->numel * sizeof(float));
}

static void ps__write_done(ps_apply_job *j)
{
    ps__write *w = (ps__write *)j;
    ps_kv_server *s = w->srv;

    int counted = w->counted;

    free(w->vals);
    free(w);
    if (counted && s->life.state == PS_TABLE_FILLING) {
        s->writes_inflight--;
        ps__maybe_filled(s, 1);
    }
}

/* What a WRITE may do to chunk l: give its initial values (an INIT_VALUES
 * tensor's chunk not written yet, before the table is set: it is then
 * declared or filling), or refresh a buffer's (rank 0's running
 * statistics, once the table is filled). */
static int ps__initial(const ps_kv_server *s, int l)
{
    return ps__takes_values(s, l) && !s->written[l] && s->life.state != PS_TABLE_COMMITTED;
}

static int ps__refresh(const ps_kv_server *s, int l)
{
    return s->table.tensors[ps_shard_chunk(s->shard, l)->tensor_id].kind == PS_KIND_BUFFER &&
           ps_table_life_filled(&s->life);
}

static const char *ps__why_not(const ps_kv_server *s, int l)
{
    const ps_tensor_spec *t = &s->table.tensors[ps_shard_chunk(s->shard, l)->tensor_id];

    if (s->seen[l] == s->seen_stamp)
        return "named twice";
    if (t->kind == PS_KIND_BUFFER)
        return "a buffer is written for its initial values, or once the table is filled";
    if (t->init == PS_INIT_VALUES)
        return "its initial values are set (written once, or restored from a checkpoint)";
    return "the servers initialise it, and only buffers are written after";
}

/* The WRITE's keys against the rules, before anything is kept: each a chunk
 * of this server that takes its initial values or a buffer's refresh, named
 * once; the payload exactly their words. Fills locals. Returns 0 or -1
 * after failing the peer. */
static int ps__check_write(ps_kv_server *s, ps__peer *p, const ps_frame *f, int *locals)
{
    const Shardps__Header *h = f->hdr;
    size_t words = 0;

    if (p->rank != 0 || !p->declarer) {
        ps__peer_fail(p, -PS_EPROTO, "only the rank 0 that declared the tensors writes values");
        return -1;
    }
    if (h->n_keys == 0) {
        ps__peer_fail(p, -PS_EPROTO, "a WRITE names no keys");
        return -1;
    }
    if (++s->seen_stamp == 0) {
        memset(s->seen, 0, (size_t)s->n_local * sizeof(*s->seen));
        s->seen_stamp = 1;
    }
    for (size_t i = 0; i < h->n_keys; i++) {
        int l = ps_shard_find(s->shard, h->keys[i]);

        if (l < 0 || s->seen[l] == s->seen_stamp || !(ps__initial(s, l) || ps__refresh(s, l))) {
            ps__peer_fail(p, -PS_EPROTO, "a WRITE names key %" PRIu64 ":%" PRIu64 "%s%s: %s",
                          h->keys[i] >> 32, h->keys[i] & 0xffffffffu, l < 0 ? "" : " of tensor ",
                          l < 0 ? ""
                                : s->table.tensors[ps_shard_chunk(s->shard, l)->tensor_id].name,
                          l < 0 ? "not on this server" : ps__why_not(s, l));
            return -1;
        }
        s->seen[l] = s->seen_stamp;
        locals[i] = l;
        words += ps_shard_chunk(s->shard, l)->numel;
    }
    if (f->payload_len != words * sizeof(float)) {
        ps__peer_fail(p, -PS_EPROTO, "a WRITE of %zu bytes; its keys take %zu", f->payload_len,
                      words * sizeof(float));
        return -1;
    }
    return 0;
}

void ps__handle_write(ps_kv_server *s, ps__peer *p, const ps_frame *f)
{
    const Shardps__Header *h = f->hdr;
    const uint8_t *at = f->payload;
    int *locals = malloc((h->n_keys ? h->n_keys : 1) * sizeof(int));

    if (locals == NULL) {
        ps__peer_fail(p, -ENOMEM, "out of memory");
        return;
    }
    if (ps__check_write(s, p, f, locals) < 0) {
        free(locals);
        return;
    }
    for (size_t i = 0; i < h->n_keys; i++) {
        int l = locals[i], initial = ps__initial(s, l);
        size_t bytes = ps_shard_chunk(s->shard, l)->numel * sizeof(float);
        float *vals = malloc(bytes ? bytes : 1);
        ps__write *w = NULL;

        if (vals != NULL)
            memcpy(vals, at, bytes);
        at += bytes;
        if (initial) {
            s->written[l] = 1;
            s->values_left--;
        }
        /* Not filled yet: the fill copies it in. */
        if (vals != NULL && s->life.state == PS_TABLE_DECLARED) {
            s->pending[l] = vals;
            continue;
        }
        /* Behind the chunk's fill, and behind the updates before it: a
         * refreshed buffer is seen by the pulls numbered after it. */
        if (vals != NULL && (w = calloc(1, sizeof(*w))) != NULL) {
            *w = (ps__write){
                {.run = ps__write_run, .done = ps__write_done}, s, s->shard, l, vals, initial};
            s->writes_inflight += initial;
            if (ps_apply_queue_submit(s->updates, l, &w->job, 0) == 0)
                continue;
            s->writes_inflight -= initial;
        }
        free(vals);
        free(w);
        ps__peer_fail(p, -ENOMEM, "out of memory for the values of a chunk");
        break;
    }
    free(locals);
    ps_debug("%s wrote the values of %zu chunks; %d initial ones to come", p->name, h->n_keys,
             s->values_left);
    ps__maybe_filled(s, 0);
}
