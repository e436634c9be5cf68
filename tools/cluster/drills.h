/* The launcher's fault drills and experiments: --kill-worker, --pause-worker,
 * --kill-server and --slow-worker. This module parses them, says what each
 * worker must be told (its --slow-ms), and, each time a worker reports the
 * step it has reached, decides which signals the drills send now. It sends
 * nothing itself: the launcher owns the processes and carries the actions out,
 * so the decisions can be tested without starting any. */
#ifndef PS_DRILLS_H
#define PS_DRILLS_H

#include <stddef.h>
#include <stdint.h>

/* The options as given (NULL: not given), and the job they must fit. */
typedef struct {
    const char *kill_worker;  /* "RANK@STEP" */
    const char *pause_worker; /* "RANK@STEP:N" */
    const char *kill_server;  /* "I@STEP" */
    const char *slow_worker;  /* "RANK:MS" */
    int n_workers, n_servers;
    int can_restore; /* --checkpoint-dir is set, so a killed server can restart */
} ps_drills_config;

typedef enum {
    PS_DRILL_KILL_WORKER, /* SIGKILL worker target; it is not restarted */
    PS_DRILL_STOP_WORKER, /* SIGSTOP worker target */
    PS_DRILL_CONT_WORKER, /* SIGCONT worker target */
    PS_DRILL_KILL_SERVER, /* SIGKILL server target; the launcher restarts it with --restore */
} ps_drill_kind;

typedef struct {
    ps_drill_kind kind;
    int target; /* worker rank or server index */
} ps_drill_action;

/* Whether worker rank (is_server 0) or server index (is_server 1) is running
 * now; a drill waits for a target that is not. */
typedef int (*ps_drills_running_fn)(void *arg, int is_server, int index);

/* The most actions one report can cause. */
#define PS_DRILLS_MAX_ACTIONS 4

typedef struct ps_drills ps_drills;

/* Parses and checks cfg. Returns 0, -ENOMEM, or -EINVAL with one line in err
 * (always NUL-terminated) naming the option and what it must be. */
int ps_drills_init(ps_drills **out, const ps_drills_config *cfg, char *err, size_t errlen);
/* NULL is allowed. */
void ps_drills_free(ps_drills *d);

/* --slow-worker: the delay in ms for worker rank, 0 for the others. */
int ps_drills_slow_ms(const ps_drills *d, int rank);

/* The most steps one worker is asked to report. */
#define PS_DRILLS_MAX_STEPS 4

/* The steps worker rank must report as it reaches them (its
 * --report-steps), so each drill fires on the step it names and not at the
 * next progress report: ascending, no repeats, written into out (room for
 * PS_DRILLS_MAX_STEPS). Returns their count. */
int ps_drills_report_steps(const ps_drills *d, int rank, uint64_t *out);

/* Worker rank has reached step. Writes the actions due now into out (room
 * for PS_DRILLS_MAX_ACTIONS) and returns their count; each drill fires once.
 * running tells which targets are alive (arg is passed through). */
int ps_drills_on_step(ps_drills *d, int rank, uint64_t step, ps_drills_running_fn running,
                      void *arg, ps_drill_action *out);

#endif
