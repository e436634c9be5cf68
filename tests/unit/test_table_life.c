/* The tensor table's life on a server (server/rules/table_life.c), rule by rule:
 * no sockets, no server; each test walks the states with events and checks
 * the action each asks for. */
#include <criterion/criterion.h>

#include <errno.h>

#include "table_life.h"

static ps_table_life life(ps_table_state state, int declarers, int pinned)
{
    return (ps_table_life){state, declarers, pinned};
}

Test(table_life, a_declaration_runs_to_its_commit)
{
    ps_table_life t = {0};

    cr_assert_eq(t.state, PS_TABLE_NONE);
    cr_assert_not(ps_table_life_holds(&t));
    cr_assert_eq(ps_table_life_step(&t, PS_TABLE_DECLARE), PS_TABLE_KEEP);
    cr_assert_eq(t.state, PS_TABLE_DECLARED);
    cr_assert(ps_table_life_holds(&t));
    cr_assert_eq(ps_table_life_step(&t, PS_TABLE_DECLARER_JOINED), PS_TABLE_KEEP);
    cr_assert_eq(ps_table_life_step(&t, PS_TABLE_DECLARER_JOINED), PS_TABLE_KEEP);
    cr_assert_eq(t.declarers, 2);
    /* A declaration alone is neither filled nor checkpointed. */
    cr_assert_not(ps_table_life_filled(&t));
    cr_assert_not(ps_table_life_may_checkpoint(&t));
    cr_assert_eq(ps_table_life_step(&t, PS_TABLE_START), PS_TABLE_FILL);
    cr_assert_eq(t.state, PS_TABLE_FILLING);
    cr_assert_not(ps_table_life_filled(&t));
    cr_assert_eq(ps_table_life_step(&t, PS_TABLE_APPLIED), -EINVAL, "applied before filled");
    cr_assert_eq(ps_table_life_step(&t, PS_TABLE_FILL_DONE), PS_TABLE_KEEP);
    cr_assert(ps_table_life_filled(&t));
    cr_assert_not(ps_table_life_may_checkpoint(&t), "nothing is checkpointed before a step");
    cr_assert_eq(ps_table_life_step(&t, PS_TABLE_APPLIED), PS_TABLE_KEEP);
    cr_assert_eq(t.state, PS_TABLE_COMMITTED);
    cr_assert(ps_table_life_may_checkpoint(&t));
    cr_assert_eq(ps_table_life_step(&t, PS_TABLE_APPLIED), PS_TABLE_KEEP);
    /* Every declarer leaves: the committed table is the job's all the same. */
    cr_assert_eq(ps_table_life_step(&t, PS_TABLE_DECLARER_LEFT), PS_TABLE_KEEP);
    cr_assert_eq(ps_table_life_step(&t, PS_TABLE_DECLARER_LEFT), PS_TABLE_KEEP);
    cr_assert_eq(t.state, PS_TABLE_COMMITTED);
    cr_assert_eq(ps_table_life_step(&t, PS_TABLE_CHECK_FAILED), -EINVAL);
    cr_assert_eq(t.state, PS_TABLE_COMMITTED);
}

/* Issue 22, cause 1: a stranger's HELLO declares, the stranger leaves: the
 * declaration goes with it, in every state before the commit. */
Test(table_life, the_last_declarer_leaving_withdraws_it_before_the_commit)
{
    static const ps_table_state before[] = {PS_TABLE_DECLARED, PS_TABLE_FILLING, PS_TABLE_FILLED};

    for (int i = 0; i < 3; i++) {
        ps_table_life t = life(before[i], 2, 0);

        cr_assert_eq(ps_table_life_step(&t, PS_TABLE_DECLARER_LEFT), PS_TABLE_KEEP);
        cr_assert_eq(t.state, before[i], "one declarer is still there");
        cr_assert_eq(ps_table_life_step(&t, PS_TABLE_DECLARER_LEFT), PS_TABLE_WITHDRAW, "%s",
                     ps_table_state_name(before[i]));
        cr_assert_eq(t.state, PS_TABLE_WITHDRAWN);
        cr_assert_not(ps_table_life_holds(&t), "a withdrawn table is compared with nothing");
        cr_assert_not(ps_table_life_filled(&t));
        cr_assert_not(ps_table_life_may_checkpoint(&t));
    }
}

Test(table_life, a_check_failing_withdraws_it_before_the_commit)
{
    static const ps_table_state before[] = {PS_TABLE_DECLARED, PS_TABLE_FILLING, PS_TABLE_FILLED};

    for (int i = 0; i < 3; i++) {
        ps_table_life t = life(before[i], 3, 0);

        cr_assert_eq(ps_table_life_step(&t, PS_TABLE_CHECK_FAILED), PS_TABLE_WITHDRAW);
        cr_assert_eq(t.state, PS_TABLE_WITHDRAWN);
    }
}

/* Nothing survives a withdrawal: late news (a fill finishing, a peer that
 * joined it leaving) changes nothing, and only the release makes room for
 * the next declaration. */
Test(table_life, a_withdrawn_table_takes_nothing_but_its_release)
{
    static const ps_table_event late[] = {
        PS_TABLE_DECLARE,         PS_TABLE_CONFIGURE,     PS_TABLE_RESTORE,
        PS_TABLE_DECLARER_JOINED, PS_TABLE_START,         PS_TABLE_FILL_DONE,
        PS_TABLE_CHECK_FAILED,    PS_TABLE_DECLARER_LEFT, PS_TABLE_APPLIED,
    };
    ps_table_life t = life(PS_TABLE_WITHDRAWN, 0, 0);

    for (size_t i = 0; i < sizeof(late) / sizeof(late[0]); i++) {
        cr_assert_eq(ps_table_life_step(&t, late[i]), PS_TABLE_KEEP);
        cr_assert_eq(t.state, PS_TABLE_WITHDRAWN, "event %d", late[i]);
        cr_assert_eq(t.declarers, 0);
    }
    cr_assert_eq(ps_table_life_step(&t, PS_TABLE_RELEASED), PS_TABLE_KEEP);
    cr_assert_eq(t.state, PS_TABLE_NONE);
    cr_assert_eq(ps_table_life_step(&t, PS_TABLE_DECLARE), PS_TABLE_KEEP);
    cr_assert_eq(t.state, PS_TABLE_DECLARED);
    cr_assert_eq(t.declarers, 0);
    cr_assert_eq(t.pinned, 0);
}

Test(table_life, a_configured_table_is_never_withdrawn_by_a_peer)
{
    ps_table_life t = {0};

    cr_assert_eq(ps_table_life_step(&t, PS_TABLE_CONFIGURE), PS_TABLE_KEEP);
    cr_assert_eq(t.state, PS_TABLE_DECLARED);
    cr_assert_eq(ps_table_life_step(&t, PS_TABLE_DECLARER_JOINED), PS_TABLE_KEEP);
    cr_assert_eq(ps_table_life_step(&t, PS_TABLE_DECLARER_LEFT), PS_TABLE_KEEP);
    cr_assert_eq(t.state, PS_TABLE_DECLARED);
    /* A checkpoint restored into it commits it. */
    {
        ps_table_life r = t;
        cr_assert_eq(ps_table_life_step(&r, PS_TABLE_RESTORE), PS_TABLE_KEEP);
        cr_assert_eq(r.state, PS_TABLE_COMMITTED);
    }
    /* It can still fail its own check (no memory to fill it). */
    cr_assert_eq(ps_table_life_step(&t, PS_TABLE_START), PS_TABLE_FILL);
    cr_assert_eq(ps_table_life_step(&t, PS_TABLE_CHECK_FAILED), PS_TABLE_WITHDRAW);
}

Test(table_life, a_restored_table_is_committed_and_filled)
{
    ps_table_life t = {0};

    cr_assert_eq(ps_table_life_step(&t, PS_TABLE_RESTORE), PS_TABLE_KEEP);
    cr_assert_eq(t.state, PS_TABLE_COMMITTED);
    cr_assert(ps_table_life_filled(&t));
    cr_assert(ps_table_life_may_checkpoint(&t));
    /* Every rank joining after a restore starts training at once. */
    cr_assert_eq(ps_table_life_step(&t, PS_TABLE_START), PS_TABLE_KEEP);
    cr_assert_eq(t.state, PS_TABLE_COMMITTED);
    cr_assert_eq(ps_table_life_step(&t, PS_TABLE_DECLARER_JOINED), PS_TABLE_KEEP);
    cr_assert_eq(ps_table_life_step(&t, PS_TABLE_DECLARER_LEFT), PS_TABLE_KEEP);
    cr_assert_eq(t.state, PS_TABLE_COMMITTED);
}

/* Issue 23 pt 2: rank 0 declaring another table outranks one other ranks
 * declared first, while it is only declared; once training started (filling
 * on), or for a configured table, rank 0 is refused like any other rank. */
Test(table_life, rank_0_outranks_a_table_only_while_it_is_declared)
{
    ps_table_life t = life(PS_TABLE_DECLARED, 2, 0);

    cr_assert_eq(ps_table_life_step(&t, PS_TABLE_OUTRANKED), PS_TABLE_WITHDRAW);
    cr_assert_eq(t.state, PS_TABLE_WITHDRAWN);
    cr_assert_not(ps_table_life_holds(&t));
    cr_assert_eq(ps_table_life_step(&t, PS_TABLE_RELEASED), PS_TABLE_KEEP);
    cr_assert_eq(ps_table_life_step(&t, PS_TABLE_DECLARE), PS_TABLE_KEEP, "rank 0's, now");
    cr_assert_eq(t.state, PS_TABLE_DECLARED);
    for (ps_table_state st = PS_TABLE_NONE; st <= PS_TABLE_COMMITTED; st++) {
        if (st == PS_TABLE_DECLARED)
            continue;
        t = life(st, 1, 0);
        cr_assert_eq(ps_table_life_step(&t, PS_TABLE_OUTRANKED), -EINVAL, "state %s",
                     ps_table_state_name(st));
        cr_assert_eq(t.state, st);
    }
    t = life(PS_TABLE_DECLARED, 0, 1);
    cr_assert_eq(ps_table_life_step(&t, PS_TABLE_OUTRANKED), -EINVAL, "a configured table");
    cr_assert_eq(t.state, PS_TABLE_DECLARED);
}

Test(table_life, impossible_events_change_nothing)
{
    struct {
        ps_table_state state;
        ps_table_event ev;
    } bad[] = {
        {PS_TABLE_DECLARED, PS_TABLE_DECLARE},  {PS_TABLE_COMMITTED, PS_TABLE_RESTORE},
        {PS_TABLE_FILLED, PS_TABLE_CONFIGURE},  {PS_TABLE_NONE, PS_TABLE_DECLARER_JOINED},
        {PS_TABLE_NONE, PS_TABLE_START},        {PS_TABLE_DECLARED, PS_TABLE_FILL_DONE},
        {PS_TABLE_FILLED, PS_TABLE_FILL_DONE},  {PS_TABLE_DECLARED, PS_TABLE_APPLIED},
        {PS_TABLE_NONE, PS_TABLE_CHECK_FAILED}, {PS_TABLE_DECLARED, PS_TABLE_RELEASED},
        {PS_TABLE_NONE, PS_TABLE_RELEASED},
    };

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        ps_table_life t = life(bad[i].state, 1, 0);

        cr_assert_eq(ps_table_life_step(&t, bad[i].ev), -EINVAL, "case %zu", i);
        cr_assert_eq(t.state, bad[i].state, "case %zu", i);
        cr_assert_eq(t.declarers, 1, "case %zu", i);
    }
    /* A leaving declarer the table never counted. */
    {
        ps_table_life t = life(PS_TABLE_DECLARED, 0, 1);
        cr_assert_eq(ps_table_life_step(&t, PS_TABLE_DECLARER_LEFT), -EINVAL);
    }
}
