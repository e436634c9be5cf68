/* Dense chunks as units: the PUSH and PULL of a worker (or an evaluator's
 * PULL), judged against the keys, dtypes, sizes and clocks before anything
 * changes, and the optimizer work a push becomes: accumulated into the step
 * it was computed for and applied once the front finds the step complete
 * (sync), or applied on arrival (async, ssp). The work is submitted to the
 * tensors' apply queue; when replies may see it is the front's to decide.
 *
 * A handler here changes only the units' clocks, the apply queue, its own
 * counters and the pushing peer's progress; what follows (a step applied,
 * pulls released, a checkpoint) is sequenced by the front. */
#ifndef PS_CHUNKS_H
#define PS_CHUNKS_H

#include <stdint.h>

#include "kv_config.h"
#include "membership.h"
#include "pull.h"
#include "tensors.h"
#include "units.h"

/* Staleness of applied gradients: exact counts up to PS_CHUNKS_STALE_BINS - 1. */
#define PS_CHUNKS_STALE_BINS 256

typedef struct {
    uint64_t pushes, bytes_in; /* push frames taken, their payload bytes */
    uint64_t applied;          /* chunk updates applied (sync steps, async pushes) */
    uint64_t dropped;          /* chunk pushes dropped: repeats, late for their step */
    uint64_t nonfinite;        /* pushes refused for NaN or Inf */
    uint64_t unstable;         /* updates refused: they would make a chunk non-finite */
    uint64_t too_large;        /* chunks refused by --max-grad-norm */
    uint64_t stale_hist[PS_CHUNKS_STALE_BINS];
    uint64_t stale_sum, stale_max;
} ps_chunks_counters;

typedef struct {
    const ps_kv_server_config *cfg; /* borrowed, as the rest */
    const ps_job *job;
    ps_tensors *tensors;
    ps_units *units;
    ps_chunks_counters n;
} ps_chunks;

void ps_chunks_init(ps_chunks *d, const ps_kv_server_config *cfg, const ps_job *job,
                    ps_tensors *tensors, ps_units *units);

/* The place callback's part for a PUSH: its header judged before a byte of
 * its payload is stored. Returns 0, or -PS_EPROTO (-ENOMEM) after failing
 * (closing) the peer. */
int ps_chunks_judge_push(ps_chunks *d, ps_peer *p, const Shardps__Header *h);
/* Handles p's PUSH f. Returns 0, or -1 when the peer was failed or closed
 * (nothing of the push kept). */
int ps_chunks_push(ps_chunks *d, ps_peer *p, const ps_frame *f);
/* Judges p's PULL f (a worker's, or an evaluator's snapshot) and returns
 * the pull to hold (owned by the caller), or NULL when the peer was failed
 * or closed. */
ps_pull *ps_chunks_pull(ps_chunks *d, ps_peer *p, const ps_frame *f);
/* Sync: chunk local's step is complete (units.h): its mean gradient is
 * applied, at the rate of that step. The caller then advances the unit. */
void ps_chunks_apply_step(ps_chunks *d, int local);

#endif
