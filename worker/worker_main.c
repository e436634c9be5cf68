/* shardps-worker: one worker of a data-parallel job. main() reads the
 * options and hands them to the training loop (trainer.h), which does the
 * work. */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataset.h"
#include "flags.h"
#include "partition.h"
#include "ps_error.h"
#include "ps_log.h"
#include "server_list.h"
#include "trainer.h"

#define PS__MAX_REPORT_STEPS 16

typedef struct {
    const char *servers, *hidden, *data_dir, *dump_weights, *device;
    const char *compress; /* --compress: none or fp16 */
    int rank, workers, seed, batch, epochs, steps, threads, report_fd, progress_every, no_eval;
    int verbose, slow_ms, max_reconnects, tf32;
    double clip_norm;
    const char *metrics_file; /* --metrics-file: JSON lines, see train_metrics.h */
    const char *auth_token_file;
    int eval_every;
    double chunk_bytes, connect_timeout, max_payload;
    const char *report_steps; /* --report-steps, parsed into steps[n_steps] */
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
static void ps__log_own_side(const ps_flags_ctx *ctx, const ps__worker_opts *o, int n_servers)
{
    char from[5][256];

    ps_error("this worker has --hidden %s (from %s), --seed %d (from %s), --workers %d (from "
             "%s), %d server%s (from %s) and --chunk-bytes %.0f (from %s)",
             o->hidden, ps_flags_describe_origin(ctx, "hidden", from[0], sizeof(from[0])), o->seed,
             ps_flags_describe_origin(ctx, "seed", from[1], sizeof(from[1])), o->workers,
             ps_flags_describe_origin(ctx, "workers", from[2], sizeof(from[2])), n_servers,
             n_servers == 1 ? "" : "s",
             ps_flags_describe_origin(ctx, "servers", from[3], sizeof(from[3])), o->chunk_bytes,
             ps_flags_describe_origin(ctx, "chunk-bytes", from[4], sizeof(from[4])));
}

static int ps__train(const ps__worker_opts *o, const ps_model_spec *spec, const ps_server_list *sl)
{
    ps_trainer_config tc = {
        .spec = *spec,
        .servers = ps_server_list_entries(sl),
        .n_servers = ps_server_list_count(sl),
        .rank = o->rank,
        .workers = o->workers,
        .seed = o->seed,
        .batch = o->batch,
        .epochs = o->epochs,
        .steps = o->steps,
        .data_dir = o->data_dir,
        .device = o->device,
        .dump_weights = o->dump_weights,
        .metrics_file = o->metrics_file,
        .auth_token_file = o->auth_token_file,
        .tf32 = o->tf32,
        .threads = o->threads,
        .eval = o->rank == 0 && !o->no_eval,
        .eval_every = o->eval_every,
        .report_fd = o->report_fd,
        .progress_every = o->progress_every,
        .report_steps = o->steps_to_report,
        .n_report_steps = o->n_steps_to_report,
        .slow_ms = o->slow_ms,
        .max_reconnects = o->max_reconnects,
        .clip_norm = o->clip_norm,
        .chunk_bytes = (size_t)o->chunk_bytes,
        .max_payload = (size_t)o->max_payload,
        .connect_timeout = o->connect_timeout,
        .compress = strcmp(o->compress, "fp16") == 0 ? PS_COMPRESS_FP16 : PS_COMPRESS_NONE,
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
    ps__worker_opts o = {
        .servers = "127.0.0.1:7000",
        .hidden = "256,128",
        .data_dir = PS_DEFAULT_DATA_DIR,
        .device = "auto",
        .compress = "none",
        .workers = 1,
        .seed = 1,
        .batch = 64,
        .epochs = 10,
        .report_fd = -1,
        .progress_every = 100,
        .chunk_bytes = PS_DEFAULT_CHUNK_BYTES,
        .connect_timeout = 30,
        .max_payload = (double)((size_t)1 << 30),
        .max_reconnects = 10,
    };
    const char *cluster = NULL;
    int print_config = 0;
    const ps_flag flags[] = {
        {"cluster", PS_FLAG_STRING, &cluster, "FILE",
         "cluster file (INI) shared by the job's servers and workers; see docs/deploy.md", 0, 0,
         NULL},
        {"servers", PS_FLAG_STRING, &o.servers, "HOST:PORT,...",
         "parameter servers, in server-index order", 0, 0, NULL},
        {"rank", PS_FLAG_INT, &o.rank, "R", "this worker's rank, 0..workers-1", 0, 65535, NULL},
        {"workers", PS_FLAG_INT, &o.workers, "W", "number of workers in the job", 1, 65536, NULL},
        {"hidden", PS_FLAG_STRING, &o.hidden, "N,N,...", "hidden layer sizes of the MLP", 0, 0,
         NULL},
        {"seed", PS_FLAG_INT, &o.seed, "N", "seed for initial weights and data order", 0,
         2147483647, NULL},
        {"batch", PS_FLAG_INT, &o.batch, "B", "samples per step on this worker", 1, 65536, NULL},
        {"epochs", PS_FLAG_INT, &o.epochs, "E", "passes over the training data", 1, 100000, NULL},
        {"steps", PS_FLAG_INT, &o.steps, "N", "stop after N steps in all (0: run every epoch)", 0,
         2147483647, NULL},
        {"data-dir", PS_FLAG_STRING, &o.data_dir, "DIR", "folder with the Fashion-MNIST IDX files",
         0, 0, NULL},
        {"chunk-bytes", PS_FLAG_DOUBLE, &o.chunk_bytes, "BYTES",
         "chunk size; must match the servers", 4, 1 << 30, NULL},
        {"connect-timeout", PS_FLAG_DOUBLE, &o.connect_timeout, "SECONDS",
         "how long to keep trying to reach the servers", 0, 86400, NULL},
        {"device", PS_FLAG_CHOICE, &o.device, "DEV",
         "where to compute: auto (CUDA if a usable GPU is present, else CPU), cpu, cuda", 0, 0,
         "auto|cpu|cuda"},
        {"tf32", PS_FLAG_BOOL, &o.tf32, NULL,
         "CUDA: matrix products in TF32 on tensor cores (faster, ~1e-3 relative error)", 0, 0,
         NULL},
        {"threads", PS_FLAG_INT, &o.threads, "N", "BLAS threads (0: OpenBLAS's default)", 0, 1024,
         NULL},
        {"no-eval", PS_FLAG_BOOL, &o.no_eval, NULL, "skip the test-set evaluation on rank 0", 0, 0,
         NULL},
        {"eval-every", PS_FLAG_INT, &o.eval_every, "N",
         "rank 0 also evaluates on the test set every N steps (0: once per epoch)", 0, 2147483647,
         NULL},
        {"metrics-file", PS_FLAG_STRING, &o.metrics_file, "FILE",
         "write JSON lines of progress, time split and evaluations here", 0, 0, NULL},
        {"progress-every", PS_FLAG_INT, &o.progress_every, "N", "report progress every N steps", 1,
         1000000, NULL},
        {"dump-weights", PS_FLAG_STRING, &o.dump_weights, "FILE",
         "write the final weights (raw float32, tensor order) here", 0, 0, NULL},
        {"report-fd", PS_FLAG_INT, &o.report_fd, "FD",
         "write JSON progress lines to this descriptor (used by shardps-cluster)", -1, 1 << 20,
         NULL},
        {"report-steps", PS_FLAG_STRING, &o.report_steps, "N,N,...",
         "with --report-fd: also report each of these steps the moment it is done (the "
         "launcher's fault drills)",
         0, 0, NULL},
        {"max-payload", PS_FLAG_DOUBLE, &o.max_payload, "BYTES", "largest frame payload accepted",
         1024, 1ull << 40, NULL},
        {"compress", PS_FLAG_CHOICE, &o.compress, "KIND",
         "how pushes carry gradients: none (float32) or fp16 (IEEE half, half the bytes; the "
         "servers accumulate in float32)",
         0, 0, "none|fp16"},
        {"clip-norm", PS_FLAG_DOUBLE, &o.clip_norm, "NORM",
         "scale each tensor's gradient to at most this L2 norm (0: off)", 0, 1e9, NULL},
        {"max-reconnects", PS_FLAG_INT, &o.max_reconnects, "N",
         "rejoin the job at most N times after losing a server", 0, 1000000, NULL},
        {"slow-ms", PS_FLAG_INT, &o.slow_ms, "MS",
         "wait this long every step: an artificial straggler for experiments", 0, 3600000, NULL},
        {"print-config", PS_FLAG_BOOL, &print_config, NULL,
         "print the effective settings and where each came from, then exit", 0, 0, NULL},
        {"auth-token-file", PS_FLAG_STRING, &o.auth_token_file, "FILE",
         "prove to the servers (and make them prove) that we share this secret", 0, 0, NULL},
        {"verbose", PS_FLAG_BOOL, &o.verbose, NULL, "log debug detail", 0, 0, NULL},
    };
    /* Static: the settings last as long as the process, and the table's
     * strings may point into the cluster file's values it holds. */
    static ps_flags_ctx ctx;
    char rank_from[PATH_MAX + 64], workers_from[PATH_MAX + 64];
    ps_server_list *sl;
    ps_model_spec spec;
    char role[32], err[256];
    int sizes[PS_MAX_LAYERS + 1], nh, rc;

    /* A peer that resets while we write must cost a connection, not the
     * process: take write errors as EPIPE instead of the signal. */
    signal(SIGPIPE, SIG_IGN);
    ctx.flags = flags;
    ctx.n = (int)(sizeof(flags) / sizeof(flags[0]));
    ctx.prog = "shardps-worker";
    ctx.summary = "Trains an MLP on its shard of Fashion-MNIST against parameter servers.";
    ctx.section = "worker";
    ctx.per_process = "rank|report-fd|report-steps";
    rc = ps_flags_load(&ctx, argc, argv);
    if (rc != 0)
        return rc > 0 ? 0 : 2;
    if (print_config) {
        ps_flags_print_config(&ctx, stdout);
        return 0;
    }
    if (o.rank >= o.workers) {
        fprintf(stderr,
                "shardps-worker: --rank %d must be below --workers %d (rank from %s, workers "
                "from %s)\n",
                o.rank, o.workers,
                ps_flags_describe_origin(&ctx, "rank", rank_from, sizeof(rank_from)),
                ps_flags_describe_origin(&ctx, "workers", workers_from, sizeof(workers_from)));
        return 2;
    }
    nh = ps_model_spec_parse_sizes(o.hidden, sizes + 1, PS_MAX_LAYERS - 1);
    if (nh < 0) {
        fprintf(stderr,
                "shardps-worker: --hidden '%s' is not a list of positive sizes like 256,128\n",
                o.hidden);
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
    rc = ps_server_list_parse(&sl, o.servers, PS_MAX_SERVERS, 0, err, sizeof(err));
    if (rc < 0) {
        fprintf(stderr, "shardps-worker: --servers '%s': %s\n", o.servers, err);
        return rc == -ENOMEM ? 1 : 2;
    }
    snprintf(role, sizeof(role), "worker %d", o.rank);
    ps_log_set_role(role);
    if (o.verbose)
        ps_log_set_level(PS_LOG_DEBUG);
    sizes[0] = 784;
    sizes[nh + 1] = 10;
    if (ps_model_spec_init_mlp(&spec, sizes, nh + 2, (uint64_t)o.seed) < 0) {
        fprintf(stderr, "shardps-worker: --hidden '%s' gives an invalid model\n", o.hidden);
        ps_server_list_free(sl);
        return 2;
    }
    rc = ps__train(&o, &spec, sl);
    if (rc == -PS_EREJECTED)
        ps__log_own_side(&ctx, &o, ps_server_list_count(sl));
    ps_server_list_free(sl);
    return rc < 0 ? 1 : 0;
}
