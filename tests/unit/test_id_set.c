/* Tests for the ID set: every put against a plain reference over calls of
 * many sizes (repeats found with the value first given, new IDs told new),
 * the capacity given back after a large call once smaller calls have
 * followed for a while, kept while large calls recur, and the generation
 * count's wrap-around. */
#include <criterion/criterion.h>

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "id_set.h"

static uint64_t rng_state = 88172645463325252ull;

static uint64_t rng(void)
{
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return rng_state;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return (x > y) - (x < y);
}

/* One call of n IDs drawn from range values (so some repeat), checked
 * against a reference: the IDs sorted with the index of their first
 * occurrence. */
static void check_call(ps_id_set *s, size_t n, uint64_t range)
{
    uint64_t *ids = malloc((n + 1) * sizeof(*ids));
    uint64_t *pairs = malloc((n + 1) * 2 * sizeof(*pairs)); /* (id, first index) */
    int64_t *got = malloc((n + 1) * sizeof(*got));

    cr_assert(ids && pairs && got);
    for (size_t i = 0; i < n; i++)
        ids[i] = rng() % range * 0x9e3779b97f4a7c15ull; /* spread, 0 included */
    cr_assert_eq(ps_id_set_reset(s, n), 0);
    cr_assert_geq(s->cap, 2 * n);
    for (size_t i = 0; i < n; i++)
        got[i] = ps_id_set_put(s, ids[i], (uint32_t)i);
    /* The reference: a stable sort by ID gives each ID's first index. */
    for (size_t i = 0; i < n; i++) {
        pairs[2 * i] = ids[i];
        pairs[2 * i + 1] = i;
    }
    qsort(pairs, n, 2 * sizeof(*pairs), cmp_u64); /* by ID, then by index */
    for (size_t i = 0; i < n; i++) {
        size_t first = i;
        while (first > 0 && pairs[2 * (first - 1)] == pairs[2 * i])
            first--;
        size_t at = (size_t)pairs[2 * i + 1];
        if (first == i)
            cr_assert_eq(got[at], -1, "ID at %zu of %zu is new but was found", at, n);
        else
            cr_assert_eq(got[at], (int64_t)pairs[2 * first + 1],
                         "ID at %zu of %zu: %lld, its first index is %llu", at, n,
                         (long long)got[at], (unsigned long long)pairs[2 * first + 1]);
    }
    free(ids);
    free(pairs);
    free(got);
}

Test(id_set, puts_match_a_reference_over_calls_of_many_sizes)
{
    static const size_t sizes[] = {0, 1, 2, 31, 32, 33, 1000, 5000, 70000, 3, 17, 300000, 8};
    ps_id_set s = {0};

    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        check_call(&s, sizes[k], sizes[k] + 1);     /* about a third repeats */
        check_call(&s, sizes[k], 4 * sizes[k] + 1); /* few repeats */
    }
    ps_id_set_free(&s);
    cr_assert_eq(s.cap, 0);
}

/* 2^20 IDs take 2^21 slots (32 MiB); smaller calls after it give them back
 * after PS_ID_SET_SHRINK_AFTER resets, at the most those calls needed, and
 * the set stays correct across the shrink. */
Test(id_set, capacity_returns_down_after_a_large_call)
{
    ps_id_set s = {0};

    check_call(&s, (size_t)1 << 20, (size_t)1 << 21);
    cr_assert_eq(s.cap, (size_t)1 << 21);
    for (int k = 1; k < PS_ID_SET_SHRINK_AFTER; k++) {
        check_call(&s, k == 5 ? 3000 : 1000, 2000);
        cr_assert_eq(s.cap, (size_t)1 << 21, "shrunk after %d small calls", k);
    }
    check_call(&s, 1000, 2000);
    /* The most one of those calls needed: 3000 IDs, 8192 slots. */
    cr_assert_eq(s.cap, 8192, "capacity %zu after the small calls", s.cap);
    check_call(&s, 50000, 60000); /* grows again as needed */
    cr_assert_eq(s.cap, (size_t)1 << 17);
    ps_id_set_free(&s);
}

/* A large call every few calls keeps the set at its size: no reallocation
 * back and forth. Sets within PS_ID_SET_KEEP_SLOTS are never shrunk. */
Test(id_set, recurring_large_calls_and_small_sets_keep_their_capacity)
{
    ps_id_set s = {0};
    uint64_t *before;

    for (int round = 0; round < 4; round++) {
        check_call(&s, (size_t)1 << 18, (size_t)1 << 19);
        before = s.ids;
        for (int k = 0; k < PS_ID_SET_SHRINK_AFTER - 1; k++)
            check_call(&s, 100, 150);
        cr_assert_eq(s.cap, (size_t)1 << 19);
        cr_assert_eq(s.ids, before, "reallocated in round %d", round);
    }
    ps_id_set_free(&s);
    check_call(&s, PS_ID_SET_KEEP_SLOTS / 2, PS_ID_SET_KEEP_SLOTS);
    for (int k = 0; k < 4 * PS_ID_SET_SHRINK_AFTER; k++)
        check_call(&s, 10, 20);
    cr_assert_eq(s.cap, PS_ID_SET_KEEP_SLOTS);
    ps_id_set_free(&s);
}

/* At the generation count's wrap-around the set is emptied for real. */
Test(id_set, generation_wrap_around_empties_it)
{
    ps_id_set s = {0};

    cr_assert_eq(ps_id_set_reset(&s, 10), 0);
    for (uint32_t i = 0; i < 10; i++)
        cr_assert_eq(ps_id_set_put(&s, i, i), -1);
    s.cur = UINT32_MAX;
    /* Slots marked with the last generation before the wrap. */
    for (size_t k = 0; k < s.cap; k++)
        s.gen[k] = s.gen[k] ? UINT32_MAX : 0;
    cr_assert_eq(ps_id_set_reset(&s, 10), 0);
    cr_assert_eq(s.cur, 1);
    for (uint32_t i = 0; i < 10; i++)
        cr_assert_eq(ps_id_set_put(&s, i, 100 + i), -1, "ID %u survived the wrap", i);
    cr_assert_eq(ps_id_set_put(&s, 3, 0), 103);
    ps_id_set_free(&s);
}
