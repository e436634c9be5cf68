/* What a library worker tells the launcher that started it (shardps-run,
 * shardps-cluster): the report lines of common/report.h on the descriptor the
 * launcher handed over (SHARDPS_REPORT_FD), so a Python or C program on
 * libshardps shows progress like shardps-worker does. "start" when the
 * handle has joined the job, a "progress" line every few steps from what the
 * program reports (shardps_report: its step, loss and samples), and "done"
 * when it leaves with a goodbye (shardps_close). Without a descriptor the
 * progress lines go to the log instead, as shardps-worker's do when nobody
 * launched it. The last progress line says where the program stopped, so the
 * launcher can tell a program that stopped before the length it announced.
 *
 * A library worker knows neither epochs nor, unless told (total-steps), the
 * run's length: its lines say epoch 0 and steps 0 for "not known". Plain
 * data inside the handle; one thread at a time, like the handle. */
#ifndef PS_JOB_REPORT_H
#define PS_JOB_REPORT_H

#include <stddef.h>
#include <stdint.h>

#include "shardps.h"

typedef struct {
    int fd;    /* the launcher's pipe, or -1: lines go to the log */
    int rank;  /* the worker's */
    int every; /* steps between progress lines */
    int started;
    uint64_t start, total; /* the clock it joined at; the run's last step (0: not known) */
    uint64_t step;         /* the last step reported (start until one is) */
    uint64_t line_step;    /* the step of the last progress line */
    double t_start, t_line;
    double loss_sum;
    int loss_n;
    uint64_t samples_line, samples_total;
} ps_job_report;

/* A report to fd (-1: none) for worker rank. */
void ps_job_report_init(ps_job_report *r, int fd, int rank);

/* The handle joined the job at clock start; the run ends at total (0: not
 * known); a progress line every `every` steps. Writes "start". */
void ps_job_report_start(ps_job_report *r, uint64_t start, uint64_t total, int every);

/* The program has done step (the job's steps so far as it counts them),
 * with loss (NaN: not known) over samples new samples. Writes a progress line
 * when step crosses a multiple of every. Returns 0, or -EINVAL with the
 * reason in err when step is before the last one reported. */
int ps_job_report_step(ps_job_report *r, uint64_t step, double loss, uint64_t samples,
                       const shardps_stats *st, char *err, size_t len);

/* The worker leaves the job with a goodbye: writes a progress line of the
 * steps since the last one, if any, then "done". */
void ps_job_report_done(ps_job_report *r, const shardps_stats *st);

#endif
