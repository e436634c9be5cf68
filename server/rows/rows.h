/* Row tables as units: the server's side of PULL_ROWS and PUSH_ROWS
 * (proto/shardps.proto), judged by row_wire.h's pure rules on the header
 * before a payload byte is stored and on the payload before anything
 * changes, so a refused request leaves every table as it was.
 *
 * Consistency as for dense chunks, a table being one unit (units.h):
 *   sync   every live worker sends one push per table per step (empty when
 *          none of its IDs live here); pushes are summed per ID in arrival
 *          order (row_accum.h) and the step applied once the front finds it
 *          complete, each row taking sum / pushes, as a chunk takes the
 *          mean. A pull for step t waits until the table's step t - 1 is
 *          applied.
 *   async  a push is applied on arrival at the rate of its step, damped by
 *   ssp    its staleness as a chunk's is; a pull is answered when the
 *          chunks' rule would answer it.
 * Rows are read and applied on the loop (not the thread pool): a pull's
 * reply is the rows as they are when it is answered. */
#ifndef PS_ROWS_H
#define PS_ROWS_H

#include <stdint.h>

#include "kv_config.h"
#include "membership.h"
#include "pull.h"
#include "row_tables.h"
#include "tensors.h"
#include "units.h"

typedef struct {
    uint64_t pulls, pushes; /* rows requests served */
    uint64_t rows_out, rows_in;
    uint64_t bytes_in;  /* push payload bytes */
    uint64_t refused;   /* requests refused: a NaN or Inf gradient, an ID named twice */
    uint64_t nonfinite; /* of those, for NaN or Inf */
    uint64_t dropped;   /* pushes dropped: repeats, late for their step */
    uint64_t unstable;  /* row updates refused: they would make a row non-finite */
} ps_rows_counters;

typedef struct {
    const ps_kv_server_config *cfg; /* borrowed, as the rest */
    const ps_job *job;
    const ps_tensors *tensors; /* the declarations (names, dims) and the pool */
    ps_units *units;
    ps_row_tables *tables;
    ps_rows_counters n;
} ps_rows;

void ps_rows_init(ps_rows *r, const ps_kv_server_config *cfg, const ps_job *job,
                  const ps_tensors *tensors, ps_units *units, ps_row_tables *tables);

/* The place callback's part for PULL_ROWS and PUSH_ROWS: the header judged
 * (row_wire.h) before a byte of the payload is stored. Returns 0, or
 * -PS_EPROTO after failing the peer. */
int ps_rows_judge(ps_rows *r, ps_peer *p, const Shardps__Header *h);
/* Handles p's PUSH_ROWS f. Returns 0, or -1 when the peer was failed or
 * closed. */
int ps_rows_push(ps_rows *r, ps_peer *p, const ps_frame *f);
/* Judges p's PULL_ROWS f and returns the pull to hold (owned by the
 * caller), or NULL when the peer was failed or closed. */
ps_pull *ps_rows_pull(ps_rows *r, ps_peer *p, const ps_frame *f);
/* Sync: row table `table`'s step is complete (units.h): its summed rows
 * are applied, each at 1 / pushes. The caller then advances the unit. */
void ps_rows_apply_step(ps_rows *r, int table);

#endif
