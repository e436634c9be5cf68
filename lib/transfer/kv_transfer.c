/* The client's dense requests (kv_transfer.h): pulls by key straight into
 * the caller's parameters, pushes of one frame per chunk (halves or bfloat16
 * when compressing), corked (kv_conn.c) so that a step's small frames leave
 * in one write, writes of values, and the replies that complete them,
 * checked by server_reply.h before they count. */
#include "kv_transfer.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "half.h"
#include "kv_conn.h"
#include "ps_error.h"
#include "ps_log.h"

/* Pushed chunks smaller than this wait to share a write (see
 * ps__transfer_push_chunk): below it a system call costs more than the bytes. */
#define PS__CORK_BYTES ((size_t)64 << 10)

/* A pull reply whose header passes every check is read straight into the
 * caller's tensors, one piece per chunk, with no copy and no model-sized
 * buffer of our own. Anything else lands in the connection's buffer and is
 * refused when it is complete, so a lying header never touches a weight. */
int ps__transfer_place(ps__remote *sv, const Shardps__Header *h, const ps_frame_piece **pieces)
{
    char why[256];

    if (h->type != SHARDPS__MSG_TYPE__PULL_REPLY || sv->dense.pull_dest == NULL ||
        ps_reply_check_pull_header(h, &sv->dense.pull, why, sizeof(why)) < 0)
        return 0;
    for (int i = 0; i < sv->share.n_keys; i++) {
        const ps_chunk *ch = sv->share.chunks[i];
        sv->share.pieces[i].base = sv->dense.pull_dest[ch->tensor_id] + ch->offset;
        sv->share.pieces[i].len = ch->numel * sizeof(float);
    }
    *pieces = sv->share.pieces;
    return sv->share.n_keys;
}

/* The decoder scanned the whole reply as float32: int64 tensors' words may
 * look like NaNs. Whether a float32 chunk of the landed reply really is not
 * finite. */
static int ps__transfer_floats_nonfinite(const ps__remote *sv)
{
    const ps_model_spec *spec = &sv->cl->cfg.spec;

    for (int i = 0; i < sv->share.n_keys; i++) {
        const ps_chunk *ch = sv->share.chunks[i];
        const float *v = sv->dense.pull_dest[ch->tensor_id] + ch->offset;
        if (spec->tensors[ch->tensor_id].dtype != PS_DTYPE_F32)
            continue;
        for (size_t k = 0; k < ch->numel; k++)
            if (!isfinite(v[k]))
                return 1;
    }
    return 0;
}

/* Checks a pull reply against what was asked; it is already in place unless
 * it did not match. Weights that are not finite are refused after the fact:
 * the worker then fails and never computes on them. */
void ps__transfer_on_pull_reply(ps__remote *sv, const ps_frame *f)
{
    ps_frame g = *f;
    char why[256];

    if (g.nonfinite && g.payload == NULL && sv->dense.pull_dest && sv->cl->has_int64)
        g.nonfinite = ps__transfer_floats_nonfinite(sv);
    if (ps_reply_check_pull(&g, sv->dense.pull_dest ? &sv->dense.pull : NULL, f->payload == NULL,
                            why, sizeof(why)) < 0) {
        ps__distrust(sv, why);
        return;
    }
    sv->cl->stats.bytes_received += f->payload_len;
    sv->dense.pulled_clock = f->hdr->clock;
    sv->dense.pulled_hi = f->hdr->clock + (sv->dense.pull.snapshot ? f->hdr->staleness : 0);
    sv->dense.pulled = 1;
    sv->owed.answered = 1;
    sv->dense.pull_dest = NULL;
    sv->cl->outstanding--;
}

void ps__transfer_on_push_reply(ps__remote *sv, const ps_frame *f)
{
    ps_kv_client *c = sv->cl;
    const Shardps__Header *h = f->hdr;
    char why[256];

    if (ps_reply_check_push(f, sv->dense.push_n ? &sv->dense.pushes[sv->dense.push_head] : NULL,
                            why, sizeof(why)) < 0) {
        ps__distrust(sv, why);
        return;
    }
    c->stats.dropped += (uint64_t)h->status;
    /* Rejected chunks are some of those not applied; never more. */
    c->stats.rejected += h->rejected < (uint32_t)h->status ? h->rejected : (uint32_t)h->status;
    c->stats.acked++; /* a push frame carries one chunk */
    c->stats.staleness_sum += h->staleness;
    c->stats.staleness_count++;
    if (h->staleness > c->stats.staleness_max)
        c->stats.staleness_max = h->staleness;
    sv->dense.push_head = (sv->dense.push_head + 1) % sv->share.n_keys;
    sv->dense.push_n--;
    c->outstanding--;
}

int ps_kv_client_pull(ps_kv_client *c, uint64_t clock, float *const *params)
{
    for (int s = 0; s < c->n_servers; s++) {
        ps__remote *sv = &c->servers[s];
        Shardps__Header h = SHARDPS__HEADER__INIT;
        int rc;

        if (sv->share.n_keys == 0)
            continue;
        if (sv->link.conn == NULL || sv->dense.pull_dest != NULL)
            return sv->link.conn == NULL ? -PS_ECLOSED : -EBUSY;
        h.type = SHARDPS__MSG_TYPE__PULL;
        h.request_id = ++c->next_id;
        h.clock = clock;
        h.n_keys = (size_t)sv->share.n_keys;
        h.keys = sv->share.keys;
        /* Held until wait, so it leaves with the push in one write. */
        ps__conn_cork(sv);
        rc = ps_conn_send(sv->link.conn, &h, NULL, 0, NULL, NULL);
        if (rc < 0)
            return rc;
        sv->dense.pull.request_id = h.request_id;
        sv->dense.pull.clock = clock;
        sv->dense.pull.sync = c->mode.sync;
        sv->dense.pull.snapshot = c->cfg.evaluator;
        sv->dense.pull.max_clock = c->max_clock;
        sv->dense.pull.n_keys = (size_t)sv->share.n_keys;
        sv->dense.pull.keys = sv->share.keys;
        sv->dense.pull.bytes = sv->share.bytes;
        sv->dense.pull_dest = params;
        c->outstanding++;
    }
    return 0;
}

/* One frame per chunk, so a server applies each chunk as soon as it has
 * arrived, while the next one is still on the wire. Small frames wait for
 * wait() and leave with the pull in one write; a large one leaves now (with
 * any small ones before it), since its bytes are better on the wire than
 * queued behind the CRC of the next. grad NULL: the chunk's tensor was not
 * used this step, and the frame says so instead of carrying a gradient. */
static int ps__transfer_push_chunk(ps_kv_client *c, ps__remote *sv, int i, const float *grad,
                                   uint64_t step)
{
    const ps_chunk *ch = sv->share.chunks[i];
    Shardps__Header h = SHARDPS__HEADER__INIT;
    ps_iov iov = {grad, grad ? ch->numel * sizeof(float) : 0};
    int rc;

    if (sv->link.conn == NULL)
        return -PS_ECLOSED;
    if (sv->dense.push_n == sv->share.n_keys)
        return -EBUSY;
    h.dtype = grad ? SHARDPS__DTYPE__DTYPE_F32 : SHARDPS__DTYPE__DTYPE_UNKNOWN;
    h.unused = grad == NULL;
    if (grad && c->cfg.compress != PS_COMPRESS_NONE) {
        /* Each chunk has its own place in the server's buffer of halves,
         * since all of a step's chunks are in flight together; like the
         * gradients, it is borrowed by the send until wait returns. */
        uint16_t *half = sv->share.half + sv->share.half_at[i];
        if (c->cfg.compress == PS_COMPRESS_BF16) {
            ps_f32_to_bf16(half, grad, ch->numel);
            h.dtype = SHARDPS__DTYPE__DTYPE_BF16;
        } else {
            ps_f32_to_f16(half, grad, ch->numel);
            h.dtype = SHARDPS__DTYPE__DTYPE_F16;
        }
        iov.base = half;
        iov.len = ch->numel * sizeof(uint16_t);
    }
    h.type = SHARDPS__MSG_TYPE__PUSH;
    h.request_id = ++c->next_id;
    h.clock = step;
    h.n_keys = 1;
    h.keys = &sv->share.keys[i];
    if (iov.len < PS__CORK_BYTES)
        ps__conn_cork(sv);
    else
        ps__conn_uncork(sv);
    rc = ps_conn_send(sv->link.conn, &h, &iov, grad ? 1 : 0, NULL, NULL);
    if (rc < 0)
        return rc;
    sv->dense.pushes[(sv->dense.push_head + sv->dense.push_n) % sv->share.n_keys] =
        (ps_reply_push){.request_id = h.request_id,
                        .clock = step,
                        .n_keys = 1,
                        .max_staleness = c->mode.sync ? 0 : c->max_clock};
    sv->dense.push_n++;
    c->stats.bytes_sent += iov.len;
    c->outstanding++;
    return 0;
}

/* ps_kv_client_push_tensor, and with grad NULL ps_kv_client_push_unused. */
static int ps__transfer_push_tensor(ps_kv_client *c, int tensor_id, const float *grad)
{
    uint64_t step = ps_kv_client_weights_clock(c);

    if (tensor_id < 0 || tensor_id >= c->cfg.spec.n_tensors)
        return -EINVAL;
    /* Buffers are written (ps_kv_client_write_buffers), frozen tensors
     * never change: the servers would refuse the push. */
    if (c->cfg.spec.tensors[tensor_id].kind != PS_KIND_PARAMETER)
        return -EPERM;
    for (int s = 0; s < c->n_servers; s++) {
        ps__remote *sv = &c->servers[s];

        /* A server already past our step (it was restored less far back than
         * another, or we are a straggler) gets nothing this step: it waits
         * for us instead of running ahead, and the servers fall back into
         * step. */
        if (sv->share.n_keys == 0 || sv->dense.pulled_clock != step)
            continue;
        for (int i = 0; i < sv->share.n_keys; i++) {
            int rc;
            if (sv->share.chunks[i]->tensor_id != (uint32_t)tensor_id)
                continue;
            rc = ps__transfer_push_chunk(c, sv, i, grad ? grad + sv->share.chunks[i]->offset : NULL,
                                         step);
            if (rc < 0)
                return rc;
        }
    }
    return 0;
}

int ps_kv_client_push_tensor(ps_kv_client *c, int tensor_id, const float *grad)
{
    return grad ? ps__transfer_push_tensor(c, tensor_id, grad) : -EINVAL;
}

int ps_kv_client_push_unused(ps_kv_client *c, int tensor_id)
{
    return ps__transfer_push_tensor(c, tensor_id, NULL);
}

int ps_kv_client_push(ps_kv_client *c, const float *const *grads)
{
    for (int t = c->cfg.spec.n_tensors - 1; t >= 0; t--) {
        int rc = ps_kv_client_push_tensor(c, t, grads[t]);
        if (rc < 0)
            return rc;
    }
    return 0;
}

int ps_kv_client_snapshot_clocks(const ps_kv_client *c, uint64_t *lo, uint64_t *hi)
{
    int n = 0;

    if (!c->cfg.evaluator)
        return -EINVAL;
    *lo = UINT64_MAX;
    *hi = 0;
    for (int s = 0; s < c->n_servers; s++) {
        const ps__remote *sv = &c->servers[s];
        if (sv->share.n_keys == 0 || !sv->dense.pulled)
            continue;
        *lo = sv->dense.pulled_clock < *lo ? sv->dense.pulled_clock : *lo;
        *hi = sv->dense.pulled_hi > *hi ? sv->dense.pulled_hi : *hi;
        n++;
    }
    if (n == 0)
        *lo = 0;
    return n > 0 ? 0 : -EINVAL;
}

uint64_t ps_kv_client_weights_clock(const ps_kv_client *c)
{
    uint64_t m = UINT64_MAX;

    for (int s = 0; s < c->n_servers; s++)
        if (c->servers[s].share.n_keys > 0 && c->servers[s].dense.pulled_clock < m)
            m = c->servers[s].dense.pulled_clock;
    return m == UINT64_MAX ? 0 : m;
}

static void ps__transfer_free_sent(ps_conn *conn, int status, void *arg)
{
    (void)conn;
    (void)status;
    free(arg);
}

/* Whether chunk ch goes into the WRITE: initial, every chunk of an
 * INIT_VALUES tensor; else every chunk of a buffer given values. */
static int ps__transfer_writes(const ps_kv_client *c, const ps_chunk *ch, int initial,
                               const void *const *values)
{
    const ps_tensor_spec *t = &c->cfg.spec.tensors[ch->tensor_id];

    return initial ? t->init == PS_INIT_VALUES
                   : t->kind == PS_KIND_BUFFER && values[ch->tensor_id] != NULL;
}

int ps__transfer_write(ps__remote *sv, int initial, const void *const *values)
{
    ps_kv_client *c = sv->cl;
    Shardps__Header h = SHARDPS__HEADER__INIT;
    uint64_t *keys = malloc((size_t)(sv->share.n_keys ? sv->share.n_keys : 1) * sizeof(*keys));
    size_t words = 0, n = 0;
    uint8_t *payload = NULL;
    ps_iov iov;
    int rc = -ENOMEM;

    if (keys == NULL)
        goto fail;
    for (int i = 0; i < sv->share.n_keys; i++)
        if (ps__transfer_writes(c, sv->share.chunks[i], initial, values))
            words += sv->share.chunks[i]->numel;
    if ((payload = malloc(words ? words * sizeof(float) : 1)) == NULL)
        goto fail;
    for (int i = 0, at = 0; i < sv->share.n_keys; i++) {
        const ps_chunk *ch = sv->share.chunks[i];
        const uint8_t *v;
        if (!ps__transfer_writes(c, ch, initial, values))
            continue;
        v = values ? values[ch->tensor_id] : NULL;
        if (v == NULL) {
            rc = -EINVAL;
            ps__failf(c, rc,
                      "server %d (%s) asks for the initial values of tensor %s, which this "
                      "worker does not hold (they are sent once, by rank 0 when it declares; "
                      "a rank 0 that left before the job started declares anew: restart it)",
                      sv->index, sv->addr_text, c->cfg.spec.tensors[ch->tensor_id].name);
            goto out;
        }
        memcpy(payload + (size_t)at * sizeof(float), v + ch->offset * sizeof(float),
               ch->numel * sizeof(float));
        at += (int)ch->numel;
        keys[n++] = ch->key;
    }
    if (n == 0) {
        rc = 0;
        goto out;
    }
    h.type = SHARDPS__MSG_TYPE__WRITE;
    h.request_id = ++c->next_id;
    h.n_keys = n;
    h.keys = keys;
    iov.base = payload;
    iov.len = words * sizeof(float);
    rc = ps_conn_send(sv->link.conn, &h, &iov, 1, ps__transfer_free_sent, payload);
    if (rc == 0) {
        free(keys);
        ps_debug("wrote the values of %zu chunks to server %d", n, sv->index);
        return 0;
    }
fail:
    ps__failf(c, rc, "cannot send our values to server %d (%s): %s", sv->index, sv->addr_text,
              ps_strerror(rc));
out:
    free(payload);
    free(keys);
    return rc;
}

int ps_kv_client_write_buffers(ps_kv_client *c, const void *const *values)
{
    if (c->cfg.rank != 0 || c->joining || values == NULL)
        return -EINVAL;
    for (int s = 0; s < c->n_servers; s++) {
        int rc = c->servers[s].link.conn ? ps__transfer_write(&c->servers[s], 0, values) : 0;
        if (rc < 0)
            return rc;
    }
    return 0;
}
