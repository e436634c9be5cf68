/* The consistency rules (server/consistency.h) stated directly: plain clocks
 * in, decisions out; no server, no sockets. */
#include <criterion/criterion.h>
#include <stdint.h>

#include "consistency.h"

static ps_consistency_view view(uint32_t staleness, uint64_t server_clock, uint64_t min_live)
{
    ps_consistency_view v = {.staleness = staleness,
                             .started = 1,
                             .server_clock = server_clock,
                             .min_live_clock = min_live};
    return v;
}

Test(consistency, min_clock_of_nobody_is_unbounded)
{
    uint64_t c[] = {7, 3, 9};

    cr_assert_eq(ps_consistency_min_clock(c, 0), UINT64_MAX);
    cr_assert_eq(ps_consistency_min_clock(c, 3), 3);
}

Test(consistency, server_clock_is_the_slowest_chunk)
{
    ps_chunk_clock c[3] = {{.clock = 5, .newest = 5}, {.clock = 4, .newest = 4}, {.clock = 6}};

    cr_assert_eq(ps_consistency_server_clock(c, 3), 4);
    cr_assert_eq(ps_consistency_server_clock(c, 0), 0);
    cr_assert_eq(ps_consistency_progress_clock(0, c, 3), 4);
    /* Async and ssp: the newest step applied anywhere. */
    cr_assert_eq(ps_consistency_progress_clock(2, c, 3), 5);
    cr_assert_eq(ps_consistency_progress_clock(PS_STALENESS_UNBOUNDED, c, 3), 5);
}

Test(consistency, nothing_is_answered_before_the_job_starts)
{
    ps_consistency_view v = view(PS_STALENESS_UNBOUNDED, 0, UINT64_MAX);

    v.started = 0;
    cr_assert_not(ps_consistency_pull_ready(&v, 0, 0));
    v.started = 1;
    cr_assert(ps_consistency_pull_ready(&v, 0, 0));
}

Test(consistency, sync_pull_waits_for_the_step_and_for_its_own_push)
{
    ps_consistency_view v = view(0, 3, 3);

    cr_assert(ps_consistency_pull_ready(&v, 3, 3));
    cr_assert_not(ps_consistency_pull_ready(&v, 4, 3));
    /* Its push went into step 3, not yet applied: step 3's weights would
     * not have its gradient. */
    cr_assert_not(ps_consistency_pull_ready(&v, 3, 4));
    /* A worker that fell behind is answered at once (and catches up). */
    cr_assert(ps_consistency_pull_ready(&v, 1, 2));
}

Test(consistency, ssp_pull_within_staleness_of_the_slowest_live_worker)
{
    ps_consistency_view v = view(2, 0, 5);

    cr_assert(ps_consistency_pull_ready(&v, 7, 0));
    cr_assert_not(ps_consistency_pull_ready(&v, 8, 0));
    /* Nobody live to wait for. */
    v.min_live_clock = UINT64_MAX;
    cr_assert(ps_consistency_pull_ready(&v, 1000, 0));
}

Test(consistency, async_pull_never_waits)
{
    ps_consistency_view v = view(PS_STALENESS_UNBOUNDED, 0, 0);

    cr_assert(ps_consistency_pull_ready(&v, 1u << 30, 0));
}

Test(consistency, reply_clock)
{
    /* Sync: the steps applied, at least the one asked for. */
    cr_assert_eq(ps_consistency_reply_clock(0, 9, 4), 9);
    cr_assert_eq(ps_consistency_reply_clock(0, 4, 4), 4);
    /* Otherwise the worker's own step. */
    cr_assert_eq(ps_consistency_reply_clock(3, 9, 4), 4);
}

Test(consistency, quorum_is_capped_by_the_live_workers)
{
    cr_assert_eq(ps_consistency_pushes_needed(0, 4, 4), 4);
    cr_assert_eq(ps_consistency_pushes_needed(0, 4, 2), 2);
    cr_assert_eq(ps_consistency_pushes_needed(3, 4, 4), 3);
    cr_assert_eq(ps_consistency_pushes_needed(3, 4, 1), 1);
    cr_assert_eq(ps_consistency_pushes_needed(0, 4, 0), 0);
}

Test(consistency, step_completes_with_enough_live_pushes_never_empty)
{
    ps_chunk_clock c = {.clock = 2, .pushes = 1, .live_pushes = 1};

    cr_assert_not(ps_consistency_step_complete(&c, 2));
    c.live_pushes = 2;
    c.pushes = 2;
    cr_assert(ps_consistency_step_complete(&c, 2));
    /* Pushes rejected as non-finite count (live_pushes) but add nothing. */
    c.pushes = 0;
    cr_assert(ps_consistency_step_complete(&c, 2));
    /* Nothing pushed: not complete even when nobody is needed (no workers). */
    c.live_pushes = 0;
    cr_assert_not(ps_consistency_step_complete(&c, 0));
}

Test(consistency, staleness_counts_newer_steps_taken_in)
{
    cr_assert_eq(ps_consistency_staleness(0, 0), 0);
    cr_assert_eq(ps_consistency_staleness(5, 4), 0);
    cr_assert_eq(ps_consistency_staleness(5, 2), 2);
    /* A gradient from the future (ssp): not negative. */
    cr_assert_eq(ps_consistency_staleness(3, 7), 0);
}

Test(consistency, join_clock)
{
    ps_consistency_view v = view(0, 6, 4);

    cr_assert_eq(ps_consistency_join_clock(&v, 2), 6);
    v = view(2, 6, 4);
    cr_assert_eq(ps_consistency_join_clock(&v, 2), 4);
    v.min_live_clock = UINT64_MAX;
    cr_assert_eq(ps_consistency_join_clock(&v, 2), 2);
}
