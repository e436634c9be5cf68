/* The worker's checks on what a parameter server sends. A server is a peer
 * like any other: it may be another program, a broken build or a liar. Every
 * frame it sends is held against what we asked for and what the protocol
 * allows before any of it is used; a frame that fails is a protocol
 * violation, never something to retry. Pure functions of a frame and of what
 * the client expects, so the fuzzer and the tests can drive them as they are.
 *
 * Each check returns 0, or -PS_EPROTO and a sentence in why ("sent a
 * PULL_REPLY with dtype 99; only float32 weights are pulled") that the caller
 * logs after the server's name. */
#ifndef PS_SERVER_REPLY_H
#define PS_SERVER_REPLY_H

#include <stddef.h>
#include <stdint.h>

#include "frame.h"

/* The largest clock a server may report when the worker plans no number of
 * steps (total_steps 0): steps are counted in a double in reports, so no job
 * gets past 2^53. */
#define PS_REPLY_MAX_CLOCK ((uint64_t)1 << 53)
/* The heartbeat interval a WELCOME may ask for: 0 (none) or this range. A
 * shorter one would have us flood the server; a longer one is a server that
 * never notices a worker is gone (its heartbeat timeout is 4 intervals). */
#define PS_REPLY_MIN_HEARTBEAT_MS 1
#define PS_REPLY_MAX_HEARTBEAT_MS (86400u * 1000u / 4u)

/* How a server averages pushes, from its WELCOME. */
typedef struct {
    int sync;           /* "sync": staleness 0, pushes of a step are averaged */
    uint32_t staleness; /* 0 sync, UINT32_MAX async, else the ssp bound */
    uint64_t clock;
    uint32_t heartbeat_ms;
    int values_wanted; /* the declaring rank 0 is to WRITE its initial values */
} ps_reply_welcome;

/* A WELCOME answering the HELLO with id hello_id: details present, mode one of
 * sync (staleness 0), async (UINT32_MAX), ssp (any other bound, 0 included:
 * it then averages like sync), clock at most max_clock,
 * a heartbeat interval in range, no payload. Fills *out. */
int ps_reply_check_welcome(const ps_frame *f, uint64_t hello_id, uint64_t max_clock,
                           ps_reply_welcome *out, char *why, size_t why_len);

/* The pull in flight on one connection. */
typedef struct {
    uint64_t request_id;
    uint64_t clock; /* the step asked for */
    int sync;       /* sync replies may be newer than asked (the steps applied) */
    /* An evaluator's snapshot: the reply's clock is the lowest steps applied
     * among its chunks and its staleness how far the highest is ahead, both
     * at most max_clock, whatever was asked. */
    int snapshot;
    uint64_t max_clock;
    size_t n_keys;
    const uint64_t *keys; /* borrowed */
    size_t bytes;         /* float32 bytes of those keys */
} ps_reply_pull;

/* A PULL_REPLY header against the pull in flight (e NULL: none is): same id,
 * keys and bytes, float32, status 0, and a clock that is the step asked for
 * (sync: at least it, at most max(max_clock, asked); a snapshot: see
 * ps_reply_pull). Judged on the header
 * alone, before the payload is placed into the parameters. */
int ps_reply_check_pull_header(const Shardps__Header *h, const ps_reply_pull *e, char *why,
                               size_t why_len);
/* The whole PULL_REPLY, once its payload arrived: the header as above, the
 * payload placed (placed: it went straight into the parameters) and every
 * weight finite (the decoder scanned it: f->nonfinite). */
int ps_reply_check_pull(const ps_frame *f, const ps_reply_pull *e, int placed, char *why,
                        size_t why_len);

/* The oldest push in flight on one connection: acks come in order. */
typedef struct {
    uint64_t request_id;
    uint64_t clock;         /* the step it was computed on */
    uint32_t n_keys;        /* chunks in it: at most this many can be dropped as late */
    uint64_t max_staleness; /* sync: 0 */
} ps_reply_push;

/* A PUSH_REPLY against the oldest push in flight (e NULL: none is): same id
 * and clock, dropped count (status) within 0..n_keys, staleness within
 * bound, no payload. */
int ps_reply_check_push(const ps_frame *f, const ps_reply_push *e, char *why, size_t why_len);

/* The rows request in flight on one connection (PULL_ROWS or PUSH_ROWS). */
typedef struct {
    uint64_t request_id;
    uint64_t clock; /* the step asked for, or pushed */
    int push;       /* 1: a PUSH_ROWS, 0: a PULL_ROWS */
    int sync;       /* sync pull replies may be newer than asked */
    uint64_t max_clock;
    uint32_t table, dim;
    uint64_t count; /* unique IDs asked for or pushed */
} ps_reply_rows;

/* A PULL_ROWS_REPLY or PUSH_ROWS_REPLY against the rows request in flight
 * (e NULL: none is): the type that answers it, same id and table. A pull's:
 * count x dim float32 values, every one finite (the decoder scanned them:
 * f->nonfinite), status 0, a clock as a PULL_REPLY's. A push's: same clock, no payload, rows not
 * applied (status) within 0..count and rejected ones among them, staleness 0 in sync. */
int ps_reply_check_rows(const ps_frame *f, const ps_reply_rows *e, char *why, size_t why_len);

/* A WAITING: the server holds the pull in flight (e NULL: none is) for
 * other workers; same id and step, no payload, a reason, copied into reason
 * (printable ASCII only, cut to fit). */
int ps_reply_check_waiting(const ps_frame *f, const ps_reply_pull *e, char *reason,
                           size_t reason_len, char *why, size_t why_len);

/* A REJECT or ERROR: copies the server's reason into reason (printable ASCII
 * only, cut to fit; "(no reason given)" when empty) and returns the code to
 * fail with: -PS_EREJECTED for a REJECT; for an ERROR the server's status
 * when it is one an ERROR carries (-PS_EPROTO, -PS_EMISMATCH, -PS_EREJECTED,
 * -PS_EVERSION, -PS_ETOOBIG, -PS_ECRC, -EINVAL), else -PS_EPROTO. None is a
 * connection loss, so a refusal is never retried by reconnecting. */
int ps_reply_refusal(const ps_frame *f, char *reason, size_t reason_len);

/* "PULL_REPLY", "WELCOME", ... or "type 99": for log lines. */
const char *ps_reply_type_name(int type, char *buf, size_t len);

#endif
