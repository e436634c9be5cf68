/* A started server's or worker's argv (see child_args.h). */
#include "child_args.h"

#include <stdarg.h>
#include <stdio.h>

void ps_child_args_flag(ps_child_args *a, const char *name)
{
    if (a->n + 1 >= PS_CHILD_ARGV) {
        a->too_long = 1;
        return;
    }
    a->argv[++a->n] = (char *)name;
}

void ps_child_args_opt(ps_child_args *a, const char *name, const char *fmt, ...)
{
    va_list ap;

    if (a->v == PS_CHILD_OPTS) {
        a->too_long = 1;
        return;
    }
    ps_child_args_flag(a, name);
    va_start(ap, fmt);
    vsnprintf(a->vals[a->v], sizeof(a->vals[a->v]), fmt, ap);
    va_end(ap);
    ps_child_args_flag(a, a->vals[a->v++]);
}

void ps_child_args_reset(ps_child_args *a)
{
    a->n = a->v = a->too_long = 0;
}

void ps_child_args_job(ps_child_args *a, const ps_job_options *job, unsigned to)
{
    int n = ps_job_options_argv(job, PS_JOB_LAUNCHER, to, a->job_text, sizeof(a->job_text),
                                a->argv + 1, PS_CHILD_ARGV);

    a->n = n < 0 ? 0 : n;
    a->v = 0;
    a->too_long = n < 0;
}
