/* The fault drills of shardps-cluster (see drills.h): parsing, and the
 * decision of what to signal when a worker reports a step. */
#include "drills.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "ps_log.h"

struct ps_drills {
    int kill_rank; /* --kill-worker: SIGKILL kill_rank once it reports kill_step */
    uint64_t kill_step;
    int worker_killed;
    int pause_rank;      /* --pause-worker: SIGSTOP at pause_step, SIGCONT once */
    uint64_t pause_step; /* another worker reports pause_step + pause_for */
    uint64_t pause_for;
    int paused, resumed;
    int kill_server;           /* --kill-server: SIGKILL it once worker 0 reports */
    uint64_t kill_server_step; /* kill_server_step; the launcher restarts it */
    int server_killed;
    int slow_rank, slow_ms; /* --slow-worker */
};

/* sscanf's %llu takes a sign, so "1@-5" would wrap round: refuse a '-'
 * anywhere in a drill's numbers. */
static int ps__has_minus(const char *s)
{
    for (; *s; s++)
        if (*s == '-')
            return 1;
    return 0;
}

static int ps__parse(ps_drills *d, const ps_drills_config *cfg, char *err, size_t errlen)
{
    unsigned long long a, b;
    char tail;

    if (cfg->kill_worker) {
        if (ps__has_minus(cfg->kill_worker) ||
            sscanf(cfg->kill_worker, "%d@%llu%c", &d->kill_rank, &a, &tail) != 2 ||
            d->kill_rank >= cfg->n_workers) {
            snprintf(err, errlen,
                     "--kill-worker '%s' must be RANK@STEP with RANK below --workers, e.g. 1@50",
                     cfg->kill_worker);
            return -EINVAL;
        }
        d->kill_step = a;
    }
    if (cfg->kill_server) {
        if (ps__has_minus(cfg->kill_server) ||
            sscanf(cfg->kill_server, "%d@%llu%c", &d->kill_server, &a, &tail) != 2 ||
            d->kill_server >= cfg->n_servers || !cfg->can_restore) {
            snprintf(err, errlen,
                     "--kill-server '%s' must be I@STEP with I below --servers, and needs "
                     "--checkpoint-dir to restart from",
                     cfg->kill_server);
            return -EINVAL;
        }
        d->kill_server_step = a;
    }
    if (cfg->slow_worker &&
        (ps__has_minus(cfg->slow_worker) ||
         sscanf(cfg->slow_worker, "%d:%d%c", &d->slow_rank, &d->slow_ms, &tail) != 2 ||
         d->slow_rank >= cfg->n_workers)) {
        snprintf(err, errlen,
                 "--slow-worker '%s' must be RANK:MS with RANK below --workers, e.g. 2:50",
                 cfg->slow_worker);
        return -EINVAL;
    }
    if (cfg->pause_worker) {
        if (ps__has_minus(cfg->pause_worker) ||
            sscanf(cfg->pause_worker, "%d@%llu:%llu%c", &d->pause_rank, &a, &b, &tail) != 3 ||
            d->pause_rank >= cfg->n_workers || cfg->n_workers < 2) {
            snprintf(err, errlen,
                     "--pause-worker '%s' must be RANK@STEP:N with RANK below --workers (2 or "
                     "more), e.g. 1@50:30",
                     cfg->pause_worker);
            return -EINVAL;
        }
        d->pause_step = a;
        d->pause_for = b;
    }
    return 0;
}

int ps_drills_init(ps_drills **out, const ps_drills_config *cfg, char *err, size_t errlen)
{
    ps_drills *d = calloc(1, sizeof(*d));
    int rc;

    *out = NULL;
    if (errlen > 0)
        err[0] = '\0';
    if (d == NULL) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    d->kill_rank = d->pause_rank = d->kill_server = d->slow_rank = -1;
    rc = ps__parse(d, cfg, err, errlen);
    if (rc < 0) {
        free(d);
        return rc;
    }
    *out = d;
    return 0;
}

void ps_drills_free(ps_drills *d)
{
    free(d);
}

int ps_drills_slow_ms(const ps_drills *d, int rank)
{
    return rank == d->slow_rank ? d->slow_ms : 0;
}

/* Adds step to the ascending list out[0..*n) unless it is there already. */
static void ps__add_step(uint64_t *out, int *n, uint64_t step)
{
    int i = *n;

    for (int j = 0; j < *n; j++)
        if (out[j] == step)
            return;
    while (i > 0 && out[i - 1] > step) {
        out[i] = out[i - 1];
        i--;
    }
    out[i] = step;
    (*n)++;
}

int ps_drills_report_steps(const ps_drills *d, int rank, uint64_t *out)
{
    int n = 0;

    if (rank == d->kill_rank)
        ps__add_step(out, &n, d->kill_step);
    if (rank == 0 && d->kill_server >= 0)
        ps__add_step(out, &n, d->kill_server_step);
    if (d->pause_rank >= 0)
        ps__add_step(out, &n, rank == d->pause_rank ? d->pause_step : d->pause_step + d->pause_for);
    return n;
}

/* --pause-worker R@STEP:N: stop worker R once it reports STEP, and let it go
 * on once another worker has gone N steps further, which can only happen if
 * the servers let the others proceed without it. */
static int ps__pause(ps_drills *d, int rank, uint64_t step, ps_drills_running_fn running, void *arg,
                     ps_drill_action *out)
{
    if (d->pause_rank < 0 || d->resumed)
        return 0;
    if (!d->paused && rank == d->pause_rank && step >= d->pause_step && running(arg, 0, rank)) {
        ps_info("pausing worker %d at step %" PRIu64 " with SIGSTOP, as --pause-worker asked", rank,
                step);
        d->paused = 1;
        *out = (ps_drill_action){PS_DRILL_STOP_WORKER, rank};
        return 1;
    }
    if (d->paused && rank != d->pause_rank && step >= d->pause_step + d->pause_for &&
        running(arg, 0, d->pause_rank)) {
        ps_info("worker %d reached step %" PRIu64 " without worker %d; resuming it with SIGCONT",
                rank, step, d->pause_rank);
        d->resumed = 1;
        *out = (ps_drill_action){PS_DRILL_CONT_WORKER, d->pause_rank};
        return 1;
    }
    return 0;
}

int ps_drills_on_step(ps_drills *d, int rank, uint64_t step, ps_drills_running_fn running,
                      void *arg, ps_drill_action *out)
{
    int n = ps__pause(d, rank, step, running, arg, out);

    if (rank == 0 && d->kill_server >= 0 && !d->server_killed && step >= d->kill_server_step &&
        running(arg, 1, d->kill_server)) {
        ps_info("killing server %d at step %" PRIu64
                " with SIGKILL, as --kill-server asked; it restarts with --restore",
                d->kill_server, step);
        d->server_killed = 1;
        out[n++] = (ps_drill_action){PS_DRILL_KILL_SERVER, d->kill_server};
    }
    if (rank == d->kill_rank && !d->worker_killed && step >= d->kill_step &&
        running(arg, 0, rank)) {
        ps_info("killing worker %d at step %" PRIu64 " with SIGKILL, as --kill-worker asked", rank,
                step);
        d->worker_killed = 1;
        out[n++] = (ps_drill_action){PS_DRILL_KILL_WORKER, rank};
    }
    return n;
}
