/* Membership of the job on this server: a worker leaving every barrier
 * (BYE, a lost connection, silence, or its table withdrawn), the ranks that
 * left unfinished and did not come back in time, and when the job is over.
 * A handler of the front (kv_internal.h): the dispatcher (kv_server.c) and
 * tensors.c call it; it calls the other handlers and the shared files below.
 * Runs on the loop thread. */
#include <inttypes.h>

#include "kv_internal.h"
#include "ps_log.h"

/* The job is over once it has started, nobody is live, and every rank has
 * finished or is lost. */
void ps__maybe_done(ps_kv_server *s)
{
    if (!s->started || s->live > 0)
        return;
    for (int r = 0; r < s->cfg.world; r++) {
        if (!s->finished[r] && !s->lost[r]) {
            ps_info("worker %d left without finishing; waiting up to %.1f s for it to rejoin "
                    "(--rejoin-timeout)",
                    r, s->rejoin_timeout_ms / 1000.0);
            return;
        }
    }
    if (s->n_lost > 0)
        ps_warn("the job ends without %d lost worker%s (see the summary)", s->n_lost,
                s->n_lost == 1 ? "" : "s");
    if (s->done)
        s->done(s, s->done_arg);
}

/* A rank that left unfinished and has not rejoined within the timeout is
 * lost: barriers already go on without it; now the job's end does too. */
void ps__check_rejoins(ps_kv_server *s, uint64_t now)
{
    int changed = 0;

    for (int r = 0; r < s->cfg.world; r++) {
        if (s->workers[r] || s->finished[r] || s->lost[r] || s->left_at[r] == 0 ||
            now - s->left_at[r] < s->rejoin_timeout_ms)
            continue;
        s->lost[r] = 1;
        s->n_lost++;
        changed = 1;
        ps_warn("worker %d left without finishing and did not rejoin within %.1f s "
                "(--rejoin-timeout): counted as lost; the job finishes without it",
                r, s->rejoin_timeout_ms / 1000.0);
    }
    if (changed)
        ps__maybe_done(s);
}

/* Takes a worker out of every barrier: its pending pulls are dropped, its
 * pushes for unapplied steps stay in the average, and chunks that were only
 * waiting for it are applied now. */
void ps__worker_leave(ps_kv_server *s, ps__peer *p, const char *why)
{
    if (p->state != PS__PEER_WORKER)
        return;
    p->state = PS__PEER_GONE;
    s->workers[p->rank] = NULL;
    s->live--;
    s->resume_clock = ps_consistency_resume_clock(s->resume_clock, p->earned);
    ps__drop_pulls(s, p);
    for (int i = 0; i < s->n_local; i++)
        if (p->pushed[i] == s->sync[i].clock + 1 && s->sync[i].pushes > 0)
            s->sync[i].live_pushes--;
    /* With nobody live, a step half pushed stays as it is: the ranks that
     * fed it rejoin, their repeats are dropped and the rest completes it
     * exactly once, rather than the part that came being applied alone. */
    if (s->cfg.staleness == 0 && s->live > 0)
        for (int i = 0; i < s->n_local; i++)
            ps__maybe_apply(s, i);
    ps__rows_peer_left(s, p);
    if (s->live > 0)
        ps_info("%s left at clock %" PRIu64 " (%s); %d worker%s still live", p->name, p->clock, why,
                s->live, s->live == 1 ? "" : "s");
    else
        ps_info("%s left at clock %" PRIu64 " (%s); no workers live", p->name, p->clock, why);
    ps__release_pulls(s);
    ps__maybe_quiesced(s);
    ps__table_peer_left(s, p);
    if (s->started && !s->finished[p->rank]) {
        s->left_at[p->rank] = uv_now(s->loop);
        if (s->left_at[p->rank] == 0)
            s->left_at[p->rank] = 1;
    }
    ps__maybe_done(s);
}
