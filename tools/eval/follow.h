/* shardps-eval --follow: the evaluator. It connects to a running job's
 * servers in the read-only evaluator role (include/shardps.h's
 * shardps_new_evaluator), pulls a snapshot of the weights every few
 * seconds, scores it on the test split and writes one JSON line per
 * snapshot, with the lowest and highest steps applied among the snapshot's
 * chunks, so a training curve needs no worker to stop and test
 * (docs/architecture.md, "The evaluator"). It runs at SCHED_IDLE: it gets a
 * core only when training leaves one idle. */
#ifndef PS_FOLLOW_H
#define PS_FOLLOW_H

#include <signal.h>
#include <stdio.h>

#include "dataset.h"
#include "job_check.h"
#include "job_options.h"

typedef struct {
    /* Servers, timeouts, the auth token file, batch, workers; borrowed. */
    const ps_job_options *job;
    const ps_job_plan *plan;           /* the server list and the model (job_check.h); borrowed */
    const ps_dataset *test;            /* scored on; borrowed */
    double every_s;                    /* wait between snapshots */
    int max_snapshots;                 /* stop after this many scored (0: when the job ends) */
    FILE *curve;                       /* one JSON line per snapshot scored; borrowed */
    const volatile sig_atomic_t *stop; /* set by SIGINT/SIGTERM; borrowed */
    /* A launcher's report pipe (SHARDPS_REPORT_FD), told "following" once
     * the first pull is on its way to the servers; -1: none. */
    int report_fd;
} ps_follow_config;

/* Lowers this process's priority to SCHED_IDLE (or, where that is refused,
 * nice 19), then scores snapshots until max_snapshots, until the job's
 * servers are gone (the job ended: 0) or *stop is set (0). Returns 0, or a
 * negative code after one line on stderr (the servers never reachable, a
 * model other than theirs, a refusal). */
int ps_follow_run(const ps_follow_config *cfg);

#endif
