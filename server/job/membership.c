/* Membership of the job on this server (see membership.h). Calls the
 * consistency rules and the log only. */
#include "membership.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "ps_log.h"

/* Default wait for a rank that left unfinished (see --rejoin-timeout). */
#define PS__MEMBERSHIP_REJOIN_MS 30000

int ps_job_init(ps_job *j, const ps_kv_server_config *cfg)
{
    size_t world = (size_t)cfg->world;

    memset(j, 0, sizeof(*j));
    j->cfg = cfg;
    j->total_steps = cfg->lr.total_steps;
    j->rejoin_timeout_ms =
        cfg->rejoin_timeout_ms > 0 ? cfg->rejoin_timeout_ms : PS__MEMBERSHIP_REJOIN_MS;
    /* Servers see a worker's push of a step one after the other, so a
     * worker joining now may be welcomed one step further by another
     * server; and a server restored from a checkpoint taken every N steps
     * may be up to N steps behind the others. */
    j->clock_lead = cfg->max_clock_lead > 0 ? cfg->max_clock_lead
                                            : 1 + (cfg->checkpoint_dir ? cfg->checkpoint_every : 0);
    j->workers = calloc(world, sizeof(*j->workers));
    j->live_clocks = calloc(world, sizeof(*j->live_clocks));
    j->has_joined = calloc(world, 1);
    j->finished = calloc(world, 1);
    j->lost = calloc(world, 1);
    j->left_at = calloc(world, sizeof(*j->left_at));
    if (j->workers == NULL || j->live_clocks == NULL || j->has_joined == NULL ||
        j->finished == NULL || j->lost == NULL || j->left_at == NULL) {
        ps_job_free(j);
        return -ENOMEM;
    }
    return 0;
}

void ps_job_free(ps_job *j)
{
    free(j->workers);
    free(j->live_clocks);
    free(j->has_joined);
    free(j->finished);
    free(j->lost);
    free(j->left_at);
    j->workers = NULL;
    j->live_clocks = NULL;
    j->has_joined = j->finished = j->lost = NULL;
    j->left_at = NULL;
}

void ps_job_admit(ps_job *j, ps_peer *p)
{
    p->state = PS_PEER_WORKER;
    j->workers[p->rank] = p;
    j->live++;
    j->left_at[p->rank] = 0;
    if (j->lost[p->rank]) {
        j->lost[p->rank] = 0;
        j->n_lost--;
        ps_info("worker %u, counted as lost, is back", p->rank);
    }
}

void ps_job_joined(ps_job *j, const ps_peer *p)
{
    int world = j->cfg->world;

    if (j->started) {
        ps_info("%s joined at clock %" PRIu64 "; %d live", p->name, p->clock, j->live);
        return;
    }
    /* A rank that left before the start no longer counts as joined, so
     * each rank here is new. */
    j->has_joined[p->rank] = 1;
    j->joined++;
    if (j->joined < world)
        ps_info("%s joined; waiting for %d more", p->name, world - j->joined);
    else
        ps_info("%s joined", p->name);
}

int ps_job_complete(const ps_job *j)
{
    return !j->started && j->joined >= j->cfg->world;
}

void ps_job_start(ps_job *j)
{
    int world = j->cfg->world;

    j->started = 1;
    /* The schedule's span is the servers' to decide: --total-steps, or a
     * checkpoint's, or else fixed now from the steps the ranks starting
     * the job plan (the most of any), each from a HELLO whose job settings
     * were compared; no later HELLO moves it. */
    if (j->total_steps == 0)
        for (int r = 0; r < world; r++)
            if (j->workers[r] && j->workers[r]->planned > j->total_steps)
                j->total_steps = j->workers[r]->planned;
    if (j->cfg->lr.kind == PS_LR_COSINE) {
        if (j->total_steps == 0)
            ps_warn("the cosine schedule has no span: no worker with the job's settings planned "
                    "its steps, so the rate stays at --lr; set --total-steps on the servers");
        else
            ps_info("the cosine schedule spans %" PRIu64 " steps", j->total_steps);
    }
    ps_info("all %d workers present, training starts", world);
}

int ps_job_leave(ps_job *j, ps_peer *p, const char *why, uint64_t now)
{
    if (p->state != PS_PEER_WORKER)
        return 0;
    p->state = PS_PEER_GONE;
    j->workers[p->rank] = NULL;
    j->live--;
    j->resume_clock = ps_consistency_resume_clock(j->resume_clock, p->earned);
    if (j->live > 0)
        ps_info("%s left at clock %" PRIu64 " (%s); %d worker%s still live", p->name, p->clock, why,
                j->live, j->live == 1 ? "" : "s");
    else
        ps_info("%s left at clock %" PRIu64 " (%s); no workers live", p->name, p->clock, why);
    /* Before training starts, a rank that leaves (however) is as if it
     * never came: training waits for every rank to be there. */
    if (!j->started && j->has_joined[p->rank]) {
        j->has_joined[p->rank] = 0;
        j->joined--;
    }
    if (j->started && !j->finished[p->rank])
        j->left_at[p->rank] = now ? now : 1;
    return 1;
}

void ps_job_finished(ps_job *j, uint32_t rank)
{
    j->finished[rank] = 1;
}

/* A rank that left unfinished and has not rejoined within the timeout is
 * lost: barriers already go on without it; now the job's end does too. */
int ps_job_check_rejoins(ps_job *j, uint64_t now)
{
    int n = 0;

    for (int r = 0; r < j->cfg->world; r++) {
        if (j->workers[r] || j->finished[r] || j->lost[r] || j->left_at[r] == 0 ||
            now - j->left_at[r] < j->rejoin_timeout_ms)
            continue;
        j->lost[r] = 1;
        j->n_lost++;
        n++;
        ps_warn("worker %d left without finishing and did not rejoin within %.1f s "
                "(--rejoin-timeout): counted as lost; the job finishes without it",
                r, j->rejoin_timeout_ms / 1000.0);
    }
    return n;
}

int ps_job_over(const ps_job *j)
{
    if (!j->started || j->live > 0)
        return 0;
    for (int r = 0; r < j->cfg->world; r++) {
        if (!j->finished[r] && !j->lost[r]) {
            ps_info("worker %d left without finishing; waiting up to %.1f s for it to rejoin "
                    "(--rejoin-timeout)",
                    r, j->rejoin_timeout_ms / 1000.0);
            return 0;
        }
    }
    if (j->n_lost > 0)
        ps_warn("the job ends without %d lost worker%s (see the summary)", j->n_lost,
                j->n_lost == 1 ? "" : "s");
    return 1;
}

void ps_job_forget(ps_job *j)
{
    size_t world = (size_t)j->cfg->world;

    j->started = 0;
    j->joined = 0;
    j->n_lost = 0;
    memset(j->has_joined, 0, world);
    memset(j->finished, 0, world);
    memset(j->lost, 0, world);
    memset(j->left_at, 0, world * sizeof(*j->left_at));
    j->resume_clock = j->restored_clock = 0;
    j->total_steps = j->cfg->lr.total_steps;
}

void ps_job_restored(ps_job *j, uint64_t clock, uint64_t total_steps)
{
    j->total_steps = total_steps;
    j->resume_clock = clock;
    j->restored_clock = clock;
}

uint64_t ps_job_min_live_clock(const ps_job *j)
{
    int n = 0;

    for (int r = 0; r < j->cfg->world; r++)
        if (j->workers[r])
            j->live_clocks[n++] = j->workers[r]->clock;
    return ps_consistency_min_clock(j->live_clocks, n);
}

float ps_job_rate(const ps_job *j, uint64_t step, uint64_t staleness)
{
    ps_lr_schedule sched = j->cfg->lr;
    double lr;

    sched.total_steps = j->total_steps;
    lr = ps_lr_schedule_at(&sched, step);
    if (j->cfg->staleness_damping)
        lr /= (double)(1 + staleness);
    return (float)lr;
}
