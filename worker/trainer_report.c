/* What the trainer says (see trainer_internal.h): the reports on the
 * launcher's pipe, the progress lines, the evaluations on the test set, the
 * files written after the last step and the summary. It reads the
 * trainer's state and the client's counts, and never steers the run. */
#include "trainer_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "clock.h"
#include "model_file.h"
#include "ps_error.h"
#include "ps_log.h"

/* One line on the launcher's pipe; nothing when run alone. */
void ps__trainer_report(const ps_trainer *t, ps_report *r)
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
int ps__trainer_evaluate(ps_trainer *t, uint64_t step, double *acc_out, int report)
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
        ps__trainer_report(t, &(ps_report){.kind = PS_REPORT_EVAL,
                                           .u.eval = {epoch, step, *acc_out, loss, epoch_end}});
    return 0;
}

void ps__trainer_progress(ps_trainer *t, ps__trainer_interval *iv, int epoch, uint64_t step)
{
    const ps_trainer_config *o = &t->cfg;
    shardps_stats ks;
    double now = ps_clock_now();
    double sps =
        (double)(iv->steps_done - iv->steps_done_before) * t->job->batch / (now - iv->last_t);
    double stale;
    uint64_t weights_clock = 0;

    shardps_stats_get(t->ps, &ks);
    stale = ks.staleness_count ? (double)ks.staleness_sum / ks.staleness_count : 0.0;
    shardps_weights_clock(t->ps, &weights_clock);
    ps_train_metrics_interval(&t->tm, step, weights_clock, &ks);
    if (o->report_fd < 0)
        ps_info("epoch %d/%d step %" PRIu64 "/%" PRIu64 " loss %.4f %.0f samples/s "
                "staleness mean %.2f max %" PRIu64,
                epoch + 1, t->cfg.plan->epochs, step, t->total, iv->loss_sum / iv->loss_n, sps,
                stale, ks.staleness_max);
    ps__trainer_report(
        t, &(ps_report){.kind = PS_REPORT_PROGRESS,
                        .u.progress = {epoch + 1, step, t->total, iv->loss_sum / iv->loss_n, sps,
                                       stale, ks.staleness_max, ks.dropped, ks.rejected}});
    iv->last_t = now;
    iv->steps_done_before = iv->steps_done;
    iv->loss_sum = 0;
    iv->loss_n = 0;
}

/* --report-steps: the launcher hears of each named step as soon as it is
 * done, so a drill fires on the step it names. A worker that skips ahead
 * past one (a rejoin, a quorum) reports the step it skipped to. */
void ps__trainer_report_step(ps_trainer *t, uint64_t step)
{
    const ps_trainer_config *o = &t->cfg;
    int due = 0;

    while (t->next_report_step < o->n_report_steps &&
           o->report_steps[t->next_report_step] <= step) {
        t->next_report_step++;
        due = 1;
    }
    if (due)
        ps__trainer_report(t, &(ps_report){.kind = PS_REPORT_STEP, .u.step = {step}});
}

int ps__trainer_dump_weights(ps_trainer *t)
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

int ps__trainer_save_model(ps_trainer *t)
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

void ps__trainer_done(ps_trainer *t, const ps__trainer_interval *iv, double t0, double acc)
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
    ps__trainer_report(t, &(ps_report){.kind = PS_REPORT_DONE,
                                       .u.done = {iv->steps_done, samples, secs, acc, ks.dropped,
                                                  ks.rejected, ks.bytes_sent, ks.bytes_received}});
}
