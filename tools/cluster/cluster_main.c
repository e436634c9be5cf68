/* shardps-cluster: a whole parameter-server job on this machine.
 *
 * main parses the options (the job's, from job_options.h, and the
 * launcher's own), checks everything that can be checked before a process
 * starts (--check stops there), and wires the modules: the supervisor
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
#include "job_options.h"
#include "model_spec.h"
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

int main(int argc, char **argv)
{
    /* Static: the option table points at them, and the run borrows them. */
    static ps_job_options job;
    static ps_supervisor_config cfg;
    ps_drills *drills = NULL;
    char self_dir[PATH_MAX];
    const char *kill_worker = NULL, *slow_worker = NULL, *pause_worker = NULL, *kill_server = NULL;
    int ncpu;
    /* The job options first, then the launcher's own. Static: too large for
     * the stack, and the context must outlive every use of the strings. */
    static ps_flag flags[96];
    static ps_flags_ctx ctx;
    int print_config = 0, check = 0, json = 0, nflags;
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
         "check every option as a run would, start nothing, exit 0 if the job would start (2 "
         "and the reason if not)",
         0, 0, NULL, NULL, NULL},
    };
    int n_own = (int)(sizeof(own) / sizeof(own[0])), max = (int)(sizeof(flags) / sizeof(flags[0]));
    static uv_loop_t loop;
    ps_console *con = NULL;
    ps_progress *progress = NULL;
    char **child_env = NULL;
    ps_job_outcome outcome;
    double t_start, wall;
    int rc;

    ps_job_options_defaults(&job);
    /* A launcher's job: two of each, unlike a lone server or worker. */
    job.workers = 2;
    cfg.n_servers = 2;
    cfg.metrics_port = -1;
    if (ps__self_dir(self_dir, sizeof(self_dir)) == 0)
        cfg.bin_dir = self_dir;
    /* A peer that resets while we write must cost a connection, not the
     * process: take write errors as EPIPE instead of the signal. */
    signal(SIGPIPE, SIG_IGN);
    nflags = ps_job_options_flags(&job, PS_JOB_LAUNCHER, flags, max);
    if (nflags < 0 || nflags + n_own > max)
        return 1;
    memcpy(flags + nflags, own, sizeof(own));
    ctx.flags = flags;
    ctx.n = nflags + n_own;
    ctx.prog = "shardps-cluster";
    ctx.summary = "Runs a parameter-server job on this machine: S servers and W workers on "
                  "127.0.0.1, ports chosen by the OS.";
    rc = ps_flags_load(&ctx, argc, argv);
    if (rc != 0)
        return rc > 0 ? 0 : 2;
    if (print_config) {
        ps_flags_print_config(&ctx, stdout);
        return 0;
    }
    if (job.workers > 128) {
        fprintf(stderr,
                "shardps-cluster: --workers %d: this launcher starts at most 128; see "
                "shardps-cluster --help\n",
                job.workers);
        return 2;
    }
    /* The workers get the model file by absolute path, so they find it
     * wherever they run, and a missing file fails here, before any start. */
    if (job.model) {
        static char model_path[PATH_MAX];
        if (realpath(job.model, model_path) == NULL) {
            fprintf(stderr, "shardps-cluster: --model %s: %s\n", job.model, strerror(errno));
            return 2;
        }
        job.model = model_path;
    }
    if (job.restore && job.checkpoint_dir == NULL) {
        fprintf(stderr, "shardps-cluster: --restore needs --checkpoint-dir DIR; see "
                        "shardps-cluster --help\n");
        return 2;
    }
    {
        const ps_drills_config dc = {kill_worker,
                                     pause_worker,
                                     kill_server,
                                     slow_worker,
                                     job.workers,
                                     cfg.n_servers,
                                     job.checkpoint_dir != NULL};
        char err[256];
        rc = ps_drills_init(&drills, &dc, err, sizeof(err));
        if (rc < 0) {
            fprintf(stderr, "shardps-cluster: %s; see shardps-cluster --help\n", err);
            return rc == -ENOMEM ? 1 : 2;
        }
    }
    {
        int sizes[PS_MAX_LAYERS + 1];
        if (ps_model_spec_parse_sizes(job.hidden, sizes, PS_MAX_LAYERS - 1) < 0) {
            fprintf(stderr,
                    "shardps-cluster: --hidden '%s' is not a list of positive sizes like "
                    "256,128\n",
                    job.hidden);
            rc = 2;
            goto out;
        }
    }
    if (cfg.bin_dir == NULL) {
        fprintf(stderr,
                "shardps-cluster: cannot tell where the shardps binaries are; pass --bin-dir\n");
        rc = 2;
        goto out;
    }
    if (check) {
        printf("shardps-cluster: the options are valid\n");
        rc = 0;
        goto out;
    }
    ncpu = (int)uv_available_parallelism();
    if (cfg.threads == 0)
        cfg.threads = ncpu / job.workers > 1 ? ncpu / job.workers : 1;
    if (cfg.metrics_dir && mkdir(cfg.metrics_dir, 0777) < 0 && errno != EEXIST) {
        fprintf(stderr, "shardps-cluster: cannot create --metrics-dir %s: %s\n", cfg.metrics_dir,
                strerror(errno));
        rc = 2;
        goto out;
    }
    /* Servers append to their files, so that one restarted with --restore
     * goes on with its history; a new job starts from empty files. */
    for (int i = 0; cfg.metrics_dir && i < cfg.n_servers; i++) {
        char path[PATH_MAX];
        snprintf(path, sizeof(path), "%s/server-%d.jsonl", cfg.metrics_dir, i);
        if (truncate(path, 0) < 0 && errno != ENOENT) {
            fprintf(stderr, "shardps-cluster: cannot empty %s: %s\n", path, strerror(errno));
            rc = 2;
            goto out;
        }
    }
    ps_log_set_role("cluster");
    if (job.verbose)
        ps_log_set_level(PS_LOG_DEBUG);
    setvbuf(stdout, NULL, _IOLBF, 0);

    child_env = ps_child_env(environ);
    if (child_env == NULL) {
        fprintf(stderr, "shardps-cluster: out of memory\n");
        rc = 1;
        goto out;
    }
    uv_loop_init(&loop);
    if (ps_console_init(&con, &loop) < 0 ||
        ps_progress_init(&progress, con, job.workers, job.epochs) < 0) {
        fprintf(stderr, "shardps-cluster: out of memory\n");
        rc = 1;
        goto out;
    }
    ps_log_set_sink(ps_console_log_sink, con);
    cfg.job = &job;
    cfg.env = child_env;
    cfg.drills = drills;
    cfg.con = con;
    cfg.progress = progress;
    ps_info("starting %d server%s and %d worker%s, mode %s, %d epoch%s", cfg.n_servers,
            cfg.n_servers == 1 ? "" : "s", job.workers, job.workers == 1 ? "" : "s", job.mode,
            job.epochs, job.epochs == 1 ? "" : "s");
    t_start = ps_clock_now();
    if (ps_supervisor_run(&loop, &cfg, &outcome) < 0) {
        fprintf(stderr, "shardps-cluster: out of memory\n");
        /* Nothing started: close the console's handle before it is freed. */
        ps_console_close(con);
        uv_run(&loop, UV_RUN_DEFAULT);
        rc = 1;
        goto out;
    }
    wall = ps_clock_now() - t_start;
    ps_console_end_progress(con);
    uv_loop_close(&loop);
    rc = outcome == PS_JOB_INTERRUPTED ? 130 : outcome == PS_JOB_FAILED ? 1 : 0;
    if (rc == 0) {
        ps_summary s = {.mode = job.mode,
                        .compress = job.compress,
                        .metrics_dir = cfg.metrics_dir,
                        .servers = cfg.n_servers,
                        .workers = job.workers,
                        .wall_seconds = wall};
        ps_progress_summary(progress, &s);
        ps_summary_print(&s, json, stdout);
    }
out:
    ps_log_set_sink(NULL, NULL);
    ps_progress_free(progress);
    ps_console_free(con);
    free(child_env);
    ps_drills_free(drills);
    return rc;
}
