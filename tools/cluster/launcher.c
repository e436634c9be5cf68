/* The launchers' shared options and run (see launcher.h). */
#include "launcher.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#include "child_env.h"
#include "clock.h"
#include "console.h"
#include "flags_help.h"
#include "progress.h"
#include "ps_log.h"
#include "summary.h"
#include "worker_env.h"

extern char **environ;

/* The folder this executable lives in: the other binaries sit beside it. */
static int ps__self_dir(char *buf, size_t len)
{
    size_t n = len;
    char *slash;

    if (uv_exepath(buf, &n) < 0)
        return -1;
    slash = strrchr(buf, '/');
    if (slash == NULL)
        return -1;
    *slash = '\0';
    return 0;
}

int ps_launcher_parse(ps_launcher *l, const char *prog, const char *summary, const ps_flag *extra,
                      int n_extra, int argc, char **argv)
{
    ps_supervisor_config *sup = &l->sup;
    const ps_flag head[] = {
        {"servers", PS_FLAG_INT, &sup->n_servers, "S", "parameter servers to start", 1, 64, NULL,
         NULL, NULL},
        {"threads", PS_FLAG_INT, &l->threads, "N",
         "threads per worker: its BLAS threads, and OMP_NUM_THREADS unless set (0: cores / "
         "workers)",
         0, 1024, NULL, NULL, NULL},
    };
    const ps_flag tail[] = {
        {"metrics-dir", PS_FLAG_STRING, &sup->metrics_dir, "DIR",
         "write JSON-lines metrics here: the servers' (server-I.jsonl) and shardps-cluster's "
         "workers' (worker-R.jsonl)",
         0, 0, NULL, NULL, NULL},
        {"metrics-port", PS_FLAG_INT, &sup->metrics_port, "PORT",
         "servers serve Prometheus /metrics on PORT+index (0: any free port, logged)", 0, 65535,
         NULL, "off=-1", NULL},
        {"json", PS_FLAG_BOOL, &l->json, NULL, "end with the summary as one JSON line", 0, 0, NULL,
         NULL, NULL},
        {"bin-dir", PS_FLAG_STRING, &sup->bin_dir, "DIR",
         "where the shardps programs are (default: beside this program)", 0, 0, NULL, NULL, NULL},
        {"print-config", PS_FLAG_BOOL, &l->print_config, NULL,
         "print the effective settings and where each came from, then exit", 0, 0, NULL, NULL,
         NULL},
        {"check", PS_FLAG_BOOL, &l->check, NULL,
         "check every option and the files they name as a run would, start nothing, exit 0 if "
         "the job would start (2 and the reason if not)",
         0, 0, NULL, NULL, NULL},
    };
    int n_head = (int)(sizeof(head) / sizeof(head[0])),
        n_tail = (int)(sizeof(tail) / sizeof(tail[0]));
    int max = (int)(sizeof(l->flags) / sizeof(l->flags[0])), n, rc;

    l->prog = prog;
    ps_job_options_defaults(&l->job);
    /* A launcher's job: two of each, unlike a lone server or worker. */
    l->job.workers = 2;
    sup->n_servers = 2;
    sup->metrics_port = -1;
    sup->job = &l->job;
    n = ps_job_options_flags(&l->job, PS_JOB_LAUNCHER, l->flags, max);
    if (n < 0 || n + n_head + n_extra + n_tail > max) {
        fprintf(stderr, "%s: internal: the option table is full\n", prog);
        return 2;
    }
    memcpy(l->flags + n, head, sizeof(head));
    n += n_head;
    if (n_extra > 0)
        memcpy(l->flags + n, extra, (size_t)n_extra * sizeof(*extra));
    n += n_extra;
    memcpy(l->flags + n, tail, sizeof(tail));
    l->ctx = (ps_flags_ctx){.flags = l->flags, .n = n + n_tail, .prog = prog, .summary = summary};
    rc = ps_flags_load(&l->ctx, argc, argv);
    if (rc != 0)
        return rc > 0 ? 1 : 2;
    /* After parsing, so --help shows no path of this machine as a default. */
    if (sup->bin_dir == NULL && ps__self_dir(l->self_dir, sizeof(l->self_dir)) == 0)
        sup->bin_dir = l->self_dir;
    if (l->print_config) {
        ps_flags_print_config(&l->ctx, stdout);
        return 1;
    }
    ps_log_set_role(strncmp(prog, "shardps-", 8) == 0 ? prog + 8 : prog);
    if (l->job.verbose)
        ps_log_set_level(PS_LOG_DEBUG);
    return 0;
}

/* Servers append to their metrics files, so that one restarted with
 * --restore goes on with its history; a new job starts from empty files.
 * Returns 0 or 2 after the error line. */
static int ps__prepare_metrics_dir(const ps_launcher *l)
{
    const char *dir = l->sup.metrics_dir;

    if (dir == NULL)
        return 0;
    if (mkdir(dir, 0777) < 0 && errno != EEXIST) {
        fprintf(stderr, "%s: cannot create --metrics-dir %s: %s\n", l->prog, dir, strerror(errno));
        return 2;
    }
    for (int i = 0; i < l->sup.n_servers; i++) {
        char path[PATH_MAX];
        snprintf(path, sizeof(path), "%s/server-%d.jsonl", dir, i);
        if (truncate(path, 0) < 0 && errno != ENOENT) {
            fprintf(stderr, "%s: cannot empty %s: %s\n", l->prog, path, strerror(errno));
            return 2;
        }
    }
    return 0;
}

int ps_launcher_run(ps_launcher *l, int epochs, const char *what)
{
    static uv_loop_t loop;
    ps_supervisor_config *sup = &l->sup;
    const ps_job_options *job = &l->job;
    ps_job_outcome outcome;
    double t_start, wall;
    int rc = ps__prepare_metrics_dir(l), ncpu = (int)uv_available_parallelism();

    if (rc != 0)
        return rc;
    rc = 1;
    if (l->threads == 0)
        l->threads = ncpu / job->workers > 1 ? ncpu / job->workers : 1;
    /* A peer that resets while we write must cost a connection, not the
     * process: take write errors as EPIPE instead of the signal. */
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);
    uv_loop_init(&loop);
    sup->server_env = ps_child_env(environ);
    if (sup->server_env == NULL ||
        ps_worker_env_init(&sup->worker_env, environ, job, sup->n_servers, l->threads) < 0 ||
        ps_console_init(&sup->con, &loop) < 0 ||
        ps_progress_init(&sup->progress, sup->con, job->workers, epochs) < 0) {
        fprintf(stderr, "%s: out of memory\n", l->prog);
        goto out;
    }
    ps_log_set_sink(ps_console_log_sink, sup->con);
    ps_info("starting %d server%s and %d worker%s, mode %s, %s", sup->n_servers,
            sup->n_servers == 1 ? "" : "s", job->workers, job->workers == 1 ? "" : "s", job->mode,
            what);
    t_start = ps_clock_now();
    if (ps_supervisor_run(&loop, sup, &outcome) < 0) {
        fprintf(stderr, "%s: out of memory\n", l->prog);
        /* Nothing started: close the console's handle before it is freed. */
        ps_console_close(sup->con);
        uv_run(&loop, UV_RUN_DEFAULT);
        goto out;
    }
    wall = ps_clock_now() - t_start;
    ps_console_end_progress(sup->con);
    uv_loop_close(&loop);
    rc = outcome == PS_JOB_INTERRUPTED ? 130 : outcome == PS_JOB_FAILED ? 1 : 0;
    if (rc == 0) {
        ps_summary s = {.prog = l->prog,
                        .mode = job->mode,
                        .compress = job->compress,
                        .metrics_dir = sup->metrics_dir,
                        .servers = sup->n_servers,
                        .workers = job->workers,
                        .wall_seconds = wall};
        ps_progress_summary(sup->progress, &s);
        ps_summary_print(&s, l->json, stdout);
    }
out:
    ps_log_set_sink(NULL, NULL);
    ps_progress_free(sup->progress);
    ps_console_free(sup->con);
    ps_worker_env_free(sup->worker_env);
    free(sup->server_env);
    return rc;
}
