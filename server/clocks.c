/* The job's clocks and membership as the consistency rules see them: the
 * steps this server has applied, its progress, and the view (who is live,
 * at which clock) that consistency.c's pure rules take. Below the
 * dispatcher and the handlers (kv_internal.h): it reads the server's state
 * and calls neither. */
#include "kv_internal.h"

uint64_t ps__server_clock(const ps_kv_server *s)
{
    return ps_consistency_server_clock(s->sync, s->n_local);
}

uint64_t ps__progress_clock(const ps_kv_server *s)
{
    return ps_consistency_progress_clock(s->cfg.staleness, s->sync, s->n_local);
}

void ps__view(const ps_kv_server *s, ps_consistency_view *v)
{
    int n = 0;

    for (int r = 0; r < s->cfg.world; r++)
        if (s->workers[r])
            s->live_clocks[n++] = s->workers[r]->clock;
    v->staleness = s->cfg.staleness;
    v->started = s->started;
    v->server_clock = ps__server_clock(s);
    v->min_live_clock = ps_consistency_min_clock(s->live_clocks, n);
    v->progress_clock = ps__progress_clock(s);
    v->restored_clock = s->restored_clock;
    v->clock_lead = s->clock_lead;
}
