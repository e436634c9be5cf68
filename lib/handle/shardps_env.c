/* shardps_new_from_env (include/shardps.h): a worker handle from the
 * environment a launcher sets (shardps-run: SHARDPS_SERVERS, SHARDPS_RANK,
 * SHARDPS_WORKERS, each job option as SHARDPS_<NAME>, and the job's
 * settings), checked as shardps-worker checks its own. Above the handle's
 * core (shardps.c), which it calls. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "job_options.h"
#include "ps_log.h"
#include "server_list.h"
#include "shardps_handle.h"

/* A variable of the job's place that the environment lacks. */
static int ps__env_missing(const char *name)
{
    return ps_shardps_err(
        NULL, -EINVAL,
        "shardps_new_from_env: %s is not set: start the program under shardps-run, "
        "or set SHARDPS_SERVERS, SHARDPS_RANK and SHARDPS_WORKERS (docs/run.md)",
        name);
}

/* An integer variable of the environment, in [min, max]. */
static int ps__env_int(const char *name, int min, int max, int *out)
{
    const char *v = getenv(name);
    char *end;
    long n;

    if (v == NULL || *v == '\0')
        return ps__env_missing(name);
    n = strtol(v, &end, 10);
    if (end == v || *end != '\0' || n < min || n > max)
        return ps_shardps_err(NULL, -EINVAL,
                              "shardps_new_from_env: %s: '%s' is not an integer in %d..%d", name, v,
                              min, max);
    *out = (int)n;
    return 0;
}

/* The options of h from the environment: each job option the library takes
 * as SHARDPS_<NAME> (through its row, as shardps-worker reads it). */
static int ps__options_from_env(shardps *h)
{
    char name[96];
    const char *v;
    int rc;

    for (int i = 0; i < h->n_options; i++) {
        ps_flag_env_name(h->options[i].name, name, sizeof(name));
        v = getenv(name);
        if (v && *v && (rc = ps_shardps_set_row(h, &h->options[i], v, name)) < 0)
            return rc;
    }
    return 0;
}

/* The job's settings shardps-run puts in the environment
 * (SHARDPS_JOB_SETTINGS): sent in the HELLO like shardps-worker's, they let
 * the servers count the steps this worker plans toward their cosine
 * schedule. Absent (a job set up by hand), none are sent. */
static int ps__settings_from_env(shardps *h)
{
    const char *v = getenv("SHARDPS_JOB_SETTINGS");

    if (v == NULL || *v == '\0')
        return 0;
    if (!ps_job_settings_valid(v))
        return ps_shardps_err(h, -EINVAL,
                              "SHARDPS_JOB_SETTINGS is not a settings list (name=value lines, "
                              "under %d bytes): start the program under shardps-run",
                              PS_JOB_SETTINGS_MAX);
    return shardps_set_option(h, "job-settings", v);
}

int shardps_new_from_env(shardps **out)
{
    const char *servers = getenv("SHARDPS_SERVERS");
    ps_server_list *sl = NULL;
    char why[256], role[32];
    int rank, world, rc;

    if (out == NULL)
        return ps_shardps_err(NULL, -EINVAL, "shardps_new_from_env: out is NULL");
    *out = NULL;
    if (servers == NULL || *servers == '\0')
        return ps__env_missing("SHARDPS_SERVERS");
    rc = ps__env_int("SHARDPS_WORKERS", 1, 65536, &world);
    if (rc == 0)
        rc = ps__env_int("SHARDPS_RANK", 0, world - 1, &rank);
    if (rc < 0)
        return rc;
    rc = ps_server_list_parse(&sl, servers, PS__HANDLE_MAX_SERVERS, 0, why, sizeof(why));
    if (rc < 0)
        return ps_shardps_err(NULL, rc, "shardps_new_from_env: SHARDPS_SERVERS '%s': %s", servers,
                              rc == -ENOMEM ? "out of memory" : why);
    rc = shardps_new(out, ps_server_list_entries(sl), ps_server_list_count(sl), rank, world);
    ps_server_list_free(sl);
    if (rc < 0)
        return rc;
    rc = ps__options_from_env(*out);
    if (rc == 0)
        rc = ps__settings_from_env(*out);
    if (rc < 0) {
        ps_shardps_err(NULL, rc, "shardps_new_from_env: %s", (*out)->error);
        shardps_abandon(*out);
        *out = NULL;
        return rc;
    }
    /* This process is that worker: its log lines say so. */
    snprintf(role, sizeof(role), "worker %d", rank);
    ps_log_set_role(role);
    return 0;
}
