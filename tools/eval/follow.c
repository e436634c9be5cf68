/* The evaluator's loop (see follow.h): connect as an evaluator (libshardps,
 * include/shardps.h), pull, score, write a line, wait, again; reconnect when the connection drops
 * (a server closes an evaluator that was silent past its heartbeat timeout,
 * or restarts), and end once the job's servers are gone. */
#include "follow.h"

#include <errno.h>
#include <inttypes.h>
#include <sched.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend_ops.h"
#include "clock.h"
#include "model.h"
#include "ps_error.h"
#include "ps_log.h"
#include "shardps.h"
#include "tensor_table.h"

/* Scored in batches of this many, as the worker and the saved-model path
 * score (eval_main.c). */
#define PS__FOLLOW_BATCH 256
/* After a drop, how long the servers are looked for before the job counts
 * as ended. */
#define PS__RECONNECT_S 5.0
/* How often a wait between snapshots looks at the stop flag. */
#define PS__NAP_S 0.1

/* The evaluator takes only what training leaves idle: SCHED_IDLE runs it
 * only when no normal thread wants the core, so on a 2-core machine with 2
 * workers it scores between their steps rather than beside them. Its
 * threads (BLAS) inherit the policy, as they start later. */
static void ps__lower_priority(void)
{
    struct sched_param sp;

    memset(&sp, 0, sizeof(sp));
    if (sched_setscheduler(0, SCHED_IDLE, &sp) == 0) {
        ps_info("running at SCHED_IDLE: scoring takes only the cores training leaves idle");
        return;
    }
    errno = 0;
    if (nice(19) == -1 && errno != 0)
        ps_warn("cannot lower this process's priority (%s); it competes with training",
                strerror(errno));
    else
        ps_info("SCHED_IDLE refused; running at nice 19");
}

/* Sets option name of h to the number v, as the job's options hold it. */
static int ps__follow_option(shardps *h, const char *name, double v)
{
    char text[64];

    snprintf(text, sizeof(text), "%.17g", v);
    return shardps_set_option(h, name, text);
}

/* A handle on the job as its evaluator (include/shardps.h), connected
 * within timeout_s; *out is the caller's to close. Returns 0 or a negative
 * code (a refused option is said on stderr). */
static int ps__follow_connect(const ps_follow_config *cfg, double timeout_s, shardps **out)
{
    const ps_job_options *jo = cfg->job;
    shardps *h;
    int rc = shardps_new_evaluator(&h, ps_server_list_entries(cfg->plan->servers),
                                   ps_server_list_count(cfg->plan->servers));

    if (rc < 0)
        return rc;
    rc = ps__follow_option(h, "chunk-bytes", jo->chunk_bytes);
    if (rc == 0)
        rc = ps__follow_option(h, "max-payload", jo->max_payload);
    if (rc == 0)
        rc = ps__follow_option(h, "connect-timeout", timeout_s);
    if (rc == 0)
        rc = ps__follow_option(h, "request-timeout", jo->request_timeout);
    if (rc == 0 && jo->auth_token_file)
        rc = shardps_set_option(h, "auth-token-file", jo->auth_token_file);
    if (rc < 0) {
        fprintf(stderr, "shardps-eval: %s\n", shardps_last_error(h));
        goto fail;
    }
    shardps_set_stop_flag(h, cfg->stop);
    rc = shardps_connect(h);
    if (rc < 0)
        goto fail;
    *out = h;
    return 0;
fail:
    shardps_abandon(h);
    return rc;
}

/* The model the options describe, with the servers' table (the whole of
 * it: shardps_table): the two must be the same tensors, or the weights
 * would be scored by another model. */
static int ps__model_for(const ps_follow_config *cfg, const shardps *h, ps_model **m)
{
    ps_model_spec held;
    uint8_t *packed = NULL;
    char why[256];
    int len = shardps_table(h, NULL, 0), rc = len < 0 ? len : -ENOMEM;

    memset(&held, 0, sizeof(held));
    if (len > 0 && (packed = malloc((size_t)len)) != NULL)
        rc = shardps_table(h, packed, (size_t)len);
    if (rc < 0) {
        fprintf(stderr, "shardps-eval: cannot read the servers' table: %s\n", ps_strerror(rc));
        goto out;
    }
    rc = ps_tensor_table_decode(packed, (size_t)len, 0, &held, why, sizeof(why));
    if (rc < 0) {
        fprintf(stderr, "shardps-eval: the servers' table does not decode: %s\n", why);
        goto out;
    }
    if (ps_tensor_table_diff(&cfg->plan->spec, &held, "from --model/--hidden and --seed",
                             "on the servers", why, sizeof(why)) != 0) {
        fprintf(stderr, "shardps-eval: the servers hold another model: %s\n", why);
        rc = -PS_EMISMATCH;
        goto out;
    }
    rc = ps_model_init(m, &ps_backend_cpu_ops, NULL, &cfg->plan->desc, &held, PS__FOLLOW_BATCH, 0);
    if (rc < 0)
        fprintf(stderr, "shardps-eval: cannot build the model: %s\n", ps_strerror(rc));
out:
    ps_model_spec_free(&held);
    free(packed);
    return rc;
}

/* Waits seconds, or less once *stop is set. */
static void ps__nap(const ps_follow_config *cfg, double seconds)
{
    double end = ps_clock_now() + seconds;

    while (!*cfg->stop && ps_clock_now() < end) {
        double left = end - ps_clock_now();
        struct timespec ts;
        left = left < PS__NAP_S ? left : PS__NAP_S;
        ts.tv_sec = (time_t)left;
        ts.tv_nsec = (long)((left - (double)ts.tv_sec) * 1e9);
        nanosleep(&ts, NULL);
    }
}

/* Tells the launcher this evaluator is in (once): a worker it holds back
 * may start, and the first pull, already sent, is answered with the first
 * weights of the job at the latest. */
static int ps__say_following(const ps_follow_config *cfg, shardps *h)
{
    static const char line[] = "following\n";
    int rc = shardps_flush(h);

    if (rc < 0)
        return rc;
    /* A launcher that went away does not stop the evaluator. */
    if (write(cfg->report_fd, line, sizeof(line) - 1) < 0)
        ps_debug("cannot tell the launcher we follow the job: %s", strerror(errno));
    return 0;
}

/* Scores the model's weights and writes the curve's line for steps lo..hi. */
static int ps__score(const ps_follow_config *cfg, ps_model *m, const float *x, const uint8_t *y,
                     int n, uint64_t lo, uint64_t hi, double t0)
{
    uint64_t global_batch = (uint64_t)cfg->job->batch * (uint64_t)cfg->job->workers;
    float loss;
    int correct, rc = ps_model_evaluate(m, x, y, n, &loss, &correct, NULL);

    if (rc < 0) {
        fprintf(stderr, "shardps-eval: evaluation failed: %s\n", ps_strerror(rc));
        return rc;
    }
    fprintf(cfg->curve,
            "{\"event\":\"snapshot\",\"step\":%" PRIu64 ",\"step_lo\":%" PRIu64
            ",\"step_hi\":%" PRIu64 ",\"samples\":%" PRIu64
            ",\"seconds\":%.3f,\"test_accuracy\":%.6f,\"test_loss\":%.6f}\n",
            lo, lo, hi, lo * global_batch, ps_clock_now() - t0, (double)correct / n, loss);
    fflush(cfg->curve);
    return 0;
}

int ps_follow_run(const ps_follow_config *cfg)
{
    const ps_dataset *ds = cfg->test;
    shardps *c = NULL;
    ps_model *m = NULL;
    float *x = NULL, **params = NULL;
    uint32_t *all = NULL;
    uint8_t *y = NULL;
    uint64_t lo, hi, last_lo = UINT64_MAX, last_hi = UINT64_MAX;
    double t0 = ps_clock_now();
    int scored = 0, said = 0, n_tensors, rc;

    ps__lower_priority();
    rc = ps__follow_connect(cfg, cfg->job->connect_timeout, &c);
    if (rc < 0) {
        if (rc != -EINTR)
            fprintf(stderr, "shardps-eval: cannot follow the job at %s: %s\n", cfg->job->servers,
                    ps_strerror(rc));
        return rc == -EINTR ? 0 : rc;
    }
    rc = ps__model_for(cfg, c, &m);
    if (rc < 0)
        goto out;
    rc = -ENOMEM;
    x = malloc((size_t)ds->n * (size_t)ds->features * sizeof(float));
    all = malloc((size_t)ds->n * sizeof(uint32_t));
    y = malloc((size_t)ds->n);
    n_tensors = shardps_tensor_count(c);
    params = calloc((size_t)n_tensors, sizeof(*params));
    if (x == NULL || all == NULL || y == NULL || params == NULL)
        goto out;
    for (int i = 0; i < ds->n; i++)
        all[i] = (uint32_t)i;
    ps_dataset_gather(ds, all, ds->n, x, y);
    for (int t = 0; t < n_tensors; t++)
        params[t] = ps_model_param(m, t);
    rc = 0;
    while (!*cfg->stop && (cfg->max_snapshots == 0 || scored < cfg->max_snapshots)) {
        if (c == NULL && ps__follow_connect(cfg, PS__RECONNECT_S, &c) < 0) {
            ps_info("the job's servers are gone; %d snapshot%s scored", scored,
                    scored == 1 ? "" : "s");
            break;
        }
        rc = shardps_pull(c, 0, params, n_tensors);
        if (rc == 0 && cfg->report_fd >= 0 && !said) {
            rc = ps__say_following(cfg, c);
            said = 1;
        }
        if (rc == 0)
            rc = shardps_wait(c);
        if (rc == -EINTR) {
            rc = 0;
            break;
        }
        if (ps_error_is_connection_loss(rc)) {
            /* Dropped, or the job is ending (a server that exits while our
             * pull is on its way is a reset or a broken pipe as often as a
             * close): look for the servers again. */
            shardps_abandon(c);
            c = NULL;
            rc = 0;
            continue;
        }
        if (rc < 0)
            goto out;
        shardps_snapshot_clocks(c, &lo, &hi);
        /* The same steps everywhere as last time: in sync mode, the same
         * weights; not scored twice. */
        if (lo != last_lo || hi != last_hi) {
            rc = ps__score(cfg, m, x, y, ds->n, lo, hi, t0);
            if (rc < 0)
                goto out;
            last_lo = lo;
            last_hi = hi;
            scored++;
        }
        if (cfg->max_snapshots == 0 || scored < cfg->max_snapshots)
            ps__nap(cfg, cfg->every_s);
    }
out:
    /* A goodbye: the servers forget this evaluator at once. */
    shardps_close(c);
    ps_model_free(m);
    free(x);
    free(all);
    free(y);
    free(params);
    return rc;
}
