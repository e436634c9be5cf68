/* shardps-worker: trains its shard of the data against the parameter
 * servers. Each step pulls the weights, computes the gradient of its part of
 * the global batch, and pushes it; the push of step t and the pull of step t+1
 * travel together. Rank 0 also evaluates on the test set after every epoch.
 *
 * Data sharding: every worker derives the same shuffled order for an epoch;
 * global batch t is elements [t*W*B, (t+1)*W*B) of it and worker r takes the
 * r-th slice of B. So W workers with batch B see exactly the samples that one
 * worker with batch W*B would, which is what makes sync mode comparable to a
 * single process. */
#include <cblas.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "auth.h"
#include "dataset.h"
#include "flags.h"
#include "kv_client.h"
#include "partition.h"
#include "ps_error.h"
#include "ps_log.h"
#include "train_metrics.h"

#define PS__MAX_SERVERS 4096

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
} ps__worker_opts;

static double ps__now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Splits "a:1,b:2" in place into list; returns the count or -EINVAL. */
static int ps__split_servers(char *text, const char **list, int max)
{
    int n = 0;

    for (char *tok = strtok(text, ","); tok; tok = strtok(NULL, ",")) {
        if (n == max)
            return -EINVAL;
        list[n++] = tok;
    }
    return n > 0 ? n : -EINVAL;
}

static void ps__report(int fd, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* One JSON object per line on the launcher's pipe; nothing when run alone. */
static void ps__report(int fd, const char *fmt, ...)
{
    char line[512];
    va_list ap;
    int n;

    if (fd < 0)
        return;
    va_start(ap, fmt);
    n = vsnprintf(line, sizeof(line) - 1, fmt, ap);
    va_end(ap);
    if (n < 0 || n >= (int)sizeof(line) - 1)
        return;
    line[n++] = '\n';
    if (write(fd, line, (size_t)n) != n)
        ps_warn("could not write a progress report: %s", strerror(errno));
}

static int ps__evaluate(ps_backend *be, const ps_dataset *test, const float *x, int epoch,
                        uint64_t step, const ps__worker_opts *o, double *acc_out,
                        ps_train_metrics *tm, int epoch_end)
{
    float loss;
    int correct, rc;
    double t = ps__now();

    rc = ps_backend_evaluate(be, x, test->labels, test->n, &loss, &correct);
    if (rc < 0)
        return rc;
    *acc_out = (double)correct / test->n;
    ps_train_metrics_eval(tm, step, *acc_out, loss, ps__now() - t);
    /* --eval-every: within an epoch, a log line and the metrics file only; the
     * launcher's "epoch done" reports stay one per epoch. */
    if (!epoch_end) {
        ps_info("step %" PRIu64 ": test accuracy %.4f, test loss %.4f", step, *acc_out, loss);
        return 0;
    }
    ps_info("epoch %d: test accuracy %.4f, test loss %.4f", epoch, *acc_out, loss);
    ps__report(o->report_fd,
               "{\"event\":\"eval\",\"rank\":%d,\"epoch\":%d,\"step\":%" PRIu64
               ",\"test_accuracy\":%.6f,\"test_loss\":%.6f}",
               o->rank, epoch, step, *acc_out, loss);
    return 0;
}

static int ps__dump_weights(const char *path, const ps_model_spec *spec, ps_backend *be)
{
    FILE *f = fopen(path, "wb");
    int rc = 0;

    if (f == NULL) {
        ps_error("cannot write --dump-weights %s: %s", path, strerror(errno));
        return -errno;
    }
    for (int t = 0; t < spec->n_tensors && rc == 0; t++)
        if (fwrite(ps_backend_params(be, t), sizeof(float), spec->tensors[t].numel, f) !=
            spec->tensors[t].numel)
            rc = -EIO;
    if (fclose(f) != 0 || rc < 0) {
        ps_error("cannot write --dump-weights %s: %s", path, strerror(EIO));
        return -EIO;
    }
    return 0;
}

typedef struct {
    ps_dataset train, test;
    float *test_x, *batch_x;
    uint8_t *batch_y;
    uint32_t *order;
    ps_backend *be;
    ps_kv_client *kv;
    int finished; /* every step done: say goodbye to the servers */
} ps__worker;

static void ps__worker_free(ps__worker *w)
{
    /* Only a worker that finished says goodbye; one that failed may be
     * restarted, and the servers keep its place. */
    if (w->finished)
        ps_kv_client_close(w->kv);
    else
        ps_kv_client_abandon(w->kv);
    ps_backend_free(w->be);
    ps_dataset_free(&w->train);
    ps_dataset_free(&w->test);
    free(w->test_x);
    free(w->batch_x);
    free(w->batch_y);
    free(w->order);
}

/* Errors after which rejoining makes sense: the connection went away. A
 * server that refused us or found us misbehaving would refuse us again. */
static int ps__is_connection_loss(int rc)
{
    return rc != -PS_EREJECTED && rc != -PS_EPROTO && rc != -PS_EMISMATCH && rc != -ENOMEM &&
           rc != -EINVAL && rc != -PS_ETIMEOUT;
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

/* (Re)creates the client and joins the job; writes the clock to start at. */
static int ps__connect(ps__worker *w, const ps_kv_client_config *kc, uint64_t *start)
{
    int rc;

    ps_kv_client_abandon(w->kv);
    w->kv = NULL;
    rc = ps_kv_client_init(&w->kv, kc);
    if (rc == 0)
        rc = ps_kv_client_connect(w->kv, start);
    return rc;
}

/* Scales each tensor's gradient to an L2 norm of at most max_norm. The worker
 * holds whole tensors, so the norm is the tensor's, not a chunk's. */
static void ps__clip_tensor(float *g, size_t n, float max_norm)
{
    double sq = 0;

    for (size_t i = 0; i < n; i++)
        sq += (double)g[i] * g[i];
    if (sq > (double)max_norm * max_norm) {
        float scale = (float)(max_norm / sqrt(sq));
        for (size_t i = 0; i < n; i++)
            g[i] *= scale;
    }
}

static void ps__clip_gradients(ps_backend *be, const ps_model_spec *spec, float max_norm)
{
    for (int t = 0; t < spec->n_tensors; t++)
        ps__clip_tensor(ps_backend_grads(be, t), spec->tensors[t].numel, max_norm);
}

/* Pushes each layer's gradients the moment backward has them, so they travel
 * while the layers below are computed (ps_backend_on_layer_grads). */
typedef struct {
    ps__worker *w;
    const ps_model_spec *spec;
    float clip_norm;
    int rc; /* the first push error of this step */
} ps__layer_pusher;

static void ps__push_layer(void *arg, int layer)
{
    ps__layer_pusher *lp = arg;

    for (int t = 2 * layer + 1; t >= 2 * layer && lp->rc == 0; t--) {
        float *g = ps_backend_grads(lp->w->be, t);
        if (lp->clip_norm > 0)
            ps__clip_tensor(g, lp->spec->tensors[t].numel, lp->clip_norm);
        lp->rc = ps_kv_client_push_tensor(lp->w->kv, t, g);
    }
    if (lp->rc == 0)
        lp->rc = ps_kv_client_progress(lp->w->kv);
}

/* --slow-ms: an artificial straggler for experiments (backup workers, ssp). */
static void ps__slow_down(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

static int ps__train(const ps__worker_opts *o, const ps_model_spec *spec, const char **servers,
                     int n_servers)
{
    ps__worker w;
    ps_backend_config bc;
    ps_kv_client_config kc;
    float *params[PS_MAX_TENSORS];
    const float *grads[PS_MAX_TENSORS];
    char err[512];
    uint8_t auth_key[PS_AUTH_KEY_BYTES];
    int features, rc, steps_per_epoch, epoch = -1, eval = o->rank == 0 && !o->no_eval;
    uint64_t clock, total, start, steps_done = 0, last_step;
    double t0, last_t, acc = -1, loss_sum = 0;
    int loss_n = 0, reconnects = 0;
    ps_train_metrics tm;
    double t_step, t_exchange;
    ps__layer_pusher lp = {&w, spec, (float)o->clip_norm, 0};

    memset(&w, 0, sizeof(w));
    memset(&tm, 0, sizeof(tm));
    /* The device first, so the first log line says what computes and a
     * missing GPU fails before anything is loaded or connected. */
    memset(&bc, 0, sizeof(bc));
    rc = ps_backend_parse_device(o->device, &bc.device);
    if (rc < 0)
        goto out;
    bc.max_batch = o->batch > 256 ? o->batch : 256;
    bc.tf32 = o->tf32;
    bc.device_index = o->rank;
    rc = ps_backend_init(&w.be, spec, &bc);
    if (rc < 0)
        goto out;
    ps_info("compute on %s", ps_backend_describe(w.be));
    rc = ps_dataset_load_dir(&w.train, o->data_dir, 1, err, sizeof(err));
    if (rc == 0 && eval)
        rc = ps_dataset_load_dir(&w.test, o->data_dir, 0, err, sizeof(err));
    if (rc < 0) {
        ps_error("%s", err);
        goto out;
    }
    if (eval && ps_dataset_match(&w.train, &w.test, err, sizeof(err)) < 0) {
        ps_error("%s", err);
        rc = -PS_EFORMAT;
        goto out;
    }
    features = w.train.features;
    if (features != spec->sizes[0] || w.train.classes > spec->sizes[spec->n_layers]) {
        ps_error("the data has %d features per sample and %d classes but the model's input is %d "
                 "and it has %d outputs",
                 features, w.train.classes, spec->sizes[0], spec->sizes[spec->n_layers]);
        rc = -PS_EMISMATCH;
        goto out;
    }
    steps_per_epoch = w.train.n / (o->batch * o->workers);
    if (steps_per_epoch == 0) {
        ps_error("--batch %d x %d workers exceeds the %d training samples; use a smaller batch",
                 o->batch, o->workers, w.train.n);
        rc = -EINVAL;
        goto out;
    }
    total = (uint64_t)steps_per_epoch * (uint64_t)o->epochs;
    if (o->steps > 0 && (uint64_t)o->steps < total)
        total = (uint64_t)o->steps;

    rc = -ENOMEM;
    w.order = malloc((size_t)w.train.n * sizeof(uint32_t));
    w.batch_x = malloc((size_t)o->batch * (size_t)features * sizeof(float));
    w.batch_y = malloc((size_t)o->batch);
    if (w.order == NULL || w.batch_x == NULL || w.batch_y == NULL)
        goto out;
    if (eval) {
        uint32_t *all = malloc((size_t)w.test.n * sizeof(uint32_t));
        w.test_x = malloc((size_t)w.test.n * (size_t)features * sizeof(float));
        if (all == NULL || w.test_x == NULL) {
            free(all);
            goto out;
        }
        for (int i = 0; i < w.test.n; i++)
            all[i] = (uint32_t)i;
        ps_dataset_gather(&w.test, all, w.test.n, w.test_x, w.test.labels);
        free(all);
    }
    for (int t = 0; t < spec->n_tensors; t++) {
        params[t] = ps_backend_params(w.be, t);
        grads[t] = ps_backend_grads(w.be, t);
    }

    memset(&kc, 0, sizeof(kc));
    kc.spec = *spec;
    kc.rank = o->rank;
    kc.world = o->workers;
    kc.servers = servers;
    kc.n_servers = n_servers;
    kc.chunk_bytes = (size_t)o->chunk_bytes;
    kc.connect_timeout_s = o->connect_timeout;
    kc.max_payload = (size_t)o->max_payload;
    kc.total_steps = total;
    kc.compress = strcmp(o->compress, "fp16") == 0 ? PS_COMPRESS_FP16 : PS_COMPRESS_NONE;
    if (o->auth_token_file) {
        int loose = 0;
        rc = ps_auth_load_key(o->auth_token_file, auth_key, &loose, err, sizeof(err));
        if (rc < 0) {
            ps_error("%s", err);
            goto out;
        }
        if (loose)
            ps_warn("%s is readable by other users; chmod 600 it", o->auth_token_file);
        kc.auth_key = auth_key;
    }
    rc = ps__connect(&w, &kc, &start);
    if (rc < 0)
        goto out;
    /* A straggler (--slow-ms) must not have its gradients in before its
     * delay, so it pushes everything after it instead. */
    if (o->slow_ms == 0)
        ps_backend_on_layer_grads(w.be, ps__push_layer, &lp);
    ps_info("connected to %d server%s; %d steps per epoch of %d x %d samples, starting at step "
            "%" PRIu64 " of %" PRIu64,
            n_servers, n_servers == 1 ? "" : "s", steps_per_epoch, o->workers, o->batch, start,
            total);
    ps__report(o->report_fd,
               "{\"event\":\"start\",\"rank\":%d,\"step\":%" PRIu64 ",\"steps\":%" PRIu64
               ",\"steps_per_epoch\":%d}",
               o->rank, start, total, steps_per_epoch);

    rc = ps_train_metrics_open(&tm, o->metrics_file, o->rank, steps_per_epoch);
    if (rc < 0) {
        ps_error("cannot write --metrics-file %s: %s", o->metrics_file, strerror(-rc));
        goto out;
    }
    t0 = last_t = ps__now();
    last_step = start;
    rc = ps_kv_client_pull(w.kv, start, params);
    if (rc == 0)
        rc = ps_kv_client_wait(w.kv);
    if (rc == 0)
        rc = ps_backend_load_params(w.be);
    for (clock = start; clock < total; clock++) {
        int e = (int)(clock / (uint64_t)steps_per_epoch);
        size_t first =
            (size_t)(clock % (uint64_t)steps_per_epoch) * (size_t)o->workers * (size_t)o->batch +
            (size_t)o->rank * (size_t)o->batch;
        float loss;
        int correct;

        if (rc < 0) {
            /* The connection to a server was lost: rejoin at the job's current
             * clock, or give up if it cannot be reached again. */
            if (!ps__is_connection_loss(rc) || ++reconnects > o->max_reconnects)
                break;
            ps_warn("reconnecting to the servers (attempt %d of %d)", reconnects,
                    o->max_reconnects);
            rc = ps__connect(&w, &kc, &clock);
            if (rc == 0)
                rc = ps_kv_client_pull(w.kv, clock, params);
            if (rc == 0)
                rc = ps_kv_client_wait(w.kv);
            if (rc == 0)
                rc = ps_backend_load_params(w.be);
            if (rc < 0 || clock >= total)
                continue;
            ps_info("rejoined at step %" PRIu64, clock);
            e = (int)(clock / (uint64_t)steps_per_epoch);
            first = (size_t)(clock % (uint64_t)steps_per_epoch) * (size_t)o->workers *
                        (size_t)o->batch +
                    (size_t)o->rank * (size_t)o->batch;
        }
        if (e != epoch) {
            if (eval && clock > start &&
                (rc = ps__evaluate(w.be, &w.test, w.test_x, e, clock, o, &acc, &tm, 1)) < 0)
                break;
            epoch = e;
            ps_dataset_epoch_order((uint64_t)o->seed, epoch, w.train.n, w.order);
        } else if (eval && o->eval_every > 0 && clock > start &&
                   clock % (uint64_t)o->eval_every == 0 &&
                   (rc = ps__evaluate(w.be, &w.test, w.test_x, e, clock, o, &acc, &tm, 0)) < 0) {
            break;
        }
        t_step = ps__now();
        ps_dataset_gather(&w.train, w.order + first, o->batch, w.batch_x, w.batch_y);
        lp.rc = 0;
        rc = ps_backend_train_step(w.be, w.batch_x, w.batch_y, o->batch, &loss, &correct);
        if (rc < 0)
            break;
        if (o->slow_ms > 0) {
            if (o->clip_norm > 0)
                ps__clip_gradients(w.be, spec, (float)o->clip_norm);
            ps__slow_down(o->slow_ms);
            lp.rc = ps_kv_client_push(w.kv, grads);
        }
        t_exchange = ps__now();
        loss_sum += loss;
        loss_n++;
        rc = lp.rc;
        if (rc == 0)
            rc = ps_kv_client_pull(w.kv, clock + 1, params);
        if (rc == 0)
            rc = ps_kv_client_wait(w.kv);
        if (rc == 0)
            rc = ps_backend_load_params(w.be);
        if (rc < 0)
            continue;
        steps_done++;
        ps_train_metrics_step(&tm, t_exchange - t_step, ps__now() - t_exchange, loss, correct,
                              o->batch);
        /* Sync with backup workers: the step may have been applied without
         * us; the pull brought newer weights, so skip to where they are. */
        if (ps_kv_client_weights_clock(w.kv) > clock + 1)
            clock = ps_kv_client_weights_clock(w.kv) - 1;
        if ((clock + 1) % (uint64_t)o->progress_every == 0 || clock + 1 >= total) {
            ps_kv_client_stats ks;
            double now = ps__now();
            double sps = (double)(steps_done - last_step) * o->batch / (now - last_t);
            ps_kv_client_stats_get(w.kv, &ks);
            ps_train_metrics_interval(&tm, clock + 1, ps_kv_client_weights_clock(w.kv), &ks);
            if (o->report_fd < 0)
                ps_info("epoch %d/%d step %" PRIu64 "/%" PRIu64 " loss %.4f %.0f samples/s "
                        "staleness mean %.2f max %" PRIu64,
                        epoch + 1, o->epochs, clock + 1, total, loss_sum / loss_n, sps,
                        ks.staleness_count ? (double)ks.staleness_sum / ks.staleness_count : 0.0,
                        ks.staleness_max);
            ps__report(o->report_fd,
                       "{\"event\":\"progress\",\"rank\":%d,\"epoch\":%d,\"step\":%" PRIu64
                       ",\"steps\":%" PRIu64 ",\"loss\":%.6f,\"samples_per_second\":%.1f"
                       ",\"staleness_mean\":%.3f,\"staleness_max\":%" PRIu64 ",\"dropped\":%" PRIu64
                       "}",
                       o->rank, epoch + 1, clock + 1, total, loss_sum / loss_n, sps,
                       ks.staleness_count ? (double)ks.staleness_sum / ks.staleness_count : 0.0,
                       ks.staleness_max, ks.dropped);
            last_t = now;
            last_step = steps_done;
            loss_sum = 0;
            loss_n = 0;
        }
    }
    if (rc < 0)
        goto out;
    if (eval && (rc = ps__evaluate(w.be, &w.test, w.test_x, epoch + 1, total, o, &acc, &tm, 1)) < 0)
        goto out;
    if (o->dump_weights && (rc = ps__dump_weights(o->dump_weights, spec, w.be)) < 0)
        goto out;
    w.finished = 1;
    {
        ps_kv_client_stats ks;
        double secs = ps__now() - t0;
        double samples = (double)steps_done * o->batch;
        ps_kv_client_stats_get(w.kv, &ks);
        ps_train_metrics_close(&tm, total, &ks);
        ps_info("done: %" PRIu64 " steps in %.1f s, %.0f samples/s, %.1f MB pushed, %.1f MB "
                "pulled, %" PRIu64 " late chunks dropped",
                steps_done, secs, samples / secs, ks.bytes_sent / 1e6, ks.bytes_received / 1e6,
                ks.dropped);
        ps__report(o->report_fd,
                   "{\"event\":\"done\",\"rank\":%d,\"steps\":%" PRIu64
                   ",\"samples\":%.0f,\"seconds\":%.3f,\"test_accuracy\":%.6f,\"dropped\":%" PRIu64
                   ",\"bytes_pushed\":%" PRIu64 ",\"bytes_pulled\":%" PRIu64 "}",
                   o->rank, steps_done, samples, secs, acc, ks.dropped, ks.bytes_sent,
                   ks.bytes_received);
    }
out:
    ps_train_metrics_close(&tm, 0, NULL);
    ps__worker_free(&w);
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
        {"data-dir", PS_FLAG_STRING, &o.data_dir, "DIR",
         "folder with the data: IDX or .npy files (docs/data.md)", 0, 0, NULL},
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
    const char *servers[PS__MAX_SERVERS];
    ps_model_spec spec;
    char role[32], *server_text;
    int sizes[PS_MAX_LAYERS + 1], nh, n_servers, rc;

    /* A peer that resets while we write must cost a connection, not the
     * process: take write errors as EPIPE instead of the signal. */
    signal(SIGPIPE, SIG_IGN);
    ctx.flags = flags;
    ctx.n = (int)(sizeof(flags) / sizeof(flags[0]));
    ctx.prog = "shardps-worker";
    ctx.summary = "Trains an MLP on its shard of Fashion-MNIST against parameter servers.";
    ctx.section = "worker";
    ctx.per_process = "rank|report-fd";
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
    server_text = strdup(o.servers);
    n_servers = server_text ? ps__split_servers(server_text, servers, PS__MAX_SERVERS) : -ENOMEM;
    if (n_servers < 0) {
        fprintf(stderr,
                "shardps-worker: --servers '%s' is not a comma-separated list of HOST:PORT\n",
                o.servers);
        free(server_text);
        return 2;
    }
    snprintf(role, sizeof(role), "worker %d", o.rank);
    ps_log_set_role(role);
    if (o.verbose)
        ps_log_set_level(PS_LOG_DEBUG);
    if (o.threads > 0)
        openblas_set_num_threads(o.threads);
    sizes[0] = 784;
    sizes[nh + 1] = 10;
    if (ps_model_spec_init_mlp(&spec, sizes, nh + 2, (uint64_t)o.seed) < 0) {
        fprintf(stderr, "shardps-worker: --hidden '%s' gives an invalid model\n", o.hidden);
        free(server_text);
        return 2;
    }
    rc = ps__train(&o, &spec, servers, n_servers);
    if (rc == -PS_EREJECTED)
        ps__log_own_side(&ctx, &o, n_servers);
    free(server_text);
    return rc < 0 ? 1 : 0;
}
