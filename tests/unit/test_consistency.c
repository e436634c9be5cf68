/* The consistency rules (server/rules/consistency.h) and the frame shape rules
 * (server/rules/validate.h) stated directly: plain numbers in, decisions out; no
 * server, no sockets. */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "consistency.h"
#include "ps_error.h"
#include "validate.h"

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

/* Pushes marked unused count in the mean as zeros; a step none of whose
 * pushes carried a gradient applies nothing. */
Test(consistency, a_step_divides_by_every_push_and_applies_only_what_was_used)
{
    ps_chunk_clock c = {.clock = 3, .pushes = 2, .used = 1, .live_pushes = 2};

    cr_assert_eq(ps_consistency_step_divisor(&c), 2);
    c.used = 0;
    cr_assert_eq(ps_consistency_step_divisor(&c), 0);
    c.pushes = 0;
    cr_assert_eq(ps_consistency_step_divisor(&c), 0);
    c = (ps_chunk_clock){.clock = 3, .pushes = 3, .used = 3, .live_pushes = 4};
    cr_assert_eq(ps_consistency_step_divisor(&c), 3);
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

/* ---- the clock bounds (issue 18) ---------------------------------------- */

static ps_consistency_view async_view(uint64_t progress, uint64_t restored, uint64_t lead)
{
    ps_consistency_view v = view(PS_STALENESS_UNBOUNDED, 0, 0);

    v.progress_clock = progress;
    v.restored_clock = restored;
    v.clock_lead = lead;
    return v;
}

Test(consistency, sync_ceiling_is_one_step_past_the_steps_applied)
{
    ps_consistency_view v = view(0, 5, 5);

    cr_assert_eq(ps_consistency_clock_ceiling(&v, 100), 6);
    cr_assert_eq(ps_consistency_check_pull(&v, 5, 5, 0, 6), PS_CLOCK_OK);
    cr_assert_eq(ps_consistency_check_pull(&v, 5, 5, 0, 7), PS_CLOCK_AHEAD);
    /* Behind is fine in sync: the reply carries the steps applied. */
    cr_assert_eq(ps_consistency_check_pull(&v, 5, 5, 0, 2), PS_CLOCK_OK);
}

Test(consistency, async_ceiling_is_what_the_job_and_the_rank_earned)
{
    ps_consistency_view v = async_view(10, 0, 0);

    cr_assert_eq(ps_consistency_clock_ceiling(&v, 4), 10);
    cr_assert_eq(ps_consistency_clock_ceiling(&v, 12), 12);
    v.restored_clock = 20;
    cr_assert_eq(ps_consistency_clock_ceiling(&v, 12), 20);
    v.clock_lead = 5;
    cr_assert_eq(ps_consistency_clock_ceiling(&v, 12), 25);
    /* No overflow past the top. */
    v.restored_clock = UINT64_MAX - 1;
    cr_assert_eq(ps_consistency_clock_ceiling(&v, 0), UINT64_MAX);
}

Test(consistency, a_pull_cannot_move_a_rank_anywhere)
{
    ps_consistency_view v = async_view(3, 0, 0);

    cr_assert_eq(ps_consistency_check_pull(&v, 0, 0, 0, UINT64_MAX), PS_CLOCK_AHEAD);
    cr_assert_eq(ps_consistency_check_pull(&v, 0, 0, 0, 1000), PS_CLOCK_AHEAD);
    cr_assert_eq(ps_consistency_check_pull(&v, 0, 0, 0, 3), PS_CLOCK_OK);
    cr_assert_eq(ps_consistency_check_pull(&v, 3, 3, 0, 2), PS_CLOCK_BEHIND);
    cr_assert_eq(ps_consistency_check_pull(&v, 2, 2, 1, 3), PS_CLOCK_MID_STEP);
}

Test(consistency, pushes_wait_for_the_start_and_name_the_ranks_clock)
{
    ps_consistency_view v = async_view(3, 0, 0);

    cr_assert_eq(ps_consistency_check_push(&v, 3, 3), PS_CLOCK_OK);
    cr_assert_eq(ps_consistency_check_push(&v, 3, 4), PS_CLOCK_NOT_ITS);
    v.started = 0;
    cr_assert_eq(ps_consistency_check_push(&v, 3, 3), PS_CLOCK_NOT_STARTED);
    v = view(0, 3, 3);
    cr_assert_eq(ps_consistency_check_push(&v, 0, 9), PS_CLOCK_OK, "sync: judged per chunk");
    cr_assert_eq(ps_consistency_sync_push(3, 3), PS_CLOCK_OK);
    cr_assert_eq(ps_consistency_sync_push(3, 2), PS_CLOCK_BEHIND);
    cr_assert_eq(ps_consistency_sync_push(3, 4), PS_CLOCK_AHEAD);
    cr_assert_str_neq(ps_consistency_verdict_text(PS_CLOCK_AHEAD), "");
}

Test(consistency, resume_clock_only_from_earned_clocks)
{
    cr_assert_eq(ps_consistency_resume_clock(5, 3), 5);
    cr_assert_eq(ps_consistency_resume_clock(5, 8), 8);
}

/* Issue 34 point 9: a sync clock at the top (a row table restored at
 * 2^64 - 1) held every worker to "at most 0" when its ceiling wrapped. */
Test(consistency, a_sync_ceiling_at_the_top_saturates)
{
    ps_consistency_view v = view(0, UINT64_MAX, 3);

    cr_assert_eq(ps_consistency_clock_ceiling(&v, 0), UINT64_MAX);
    cr_assert_eq(ps_consistency_check_pull(&v, 3, 3, 0, 4), PS_CLOCK_OK);
    v.server_clock = UINT64_MAX - 1;
    cr_assert_eq(ps_consistency_clock_ceiling(&v, 0), UINT64_MAX);
}

/* Issue 34 point 13 (issue 33 point 1): a server whose chunks are all
 * buffers or frozen tensors has no step of its own. Its pulls are answered
 * at once in every mode, a worker may ask one past what it earned there
 * (its pulls earn it), and its clock is the job's as it reaches it. */
Test(consistency, a_stepless_server_holds_no_step_back)
{
    ps_consistency_view v = view(0, 0, 0);
    ps_chunk_clock tables[2] = {{.clock = 7, .newest = 7}, {.clock = 9, .newest = 9}};
    ps_chunk_clock async_tables[1] = {{.clock = 0, .newest = 12}};

    /* Without a step of its own a sync pull past clock 0 waited for good,
     * and a worker at clock 3 could ask for no more than 1. */
    cr_assert_not(ps_consistency_pull_ready(&v, 4, 4));
    cr_assert_eq(ps_consistency_check_pull(&v, 3, 3, 0, 4), PS_CLOCK_AHEAD);
    v.stepless = 1;
    cr_assert(ps_consistency_pull_ready(&v, 4, 4));
    cr_assert_eq(ps_consistency_check_pull(&v, 3, 3, 0, 4), PS_CLOCK_OK);
    cr_assert_eq(ps_consistency_check_pull(&v, 3, 3, 0, 5), PS_CLOCK_AHEAD, "asked, not earned");
    cr_assert_eq(ps_consistency_clock_ceiling(&v, UINT64_MAX), UINT64_MAX);
    v.started = 0;
    cr_assert_not(ps_consistency_pull_ready(&v, 0, 0), "still nothing before the start");
    v = view(2, 0, 0);
    v.stepless = 1;
    cr_assert(ps_consistency_pull_ready(&v, 10, 0), "ssp: nothing here to be stale");
    /* Its clock: what its live workers pulled, or its row tables' steps. */
    cr_assert_eq(ps_consistency_stepless_clock(0, 4, NULL, 0), 4);
    cr_assert_eq(ps_consistency_stepless_clock(0, 4, tables, 2), 9);
    cr_assert_eq(ps_consistency_stepless_clock(0, 11, tables, 2), 11);
    cr_assert_eq(ps_consistency_stepless_clock(PS_STALENESS_UNBOUNDED, 4, async_tables, 1), 12);
    cr_assert_eq(ps_consistency_join_clock(&(ps_consistency_view){.server_clock = 9}, 0), 9);
}

/* Issue 34 point 9: what each clock of a checkpoint may be, given the
 * file's own clock C = 10. */
Test(consistency, saved_clocks_are_held_to_the_files_clock)
{
    char why[256];
    const uint32_t sync = 0, async = PS_STALENESS_UNBOUNDED;

#define OK(st, kind, c, n)                                                                         \
    cr_assert_eq(ps_consistency_saved_clocks(st, 2, 10, kind, c, n, why, sizeof(why)), 0, "%s", why)
#define NO(st, kind, c, n)                                                                         \
    cr_assert_eq(ps_consistency_saved_clocks(st, 2, 10, kind, c, n, why, sizeof(why)),             \
                 -PS_EFORMAT, "(%llu, %llu) taken", (unsigned long long)(c),                       \
                 (unsigned long long)(n))
    /* Sync chunks: the server's clock is the lowest, and one step past it
     * at most; both clocks move together. */
    OK(sync, PS_SAVED_PARAMETER, 10, 10);
    OK(sync, PS_SAVED_PARAMETER, 11, 11);
    NO(sync, PS_SAVED_PARAMETER, 9, 9);
    NO(sync, PS_SAVED_PARAMETER, 12, 12);
    NO(sync, PS_SAVED_PARAMETER, 11, 10);
    NO(sync, PS_SAVED_PARAMETER, UINT64_MAX, UINT64_MAX);
    cr_assert(strstr(why, "chunk clocks") && strstr(why, "10"), "%s", why);
    /* Sync row tables: their own step, at most one past the file's. */
    OK(sync, PS_SAVED_ROWS, 0, 0);
    OK(sync, PS_SAVED_ROWS, 11, 11);
    NO(sync, PS_SAVED_ROWS, 12, 12);
    NO(sync, PS_SAVED_ROWS, 5, 4);
    NO(sync, PS_SAVED_ROWS, UINT64_MAX, UINT64_MAX);
    /* Async and ssp: nothing accumulated, newest within the file's clock
     * (rows: within the lead past it). */
    OK(async, PS_SAVED_PARAMETER, 0, 10);
    OK(async, PS_SAVED_PARAMETER, 0, 0);
    NO(async, PS_SAVED_PARAMETER, 0, 11);
    NO(async, PS_SAVED_PARAMETER, UINT64_MAX, 3);
    OK(2, PS_SAVED_ROWS, 0, 13);
    NO(2, PS_SAVED_ROWS, 0, 14);
    NO(async, PS_SAVED_ROWS, 0, UINT64_MAX);
    /* Buffers and frozen tensors never take a step; their clock is set
     * aside. */
    OK(sync, PS_SAVED_STATIC, UINT64_MAX, 0);
    OK(async, PS_SAVED_STATIC, 0, 0);
    NO(async, PS_SAVED_STATIC, UINT64_MAX, UINT64_MAX);
    /* The top saturates: a file of clock 2^64 - 1 wraps nothing. */
    cr_assert_eq(ps_consistency_saved_clocks(sync, UINT64_MAX, UINT64_MAX, PS_SAVED_ROWS,
                                             UINT64_MAX, UINT64_MAX, why, sizeof(why)),
                 0);
#undef OK
#undef NO
}

/* ---- frame shapes (validate.h) ------------------------------------------ */

Test(validate, worker_types)
{
    char why[128];

    cr_assert_eq(ps_validate_worker_type(SHARDPS__MSG_TYPE__PULL, why, sizeof(why)), 0);
    cr_assert_eq(ps_validate_worker_type(SHARDPS__MSG_TYPE__HEARTBEAT, why, sizeof(why)), 0);
    cr_assert_eq(ps_validate_worker_type(SHARDPS__MSG_TYPE__HELLO, why, sizeof(why)), -PS_EPROTO);
    cr_assert_eq(ps_validate_worker_type(SHARDPS__MSG_TYPE__PULL_REPLY, why, sizeof(why)),
                 -PS_EPROTO);
}

Test(validate, only_a_push_carries_a_payload_of_exactly_its_keys)
{
    char why[256];

    cr_assert_eq(ps_validate_payload(SHARDPS__MSG_TYPE__HEARTBEAT, 0, 0, 0, 0, why, sizeof(why)),
                 0);
    cr_assert_eq(ps_validate_payload(SHARDPS__MSG_TYPE__HEARTBEAT, 0, 0, 0, 1024, why, sizeof(why)),
                 -PS_EPROTO);
    cr_assert(strstr(why, "payload") != NULL);
    cr_assert_eq(ps_validate_payload(SHARDPS__MSG_TYPE__BYE, 0, 0, 0, 1, why, sizeof(why)),
                 -PS_EPROTO);
    cr_assert_eq(ps_validate_payload(SHARDPS__MSG_TYPE__PULL, 0, 0, 0, 4, why, sizeof(why)),
                 -PS_EPROTO);
    cr_assert_eq(ps_validate_payload(SHARDPS__MSG_TYPE__PUSH, SHARDPS__DTYPE__DTYPE_F32, 0, 40, 40,
                                     why, sizeof(why)),
                 0);
    cr_assert_eq(ps_validate_payload(SHARDPS__MSG_TYPE__PUSH, SHARDPS__DTYPE__DTYPE_F32, 0, 40,
                                     (uint64_t)1 << 30, why, sizeof(why)),
                 -PS_EPROTO);
    cr_assert_eq(ps_validate_payload(SHARDPS__MSG_TYPE__PUSH, SHARDPS__DTYPE__DTYPE_F16, 0, 40, 20,
                                     why, sizeof(why)),
                 0);
    cr_assert_eq(ps_validate_payload(SHARDPS__MSG_TYPE__PUSH, SHARDPS__DTYPE__DTYPE_F16, 0, 40, 40,
                                     why, sizeof(why)),
                 -PS_EPROTO);
    cr_assert_eq(ps_validate_payload(SHARDPS__MSG_TYPE__PUSH, SHARDPS__DTYPE__DTYPE_BF16, 0, 40, 20,
                                     why, sizeof(why)),
                 0);
    cr_assert_eq(ps_validate_payload(SHARDPS__MSG_TYPE__PUSH, SHARDPS__DTYPE__DTYPE_BF16, 0, 40, 40,
                                     why, sizeof(why)),
                 -PS_EPROTO);
    cr_assert(strstr(why, "bfloat16 push payload is 40 bytes") != NULL, "%s", why);
    cr_assert_eq(ps_validate_payload(SHARDPS__MSG_TYPE__PUSH, SHARDPS__DTYPE__DTYPE_UNKNOWN, 0, 40,
                                     40, why, sizeof(why)),
                 -PS_EPROTO);
    cr_assert(strstr(why, "dtype") != NULL);
    cr_assert_eq(ps_validate_payload(SHARDPS__MSG_TYPE__PUSH, SHARDPS__DTYPE__DTYPE_BF16 + 1, 0, 40,
                                     20, why, sizeof(why)),
                 -PS_EPROTO);
    /* A push marked unused (no forward used its tensor) carries neither a
     * gradient nor its dtype; other types ignore the mark. */
    cr_assert_eq(ps_validate_payload(SHARDPS__MSG_TYPE__PUSH, SHARDPS__DTYPE__DTYPE_UNKNOWN, 1, 40,
                                     0, why, sizeof(why)),
                 0);
    cr_assert_eq(ps_validate_payload(SHARDPS__MSG_TYPE__PUSH, SHARDPS__DTYPE__DTYPE_UNKNOWN, 1, 40,
                                     40, why, sizeof(why)),
                 -PS_EPROTO);
    cr_assert(strstr(why, "a push marked unused carries no gradient, but this one has a 40-byte "
                          "payload") != NULL,
              "%s", why);
    cr_assert_eq(ps_validate_payload(SHARDPS__MSG_TYPE__PUSH, SHARDPS__DTYPE__DTYPE_F32, 1, 40, 0,
                                     why, sizeof(why)),
                 -PS_EPROTO);
    cr_assert(strstr(why, "of dtype 1") != NULL, "%s", why);
    cr_assert_eq(ps_validate_payload(SHARDPS__MSG_TYPE__PULL, 0, 1, 0, 0, why, sizeof(why)), 0);
}

Test(validate, grad_norm)
{
    float g[4] = {3, 4, 0, 0};
    char why[128];

    cr_assert_eq(ps_validate_grad_norm(g, 4, 0, why, sizeof(why)), 0, "0: no limit");
    cr_assert_eq(ps_validate_grad_norm(g, 4, 5, why, sizeof(why)), 0);
    cr_assert_eq(ps_validate_grad_norm(g, 4, 4.9, why, sizeof(why)), -ERANGE);
    g[0] = 3e38f;
    g[1] = 3e38f; /* the sum of squares is taken in double: no overflow */
    cr_assert_eq(ps_validate_grad_norm(g, 4, 1e39, why, sizeof(why)), 0);
    cr_assert_eq(ps_validate_grad_norm(g, 4, 1e6, why, sizeof(why)), -ERANGE);
    g[0] = NAN;
    cr_assert_eq(ps_validate_grad_norm(g, 4, 1e6, why, sizeof(why)), -ERANGE);
}

/* ---- the evaluator (validate.h) ----------------------------------------- */

Test(validate, an_evaluator_reads_and_never_pushes)
{
    char why[128];

    cr_assert_eq(ps_validate_evaluator_type(SHARDPS__MSG_TYPE__PULL, why, sizeof(why)), 0);
    cr_assert_eq(ps_validate_evaluator_type(SHARDPS__MSG_TYPE__HEARTBEAT, why, sizeof(why)), 0);
    cr_assert_eq(ps_validate_evaluator_type(SHARDPS__MSG_TYPE__BYE, why, sizeof(why)), 0);
    cr_assert_eq(ps_validate_evaluator_type(SHARDPS__MSG_TYPE__PUSH, why, sizeof(why)), -PS_EPROTO);
    cr_assert(strstr(why, "an evaluator is read-only: it cannot push") != NULL, "%s", why);
    cr_assert_eq(ps_validate_evaluator_type(SHARDPS__MSG_TYPE__HELLO, why, sizeof(why)),
                 -PS_EPROTO);
    cr_assert(strstr(why, "from an evaluator") != NULL, "%s", why);
    cr_assert_eq(ps_validate_evaluator_type(SHARDPS__MSG_TYPE__WELCOME, why, sizeof(why)),
                 -PS_EPROTO);
}

/* Evaluators take at most half of what --max-connections leaves beside the
 * workers (at least one), so they can neither take a worker's connection
 * nor every handshake slot. */
Test(validate, evaluator_slots_leave_the_workers_theirs)
{
    char why[256];

    /* The default for 2 workers: 2 x 2 + 16 = 20; 18 beside the workers, 9 for evaluators. */
    cr_assert_eq(ps_validate_evaluator_slot(20, 2, 0, why, sizeof(why)), 0);
    cr_assert_eq(ps_validate_evaluator_slot(20, 2, 8, why, sizeof(why)), 0);
    cr_assert_eq(ps_validate_evaluator_slot(20, 2, 9, why, sizeof(why)), -EAGAIN);
    cr_assert(strstr(why, "all 9 evaluator slots of this server are taken") != NULL, "%s", why);
    /* Nothing beside the workers, or less than 2: still one. */
    cr_assert_eq(ps_validate_evaluator_slot(2, 2, 0, why, sizeof(why)), 0);
    cr_assert_eq(ps_validate_evaluator_slot(2, 2, 1, why, sizeof(why)), -EAGAIN);
    cr_assert_eq(ps_validate_evaluator_slot(3, 2, 0, why, sizeof(why)), 0);
    cr_assert_eq(ps_validate_evaluator_slot(3, 2, 1, why, sizeof(why)), -EAGAIN);
}
