/* The key-value client's shared state (kv_client.h's ps_kv_client), for the
 * client's own files only; nothing outside lib/ includes this, and the
 * interface stays kv_client.h. Single-threaded: everything here is touched
 * on the client's private loop, which runs only inside ps_kv_client_connect
 * / _wait / _progress and while the client is freed.
 *
 * The files, top down; each calls only the ones below it:
 *   front/kv_front.c        creation, connecting, freeing; routes every event
 *                           (a connection opened, a frame, where a reply's
 *                           payload lands) to the file that owns it, and runs
 *                           what follows (a WELCOME: the heartbeats)
 *   transfer/kv_rows.c      embedding rows: pulls and pushes by ID
 *   transfer/kv_transfer.c  dense pulls, pushes and writes, and their replies
 *   session/kv_handshake.c  HELLO, auth, WELCOME or a refusal, a joiner's table
 *   session/kv_wait.c       the loop until every request is answered:
 *                           deadlines, heartbeats, WAITING, the stop flag
 *   session/kv_conn.c       connecting, retrying with backoff, corking, a
 *                           connection that closes
 *   core/kv_state.c         this state: the chunk layout, the first error
 *   core/server_reply.c     the checks of every server frame (pure)
 * A lower file that must report upward does it through a return value or
 * through ps__client_hooks, which the front sets. Each part of a server's
 * state below is written by the file its comment names (a field another
 * file writes says so); the others only read it. */
#ifndef PS_KV_STATE_H
#define PS_KV_STATE_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "auth.h"
#include "frame.h"
#include "id_set.h"
#include "kv_client.h"
#include "partition.h"
#include "server_reply.h"
#include "transport.h"

typedef struct ps__remote ps__remote;

/* kv_conn.c's: the connection to one server and its retries. The retry
 * timer is initialised and closed with the client (kv_front.c). */
typedef struct {
    /* The open connection, or NULL. The transport owns it and frees it
     * after its close callback, which sets this back to NULL. */
    ps_conn *conn;
    int heard;                 /* a frame came on this connection: it speaks shardps */
    uint64_t retry_ms;         /* the backoff before the next attempt */
    uint64_t next_wait_log_ms; /* loop time of the next "waiting for server" line */
    uv_timer_t retry;
    int retrying; /* this connection was refused for now; a new one is coming */
    int corked;   /* requests wait on the connection until ps_kv_client_wait */
} ps__remote_link;

/* kv_handshake.c's: the handshake on the connection. */
typedef struct {
    int welcomed;
    ps_reply_welcome welcome;
    uint64_t hello_id;
    uint8_t client_nonce[PS_AUTH_NONCE_BYTES];
    int server_proved; /* the server showed it holds the auth token */
    /* Joining: the table this server sent in its TABLE frame (owned), until
     * its WELCOME confirms it by digest. */
    ps_model_spec told;
} ps__remote_hello;

/* kv_wait.c's: the answer this server owes us. */
typedef struct {
    /* The time from which the answer is counted: the HELLO, the start of a
     * wait, or its last frame, whichever is latest. */
    uint64_t since_ms;
    /* The server's last word on why our pull waits (a WAITING frame): the
     * reason, for the pull with id waiting_id, said at waiting_ms. It is no
     * answer, so the deadline stands; but a timeout then names what the
     * server waited for rather than blaming it. */
    char waiting[256];
    uint64_t waiting_id, waiting_ms;
    /* A pull or rows pull was answered here: the job has started. Set by
     * the reply handlers (kv_transfer.c, kv_rows.c). */
    int answered;
} ps__remote_owed;

/* kv_state.c's ps__state_layout: this server's keys in key order and their
 * chunks, fixed once laid out. Every array is owned by the client and freed
 * with it (ps__state_free). */
typedef struct {
    int n_keys;
    uint64_t *keys;
    const ps_chunk **chunks;
    ps_frame_piece *pieces; /* where a pull reply's chunks land */
    size_t bytes;
    uint16_t *half;  /* --compress fp16/bf16: the push payloads (see kv_transfer.c) */
    size_t *half_at; /* where chunk i's values start in half */
} ps__remote_share;

/* kv_transfer.c's: the dense requests in flight. At most one pull, and one
 * push per chunk, which wait in pushes (a ring of n_keys, allocated by the
 * layout) since acks come in order. */
typedef struct {
    /* The clock of the weights in the last pull reply; before one, the
     * WELCOME's (set by kv_handshake.c). */
    uint64_t pulled_clock;
    uint64_t pulled_hi; /* an evaluator's: the newest chunk's steps in it */
    int pulled;         /* a pull reply came on this connection */
    ps_reply_pull pull;
    float *const *pull_dest; /* the caller's tensors, borrowed until the reply; NULL: no pull */
    ps_reply_push *pushes;
    int push_head, push_n;
} ps__remote_dense;

/* kv_rows.c's: the rows request in flight, at most one. A pull's rows land
 * in dest (req.count x req.dim floats, the client's scratch or the
 * caller's, borrowed until the reply) through piece. */
typedef struct {
    ps_reply_rows req;
    int busy;
    float *dest;
    ps_frame_piece piece;
} ps__remote_rows;

/* One server as this client sees it. */
struct ps__remote {
    ps_kv_client *cl;
    int index;
    char addr_text[96];
    struct sockaddr_storage addr;
    ps__remote_link link;
    ps__remote_hello hs;
    ps__remote_owed owed;
    ps__remote_share share;
    ps__remote_dense dense;
    ps__remote_rows rows;
};

/* kv_rows.c's scratch, kept from call to call so that a large call faults
 * no pages in: the IDs seen, and the rows of a pull (or the summed
 * gradients of a push) grouped by server. Owned by the client. */
typedef struct {
    ps_id_set seen;
    float *buf;
    size_t buf_floats;
    uint64_t *pushed; /* by row table: 1 + the step of its last rows push (0: none yet) */
} ps__client_rows;

/* What the front (kv_front.c, in ps_kv_client_init) has the lower files
 * call where an event needs more than they own, so that none calls up. */
typedef struct {
    /* sv's connection has just opened (kv_conn.c): the handshake starts. */
    void (*on_open)(ps__remote *sv);
    /* A frame from sv, the client not failed (kv_conn.c). */
    void (*on_frame)(ps__remote *sv, const ps_frame *f);
    /* Every connection's place callback (transport.h): where an incoming
     * reply's payload lands. */
    ps_conn_place_cb place;
} ps__client_hooks;

struct ps_kv_client {
    uv_loop_t loop;
    ps_kv_client_config cfg;
    ps__client_hooks hooks;
    ps_partition *part;
    ps__remote *servers;
    int n_servers;
    int n_timers; /* servers whose retry timer is initialised */
    uint64_t next_id;
    int outstanding;
    int error;
    uint64_t deadline_ms; /* loop time the connect timeout ends */
    int connecting;       /* servers that have not welcomed us yet */
    uv_timer_t heartbeat;
    uv_timer_t deadline;   /* wakes the loop when a server's answer is overdue */
    uint64_t request_ms;   /* the request timeout in force */
    uint64_t max_clock;    /* the last step a server may report */
    int welcomes;          /* servers that welcomed us on this client */
    ps_reply_welcome mode; /* the first WELCOME's mode, which every server must share */
    int auth;
    uint8_t auth_key[PS_AUTH_KEY_BYTES];
    /* The config declared no tensors: the first WELCOME's table becomes
     * cfg.spec, every other server must hold the same, and the chunks are
     * laid out once all have welcomed us (ps__state_layout). */
    int joining;
    /* Declaring: the table as a TABLE frame's payload (owned) and its
     * digest, which the HELLO carries and every WELCOME must repeat. */
    uint8_t *table_packed;
    size_t table_len;
    uint8_t digest[PS_TABLE_DIGEST_BYTES];
    int has_int64; /* the table holds int64 tensors (pull replies rescanned) */
    ps_kv_client_stats stats;
    uint64_t stop_seen_ms; /* loop time a wait first saw the stop flag set; 0: not yet */
    char last_error[512];  /* the sentence behind error */
    ps__client_rows rows;
};

/* Records the client's first error (logged; kept for ps_kv_client_last_error)
 * and ignores every later one, which only follows from it. */
__attribute__((format(printf, 3, 4))) void ps__failf(ps_kv_client *c, int err, const char *fmt,
                                                     ...);
/* A server broke the protocol or lied: fails the client with -PS_EPROTO. */
void ps__distrust(ps__remote *sv, const char *why);
/* Cuts cfg.spec into chunks and gives each server its share of the keys
 * (allocations owned by the client). Returns 0 or a negative code. */
int ps__state_layout(ps_kv_client *c);
/* The largest answer sv may send besides a rows pull's: a pull of all its
 * keys, within max-payload. */
size_t ps__state_reply_limit(const ps__remote *sv);
/* Frees every allocation of the client and the client itself, once its
 * handles are closed and its loop is closed (kv_front.c). */
void ps__state_free(ps_kv_client *c);

#endif
