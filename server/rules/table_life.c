/* The tensor table's life on a server (see table_life.h): one function of
 * (state, event), pure. */
#include "table_life.h"

#include <errno.h>

/* Before the commit, a table no live peer declared (and the program did not
 * configure) is withdrawn. */
static int ps__orphaned(const ps_table_life *t)
{
    return t->declarers == 0 && !t->pinned;
}

int ps_table_life_step(ps_table_life *t, ps_table_event ev)
{
    ps_table_state s = t->state;

    if (s == PS_TABLE_WITHDRAWN) {
        if (ev != PS_TABLE_RELEASED)
            return PS_TABLE_KEEP;
        *t = (ps_table_life){PS_TABLE_NONE, 0, 0};
        return PS_TABLE_KEEP;
    }
    switch (ev) {
    case PS_TABLE_RESTORE:
        /* Into the embedding program's table, which the file must hold. */
        if (s == PS_TABLE_DECLARED && t->pinned) {
            t->state = PS_TABLE_COMMITTED;
            return PS_TABLE_KEEP;
        }
        /* fall through */
    case PS_TABLE_DECLARE:
    case PS_TABLE_CONFIGURE:
        if (s != PS_TABLE_NONE)
            return -EINVAL;
        t->state = ev == PS_TABLE_RESTORE ? PS_TABLE_COMMITTED : PS_TABLE_DECLARED;
        t->declarers = 0;
        t->pinned = ev != PS_TABLE_DECLARE;
        return PS_TABLE_KEEP;
    case PS_TABLE_DECLARER_JOINED:
        if (s == PS_TABLE_NONE)
            return -EINVAL;
        t->declarers++;
        return PS_TABLE_KEEP;
    case PS_TABLE_DECLARER_LEFT:
        if (s == PS_TABLE_NONE || t->declarers == 0)
            return -EINVAL;
        t->declarers--;
        /* Once committed the table is the job's: a worker that leaves is
         * waited for (it may rejoin), whoever declared what. */
        if (s != PS_TABLE_COMMITTED && ps__orphaned(t)) {
            t->state = PS_TABLE_WITHDRAWN;
            return PS_TABLE_WITHDRAW;
        }
        return PS_TABLE_KEEP;
    case PS_TABLE_START:
        if (s == PS_TABLE_NONE)
            return -EINVAL;
        if (s != PS_TABLE_DECLARED)
            return PS_TABLE_KEEP;
        t->state = PS_TABLE_FILLING;
        return PS_TABLE_FILL;
    case PS_TABLE_FILL_DONE:
        if (s != PS_TABLE_FILLING)
            return -EINVAL;
        t->state = PS_TABLE_FILLED;
        return PS_TABLE_KEEP;
    case PS_TABLE_APPLIED:
        if (s != PS_TABLE_FILLED && s != PS_TABLE_COMMITTED)
            return -EINVAL;
        t->state = PS_TABLE_COMMITTED;
        return PS_TABLE_KEEP;
    case PS_TABLE_CHECK_FAILED:
        if (s == PS_TABLE_NONE || s == PS_TABLE_COMMITTED)
            return -EINVAL;
        t->state = PS_TABLE_WITHDRAWN;
        return PS_TABLE_WITHDRAW;
    case PS_TABLE_OUTRANKED:
        if (!ps_table_life_may_outrank(t))
            return -EINVAL;
        t->state = PS_TABLE_WITHDRAWN;
        return PS_TABLE_WITHDRAW;
    case PS_TABLE_RELEASED:
        return -EINVAL;
    }
    return -EINVAL;
}

int ps_table_life_holds(const ps_table_life *t)
{
    return t->state != PS_TABLE_NONE && t->state != PS_TABLE_WITHDRAWN;
}

int ps_table_life_filled(const ps_table_life *t)
{
    return t->state == PS_TABLE_FILLED || t->state == PS_TABLE_COMMITTED;
}

int ps_table_life_may_outrank(const ps_table_life *t)
{
    return t->state == PS_TABLE_DECLARED && !t->pinned;
}

int ps_table_life_may_checkpoint(const ps_table_life *t)
{
    return t->state == PS_TABLE_COMMITTED;
}

const char *ps_table_state_name(ps_table_state s)
{
    static const char *const names[] = {"none",   "declared",  "filling",
                                        "filled", "committed", "withdrawn"};

    return (unsigned)s < sizeof(names) / sizeof(names[0]) ? names[s] : "?";
}
