/* What a launcher (shardps-cluster, shardps-run) prints when a job has
 * finished well: the job's figures as a short table, and with --json the
 * same as one JSON line (what tests and shardps-experiment read). Text
 * only; the figures come from the workers' reports (progress.h) and the
 * launcher's options. */
#ifndef PS_SUMMARY_H
#define PS_SUMMARY_H

#include <stdint.h>
#include <stdio.h>

typedef struct {
    /* The job, as the launcher ran it (strings borrowed). */
    const char *prog; /* "shardps-cluster" */
    const char *mode, *compress;
    const char *metrics_dir; /* NULL: none */
    int servers, workers;
    double wall_seconds;
    /* From the workers' reports (ps_progress_summary). */
    double test_accuracy; /* NAN: never evaluated */
    int steps_per_epoch;
    uint64_t steps;                       /* the most steps a worker computed */
    double samples, seconds;              /* all workers' samples; the longest training time */
    double bytes_pushed;                  /* all workers' gradient payloads */
    double staleness_mean, staleness_max; /* over the workers' applied pushes */
    uint64_t dropped, rejected;           /* chunks not applied; rejected is part of dropped */
    int lost;                             /* workers that did not report "done" */
} ps_summary;

/* Prints s to out, and with json also the JSON line; flushes out. */
void ps_summary_print(const ps_summary *s, int json, FILE *out);

#endif
