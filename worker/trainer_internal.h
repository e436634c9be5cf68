/* What the two halves of the trainer share (see trainer.h): the trainer's
 * state, and what trainer_report.c says on its behalf. trainer.c runs the
 * job (joins it, loops over the steps, leaves it) and calls down into
 * trainer_report.c, which never calls back. */
#ifndef PS_TRAINER_INTERNAL_H
#define PS_TRAINER_INTERNAL_H

#include <stdint.h>

#include "backend.h"
#include "dataset.h"
#include "report.h"
#include "shardps.h"
#include "train_metrics.h"
#include "trainer.h"

struct ps_trainer {
    ps_trainer_config cfg;
    const ps_job_options *job; /* cfg.job */
    const ps_model_spec *spec; /* the tensor table: cfg.plan's model on this data */
    ps_backend *be;
    shardps *ps; /* the job's client, include/shardps.h */
    ps_dataset train, test;
    float *test_x;  /* the whole test set */
    float *batch_x; /* this step's batch: the backend's buffers (pinned on CUDA) */
    uint8_t *batch_y;
    uint32_t *order; /* this epoch's sample order */
    float *params[PS_MAX_MODEL_TENSORS];
    const float *grads[PS_MAX_MODEL_TENSORS];
    ps_train_metrics tm;
    int eval; /* rank 0 evaluates on the test set */
    int steps_per_epoch;
    uint64_t start, total; /* the clock we joined at, and the last step */
    int push_rc;           /* the first push error of this step (ps__push_layer) */
    int next_report_step;  /* index of the first cfg.report_steps not yet reported */
    int finished;          /* every step done: say goodbye to the servers */
    /* ps__check_divergence: the client's counts at the last step, and how
     * many steps in a row had every chunk refused. */
    uint64_t acked_before, rejected_before;
    int rejected_steps;
};

/* The figures of one progress interval. */
typedef struct {
    /* Steps this process computed, and as many at the last report: counts
     * of this run alone, never clocks (a restored run starts at a clock far
     * above 0, and throughput is over the steps made here). */
    uint64_t steps_done, steps_done_before;
    double last_t, loss_sum;
    int loss_n;
} ps__trainer_interval;

/* One line on the launcher's pipe (its rank filled in); nothing when run
 * alone. */
void ps__trainer_report(const ps_trainer *t, ps_report *r);
/* Evaluates on the test set after step steps: the log and the metrics
 * file, and with report the launcher too. Returns 0 or the backend's
 * error. */
int ps__trainer_evaluate(ps_trainer *t, uint64_t step, double *acc_out, int report);
/* The progress line (or report) of the interval that ends at step, which
 * falls in 0-based epoch; starts the next interval. */
void ps__trainer_progress(ps_trainer *t, ps__trainer_interval *iv, int epoch, uint64_t step);
/* --report-steps: reports step when it reaches the next one named. */
void ps__trainer_report_step(ps_trainer *t, uint64_t step);
/* --dump-weights and --save-model, after the last step. Each returns 0 or a
 * negative code after one error line. */
int ps__trainer_dump_weights(ps_trainer *t);
int ps__trainer_save_model(ps_trainer *t);
/* The summary of a finished run, begun at t0 (ps_clock_now), with acc the
 * last test accuracy (-1: none). */
void ps__trainer_done(ps_trainer *t, const ps__trainer_interval *iv, double t0, double acc);

#endif
