/* The worker's training loop: one worker's part of a data-parallel job. Each
 * step pulls the weights, computes the gradient of its slice of the global
 * batch on the compute backend, and pushes it; the push of step t and the
 * pull of step t+1 travel together. Rank 0 also evaluates on the test set
 * after every epoch (and every --eval-every steps). A lost server is rejoined
 * at the job's current clock.
 *
 * Data sharding: every worker derives the same shuffled order for an epoch;
 * global batch t is elements [t*W*B, (t+1)*W*B) of it and worker r takes the
 * r-th slice of B. So W workers with batch B see exactly the samples that one
 * worker with batch W*B would, which is what makes sync mode comparable to a
 * single process.
 *
 * Lifecycle: ps_trainer_init (backend, data, connection to every server),
 * ps_trainer_run (every step, the last evaluation, the report), then
 * ps_trainer_free (says goodbye to the servers only after a finished run, so
 * a failed worker keeps its place and may be restarted). */
#ifndef PS_TRAINER_H
#define PS_TRAINER_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#include "job_check.h"
#include "job_data.h"
#include "job_options.h"

/* The most --report-steps a worker takes. */
#define PS_TRAINER_MAX_REPORT_STEPS 16

/* What the trainer runs: the checked job, and this worker's own options.
 * shardps-worker's flag table writes the own options straight into it, so
 * nothing is copied by hand from one struct into another. */
typedef struct {
    /* The job's options and what ps_job_check worked out from them (the
     * servers, the model resolved against the data, the steps to run);
     * both borrowed until ps_trainer_free. */
    const ps_job_options *job;
    const ps_job_plan *plan;
    /* The splits the check read; ps_trainer_init takes them over (they are
     * left zeroed here, freed with the trainer), so the data are read once. */
    ps_job_datasets *data;
    int rank;
    int threads; /* CPU: BLAS threads (0: the library's default) */
    int no_eval; /* rank 0 skips the test-set evaluations */
    /* Rank 0 evaluates once, after its last step, and never stops for it
     * while training: an evaluator (shardps-eval --follow) draws the curve. */
    int eval_at_end;
    int report_fd; /* the launcher's pipe (-1: log progress instead) */
    int slow_ms;   /* wait this long every step (straggler experiments) */
    /* Borrowed until ps_trainer_free; NULL: not written. */
    const char *dump_weights; /* the final weights, raw float32 */
    const char *metrics_file; /* JSON lines, see train_metrics.h */
    /* Steps to report the moment they are reached (the launcher's fault
     * drills), ascending. */
    uint64_t report_steps[PS_TRAINER_MAX_REPORT_STEPS];
    int n_report_steps;
    /* Set (to the signal's number) by a SIGTERM/SIGINT handler: the run
     * stops at the end of the step in progress, so every server is left at
     * the same step boundary, where its checkpoint resumes exactly.
     * Borrowed; NULL: never. */
    volatile sig_atomic_t *stop;
} ps_trainer_config;

typedef struct ps_trainer ps_trainer;

/* Takes over the data, sets up the backend and joins the job (cfg is
 * copied; what it points to is borrowed, see above). Returns 0 or a negative
 * code, having logged why; -PS_EREJECTED when a server refused us (the
 * caller may log its own side). */
int ps_trainer_init(ps_trainer **out, const ps_trainer_config *cfg);

/* Trains to the planned step, evaluates, writes --dump-weights, --save-model
 * (rank 0) and the final report. Returns 0, -EINTR when cfg.stop ended it at
 * a step boundary, or another negative code, having logged why. Call once. */
int ps_trainer_run(ps_trainer *t);

/* NULL is allowed. */
void ps_trainer_free(ps_trainer *t);

#endif
