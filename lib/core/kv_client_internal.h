/* The key-value client's shared state, for its own files only (kv_client.c,
 * kv_conn.c, kv_handshake.c, kv_wait.c, kv_transfer.c); nothing outside them
 * includes this, and the public interface stays kv_client.h. Single-threaded:
 * everything here is touched on the client's private loop, which runs only
 * inside ps_kv_client_connect / _wait / _progress and while it is freed.
 *
 * The pieces, in the order a step meets them: kv_conn (connecting, retrying
 * with backoff, routing frames, a lost connection), kv_handshake (HELLO,
 * auth, WELCOME or a refusal, a joiner's table), kv_transfer (pulls, pushes
 * and their replies), kv_wait (running the loop until every request is
 * answered, deadlines, heartbeats), kv_client (creating and freeing, the
 * chunk layout, errors). */
#ifndef PS_KV_CLIENT_INTERNAL_H
#define PS_KV_CLIENT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "tensor_table.h"

#include "auth.h"
#include "frame.h"
#include "id_set.h"
#include "kv_client.h"
#include "partition.h"
#include "server_reply.h"
#include "transport.h"

/* The request timeout while no server has said how often it expects a
 * heartbeat (before the WELCOMEs, or servers without heartbeat timeouts). */
#define PS__DEFAULT_REQUEST_MS 30000

/* One server as this client sees it: its connection and handshake, its keys,
 * and what it owes us. The client owns every pointer here; the keys' arrays
 * come from ps__layout and are freed with the client. */
typedef struct {
    ps_kv_client *cl;
    int index;
    char addr_text[96];
    struct sockaddr_storage addr;
    ps_conn *conn;
    int heard; /* a frame came on this connection: it speaks shardps */
    int welcomed;
    ps_reply_welcome welcome;
    uint64_t hello_id;
    uint64_t pulled_clock; /* clock of the weights in the last pull reply */
    uint64_t pulled_hi;    /* an evaluator's: the newest chunk's steps in it */
    int pulled;            /* a pull reply came on this connection */
    int answered;          /* a pull or rows pull was answered here: the job has started */
    /* The time from which the answer this server owes us is counted: the
     * HELLO, the start of a wait, or its last frame, whichever is latest. */
    uint64_t owed_since_ms;
    /* The server's last word on why our pull waits (a WAITING frame): the
     * reason, for the pull with id waiting_id, said at waiting_ms. It is no
     * answer, so the deadline stands; but a timeout then names what the
     * server waited for rather than blaming it. */
    char waiting[256];
    uint64_t waiting_id, waiting_ms;
    uint64_t retry_ms;
    uint64_t next_wait_log_ms; /* loop time of the next "waiting for server" line */
    uv_timer_t retry;
    int retrying; /* this connection was refused for now; a new one is coming */
    uint8_t client_nonce[PS_AUTH_NONCE_BYTES];
    int server_proved; /* the server showed it holds the auth token */
    /* Joining: the table this server sent in its TABLE frame (owned), until
     * its WELCOME confirms it by digest. */
    ps_model_spec told;
    /* This server's keys in key order and their chunks. */
    int n_keys;
    uint64_t *keys;
    const ps_chunk **chunks;
    ps_frame_piece *pieces; /* where a pull reply's chunks land */
    size_t bytes;
    uint16_t *half;  /* --compress fp16/bf16: the push payloads (owned; see ps__push_chunk) */
    size_t *half_at; /* where chunk i's values start in half */
    /* Outstanding requests: at most one pull, and one push per chunk, which
     * wait in pushes (a ring of n_keys) since acks come in order. */
    ps_reply_pull pull;
    ps_reply_push *pushes;
    int push_head, push_n;
    float *const *pull_dest;
    int corked; /* requests wait on the connection until ps_kv_client_wait */
    /* The rows request in flight (kv_rows.c): at most one; a pull's rows
     * land in rows_dest (rows.count x rows.dim floats, the client's
     * scratch or the caller's) through rows_piece. */
    ps_reply_rows rows;
    int rows_busy;
    float *rows_dest;
    ps_frame_piece rows_piece;
} ps__remote;

struct ps_kv_client {
    uv_loop_t loop;
    ps_kv_client_config cfg;
    ps_partition *part;
    ps__remote *servers;
    int n_servers;
    int n_timers; /* servers whose retry timer is initialised */
    uint64_t next_id;
    int outstanding;
    int error;
    uint64_t deadline_ms;
    int connecting;
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
     * laid out once all have welcomed us (ps__layout). */
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
    /* kv_rows.c's scratch, kept from call to call so that a large call
     * faults no pages in: the IDs seen, and the rows of a pull (or the
     * summed gradients of a push) grouped by server. */
    ps_id_set rows_seen;
    float *rows_buf;
    size_t rows_buf_floats;
    /* By row table: 1 + the step of its last rows push (0: none yet). */
    uint64_t *rows_pushed;
};

/* kv_client.c */

/* Records the client's first error (logged; kept for ps_kv_client_last_error)
 * and ignores every later one, which only follows from it. */
__attribute__((format(printf, 3, 4))) void ps__failf(ps_kv_client *c, int err, const char *fmt,
                                                     ...);
/* A server broke the protocol or lied: fails the client with -PS_EPROTO. */
void ps__distrust(ps__remote *sv, const char *why);
/* Cuts cfg.spec into chunks and gives each server its keys (allocations owned
 * by the client). Returns 0 or a negative code. */
int ps__layout(ps_kv_client *c);

/* kv_conn.c */

/* Opens a connection to sv; its frames, its close and its pull replies' bytes
 * are routed to the handlers below. Failure is recorded with ps__failf. */
void ps__start_connect(ps__remote *sv);
/* Closes sv's connection and tries again with backoff until the connect
 * deadline. Returns 1 when a retry is scheduled, 0 when none is left. */
int ps__retry_later(ps__remote *sv, const char *reason);
/* ps__retry_later for a server that asked us to come back (-EAGAIN: no
 * tensors yet for a joiner, its handshake slots taken, a table being
 * withdrawn), saying now and then that it waits. Returns 1 when a retry is
 * scheduled. */
int ps__wait_and_retry(ps__remote *sv, const char *reason);

/* kv_handshake.c. Each handler takes a frame kv_conn routed to it; whatever
 * fails the handshake is recorded with ps__failf or ps__distrust. */

/* Sends the HELLO on sv's connection, just opened. */
void ps__send_hello(ps__remote *sv);
/* AUTH_CHALLENGE: checks the server's proof and sends ours. */
void ps__handle_challenge(ps__remote *sv, const ps_frame *f);
/* WELCOME: sv is admitted; a joiner learns the job's table from it. */
void ps__handle_welcome(ps__remote *sv, const ps_frame *f);
/* kv_transfer.c: one WRITE to sv: initial, rank 0's initial values (every
 * chunk of an INIT_VALUES tensor); else the chunks of the buffers values
 * gives (NULL entries skipped). values[t]: tensor t's words, borrowed for
 * the call. Returns 0 or a negative code (the client failed). */
int ps__send_write(ps__remote *sv, int initial, const void *const *values);
/* Joining: the job's table, sent just before the WELCOME. */
void ps__handle_told_table(ps__remote *sv, const ps_frame *f);
/* REJECT or ERROR: a retry where the refusal is for now, else a failure. */
void ps__handle_refusal(ps__remote *sv, const ps_frame *f);

/* kv_transfer.c */

/* The connection's place callback (transport.h): where a pull reply lands. */
int ps__place_reply(ps_conn *conn, const Shardps__Header *h, const ps_frame_piece **pieces);
void ps__handle_pull_reply(ps__remote *sv, const ps_frame *f);
void ps__handle_push_reply(ps__remote *sv, const ps_frame *f);
/* Sends what requests wait on sv's connection (none: nothing to do). */
void ps__uncork(ps__remote *sv);

/* kv_rows.c */
void ps__handle_rows_reply(ps__remote *sv, const ps_frame *f);
/* The place callback's share for a PULL_ROWS_REPLY (kv_transfer.c): the
 * rows land straight in rows_dest when the header matches the pull in
 * flight; returns the pieces (1) or 0. */
int ps__place_rows_reply(ps__remote *sv, const Shardps__Header *h, const ps_frame_piece **pieces);
/* Frees the rows scratch. */
void ps__rows_client_free(ps_kv_client *c);

/* kv_wait.c */

/* Runs the loop until nothing is outstanding or an error; returns c->error. */
int ps__run_until_done(ps_kv_client *c);
/* The heartbeat timer's callback: a HEARTBEAT to every welcomed server that
 * asked for them. */
void ps__on_heartbeat(uv_timer_t *t);
/* WAITING: the server explains why it holds our pull; said in our log and
 * kept for a timeout's message. */
void ps__handle_waiting(ps__remote *sv, const ps_frame *f);
/* A timer callback that does nothing: the timer only wakes the loop. */
void ps__on_deadline(uv_timer_t *t);

#endif
