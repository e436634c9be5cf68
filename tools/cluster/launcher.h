/* What the two launchers share, shardps-cluster (a job of shardps-workers)
 * and shardps-run (a job of any program): their options around the job's
 * (--servers S, --threads, --metrics-dir, --metrics-port, --json,
 * --bin-dir, --print-config, --check), and the run itself: the servers' and
 * the workers' environments, the console, the progress, the supervisor and
 * the summary. A launcher's main adds its own options, checks the job
 * (job_check.h) with what it knows of its workers, says what they run
 * (ps_supervisor_config's worker_argv) and calls ps_launcher_run.
 *
 * One launcher, so the C worker is just another command: shardps-cluster is
 * shardps-run with "shardps-worker and its flags" as the command. */
#ifndef PS_LAUNCHER_H
#define PS_LAUNCHER_H

#include <limits.h>

#include "flags.h"
#include "job_options.h"
#include "supervisor.h"

typedef struct {
    const char *prog; /* "shardps-run" */
    ps_job_options job;
    /* The run's supervisor: the launcher's options fill it; the program
     * adds its worker command and drills. */
    ps_supervisor_config sup;
    int threads; /* each worker's (0 until the run: cores / workers) */
    int json, print_config, check;
    ps_flags_ctx ctx;
    ps_flag flags[112];
    char self_dir[PATH_MAX];
} ps_launcher;

/* Parses argc/argv (which must not hold the command of shardps-run) into l
 * (zeroed: use static storage, it is large), with the launcher's options
 * and extra (n_extra of the program's own, borrowed: their variables must
 * outlive l). Returns 0 to go on, 1 when it printed --help or
 * --print-config (exit 0), or 2 after one error line (exit 2). */
int ps_launcher_parse(ps_launcher *l, const char *prog, const char *summary, const ps_flag *extra,
                      int n_extra, int argc, char **argv);

/* Runs the checked job: epochs for the progress line (0: not known), what
 * the log says the workers do ("10 epochs", "python3 train.py"). Prints the
 * summary of a run that finished well. Returns the exit status: 0, 1 (a
 * failure, said in the log), 2 (a --metrics-dir it cannot use) or 130
 * (stopped by SIGINT/SIGTERM). */
int ps_launcher_run(ps_launcher *l, int epochs, const char *what);

#endif
