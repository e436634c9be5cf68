/* bench-train: where a training step's time goes, and how much of the
 * communication hides behind compute.
 *
 * For each model (the default MLP 784-256-128-10 and a wide one,
 * 784-4096-4096-10 with about 20M parameters, where moving the weights costs
 * more than computing with them) it makes three measurements in one run:
 *
 *  - training: S shardps-server processes (sync, Adam, as shardps-cluster
 *    starts them) and W shardps-worker processes on 127.0.0.1, on ports the
 *    OS chose and the servers wrote back on --ready-fd. Each worker splits
 *    its own time into compute, communication and waiting
 *    (worker/train_metrics.h) and writes it to its --metrics-file once per
 *    progress interval; the first interval is warm-up and is dropped.
 *  - compute alone: the same forward and backward pass, on the same batches
 *    of rank 0, with the same backend and BLAS threads as one worker, in this
 *    process with no servers. It includes gathering the batch, which the
 *    worker also counts as compute.
 *  - communication alone: W processes forked from this one, each a
 *    ps_kv_client with the rank a worker would have, pushing the whole
 *    model's gradient and pulling the next clock's weights through servers
 *    started with the same flags, with no compute in between.
 *
 * From those: ratio = step / max(compute alone, communication alone), which
 * is 1 when the step costs no more than its larger part (everything else
 * overlapped) and (c + m) / max(c, m) when nothing overlaps; and the hidden
 * fraction of communication, 1 - (step - compute alone) / communication
 * alone, clipped to [0, 1]. Issue 7's target is a ratio of at most 1.15 for
 * the wide model in sync mode. It prints a table and one JSON line per
 * model, and with each the CPU that other processes took meanwhile, since
 * on a small shared machine that load moves every number. */
#include <cblas.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <uv.h>

#include "backend.h"
#include "bench_util.h"
#include "clock.h"
#include "dataset.h"
#include "job_options.h"
#include "flags.h"
#include "kv_client.h"
#include "model_desc.h"
#include "model_spec.h"
#include "partition.h"
#include "ps_error.h"
#include "ps_log.h"

#ifndef PS_SERVER_BIN
#define PS_SERVER_BIN "shardps-server"
#endif
#ifndef PS_WORKER_BIN
#define PS_WORKER_BIN "shardps-worker"
#endif

#define PS__MAX_SERVERS 8
#define PS__MAX_WORKERS 16
#define PS__SEED        "1"
#define PS__MAX_PAYLOAD ((size_t)1 << 30) /* the worker's and the server's default */

typedef struct {
    int steps, servers, workers, batch, threads, logs, tf32;
    const char *models, *device, *precision, *server_bin, *worker_bin, *data_dir;
} ps__opts;

typedef struct {
    const char *name, *hidden;
    /* Measured steps when --steps is 0: on a quiet 2-core machine about 2 s
     * of training for the default model and 15 s for the wide one, so the
     * whole program, baselines and start-up included, takes about a minute. */
    int default_steps;
} ps__model;

static const ps__model ps__models[] = {
    {"default", "256,128", 500},
    {"wide", "4096,4096", 20},
};
#define PS__N_MODELS ((int)(sizeof(ps__models) / sizeof(ps__models[0])))

/* One model's measurements, in seconds per step (samples_per_s aside). */
typedef struct {
    const ps__model *model;
    ps_model_desc desc; /* the MLP of --hidden, resolved */
    ps_model_spec spec;
    int steps, warmup;
    double step_s, compute_s, comm_s, wait_s, samples_per_s;
    double compute_only_s, comm_only_s;
    /* Cores' worth of CPU that other processes used during the three
     * measurements: the load from elsewhere the numbers suffered. */
    double other_cores;
} ps__result;

/* The servers of one measurement and the addresses that reach them. */
typedef struct {
    ps_bench_child kids[PS__MAX_SERVERS];
    char addr[PS__MAX_SERVERS][32];
    const char *addrs[PS__MAX_SERVERS];
    char list[PS__MAX_SERVERS * 32]; /* "127.0.0.1:P,127.0.0.1:Q" for --servers */
    int n;
} ps__servers;

/* Unmeasured steps before the measured ones: first touches of every buffer,
 * the servers' optimizer state, and the worker's fastest-exchange floor. */
static int ps__warmup_steps(int steps)
{
    int w = (steps + 3) / 4;

    return w < 2 ? 2 : w;
}

/* ---- servers ------------------------------------------------------------ */

/* Sends sig to every server still running and reaps them all; returns 0 when
 * each exited 0 on its own (they do once every rank has said goodbye). */
static int ps__servers_stop(ps__servers *sv, int sig)
{
    int rc = 0;

    for (int i = 0; sig != 0 && i < sv->n; i++)
        if (sv->kids[i].pid > 0)
            kill(sv->kids[i].pid, sig);
    for (int i = 0; i < sv->n; i++) {
        int rc2 = ps_bench_reap(&sv->kids[i], 10);
        if (rc2 < 0 && sig == 0)
            fprintf(stderr, "bench-train: server %d did not exit cleanly (rerun with --logs)\n", i);
        rc = rc < 0 ? rc : rc2;
    }
    return sig != 0 ? 0 : rc;
}

/* The end of a measurement: after a failure (rc < 0) every child and server
 * is stopped; otherwise the children have exited and the servers exit on
 * their own. Returns rc, or the servers' error. */
static int ps__stop_all(ps_bench_child *kids, int n, ps__servers *sv, int rc)
{
    for (int i = 0; rc < 0 && i < n; i++) {
        if (kids[i].pid > 0)
            kill(kids[i].pid, SIGTERM);
        ps_bench_reap(&kids[i], 10);
    }
    if (ps__servers_stop(sv, rc < 0 ? SIGTERM : 0) < 0 && rc == 0)
        rc = -PS_EPROTO;
    return rc;
}

/* Starts o->servers servers as shardps-cluster would (sync, Adam, the seed;
 * the workers declare the model), each on a port of the OS's choosing. */
static int ps__servers_start(const ps__opts *o, ps__servers *sv)
{
    char a_workers[16];
    const char *extra[] = {"--workers", a_workers, "--mode", "sync", "--optimizer",
                           "adam",      "--seed",  PS__SEED, NULL};
    size_t off = 0;
    int rc;

    memset(sv, 0, sizeof(*sv));
    snprintf(a_workers, sizeof(a_workers), "%d", o->workers);
    rc = ps_bench_start_servers(o->server_bin, o->servers, extra, o->logs, sv->kids);
    if (rc < 0) {
        fprintf(stderr, "bench-train: %s did not report a port (rerun with --logs)\n",
                o->server_bin);
        return rc;
    }
    sv->n = o->servers;
    for (int i = 0; i < sv->n; i++) {
        snprintf(sv->addr[i], sizeof(sv->addr[i]), "127.0.0.1:%d", sv->kids[i].port);
        sv->addrs[i] = sv->addr[i];
        off += (size_t)snprintf(sv->list + off, sizeof(sv->list) - off, "%s%s", i ? "," : "",
                                sv->addr[i]);
    }
    return 0;
}

static void ps__describe_exit(int status, char *buf, size_t len)
{
    if (WIFEXITED(status))
        snprintf(buf, len, "exited with status %d", WEXITSTATUS(status));
    else
        snprintf(buf, len, "was killed by signal %d", WIFSIGNALED(status) ? WTERMSIG(status) : 0);
}

/* Waits until every worker (or whatever `what` names) has exited 0. One
 * that fails, or a server that fails, ends the wait with an error that names
 * it; so does the deadline, a guard against a hung process. */
static int ps__wait_workers(ps_bench_child *wk, int n, ps__servers *sv, double timeout_s,
                            const char *what)
{
    double deadline = ps_clock_now() + timeout_s;
    char how[64];

    for (int left = n; left > 0;) {
        double rest = deadline - ps_clock_now();
        int status = 0, w = 0, s = 0;
        pid_t pid = rest >= 1 ? ps_bench_wait(-1, &status, (unsigned)rest) : -PS_ETIMEOUT;

        if (pid < 0) {
            fprintf(stderr, "bench-train: not every %s finished within %.0f s\n", what, timeout_s);
            return (int)pid;
        }
        while (w < n && wk[w].pid != pid)
            w++;
        while (s < sv->n && sv->kids[s].pid != pid)
            s++;
        if (w < n)
            wk[w].pid = 0;
        if (s < sv->n)
            sv->kids[s].pid = 0;
        /* A server exits 0 once every rank has said goodbye, which can be
         * before the last worker has finished exiting. */
        if (WIFEXITED(status) && WEXITSTATUS(status) == 0) {
            left -= w < n;
            continue;
        }
        ps__describe_exit(status, how, sizeof(how));
        fprintf(stderr, "bench-train: %s %d %s (rerun with --logs)\n", w < n ? what : "server",
                w < n ? w : s, how);
        return -PS_EPROTO;
    }
    return 0;
}

/* ---- compute alone ------------------------------------------------------ */

/* Times what the worker counts as compute (gathering the batch, forward and
 * backward) on rank 0's slices of successive global batches. */
static int ps__compute_only(const ps__opts *o, ps__result *r, const ps_dataset *ds,
                            const uint32_t *order)
{
    int per_epoch = ds->n / (o->batch * o->workers), correct, rc;
    ps_backend_config bc;
    ps_backend *be = NULL;
    uint8_t *y;
    float *x, loss;
    double t0 = 0;

    memset(&bc, 0, sizeof(bc));
    rc = ps_backend_parse_device(o->device, &bc.device);
    if (rc == 0)
        rc = ps_backend_parse_precision(o->precision, &bc.precision);
    if (rc < 0)
        return rc;
    /* Sized as the worker sizes it, so the two run the same code. */
    bc.max_batch = o->batch > 256 ? o->batch : 256;
    bc.tf32 = o->tf32;
    rc = ps_backend_init(&be, &r->desc, &r->spec, &bc);
    if (rc < 0)
        goto out;
    /* The worker gathers into the backend's (on CUDA pinned) batch buffers. */
    x = ps_backend_batch_x(be);
    y = ps_backend_batch_y(be);
    for (int i = 0; rc == 0 && i < r->warmup + r->steps; i++) {
        size_t first = (size_t)(i % per_epoch) * (size_t)o->workers * (size_t)o->batch;

        if (i == r->warmup)
            t0 = ps_clock_now();
        ps_dataset_gather(ds, order + first, o->batch, x, y);
        rc = ps_backend_train_step(be, x, y, o->batch, 0, &loss, &correct);
    }
    r->compute_only_s = (ps_clock_now() - t0) / r->steps;
out:
    if (rc < 0)
        fprintf(stderr, "bench-train: %s: compute alone failed: %s\n", r->model->name,
                ps_strerror(rc));
    ps_backend_free(be);
    return rc;
}

/* ---- communication alone ------------------------------------------------ */

/* One rank's exchanges: what a worker does between two train steps. */
typedef struct {
    const ps__result *r;
    const ps__servers *sv;
    int rank, world;
    double seconds; /* the measured steps, wall time */
} ps__comm_ctx;

static int ps__comm_rank(ps__comm_ctx *c)
{
    const ps_model_spec *spec = &c->r->spec;
    float *params[PS_MAX_TENSORS] = {0}, *grads[PS_MAX_TENSORS] = {0};
    ps_kv_client_config kc;
    ps_kv_client *kv = NULL;
    uint64_t clock = 0;
    double t0 = 0;
    int rc = -ENOMEM;

    for (int t = 0; t < spec->n_tensors; t++) {
        size_t n = spec->tensors[t].numel;

        params[t] = calloc(n, sizeof(float));
        grads[t] = malloc(n * sizeof(float));
        if (params[t] == NULL || grads[t] == NULL)
            goto out;
        /* Small and finite, so the servers accept it, and written now, so no
         * step pays for the pages' first use. */
        for (size_t i = 0; i < n; i++)
            grads[t][i] = 1e-4f;
    }
    memset(&kc, 0, sizeof(kc));
    kc.spec = *spec;
    kc.rank = c->rank;
    kc.world = c->world;
    kc.servers = c->sv->addrs;
    kc.n_servers = c->sv->n;
    kc.chunk_bytes = PS_DEFAULT_CHUNK_BYTES;
    kc.connect_timeout_s = 30;
    kc.max_payload = PS__MAX_PAYLOAD;
    kc.total_steps = (uint64_t)(c->r->warmup + c->r->steps);
    rc = ps_kv_client_init(&kv, &kc);
    if (rc == 0)
        rc = ps_kv_client_connect(kv, &clock);
    /* The pull a worker makes before its first step. */
    if (rc == 0)
        rc = ps_kv_client_pull(kv, clock, params);
    if (rc == 0)
        rc = ps_kv_client_wait(kv);
    for (int i = 0; rc == 0 && i < c->r->warmup + c->r->steps; i++, clock++) {
        if (i == c->r->warmup)
            t0 = ps_clock_now();
        rc = ps_kv_client_push(kv, (const float *const *)grads);
        if (rc == 0)
            rc = ps_kv_client_pull(kv, clock + 1, params);
        if (rc == 0)
            rc = ps_kv_client_wait(kv);
    }
    c->seconds = ps_clock_now() - t0;
out:
    /* A goodbye even after a failure: the barrier stops waiting for this
     * rank, so the others finish instead of hanging. */
    ps_kv_client_close(kv);
    for (int t = 0; t < spec->n_tensors; t++) {
        free(params[t]);
        free(grads[t]);
    }
    return rc;
}

/* Forks rank c->rank: the child exchanges, writes its measured seconds on a
 * pipe and exits; the parent gets the child and the pipe's reading end. */
static int ps__fork_rank(ps__comm_ctx *c, ps_bench_child *kid, int *fd)
{
    int pfd[2], rc;

    if (pipe2(pfd, O_CLOEXEC) < 0)
        return -errno;
    /* Nothing buffered may be written twice, by the parent and the child. */
    fflush(stdout);
    kid->pid = fork();
    if (kid->pid == 0) {
        rc = ps__comm_rank(c);
        dprintf(pfd[1], "%.9f\n", c->seconds);
        _exit(rc < 0 ? 1 : 0);
    }
    rc = kid->pid < 0 ? -errno : 0;
    close(pfd[1]);
    if (rc < 0) {
        kid->pid = 0;
        close(pfd[0]);
        return rc;
    }
    *fd = pfd[0];
    return 0;
}

/* Each rank is a process of its own, forked from this one, as each worker
 * is: the baseline runs the same processes, each with its own address space
 * and its own share of the scheduler, as the training it is compared with. */
static int ps__comm_only(const ps__opts *o, ps__result *r)
{
    ps_bench_child kids[PS__MAX_WORKERS];
    int fds[PS__MAX_WORKERS], started = 0, rc;
    ps__servers sv;
    double sum = 0;

    memset(kids, 0, sizeof(kids));
    rc = ps__servers_start(o, &sv);
    if (rc < 0)
        return rc;
    for (; rc == 0 && started < o->workers; started += rc == 0) {
        ps__comm_ctx c = {r, &sv, started, o->workers, 0};

        rc = ps__fork_rank(&c, &kids[started], &fds[started]);
        if (rc < 0)
            fprintf(stderr, "bench-train: cannot start a process: %s\n", ps_strerror(rc));
    }
    if (rc == 0)
        rc = ps__wait_workers(kids, o->workers, &sv, 60.0 + 10.0 * (r->warmup + r->steps),
                              "communication rank");
    for (int w = 0; w < started; w++) {
        char line[64];
        ssize_t n = rc == 0 ? read(fds[w], line, sizeof(line) - 1) : 0;

        if (rc == 0 && n <= 0) {
            fprintf(stderr, "bench-train: communication rank %d reported no time\n", w);
            rc = -PS_EPROTO;
        }
        line[n > 0 ? n : 0] = '\0';
        sum += strtod(line, NULL);
        close(fds[w]);
    }
    rc = ps__stop_all(kids, started, &sv, rc);
    if (rc < 0)
        fprintf(stderr, "bench-train: %s: communication alone failed\n", r->model->name);
    else
        r->comm_only_s = sum / started / r->steps;
    return rc;
}

/* ---- training ----------------------------------------------------------- */

/* One worker's measured intervals, summed. */
typedef struct {
    double steps, seconds, compute_s, comm_s, wait_s;
} ps__split;

/* The number after "key": in one JSON line of a worker's metrics file. */
static int ps__json_num(const char *line, const char *key, double *out)
{
    char pat[64], *end;
    const char *p;

    snprintf(pat, sizeof(pat), "\"%s\":", key);
    p = strstr(line, pat);
    if (p == NULL)
        return -PS_EFORMAT;
    p += strlen(pat);
    *out = strtod(p, &end);
    return end == p ? -PS_EFORMAT : 0;
}

/* Sums a worker's "interval" lines after the first, which is the warm-up. */
static int ps__read_metrics(const char *path, ps__split *out)
{
    static const char *const keys[] = {"steps", "interval_seconds", "compute_seconds",
                                       "communication_seconds", "waiting_seconds"};
    double *sums[] = {&out->steps, &out->seconds, &out->compute_s, &out->comm_s, &out->wait_s};
    FILE *f = fopen(path, "r");
    char *line = NULL;
    size_t cap = 0;
    int seen = 0, rc = 0;

    memset(out, 0, sizeof(*out));
    if (f == NULL)
        return -errno;
    while (rc == 0 && getline(&line, &cap, f) > 0) {
        if (strstr(line, "\"event\":\"interval\"") == NULL || seen++ == 0)
            continue;
        for (int k = 0; rc == 0 && k < (int)(sizeof(keys) / sizeof(keys[0])); k++) {
            double v;
            rc = ps__json_num(line, keys[k], &v);
            *sums[k] += rc == 0 ? v : 0;
        }
    }
    free(line);
    fclose(f);
    return rc;
}

/* Runs W workers against fresh servers for warm-up + measured steps, each
 * writing its metrics file into dir, and folds their measured intervals
 * into r. */
static int ps__train(const ps__opts *o, ps__result *r, const char *dir)
{
    char path[PS__MAX_WORKERS][PATH_MAX];
    char a_rank[16], a_workers[16], a_batch[16], a_steps[16], a_every[16], a_threads[16];
    ps_bench_child wk[PS__MAX_WORKERS];
    ps__servers sv;
    char *argv[] = {(char *)o->worker_bin,
                    "--servers",
                    sv.list,
                    "--rank",
                    a_rank,
                    "--workers",
                    a_workers,
                    "--hidden",
                    (char *)r->model->hidden,
                    "--seed",
                    PS__SEED,
                    "--batch",
                    a_batch,
                    "--steps",
                    a_steps,
                    "--epochs",
                    "100000", /* the flag's maximum: --steps decides */
                    "--progress-every",
                    a_every,
                    "--no-eval",
                    "--threads",
                    a_threads,
                    "--device",
                    (char *)o->device,
                    "--data-dir",
                    (char *)o->data_dir,
                    "--precision",
                    (char *)o->precision,
                    "--metrics-file",
                    NULL, /* path[rank] */
                    o->tf32 ? "--tf32" : NULL,
                    NULL};
    int n_argv = (int)(sizeof(argv) / sizeof(argv[0])), started = 0, rc;

    memset(wk, 0, sizeof(wk));
    snprintf(a_workers, sizeof(a_workers), "%d", o->workers);
    snprintf(a_batch, sizeof(a_batch), "%d", o->batch);
    snprintf(a_steps, sizeof(a_steps), "%d", r->warmup + r->steps);
    /* One interval per warm-up's worth of steps: the first is the warm-up
     * itself, the others cover exactly the measured steps. */
    snprintf(a_every, sizeof(a_every), "%d", r->warmup);
    snprintf(a_threads, sizeof(a_threads), "%d", o->threads);
    rc = ps__servers_start(o, &sv);
    if (rc < 0)
        return rc;
    for (; rc == 0 && started < o->workers; started++) {
        snprintf(a_rank, sizeof(a_rank), "%d", started);
        snprintf(path[started], sizeof(path[started]), "%s/%s-worker-%d.jsonl", dir, r->model->name,
                 started);
        argv[n_argv - 3] = path[started];
        rc = ps_bench_spawn(argv, o->logs, 0, &wk[started]);
    }
    if (rc == 0)
        rc = ps__wait_workers(wk, o->workers, &sv, 60.0 + 10.0 * (r->warmup + r->steps), "worker");
    rc = ps__stop_all(wk, started, &sv, rc);

    r->step_s = r->compute_s = r->comm_s = r->wait_s = r->samples_per_s = 0;
    for (int w = 0; w < started; w++) {
        ps__split sp;
        int rc2 = rc < 0 ? rc : ps__read_metrics(path[w], &sp);

        if (rc == 0 && rc2 < 0)
            fprintf(stderr, "bench-train: cannot read worker %d's metrics file %s: %s\n", w,
                    path[w], ps_strerror(rc2));
        if (rc2 == 0 && (int)sp.steps != r->steps) {
            fprintf(stderr, "bench-train: worker %d's metrics cover %.0f measured steps, not %d\n",
                    w, sp.steps, r->steps);
            rc2 = -PS_EFORMAT;
        }
        if (rc == 0 && rc2 == 0) {
            /* Per-step means of each worker, averaged over workers; the
             * throughput is the job's, so it adds up. */
            r->step_s += sp.seconds / sp.steps / o->workers;
            r->compute_s += sp.compute_s / sp.steps / o->workers;
            r->comm_s += sp.comm_s / sp.steps / o->workers;
            r->wait_s += sp.wait_s / sp.steps / o->workers;
            r->samples_per_s += sp.steps * o->batch / sp.seconds;
        }
        rc = rc < 0 ? rc : rc2;
        unlink(path[w]);
    }
    if (rc < 0)
        fprintf(stderr, "bench-train: %s: training failed\n", r->model->name);
    return rc;
}

/* ---- output ------------------------------------------------------------- */

static void ps__print_header(void)
{
    const char *fmt = "%-8s %10s %2s %2s %4s | %9s %8s | %8s %8s %8s | %8s %8s | %6s %6s | %6s\n";

    printf(fmt, "model", "params", "S", "W", "B", "samples/s", "step", "compute", "comm", "wait",
           "compute", "comm", "ratio", "hidden", "others");
    printf(fmt, "", "", "", "", "", "", "ms", "ms", "ms", "ms", "alone ms", "alone ms", "", "",
           "cores");
}

static void ps__report(const ps__opts *o, const ps__result *r, char *json, size_t len)
{
    double worst = r->compute_only_s > r->comm_only_s ? r->compute_only_s : r->comm_only_s;
    double ratio = r->step_s / worst;
    double hidden = 1.0 - (r->step_s - r->compute_only_s) / r->comm_only_s;
    size_t params = r->spec.total_numel;

    hidden = hidden < 0 ? 0 : hidden > 1 ? 1 : hidden;
    printf("%-8s %10zu %2d %2d %4d | %9.0f %8.2f | %8.2f %8.2f %8.2f | %8.2f %8.2f | %6.3f "
           "%6.3f | %6.2f\n",
           r->model->name, params, o->servers, o->workers, o->batch, r->samples_per_s,
           r->step_s * 1e3, r->compute_s * 1e3, r->comm_s * 1e3, r->wait_s * 1e3,
           r->compute_only_s * 1e3, r->comm_only_s * 1e3, ratio, hidden, r->other_cores);
    fflush(stdout);
    snprintf(json, len,
             "{\"bench\":\"train\",\"model\":\"%s\",\"hidden\":\"%s\",\"params\":%zu,"
             "\"model_bytes\":%zu,\"mode\":\"sync\",\"servers\":%d,\"workers\":%d,\"batch\":%d,"
             "\"threads\":%d,\"device\":\"%s\",\"tf32\":%s,\"precision\":\"%s\",\"steps\":%d,"
             "\"warmup_steps\":%d,"
             "\"samples_per_s\":%.1f,\"step_ms\":%.3f,\"compute_ms\":%.3f,\"comm_ms\":%.3f,"
             "\"wait_ms\":%.3f,\"compute_only_ms\":%.3f,\"comm_only_ms\":%.3f,\"ratio\":%.4f,"
             "\"hidden_fraction\":%.4f,\"other_cpu_cores\":%.3f}",
             r->model->name, r->model->hidden, params, params * sizeof(float), o->servers,
             o->workers, o->batch, o->threads, o->device, o->tf32 ? "true" : "false", o->precision,
             r->steps, r->warmup, r->samples_per_s, r->step_s * 1e3, r->compute_s * 1e3,
             r->comm_s * 1e3, r->wait_s * 1e3, r->compute_only_s * 1e3, r->comm_only_s * 1e3, ratio,
             hidden, r->other_cores);
}

/* ---- main --------------------------------------------------------------- */

/* "default,wide" into indexes of ps__models; returns the count or -EINVAL,
 * having named the word it did not know. */
static int ps__parse_models(const char *text, int *out)
{
    char buf[256], *save = NULL;
    int n = 0;

    if (strlen(text) >= sizeof(buf))
        return -EINVAL;
    strcpy(buf, text);
    for (char *tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        int m = 0;

        while (m < PS__N_MODELS && strcmp(tok, ps__models[m].name) != 0)
            m++;
        if (m == PS__N_MODELS || n == PS__N_MODELS) {
            fprintf(stderr,
                    "bench-train: --models: '%s' is not a model; use default, wide or "
                    "default,wide\n",
                    tok);
            return -EINVAL;
        }
        out[n++] = m;
    }
    if (n == 0)
        fprintf(stderr, "bench-train: --models is empty; use default, wide or default,wide\n");
    return n > 0 ? n : -EINVAL;
}

/* The three measurements of one model, then its row of the table. */
static int ps__run_model(const ps__opts *o, const ps__model *m, const ps_dataset *ds,
                         const uint32_t *order, const char *dir, char *json, size_t len)
{
    int sizes[PS_MAX_LAYERS], nh, rc;
    char err[256] = "";
    double busy0 = 0, busy1 = 0, own0 = ps_bench_own_cpu(), t0 = ps_clock_now();
    ps__result r;

    memset(&r, 0, sizeof(r));
    /* Failing to read /proc/stat only loses the noise column (it reads 0). */
    ps_bench_machine_busy(&busy0);
    r.model = m;
    r.steps = o->steps > 0 ? o->steps : m->default_steps;
    r.warmup = ps__warmup_steps(r.steps);
    nh = ps_model_spec_parse_sizes(m->hidden, sizes, PS_MAX_LAYERS - 1);
    rc = nh < 0 ? nh : ps_model_desc_mlp(&r.desc, sizes, nh, m->hidden, err, sizeof(err));
    if (rc == 0)
        rc = ps_model_desc_resolve(&r.desc, &ds->shape, 10, 1, &r.spec, err, sizeof(err));
    if (rc < 0)
        fprintf(stderr, "bench-train: %s\n", err);
    if (rc == 0)
        rc = ps__compute_only(o, &r, ds, order);
    if (rc == 0)
        rc = ps__comm_only(o, &r);
    if (rc == 0)
        rc = ps__train(o, &r, dir);
    /* Every process of the measurement has been waited for by now, so its
     * CPU time is in our own; the rest of the machine's busy time was
     * somebody else's, competing for the same cores. */
    if (ps_bench_machine_busy(&busy1) == 0 && busy0 > 0)
        r.other_cores = (busy1 - busy0 - (ps_bench_own_cpu() - own0)) / (ps_clock_now() - t0);
    /* The two clocks tick in different units; a quiet machine can read a
     * hair below zero. */
    r.other_cores = r.other_cores > 0 ? r.other_cores : 0;
    if (rc == 0)
        ps__report(o, &r, json, len);
    ps_model_spec_free(&r.spec);
    return rc;
}

/* Checks what the flags cannot: the model list, the binaries, the batch
 * against the data. Returns 0 or -PS_EUSAGE after one line naming the fix. */
static int ps__check_opts(const ps__opts *o, int *models, int *n_models)
{
    const char *bins[][2] = {{o->server_bin, "--server-bin"}, {o->worker_bin, "--worker-bin"}};

    *n_models = ps__parse_models(o->models, models);
    if (*n_models < 0)
        return -PS_EUSAGE;
    for (int i = 0; i < 2; i++) {
        if (access(bins[i][0], X_OK) != 0) {
            fprintf(stderr, "bench-train: %s is not an executable; build it or pass %s\n",
                    bins[i][0], bins[i][1]);
            return -PS_EUSAGE;
        }
    }
    return 0;
}

int main(int argc, char **argv)
{
    ps__opts o = {.servers = 2,
                  .workers = 2,
                  .batch = 64,
                  .models = "default,wide",
                  .device = "cpu",
                  .precision = "fp32",
                  .server_bin = PS_SERVER_BIN,
                  .worker_bin = PS_WORKER_BIN,
                  .data_dir = PS_DEFAULT_DATA_DIR};
    const ps_flag flags[] = {
        {"models", PS_FLAG_STRING, &o.models, "LIST",
         "models to measure: default (784-256-128-10), wide (784-4096-4096-10)", 0, 0, NULL, NULL,
         NULL},
        {"steps", PS_FLAG_INT, &o.steps, "N",
         "measured steps per model (0: 500 for default, 20 for wide), after N/4 (at least 2) "
         "warm-up steps",
         0, 100000, NULL, NULL, NULL},
        {"servers", PS_FLAG_INT, &o.servers, "S", "parameter servers", 1, PS__MAX_SERVERS, NULL,
         NULL, NULL},
        {"workers", PS_FLAG_INT, &o.workers, "W", "workers (and ranks for communication alone)", 1,
         PS__MAX_WORKERS, NULL, NULL, NULL},
        {"batch", PS_FLAG_INT, &o.batch, "B", "samples per step per worker", 1, 65536, NULL, NULL,
         NULL},
        {"threads", PS_FLAG_INT, &o.threads, "N",
         "BLAS threads per worker and for compute alone (0: cores / workers, as shardps-cluster)",
         0, 1024, NULL, NULL, NULL},
        {"device", PS_FLAG_CHOICE, &o.device, "DEV", "where the workers compute", 0, 0,
         "cpu|auto|cuda", NULL, NULL},
        {"tf32", PS_FLAG_BOOL, &o.tf32, NULL,
         "TF32 tensor-core products on a GPU (workers and compute alone; ignored on the CPU)", 0, 0,
         NULL, NULL, NULL},
        {"precision", PS_FLAG_CHOICE, &o.precision, "P",
         "bf16: products on bfloat16 inputs on a GPU (workers and compute alone; needs --device "
         "cuda)",
         0, 0, "fp32|bf16", NULL, NULL},
        {"data-dir", PS_FLAG_STRING, &o.data_dir, "DIR", "folder with the Fashion-MNIST IDX files",
         0, 0, NULL, NULL, NULL},
        {"server-bin", PS_FLAG_STRING, &o.server_bin, "PATH", "the shardps-server to start", 0, 0,
         NULL, NULL, NULL},
        {"worker-bin", PS_FLAG_STRING, &o.worker_bin, "PATH", "the shardps-worker to start", 0, 0,
         NULL, NULL, NULL},
        {"logs", PS_FLAG_BOOL, &o.logs, NULL, "let the servers and workers log to stderr", 0, 0,
         NULL, NULL, NULL},
    };
    char json[PS__N_MODELS][1024], err[512], dir[] = "/tmp/bench-train.XXXXXX";
    int models[PS__N_MODELS], n_models, n_json = 0, rc;
    ps_dataset ds;
    uint32_t *order = NULL;

    memset(&ds, 0, sizeof(ds));
    signal(SIGPIPE, SIG_IGN);
    rc = ps_flags_parse(flags, (int)(sizeof(flags) / sizeof(flags[0])), argc, argv, "bench-train",
                        "Samples/s and the split of a sync training step into compute, "
                        "communication and waiting, against compute alone and communication "
                        "alone.");
    if (rc != 0)
        return rc > 0 ? 0 : 2;
    if (ps__check_opts(&o, models, &n_models) < 0)
        return 2;
    ps_log_set_role("bench");
    if (o.threads == 0) {
        int ncpu = (int)uv_available_parallelism();
        o.threads = ncpu / o.workers > 1 ? ncpu / o.workers : 1;
    }
    openblas_set_num_threads(o.threads);
    rc = ps_dataset_load_dir(&ds, o.data_dir, 1, err, sizeof(err));
    if (rc < 0) {
        fprintf(stderr, "bench-train: %s\n", err);
        return 1;
    }
    if ((long)o.batch * o.workers > ds.n) {
        fprintf(stderr,
                "bench-train: --batch %d x --workers %d exceeds the %d training samples; use a "
                "smaller --batch\n",
                o.batch, o.workers, ds.n);
        rc = -PS_EUSAGE;
        goto out;
    }
    order = malloc((size_t)ds.n * sizeof(uint32_t));
    if (order == NULL || mkdtemp(dir) == NULL) {
        rc = order == NULL ? -ENOMEM : -errno;
        fprintf(stderr, "bench-train: cannot set up: %s\n", ps_strerror(rc));
        goto out;
    }
    /* Epoch 0's order, as every worker derives it from the seed. */
    ps_dataset_epoch_order(1, 0, ds.n, order);

    printf("bench-train: sync, Adam, %d server(s), %d worker(s) x batch %d, %d BLAS thread(s) "
           "per worker, device %s%s%s; per-step means over the measured steps\n\n",
           o.servers, o.workers, o.batch, o.threads, o.device, o.tf32 ? " (TF32)" : "",
           strcmp(o.precision, "bf16") == 0 ? " (bf16 products)" : "");
    ps__print_header();
    for (int i = 0; i < n_models && rc == 0; i++) {
        rc = ps__run_model(&o, &ps__models[models[i]], &ds, order, dir, json[n_json],
                           sizeof(json[n_json]));
        n_json += rc == 0;
    }
    rmdir(dir);
    printf("\n");
    for (int j = 0; j < n_json; j++)
        printf("%s\n", json[j]);
out:
    free(order);
    ps_dataset_free(&ds);
    return rc == -PS_EUSAGE ? 2 : rc < 0 ? 1 : 0;
}
