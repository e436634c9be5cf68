/* A worker command's environment (see worker_env.h). */
#include "worker_env.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "child_env.h"
#include "flag_table.h"

/* The per-rank variables: SHARDPS_SERVERS, SHARDPS_RANK, SHARDPS_REPORT_FD,
 * RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, OMP_NUM_THREADS. */
#define PS__PLACE_VARS 8
#define PS__JOB_ARGV   256

struct ps_worker_env {
    char **envp; /* the parent's (borrowed), the job's, then the place's; NULL-terminated */
    int n_fixed; /* entries before the place's */
    int world, threads;
    int omp_given; /* the parent sets OMP_NUM_THREADS */
    char job_text[16384];
    char *job_argv[PS__JOB_ARGV];
    char job_vars[16384]; /* "SHARDPS_NAME=value" strings, back to back */
    char settings[sizeof("SHARDPS_JOB_SETTINGS=") + PS_JOB_SETTINGS_MAX];
    char servers[4096 + 32];
    char place[PS__PLACE_VARS - 1][64];
};

/* The parent's variable name=..., or NULL. */
static char *ps__find(char *const *env, const char *name)
{
    size_t n = strlen(name);

    for (int i = 0; env[i]; i++)
        if (strncmp(env[i], name, n) == 0 && env[i][n] == '=')
            return env[i];
    return NULL;
}

/* The job's "--name value" pairs (a switch as "--name=value") as
 * SHARDPS_NAME=value strings into e->job_vars, appended to envp at *n. */
static int ps__job_vars(ps_worker_env *e, int n_argv, int *n)
{
    size_t used = 0;

    for (int i = 0; i < n_argv; i++) {
        const char *arg = e->job_argv[i] + 2, *eq = strchr(arg, '='), *value;
        char name[96], var[96];
        int w;

        if (eq) {
            snprintf(name, sizeof(name), "%.*s", (int)(eq - arg), arg);
            value = eq + 1;
        } else {
            snprintf(name, sizeof(name), "%s", arg);
            value = e->job_argv[++i];
        }
        ps_flag_env_name(name, var, sizeof(var));
        w = snprintf(e->job_vars + used, sizeof(e->job_vars) - used, "%s=%s", var, value);
        if (w < 0 || (size_t)w >= sizeof(e->job_vars) - used)
            return -ENOSPC;
        e->envp[(*n)++] = e->job_vars + used;
        used += (size_t)w + 1;
    }
    return 0;
}

int ps_worker_env_init(ps_worker_env **out, char *const *parent, const ps_job_options *job,
                       int n_servers, int threads)
{
    const size_t prefix = strlen("SHARDPS_JOB_SETTINGS=");
    ps_worker_env *e = calloc(1, sizeof(*e));
    char **base = ps_child_env(parent), *lib = ps__find(parent, "SHARDPS_LIB");
    int n_base = 0, n_argv, n = 0, rc = -ENOMEM;

    *out = NULL;
    if (e == NULL || base == NULL)
        goto fail;
    while (base[n_base])
        n_base++;
    n_argv = ps_job_options_argv(job, PS_JOB_LAUNCHER, PS_JOB_WORKER | PS_JOB_LIBRARY, e->job_text,
                                 sizeof(e->job_text), e->job_argv, PS__JOB_ARGV);
    if (n_argv < 0) {
        rc = n_argv;
        goto fail;
    }
    memcpy(e->settings, "SHARDPS_JOB_SETTINGS=", prefix);
    rc = ps_job_settings_format(job, n_servers, e->settings + prefix, sizeof(e->settings) - prefix);
    if (rc < 0)
        goto fail;
    rc = -ENOMEM;
    e->envp = calloc((size_t)(n_base + 2 + n_argv + PS__PLACE_VARS + 1), sizeof(char *));
    if (e->envp == NULL)
        goto fail;
    memcpy(e->envp, base, (size_t)n_base * sizeof(char *));
    n = n_base;
    if (lib)
        e->envp[n++] = lib;
    rc = ps__job_vars(e, n_argv, &n);
    if (rc < 0)
        goto fail;
    e->envp[n++] = e->settings;
    e->n_fixed = n;
    e->world = job->workers;
    e->threads = threads;
    e->omp_given = ps__find(parent, "OMP_NUM_THREADS") != NULL;
    free(base);
    *out = e;
    return 0;
fail:
    free(base);
    ps_worker_env_free(e);
    return rc;
}

void ps_worker_env_free(ps_worker_env *e)
{
    if (e == NULL)
        return;
    free(e->envp);
    free(e);
}

char **ps_worker_env_rank(ps_worker_env *e, const char *servers, int rank)
{
    const char *names[] = {"SHARDPS_RANK", "SHARDPS_REPORT_FD", "RANK",           "WORLD_SIZE",
                           "LOCAL_RANK",   "LOCAL_WORLD_SIZE",  "OMP_NUM_THREADS"};
    const int values[] = {rank, PS_WORKER_REPORT_FD, rank, e->world, rank, e->world, e->threads};
    int n = e->n_fixed, w;

    w = snprintf(e->servers, sizeof(e->servers), "SHARDPS_SERVERS=%s", servers);
    if (w < 0 || (size_t)w >= sizeof(e->servers))
        return NULL;
    e->envp[n++] = e->servers;
    for (int i = 0; i < PS__PLACE_VARS - 1; i++) {
        if (strcmp(names[i], "OMP_NUM_THREADS") == 0 && e->omp_given)
            continue;
        snprintf(e->place[i], sizeof(e->place[i]), "%s=%d", names[i], values[i]);
        e->envp[n++] = e->place[i];
    }
    e->envp[n] = NULL;
    return e->envp;
}
