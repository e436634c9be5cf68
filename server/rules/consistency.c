/* The consistency rules: pull readiness, reply clocks, quorum, staleness and
 * join clocks, as pure functions (see consistency.h). The server gathers the
 * numbers; these decide. */
#include "consistency.h"

#include <inttypes.h>

#include "ps_error.h"

/* a + b, held at UINT64_MAX rather than wrapping. */
static uint64_t ps__consistency_add(uint64_t a, uint64_t b)
{
    return a + b < a ? UINT64_MAX : a + b;
}

uint64_t ps_consistency_min_clock(const uint64_t *clocks, int n)
{
    uint64_t m = UINT64_MAX;

    for (int i = 0; i < n; i++)
        if (clocks[i] < m)
            m = clocks[i];
    return m;
}

uint64_t ps_consistency_server_clock(const ps_chunk_clock *chunks, int n)
{
    uint64_t m = UINT64_MAX;

    for (int i = 0; i < n; i++)
        if (chunks[i].clock < m)
            m = chunks[i].clock;
    return m == UINT64_MAX ? 0 : m;
}

uint64_t ps_consistency_stepless_clock(uint32_t staleness, uint64_t followed,
                                       const ps_chunk_clock *tables, int n_tables)
{
    uint64_t m = followed;

    for (int i = 0; i < n_tables; i++) {
        uint64_t c = staleness == 0 ? tables[i].clock : tables[i].newest;
        if (c > m)
            m = c;
    }
    return m;
}

uint64_t ps_consistency_progress_clock(uint32_t staleness, const ps_chunk_clock *chunks, int n)
{
    uint64_t m = 0;

    if (staleness == 0)
        return ps_consistency_server_clock(chunks, n);
    for (int i = 0; i < n; i++)
        if (chunks[i].newest > m)
            m = chunks[i].newest;
    return m;
}

int ps_consistency_pull_ready(const ps_consistency_view *v, uint64_t clock, uint64_t fed)
{
    if (!v->started)
        return 0;
    if (v->stepless)
        return 1;
    if (v->staleness == 0)
        return clock <= v->server_clock && fed <= v->server_clock;
    if (v->staleness == PS_STALENESS_UNBOUNDED)
        return 1;
    return v->min_live_clock == UINT64_MAX || clock <= v->min_live_clock + v->staleness;
}

uint64_t ps_consistency_reply_clock(uint32_t staleness, uint64_t server_clock, uint64_t asked)
{
    if (staleness != 0)
        return asked;
    return server_clock > asked ? server_clock : asked;
}

int ps_consistency_pushes_needed(int quorum, int world, int live)
{
    int q = quorum > 0 ? quorum : world;
    return q < live ? q : live;
}

int ps_consistency_step_complete(const ps_chunk_clock *c, int needed)
{
    if (c->live_pushes == 0 && c->pushes == 0)
        return 0;
    return c->live_pushes >= needed;
}

int ps_consistency_step_divisor(const ps_chunk_clock *c)
{
    return c->used > 0 ? c->pushes : 0;
}

uint64_t ps_consistency_staleness(uint64_t newest, uint64_t clock)
{
    return newest > clock + 1 ? newest - (clock + 1) : 0;
}

uint64_t ps_consistency_join_clock(const ps_consistency_view *v, uint64_t resume_clock)
{
    if (v->staleness == 0)
        return v->server_clock;
    return v->min_live_clock == UINT64_MAX ? resume_clock : v->min_live_clock;
}

uint64_t ps_consistency_clock_ceiling(const ps_consistency_view *v, uint64_t earned)
{
    uint64_t base = v->progress_clock;

    if (v->staleness == 0) {
        base = v->stepless && earned > v->server_clock ? earned : v->server_clock;
        return ps__consistency_add(base, 1);
    }
    if (v->restored_clock > base)
        base = v->restored_clock;
    if (earned > base)
        base = earned;
    return ps__consistency_add(base, v->clock_lead);
}

ps_clock_verdict ps_consistency_check_pull(const ps_consistency_view *v, uint64_t rank_clock,
                                           uint64_t earned, int keys_pushed, uint64_t asked)
{
    /* A sync worker that fell behind may ask for an older step (it is
     * answered with the current one); elsewhere going back would let it slip
     * past the ssp gate. */
    if (v->staleness != 0 && asked < rank_clock)
        return PS_CLOCK_BEHIND;
    if (asked > ps_consistency_clock_ceiling(v, earned))
        return PS_CLOCK_AHEAD;
    if (asked > rank_clock && keys_pushed != 0)
        return PS_CLOCK_MID_STEP;
    return PS_CLOCK_OK;
}

ps_clock_verdict ps_consistency_check_push(const ps_consistency_view *v, uint64_t rank_clock,
                                           uint64_t clock)
{
    if (!v->started)
        return PS_CLOCK_NOT_STARTED;
    if (v->staleness != 0 && clock != rank_clock)
        return PS_CLOCK_NOT_ITS;
    return PS_CLOCK_OK;
}

ps_clock_verdict ps_consistency_sync_push(uint64_t chunk_clock, uint64_t clock)
{
    if (clock < chunk_clock)
        return PS_CLOCK_BEHIND;
    return clock > chunk_clock ? PS_CLOCK_AHEAD : PS_CLOCK_OK;
}

const char *ps_consistency_verdict_text(ps_clock_verdict verdict)
{
    switch (verdict) {
    case PS_CLOCK_OK:
        return "clock allowed";
    case PS_CLOCK_AHEAD:
        return "clock past what the mode allows";
    case PS_CLOCK_BEHIND:
        return "clock behind the worker's own";
    case PS_CLOCK_MID_STEP:
        return "clock moved in the middle of pushing a step";
    case PS_CLOCK_NOT_ITS:
        return "clock is not the worker's";
    case PS_CLOCK_NOT_STARTED:
        return "clock given before the job started";
    }
    return "clock refused";
}

uint64_t ps_consistency_resume_clock(uint64_t resume_clock, uint64_t earned)
{
    return earned > resume_clock ? earned : resume_clock;
}

int ps_consistency_saved_clocks(uint32_t staleness, uint64_t lead, uint64_t file_clock,
                                ps_saved_kind kind, uint64_t clock, uint64_t newest, char *why,
                                size_t why_len)
{
    uint64_t most = kind == PS_SAVED_PARAMETER ? file_clock : ps__consistency_add(file_clock, 1);
    const char *what = kind == PS_SAVED_ROWS ? "its clocks" : "its chunk clocks";

    if (kind == PS_SAVED_STATIC) {
        if (newest == 0)
            return 0;
        return ps_err_printf(why, why_len, -PS_EFORMAT,
                             "newest step %" PRIu64
                             " where a buffer's or a frozen tensor's chunk takes none",
                             newest);
    }
    if (staleness == 0) {
        if (newest == clock && clock <= ps__consistency_add(file_clock, 1) &&
            (kind == PS_SAVED_ROWS || clock >= file_clock))
            return 0;
        return ps_err_printf(why, why_len, -PS_EFORMAT,
                             "%s (step %" PRIu64 ", newest %" PRIu64
                             ") cannot be a sync file's of clock %" PRIu64
                             ": they must be equal and %sat most %" PRIu64,
                             what, clock, newest, file_clock,
                             kind == PS_SAVED_ROWS ? "" : "at least the file's clock and ",
                             ps__consistency_add(file_clock, 1));
    }
    if (kind == PS_SAVED_ROWS)
        most = ps__consistency_add(most, lead);
    if (clock <= file_clock && newest <= most)
        return 0;
    return ps_err_printf(why, why_len, -PS_EFORMAT,
                         "%s (step %" PRIu64 ", newest %" PRIu64
                         ") cannot be a file's of clock %" PRIu64 ": the step at most %" PRIu64
                         " and the newest at most %" PRIu64,
                         what, clock, newest, file_clock, file_clock, most);
}
