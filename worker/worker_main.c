/* shardps-worker: one worker of a data-parallel job. main() reads the
 * options and hands them to the training loop (trainer.h), which does the
 * work. */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flags.h"
#include "flags_help.h"
#include "job_options.h"
#include "model_desc.h"
#include "ps_error.h"
#include "ps_log.h"
#include "parent_watch.h"
#include "server_list.h"
#include "trainer.h"

#define PS__MAX_REPORT_STEPS 16

/* The signal that asked this worker to stop, for the trainer to see at the
 * end of its step; 0: none. */
static volatile sig_atomic_t ps__stop_signal;

/* The first of each kind is a request; the same one again ends the worker
 * at once. (A Ctrl-C reaches a launched worker twice: SIGINT from the
 * terminal and SIGTERM from the launcher; both are requests.) */
static void ps__on_stop_signal(int signum)
{
    if (ps__stop_signal == signum) {
        signal(signum, SIG_DFL);
        raise(signum);
        return;
    }
    ps__stop_signal = signum;
}

/* SIGTERM and SIGINT end the run at the next step boundary. */
static void ps__catch_stop_signals(void)
{
    struct sigaction sa;

    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = ps__on_stop_signal;
    sa.sa_flags = SA_RESTART;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
}

/* The worker's own options; the job's are in a ps_job_options. */
typedef struct {
    const char *dump_weights, *metrics_file;
    int rank, threads, report_fd, no_eval, slow_ms;
    const char *report_steps; /* --report-steps, parsed into steps_to_report */
    uint64_t steps_to_report[PS__MAX_REPORT_STEPS];
    int n_steps_to_report;
} ps__worker_opts;

/* --report-steps "20,50": ascending step numbers, at most max of them.
 * Returns the count or -EINVAL. */
static int ps__parse_steps(const char *text, uint64_t *out, int max)
{
    const char *p = text;
    int n = 0;

    while (*p) {
        char *end;
        unsigned long long v;
        if (*p < '0' || *p > '9' || n == max)
            return -EINVAL;
        errno = 0;
        v = strtoull(p, &end, 10);
        if (errno != 0 || (n > 0 && v <= out[n - 1]) || (*end != ',' && *end != '\0') ||
            (*end == ',' && end[1] == '\0'))
            return -EINVAL;
        out[n++] = v;
        p = *end == ',' ? end + 1 : end;
    }
    return n;
}

/* A server refused us and logged what it runs; log what we run and where
 * each value came from, so the reader sees which side to fix. */
static void ps__log_own_side(const ps_flags_ctx *ctx, const ps_job_options *o, int n_servers)
{
    char from[5][256];
    /* The model is the file's when there is one, else --hidden's MLP. */
    const char *model = o->model ? "model" : "hidden";

    ps_error("this worker has --%s %s (from %s), --seed %d (from %s), --workers %d (from "
             "%s), %d server%s (from %s) and --chunk-bytes %.0f (from %s)",
             model, o->model ? o->model : o->hidden,
             ps_flags_describe_origin(ctx, model, from[0], sizeof(from[0])), o->seed,
             ps_flags_describe_origin(ctx, "seed", from[1], sizeof(from[1])), o->workers,
             ps_flags_describe_origin(ctx, "workers", from[2], sizeof(from[2])), n_servers,
             n_servers == 1 ? "" : "s",
             ps_flags_describe_origin(ctx, "servers", from[3], sizeof(from[3])), o->chunk_bytes,
             ps_flags_describe_origin(ctx, "chunk-bytes", from[4], sizeof(from[4])));
}

/* The model without --model: --hidden's MLP as a model description, so the
 * worker has one way to build a model. */
static int ps__hidden_desc(const char *hidden, ps_model_desc *desc, char *err, size_t errlen)
{
    int sizes[PS_MAX_LAYERS], nh = ps_model_spec_parse_sizes(hidden, sizes, PS_MAX_LAYERS - 1);
    char source[sizeof(desc->source)];

    if (nh < 0) {
        snprintf(err, errlen, "--hidden '%s' is not a list of positive sizes like 256,128", hidden);
        return -EINVAL;
    }
    snprintf(source, sizeof(source), "--hidden %s", hidden);
    return ps_model_desc_mlp(desc, sizes, nh, source, err, errlen);
}

static int ps__train(const ps_job_options *j, const ps__worker_opts *o, const ps_model_desc *desc,
                     const ps_server_list *sl, const char *settings)
{
    ps_trainer_config tc = {
        .desc = *desc,
        .servers = ps_server_list_entries(sl),
        .n_servers = ps_server_list_count(sl),
        .rank = o->rank,
        .workers = j->workers,
        .seed = j->seed,
        .batch = j->batch,
        .epochs = j->epochs,
        .steps = j->steps,
        .data_dir = j->data_dir,
        .device = j->device,
        .dump_weights = o->dump_weights,
        .save_model = j->save_model,
        .metrics_file = o->metrics_file,
        .auth_token_file = j->auth_token_file,
        .tf32 = j->tf32,
        .precision = j->precision,
        .threads = o->threads,
        .eval = o->rank == 0 && !o->no_eval,
        .eval_every = j->eval_every,
        .report_fd = o->report_fd,
        .progress_every = j->progress_every,
        .report_steps = o->steps_to_report,
        .n_report_steps = o->n_steps_to_report,
        .slow_ms = o->slow_ms,
        .max_reconnects = j->max_reconnects,
        .max_rejected_steps = j->max_rejected_steps,
        .stop = &ps__stop_signal,
        .clip_norm = j->clip_norm,
        .chunk_bytes = (size_t)j->chunk_bytes,
        .max_payload = (size_t)j->max_payload,
        .connect_timeout = j->connect_timeout,
        .request_timeout = j->request_timeout,
        .compress = j->compress,
        .job_settings = settings,
    };
    ps_trainer *t;
    int rc = ps_trainer_init(&t, &tc);

    if (rc == 0)
        rc = ps_trainer_run(t);
    ps_trainer_free(t);
    return rc;
}

int main(int argc, char **argv)
{
    /* Static: the settings last as long as the process, and the table's
     * strings may point into the cluster file's values the context holds. */
    static ps_job_options jo;
    static ps_flags_ctx ctx;
    static ps_flag flags[96];
    static char settings[PS_JOB_SETTINGS_MAX];
    ps__worker_opts o = {.report_fd = -1};
    const char *cluster = NULL;
    int print_config = 0, nflags, parent_pid = 0;
    const ps_flag own[] = {
        {"cluster", PS_FLAG_STRING, &cluster, "FILE",
         "cluster file (INI) shared by the job's servers and workers; see docs/deploy.md", 0, 0,
         NULL, NULL, NULL},
        {"rank", PS_FLAG_INT, &o.rank, "R", "this worker's rank, 0..workers-1", 0, 65535, NULL,
         NULL, NULL},
        {"threads", PS_FLAG_INT, &o.threads, "N", "BLAS threads (0: OpenBLAS's default)", 0, 1024,
         NULL, NULL, NULL},
        {"no-eval", PS_FLAG_BOOL, &o.no_eval, NULL, "skip the test-set evaluation on rank 0", 0, 0,
         NULL, NULL, NULL},
        {"metrics-file", PS_FLAG_STRING, &o.metrics_file, "FILE",
         "write JSON lines of progress, time split and evaluations here", 0, 0, NULL, NULL, NULL},
        {"dump-weights", PS_FLAG_STRING, &o.dump_weights, "FILE",
         "write the final weights (raw float32, tensor order) here", 0, 0, NULL, NULL, NULL},
        {"report-fd", PS_FLAG_INT, &o.report_fd, "FD",
         "write JSON progress lines to this descriptor (used by shardps-cluster)", -1, 1 << 20,
         NULL, NULL, NULL},
        {"parent-pid", PS_FLAG_INT, &parent_pid, "PID",
         "exit when process PID, its parent, does (set by shardps-cluster)", 0, 2147483647, NULL,
         NULL, NULL},
        {"report-steps", PS_FLAG_STRING, &o.report_steps, "N,N,...",
         "with --report-fd: also report each of these steps the moment it is done (the "
         "launcher's fault drills)",
         0, 0, NULL, NULL, NULL},
        {"slow-ms", PS_FLAG_INT, &o.slow_ms, "MS",
         "wait this long every step: an artificial straggler for experiments", 0, 3600000, NULL,
         NULL, NULL},
        {"print-config", PS_FLAG_BOOL, &print_config, NULL,
         "print the effective settings and where each came from, then exit", 0, 0, NULL, NULL,
         NULL},
    };
    int n_own = (int)(sizeof(own) / sizeof(own[0])), max = (int)(sizeof(flags) / sizeof(flags[0]));
    char rank_from[PATH_MAX + 64], workers_from[PATH_MAX + 64];
    ps_server_list *sl;
    ps_model_desc desc;
    char role[32], err[512];
    int rc;

    /* A peer that resets while we write must cost a connection, not the
     * process: take write errors as EPIPE instead of the signal. */
    signal(SIGPIPE, SIG_IGN);
    ps_job_options_defaults(&jo);
    nflags = ps_job_options_flags(&jo, PS_JOB_WORKER, flags, max);
    if (nflags < 0 || nflags + n_own > max)
        return 1;
    memcpy(flags + nflags, own, sizeof(own));
    ctx.flags = flags;
    ctx.n = nflags + n_own;
    ctx.prog = "shardps-worker";
    ctx.summary = "Trains a model (a model file, or --hidden's MLP) on its shard of the data "
                  "against parameter servers.";
    ctx.section = "worker";
    ctx.per_process = "rank|report-fd|report-steps|parent-pid";
    rc = ps_flags_load(&ctx, argc, argv);
    if (rc != 0)
        return rc > 0 ? 0 : 2;
    if (parent_pid > 0 && ps_parent_watch(parent_pid) < 0) {
        fprintf(stderr, "%s: --parent-pid %d: the parent is gone or cannot be watched; exiting\n",
                ctx.prog, parent_pid);
        return 1;
    }
    if (print_config) {
        ps_flags_print_config(&ctx, stdout);
        return 0;
    }
    if (o.rank >= jo.workers) {
        fprintf(stderr,
                "shardps-worker: --rank %d must be below --workers %d (rank from %s, workers "
                "from %s)\n",
                o.rank, jo.workers,
                ps_flags_describe_origin(&ctx, "rank", rank_from, sizeof(rank_from)),
                ps_flags_describe_origin(&ctx, "workers", workers_from, sizeof(workers_from)));
        return 2;
    }
    /* --model decides the model; --hidden only when there is none (the
     * launcher forwards every job option, --hidden included). */
    rc = jo.model ? ps_model_desc_load(&desc, jo.model, err, sizeof(err))
                  : ps__hidden_desc(jo.hidden, &desc, err, sizeof(err));
    if (rc < 0) {
        fprintf(stderr, "shardps-worker: %s\n", err);
        return 2;
    }
    if (o.report_steps) {
        o.n_steps_to_report =
            ps__parse_steps(o.report_steps, o.steps_to_report, PS__MAX_REPORT_STEPS);
        if (o.n_steps_to_report < 0) {
            fprintf(stderr,
                    "shardps-worker: --report-steps '%s' must be up to %d ascending step "
                    "numbers, e.g. 20,50\n",
                    o.report_steps, PS__MAX_REPORT_STEPS);
            return 2;
        }
    }
    rc = ps_server_list_parse(&sl, jo.servers, PS_MAX_SERVERS, 0, err, sizeof(err));
    if (rc < 0) {
        char from[PATH_MAX + 64];
        fprintf(stderr, "shardps-worker: servers '%s' (from %s): %s\n", jo.servers,
                ps_flags_describe_origin(&ctx, "servers", from, sizeof(from)), err);
        return rc == -ENOMEM ? 1 : 2;
    }
    snprintf(role, sizeof(role), "worker %d", o.rank);
    ps_log_set_role(role);
    if (jo.verbose)
        ps_log_set_level(PS_LOG_DEBUG);
    if (ps_job_settings_format(&jo, ps_server_list_count(sl), settings, sizeof(settings)) < 0) {
        fprintf(stderr, "shardps-worker: the job's settings do not fit in %zu bytes\n",
                sizeof(settings));
        ps_server_list_free(sl);
        return 2;
    }
    ps__catch_stop_signals();
    rc = ps__train(&jo, &o, &desc, sl, settings);
    if (rc == -PS_EREJECTED)
        ps__log_own_side(&ctx, &jo, ps_server_list_count(sl));
    ps_server_list_free(sl);
    /* Stopped by a signal: the status a shell gives a process it killed. */
    if (rc == -EINTR && ps__stop_signal)
        return 128 + ps__stop_signal;
    return rc < 0 ? 1 : 0;
}
