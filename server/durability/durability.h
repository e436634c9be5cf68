/* Durability: when checkpoints are taken (every N steps, every T seconds,
 * on request), writing them once the updates before them are applied, and
 * restoring the newest usable one at start. The file format is
 * checkpoint.h's.
 *
 * A checkpoint asked for takes the clocks of everything submitted so far
 * (the apply queue's next number); it is written once the updates before
 * that number have run, and dense pulls numbered after it wait for it
 * (held.h), so in sync mode a checkpoint of a step is on disk before any
 * worker sees that step's weights. Embedding rows are written as they are
 * when the file is written, with their tables' clocks (rows are applied on
 * the loop, and a worker's dense pull waits for a due checkpoint, so a
 * worker that pulls before it pushes has pushed the checkpoint's step and
 * nothing after); a sync step pushed but not yet applied is not kept, for
 * rows as for chunks.
 *
 * The timers and the sequence that asks are the front's; this module keeps
 * what is due and does the writing and reading. Loop thread only. */
#ifndef PS_DURABILITY_H
#define PS_DURABILITY_H

#include <stddef.h>
#include <stdint.h>

#include "checkpoint.h"
#include "kv_config.h"
#include "row_tables.h"
#include "tensors.h"
#include "units.h"

typedef struct {
    const ps_kv_server_config *cfg; /* borrowed from the server */
    /* A checkpoint asked for and waiting for the updates submitted before
     * it (number seq) to finish; its clocks are taken when asked. again: one
     * more was asked for meanwhile. */
    int due, again;
    uint64_t seq, due_clock;
    char why[32], again_why[32];
    uint64_t *clocks, *newest; /* per chunk, written and restored from here (owned) */
    int n_chunks;
    uint64_t ckpt_clock; /* progress clock of the last checkpoint written or restored */
    int foreign_logged;  /* other jobs' files in the directory were named */
    int restoring;       /* a restore adopted the table of the file it is reading */
    /* What the rows counters hold after a restore onto another number of
     * servers (static text for the summary), or NULL. */
    const char *rows_note;
} ps_durability;

/* What a restore needs of the front: a table built from a verified file's
 * spec (as ps_kv_server_init's configured one is), and that table freed
 * again if the file fails after all. */
typedef struct {
    int (*adopt)(void *arg, const ps_model_spec *spec);
    void (*release)(void *arg);
    void *arg;
} ps_durability_builder;

/* What a restore found: its clock and schedule span, and each chunk's and
 * row table's clocks (in d->clocks, d->newest and rows). */
typedef struct {
    uint64_t clock, total_steps;
    ps_checkpoint_rows rows; /* 7 KiB */
} ps_durability_restored;

void ps_durability_init(ps_durability *d, const ps_kv_server_config *cfg);
/* A table of n_chunks chunks is built: room for their clocks. Returns 0 or
 * -ENOMEM. */
int ps_durability_adopt(ps_durability *d, int n_chunks);
/* The table is freed (withdrawn, or the server closing): nothing due. */
void ps_durability_release(ps_durability *d);
/* A withdrawn table took the job: its checkpoints' progress is forgotten. */
void ps_durability_forget(ps_durability *d);

/* Names other jobs' and damaged files in the checkpoint directory, once. */
void ps_durability_survey(ps_durability *d, const ps_tensors *t);

/* A checkpoint is asked for (why: "periodic", "timer", "SIGTERM", ...): a
 * due one takes the clocks of everything submitted to t's queue so far, a
 * second one while one is due is taken after it. */
void ps_durability_ask(ps_durability *d, const char *why, const ps_tensors *t, const ps_units *u);
/* Writes the due checkpoint once the updates before it are applied, then
 * the one asked for meanwhile, if any; total_steps: the schedule's span.
 * Returns 0 or a negative errno (logged). */
int ps_durability_try_write(ps_durability *d, const ps_tensors *t, const ps_units *u,
                            const ps_row_tables *r, uint64_t total_steps);
/* A periodic checkpoint is due: enough steps have passed (progress is the
 * progress clock). */
int ps_durability_periodic_due(const ps_durability *d, uint64_t progress);
/* The timer's checkpoint would hold something new. */
int ps_durability_timer_due(const ps_durability *d, uint64_t progress);

/* Loads the newest usable checkpoint at or before max_clock, adopting its
 * table through b when t holds none (t's own otherwise, which the file must
 * hold), into the shard and r's stores; fills out (its span: the file's or
 * total_steps, the job's so far, whichever is longer). The files' clocks
 * are held to their own clock in the job's mode, clock_lead being the
 * job's (ps_consistency_saved_clocks). Returns 0, or a negative code with
 * every refused file and its reason in err (see ps_checkpoint_restore);
 * path gets the file's. */
int ps_durability_restore(ps_durability *d, const ps_durability_builder *b, ps_tensors *t,
                          ps_row_tables *r, uint64_t max_clock, uint64_t total_steps,
                          uint64_t clock_lead, ps_durability_restored *out, char *path,
                          size_t path_len, char *err, size_t err_len);
/* After a restore: what the rows' counters of the summary and /metrics go
 * on from (stored: the rows restored; counted: the files whose counters the
 * stores took), said now and kept for the summary (rows_note). */
void ps_durability_note_rows(ps_durability *d, const ps_row_counters *c, uint32_t counted);

#endif
