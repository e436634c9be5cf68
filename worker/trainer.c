/* The worker's training loop (see trainer.h): the backend computes, the
 * key-value client moves weights and gradients, the dataset feeds batches,
 * and the launcher hears of progress on its pipe. */
#include "trainer.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend.h"
#include "clock.h"
#include "dataset.h"
#include "model_file.h"
#include "ps_error.h"
#include "ps_log.h"
#include "report.h"
#include "shardps.h"
#include "train_metrics.h"

struct ps_trainer {
    ps_trainer_config cfg;
    const ps_job_options *job; /* cfg.job */
    const ps_model_spec *spec; /* the tensor table: cfg.plan's model on this data */
    ps_backend *be;
    shardps *ps; /* the job's client, include/shardps.h */
    ps_dataset train, test;
    float *test_x;  /* the whole test set */
    float *batch_x; /* this step's batch: the backend's buffers (pinned on CUDA) */
    uint8_t *batch_y;
    uint32_t *order; /* this epoch's sample order */
    float *params[PS_MAX_MODEL_TENSORS];
    const float *grads[PS_MAX_MODEL_TENSORS];
    ps_train_metrics tm;
    int eval; /* rank 0 evaluates on the test set */
    int steps_per_epoch;
    uint64_t start, total; /* the clock we joined at, and the last step */
    int push_rc;           /* the first push error of this step (ps__push_layer) */
    int next_report_step;  /* index of the first cfg.report_steps not yet reported */
    int finished;          /* every step done: say goodbye to the servers */
    /* ps__check_divergence: the client's counts at the last step, and how
     * many steps in a row had every chunk refused. */
    uint64_t acked_before, rejected_before;
    int rejected_steps;
};

/* One line on the launcher's pipe; nothing when run alone. */
static void ps__report(const ps_trainer *t, ps_report *r)
{
    int rc;

    if (t->cfg.report_fd < 0)
        return;
    r->rank = t->cfg.rank;
    rc = ps_report_write(t->cfg.report_fd, r);
    if (rc < 0)
        ps_warn("could not write a report to the launcher: %s", ps_strerror(rc));
}

/* Evaluates on the test set after step steps. The launcher hears of it
 * (report) at the end of an epoch and of the run; --eval-every's evaluations
 * within an epoch go to the log and the metrics file only, so its "epoch
 * done" lines stay one per epoch. */
static int ps__trainer_evaluate(ps_trainer *t, uint64_t step, double *acc_out, int report)
{
    float loss;
    int correct, rc;
    double t0 = ps_clock_now();
    uint64_t spe = (uint64_t)t->steps_per_epoch;
    /* The epoch step falls in, 1-based; a step on a boundary ends the
     * epoch before it. */
    int epoch = step == 0 ? 1 : (int)((step - 1) / spe) + 1;
    int epoch_end = step > 0 && step % spe == 0;

    rc = ps_backend_evaluate(t->be, t->test_x, t->test.labels, t->test.n, &loss, &correct);
    if (rc < 0)
        return rc;
    *acc_out = (double)correct / t->test.n;
    ps_train_metrics_eval(&t->tm, step, *acc_out, loss, ps_clock_now() - t0);
    if (epoch_end)
        ps_info("epoch %d: test accuracy %.4f, test loss %.4f", epoch, *acc_out, loss);
    else
        ps_info("step %" PRIu64 ": test accuracy %.4f, test loss %.4f", step, *acc_out, loss);
    if (report)
        ps__report(t, &(ps_report){.kind = PS_REPORT_EVAL,
                                   .u.eval = {epoch, step, *acc_out, loss, epoch_end}});
    return 0;
}

static int ps__dump_weights(ps_trainer *t)
{
    const char *path = t->cfg.dump_weights;
    const ps_model_spec *spec = t->spec;
    FILE *f = fopen(path, "wb");
    int rc = 0;

    if (f == NULL) {
        ps_error("cannot write --dump-weights %s: %s", path, strerror(errno));
        return -errno;
    }
    for (int i = 0; i < spec->n_tensors && rc == 0; i++)
        if (fwrite(ps_backend_params(t->be, i), sizeof(float), spec->tensors[i].numel, f) !=
            spec->tensors[i].numel)
            rc = -EIO;
    if (fclose(f) != 0 || rc < 0) {
        ps_error("cannot write --dump-weights %s: %s", path, strerror(EIO));
        return -EIO;
    }
    return 0;
}

/* Errors after which rejoining makes sense: the connection went away
 * (ps_error_is_connection_loss), but not a server that stopped answering
 * within --request-timeout, which a worker reports rather than waits out
 * again. */
static int ps__is_connection_loss(int rc)
{
    return ps_error_is_connection_loss(rc) && rc != -PS_ETIMEOUT;
}

/* Joins the job again after a lost connection; writes the clock to start at.
 * The library logged why it failed. */
static int ps__reconnect(ps_trainer *t, uint64_t *start)
{
    int rc = shardps_reconnect(t->ps);

    /* A new client counts from zero. */
    t->acked_before = t->rejected_before = 0;
    if (rc == 0)
        rc = shardps_start_clock(t->ps, start);
    return rc;
}

/* The clock of the weights of the last pull. */
static uint64_t ps__weights_clock(const ps_trainer *t)
{
    uint64_t c = 0;

    shardps_weights_clock(t->ps, &c);
    return c;
}

/* The step to compute after pulling for `clock`: in sync mode the servers
 * may have gone on without this worker between its join and its pull (it was
 * stopped, or slow; a quorum does not wait), and answered with newer weights.
 * A gradient computed on them carries their clock, so the worker starts from
 * there: computing "step clock" on them would push a step the job never
 * planned once they are the last. */
static uint64_t ps__step_after_pull(const ps_trainer *t, uint64_t clock)
{
    uint64_t w = ps__weights_clock(t);

    return w > clock ? w : clock;
}

/* Pulls the weights of clock into the backend and waits for them. */
static int ps__trainer_pull(ps_trainer *t, uint64_t clock)
{
    int rc = shardps_pull(t->ps, clock, t->params, t->spec->n_tensors);

    if (rc == 0)
        rc = shardps_wait(t->ps);
    if (rc == 0)
        rc = ps_backend_load_params(t->be);
    return rc;
}

static int ps__save_model(ps_trainer *t)
{
    const float *tensors[PS_MAX_MODEL_TENSORS];
    char err[512];
    int rc;

    for (int i = 0; i < t->spec->n_tensors; i++)
        tensors[i] = ps_backend_params(t->be, i);
    rc = ps_model_file_write(t->job->save_model, &t->cfg.plan->desc, t->spec, tensors, err,
                             sizeof(err));
    if (rc < 0)
        ps_error("cannot write --save-model: %s", err);
    else
        ps_info("saved the trained model to %s", t->job->save_model);
    return rc;
}

/* Pushes each layer's gradients (clipped by the backend under --clip-norm)
 * the moment backward has them, so they travel while the layers below are
 * computed (ps_backend_on_layer_grads); the last tensor first, as the
 * servers have always seen them. */
static void ps__push_layer(void *arg, int first, int count)
{
    ps_trainer *t = arg;

    for (int i = first + count - 1; i >= first && t->push_rc == 0; i--)
        t->push_rc = shardps_push(t->ps, i, t->grads[i], t->spec->tensors[i].numel);
    if (t->push_rc == 0)
        t->push_rc = shardps_progress(t->ps);
}

/* --slow-ms: an artificial straggler for experiments (backup workers, ssp). */
static void ps__slow_down(int ms)
{
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

void ps_trainer_free(ps_trainer *t)
{
    if (t == NULL)
        return;
    /* Only a worker that finished says goodbye; one that failed may be
     * restarted, and the servers keep its place. */
    if (t->finished)
        shardps_close(t->ps);
    else
        shardps_abandon(t->ps);
    ps_train_metrics_close(&t->tm, 0, NULL);
    ps_backend_free(t->be);
    ps_dataset_free(&t->train);
    ps_dataset_free(&t->test);
    free(t->test_x);
    free(t->order);
    free(t);
}

/* The whole test set, gathered and normalised once. */
static int ps__load_test_set(ps_trainer *t, int features)
{
    uint32_t *all = malloc((size_t)t->test.n * sizeof(uint32_t));

    t->test_x = malloc((size_t)t->test.n * (size_t)features * sizeof(float));
    if (all == NULL || t->test_x == NULL) {
        free(all);
        return -ENOMEM;
    }
    for (int i = 0; i < t->test.n; i++)
        all[i] = (uint32_t)i;
    ps_dataset_gather(&t->test, all, t->test.n, t->test_x, t->test.labels);
    free(all);
    return 0;
}

/* Takes over the splits the job check read (the class count is the larger
 * of theirs, the same on every worker whether it evaluates or not) and sizes
 * the buffers; the check resolved the model against them and planned the
 * steps. */
static int ps__take_data(ps_trainer *t)
{
    const ps_job_plan *plan = t->cfg.plan;
    int features;

    t->train = t->cfg.data->train;
    t->test = t->cfg.data->test;
    memset(&t->cfg.data->train, 0, sizeof(t->cfg.data->train));
    memset(&t->cfg.data->test, 0, sizeof(t->cfg.data->test));
    features = t->train.features;
    t->steps_per_epoch = plan->steps_per_epoch;
    t->total = plan->total_steps;
    t->order = malloc((size_t)t->train.n * sizeof(uint32_t));
    if (t->order == NULL)
        return -ENOMEM;
    return t->eval ? ps__load_test_set(t, features) : 0;
}

/* "SIGINT" or "SIGTERM": the signal that asked us to stop. */
static const char *ps__signal_name(const volatile sig_atomic_t *stop)
{
    return stop && *stop == SIGINT ? "SIGINT" : "SIGTERM";
}

/* Hands the library every job option it takes, by walking the job table
 * (the texts parse back to the very values), then what this worker plans. */
static int ps__client_options(ps_trainer *t)
{
    char text[2048], *argv[32], total[32];
    int n = ps_job_options_argv(t->job, PS_JOB_WORKER, PS_JOB_LIBRARY, text, sizeof(text), argv,
                                (int)(sizeof(argv) / sizeof(argv[0])));
    int rc = n < 0 ? n : 0;

    for (int i = 0; rc == 0 && i + 1 < n; i += 2)
        rc = shardps_set_option(t->ps, argv[i] + 2, argv[i + 1]);
    /* The steps this worker plans: the servers' cosine spans them unless
     * --total-steps says otherwise. */
    snprintf(total, sizeof(total), "%" PRIu64, t->total);
    if (rc == 0)
        rc = shardps_set_option(t->ps, "total-steps", total);
    if (rc == 0)
        rc = shardps_set_option(t->ps, "job-settings", t->cfg.plan->settings);
    /* The trainer writes its own reports (--report-fd, with epochs and
     * evaluations): the library must not report for it too. */
    if (rc == 0)
        rc = shardps_set_option(t->ps, "report-fd", "-1");
    return rc;
}

static int ps__setup_client(ps_trainer *t)
{
    const ps_job_plan *plan = t->cfg.plan;
    int rc = shardps_new(&t->ps, ps_server_list_entries(plan->servers), plan->num_servers,
                         t->cfg.rank, t->job->workers);

    /* A stop asked while the servers keep us waiting ends the wait. */
    if (rc == 0 && t->cfg.stop)
        rc = shardps_set_stop_flag(t->ps, t->cfg.stop);
    if (rc == 0)
        rc = ps__client_options(t);
    for (int i = 0; rc == 0 && i < t->spec->n_tensors; i++) {
        const ps_tensor_spec *ts = &t->spec->tensors[i];
        int64_t shape[PS_MAX_DIMS];
        for (int d = 0; d < ts->ndim; d++)
            shape[d] = ts->shape[d];
        rc = shardps_declare(t->ps, ts->name, ts->ndim, shape, (int)ts->init, ts->fan_in,
                             ts->fan_out);
    }
    if (rc == 0)
        rc = shardps_connect(t->ps);
    if (rc == 0)
        rc = shardps_start_clock(t->ps, &t->start);
    /* The client logged what went wrong on the wire; its own checks of our
     * arguments are for us to say. */
    if (rc == -EINTR)
        ps_info("stopping on %s: %s", ps__signal_name(t->cfg.stop), shardps_last_error(t->ps));
    else if (rc < 0 && rc != -PS_ETIMEOUT && rc != -PS_EREJECTED && rc != -PS_EPROTO &&
             rc != -PS_ECLOSED)
        ps_error("%s", shardps_last_error(t->ps));
    return rc;
}

int ps_trainer_init(ps_trainer **out, const ps_trainer_config *cfg)
{
    ps_trainer *t = calloc(1, sizeof(*t));
    ps_backend_config bc;
    char length[160];
    int rc;

    *out = NULL;
    if (t == NULL)
        return -ENOMEM;
    t->cfg = *cfg;
    t->job = cfg->job;
    t->spec = &cfg->plan->spec;
    t->eval = cfg->rank == 0 && !cfg->no_eval;
    memset(&bc, 0, sizeof(bc));
    rc = ps_backend_parse_device(t->job->device, &bc.device);
    if (rc == 0 && t->job->precision)
        rc = ps_backend_parse_precision(t->job->precision, &bc.precision);
    if (rc < 0)
        goto fail;
    rc = ps__take_data(t);
    if (rc < 0)
        goto fail;
    bc.max_batch = t->job->batch > 256 ? t->job->batch : 256;
    bc.tf32 = t->job->tf32;
    bc.threads = cfg->threads;
    bc.device_index = cfg->rank;
    bc.clip_norm = t->job->clip_norm;
    bc.narrow_bf16 = t->job->compress && strcmp(t->job->compress, "bf16") == 0;
    /* Each worker its own dropout masks, repeatable from the job's seed. */
    bc.dropout_seed =
        ((uint64_t)t->job->seed << 32) ^ ((uint64_t)cfg->rank * 0x9E3779B97F4A7C15ull);
    rc = ps_backend_init(&t->be, &cfg->plan->desc, t->spec, &bc);
    if (rc < 0)
        goto fail;
    /* The first line says where it computes; then what it learns from. */
    ps_info("compute on %s", ps_backend_describe(t->be));
    ps_info("data: %s: %s", t->job->data,
            ps_job_data_describe(&cfg->plan->data, length, sizeof(length)));
    if (cfg->plan->data.notes[0])
        ps_warn("data: %s", cfg->plan->data.notes);
    t->batch_x = ps_backend_batch_x(t->be);
    t->batch_y = ps_backend_batch_y(t->be);
    for (int i = 0; i < t->spec->n_tensors; i++) {
        t->params[i] = ps_backend_params(t->be, i);
        t->grads[i] = ps_backend_grads(t->be, i);
    }
    rc = ps__setup_client(t);
    if (rc < 0)
        goto fail;
    /* A straggler (--slow-ms) must not have its gradients in before its
     * delay, so it pushes everything after it instead. */
    if (cfg->slow_ms == 0)
        ps_backend_on_layer_grads(t->be, ps__push_layer, t);
    ps_info("connected to %d server%s; %d steps per epoch of %d x %d samples, starting at step "
            "%" PRIu64 " of %" PRIu64 " (%s)",
            cfg->plan->num_servers, cfg->plan->num_servers == 1 ? "" : "s", t->steps_per_epoch,
            t->job->workers, t->job->batch, t->start, t->total,
            ps_job_plan_length(t->job, cfg->plan, length, sizeof(length)));
    ps__report(t, &(ps_report){.kind = PS_REPORT_START,
                               .u.start = {t->start, t->total, t->steps_per_epoch}});
    rc = ps_train_metrics_open(&t->tm, cfg->metrics_file, cfg->rank, t->steps_per_epoch);
    if (rc < 0) {
        ps_error("cannot write --metrics-file %s: %s", cfg->metrics_file, strerror(-rc));
        goto fail;
    }
    *out = t;
    return 0;

fail:
    ps_trainer_free(t);
    return rc;
}

/* The first sample of this worker's slice of global batch clock. */
static size_t ps__first_sample(const ps_trainer *t, uint64_t clock)
{
    size_t batch = (size_t)t->job->batch;

    return (size_t)(clock % (uint64_t)t->steps_per_epoch) * (size_t)t->job->workers * batch +
           (size_t)t->cfg.rank * batch;
}

/* The figures of one progress interval. */
typedef struct {
    /* Steps this process computed, and as many at the last report: counts
     * of this run alone, never clocks (a restored run starts at a clock far
     * above 0, and throughput is over the steps made here). */
    uint64_t steps_done, steps_done_before;
    double last_t, loss_sum;
    int loss_n;
} ps__interval;

static void ps__progress(ps_trainer *t, ps__interval *iv, int epoch, uint64_t step)
{
    const ps_trainer_config *o = &t->cfg;
    shardps_stats ks;
    double now = ps_clock_now();
    double sps =
        (double)(iv->steps_done - iv->steps_done_before) * t->job->batch / (now - iv->last_t);
    double stale;

    shardps_stats_get(t->ps, &ks);
    stale = ks.staleness_count ? (double)ks.staleness_sum / ks.staleness_count : 0.0;
    ps_train_metrics_interval(&t->tm, step, ps__weights_clock(t), &ks);
    if (o->report_fd < 0)
        ps_info("epoch %d/%d step %" PRIu64 "/%" PRIu64 " loss %.4f %.0f samples/s "
                "staleness mean %.2f max %" PRIu64,
                epoch + 1, t->cfg.plan->epochs, step, t->total, iv->loss_sum / iv->loss_n, sps,
                stale, ks.staleness_max);
    ps__report(t,
               &(ps_report){.kind = PS_REPORT_PROGRESS,
                            .u.progress = {epoch + 1, step, t->total, iv->loss_sum / iv->loss_n,
                                           sps, stale, ks.staleness_max, ks.dropped, ks.rejected}});
    iv->last_t = now;
    iv->steps_done_before = iv->steps_done;
    iv->loss_sum = 0;
    iv->loss_n = 0;
}

/* Failures that must stop the run rather than train on quietly: a loss that
 * is NaN or Inf (the weights overflow; every gradient would be refused), or
 * every chunk of ours refused by the servers for max_rejected_steps steps in
 * a row. Called once a step's pushes are acknowledged (the pull after them
 * has returned). Returns 0 or -ERANGE after one error line. */
static int ps__check_divergence(ps_trainer *t, uint64_t step, float loss)
{
    shardps_stats ks;
    uint64_t acked, rejected;

    if (!isfinite(loss)) {
        ps_error("training diverged: the loss is %s at step %" PRIu64
                 "; stopping (lower --lr, or use --clip-norm)",
                 isnan(loss) ? "NaN" : "infinite", step);
        return -ERANGE;
    }
    shardps_stats_get(t->ps, &ks);
    acked = ks.acked - t->acked_before;
    rejected = ks.rejected - t->rejected_before;
    t->acked_before = ks.acked;
    t->rejected_before = ks.rejected;
    if (acked == 0)
        return 0;
    t->rejected_steps = rejected == acked ? t->rejected_steps + 1 : 0;
    if (t->job->max_rejected_steps > 0 && t->rejected_steps >= t->job->max_rejected_steps) {
        ps_error("the servers refused every chunk this worker pushed for %d steps in a row "
                 "(NaN/Inf or over --max-grad-norm), up to step %" PRIu64
                 "; stopping (--max-rejected-steps)",
                 t->rejected_steps, step);
        return -ERANGE;
    }
    return 0;
}

/* --report-steps: the launcher hears of each named step as soon as it is
 * done, so a drill fires on the step it names. A worker that skips ahead
 * past one (a rejoin, a quorum) reports the step it skipped to. */
static void ps__report_step(ps_trainer *t, uint64_t step)
{
    const ps_trainer_config *o = &t->cfg;
    int due = 0;

    while (t->next_report_step < o->n_report_steps &&
           o->report_steps[t->next_report_step] <= step) {
        t->next_report_step++;
        due = 1;
    }
    if (due)
        ps__report(t, &(ps_report){.kind = PS_REPORT_STEP, .u.step = {step}});
}

static void ps__done(ps_trainer *t, const ps__interval *iv, double t0, double acc)
{
    shardps_stats ks;
    double secs = ps_clock_now() - t0;
    double samples = (double)iv->steps_done * t->job->batch;

    shardps_stats_get(t->ps, &ks);
    ps_train_metrics_close(&t->tm, t->total, &ks);
    ps_info("done: %" PRIu64 " steps in %.1f s, %.0f samples/s, %.1f MB pushed, %.1f MB "
            "pulled, %" PRIu64 " late chunks dropped, %" PRIu64 " chunks rejected",
            iv->steps_done, secs, samples / secs, ks.bytes_sent / 1e6, ks.bytes_received / 1e6,
            ks.dropped - ks.rejected, ks.rejected);
    ps__report(t, &(ps_report){.kind = PS_REPORT_DONE,
                               .u.done = {iv->steps_done, samples, secs, acc, ks.dropped,
                                          ks.rejected, ks.bytes_sent, ks.bytes_received}});
}

int ps_trainer_run(ps_trainer *t)
{
    const ps_trainer_config *o = &t->cfg;
    const ps_job_options *j = t->job;
    ps__interval iv = {0};
    int rc, epoch = -1, reconnects = 0, stop;
    uint64_t clock;
    double t0, acc = -1, t_step, t_exchange;

    t0 = iv.last_t = ps_clock_now();
    rc = ps__trainer_pull(t, t->start);
    for (clock = rc == 0 ? ps__step_after_pull(t, t->start) : t->start; clock < t->total; clock++) {
        int e = (int)(clock / (uint64_t)t->steps_per_epoch);
        float loss;
        int correct;

        if (rc == -EINTR)
            break;
        if (rc < 0) {
            /* The connection to a server was lost: rejoin at the job's current
             * clock, or give up if it cannot be reached again. */
            if (!ps__is_connection_loss(rc) || ++reconnects > j->max_reconnects)
                break;
            /* Asked to stop: the servers going away is most likely part of
             * the same shutdown (a launcher's death signals every process),
             * and nobody waits for this worker to come back. */
            if (o->stop && *o->stop) {
                ps_info("stopping at step %" PRIu64 " on %s: lost the servers", clock,
                        *o->stop == SIGINT ? "SIGINT" : "SIGTERM");
                return -EINTR;
            }
            ps_warn("reconnecting to the servers (attempt %d of %d)", reconnects,
                    j->max_reconnects);
            rc = ps__reconnect(t, &clock);
            if (rc == 0)
                rc = ps__trainer_pull(t, clock);
            if (rc == 0)
                clock = ps__step_after_pull(t, clock);
            if (rc < 0 || clock >= t->total)
                continue;
            ps_info("rejoined at step %" PRIu64, clock);
            e = (int)(clock / (uint64_t)t->steps_per_epoch);
        }
        if (e != epoch) {
            if (t->eval && !t->cfg.eval_at_end && clock > t->start &&
                (rc = ps__trainer_evaluate(t, clock, &acc, 1)) < 0)
                break;
            epoch = e;
            ps_dataset_epoch_order((uint64_t)j->seed, epoch, t->train.n, t->order);
        } else if (t->eval && !t->cfg.eval_at_end && j->eval_every > 0 && clock > t->start &&
                   clock % (uint64_t)j->eval_every == 0 &&
                   (rc = ps__trainer_evaluate(t, clock, &acc, 0)) < 0) {
            break;
        }
        t_step = ps_clock_now();
        ps_dataset_gather(&t->train, t->order + ps__first_sample(t, clock), j->batch, t->batch_x,
                          t->batch_y);
        t->push_rc = 0;
        rc = ps_backend_train_step(t->be, t->batch_x, t->batch_y, j->batch, clock, &loss, &correct);
        if (rc < 0)
            break;
        if (o->slow_ms > 0) {
            /* Said before the nap: whoever watches knows this worker has
             * passed the boundary behind it and not yet pushed. */
            ps_info("step %" PRIu64 ": holding the pushes %d ms (--slow-ms)", clock + 1,
                    o->slow_ms);
            ps__slow_down(o->slow_ms);
            for (int i = t->spec->n_tensors - 1; i >= 0 && t->push_rc == 0; i--)
                t->push_rc = shardps_push(t->ps, i, t->grads[i], t->spec->tensors[i].numel);
        }
        t_exchange = ps_clock_now();
        iv.loss_sum += loss;
        iv.loss_n++;
        rc = t->push_rc;
        if (rc == 0)
            rc = ps__trainer_pull(t, clock + 1);
        if (rc < 0)
            continue;
        rc = ps__check_divergence(t, clock, loss);
        if (rc < 0)
            break;
        iv.steps_done++;
        ps_train_metrics_step(&t->tm, t_exchange - t_step, ps_clock_now() - t_exchange, loss,
                              correct, j->batch);
        /* Sync with backup workers: the step may have been applied without
         * us; the pull brought newer weights, so skip to where they are. */
        clock = ps__step_after_pull(t, clock + 1) - 1;
        /* Whether to stop here is read before this step is reported: a
         * stop that the report itself sets off (a launcher's drill, a test,
         * a person watching the progress line) takes effect at the next
         * boundary, which the other workers reach too, not at this one,
         * which they may have passed already. */
        stop = o->stop ? *o->stop : 0;
        if ((clock + 1) % (uint64_t)j->progress_every == 0 || clock + 1 >= t->total)
            ps__progress(t, &iv, epoch, clock + 1);
        ps__report_step(t, clock + 1);
        if (stop) {
            ps_info("stopping after step %" PRIu64 " on %s: every server is at this step's "
                    "boundary",
                    clock + 1, stop == SIGINT ? "SIGINT" : "SIGTERM");
            return -EINTR;
        }
    }
    /* Asked to stop while the servers kept us waiting (a missing worker). */
    if (rc == -EINTR)
        ps_info("stopping on %s: %s", ps__signal_name(o->stop), shardps_last_error(t->ps));
    if (rc < 0)
        return rc;
    if (t->eval && (rc = ps__trainer_evaluate(t, t->total, &acc, 1)) < 0)
        return rc;
    if (o->dump_weights && (rc = ps__dump_weights(t)) < 0)
        return rc;
    if (j->save_model && o->rank == 0 && (rc = ps__save_model(t)) < 0)
        return rc;
    t->finished = 1;
    ps__done(t, &iv, t0, acc);
    return 0;
}
