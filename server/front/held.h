/* The pulls the server holds: a pull waits here until the consistency
 * rules allow it (consistency.h) and every update submitted before it has
 * run, then is answered straight from the weights or the rows; one held
 * for long is explained to its worker (WAITING) and in the log. One queue
 * and one reply for both kinds of unit: a dense pull waits for the steps
 * applied to every chunk and for the apply queue, a rows pull for its
 * table's step (rows are applied on the loop). An evaluator's pull is a
 * snapshot: no clock rule holds it, and its reply says the lowest and
 * highest steps applied among the chunks it carries.
 *
 * A pull the rule allows is numbered at that moment; updates numbered
 * later are held back until it is answered, so it cannot be starved by
 * newer pushes and never sees a chunk half updated. A due checkpoint holds
 * back the same way, and pulls numbered after it wait until it is written.
 * The front releases after every event (kv_server.c). */
#ifndef PS_HELD_H
#define PS_HELD_H

#include <stdint.h>

#include "durability.h"
#include "kv_config.h"
#include "membership.h"
#include "pull.h"
#include "row_tables.h"
#include "tensors.h"
#include "units.h"

/* A pull held this long is explained by default: its worker is told why (a
 * WAITING frame naming the ranks the job waits for) and the log says so,
 * again at this interval while it waits. Silence for longer looks like a
 * hang. */
#define PS_HELD_REPORT_MS 5000

typedef struct {
    uint64_t pulls, row_pulls; /* answered */
    uint64_t rows_out;         /* rows sent */
    uint64_t bytes_out;        /* payload bytes sent, of both */
} ps_held_counters;

typedef struct {
    const ps_kv_server_config *cfg; /* borrowed, as the rest */
    const ps_job *job;
    const ps_tensors *tensors;
    const ps_row_tables *rows;
    const ps_units *units;
    const ps_durability *dur;
    uv_loop_t *loop;
    uint32_t report_ms;  /* cfg's wait_report_ms, or PS_HELD_REPORT_MS */
    ps_pull *head;       /* held, oldest first */
    uint8_t *wait_ranks; /* scratch for the reasons: by rank, waited for */
    ps_held_counters n;
} ps_held;

/* Returns 0 or -ENOMEM. Every pointer is borrowed and must outlive h. */
int ps_held_init(ps_held *h, uv_loop_t *loop, const ps_kv_server_config *cfg, const ps_job *job,
                 const ps_tensors *tensors, const ps_row_tables *rows, const ps_units *units,
                 const ps_durability *dur);
void ps_held_free(ps_held *h);

/* Holds q (taken over) behind the others. A peer may have
 * PS_HELD_PER_PEER pulls held at once (a well-behaved worker has one or
 * two); one more fails it (q is then freed). */
#define PS_HELD_PER_PEER 16
void ps_held_add(ps_held *h, ps_pull *q);
/* Answers every held pull the rules and the apply queue allow, and holds
 * back the updates numbered after the oldest one that waits for them. */
void ps_held_release(ps_held *h);
/* Forgets p's held pulls (p NULL: everyone's). */
void ps_held_drop(ps_held *h, ps_peer *p);
/* Tells each worker whose pull the job holds what it waits for (a WAITING
 * frame): every report_ms, the first time after report_ms (before the job
 * starts: at once); and logs the pulls held report_ms or more once for
 * them all. */
void ps_held_report(ps_held *h);

#endif
