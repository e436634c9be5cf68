/* The units' step clock (see units.h). Calls the consistency rules only. */
#include "units.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int ps_units_init(ps_units *u, int n_chunks, int n_tables, int world)
{
    int n = n_chunks + n_tables;

    memset(u, 0, sizeof(*u));
    u->n_chunks = n_chunks;
    u->n_tables = n_tables;
    u->n = n;
    u->world = world;
    u->clock = calloc((size_t)n + 1, sizeof(*u->clock));
    u->pushed = calloc((size_t)n * (size_t)world + 1, sizeof(*u->pushed));
    u->dirty = calloc((size_t)n + 1, sizeof(*u->dirty));
    u->is_dirty = calloc((size_t)n + 1, 1);
    if (u->clock == NULL || u->pushed == NULL || u->dirty == NULL || u->is_dirty == NULL) {
        ps_units_free(u);
        return -ENOMEM;
    }
    return 0;
}

void ps_units_free(ps_units *u)
{
    free(u->clock);
    free(u->pushed);
    free(u->dirty);
    free(u->is_dirty);
    memset(u, 0, sizeof(*u));
}

void ps_units_set_static(ps_units *u, int unit)
{
    u->n_static += u->clock[unit].clock != UINT64_MAX;
    u->clock[unit].clock = UINT64_MAX;
}

int ps_units_stepless(const ps_units *u)
{
    return u->n_static == u->n_chunks;
}

void ps_units_follow(ps_units *u, uint64_t clock)
{
    if (ps_units_stepless(u) && clock != UINT64_MAX && clock > u->followed)
        u->followed = clock;
}

static void ps__units_mark(ps_units *u, int unit)
{
    if (u->is_dirty[unit])
        return;
    u->is_dirty[unit] = 1;
    u->dirty[u->n_dirty++] = unit;
}

ps_unit_verdict ps_units_judge(const ps_units *u, uint32_t rank, int unit, uint64_t step, int sync)
{
    if (ps_units_record(u, rank)[unit] > step)
        return PS_UNIT_REPEAT;
    /* Pushes ahead of the unit were refused before anything changed. */
    if (sync && ps_consistency_sync_push(u->clock[unit].clock, step) == PS_CLOCK_BEHIND)
        return PS_UNIT_LATE;
    return PS_UNIT_NEW;
}

void ps_units_count(ps_units *u, uint32_t rank, int unit, uint64_t step, ps_unit_part part)
{
    ps_chunk_clock *c = &u->clock[unit];

    ps_units_record(u, rank)[unit] = step + 1;
    c->used += part == PS_UNIT_GRAD;
    c->pushes += part != PS_UNIT_REFUSED;
    c->live_pushes++;
    ps__units_mark(u, unit);
}

void ps_units_applied(ps_units *u, uint32_t rank, int unit, uint64_t step)
{
    ps_units_record(u, rank)[unit] = step + 1;
    if (step + 1 > u->clock[unit].newest)
        u->clock[unit].newest = step + 1;
}

void ps_units_restored(ps_units *u, int unit, uint64_t clock, uint64_t newest)
{
    u->clock[unit].clock = clock;
    u->clock[unit].newest = newest;
}

/* Whether rank's push is counted in the step unit accumulates. */
static int ps__units_fed(const ps_units *u, const uint64_t *rec, int unit)
{
    const ps_chunk_clock *c = &u->clock[unit];

    return rec[unit] == c->clock + 1 && c->pushes > 0;
}

void ps_units_rank_joined(ps_units *u, uint32_t rank)
{
    const uint64_t *rec = ps_units_record(u, rank);

    for (int i = 0; i < u->n; i++)
        if (ps__units_fed(u, rec, i))
            u->clock[i].live_pushes++;
}

void ps_units_rank_left(ps_units *u, uint32_t rank)
{
    const uint64_t *rec = ps_units_record(u, rank);

    for (int i = 0; i < u->n; i++) {
        if (ps__units_fed(u, rec, i))
            u->clock[i].live_pushes--;
        ps__units_mark(u, i);
    }
}

int ps_units_next_complete(ps_units *u, int needed)
{
    while (u->next_dirty < u->n_dirty) {
        int i = u->dirty[u->next_dirty++];
        u->is_dirty[i] = 0;
        if (ps_consistency_step_complete(&u->clock[i], needed))
            return i;
    }
    u->n_dirty = u->next_dirty = 0;
    return -1;
}

void ps_units_advance(ps_units *u, int unit)
{
    ps_chunk_clock *c = &u->clock[unit];

    c->newest = c->clock + 1;
    c->clock++;
    c->pushes = 0;
    c->used = 0;
    c->live_pushes = 0;
}

void ps_units_clean(ps_units *u)
{
    for (int i = u->next_dirty; i < u->n_dirty; i++)
        u->is_dirty[u->dirty[i]] = 0;
    u->n_dirty = u->next_dirty = 0;
}

/* A stepless server's clock in the mode of staleness. Units without a
 * table hold no clocks at all. */
static uint64_t ps__units_stepless_clock(const ps_units *u, uint32_t staleness)
{
    return ps_consistency_stepless_clock(staleness, u->followed,
                                         u->clock ? u->clock + u->n_chunks : NULL, u->n_tables);
}

uint64_t ps_units_server_clock(const ps_units *u)
{
    if (ps_units_stepless(u))
        return ps__units_stepless_clock(u, 0);
    return ps_consistency_server_clock(u->clock, u->n_chunks);
}

uint64_t ps_units_progress_clock(const ps_units *u, uint32_t staleness)
{
    if (ps_units_stepless(u))
        return ps__units_stepless_clock(u, staleness);
    return ps_consistency_progress_clock(staleness, u->clock, u->n_chunks);
}

int ps_units_at_boundary(const ps_units *u, uint32_t staleness)
{
    uint64_t step;

    if (staleness != 0)
        return 1;
    step = ps_units_server_clock(u);
    for (int i = 0; i < u->n_chunks; i++) {
        const ps_chunk_clock *c = &u->clock[i];
        /* A static chunk (UINT64_MAX) is at every boundary. */
        if ((c->clock != UINT64_MAX && c->clock != step) || c->pushes > 0 || c->live_pushes > 0)
            return 0;
    }
    return 1;
}

int ps_units_lowest_chunk(const ps_units *u)
{
    int lowest = 0;

    for (int i = 1; i < u->n_chunks; i++)
        if (u->clock[i].clock < u->clock[lowest].clock)
            lowest = i;
    return lowest;
}
