/* The worker's training loop (see trainer.h): the backend computes, the
 * key-value client moves weights and gradients, the dataset feeds batches.
 * This file joins the job, runs its steps and leaves it; what the run says
 * (progress, reports to the launcher, evaluations, the summary) is
 * trainer_report.c's. One iteration of the loop is one step (begin,
 * compute, exchange, log); the step to compute next comes back from it, so
 * the clock moves in one place, and every error leaves the loop by its
 * condition. */
#include "trainer_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "ps_error.h"
#include "ps_log.h"

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
    ps__trainer_report(t, &(ps_report){.kind = PS_REPORT_START,
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

/* A run's state between its steps. */
typedef struct {
    ps__trainer_interval iv;
    double t0;      /* when the run began */
    double acc;     /* the last test accuracy; -1 before the first */
    int epoch;      /* the 0-based epoch of the step being computed; -1 before */
    int reconnects; /* rejoins tried so far */
} ps__trainer_run;

/* One step's figures, from its compute to its metrics. */
typedef struct {
    float loss;
    int correct;
    double t_step, t_exchange; /* when its compute and its exchange began */
} ps__trainer_figures;

/* The pull for the weights of *clock has returned rc. After a lost
 * connection, rejoins the job at its current clock and pulls there, as
 * often as --max-reconnects allows. Writes the step to compute next: the
 * clock of the weights in hand. Returns 0, -EINTR when a stop was asked
 * (said here), or the error that ended the tries. */
static int ps__trainer_arrive(ps_trainer *t, ps__trainer_run *run, int rc, uint64_t *clock)
{
    const ps_trainer_config *o = &t->cfg;
    int rejoined = 0;

    while (rc < 0) {
        /* Asked to stop while the servers kept us waiting (a missing worker). */
        if (rc == -EINTR) {
            ps_info("stopping on %s: %s", ps__signal_name(o->stop), shardps_last_error(t->ps));
            return rc;
        }
        if (!ps__is_connection_loss(rc) || ++run->reconnects > t->job->max_reconnects)
            return rc;
        /* Asked to stop: the servers going away is most likely part of the
         * same shutdown (a launcher's death signals every process), and
         * nobody waits for this worker to come back. */
        if (o->stop && *o->stop) {
            ps_info("stopping at step %" PRIu64 " on %s: lost the servers", *clock,
                    ps__signal_name(o->stop));
            return -EINTR;
        }
        ps_warn("reconnecting to the servers (attempt %d of %d)", run->reconnects,
                t->job->max_reconnects);
        rc = ps__reconnect(t, clock);
        if (rc == 0)
            rc = ps__trainer_pull(t, *clock);
        rejoined = 1;
    }
    *clock = ps__step_after_pull(t, *clock);
    if (rejoined && *clock < t->total)
        ps_info("rejoined at step %" PRIu64, *clock);
    return 0;
}

/* Before step clock: a new epoch's sample order, and rank 0's evaluation
 * when one is due (at an epoch's end, every --eval-every steps). Returns 0
 * or the evaluation's error. */
static int ps__trainer_begin(ps_trainer *t, ps__trainer_run *run, uint64_t clock)
{
    const ps_job_options *j = t->job;
    int e = (int)(clock / (uint64_t)t->steps_per_epoch);
    int due = t->eval && !t->cfg.eval_at_end && clock > t->start;
    int rc = 0;

    if (e != run->epoch) {
        if (due && (rc = ps__trainer_evaluate(t, clock, &run->acc, 1)) < 0)
            return rc;
        run->epoch = e;
        ps_dataset_epoch_order((uint64_t)j->seed, e, t->train.n, t->order);
    } else if (due && j->eval_every > 0 && clock % (uint64_t)j->eval_every == 0) {
        rc = ps__trainer_evaluate(t, clock, &run->acc, 0);
    }
    return rc;
}

/* Forward and backward of step clock on this worker's slice of the global
 * batch; the layers' pushes leave as backward produces them (or, under
 * --slow-ms, all after the delay). Returns 0 or the backend's error. */
static int ps__trainer_compute(ps_trainer *t, uint64_t clock, ps__trainer_figures *f)
{
    const ps_trainer_config *o = &t->cfg;
    const ps_job_options *j = t->job;
    int rc;

    f->t_step = ps_clock_now();
    ps_dataset_gather(&t->train, t->order + ps__first_sample(t, clock), j->batch, t->batch_x,
                      t->batch_y);
    t->push_rc = 0;
    rc = ps_backend_train_step(t->be, t->batch_x, t->batch_y, j->batch, clock, &f->loss,
                               &f->correct);
    if (rc < 0)
        return rc;
    if (o->slow_ms > 0) {
        /* Said before the nap: whoever watches knows this worker has
         * passed the boundary behind it and not yet pushed. */
        ps_info("step %" PRIu64 ": holding the pushes %d ms (--slow-ms)", clock + 1, o->slow_ms);
        ps__slow_down(o->slow_ms);
        for (int i = t->spec->n_tensors - 1; i >= 0 && t->push_rc == 0; i--)
            t->push_rc = shardps_push(t->ps, i, t->grads[i], t->spec->tensors[i].numel);
    }
    return 0;
}

/* Step clock's pushes completed and the weights of clock + 1 pulled: the
 * two travel together. The loss counts towards the progress line whether
 * or not the exchange goes through. Returns 0 or the client's error. */
static int ps__trainer_exchange(ps_trainer *t, ps__trainer_run *run, uint64_t clock,
                                ps__trainer_figures *f)
{
    f->t_exchange = ps_clock_now();
    run->iv.loss_sum += f->loss;
    run->iv.loss_n++;
    return t->push_rc < 0 ? t->push_rc : ps__trainer_pull(t, clock + 1);
}

/* After a step, with next the step the pull brought: the progress line
 * every --progress-every steps and at the end, --report-steps, and a stop
 * asked for. Returns 0, or -EINTR when a stop ends the run here. */
static int ps__trainer_log(ps_trainer *t, ps__trainer_run *run, uint64_t next)
{
    /* Whether to stop here is read before this step is reported: a stop
     * that the report itself sets off (a launcher's drill, a test, a person
     * watching the progress line) takes effect at the next boundary, which
     * the other workers reach too, not at this one, which they may have
     * passed already. */
    int stop = t->cfg.stop ? *t->cfg.stop : 0;

    if (next % (uint64_t)t->job->progress_every == 0 || next >= t->total)
        ps__trainer_progress(t, &run->iv, run->epoch, next);
    ps__trainer_report_step(t, next);
    if (stop) {
        ps_info("stopping after step %" PRIu64 " on %s: every server is at this step's boundary",
                next, stop == SIGINT ? "SIGINT" : "SIGTERM");
        return -EINTR;
    }
    return 0;
}

/* One step, clock: begin, compute, exchange, log. Writes the step to
 * compute next: after a completed step the clock of the weights pulled
 * (sync with backup workers may have applied steps without us); after a
 * lost connection, where the rejoin finds the job, the step itself lost.
 * Returns 0, -EINTR when a stop ended the run (said), or an error. */
static int ps__trainer_step(ps_trainer *t, ps__trainer_run *run, uint64_t clock, uint64_t *next)
{
    ps__trainer_figures f;
    int rc = ps__trainer_begin(t, run, clock);

    if (rc == 0)
        rc = ps__trainer_compute(t, clock, &f);
    if (rc < 0)
        return rc;
    rc = ps__trainer_exchange(t, run, clock, &f);
    *next = clock + 1;
    if (rc < 0)
        return ps__trainer_arrive(t, run, rc, next);
    *next = ps__step_after_pull(t, clock + 1);
    rc = ps__check_divergence(t, clock, f.loss);
    if (rc < 0)
        return rc;
    run->iv.steps_done++;
    ps_train_metrics_step(&t->tm, f.t_exchange - f.t_step, ps_clock_now() - f.t_exchange, f.loss,
                          f.correct, t->job->batch);
    return ps__trainer_log(t, run, *next);
}

int ps_trainer_run(ps_trainer *t)
{
    ps__trainer_run run = {.acc = -1, .epoch = -1};
    uint64_t clock, next = t->start;
    int rc;

    run.t0 = run.iv.last_t = ps_clock_now();
    rc = ps__trainer_arrive(t, &run, ps__trainer_pull(t, next), &next);
    for (clock = next; rc == 0 && clock < t->total; clock = next)
        rc = ps__trainer_step(t, &run, clock, &next);
    if (rc < 0)
        return rc;
    if (t->eval && (rc = ps__trainer_evaluate(t, t->total, &run.acc, 1)) < 0)
        return rc;
    if (t->cfg.dump_weights && (rc = ps__trainer_dump_weights(t)) < 0)
        return rc;
    if (t->job->save_model && t->cfg.rank == 0 && (rc = ps__trainer_save_model(t)) < 0)
        return rc;
    t->finished = 1;
    ps__trainer_done(t, &run.iv, run.t0, run.acc);
    return 0;
}
