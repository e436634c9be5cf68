/* shardps-worker: one worker of a data-parallel job. main() reads the
 * options, has the job checked (job_check.h: the rules, the files, the data
 * read and the model built on them; --check stops there) and hands the
 * checked job to the training loop (trainer.h), which does the work. */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flags.h"
#include "flags_help.h"
#include "job_check.h"
#include "job_data.h"
#include "job_options.h"
#include "ps_error.h"
#include "ps_log.h"
#include "parent_watch.h"
#include "trainer.h"

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

/* Trains with the checked job; the trainer takes the data over. */
static int ps__train(const ps_trainer_config *tc)
{
    ps_trainer *t;
    int rc = ps_trainer_init(&t, tc);

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
    static ps_job_plan plan;
    static ps_job_datasets data;
    /* The worker's own options land straight in the trainer's config. */
    static ps_trainer_config tc = {
        .job = &jo, .plan = &plan, .data = &data, .report_fd = -1, .stop = &ps__stop_signal};
    const char *cluster = NULL, *report_steps = NULL;
    int print_config = 0, check = 0, nflags, parent_pid = 0;
    const ps_flag own[] = {
        {"cluster", PS_FLAG_STRING, &cluster, "FILE",
         "cluster file (INI) shared by the job's servers and workers; see docs/deploy.md", 0, 0,
         NULL, NULL, NULL},
        {"rank", PS_FLAG_INT, &tc.rank, "R", "this worker's rank, 0..workers-1", 0, 65535, NULL,
         NULL, NULL},
        {"threads", PS_FLAG_INT, &tc.threads, "N", "BLAS threads (0: OpenBLAS's default)", 0, 1024,
         NULL, NULL, NULL},
        {"no-eval", PS_FLAG_BOOL, &tc.no_eval, NULL, "skip the test-set evaluation on rank 0", 0, 0,
         NULL, NULL, NULL},
        {"eval-at-end", PS_FLAG_BOOL, &tc.eval_at_end, NULL,
         "rank 0 evaluates only after its last step, not per epoch or --eval-every (an "
         "evaluator, shardps-eval --follow, scores the run meanwhile)",
         0, 0, NULL, NULL, NULL},
        {"metrics-file", PS_FLAG_STRING, &tc.metrics_file, "FILE",
         "write JSON lines of progress, time split and evaluations here", 0, 0, NULL, NULL, NULL},
        {"dump-weights", PS_FLAG_STRING, &tc.dump_weights, "FILE",
         "write the final weights (raw float32, tensor order) here", 0, 0, NULL, NULL, NULL},
        {"report-fd", PS_FLAG_INT, &tc.report_fd, "FD",
         "write JSON progress lines to this descriptor (used by shardps-cluster)", -1, 1 << 20,
         NULL, NULL, NULL},
        {"parent-pid", PS_FLAG_INT, &parent_pid, "PID",
         "exit when process PID, its parent, does (set by shardps-cluster)", 0, 2147483647, NULL,
         NULL, NULL},
        {"report-steps", PS_FLAG_STRING, &report_steps, "N,N,...",
         "with --report-fd: also report each of these steps the moment it is done (the "
         "launcher's fault drills)",
         0, 0, NULL, NULL, NULL},
        {"slow-ms", PS_FLAG_INT, &tc.slow_ms, "MS",
         "wait this long every step: an artificial straggler for experiments", 0, 3600000, NULL,
         NULL, NULL},
        {"print-config", PS_FLAG_BOOL, &print_config, NULL,
         "print the effective settings and where each came from, then exit", 0, 0, NULL, NULL,
         NULL},
        {"check", PS_FLAG_BOOL, &check, NULL,
         "check every option and the files they name as a run would (the data read, the model "
         "built on it), start nothing, exit 0 if the worker would start (2 and the reason if "
         "not)",
         0, 0, NULL, NULL, NULL},
    };
    int n_own = (int)(sizeof(own) / sizeof(own[0])), max = (int)(sizeof(flags) / sizeof(flags[0]));
    ps_job_process proc = {
        .program = PS_JOB_WORKER, .flags = &ctx, .load_data = ps_job_data_load, .data_arg = &data};
    char role[32], err[1024];
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
    if (report_steps && (tc.n_report_steps = ps__parse_steps(report_steps, tc.report_steps,
                                                             PS_TRAINER_MAX_REPORT_STEPS)) < 0) {
        fprintf(stderr,
                "shardps-worker: --report-steps '%s' must be up to %d ascending step numbers, "
                "e.g. 20,50\n",
                report_steps, PS_TRAINER_MAX_REPORT_STEPS);
        return 2;
    }
    snprintf(role, sizeof(role), "worker %d", tc.rank);
    ps_log_set_role(role);
    if (jo.verbose)
        ps_log_set_level(PS_LOG_DEBUG);
    proc.rank = tc.rank;
    proc.dump_weights = tc.dump_weights;
    rc = ps_job_check(&jo, &proc, &plan, err, sizeof(err));
    if (rc == 0 && check)
        ps_job_data_say_valid(ctx.prog, &jo, &plan);
    if (rc == 0 && !check) {
        ps__catch_stop_signals();
        rc = ps__train(&tc);
        if (rc == -PS_EREJECTED)
            ps__log_own_side(&ctx, &jo, plan.num_servers);
    } else if (rc < 0) {
        fprintf(stderr, "shardps-worker: %s\n", err);
        rc = rc == -ENOMEM ? 1 : 2;
    }
    ps_job_plan_free(&plan);
    ps_dataset_free(&data.train);
    ps_dataset_free(&data.test);
    /* Stopped by a signal: the status a shell gives a process it killed. */
    if (rc == -EINTR && ps__stop_signal)
        return 128 + ps__stop_signal;
    return rc < 0 ? 1 : rc;
}
