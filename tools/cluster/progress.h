/* The workers' reports (report.h) as a person sees them while the job runs:
 * one progress line per report of worker 0 (time left, epoch, step, loss,
 * the whole job's throughput, staleness) and a line per evaluation, shown
 * through the launcher's console (console.h). It keeps each worker's latest
 * figures, which give the throughput now and, at the end, the summary's
 * totals (summary.h).
 *
 * It sends no signal and starts nothing: a report that names a step a drill
 * may wait for is handed back to the launcher, which owns the processes. */
#ifndef PS_PROGRESS_H
#define PS_PROGRESS_H

#include <stdint.h>

#include "console.h"
#include "summary.h"

typedef struct ps_progress ps_progress;

/* For a job of `workers` workers (1 to PS_PROGRESS_MAX_WORKERS) and
 * `epochs` epochs (0: not known, as for programs on libshardps); con is borrowed and must outlive
 * the progress. Returns 0, -EINVAL or -ENOMEM. */
#define PS_PROGRESS_MAX_WORKERS 256
int ps_progress_init(ps_progress **out, ps_console *con, int workers, int epochs);
/* NULL is allowed. */
void ps_progress_free(ps_progress *p);

/* One line from worker rank's report pipe. Returns 1 with the step the
 * worker has reached in *step (a progress report, or a step a drill named:
 * the drills must hear of it), 0 for any other report, or -PS_EPROTO for a
 * line that does not parse or names another rank: logged, and dropped, since
 * the launcher acts only on reports it can read as written. */
int ps_progress_report(ps_progress *p, int rank, const char *line, uint64_t *step);

/* Whether worker rank has reported "start" (it joined the job), "done"
 * (it left it, finished), the furthest step it reported (0: none), and the
 * step it said it stops at (0: not known). */
int ps_progress_worker_started(const ps_progress *p, int rank);
int ps_progress_worker_done(const ps_progress *p, int rank);
uint64_t ps_progress_worker_step(const ps_progress *p, int rank);
uint64_t ps_progress_worker_total(const ps_progress *p, int rank);

/* Fills the report-borne half of s (accuracy, steps per epoch, the
 * workers' totals); the caller fills the job's half. */
void ps_progress_summary(const ps_progress *p, ps_summary *s);

#endif
