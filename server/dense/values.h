/* Values rank 0 writes (issue 23 points 2 and 3): a model's own initial
 * values (INIT_VALUES tensors), and buffers refreshed every step; what is
 * still to come, and what came before its chunk was filled. The WRITE
 * frames themselves are writes.c's; this is the state they leave.
 *
 * The rank 0 that declares the table is told in its WELCOME that this
 * server wants them (ps_values_wanted), and WRITEs them once, each chunk
 * once. Until every one has come the table does not count as filled
 * (ps_values_done): pulls wait, so no rank sees a partly written table,
 * whatever order the ranks started in. A value that arrives before its
 * chunk is filled waits beside it (pending) and the fill copies it in
 * (ps_values_fill); one that arrives later is copied in by a job queued
 * behind the fill. A restored table is committed: its values are the
 * checkpoint's, and none is wanted. A buffer's refresh in sync mode waits
 * here for the step it belongs to (parked).
 *
 * The values are the rank 0's that wrote them only while it stays: one
 * that leaves before the table is filled takes them with it
 * (ps_values_forget), and the next rank 0 is asked for its own, so a
 * stranger posing as rank 0 before the real one cannot set the values the
 * job starts from by writing them and going. */
#ifndef PS_VALUES_H
#define PS_VALUES_H

#include <stdint.h>

#include "model_spec.h"
#include "shard.h"
#include "table_life.h"

/* A buffer's refresh that waits for the step it belongs to (writes.h). */
typedef struct ps_values_refresh ps_values_refresh;
struct ps_values_refresh {
    ps_values_refresh *next;
    uint64_t step; /* seen by the pulls after this step is applied */
    int local;
    float *vals; /* owned */
};

typedef struct {
    int n;            /* local chunks */
    int takes;        /* chunks of INIT_VALUES tensors */
    int left;         /* of those, chunks whose values have not come */
    int inflight;     /* of the initial values that came, those still being copied in */
    uint8_t *written; /* per local chunk: its initial values came */
    float **pending;  /* per local chunk: values that came before its fill (owned) */
    /* Sync: buffers' refreshes waiting for their step, oldest first (owned). */
    ps_values_refresh *parked, **parked_tail;
} ps_values;

/* For the n chunks of shard, a table of spec (both borrowed, read now).
 * Returns 0 or -ENOMEM. */
int ps_values_init(ps_values *v, const ps_shard *shard, const ps_model_spec *spec);
void ps_values_free(ps_values *v);

/* Chunk local is of a tensor that takes the declarer's initial values. */
int ps_values_takes(const ps_shard *shard, const ps_model_spec *spec, int local);
/* The WELCOME of the declaring rank 0 asks for them. */
int ps_values_wanted(const ps_values *v, const ps_table_life *life);
/* The rank 0 that wrote the values left: unless the table is filled by now
 * (or committed, or withdrawn), every chunk's initial values are wanted
 * again, from the next rank 0, and those that came before the fill was
 * submitted are freed (those the fills hold are freed as they run, and
 * the next rank 0's are copied in behind them). Returns how many chunks'
 * values were forgotten. */
int ps_values_forget(ps_values *v, const ps_table_life *life);
/* Every value has come and been copied in. */
int ps_values_done(const ps_values *v);
/* On the pool, right after chunk local's fill: its values, if they came
 * before it (set on the loop before the fill was submitted; read-only
 * since). */
void ps_values_fill(const ps_values *v, ps_shard *shard, int local);
/* The fill of chunk local has run: what waited for it is freed. */
void ps_values_filled(ps_values *v, int local);

#endif
