/* The job's clocks and membership as the consistency rules see them: the
 * steps this server has applied, its progress, and the view (who is live,
 * at which clock) that consistency.c's pure rules take. Below the
 * dispatcher and the handlers (kv_internal.h): it reads the server's state
 * and calls neither. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

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

/* Appends "rank 1" or "ranks 1, 3" (at most 16 named, then how many more),
 * for the ranks marked in want, to out at *at. Returns how many there are. */
static int ps__rank_list(const uint8_t *want, int world, char *out, size_t len, size_t *at)
{
    int n = 0, named = 0;

    for (int r = 0; r < world; r++)
        n += want[r] != 0;
    for (int r = 0; r < world && *at < len; r++) {
        if (!want[r])
            continue;
        if (named == 16) {
            *at += (size_t)snprintf(out + *at, len - *at, " and %d more", n - named);
            break;
        }
        *at += (size_t)snprintf(out + *at, len - *at, "%s%d",
                                named == 0 ? (n == 1 ? "rank " : "ranks ") : ", ", r);
        named++;
    }
    return n;
}

static int ps__no_reason(char *why, size_t len)
{
    if (len > 0)
        why[0] = '\0';
    return 0;
}

/* table: a row table's pull (its own step and pushes), or -1: the chunks'. */
static int ps__reason(const ps_kv_server *s, int table, uint64_t clock, uint64_t fed, char *why,
                      size_t len)
{
    uint8_t *want = s->wait_ranks;
    char tail[64];
    size_t at;
    int n, lowest = 0;
    uint64_t applied = table < 0 ? ps__server_clock(s) : s->rows[table].clock.clock;

    memset(want, 0, (size_t)s->cfg.world);
    if (s->started && !ps_table_life_filled(&s->life) && s->values_left > 0) {
        snprintf(why, len, "waiting for rank 0's initial values of %d chunks", s->values_left);
        return 0;
    }
    if (!s->started) {
        for (int r = 0; r < s->cfg.world; r++)
            want[r] = !s->has_joined[r];
        at = (size_t)snprintf(why, len, "waiting for ");
        snprintf(tail, sizeof(tail), " of %d to join", s->cfg.world);
    } else if (s->cfg.staleness == 0) {
        /* The chunk furthest behind holds the pull: the live ranks that
         * have not pushed its step are the ones it waits for. */
        if (clock <= applied && fed <= applied)
            return ps__no_reason(why, len);
        for (int r = 0; table >= 0 && r < s->cfg.world; r++)
            want[r] = s->workers[r] && s->row_pushed[(size_t)r * s->n_rows + table] <= applied;
        for (int i = 0; table < 0 && i < s->n_local; i++)
            if (s->sync[i].clock < s->sync[lowest].clock)
                lowest = i;
        for (int r = 0; table < 0 && r < s->cfg.world && s->n_local > 0; r++)
            want[r] = s->workers[r] && s->workers[r]->pushed[lowest] <= applied;
        at = table < 0
                 ? 0
                 : (size_t)snprintf(why, len, "row table %s: ", s->table.row_tables[table].name);
        at += (size_t)snprintf(why + at, len > at ? len - at : 0,
                               "step %" PRIu64 " is waiting for ", applied + 1);
        snprintf(tail, sizeof(tail), " of %d to push it", s->cfg.world);
    } else if (s->cfg.staleness != PS_STALENESS_UNBOUNDED) {
        /* ssp: the live ranks more than the bound behind this pull. */
        for (int r = 0; r < s->cfg.world; r++)
            want[r] = s->workers[r] && s->workers[r]->clock + s->cfg.staleness < clock;
        at = (size_t)snprintf(why, len, "step %" PRIu64 " is waiting for ", clock + 1);
        snprintf(tail, sizeof(tail), " of %d to come within --staleness %" PRIu32, s->cfg.world,
                 s->cfg.staleness);
    } else {
        return ps__no_reason(why, len);
    }
    n = ps__rank_list(want, s->cfg.world, why, len, &at);
    if (n == 0)
        return ps__no_reason(why, len);
    if (at < len)
        snprintf(why + at, len - at, "%s", tail);
    return n;
}

int ps__wait_reason(const ps_kv_server *s, uint64_t clock, uint64_t fed, char *why, size_t len)
{
    return ps__reason(s, -1, clock, fed, why, len);
}

int ps__row_wait_reason(const ps_kv_server *s, uint32_t table, uint64_t clock, uint64_t fed,
                        char *why, size_t len)
{
    return ps__reason(s, (int)table, clock, fed, why, len);
}
