/* lib/core/server_reply.c: each check accepts what a real server sends and
 * refuses each lie of issue 18 with a sentence that says which. */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <string.h>

#include "ps_error.h"
#include "server_reply.h"

static const uint64_t keys[3] = {1, 2, (uint64_t)1 << 32};

static ps_frame frame_of(Shardps__Header *h, size_t payload_len)
{
    ps_frame f = {.hdr = h, .payload = NULL, .payload_len = payload_len, .nonfinite = 0};
    return f;
}

static void welcome_frame(Shardps__Header *h, Shardps__Welcome *w, const char *mode,
                          uint32_t staleness, uint64_t clock)
{
    shardps__header__init(h);
    shardps__welcome__init(w);
    h->type = SHARDPS__MSG_TYPE__WELCOME;
    h->request_id = 7;
    w->mode = (char *)mode;
    w->staleness = staleness;
    w->clock = clock;
    w->heartbeat_ms = 2500;
    h->welcome = w;
}

Test(server_reply, welcome_accepts_every_real_mode)
{
    Shardps__Header h;
    Shardps__Welcome w;
    ps_reply_welcome out;
    char why[256];
    ps_frame f = frame_of(&h, 0);

    welcome_frame(&h, &w, "sync", 0, 10);
    cr_assert_eq(ps_reply_check_welcome(&f, 7, 10, &out, why, sizeof(why)), 0, "%s", why);
    cr_assert(out.sync && out.clock == 10 && out.heartbeat_ms == 2500);
    welcome_frame(&h, &w, "async", UINT32_MAX, 0);
    cr_assert_eq(ps_reply_check_welcome(&f, 7, 10, &out, why, sizeof(why)), 0, "%s", why);
    cr_assert(!out.sync);
    welcome_frame(&h, &w, "ssp", 3, 0);
    cr_assert_eq(ps_reply_check_welcome(&f, 7, 10, &out, why, sizeof(why)), 0, "%s", why);
    welcome_frame(&h, &w, "ssp", 0, 0); /* as it_consistency runs it: sync by another name */
    cr_assert_eq(ps_reply_check_welcome(&f, 7, 10, &out, why, sizeof(why)), 0, "%s", why);
    cr_assert(out.sync);
}

Test(server_reply, welcome_refuses_lies)
{
    Shardps__Header h;
    Shardps__Welcome w;
    ps_reply_welcome out;
    char why[256];
    ps_frame f = frame_of(&h, 0);

    welcome_frame(&h, &w, "sync", 0, UINT64_MAX);
    cr_assert_eq(ps_reply_check_welcome(&f, 7, 10, &out, why, sizeof(why)), -PS_EPROTO);
    cr_assert(strstr(why, "clock 18446744073709551615"), "%s", why);
    welcome_frame(&h, &w, "bogus", 0, 0);
    cr_assert_eq(ps_reply_check_welcome(&f, 7, 10, &out, why, sizeof(why)), -PS_EPROTO);
    cr_assert(strstr(why, "mode 'bogus'"), "%s", why);
    welcome_frame(&h, &w, "sync", 5, 0); /* sync with a staleness bound */
    cr_assert_eq(ps_reply_check_welcome(&f, 7, 10, &out, why, sizeof(why)), -PS_EPROTO);
    welcome_frame(&h, &w, "ssp", UINT32_MAX, 0); /* async by another name */
    cr_assert_eq(ps_reply_check_welcome(&f, 7, 10, &out, why, sizeof(why)), -PS_EPROTO);
    welcome_frame(&h, &w, "sync", 0, 0);
    cr_assert_eq(ps_reply_check_welcome(&f, 8, 10, &out, why, sizeof(why)), -PS_EPROTO);
    w.heartbeat_ms = UINT32_MAX;
    cr_assert_eq(ps_reply_check_welcome(&f, 7, 10, &out, why, sizeof(why)), -PS_EPROTO);
    w.heartbeat_ms = 0;
    f.payload_len = 4;
    cr_assert_eq(ps_reply_check_welcome(&f, 7, 10, &out, why, sizeof(why)), -PS_EPROTO);
    h.welcome = NULL;
    f.payload_len = 0;
    cr_assert_eq(ps_reply_check_welcome(&f, 7, 10, &out, why, sizeof(why)), -PS_EPROTO);
}

static ps_reply_pull pull_expect(int sync)
{
    ps_reply_pull e = {.request_id = 9,
                       .clock = 4,
                       .sync = sync,
                       .max_clock = 10,
                       .n_keys = 3,
                       .keys = keys,
                       .bytes = 48};
    return e;
}

static void pull_reply(Shardps__Header *h, uint64_t clock)
{
    shardps__header__init(h);
    h->type = SHARDPS__MSG_TYPE__PULL_REPLY;
    h->request_id = 9;
    h->clock = clock;
    h->dtype = SHARDPS__DTYPE__DTYPE_F32;
    h->n_keys = 3;
    h->keys = (uint64_t *)keys;
    h->payload_bytes = 48;
}

Test(server_reply, pull_reply_in_sync_may_be_newer_but_not_past_the_plan)
{
    Shardps__Header h;
    ps_reply_pull e = pull_expect(1);
    char why[256];

    pull_reply(&h, 4);
    cr_assert_eq(ps_reply_check_pull_header(&h, &e, why, sizeof(why)), 0, "%s", why);
    pull_reply(&h, 10);
    cr_assert_eq(ps_reply_check_pull_header(&h, &e, why, sizeof(why)), 0, "%s", why);
    pull_reply(&h, 11);
    cr_assert_eq(ps_reply_check_pull_header(&h, &e, why, sizeof(why)), -PS_EPROTO);
    pull_reply(&h, 3);
    cr_assert_eq(ps_reply_check_pull_header(&h, &e, why, sizeof(why)), -PS_EPROTO);
    pull_reply(&h, UINT64_MAX);
    cr_assert_eq(ps_reply_check_pull_header(&h, &e, why, sizeof(why)), -PS_EPROTO);
    e = pull_expect(0);
    pull_reply(&h, 5);
    cr_assert_eq(ps_reply_check_pull_header(&h, &e, why, sizeof(why)), -PS_EPROTO);
}

/* An evaluator's snapshot: any steps up to the last one planned, whatever
 * it asked for, the newest chunk's (clock + staleness) included; a server
 * that says more lies. */
Test(server_reply, snapshot_steps_stay_within_the_plan)
{
    Shardps__Header h;
    ps_reply_pull e = pull_expect(1);
    char why[256];

    e.snapshot = 1;
    pull_reply(&h, 0);
    cr_assert_eq(ps_reply_check_pull_header(&h, &e, why, sizeof(why)), 0, "%s", why);
    pull_reply(&h, 7);
    h.staleness = 3;
    cr_assert_eq(ps_reply_check_pull_header(&h, &e, why, sizeof(why)), 0, "%s", why);
    h.staleness = 4;
    cr_assert_eq(ps_reply_check_pull_header(&h, &e, why, sizeof(why)), -PS_EPROTO);
    cr_assert(strstr(why, "past the last step 10") != NULL, "%s", why);
    pull_reply(&h, 11);
    cr_assert_eq(ps_reply_check_pull_header(&h, &e, why, sizeof(why)), -PS_EPROTO);
    pull_reply(&h, UINT64_MAX);
    h.staleness = UINT32_MAX;
    cr_assert_eq(ps_reply_check_pull_header(&h, &e, why, sizeof(why)), -PS_EPROTO);
}

Test(server_reply, pull_reply_refuses_other_dtype_keys_sizes_and_nan)
{
    Shardps__Header h;
    ps_reply_pull e = pull_expect(1);
    uint64_t other[3] = {1, 2, 3};
    char why[256];
    ps_frame f = frame_of(&h, 48);

    pull_reply(&h, 4);
    h.dtype = 99;
    cr_assert_eq(ps_reply_check_pull_header(&h, &e, why, sizeof(why)), -PS_EPROTO);
    cr_assert(strstr(why, "dtype 99"), "%s", why);
    pull_reply(&h, 4);
    h.keys = other;
    cr_assert_eq(ps_reply_check_pull_header(&h, &e, why, sizeof(why)), -PS_EPROTO);
    pull_reply(&h, 4);
    h.payload_bytes = 44;
    cr_assert_eq(ps_reply_check_pull_header(&h, &e, why, sizeof(why)), -PS_EPROTO);
    pull_reply(&h, 4);
    h.status = 1;
    cr_assert_eq(ps_reply_check_pull_header(&h, &e, why, sizeof(why)), -PS_EPROTO);
    pull_reply(&h, 4);
    h.request_id = 8;
    cr_assert_eq(ps_reply_check_pull_header(&h, &e, why, sizeof(why)), -PS_EPROTO);
    pull_reply(&h, 4);
    cr_assert_eq(ps_reply_check_pull_header(&h, NULL, why, sizeof(why)), -PS_EPROTO);
    cr_assert_eq(ps_reply_check_pull(&f, &e, 1, why, sizeof(why)), 0, "%s", why);
    cr_assert_eq(ps_reply_check_pull(&f, &e, 0, why, sizeof(why)), -PS_EPROTO);
    f.nonfinite = 1;
    cr_assert_eq(ps_reply_check_pull(&f, &e, 1, why, sizeof(why)), -PS_EPROTO);
    cr_assert(strstr(why, "not all finite"), "%s", why);
}

Test(server_reply, push_reply_bounds_dropped_and_staleness)
{
    Shardps__Header h;
    ps_reply_push e = {.request_id = 5, .clock = 2, .n_keys = 1, .max_staleness = 0};
    char why[256];
    ps_frame f = frame_of(&h, 0);

    shardps__header__init(&h);
    h.type = SHARDPS__MSG_TYPE__PUSH_REPLY;
    h.request_id = 5;
    h.clock = 2;
    cr_assert_eq(ps_reply_check_push(&f, &e, why, sizeof(why)), 0, "%s", why);
    h.status = 1;
    cr_assert_eq(ps_reply_check_push(&f, &e, why, sizeof(why)), 0, "%s", why);
    h.status = INT32_MAX;
    cr_assert_eq(ps_reply_check_push(&f, &e, why, sizeof(why)), -PS_EPROTO);
    cr_assert(strstr(why, "dropped 2147483647"), "%s", why);
    h.status = -1;
    cr_assert_eq(ps_reply_check_push(&f, &e, why, sizeof(why)), -PS_EPROTO);
    h.status = 0;
    h.staleness = 1;
    cr_assert_eq(ps_reply_check_push(&f, &e, why, sizeof(why)), -PS_EPROTO);
    e.max_staleness = 10;
    cr_assert_eq(ps_reply_check_push(&f, &e, why, sizeof(why)), 0, "%s", why);
    h.clock = 3;
    cr_assert_eq(ps_reply_check_push(&f, &e, why, sizeof(why)), -PS_EPROTO);
    h.clock = 2;
    f.payload_len = 1;
    cr_assert_eq(ps_reply_check_push(&f, &e, why, sizeof(why)), -PS_EPROTO);
    f.payload_len = 0;
    cr_assert_eq(ps_reply_check_push(&f, NULL, why, sizeof(why)), -PS_EPROTO);
}

Test(server_reply, refusal_cleans_the_reason_and_never_asks_for_a_reconnect)
{
    Shardps__Header h;
    char reason[16];
    ps_frame f = frame_of(&h, 0);

    shardps__header__init(&h);
    h.type = SHARDPS__MSG_TYPE__ERROR;
    h.status = -ECONNRESET;
    h.reason = "ok\033[2J\nlong long long reason";
    cr_assert_eq(ps_reply_refusal(&f, reason, sizeof(reason)), -PS_EPROTO);
    cr_assert_str_eq(reason, "ok?[2J?long lon");
    h.status = -PS_EMISMATCH;
    cr_assert_eq(ps_reply_refusal(&f, reason, sizeof(reason)), -PS_EMISMATCH);
    h.type = SHARDPS__MSG_TYPE__REJECT;
    h.status = -PS_ECLOSED;
    h.reason = NULL;
    cr_assert_eq(ps_reply_refusal(&f, reason, sizeof(reason)), -PS_EREJECTED);
    cr_assert_str_eq(reason, "(no reason give");
}

Test(server_reply, waiting_names_our_pull_and_a_clean_reason)
{
    Shardps__Header h;
    ps_reply_pull e = pull_expect(1);
    char reason[24], why[256];
    ps_frame f = frame_of(&h, 0);

    shardps__header__init(&h);
    h.type = SHARDPS__MSG_TYPE__WAITING;
    h.request_id = e.request_id;
    h.clock = e.clock;
    h.reason = "waiting for rank\033[2J 1 of 2 to join";
    cr_assert_eq(ps_reply_check_waiting(&f, &e, reason, sizeof(reason), why, sizeof(why)), 0, "%s",
                 why);
    cr_assert_str_eq(reason, "waiting for rank?[2J 1 ");
    /* Not our pull: another id or step, or none in flight. */
    h.request_id = e.request_id + 1;
    cr_assert_eq(ps_reply_check_waiting(&f, &e, reason, sizeof(reason), why, sizeof(why)),
                 -PS_EPROTO);
    cr_assert(strstr(why, "a pull we are not waiting for"), "%s", why);
    h.request_id = e.request_id;
    h.clock = e.clock + 1;
    cr_assert_eq(ps_reply_check_waiting(&f, &e, reason, sizeof(reason), why, sizeof(why)),
                 -PS_EPROTO);
    h.clock = e.clock;
    cr_assert_eq(ps_reply_check_waiting(&f, NULL, reason, sizeof(reason), why, sizeof(why)),
                 -PS_EPROTO);
    /* No payload, and a reason. */
    f.payload_len = 4;
    cr_assert_eq(ps_reply_check_waiting(&f, &e, reason, sizeof(reason), why, sizeof(why)),
                 -PS_EPROTO);
    f.payload_len = 0;
    h.reason = "";
    cr_assert_eq(ps_reply_check_waiting(&f, &e, reason, sizeof(reason), why, sizeof(why)),
                 -PS_EPROTO);
    cr_assert(strstr(why, "without saying why"), "%s", why);
}

/* A rows reply of type for e's request: e's id, table, count and clock. */
static void rows_reply(Shardps__Header *h, Shardps__MsgType type, const ps_reply_rows *e)
{
    shardps__header__init(h);
    h->type = type;
    h->request_id = e->request_id;
    h->clock = e->clock;
    h->row_table = e->table;
    h->row_count = e->count;
    h->dtype = SHARDPS__DTYPE__DTYPE_F32;
}

Test(server_reply, rows_replies_are_held_to_the_request)
{
    ps_reply_rows pull = {.request_id = 9,
                          .clock = 4,
                          .push = 0,
                          .sync = 1,
                          .max_clock = 6,
                          .table = 1,
                          .dim = 2,
                          .count = 3};
    ps_reply_rows push = pull;
    float rows[6] = {1, 2, 3, 4, 5, 6};
    Shardps__Header h;
    ps_frame f = frame_of(&h, sizeof(rows));
    char why[256];

    f.payload = (uint8_t *)rows;
    push.push = 1;
    rows_reply(&h, SHARDPS__MSG_TYPE__PULL_ROWS_REPLY, &pull);
    cr_assert_eq(ps_reply_check_rows(&f, &pull, why, sizeof(why)), 0, "%s", why);
    h.clock = 6; /* sync: newer, within the plan */
    cr_assert_eq(ps_reply_check_rows(&f, &pull, why, sizeof(why)), 0, "%s", why);
    h.clock = 7;
    cr_assert_eq(ps_reply_check_rows(&f, &pull, why, sizeof(why)), -PS_EPROTO);
    h.clock = 4;
    h.row_table = 0;
    cr_assert_eq(ps_reply_check_rows(&f, &pull, why, sizeof(why)), -PS_EPROTO);
    cr_assert(strstr(why, "row table 1 for row table 0"), "%s", why);
    h.row_table = 1;
    f.payload_len -= 4;
    cr_assert_eq(ps_reply_check_rows(&f, &pull, why, sizeof(why)), -PS_EPROTO);
    f.payload_len += 4;
    rows[5] = NAN;
    f.nonfinite = 1; /* as the decoder reports it */
    cr_assert_eq(ps_reply_check_rows(&f, &pull, why, sizeof(why)), -PS_EPROTO);
    cr_assert(strstr(why, "not finite (value 5)"), "%s", why);
    f.payload = NULL; /* placed: judged on the decoder's word alone */
    cr_assert_eq(ps_reply_check_rows(&f, &pull, why, sizeof(why)), -PS_EPROTO);
    f.payload = (uint8_t *)rows;
    f.nonfinite = 0;
    cr_assert_eq(ps_reply_check_rows(&f, NULL, why, sizeof(why)), -PS_EPROTO, "none in flight");

    f = frame_of(&h, 0);
    rows_reply(&h, SHARDPS__MSG_TYPE__PUSH_ROWS_REPLY, &push);
    h.status = 3;
    h.rejected = 3;
    cr_assert_eq(ps_reply_check_rows(&f, &push, why, sizeof(why)), 0, "%s", why);
    h.status = 4;
    cr_assert_eq(ps_reply_check_rows(&f, &push, why, sizeof(why)), -PS_EPROTO, "4 of 3 dropped");
    h.status = 1;
    cr_assert_eq(ps_reply_check_rows(&f, &push, why, sizeof(why)), -PS_EPROTO, "3 of 1 rejected");
    h.rejected = 0;
    h.staleness = 1;
    cr_assert_eq(ps_reply_check_rows(&f, &push, why, sizeof(why)), -PS_EPROTO, "sync staleness");
    h.staleness = 0;
    h.type = SHARDPS__MSG_TYPE__PULL_ROWS_REPLY;
    cr_assert_eq(ps_reply_check_rows(&f, &push, why, sizeof(why)), -PS_EPROTO, "a pull's answer");
}
