/* The processes of a launcher's job (shardps-cluster, shardps-run): starts
 * S servers on 127.0.0.1 with ports chosen by the OS (each reports its port
 * on a pipe, so nothing polls), then W copies of the worker command pointed
 * at them: any program, shardps-worker or a user's, whose argv the launcher
 * gives per rank and whose environment carries the job (worker_env.h). It
 * hands the workers' reports (fd 3) to the progress (progress.h) and
 * carries out the drills they make due (drills.h); restarts a server a
 * drill killed; and stops everything once the workers are done, on
 * SIGINT/SIGTERM (workers first, then servers), or as soon as any process
 * fails, a worker that exits 0 without having joined the job or without
 * having left it (no "done" report) included. The children's stdout and
 * stderr come through pipes and go out through the console (console.h), so
 * nothing breaks the progress line; the servers die with the launcher
 * (--parent-pid, parent_watch.h).
 *
 * An evaluator (shardps-eval --follow), when asked for, is no worker: it
 * starts with the workers and the workers' environment, the last rank
 * waits until it reports on fd 3 that it follows the job (so it is in
 * before training can start, and the curve has at least the first
 * weights), its exit neither fails nor ends the job, and it is stopped
 * once the workers are done. */
#ifndef PS_SUPERVISOR_H
#define PS_SUPERVISOR_H

#include <uv.h>

#include "console.h"
#include "drills.h"
#include "job_options.h"
#include "progress.h"
#include "worker_env.h"

/* The argv of worker rank's command (argv[0]: a path, or a name looked up
 * on PATH), NULL-terminated and borrowed until the call after; NULL when it
 * cannot be built (said in the log): the job fails. arg is the config's. */
typedef char **(*ps_worker_argv_fn)(void *arg, int rank);

/* Everything is borrowed for the run. */
typedef struct {
    const ps_job_options *job; /* every job option, forwarded to the children that take it */
    int n_servers;             /* 1 to 64 */
    const char *bin_dir;       /* where shardps-server is */
    const char *metrics_dir;   /* each server's --metrics-file is made here, or NULL */
    int metrics_port;          /* server i serves /metrics on port + i (0: any; -1: off) */
    char **server_env;         /* the servers' environment (ps_child_env) */
    ps_worker_env *worker_env; /* the workers' */
    ps_worker_argv_fn worker_argv;
    void *worker_arg;
    char **evaluator_argv; /* NULL-terminated; NULL: no evaluator */
    ps_drills *drills;     /* NULL: none */
    ps_console *con;       /* closed (ps_console_close) once the job stops */
    ps_progress *progress;
} ps_supervisor_config;

typedef enum {
    PS_JOB_FINISHED,    /* every process exited as it should */
    PS_JOB_FAILED,      /* a process failed or could not start; the reason was logged */
    PS_JOB_INTERRUPTED, /* stopped by SIGINT or SIGTERM */
} ps_job_outcome;

/* Runs the job on loop (which must have nothing else active but the
 * console's handle) until every process has exited and every handle it
 * opened is closed. Returns 0 with the outcome in *outcome, or -ENOMEM
 * before anything was started. */
int ps_supervisor_run(uv_loop_t *loop, const ps_supervisor_config *cfg, ps_job_outcome *outcome);

#endif
