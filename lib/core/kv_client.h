/* The worker's view of the parameter servers: connects to every server,
 * handshakes, and moves whole models of weights and gradients by key.
 *
 * Requests are started without blocking (ps_kv_client_pull / _push) and
 * completed together by ps_kv_client_wait, which runs the client's own libuv
 * loop; so a push of step t and the pull of step t+1 travel at the same time.
 * While it waits, the client sends the heartbeats the servers asked for, so a
 * worker blocked at a barrier is never mistaken for a dead one.
 * Buffers passed to a request are borrowed until wait returns: a push sends
 * straight from the gradient buffers (or, compressed, from the client's own
 * buffer of halves), a pull writes straight into the parameter buffers.
 *
 * Not installed: libshardps's handle (include/shardps.h) and the tests use
 * it. The files that implement it, and which calls which, are listed in
 * kv_state.h. */
#ifndef PS_KV_CLIENT_H
#define PS_KV_CLIENT_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "id_set.h"
#include "model_spec.h"

/* How a push carries the gradient. Pulls carry float32 either way. */
typedef enum {
    PS_COMPRESS_NONE, /* float32 */
    /* IEEE half, rounded to nearest even (half.h): half the bytes. The
     * servers widen it and accumulate in float32. A value of magnitude
     * 65520 or more becomes Inf, so the servers' --reject-nonfinite refuses
     * that push. */
    PS_COMPRESS_FP16,
    /* bfloat16, rounded to nearest even (half.h): half the bytes, float32's
     * exponent range (only values that round past the largest bfloat16,
     * about 3.39e38, become Inf) but 8 significant bits against half's 11. */
    PS_COMPRESS_BF16,
} ps_compress;

typedef struct {
    /* The tensors this worker declares to every server; none (n_tensors 0):
     * join the job's, which the servers' WELCOMEs carry (ps_kv_client_spec). */
    ps_model_spec spec;
    /* Per tensor of spec: the initial values of its INIT_VALUES tensors (its
     * words: numel floats, or numel int64s), NULL for the others; borrowed
     * during ps_kv_client_connect only. Rank 0 WRITEs them to the servers
     * that ask (a restored server does not). NULL: none declared. */
    const void *const *values;
    int rank, world;
    const char *const *servers; /* "host:port", in server-index order; borrowed during init */
    int n_servers;
    size_t chunk_bytes;
    double connect_timeout_s; /* keep retrying refused connections this long */
    /* 1: this process held its rank before (a reconnect), so a server that
     * still has the rank live may be holding our own old connection: retry
     * until the timeout. 0: a live rank belongs to another worker, and the
     * refusal is final (-PS_EREJECTED). */
    int rejoining;
    /* The longest a server may go without a frame while it owes us one (a
     * WELCOME, a pull reply, a push ack); then the client fails with
     * -PS_ETIMEOUT, naming it. 0: 3 heartbeat timeouts of the servers (12 of
     * the intervals their WELCOMEs ask for, at least 1 s), or 30 s while none
     * is known. The first pull may also wait for the whole job to join: it
     * gets connect_timeout_s more. */
    double request_timeout_s;
    size_t max_payload;
    /* The most IDs a rows request names (--max-row-ids; 0: the default): a
     * pull whose share for one server is larger goes in several requests,
     * such a push is refused (-E2BIG). */
    uint64_t max_row_ids;
    uint64_t total_steps; /* steps this worker plans; servers use it for lr schedules */
    /* NULL: no authentication. Otherwise the key from ps_auth_load_key
     * (copied): every server must prove it holds the same token, and so
     * must we. */
    const uint8_t *auth_key;
    ps_compress compress; /* zero: PS_COMPRESS_NONE */
    /* The job's settings (ps_job_settings_format), sent in every HELLO for
     * the servers to compare with theirs; NULL: none sent. Borrowed: must
     * outlive the client. */
    const char *job_settings;
    /* Set by the program (a signal handler) to ask the client to stop
     * waiting: connect and wait then fail with -EINTR, see
     * ps_kv_client_set_stop_flag. Borrowed; NULL: never. */
    const volatile sig_atomic_t *stop;
    /* 1: connect as a read-only evaluator (docs/architecture.md, "The
     * evaluator"): declares no tensors (spec must be empty: it joins), holds
     * no rank (rank, world and total_steps are not sent), never pushes; each
     * pull is a snapshot of the weights as they are, answered without
     * waiting for a step (ps_kv_client_snapshot_clocks). */
    int evaluator;
} ps_kv_client_config;

/* Running totals since the client was created. */
typedef struct {
    uint64_t dropped;  /* chunks the servers did not apply: late or rejected */
    uint64_t rejected; /* of those, chunks refused: NaN/Inf, over --max-grad-norm */
    uint64_t acked;    /* pushed chunks the servers acknowledged */
    /* Payload bytes as they went on the wire (halves with fp16 or bf16 pushes);
     * frame headers are not counted. */
    uint64_t bytes_sent, bytes_received;
    uint64_t staleness_max; /* largest staleness a server reported for our pushes */
    uint64_t staleness_sum, staleness_count;
} ps_kv_client_stats;

typedef struct ps_kv_client ps_kv_client;

/* Resolves the server addresses. Returns 0, -EINVAL (an address that does not
 * parse; the message names it) or -ENOMEM. */
int ps_kv_client_init(ps_kv_client **out, const ps_kv_client_config *cfg);

/* Connects and handshakes with every server, retrying refused connections
 * until the timeout; writes the clock this worker starts at. Joining, it
 * also waits (until the timeout) at a server that holds no tensors yet, and
 * adopts the table the servers hold, which must be one table. Returns 0,
 * -PS_ETIMEOUT (unreachable, silent past the request timeout, or no tensors
 * declared by then), -PS_EMISMATCH (joining: the servers' tables differ),
 * -PS_EREJECTED (the server's reason is logged), -PS_EPROTO (a server broke
 * the protocol or lied: see server_reply.h) or another negative code. */
int ps_kv_client_connect(ps_kv_client *c, uint64_t *start_clock);

/* Starts pulling every tensor for step clock into params[tensor_id]. */
int ps_kv_client_pull(ps_kv_client *c, uint64_t clock, float *const *params);
/* Starts pushing one tensor's gradient (borrowed until wait returns),
 * computed on the weights of the last pull; each server learns which clock
 * those weights had. Each chunk travels as its own frame, so a server applies
 * it while the next is on the wire. Call it for every tensor once per step,
 * as backward produces them (last layer first), then pull and wait.
 * Returns 0, -EINVAL (no such tensor), -PS_ECLOSED (a server is gone) or
 * -EBUSY (the tensor was already pushed this step). */
int ps_kv_client_push_tensor(ps_kv_client *c, int tensor_id, const float *grad);
/* Instead of a gradient, tells each server holding the tensor that no
 * forward used it this step: one frame per chunk marked unused, without a
 * payload (see the Header's `unused` in proto/shardps.proto for what the
 * servers make of it). Counts as the tensor's push of the step; returns as
 * ps_kv_client_push_tensor. */
int ps_kv_client_push_unused(ps_kv_client *c, int tensor_id);
/* ps_kv_client_push_tensor for every tensor, last first. */
int ps_kv_client_push(ps_kv_client *c, const float *const *grads);
/* Moves whatever bytes can move without blocking: call it between pieces of
 * compute so pushes started so far drain while the next layer runs. Returns
 * 0 or the first error so far. */
int ps_kv_client_progress(ps_kv_client *c);
/* Sends the requests started so far at once, without waiting for their
 * answers (wait would send them first thing): the evaluator's first pull is
 * then on its way before it tells anyone it follows the job. Returns 0 or
 * the first error so far. */
int ps_kv_client_flush(ps_kv_client *c);
/* Runs until every started request has completed. Returns 0 or the first
 * error: -PS_ECLOSED when a server went away (the one error worth
 * reconnecting after), -PS_ETIMEOUT when one went silent past the request
 * timeout, -PS_EPROTO when one sent a frame that fails server_reply.h's
 * checks, the server's code for a refused request. Every error is logged
 * with the server's index and address. */
int ps_kv_client_wait(ps_kv_client *c);

/* Once *flag is non-zero, the calls that wait (connect, wait) give up with
 * -EINTR (the sentence says what they waited for; nothing is logged: the
 * program asked for it). Connecting, at once. Waiting, the step is let end
 * as it would, so that the program stops at its boundary: every push of
 * ours is acknowledged first, and the pull is given up only when a server
 * said it holds it for other workers (WAITING) or it has not come
 * PS_KV_STOP_GRACE_MS after the stop was seen. A signal does not wake the
 * client's loop, so while a flag is set the loop looks at it every
 * PS_KV_STOP_CHECK_MS. After -EINTR the client is done: close or abandon
 * it. flag NULL: no flag. */
#define PS_KV_STOP_CHECK_MS 100
#define PS_KV_STOP_GRACE_MS 5000
void ps_kv_client_set_stop_flag(ps_kv_client *c, const volatile sig_atomic_t *flag);

/* The sentence behind the client's first error (it was also logged): ""
 * while there is none. Owned by the client, valid until it is freed. */
const char *ps_kv_client_last_error(const ps_kv_client *c);

/* The oldest clock among the weights of the last pull. In sync mode a worker
 * that fell behind (backup workers, a rejoin) receives newer weights than it
 * asked for, and continues from this clock. */
uint64_t ps_kv_client_weights_clock(const ps_kv_client *c);

/* An evaluator's last snapshot (config.evaluator): the lowest and highest
 * steps applied among the chunks it got, over every server; equal when every
 * chunk had taken in the same steps (always, in sync mode between steps).
 * Returns 0, or -EINVAL for a worker or before a snapshot came. */
int ps_kv_client_snapshot_clocks(const ps_kv_client *c, uint64_t *lo, uint64_t *hi);

/* The tensors: the config's, or once a joiner is connected, the job's.
 * Owned by the client. */
const ps_model_spec *ps_kv_client_spec(const ps_kv_client *c);
/* Rank 0 only: writes the buffers whose values[t] is not NULL (tensor t's
 * words: numel floats, or numel int64s carried as their bytes; borrowed for
 * the call) to the servers, which keep them as they are (no optimizer).
 * Queued before the step's push and pull, every rank's next pull sees
 * them. Returns 0, -EINVAL (not rank 0, or joined), or a negative code. */
int ps_kv_client_write_buffers(ps_kv_client *c, const void *const *values);

void ps_kv_client_stats_get(const ps_kv_client *c, ps_kv_client_stats *out);

/* Embedding rows (transfer/kv_rows.c). table is the row table's id (its position
 * in the spec's row_tables), ids[0..n) any 64-bit IDs, repeats allowed:
 * the client asks each server once for the unique IDs that live there
 * (common/row_place) and sums a push's repeats. Both block until every
 * server concerned answered (completing the requests started before). */

/* The unique IDs of ids[0..n) in uniq (the caller's, n), in the order first
 * seen, and slot[i] = the position of ids[i] in uniq (the caller's, n);
 * seen: the caller's set (common/id_set), reset here. Returns the count of
 * unique IDs, or -ENOMEM. */
long ps_kv_rows_unique(ps_id_set *seen, const uint64_t *ids, size_t n, uint64_t *uniq,
                       uint32_t *slot);
/* Writes the rows of ids as of step clock into out (n x dim floats, the
 * caller's): stored rows, or the table's initial values. Returns 0, -EINVAL
 * (no such table; n past 2^31), -ENOMEM, or what wait returns. */
int ps_kv_client_pull_rows(ps_kv_client *c, uint32_t table, uint64_t clock, const uint64_t *ids,
                           size_t n, float *out);
/* Pushes the gradients grads[i x dim ..] of ids[i] (repeats summed),
 * computed on the weights of the last pull (its clock), to every server: in
 * sync mode one push per server, empty for a server holding none of them,
 * which the step needs from every worker. Returns as pull_rows. */
int ps_kv_client_push_rows(ps_kv_client *c, uint32_t table, const uint64_t *ids, size_t n,
                           const float *grads);

/* Says goodbye to every server: this worker has finished, barriers stop
 * counting it at once, and a server whose workers have all finished exits.
 * Then closes the connections and frees the client. NULL is allowed. */
void ps_kv_client_close(ps_kv_client *c);
/* Closes and frees without a goodbye: the worker means to come back (it is
 * reconnecting), and the servers keep waiting for it to rejoin. */
void ps_kv_client_abandon(ps_kv_client *c);

#endif
