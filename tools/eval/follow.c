/* The evaluator's loop (see follow.h): connect as an evaluator, pull,
 * score, write a line, wait, again; reconnect when the connection drops
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
#include "kv_client.h"
#include "model.h"
#include "ps_error.h"
#include "ps_log.h"
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

static int ps__follow_connect(const ps_follow_config *cfg, double timeout_s, ps_kv_client **out)
{
    ps_kv_client_config kc;
    uint64_t clock;
    int rc;

    memset(&kc, 0, sizeof(kc));
    kc.servers = ps_server_list_entries(cfg->plan->servers);
    kc.n_servers = ps_server_list_count(cfg->plan->servers);
    kc.chunk_bytes = (size_t)cfg->job->chunk_bytes;
    kc.max_payload = (size_t)cfg->job->max_payload;
    kc.connect_timeout_s = timeout_s;
    kc.request_timeout_s = cfg->job->request_timeout;
    kc.auth_key = cfg->auth_key;
    kc.stop = cfg->stop;
    kc.evaluator = 1;
    rc = ps_kv_client_init(out, &kc);
    if (rc < 0)
        return rc;
    rc = ps_kv_client_connect(*out, &clock);
    if (rc < 0) {
        ps_kv_client_abandon(*out);
        *out = NULL;
    }
    return rc;
}

/* The model the options describe, with the servers' table: the two must
 * be the same tensors, or the weights would be scored by another model. */
static int ps__model_for(const ps_follow_config *cfg, const ps_kv_client *c, ps_model **m)
{
    const ps_model_spec *held = ps_kv_client_spec(c);
    char why[256];
    int rc;

    if (ps_tensor_table_diff(&cfg->plan->spec, held, "from --model/--hidden and --seed",
                             "on the servers", why, sizeof(why)) != 0) {
        fprintf(stderr, "shardps-eval: the servers hold another model: %s\n", why);
        return -PS_EMISMATCH;
    }
    rc = ps_model_init(m, &ps_backend_cpu_ops, NULL, &cfg->plan->desc, held, PS__FOLLOW_BATCH, 0);
    if (rc < 0)
        fprintf(stderr, "shardps-eval: cannot build the model: %s\n", ps_strerror(rc));
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
static int ps__say_following(const ps_follow_config *cfg, ps_kv_client *c)
{
    static const char line[] = "following\n";
    int rc = ps_kv_client_flush(c);

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
    ps_kv_client *c = NULL;
    ps_model *m = NULL;
    float *x = NULL, **params = NULL;
    uint32_t *all = NULL;
    uint8_t *y = NULL;
    uint64_t lo, hi, last_lo = UINT64_MAX, last_hi = UINT64_MAX;
    double t0 = ps_clock_now();
    int scored = 0, said = 0, rc;

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
    params = calloc((size_t)ps_kv_client_spec(c)->n_tensors, sizeof(*params));
    if (x == NULL || all == NULL || y == NULL || params == NULL)
        goto out;
    for (int i = 0; i < ds->n; i++)
        all[i] = (uint32_t)i;
    ps_dataset_gather(ds, all, ds->n, x, y);
    for (int t = 0; t < ps_kv_client_spec(c)->n_tensors; t++)
        params[t] = ps_model_param(m, t);
    rc = 0;
    while (!*cfg->stop && (cfg->max_snapshots == 0 || scored < cfg->max_snapshots)) {
        if (c == NULL && ps__follow_connect(cfg, PS__RECONNECT_S, &c) < 0) {
            ps_info("the job's servers are gone; %d snapshot%s scored", scored,
                    scored == 1 ? "" : "s");
            break;
        }
        rc = ps_kv_client_pull(c, 0, params);
        if (rc == 0 && cfg->report_fd >= 0 && !said) {
            rc = ps__say_following(cfg, c);
            said = 1;
        }
        if (rc == 0)
            rc = ps_kv_client_wait(c);
        if (rc == -EINTR) {
            rc = 0;
            break;
        }
        if (ps_error_is_connection_loss(rc)) {
            /* Dropped, or the job is ending (a server that exits while our
             * pull is on its way is a reset or a broken pipe as often as a
             * close): look for the servers again. */
            ps_kv_client_abandon(c);
            c = NULL;
            rc = 0;
            continue;
        }
        if (rc < 0)
            goto out;
        ps_kv_client_snapshot_clocks(c, &lo, &hi);
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
    ps_kv_client_close(c);
    ps_model_free(m);
    free(x);
    free(all);
    free(y);
    free(params);
    return rc;
}
