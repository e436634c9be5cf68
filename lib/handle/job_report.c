/* A library worker's reports to its launcher (see job_report.h). */
#include "job_report.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>

#include "clock.h"
#include "ps_error.h"
#include "ps_log.h"
#include "report.h"

void ps_job_report_init(ps_job_report *r, int fd, int rank)
{
    *r = (ps_job_report){.fd = fd, .rank = rank, .every = 1};
}

/* One line to the launcher. A launcher that is gone (EPIPE) or a descriptor
 * that fails once is not written to again: the program trains on, and says
 * so once. */
static void ps__job_report_write(ps_job_report *r, ps_report *line)
{
    int rc;

    if (r->fd < 0)
        return;
    line->rank = r->rank;
    rc = ps_report_write(r->fd, line);
    if (rc < 0) {
        ps_warn("cannot report to the launcher on descriptor %d (%s); reporting stops", r->fd,
                ps_strerror(rc));
        r->fd = -1;
    }
}

void ps_job_report_start(ps_job_report *r, uint64_t start, uint64_t total, int every)
{
    double now = ps_clock_now();

    r->started = 1;
    r->start = r->step = r->line_step = start;
    r->total = total;
    r->every = every > 0 ? every : 1;
    r->t_start = r->t_line = now;
    ps__job_report_write(r, &(ps_report){.kind = PS_REPORT_START, .u.start = {start, total, 0}});
}

static double ps__staleness_mean(const shardps_stats *st)
{
    return st->staleness_count ? (double)st->staleness_sum / (double)st->staleness_count : 0.0;
}

/* The progress line of the steps since the last one, to the launcher or
 * the log. */
static void ps__line(ps_job_report *r, const shardps_stats *st)
{
    double now = ps_clock_now();
    double sps = now > r->t_line ? (double)r->samples_line / (now - r->t_line) : 0.0;
    double mean_loss = r->loss_n ? r->loss_sum / r->loss_n : NAN;
    uint64_t step = r->step;

    if (r->fd < 0) {
        char of[32] = "";
        if (r->total)
            snprintf(of, sizeof(of), "/%" PRIu64, r->total);
        ps_info("step %" PRIu64 "%s loss %.4f %.0f samples/s staleness mean %.2f max %" PRIu64,
                step, of, mean_loss, sps, ps__staleness_mean(st), st->staleness_max);
    }
    ps__job_report_write(
        r, &(ps_report){.kind = PS_REPORT_PROGRESS,
                        .u.progress = {0, step, r->total, mean_loss, sps, ps__staleness_mean(st),
                                       st->staleness_max, st->dropped, st->rejected}});
    r->line_step = step;
    r->t_line = now;
    r->samples_line = 0;
    r->loss_sum = 0;
    r->loss_n = 0;
}

int ps_job_report_step(ps_job_report *r, uint64_t step, double loss, uint64_t samples,
                       const shardps_stats *st, char *err, size_t len)
{
    if (step < r->step)
        return ps_err_printf(err, len, -EINVAL,
                             "shardps_report: step %" PRIu64 " is before step %" PRIu64
                             " reported earlier",
                             step, r->step);
    r->step = step;
    r->samples_line += samples;
    r->samples_total += samples;
    if (isfinite(loss)) {
        r->loss_sum += loss;
        r->loss_n++;
    }
    if (step / (uint64_t)r->every > r->line_step / (uint64_t)r->every)
        ps__line(r, st);
    return 0;
}

void ps_job_report_done(ps_job_report *r, const shardps_stats *st)
{
    if (!r->started)
        return;
    /* The last steps, short of an interval, still make a line: the
     * launcher learns where the worker stopped. */
    if (r->step > r->line_step)
        ps__line(r, st);
    ps__job_report_write(
        r, &(ps_report){.kind = PS_REPORT_DONE,
                        .u.done = {r->step - r->start, (double)r->samples_total,
                                   ps_clock_now() - r->t_start, -1, st->dropped, st->rejected,
                                   st->bytes_sent, st->bytes_received}});
}
