/* The consistency view (see clocks.h). */
#include "clocks.h"

void ps_clocks_view(const ps_job *j, const ps_units *u, int unit, ps_consistency_view *v)
{
    uint32_t staleness = j->cfg->staleness;

    v->staleness = staleness;
    v->started = j->started;
    v->server_clock = ps_units_server_clock(u);
    v->min_live_clock = ps_job_min_live_clock(j);
    /* In sync mode progress is the steps applied: one pass, not two. */
    v->progress_clock = staleness == 0 ? v->server_clock : ps_units_progress_clock(u, staleness);
    v->restored_clock = j->restored_clock;
    v->clock_lead = j->clock_lead;
    /* A row table has its own step, even on a server whose chunks have
     * none. */
    v->stepless = unit < u->n_chunks && ps_units_stepless(u);
    if (staleness == 0 && unit >= u->n_chunks)
        v->server_clock = u->clock[unit].clock;
}
