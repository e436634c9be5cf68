/* The argv of a server or worker the launcher starts: every job option the
 * program takes, as the launcher holds them (ps_job_options_argv, so none can
 * be left out by hand), then the flags of that one process (its index, its
 * pipes, its metrics file).
 *
 * The buffers are fixed and large (use static storage: too large for the
 * stack); a flag past them marks the argv as too long instead of writing out
 * of bounds, and the spawner refuses it. */
#ifndef PS_CHILD_ARGS_H
#define PS_CHILD_ARGS_H

#include "job_options.h"

/* Room for the launcher's own flags (values in vals) and for the argv as a
 * whole, job options included. */
#define PS_CHILD_OPTS 24
#define PS_CHILD_ARGV 160

typedef struct {
    char *argv[PS_CHILD_ARGV + 2]; /* argv[0] is the program, set by the spawner */
    char job_text[16384];          /* the job options' texts argv points into */
    char vals[PS_CHILD_OPTS][4096];
    int n, v;
    int too_long; /* a flag did not fit: do not start the process */
} ps_child_args;

/* Starts a's argv afresh, empty. */
void ps_child_args_reset(ps_child_args *a);
/* Starts a's argv afresh with every job option of job that program `to`
 * (PS_JOB_SERVER or PS_JOB_WORKER) takes. job is read, not kept. */
void ps_child_args_job(ps_child_args *a, const ps_job_options *job, unsigned to);
/* Appends a switch: "--name" (name is kept, not copied). */
void ps_child_args_flag(ps_child_args *a, const char *name);
/* Appends an option: "--name value", the value formatted from fmt into a. */
void ps_child_args_opt(ps_child_args *a, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif
