/* The worker's --metrics-file: one JSON object per line, per progress
 * interval, per test-set evaluation, and once at the end, for the experiment
 * runner and anyone else who wants a run's numbers without parsing logs.
 *
 * Besides loss, accuracy, throughput, traffic and staleness it splits the
 * worker's time three ways:
 *  - compute: gathering the batch and the forward/backward pass (and clipping
 *    and any --slow-ms straggling, which stand in for slower compute);
 *  - communication: the part of each exchange (push, pull, wait, loading the
 *    pulled weights) that the fastest exchange so far also took, i.e. what
 *    moving the bytes and applying them costs when nobody waits;
 *  - waiting: the rest of each exchange, i.e. time spent blocked beyond that
 *    floor: for other workers at a sync barrier or an ssp bound, behind other
 *    workers' requests at a busy server, or on a slow network moment.
 * The worker cannot see the server's gate, so the floor is the best split it
 * can make alone; it is exact when the network is steady.
 *
 * Every field is documented in docs/experiments.md. Disabled (all calls are
 * no-ops) when opened with a NULL path. */
#ifndef PS_TRAIN_METRICS_H
#define PS_TRAIN_METRICS_H

#include <stdint.h>
#include <stdio.h>

#include "shardps.h"

typedef struct {
    FILE *f; /* owned; NULL when off */
    int rank, steps_per_epoch;
    double t0, eval_s, min_exchange_s;
    uint64_t total_steps, total_samples;
    double total_compute_s, total_comm_s, total_wait_s;
    /* The interval in progress. */
    double last_t, compute_s, comm_s, wait_s, loss_sum;
    uint64_t steps, correct, samples;
} ps_train_metrics;

/* path NULL: disabled. Returns 0 or -errno (the file could not be opened;
 * the caller says so). Starts the clock. */
int ps_train_metrics_open(ps_train_metrics *m, const char *path, int rank, int steps_per_epoch);
/* One step: seconds computing, seconds exchanging with the servers, the
 * batch's mean loss and correct predictions out of batch samples. */
void ps_train_metrics_step(ps_train_metrics *m, double compute_s, double exchange_s, float loss,
                           int correct, int batch);
/* Ends an interval: writes its line and starts the next. step counts steps
 * done by the job as this worker knows it; clock is the weights' clock. */
void ps_train_metrics_interval(ps_train_metrics *m, uint64_t step, uint64_t clock,
                               const shardps_stats *ks);
/* A test-set evaluation that took seconds; not counted as training time. */
void ps_train_metrics_eval(ps_train_metrics *m, uint64_t step, double accuracy, double loss,
                           double seconds);
/* Writes the closing line (when ks is not NULL) and closes the file. */
void ps_train_metrics_close(ps_train_metrics *m, uint64_t step, const shardps_stats *ks);

#endif
