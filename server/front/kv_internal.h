/* The key-value server's shared state, for its own files only; nothing
 * outside server/ includes this. Everything here is touched on the libuv
 * loop thread only, except what an update job reads on the pool (see
 * apply_queue.h).
 *
 * The front's files call in one direction, top to bottom:
 *   kv_server.c   the dispatcher: listener, one peer per connection, each
 *                 frame to its handler, membership, timers, lifecycle;
 *   handshake.c · pulls.c · pushes.c · durability.c · tensors.c
 *                 the handlers, each one job; they may call each other;
 *   peer.c · clocks.c · keys.c
 *                 what the handlers and the dispatcher share: a peer's
 *                 refusal, the job's clocks and membership view, a request's
 *                 keys.
 * Nothing calls up: tests/docs/server_layers.sh (ctest server_layers) fails
 * on a call from a handler into kv_server.c, or from a shared file into
 * either. */
#ifndef PS_KV_INTERNAL_H
#define PS_KV_INTERNAL_H

#include <stdatomic.h>
#include <stdint.h>

#include "apply_queue.h"
#include "buf_pool.h"
#include "consistency.h"
#include "id_set.h"
#include "kv_server.h"
#include "partition.h"
#include "shard.h"
#include "table_life.h"
#include "transport.h"

/* Queued reply bytes past which a peer's requests are no longer read: two
 * full pulls of this shard plus this headroom (tensors.c), so a well-behaved
 * worker (one pull in flight) never waits on it and a peer that never reads
 * costs little; before admission, the headroom alone. */
#define PS__WRITE_QUEUE_HEADROOM ((size_t)16 << 20)
/* A pull held this long is explained by default: its worker is told why (a
 * WAITING frame naming the ranks the job waits for) and the log says so,
 * again at this interval while it waits. Silence for longer looks like a
 * hang. */
#define PS__WAIT_REPORT_MS 5000

typedef enum {
    PS__PEER_HANDSHAKE, /* waiting for HELLO */
    PS__PEER_AUTH,      /* challenged; waiting for AUTH_RESPONSE */
    PS__PEER_TABLE,     /* proven (or no auth), declaring: waiting for its TABLE */
    PS__PEER_WORKER,
    /* Admitted read-only (handshake.c): holds no rank, is in no barrier,
     * quorum or worker slot, cannot push; its pulls are answered at once
     * (pulls.c). */
    PS__PEER_EVALUATOR,
    PS__PEER_GONE,
} ps__peer_state;

typedef struct ps__peer {
    struct ps__peer *next, *prev; /* every connection, for stop */
    ps_kv_server *srv;
    ps_conn *conn;
    ps__peer_state state;
    int failed;       /* an ERROR is on its way; ignore further frames */
    int declarer;     /* admitted with a HELLO that declared the tensors (tensors.c) */
    int agreed;       /* its HELLO's job settings were compared and agree (1) or absent (0) */
    uint64_t planned; /* steps it plans, from an agreeing HELLO (0: none counted) */
    uint32_t rank;
    uint64_t clock;   /* steps fully pushed to this server */
    uint64_t earned;  /* its join clock, or 1 + the step of its last complete push */
    int keys_pushed;  /* keys pushed so far at `clock` */
    uint64_t *pushed; /* the rank's push record (borrowed from the server) */
    int pending;      /* pulls waiting in the server's queue */
    uint64_t fed;     /* sync: 1 + step its last push went into (0: none) */
    uint64_t n_pushes, n_pulls, bytes_in, bytes_out;
    uint64_t last_seen; /* loop time (ms) of its last frame */
    char name[96];      /* "worker 1 (127.0.0.1:40000)" for logs */
    /* Authentication or the declared table in progress: the HELLO waits
     * here until it is proven and its TABLE has come, a deep copy (owned:
     * shardps__hello__free_unpacked), as the frame goes away. */
    Shardps__Hello *hello;
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
    uint64_t since; /* loop time (ms) it was queued */
    uint64_t told;  /* loop time (ms) its worker was last told why it waits; 0: never */
    size_t n_keys;
    int *locals; /* local chunk indices, in the order requested */
    /* 0 until the clock rule allows an answer; then the apply queue's number
     * at that moment: the reply waits for every update submitted before. */
    uint64_t seq;
    /* An evaluator's: no clock rule holds it, only the start (the weights
     * are filled then). lo, hi: the lowest and highest of its chunks' steps
     * applied (their `newest`), taken when it is numbered, which is when the
     * updates it will see are fixed. */
    int snapshot;
    uint64_t lo, hi;
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
    int rc;            /* the shard's answer, read by done */
    ps_kv_server *srv; /* for done's counters */
    float lr;
    const float *grad; /* inside buf */
    ps__push_buf *buf;
} ps__update;

/* One embedding table's share on this server (rows.c). */
typedef struct {
    struct ps_row_store *store;
    struct ps_row_accum *accum; /* sync: the step's pushes summed */
    ps_chunk_clock clock;       /* as a chunk's: the step accumulated, pushes, newest applied */
    uint32_t dim;
} ps__row_table;

/* A rows pull the clock rule holds (sync: the table's step not applied
 * yet), with its IDs. */
typedef struct ps__row_pull {
    struct ps__row_pull *next;
    ps__peer *peer;
    uint64_t request_id, clock;
    uint32_t table;
    size_t n;
    uint64_t *ids;  /* owned */
    uint64_t since; /* as a dense pull's: loop time (ms) it was queued */
    uint64_t told;  /* loop time (ms) its worker was last told why it waits; 0: never */
} ps__row_pull;

/* Staleness of applied gradients: exact counts up to PS__STALE_BINS - 1. */
#define PS__STALE_BINS 256

struct ps_kv_server {
    uv_loop_t *loop;
    ps_kv_server_config cfg;
    /* The job's tensors, once declared (tensors.c); until then there is no
     * partition or shard, n_local is 0 and no worker is admitted. has_table:
     * they are built (also while a withdrawn table drains); life: where the
     * table is in its life (table_life.h). */
    int has_table;
    ps_table_life life;
    uint64_t applied_base; /* n_applied when the table was adopted */
    int fills_left;        /* chunks whose fill has not finished yet */
    /* Set when the table is withdrawn: fills not yet begun on the pool skip
     * their work (read there, hence atomic). */
    atomic_int fills_cancelled;
    /* values.c: chunks of INIT_VALUES tensors whose values have not come,
     * their copies queued behind fills, which came (per local chunk), and
     * those that came before their chunk's fill (per local chunk; owned). */
    int values_left, writes_inflight;
    uint8_t *written;
    float **pending;
    ps_model_spec table;                         /* owned while has_table */
    uint8_t table_digest[PS_TABLE_DIGEST_BYTES]; /* ps_model_spec_digest(&table) */
    ps_partition *part;
    ps_shard *shard;
    int n_local;
    int n_pushable;       /* local chunks of parameters: a worker's whole step */
    ps_chunk_clock *sync; /* per local chunk */
    uint32_t *seen;       /* per local chunk: stamp of the request that last named it */
    uint32_t seen_stamp;
    uv_tcp_t listener;
    int listening;
    int stopping;
    ps__peer **workers;    /* by rank; NULL while not live */
    uint64_t *live_clocks; /* scratch for ps__view: the live workers' clocks */
    uint8_t *wait_ranks;   /* scratch for ps__wait_reason: by rank, waited for */
    /* By rank, per local chunk: 1 + the step of its last push (0: none). Kept
     * across reconnects, so a rank that rejoins and repeats a push for a step
     * it already fed is recognised and the repeat dropped: exactly once. */
    uint64_t **rank_pushed;
    uint8_t *finished;   /* by rank: said goodbye */
    uint8_t *has_joined; /* by rank: joined at least once (training starts when all have) */
    uint64_t *left_at;   /* by rank: loop time (ms) it left unfinished; 0: it did not */
    uint8_t *lost;       /* by rank: left unfinished and did not rejoin within the timeout */
    int n_lost;
    uint32_t rejoin_timeout_ms; /* cfg's, or its default */
    size_t max_write_queue;
    ps_buf_pool *bufs; /* push payloads and the unsent rest of pull replies, reused */
    ps_apply_queue *updates;
    /* A checkpoint asked for and waiting for the updates submitted before it
     * (number ckpt_seq) to finish; its clocks are taken when asked. */
    int ckpt_due, ckpt_again;
    uint64_t ckpt_seq, ckpt_due_clock;
    char ckpt_why[32], ckpt_again_why[32];
    uint64_t *ckpt_clocks, *ckpt_newest; /* per chunk, written and restored from here */
    int foreign_logged;                  /* other jobs' files in the directory were named */
    int restoring;                       /* a restore adopted the table of the file it is reading */
    /* ps_kv_server_quiesce: who to tell at the next step boundary, and the
     * deadline for it. */
    ps_kv_server_done_cb quiesce_cb;
    void *quiesce_arg;
    uv_timer_t quiesce_timer;
    int quiesce_timer_on;
    int live;
    int started;             /* every rank has joined once */
    int joined;              /* ranks that have joined at least once */
    uint64_t resume_clock;   /* where a worker joining with nobody live starts */
    uint64_t restored_clock; /* the clock of the checkpoint restored (0: none) */
    int n_peers;             /* open connections */
    int n_evaluators;        /* of those, admitted evaluators (handshake.c) */
    ps__pull *pulls;         /* waiting pulls, oldest first */
    ps__peer *peers;         /* every open connection */
    ps_kv_server_done_cb done;
    void *done_arg;
    uv_timer_t liveness; /* every connection's deadlines, see ps__on_liveness_check */
    int liveness_on;
    uv_timer_t waits; /* every second: ps__report_waits */
    int waits_on;
    int max_connections;           /* cfg's, or its default */
    uint32_t handshake_timeout_ms; /* cfg's, or its default */
    uint32_t wait_report_ms;       /* cfg's, or PS__WAIT_REPORT_MS */
    uint64_t clock_lead;           /* cfg's max_clock_lead, or its default */
    uv_timer_t ckpt_timer;
    int ckpt_timer_on;
    uint64_t ckpt_clock;  /* progress clock of the last checkpoint written or restored */
    uint64_t total_steps; /* the lr schedule's span: configured, restored, or fixed at the
                             start from the plans of the ranks there (tensors.c) */
    uint64_t stale_hist[PS__STALE_BINS];
    uint64_t stale_sum, stale_max;
    /* Counters for the summary line. */
    uint64_t n_pushes, n_pulls, bytes_in, bytes_out, n_applied, n_dropped, n_refused;
    uint64_t n_nonfinite;
    uint64_t n_unstable;  /* updates refused: they would make a chunk non-finite */
    uint64_t n_too_large; /* chunks refused by --max-grad-norm */
    uint64_t n_capped;    /* connections closed to make room (--max-connections) */
    /* Embedding tables (rows.c): one per TensorTable.row_tables, built with
     * the table. row_pushed: by rank x table, 1 + the step of its last rows
     * push (exactly once across reconnects, as rank_pushed). */
    ps__row_table *rows;
    int n_rows;
    uint64_t *row_pushed;
    ps__row_pull *row_pulls; /* held, oldest first */
    ps_id_set row_seen;      /* a request's IDs, to find repeats (reused) */
    const char *rows_note;   /* what the rows counters hold after a restore onto another
                              * number of servers (static text for the summary), or NULL */
    uint64_t n_row_pulls, n_row_pushes, rows_out, rows_in, n_row_refused, n_row_nonfinite;
};

/* peer.c */
/* Refuses p with reason (REJECT during the handshake, ERROR after) and
 * closes once it is written; nothing p sends after this is looked at. Not
 * logged or counted: the caller does that. */
void ps__peer_refuse(ps__peer *p, int err, char *reason);
/* A protocol violation: tell the peer why, log it, count it, and close once
 * the reason is written. */
void ps__peer_fail(ps__peer *p, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* clocks.c */
/* The numbers the consistency rules need, as of now. */
void ps__view(const ps_kv_server *s, ps_consistency_view *v);
uint64_t ps__server_clock(const ps_kv_server *s);
uint64_t ps__progress_clock(const ps_kv_server *s);
/* Why a pull for clock (from a worker that fed step fed - 1) cannot be
 * answered yet, in words for the log and the worker: "waiting for ranks 1, 3
 * of 4 to join", "step 12 is waiting for rank 1 of 2 to push it", "step 16
 * is waiting for rank 2 of 4 to come within --staleness 4". Returns how many
 * ranks it names; 0 (why "") when no rank holds it (the updates before it
 * are being applied, or a checkpoint written). */
int ps__wait_reason(const ps_kv_server *s, uint64_t clock, uint64_t fed, char *why, size_t len);
/* The same for a pull of row table table, held by that table's step. */
int ps__row_wait_reason(const ps_kv_server *s, uint32_t table, uint64_t clock, uint64_t fed,
                        char *why, size_t len);

/* keys.c */
/* Resolves and checks a request's keys: each must exist on this server and
 * appear once. Fills locals; returns the payload bytes they span, or -1
 * after failing the peer. */
long long ps__resolve_keys(ps_kv_server *s, ps__peer *p, const Shardps__Header *h, int *locals);

/* The handlers, called by kv_server.c (and each other). */

/* membership.c: who is in the job. */
/* Takes a worker out of every barrier (BYE, a lost connection, silence, its
 * table withdrawn): its pending pulls are dropped, its pushes for unapplied
 * steps stay, and chunks that only waited for it are applied. */
void ps__worker_leave(ps_kv_server *s, ps__peer *p, const char *why);
/* Ranks that left unfinished more than the rejoin timeout before now (loop
 * ms) are counted as lost. */
void ps__check_rejoins(ps_kv_server *s, uint64_t now);
/* Calls the done callback once the job has started, nobody is live and every
 * rank has finished or is lost. */
void ps__maybe_done(ps_kv_server *s);

/* tensors.c: the table this server holds, through its life (table_life.h). */
/* Builds the partition, shard and per-chunk state of spec (copied), the
 * table's life starting with how (PS_TABLE_DECLARE, _CONFIGURE or
 * _RESTORE). Returns 0, -EEXIST when a table is built already, or a
 * negative code with nothing built. */
int ps__adopt_table(ps_kv_server *s, const ps_model_spec *spec, ps_table_event how);
/* Frees what ps__adopt_table built; the server holds no table after. */
void ps__free_table(ps_kv_server *s);
/* A HELLO's declared table (spec, from its TABLE frame, already checked
 * against the limits; NULL for a joiner, who declares none): compared with
 * the one held (refused with the first difference) or adopted (copied).
 * Rank 0's table outranks one only other ranks declared while it is only
 * declared (table_life.h): that one is withdrawn, its declarers told why,
 * and rank 0's adopted. Returns 0, or -1 after failing the peer. */
int ps__check_table(ps_kv_server *s, ps__peer *p, const Shardps__Hello *hello,
                    const ps_model_spec *spec);
/* Whether this HELLO (declaring spec) is rank 0's and would outrank the
 * table held, were they to differ: then the comparison waits until every
 * other check of the HELLO passed, so a HELLO refused for anything else
 * withdraws nothing. */
int ps__table_may_outrank(const ps_kv_server *s, const Shardps__Hello *hello,
                          const ps_model_spec *spec);
/* p, admitted, declared the table. */
void ps__table_declarer_joined(ps_kv_server *s, ps__peer *p);
/* A table adopted for a HELLO whose sender was then not admitted: withdrawn
 * if nobody else declared it. */
void ps__table_abandoned(ps_kv_server *s);
/* p, an admitted worker, is leaving (from ps__worker_leave): before the
 * start its rank counts as never having joined; if it was the table's last
 * declarer and no step was applied, the table is withdrawn. */
void ps__table_peer_left(ps_kv_server *s, ps__peer *p);
/* Training starts once every rank has joined and the table is filled
 * (filling it if need be); call after a join and after a fill. */
void ps__maybe_start(ps_kv_server *s);
/* Chunk local belongs to a buffer or a frozen tensor: never pushed, out of
 * the sync barrier (its clock is UINT64_MAX, which the server's clock, the
 * least of its chunks', passes over). */
int ps__chunk_static(const ps_kv_server *s, int local);
/* Only a committed table (a step applied, or restored) is checkpointed. */
int ps__table_may_checkpoint(ps_kv_server *s);
/* A filling table is filled once every chunk's fill has run and every
 * initial value it waits for has come (values.c); in_queue: called from a
 * job's done callback inside the apply queue. */
void ps__maybe_filled(ps_kv_server *s, int in_queue);

/* values.c: the declaring rank 0's own initial values (INIT_VALUES). */
/* Counts the chunks that wait for values; with the table's other state. */
int ps__values_init(ps_kv_server *s);
void ps__values_free(ps_kv_server *s);
/* The WELCOME of the declaring rank 0 asks for them. */
int ps__values_wanted(const ps_kv_server *s);
/* Every value has come and been copied in. */
int ps__values_done(const ps_kv_server *s);
/* On the pool, right after chunk local's fill: its values, if they came
 * before it. */
void ps__values_fill(ps_kv_server *s, int local);
void ps__handle_write(ps_kv_server *s, ps__peer *p, const ps_frame *f);

/* handshake.c: the first frames of a connection. */
void ps__handle_hello(ps_kv_server *s, ps__peer *p, const ps_frame *f);
void ps__handle_auth(ps_kv_server *s, ps__peer *p, const ps_frame *f);
/* The declarer's TABLE frame, after its HELLO (and proof). */
void ps__handle_table(ps_kv_server *s, ps__peer *p, const ps_frame *f);
/* In the handshake still: HELLO, AUTH_RESPONSE or TABLE awaited. */
int ps__peer_handshaking(const ps__peer *p);
/* At start, without auth: one line (server 0's) on what a stranger can do. */
void ps__say_strangers(const ps_kv_server *s);

/* pulls.c */
void ps__handle_pull(ps_kv_server *s, ps__peer *p, const ps_frame *f);
/* A frame from an evaluator: what its role allows (validate.h), else refused. */
void ps__handle_evaluator(ps_kv_server *s, ps__peer *p, const ps_frame *f);
/* An evaluator's connection is closing: its pulls are forgotten. */
void ps__evaluator_leave(ps_kv_server *s, ps__peer *p, const char *why);
/* Answers every waiting pull the rules and the apply queue allow. */
void ps__release_pulls(ps_kv_server *s);
/* The apply queue's "settled" callback (arg: the server). */
void ps__on_updates_settled(void *arg);
/* Tells each worker whose pull the job holds what it waits for (a WAITING
 * frame): every wait_report_ms, the first time after wait_report_ms (before
 * the job starts: at once); and logs the pulls held wait_report_ms or more
 * once for them all. */
void ps__report_waits(ps_kv_server *s);
/* Forgets p's waiting pulls (p NULL: everyone's). */
void ps__drop_pulls(ps_kv_server *s, ps__peer *p);

/* pushes.c */
void ps__handle_push(ps_kv_server *s, ps__peer *p, const ps_frame *f);
/* The transport's place callback: where a push payload lands. */
int ps__place_push(ps_conn *c, const Shardps__Header *h, const ps_frame_piece **pieces);
/* Sync: applies a chunk's step once enough live workers have pushed it. */
void ps__maybe_apply(ps_kv_server *s, int local);

/* pushes.c, shared with rows.c: the rate of a step, damped by staleness. */
float ps__lr(const ps_kv_server *s, uint64_t step, uint64_t staleness);
/* The last step of the place callback for a judged frame: its payload of
 * bytes lands in p's pooled buffer (the one of a frame that was then not
 * handled is given back first). Returns 1 with *pieces set, or 0 when the
 * pool has no such buffer (the transport then buffers it itself). */
int ps__place_payload(ps_kv_server *s, ps__peer *p, uint64_t bytes, const ps_frame_piece **pieces);

/* rows.c: the embedding tables this server holds a share of. */
/* Builds one row store per row table of s->table (after the chunks).
 * Returns 0 or a negative code (logged) with nothing built. */
int ps__rows_build(ps_kv_server *s);
void ps__rows_free(ps_kv_server *s);
/* The place callback's part for PULL_ROWS and PUSH_ROWS: the header
 * judged (row_wire.h) before a byte is stored. Same returns as
 * ps__place_push. */
int ps__place_rows(ps_kv_server *s, ps__peer *p, const Shardps__Header *h,
                   const ps_frame_piece **pieces);
void ps__handle_pull_rows(ps_kv_server *s, ps__peer *p, const ps_frame *f);
void ps__handle_push_rows(ps_kv_server *s, ps__peer *p, const ps_frame *f);
/* Answers the held rows pulls the clock rule now allows (from
 * ps__release_pulls). */
void ps__release_row_pulls(ps_kv_server *s);
/* Forgets p's held rows pulls (p NULL: everyone's). */
void ps__drop_row_pulls(ps_kv_server *s, ps__peer *p);
/* Sync: p joined or left: its pushes of the tables' current steps count as
 * live or not, and steps that only waited for it are applied. */
void ps__rows_peer_joined(ps_kv_server *s, ps__peer *p);
void ps__rows_peer_left(ps_kv_server *s, ps__peer *p);
/* Adds the row tables' figures to out. */
void ps__rows_stats(const ps_kv_server *s, ps_kv_server_stats *out);

/* durability.c */
/* Starts the checkpoint timer if one is configured. */
void ps__durability_start(ps_kv_server *s);
void ps__durability_stop(ps_kv_server *s);
/* After a push: a periodic checkpoint if enough steps have passed. */
void ps__maybe_checkpoint(ps_kv_server *s);
/* Writes the due checkpoint once the updates before it are applied. */
int ps__try_checkpoint(ps_kv_server *s);
/* After a push or a worker leaving: tells a quiesce waiting for a step
 * boundary that it has come. */
void ps__maybe_quiesced(ps_kv_server *s);

#endif
