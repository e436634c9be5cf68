/* The worker's JSON-lines metrics file; see train_metrics.h for the time
 * split. Lines are written whole and flushed, so a reader following the file
 * during a run never sees half a line for long, and a crash loses at most the
 * interval in progress. */
#include "train_metrics.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "ps_log.h"

static double ps__unix(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* JSON has no NaN or Infinity: a diverged loss is written as null. */
static void ps__num(FILE *f, const char *key, double v)
{
    if (isfinite(v))
        fprintf(f, ",\"%s\":%.6g", key, v);
    else
        fprintf(f, ",\"%s\":null", key);
}

/* The fields every line starts with. */
static void ps__head(ps_train_metrics *m, const char *event, uint64_t step)
{
    double elapsed = ps_clock_now() - m->t0;

    fprintf(m->f, "{\"event\":\"%s\",\"time\":%.3f,\"rank\":%d,\"step\":%" PRIu64, event,
            ps__unix(), m->rank, step);
    ps__num(m->f, "epoch", (double)step / m->steps_per_epoch);
    fprintf(m->f, ",\"elapsed\":%.3f,\"train_seconds\":%.3f", elapsed, elapsed - m->eval_s);
}

static void ps__traffic(ps_train_metrics *m, const shardps_stats *ks)
{
    fprintf(m->f, ",\"bytes_in\":%" PRIu64 ",\"bytes_out\":%" PRIu64, ks->bytes_received,
            ks->bytes_sent);
    ps__num(m->f, "staleness_mean",
            ks->staleness_count ? (double)ks->staleness_sum / (double)ks->staleness_count : 0.0);
    fprintf(m->f, ",\"staleness_max\":%" PRIu64 ",\"dropped\":%" PRIu64, ks->staleness_max,
            ks->dropped);
}

static void ps__end_line(ps_train_metrics *m)
{
    fputs("}\n", m->f);
    /* A full disk must not stop training: warn once and give up the file. */
    if (fflush(m->f) != 0 || ferror(m->f)) {
        ps_warn("cannot write the metrics file: %s; no more lines will be written",
                strerror(errno));
        fclose(m->f);
        m->f = NULL;
    }
}

int ps_train_metrics_open(ps_train_metrics *m, const char *path, int rank, int steps_per_epoch)
{
    memset(m, 0, sizeof(*m));
    m->rank = rank;
    m->steps_per_epoch = steps_per_epoch > 0 ? steps_per_epoch : 1;
    m->t0 = m->last_t = ps_clock_now();
    m->min_exchange_s = INFINITY;
    if (path == NULL)
        return 0;
    m->f = fopen(path, "w");
    return m->f ? 0 : -errno;
}

void ps_train_metrics_step(ps_train_metrics *m, double compute_s, double exchange_s, float loss,
                           int correct, int batch)
{
    double comm;

    if (m->f == NULL)
        return;
    if (exchange_s < m->min_exchange_s)
        m->min_exchange_s = exchange_s;
    comm = m->min_exchange_s;
    m->compute_s += compute_s;
    m->comm_s += comm;
    m->wait_s += exchange_s - comm;
    m->loss_sum += loss;
    m->correct += (uint64_t)correct;
    m->samples += (uint64_t)batch;
    m->steps++;
}

void ps_train_metrics_interval(ps_train_metrics *m, uint64_t step, uint64_t clock,
                               const shardps_stats *ks)
{
    double now = ps_clock_now(), dt;

    if (m->f == NULL)
        return;
    dt = now - m->last_t;
    ps__head(m, "interval", step);
    fprintf(m->f, ",\"clock\":%" PRIu64 ",\"steps\":%" PRIu64, clock, m->steps);
    ps__num(m->f, "loss", m->steps ? m->loss_sum / (double)m->steps : NAN);
    ps__num(m->f, "train_accuracy", m->samples ? (double)m->correct / (double)m->samples : NAN);
    ps__num(m->f, "samples_per_second", dt > 0 ? (double)m->samples / dt : 0);
    ps__traffic(m, ks);
    fprintf(m->f, ",\"compute_seconds\":%.4f,\"communication_seconds\":%.4f", m->compute_s,
            m->comm_s);
    fprintf(m->f, ",\"waiting_seconds\":%.4f,\"interval_seconds\":%.4f", m->wait_s, dt);
    ps__end_line(m);
    m->total_steps += m->steps;
    m->total_samples += m->samples;
    m->total_compute_s += m->compute_s;
    m->total_comm_s += m->comm_s;
    m->total_wait_s += m->wait_s;
    m->last_t = now;
    m->compute_s = m->comm_s = m->wait_s = m->loss_sum = 0;
    m->steps = m->correct = m->samples = 0;
}

void ps_train_metrics_eval(ps_train_metrics *m, uint64_t step, double accuracy, double loss,
                           double seconds)
{
    if (m->f == NULL)
        return;
    /* Counted first, so train_seconds on this line excludes this evaluation. */
    m->eval_s += seconds;
    /* The evaluation is not part of the interval it interrupted either. */
    m->last_t += seconds;
    ps__head(m, "eval", step);
    ps__num(m->f, "test_accuracy", accuracy);
    ps__num(m->f, "test_loss", loss);
    fprintf(m->f, ",\"eval_seconds\":%.4f", seconds);
    ps__end_line(m);
}

void ps_train_metrics_close(ps_train_metrics *m, uint64_t step, const shardps_stats *ks)
{
    if (m->f == NULL)
        return;
    if (ks != NULL) {
        double train = ps_clock_now() - m->t0 - m->eval_s;
        uint64_t steps = m->total_steps + m->steps;
        ps__head(m, "done", step);
        fprintf(m->f, ",\"steps\":%" PRIu64, steps);
        ps__num(m->f, "samples_per_second",
                train > 0 ? (double)(m->total_samples + m->samples) / train : 0);
        ps__traffic(m, ks);
        fprintf(m->f, ",\"compute_seconds\":%.4f,\"communication_seconds\":%.4f",
                m->total_compute_s + m->compute_s, m->total_comm_s + m->comm_s);
        fprintf(m->f, ",\"waiting_seconds\":%.4f,\"eval_seconds\":%.4f",
                m->total_wait_s + m->wait_s, m->eval_s);
        ps__end_line(m);
    }
    if (m->f != NULL)
        fclose(m->f);
    m->f = NULL;
}
