/* shardps-cluster: a whole parameter-server job on this machine.
 *
 * main parses the options (the job's, from job_options.h, and the
 * launcher's own), has the job checked as its servers and workers will check
 * it (job_check.h: the rules, the files, the data read and the model built
 * on them; --check stops there), and wires the modules: the supervisor
 * (supervisor.h) starts, watches and stops the servers and workers, carrying
 * out the fault drills (drills.h); the progress (progress.h) shows the
 * workers' reports through the console (console.h); the summary (summary.h)
 * ends a run that finished well. */
#include <errno.h>
#include <limits.h>
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
#include "drills.h"
#include "flags.h"
#include "flags_help.h"
#include "job_check.h"
#include "job_data.h"
#include "job_options.h"
#include "progress.h"
#include "ps_log.h"
#include "summary.h"
#include "supervisor.h"

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

/* Servers append to their metrics files, so that one restarted with
 * --restore goes on with its history; a new job starts from empty files.
 * Returns 0 or 2 after the error line. */
static int ps__prepare_metrics_dir(const ps_supervisor_config *cfg)
{
    if (cfg->metrics_dir == NULL)
        return 0;
    if (mkdir(cfg->metrics_dir, 0777) < 0 && errno != EEXIST) {
        fprintf(stderr, "shardps-cluster: cannot create --metrics-dir %s: %s\n", cfg->metrics_dir,
                strerror(errno));
        return 2;
    }
    for (int i = 0; i < cfg->n_servers; i++) {
        char path[PATH_MAX];
        snprintf(path, sizeof(path), "%s/server-%d.jsonl", cfg->metrics_dir, i);
        if (truncate(path, 0) < 0 && errno != ENOENT) {
            fprintf(stderr, "shardps-cluster: cannot empty %s: %s\n", path, strerror(errno));
            return 2;
        }
    }
    return 0;
}

/* Runs the checked job (cfg's job, drills and processes set) with its
 * console and progress, and prints the summary of a run that finished
 * well. Returns the exit status. */
static int ps__run(ps_supervisor_config *cfg, const ps_job_plan *plan, int json)
{
    static uv_loop_t loop;
    const ps_job_options *job = cfg->job;
    char **child_env = ps_child_env(environ), length[128];
    ps_job_outcome outcome;
    double t_start, wall;
    int rc = 1, ncpu = (int)uv_available_parallelism();

    if (cfg->threads == 0)
        cfg->threads = ncpu / job->workers > 1 ? ncpu / job->workers : 1;
    setvbuf(stdout, NULL, _IOLBF, 0);
    uv_loop_init(&loop);
    cfg->env = child_env;
    if (child_env == NULL || ps_console_init(&cfg->con, &loop) < 0 ||
        ps_progress_init(&cfg->progress, cfg->con, job->workers, plan->epochs) < 0) {
        fprintf(stderr, "shardps-cluster: out of memory\n");
        goto out;
    }
    ps_log_set_sink(ps_console_log_sink, cfg->con);
    ps_info("starting %d server%s and %d worker%s, mode %s, %s", cfg->n_servers,
            cfg->n_servers == 1 ? "" : "s", job->workers, job->workers == 1 ? "" : "s", job->mode,
            ps_job_plan_length(job, plan, length, sizeof(length)));
    t_start = ps_clock_now();
    if (ps_supervisor_run(&loop, cfg, &outcome) < 0) {
        fprintf(stderr, "shardps-cluster: out of memory\n");
        /* Nothing started: close the console's handle before it is freed. */
        ps_console_close(cfg->con);
        uv_run(&loop, UV_RUN_DEFAULT);
        goto out;
    }
    wall = ps_clock_now() - t_start;
    ps_console_end_progress(cfg->con);
    uv_loop_close(&loop);
    rc = outcome == PS_JOB_INTERRUPTED ? 130 : outcome == PS_JOB_FAILED ? 1 : 0;
    if (rc == 0) {
        ps_summary s = {.mode = job->mode,
                        .compress = job->compress,
                        .metrics_dir = cfg->metrics_dir,
                        .servers = cfg->n_servers,
                        .workers = job->workers,
                        .wall_seconds = wall};
        ps_progress_summary(cfg->progress, &s);
        ps_summary_print(&s, json, stdout);
    }
out:
    ps_log_set_sink(NULL, NULL);
    ps_progress_free(cfg->progress);
    ps_console_free(cfg->con);
    free(child_env);
    return rc;
}

int main(int argc, char **argv)
{
    /* Static: the option table points at them, the run borrows them, and
     * the context must outlive every use of the strings. */
    static ps_job_options job;
    /* A launcher's job: two of each, unlike a lone server or worker. */
    static ps_supervisor_config cfg = {.n_servers = 2, .metrics_port = -1};
    static ps_flag flags[96];
    static ps_flags_ctx ctx;
    static ps_job_plan plan;
    static ps_job_datasets data;
    static char self_dir[PATH_MAX];
    const char *kill_worker = NULL, *slow_worker = NULL, *pause_worker = NULL, *kill_server = NULL;
    int print_config = 0, check = 0, json = 0, nflags, rc;
    const ps_flag own[] = {
        {"servers", PS_FLAG_INT, &cfg.n_servers, "S", "parameter servers to start", 1, 64, NULL,
         NULL, NULL},
        {"threads", PS_FLAG_INT, &cfg.threads, "N", "BLAS threads per worker (0: cores / workers)",
         0, 1024, NULL, NULL, NULL},
        {"slow-worker", PS_FLAG_STRING, &slow_worker, "RANK:MS",
         "make that worker wait MS every step (straggler experiments)", 0, 0, NULL, NULL, NULL},
        {"pause-worker", PS_FLAG_STRING, &pause_worker, "RANK@STEP:N",
         "SIGSTOP that worker at STEP, SIGCONT once another is N steps further", 0, 0, NULL, NULL,
         NULL},
        {"kill-server", PS_FLAG_STRING, &kill_server, "I@STEP",
         "SIGKILL server I once worker 0 reports STEP, then restart it with --restore", 0, 0, NULL,
         NULL, NULL},
        {"kill-worker", PS_FLAG_STRING, &kill_worker, "RANK@STEP",
         "SIGKILL that worker once it reports that step (fault drills)", 0, 0, NULL, NULL, NULL},
        {"metrics-dir", PS_FLAG_STRING, &cfg.metrics_dir, "DIR",
         "write JSON-lines metrics of every process here (server-I.jsonl, worker-R.jsonl)", 0, 0,
         NULL, NULL, NULL},
        {"metrics-port", PS_FLAG_INT, &cfg.metrics_port, "PORT",
         "servers serve Prometheus /metrics on PORT+index (0: any free port, logged)", 0, 65535,
         NULL, "off=-1", NULL},
        {"json", PS_FLAG_BOOL, &json, NULL, "end with the summary as one JSON line", 0, 0, NULL,
         NULL, NULL},
        {"dump-weights", PS_FLAG_STRING, &cfg.dump_weights, "FILE",
         "rank 0 writes the final weights here", 0, 0, NULL, NULL, NULL},
        {"bin-dir", PS_FLAG_STRING, &cfg.bin_dir, "DIR",
         "where shardps-server and shardps-worker are (default: beside this program)", 0, 0, NULL,
         NULL, NULL},
        {"print-config", PS_FLAG_BOOL, &print_config, NULL,
         "print the effective settings and where each came from, then exit", 0, 0, NULL, NULL,
         NULL},
        {"check", PS_FLAG_BOOL, &check, NULL,
         "check every option and the files they name as a run would (the data read, the model "
         "built on it), start nothing, exit 0 if the job would start (2 and the reason if not)",
         0, 0, NULL, NULL, NULL},
    };
    int n_own = (int)(sizeof(own) / sizeof(own[0])), max = (int)(sizeof(flags) / sizeof(flags[0]));
    char err[1024];

    ps_job_options_defaults(&job);
    job.workers = 2;
    /* A peer that resets while we write must cost a connection, not the
     * process: take write errors as EPIPE instead of the signal. */
    signal(SIGPIPE, SIG_IGN);
    nflags = ps_job_options_flags(&job, PS_JOB_LAUNCHER, flags, max);
    if (nflags < 0 || nflags + n_own > max)
        return 1;
    memcpy(flags + nflags, own, sizeof(own));
    ctx = (ps_flags_ctx){.flags = flags,
                         .n = nflags + n_own,
                         .prog = "shardps-cluster",
                         .summary = "Runs a parameter-server job on this machine: S servers and "
                                    "W workers on 127.0.0.1, ports chosen by the OS."};
    rc = ps_flags_load(&ctx, argc, argv);
    if (rc != 0)
        return rc > 0 ? 0 : 2;
    /* After parsing, so --help shows no path of this machine as a default. */
    if (cfg.bin_dir == NULL && ps__self_dir(self_dir, sizeof(self_dir)) == 0)
        cfg.bin_dir = self_dir;
    if (print_config) {
        ps_flags_print_config(&ctx, stdout);
        return 0;
    }
    ps_log_set_role("cluster");
    if (job.verbose)
        ps_log_set_level(PS_LOG_DEBUG);
    rc = ps_drills_init(&cfg.drills,
                        &(ps_drills_config){kill_worker, pause_worker, kill_server, slow_worker,
                                            job.workers, cfg.n_servers, job.checkpoint_dir != NULL},
                        err, sizeof(err));
    if (rc < 0 && rc != -ENOMEM)
        strncat(err, "; see shardps-cluster --help", sizeof(err) - strlen(err) - 1);
    if (rc == 0)
        rc = ps_job_check(&job,
                          &(ps_job_process){.program = PS_JOB_LAUNCHER,
                                            .flags = &ctx,
                                            .num_servers = cfg.n_servers,
                                            .dump_weights = cfg.dump_weights,
                                            .bin_dir = cfg.bin_dir,
                                            .load_data = ps_job_data_load,
                                            .data_arg = &data},
                          &plan, err, sizeof(err));
    /* The launcher only looks at the data; each worker reads its own. */
    ps_dataset_free(&data.train);
    ps_dataset_free(&data.test);
    if (rc < 0) {
        fprintf(stderr, "shardps-cluster: %s\n", err);
        rc = rc == -ENOMEM ? 1 : 2;
    } else if (check) {
        ps_job_data_say_valid(ctx.prog, &job, &plan);
    } else {
        /* The workers get the model file by absolute path, so they find it
         * wherever they run. */
        if (job.model)
            job.model = plan.model_path;
        cfg.job = &job;
        rc = ps__prepare_metrics_dir(&cfg);
        if (rc == 0)
            rc = ps__run(&cfg, &plan, json);
    }
    ps_job_plan_free(&plan);
    ps_drills_free(cfg.drills);
    return rc;
}
