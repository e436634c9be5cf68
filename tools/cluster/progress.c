/* The workers' reports, shown (see progress.h). Worker 0's reports draw the
 * progress line: every worker walks the same global steps, so one of them
 * tells the job's position, while the throughput adds up all of them. */
#include "progress.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "clock.h"
#include "ps_error.h"
#include "ps_log.h"
#include "report.h"

/* A worker's latest figures. */
typedef struct {
    double samples_per_second;
    uint64_t step;  /* the furthest step it reported */
    uint64_t total; /* the step it said it stops at (0: not known) */
    int started, done;
    double samples, seconds;
    uint64_t steps_done;                  /* steps it computed, from its "done" report */
    double bytes_pushed;                  /* gradient payload bytes, from its "done" report */
    double staleness_mean, staleness_max; /* of its pushes, from its last report */
    uint64_t dropped, rejected;           /* chunks not applied, from its last report */
} ps__progress_worker;

struct ps_progress {
    ps_console *con; /* borrowed */
    int workers, epochs;
    ps__progress_worker *w; /* workers entries */
    int steps_per_epoch;
    double t_train; /* when worker 0 started training */
    uint64_t total_steps;
    double last_accuracy;
};

int ps_progress_init(ps_progress **out, ps_console *con, int workers, int epochs)
{
    ps_progress *p;

    *out = NULL;
    if (workers < 1 || workers > PS_PROGRESS_MAX_WORKERS)
        return -EINVAL;
    p = calloc(1, sizeof(*p));
    if (p == NULL)
        return -ENOMEM;
    p->w = calloc((size_t)workers, sizeof(*p->w));
    if (p->w == NULL)
        goto fail;
    p->con = con;
    p->workers = workers;
    p->epochs = epochs;
    p->last_accuracy = NAN;
    *out = p;
    return 0;
fail:
    free(p);
    return -ENOMEM;
}

void ps_progress_free(ps_progress *p)
{
    if (p == NULL)
        return;
    free(p->w);
    free(p);
}

/* The time left as "ETA 1:05" or "ETA 2:03:04"; "ETA --" before the first
 * step says how fast the job goes. */
static void ps__format_eta(const ps_progress *p, uint64_t step, char *buf, size_t len)
{
    double t = ps_clock_now() - p->t_train;
    long eta;

    if (step == 0 || p->total_steps <= step) {
        snprintf(buf, len, "ETA %s", step == 0 ? "--" : "0:00");
        return;
    }
    eta = (long)(t / (double)step * (double)(p->total_steps - step));
    if (eta >= 3600)
        snprintf(buf, len, "ETA %ld:%02ld:%02ld", eta / 3600, eta / 60 % 60, eta % 60);
    else
        snprintf(buf, len, "ETA %ld:%02ld", eta / 60, eta % 60);
}

/* On a terminal: one line redrawn in place, the time left first, then the
 * epoch, step, loss, a bar through the epoch, throughput and staleness, as
 * many as fit; elsewhere (logs, tests that grep) one plain line per report.
 * A worker on libshardps knows neither epochs nor (unless told) the run's
 * length: then the line has no epoch, bar or time left, and the step no
 * "/total". */
static void ps__print_progress(ps_progress *p, const ps_report_progress *r)
{
    char eta[32] = "", epoch[32] = "", bar[24] = "", step[48], loss[32], sps_text[40], stale[32],
         plain[200];
    const char *fields[] = {eta, epoch, step, loss, bar, sps_text, stale};
    const char *show[sizeof(fields) / sizeof(fields[0])];
    int spe = p->steps_per_epoch > 0 ? p->steps_per_epoch : 1, n = 0;
    int fill = (int)(20 * (double)(r->step - (uint64_t)(r->epoch - 1) * (uint64_t)spe) / spe);
    double sps = 0;
    char of[24] = "";

    for (int k = 0; k < p->workers; k++)
        sps += p->w[k].samples_per_second;
    if (p->total_steps > 0) {
        ps__format_eta(p, r->step, eta, sizeof(eta));
        snprintf(of, sizeof(of), "/%" PRIu64, p->total_steps);
    }
    if (r->epoch > 0 && p->epochs > 0) {
        snprintf(epoch, sizeof(epoch), "epoch %d/%d", r->epoch, p->epochs);
        bar[0] = '[';
        for (int i = 0; i < 20; i++)
            bar[1 + i] = i < fill ? '#' : '.';
        snprintf(bar + 21, sizeof(bar) - 21, "]");
    }
    snprintf(step, sizeof(step), "step %" PRIu64 "%s", r->step, of);
    snprintf(loss, sizeof(loss), "loss %.4f", r->loss);
    snprintf(sps_text, sizeof(sps_text), "%.0f samples/s", sps);
    snprintf(stale, sizeof(stale), "staleness %.2f", r->staleness_mean);
    snprintf(plain, sizeof(plain), "%s%s%s  %s  %s%s%s", epoch, epoch[0] ? "  " : "", step, loss,
             sps_text, eta[0] ? "  " : "", eta);
    for (size_t i = 0; i < sizeof(fields) / sizeof(fields[0]); i++)
        if (fields[i][0])
            show[n++] = fields[i];
    ps_console_progress(p->con, show, n, plain);
}

/* How much of its epoch step has done, in whole percent. */
static int ps__epoch_percent(const ps_progress *p, uint64_t step)
{
    uint64_t spe = p->steps_per_epoch > 0 ? (uint64_t)p->steps_per_epoch : 1;

    return (int)(step % spe * 100 / spe);
}

int ps_progress_report(ps_progress *p, int rank, const char *line, uint64_t *step)
{
    ps__progress_worker *c = &p->w[rank];
    ps_report r;
    char err[160];

    if (ps_report_parse(line, &r, err, sizeof(err)) < 0 || r.rank != rank) {
        ps_warn("worker %d sent a report the launcher cannot read (%s): %.200s", rank,
                err[0] ? err : "wrong rank", line);
        return -PS_EPROTO;
    }
    switch (r.kind) {
    case PS_REPORT_START:
        c->started = 1;
        c->step = r.u.start.step > c->step ? r.u.start.step : c->step;
        c->total = r.u.start.steps;
        if (rank == 0) {
            p->total_steps = r.u.start.steps;
            p->steps_per_epoch = r.u.start.steps_per_epoch;
            p->t_train = ps_clock_now();
        }
        break;
    case PS_REPORT_PROGRESS:
        c->step = r.u.progress.step > c->step ? r.u.progress.step : c->step;
        c->samples_per_second = r.u.progress.samples_per_second;
        c->staleness_mean = r.u.progress.staleness_mean;
        c->staleness_max = (double)r.u.progress.staleness_max;
        c->dropped = r.u.progress.dropped;
        c->rejected = r.u.progress.rejected;
        if (rank == 0)
            ps__print_progress(p, &r.u.progress);
        *step = c->step;
        return 1;
    case PS_REPORT_STEP: /* a step a drill named: --report-steps */
        *step = r.u.step.step;
        c->step = *step > c->step ? *step : c->step;
        return 1;
    case PS_REPORT_EVAL:
        p->last_accuracy = r.u.eval.test_accuracy;
        if (r.u.eval.epoch_end)
            ps_console_printf(p->con, "epoch %d done: test accuracy %.4f", r.u.eval.epoch,
                              p->last_accuracy);
        else
            /* --steps stopped the run inside an epoch: say how far it got. */
            ps_console_printf(p->con, "step %" PRIu64 " (epoch %d, %d%%): test accuracy %.4f",
                              r.u.eval.step, r.u.eval.epoch, ps__epoch_percent(p, r.u.eval.step),
                              p->last_accuracy);
        break;
    case PS_REPORT_DONE:
        c->done = 1;
        c->steps_done = r.u.done.steps;
        c->samples = r.u.done.samples;
        c->seconds = r.u.done.seconds;
        c->bytes_pushed = (double)r.u.done.bytes_pushed;
        c->dropped = r.u.done.dropped;
        c->rejected = r.u.done.rejected;
        break;
    }
    return 0;
}

int ps_progress_worker_started(const ps_progress *p, int rank)
{
    return p->w[rank].started;
}

int ps_progress_worker_done(const ps_progress *p, int rank)
{
    return p->w[rank].done;
}

uint64_t ps_progress_worker_step(const ps_progress *p, int rank)
{
    return p->w[rank].step;
}

uint64_t ps_progress_worker_total(const ps_progress *p, int rank)
{
    return p->w[rank].total;
}

void ps_progress_summary(const ps_progress *p, ps_summary *s)
{
    s->test_accuracy = p->last_accuracy;
    s->steps_per_epoch = p->steps_per_epoch;
    s->samples = s->seconds = s->bytes_pushed = 0;
    s->staleness_mean = s->staleness_max = 0;
    s->dropped = s->rejected = 0;
    s->lost = 0;
    s->steps = 0;
    for (int r = 0; r < p->workers; r++) {
        const ps__progress_worker *c = &p->w[r];
        s->lost += !c->done;
        if (c->steps_done > s->steps)
            s->steps = c->steps_done;
        s->dropped += c->dropped;
        s->rejected += c->rejected;
        s->samples += c->samples;
        s->bytes_pushed += c->bytes_pushed;
        s->staleness_mean += c->staleness_mean / p->workers;
        s->staleness_max = fmax(s->staleness_max, c->staleness_max);
        if (c->seconds > s->seconds)
            s->seconds = c->seconds;
    }
}
