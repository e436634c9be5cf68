/* The environment of a worker command the launcher starts: what shardps-run
 * promises any program (docs/run.md), and what shardps-worker reads too.
 *
 *   the launcher's own environment without its SHARDPS_* variables
 *     (child_env.h), except SHARDPS_LIB, which says where the Python
 *     package finds libshardps and is nobody's option;
 *   the job: every job option a worker or the library takes, as
 *     SHARDPS_<NAME>=value, from a walk of the job table
 *     (ps_job_options_argv), so none can be left out by hand; and the
 *     job's settings as SHARDPS_JOB_SETTINGS (ps_job_settings_format, what
 *     the servers compare a HELLO's with), which libshardps sends, so that
 *     the steps a worker plans count toward the servers' cosine schedule;
 *   the worker's place: SHARDPS_SERVERS (HOST:PORT,...), SHARDPS_RANK,
 *     SHARDPS_REPORT_FD (the launcher's report pipe, fd 3), and torchrun's
 *     RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE (one host: local rank =
 *     rank);
 *   OMP_NUM_THREADS = the launcher's --threads, unless the launcher's
 *     environment sets it: W copies of a NumPy or PyTorch program must not
 *     each start a thread per core.
 *
 * No secret goes into it: the auth token travels as its file's path. */
#ifndef PS_WORKER_ENV_H
#define PS_WORKER_ENV_H

#include "job_options.h"

/* The descriptor a worker reports on: the launcher's pipe at fd 3. */
#define PS_WORKER_REPORT_FD 3

typedef struct ps_worker_env ps_worker_env;

/* For the job's workers: parent is the launcher's environment (environ),
 * borrowed for as long as the result lives; job is read now, not kept.
 * n_servers is the job's server count, threads each worker's thread count.
 * Returns 0, -ENOSPC (the job's options do not fit: a bug) or -ENOMEM. */
int ps_worker_env_init(ps_worker_env **out, char *const *parent, const ps_job_options *job,
                       int n_servers, int threads);
/* NULL is allowed. */
void ps_worker_env_free(ps_worker_env *e);

/* The environment of worker rank of a job whose servers are servers
 * ("HOST:PORT,..."): a NULL-terminated array owned by e, valid until the
 * next call or ps_worker_env_free. Returns NULL when servers is too long. */
char **ps_worker_env_rank(ps_worker_env *e, const char *servers, int rank);

#endif
