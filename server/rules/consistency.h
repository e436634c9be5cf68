/* The consistency rules of the key-value server as pure functions of clocks
 * and membership: no sockets, no server, only plain numbers in and out, so
 * the unit tests state each rule directly (tests/unit/test_consistency.c).
 *
 * Clocks count steps. A chunk's clock (sync) is the step whose pushes it is
 * accumulating; its `newest` is 1 + the newest step applied to it (0: none).
 * A worker's clock is the step it is working on. Staleness 0 is sync,
 * PS_STALENESS_UNBOUNDED async, anything between ssp. */
#ifndef PS_CONSISTENCY_H
#define PS_CONSISTENCY_H

#include <stddef.h>
#include <stdint.h>

#define PS_STALENESS_UNBOUNDED UINT32_MAX

/* One chunk's progress, as the server keeps it. */
typedef struct {
    uint64_t clock;  /* sync: step whose pushes are being accumulated */
    int pushes;      /* contributions accumulated for `clock` (a push marked unused is one) */
    int used;        /* of those, pushes that carried a gradient */
    int live_pushes; /* pushes for `clock` from workers still live, refused ones too */
    uint64_t newest; /* 1 + newest step applied (0: none), for staleness */
} ps_chunk_clock;

/* What the rules need to know about the job at one moment. */
typedef struct {
    uint32_t staleness;
    int started;             /* every rank has joined once */
    uint64_t server_clock;   /* ps_consistency_server_clock of the chunks */
    uint64_t min_live_clock; /* ps_consistency_min_clock of the live workers */
    uint64_t progress_clock; /* ps_consistency_progress_clock of the chunks */
    uint64_t restored_clock; /* the clock restored from a checkpoint (0: none) */
    uint64_t clock_lead;     /* async, ssp: how far past the job a clock may be */
    /* The chunks' view on a server none of whose chunks is pushed (buffers
     * and frozen tensors only, or none): it has no step of its own, so
     * server_clock and progress_clock are ps_consistency_stepless_clock's,
     * the job's as it reaches this server. */
    int stepless;
} ps_consistency_view;

/* Why a worker's clock is refused (0: it is not). */
typedef enum {
    PS_CLOCK_OK = 0,
    PS_CLOCK_AHEAD,      /* past what the mode allows */
    PS_CLOCK_BEHIND,     /* behind the rank's own clock (async, ssp) */
    PS_CLOCK_MID_STEP,   /* a pull while the rank's push of its step is half done */
    PS_CLOCK_NOT_ITS,    /* async, ssp: a push for another clock than the rank's */
    PS_CLOCK_NOT_STARTED /* a push before every rank has joined */
} ps_clock_verdict;

/* The lowest of n clocks; UINT64_MAX when n is 0 (no live worker). */
uint64_t ps_consistency_min_clock(const uint64_t *clocks, int n);
/* Sync: steps applied to every one of the n chunks (0 without chunks). */
uint64_t ps_consistency_server_clock(const ps_chunk_clock *chunks, int n);
/* The clock of a server with no pushable chunk (a stepless view): no push
 * comes to it, so its clock follows the job: the lowest clock its live
 * workers have pulled, kept as they come and go (followed: it never goes
 * back), or its row tables' (tables, n_tables of them: sync, the steps
 * applied to the furthest; async and ssp, 1 + the newest step applied to
 * any), whichever is further. Its sync pulls are then answered at once,
 * and each pull earns its worker its clock (there is nothing to push for
 * it here), so no step of the job waits for this server. */
uint64_t ps_consistency_stepless_clock(uint32_t staleness, uint64_t followed,
                                       const ps_chunk_clock *tables, int n_tables);
/* How far training has come: steps applied (sync) or 1 + the newest step
 * applied to any chunk (async, ssp). */
uint64_t ps_consistency_progress_clock(uint32_t staleness, const ps_chunk_clock *chunks, int n);
/* Whether a pull for `clock` by a worker whose last push went into step
 * fed - 1 (fed 0: none) may be answered. Nothing is answered before the job
 * has started. Sync: the server's clock has passed both the step asked for
 * and the step the worker fed, so it never gets back the weights it just
 * pushed for. Ssp: clock - (lowest live clock) <= staleness. Async, and a
 * stepless view in every mode (its weights take no step): always. */
int ps_consistency_pull_ready(const ps_consistency_view *v, uint64_t clock, uint64_t fed);
/* The clock a pull reply reports: in sync mode the steps applied (a worker
 * that fell behind catches up to it); otherwise the step asked for. */
uint64_t ps_consistency_reply_clock(uint32_t staleness, uint64_t server_clock, uint64_t asked);
/* Sync: pushes that complete a step: the quorum (0: the whole world), or
 * every live worker if fewer are live. */
int ps_consistency_pushes_needed(int quorum, int world, int live);
/* Sync: whether a chunk's step is complete with `needed` pushes. A step
 * nobody has pushed to is never complete (nothing to pass over). */
int ps_consistency_step_complete(const ps_chunk_clock *c, int needed);
/* Sync: what a complete step applies: the sum of its gradients divided by
 * the returned count of pushes (an unused push is a zero in the mean, as
 * DDP averages a rank's unused parameter), or 0: no update at all, when no
 * push carried a usable gradient (the tensor no rank used: its weights,
 * optimizer state and update count stay as they were). */
int ps_consistency_step_divisor(const ps_chunk_clock *c);
/* A gradient computed at `clock` for a chunk whose newest applied step is
 * newest - 1: how many newer steps the chunk has already taken in. */
uint64_t ps_consistency_staleness(uint64_t newest, uint64_t clock);
/* Where a worker joining now starts: the steps applied (sync); otherwise
 * the lowest clock of the live workers, or resume_clock with none live. */
uint64_t ps_consistency_join_clock(const ps_consistency_view *v, uint64_t resume_clock);

/* The highest clock a worker may name: sync, one step past the steps
 * applied (a stepless view: past those or what this rank has earned, which
 * its pulls there earn); async and ssp, clock_lead past the furthest of the
 * job's progress here, the clock restored from a checkpoint, and what this
 * rank has earned (its join clock, or 1 + the step of its last complete
 * push). Earned, not asked: no request moves the ceiling by itself. Never
 * past UINT64_MAX: a clock at the top saturates rather than wrapping to a
 * ceiling of 0. */
uint64_t ps_consistency_clock_ceiling(const ps_consistency_view *v, uint64_t earned);
/* A PULL for `asked` by a rank at `rank_clock`, `earned` as above, with
 * keys_pushed keys of its current step pushed so far. */
ps_clock_verdict ps_consistency_check_pull(const ps_consistency_view *v, uint64_t rank_clock,
                                           uint64_t earned, int keys_pushed, uint64_t asked);
/* A PUSH computed at `clock` by a rank at rank_clock. Sync pushes are
 * judged per chunk by ps_consistency_sync_push. */
ps_clock_verdict ps_consistency_check_push(const ps_consistency_view *v, uint64_t rank_clock,
                                           uint64_t clock);
/* Sync: one chunk's share of a push at `clock` for a chunk accumulating
 * step chunk_clock: PS_CLOCK_OK (accumulate), PS_CLOCK_BEHIND (that step
 * was applied without it: dropped as late, not an error) or PS_CLOCK_AHEAD
 * (refused). */
ps_clock_verdict ps_consistency_sync_push(uint64_t chunk_clock, uint64_t clock);
/* What a verdict means, for logs and refusals. */
const char *ps_consistency_verdict_text(ps_clock_verdict verdict);
/* Where the job resumes once a rank at `earned` leaves with nobody live:
 * the furthest clock any rank earned, never one it only asked for. */
uint64_t ps_consistency_resume_clock(uint64_t resume_clock, uint64_t earned);

/* What a unit's clocks in a checkpoint are held to, before the file is
 * adopted: the relation they have with the file's own clock (its header's:
 * the progress clock when it was asked for) in the job's mode. With C the
 * file's clock:
 *  - sync, a parameter's chunk: C <= clock <= C + 1 (the server's clock is
 *    the lowest chunk's, and no chunk takes a push past one step beyond
 *    it), newest = clock (each step applied moves both);
 *  - sync, a row table: newest = clock <= C + 1;
 *  - async and ssp, a parameter's chunk: clock <= C (nothing is
 *    accumulated: 0), newest <= C (C is the newest of them);
 *  - async and ssp, a row table: clock <= C (0), newest <= C + 1 + lead
 *    (a rows push names at most the ceiling, lead past the job's clock);
 *  - a buffer's or a frozen tensor's chunk, any mode: newest = 0 (it never
 *    takes a step; its clock is set aside on restore).
 * A clock of 2^64 - 1 in a parameter's chunk would leave it out of every
 * step, and in a row table make its ceiling wrap; neither is a clock any
 * file of C holds. */
typedef enum {
    PS_SAVED_PARAMETER, /* a parameter's chunk */
    PS_SAVED_STATIC,    /* a buffer's or a frozen tensor's chunk */
    PS_SAVED_ROWS,      /* a row table */
} ps_saved_kind;
/* 0 when (clock, newest) of a unit of kind can be in a file of clock
 * file_clock for the mode of staleness and the clock lead; -PS_EFORMAT
 * with the relation broken in why. */
int ps_consistency_saved_clocks(uint32_t staleness, uint64_t lead, uint64_t file_clock,
                                ps_saved_kind kind, uint64_t clock, uint64_t newest, char *why,
                                size_t why_len);

#endif
