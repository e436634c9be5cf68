/* The units of the job on this server and the one step clock they share.
 *
 * A unit is what a push brings a gradient for and a step updates: a dense
 * chunk (chunks.h) or this server's share of a row table (rows.h). Units
 * 0 .. n_chunks - 1 are the chunks in local order, then one unit per row
 * table. Every unit keeps the same progress (ps_chunk_clock), every rank
 * the same push record of every unit, and every sync step completes by the
 * same rule (consistency.h): enough live workers have pushed it. What a
 * completed step does to a unit's values is its kind's; when it is done is
 * decided here, once, for both.
 *
 * A push is taken in two moves, so that what is recorded is exactly what
 * was kept: ps_units_judge says what one unit's share is (a repeat, late
 * for a step applied without it, or new) and changes nothing; once the
 * kind has kept the gradient, ps_units_count (sync) or ps_units_applied
 * (async, ssp) records it in the rank's push record and counts it toward
 * its step. A share the kind could not keep (out of memory: the peer is
 * closed) is not recorded, so the rank's resend after it reconnects is
 * taken, not dropped as a repeat. Units whose step may have completed are
 * remembered (dirty) until the front asks which are complete
 * (ps_units_next_complete) and applies  * them. Plain memory, no sockets; the loop thread only. */
#ifndef PS_UNITS_H
#define PS_UNITS_H

#include <stddef.h>
#include <stdint.h>

#include "consistency.h"

typedef struct {
    int n_chunks, n_tables, n; /* n = n_chunks + n_tables */
    int world;
    ps_chunk_clock *clock; /* per unit */
    /* By rank x unit: 1 + the step of its last push (0: none). Kept across
     * reconnects, so a rank that rejoins and repeats a push for a step it
     * already fed is recognised and the repeat dropped: exactly once. */
    uint64_t *pushed;
    /* Units whose step may have completed, in the order they were pushed:
     * dirty[next_dirty .. n_dirty) are still to be looked at. */
    int *dirty;
    uint8_t *is_dirty;
    int n_dirty, next_dirty;
    /* Chunks that are never pushed (ps_units_set_static); when every chunk
     * is one, the server has no step of its own and followed is the lowest
     * clock its live workers have pulled, kept as they come and go, or the
     * clock it was restored at (ps_units_follow). */
    int n_static;
    uint64_t followed;
} ps_units;

/* What one unit's share of a push is. */
typedef enum {
    PS_UNIT_NEW,    /* counts toward (sync) or is applied at (async, ssp) its step */
    PS_UNIT_REPEAT, /* this rank's push of that step is in already: dropped */
    PS_UNIT_LATE,   /* sync: the step was applied without it: dropped */
} ps_unit_verdict;

/* What a new share brings to its step. */
typedef enum {
    PS_UNIT_GRAD,    /* a gradient, kept */
    PS_UNIT_REFUSED, /* a gradient refused (non-finite, too large): counts toward completion only */
    PS_UNIT_UNUSED,  /* no gradient (marked unused, or no rows): a zero in the mean */
} ps_unit_part;

/* Units for n_chunks chunks and n_tables row tables, for world ranks.
 * Returns 0 or -ENOMEM (nothing kept). */
int ps_units_init(ps_units *u, int n_chunks, int n_tables, int world);
void ps_units_free(ps_units *u);

/* The unit of row table t. */
static inline int ps_units_table(const ps_units *u, int t)
{
    return u->n_chunks + t;
}
/* rank's push record (n entries). */
static inline uint64_t *ps_units_record(const ps_units *u, uint32_t rank)
{
    return &u->pushed[(size_t)rank * (size_t)u->n];
}

/* The unit is never pushed (a buffer, a frozen tensor): out of the sync
 * barrier, its clock UINT64_MAX, which the server's clock passes over. */
void ps_units_set_static(ps_units *u, int unit);
/* No chunk here is ever pushed (every one static, or none at all): the
 * server has no step of its own, and its clocks follow the job
 * (consistency.h's ps_consistency_stepless_clock). */
int ps_units_stepless(const ps_units *u);
/* A stepless server: the job has reached clock here (the lowest clock of
 * its live workers after a pull, or a restored clock); the server's clock
 * never goes back. UINT64_MAX (nobody live) and a server with a step of its
 * own change nothing. */
void ps_units_follow(ps_units *u, uint64_t clock);

/* What rank's share of a push computed at step for unit is (sync: whether
 * that step is still accumulated). Changes nothing. */
ps_unit_verdict ps_units_judge(const ps_units *u, uint32_t rank, int unit, uint64_t step, int sync);
/* Sync: rank's new share of step, kept by its kind, counts toward the
 * unit's step and is recorded. */
void ps_units_count(ps_units *u, uint32_t rank, int unit, uint64_t step, ps_unit_part part);
/* Async, ssp: rank's gradient computed at step was applied to the unit
 * (and is recorded). */
void ps_units_applied(ps_units *u, uint32_t rank, int unit, uint64_t step);
/* A restore: the unit's step accumulated and 1 + its newest step applied,
 * as the checkpoint kept them. */
void ps_units_restored(ps_units *u, int unit, uint64_t clock, uint64_t newest);

/* A rank that fed a unit's step under way before it left counts toward it
 * again when it is back (joined), and not while it is gone (left): every
 * unit may then have completed (a join completes none by itself: the steps
 * it counts toward need its push as much as before). */
void ps_units_rank_joined(ps_units *u, uint32_t rank);
void ps_units_rank_left(ps_units *u, uint32_t rank);

/* Sync: the next dirty unit whose step is complete with `needed` pushes,
 * or -1 when none is (the dirty set is then empty). The caller applies its
 * step, then calls ps_units_advance. */
int ps_units_next_complete(ps_units *u, int needed);
/* The unit's step is applied: the next one begins. */
void ps_units_advance(ps_units *u, int unit);
/* Forgets the dirty set (async, ssp, or nobody live: nothing completes). */
void ps_units_clean(ps_units *u);

/* Steps applied to every chunk (sync), and how far training has come:
 * that, or 1 + the newest step applied to any chunk (async, ssp). Row
 * tables keep their own clocks. A stepless server's are the job's as it
 * reaches it (ps_units_follow and its row tables'). */
uint64_t ps_units_server_clock(const ps_units *u);
uint64_t ps_units_progress_clock(const ps_units *u, uint32_t staleness);
/* Sync: every chunk at one clock with nothing of that step pushed: a
 * checkpoint taken here resumes exactly. Always true otherwise. */
int ps_units_at_boundary(const ps_units *u, uint32_t staleness);
/* The chunk furthest behind: the first of the lowest clock (0 without
 * chunks). */
int ps_units_lowest_chunk(const ps_units *u);

#endif
