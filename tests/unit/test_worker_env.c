/* Tests for the environment a launcher gives its worker command
 * (tools/cluster/worker_env.c): the job's place in shardps' and torchrun's
 * names, every job option a worker or the library takes as
 * SHARDPS_<NAME> (none that only servers take) and the job's settings as
 * SHARDPS_JOB_SETTINGS, the launcher's own
 * SHARDPS_ variables left out but SHARDPS_LIB kept, the auth token as its
 * path, OMP_NUM_THREADS unless the user set it. */
#include <criterion/criterion.h>

#include <stdio.h>
#include <string.h>

#include "flag_table.h"
#include "job_options.h"
#include "worker_env.h"

/* The value of name in env, or NULL; name must be there at most once. */
static const char *get(char **env, const char *name)
{
    const char *found = NULL;
    size_t n = strlen(name);

    for (int i = 0; env[i]; i++)
        if (strncmp(env[i], name, n) == 0 && env[i][n] == '=') {
            cr_assert_null(found, "%s is in the environment twice", name);
            found = env[i] + n + 1;
        }
    return found;
}

static char *parent[] = {"PATH=/usr/bin",
                         "HOME=/home/u",
                         "SHARDPS_STRAY=1",
                         "SHARDPS_CLUSTER=/etc/c.ini",
                         "SHARDPS_LIB=/opt/libshardps.so.1",
                         NULL};

Test(worker_env, carries_the_job_and_the_place)
{
    ps_job_options job;
    ps_worker_env *e;
    ps_flag wflags[96], lflags[96];
    char **env, var[96], text[64], settings[PS_JOB_SETTINGS_MAX];
    int nw, nl;

    ps_job_options_defaults(&job);
    job.workers = 3;
    job.chunk_bytes = 4096;
    job.auth_token_file = "/secret/token";
    job.checkpoint_dir = "/ck"; /* the servers' only */
    job.verbose = 1;
    cr_assert_eq(ps_worker_env_init(&e, parent, &job, 2, 2), 0);
    env = ps_worker_env_rank(e, "127.0.0.1:7000,127.0.0.1:7001", 1);
    cr_assert_not_null(env);
    cr_assert_str_eq(get(env, "PATH"), "/usr/bin");
    cr_assert_str_eq(get(env, "HOME"), "/home/u");
    cr_assert_str_eq(get(env, "SHARDPS_LIB"), "/opt/libshardps.so.1");
    cr_assert_null(get(env, "SHARDPS_STRAY"));
    cr_assert_null(get(env, "SHARDPS_CLUSTER"));
    cr_assert_str_eq(get(env, "SHARDPS_SERVERS"), "127.0.0.1:7000,127.0.0.1:7001");
    cr_assert_str_eq(get(env, "SHARDPS_RANK"), "1");
    cr_assert_str_eq(get(env, "SHARDPS_WORKERS"), "3");
    cr_assert_str_eq(get(env, "SHARDPS_REPORT_FD"), "3");
    cr_assert_str_eq(get(env, "RANK"), "1");
    cr_assert_str_eq(get(env, "LOCAL_RANK"), "1");
    cr_assert_str_eq(get(env, "WORLD_SIZE"), "3");
    cr_assert_str_eq(get(env, "LOCAL_WORLD_SIZE"), "3");
    cr_assert_str_eq(get(env, "OMP_NUM_THREADS"), "2");
    cr_assert_str_eq(get(env, "SHARDPS_CHUNK_BYTES"), "4096");
    cr_assert_str_eq(get(env, "SHARDPS_AUTH_TOKEN_FILE"), "/secret/token");
    cr_assert_str_eq(get(env, "SHARDPS_VERBOSE"), "1");
    cr_assert_null(get(env, "SHARDPS_CHECKPOINT_DIR"), "a servers' option reached the workers");
    cr_assert_null(get(env, "SHARDPS_DATA_DIR"), "an alias was handed on");
    /* The job's settings as the servers format theirs, with the server
     * count: what libshardps sends in its HELLO. */
    cr_assert_eq(ps_job_settings_format(&job, 2, settings, sizeof(settings)), 0);
    cr_assert_str_eq(get(env, "SHARDPS_JOB_SETTINGS"), settings);
    cr_assert(strstr(settings, "num-servers=2\n") && strstr(settings, "workers=3\n"));
    /* Every option a worker or the library takes from the launcher, by the
     * variable it reads, with the launcher's value. */
    nw = ps_job_options_flags(&job, PS_JOB_WORKER | PS_JOB_LIBRARY, wflags, 96);
    nl = ps_job_options_flags(&job, PS_JOB_LAUNCHER, lflags, 96);
    cr_assert(nw > 20 && nl > 20);
    for (int i = 0; i < nw; i++) {
        if (ps_flag_find(lflags, nl, wflags[i].name) < 0 || strcmp(wflags[i].name, "data-dir") == 0)
            continue;
        ps_flag_env_name(wflags[i].name, var, sizeof(var));
        if ((wflags[i].type == PS_FLAG_STRING || wflags[i].type == PS_FLAG_CHOICE) &&
            *(const char **)wflags[i].dest == NULL) {
            cr_assert_null(get(env, var), "%s is set though unset", var);
            continue;
        }
        cr_assert_not_null(get(env, var), "%s is missing", var);
        if (wflags[i].type == PS_FLAG_INT || wflags[i].type == PS_FLAG_BOOL) {
            snprintf(text, sizeof(text), "%d", *(const int *)wflags[i].dest);
            cr_assert_str_eq(get(env, var), text, "%s", var);
        }
    }
    /* The place is per rank; the rest stays. */
    env = ps_worker_env_rank(e, "127.0.0.1:7000,127.0.0.1:7001", 0);
    cr_assert_str_eq(get(env, "SHARDPS_RANK"), "0");
    cr_assert_str_eq(get(env, "RANK"), "0");
    cr_assert_str_eq(get(env, "SHARDPS_CHUNK_BYTES"), "4096");
    ps_worker_env_free(e);
}

Test(worker_env, the_users_thread_count_wins)
{
    char *own[] = {"OMP_NUM_THREADS=4", NULL};
    ps_job_options job;
    ps_worker_env *e;
    char **env;

    ps_job_options_defaults(&job);
    cr_assert_eq(ps_worker_env_init(&e, own, &job, 1, 1), 0);
    env = ps_worker_env_rank(e, "h:1", 0);
    cr_assert_str_eq(get(env, "OMP_NUM_THREADS"), "4");
    cr_assert_null(get(env, "SHARDPS_LIB"));
    ps_worker_env_free(e);
    ps_worker_env_free(NULL);
}

Test(worker_env, refuses_a_server_list_too_long)
{
    static char servers[8192];
    ps_job_options job;
    ps_worker_env *e;

    memset(servers, 'a', sizeof(servers) - 1);
    ps_job_options_defaults(&job);
    cr_assert_eq(ps_worker_env_init(&e, parent, &job, 1, 1), 0);
    cr_assert_null(ps_worker_env_rank(e, servers, 0));
    ps_worker_env_free(e);
}
