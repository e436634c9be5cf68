/* ps-hostile-client's shared parts: what a scenario knows about the job it
 * attacks, one connection, and the helpers every scenario file uses.
 * hostile_client.c holds those helpers, the list of scenarios and main;
 * hostile_frames.c the scenarios on frames and requests; hostile_table.c
 * the ones about tensor tables and connection slots (issue 22). */
#ifndef HOSTILE_CLIENT_H
#define HOSTILE_CLIENT_H

#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "frame.h"
#include "model_spec.h"

/* Everything a scenario needs to know about the job it attacks. */
typedef struct {
    struct sockaddr_storage addr;
    ps_model_spec spec;
    int num_servers, server_index, workers, rank;
    size_t chunk_bytes;
    uint64_t *keys; /* every key the target server holds, in partition order */
    size_t n_keys;
    int timeout_ms;      /* longest wait for any answer from the server */
    int stall_ms;        /* a send blocked this long means the server stopped reading */
    long server_pid;     /* 0: the slow reader cannot measure memory */
    double max_growth;   /* MiB the server's RSS may grow under the slow reader */
    int growth_enforced; /* 0: report the growth without failing on it */
    double silent_s;     /* how long the silent peer waits to be closed */
    int table_floats;    /* huge-table: the floats it declares */
    int probes;          /* huge-table: another peer's round trips measured */
    double max_rtt_ms;   /* huge-table: the slowest of them at most */
    double max_rss_mib;  /* huge-table: the server's RSS at most */
    int idle;            /* idle-slots: connections held */
    uint64_t rng;
} hc_ctx;

/* One connection and what was learnt on it; detail ends up in the report. */
typedef struct {
    int fd;
    char local[64];
    ps_frame_decoder *dec;
    char detail[512];
} hc_conn;

typedef int (*hc_run_fn)(hc_ctx *ctx, hc_conn *c);

typedef struct {
    const char *name;
    const char *what;
    hc_run_fn run;
    int in_all; /* run by "all" (the others wait on the job, not the server) */
} hc_scenario;

/* Appends to the scenario's detail, so each step can add what it saw. */
void note(hc_conn *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Receive and send timeouts of fd; 0 or -errno. */
int set_timeouts(int fd, int recv_ms, int send_ms);
/* A connection to ctx's server with ctx's timeouts; 0 or -errno. */
int conn_open(hc_ctx *ctx, hc_conn *c);
void conn_close(hc_conn *c);
/* Sends everything: 0, -EPIPE/-ECONNRESET, -EAGAIN (no progress for the send
 * timeout) or another -errno. */
int send_all(int fd, const void *data, size_t len);
/* Encodes a correct frame (version, length and CRC) and sends it. */
int send_frame(hc_conn *c, Shardps__Header *h, const void *payload, size_t len);
/* The next frame (the decoder's until the next call): 1, 0 when the server
 * closed, -ETIMEDOUT, or -PS_EPROTO. */
int read_frame(hc_conn *c, ps_frame *f);
/* The server must end the connection within the timeout, after a REJECT or
 * ERROR of want_type and want_status naming want (want_type 0: anything).
 * 0 or -1 (detail says why). */
int expect_refusal(hc_ctx *ctx, hc_conn *c, Shardps__MsgType want_type, int want_status,
                   const char *want);
/* A HELLO as shardps-worker would send it for ctx's job, declaring ctx's
 * table by digest (the packed table, sent by send_hello, lives until the
 * next make_hello). */
void make_hello(const hc_ctx *ctx, Shardps__Header *h, Shardps__Hello *hello);
/* The same, declaring table instead. */
void make_hello_table(const hc_ctx *ctx, Shardps__Header *h, Shardps__Hello *hello,
                      const ps_model_spec *table);
/* The packed table of the last make_hello. */
const uint8_t *hello_table(size_t *len);
/* Sends the HELLO h and, when it declares a table, the TABLE frame that
 * follows it. 0 or a negative code. */
int send_hello(hc_conn *c, Shardps__Header *h);
/* A valid HELLO and its WELCOME: 0 and the clock, or -1. */
int handshake(hc_ctx *ctx, hc_conn *c, uint64_t *clock);
/* The next number of the tool's generator (noise). */
uint64_t next_rand(hc_ctx *ctx);
/* The server's resident memory in MiB, or -1. */
double server_rss_mib(const hc_ctx *ctx);
/* Seconds from connecting to the REJECT of a wrong-model HELLO on a fresh
 * connection (another peer's round trip), or -1. */
double probe(hc_ctx *ctx);

/* hostile_frames.c: frames and requests, the slow reader, the silent peer,
 * and a clean goodbye. sc_wrong_model (a HELLO for another model, refused
 * "model mismatch") is also the probe's request. */
int sc_wrong_model(hc_ctx *ctx, hc_conn *c);
/* hostile_rows.c: embedding rows (issue 24). hc_rows_declare adds the row
 * table "emb" of dim to ctx's table (--row-dim). */
int hc_rows_declare(hc_ctx *ctx, uint32_t dim);
int sc_rows_too_many(hc_ctx *ctx, hc_conn *c);
int sc_rows_short(hc_ctx *ctx, hc_conn *c);
int sc_rows_dup(hc_ctx *ctx, hc_conn *c);
int sc_rows_nan(hc_ctx *ctx, hc_conn *c);
int sc_rows_dim(hc_ctx *ctx, hc_conn *c);
int sc_random_bytes(hc_ctx *ctx, hc_conn *c);
int sc_random_header(hc_ctx *ctx, hc_conn *c);
int sc_truncated(hc_ctx *ctx, hc_conn *c);
int sc_big_header(hc_ctx *ctx, hc_conn *c);
int sc_big_payload(hc_ctx *ctx, hc_conn *c);
int sc_bad_version(hc_ctx *ctx, hc_conn *c);
int sc_nul_name(hc_ctx *ctx, hc_conn *c);
int sc_bad_rank(hc_ctx *ctx, hc_conn *c);
int sc_pull_first(hc_ctx *ctx, hc_conn *c);
int sc_hello_garbage(hc_ctx *ctx, hc_conn *c);
int sc_bad_key(hc_ctx *ctx, hc_conn *c);
int sc_dup_key(hc_ctx *ctx, hc_conn *c);
int sc_short_push(hc_ctx *ctx, hc_conn *c);
int sc_short_f16_push(hc_ctx *ctx, hc_conn *c);
int sc_f16_as_f32(hc_ctx *ctx, hc_conn *c);
int sc_short_bf16_push(hc_ctx *ctx, hc_conn *c);
int sc_bf16_as_f32(hc_ctx *ctx, hc_conn *c);
int sc_bad_dtype(hc_ctx *ctx, hc_conn *c);
int sc_pull_far(hc_ctx *ctx, hc_conn *c);
int sc_push_announced(hc_ctx *ctx, hc_conn *c);
int sc_heartbeat_payload(hc_ctx *ctx, hc_conn *c);
int sc_slow_reader(hc_ctx *ctx, hc_conn *c);
int sc_bye(hc_ctx *ctx, hc_conn *c);
int sc_silent(hc_ctx *ctx, hc_conn *c);

/* hostile_table.c */
int sc_stranger_table(hc_ctx *ctx, hc_conn *c);
int sc_huge_table(hc_ctx *ctx, hc_conn *c);
int sc_idle_slots(hc_ctx *ctx, hc_conn *c);
int sc_table_over_limit(hc_ctx *ctx, hc_conn *c);
int sc_table_digest_lie(hc_ctx *ctx, hc_conn *c);
int sc_no_table(hc_ctx *ctx, hc_conn *c);
int sc_write_not_rank_0(hc_ctx *ctx, hc_conn *c);
int sc_evaluator_push(hc_ctx *ctx, hc_conn *c);

#endif
