/* Tests for the row index: exact codes; a long random sequence of inserts,
 * removals and finds against a plain array over a universe of IDs (which
 * covers growth from the smallest size and backward-shift removal in runs
 * that wrap around the array's end); patterned IDs; reserve. */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdlib.h>

#include "../test_rng.h"
#include "row_map.h"

Test(row_map, codes)
{
    ps_row_map *m;

    cr_assert_eq(ps_row_map_create(&m, ((size_t)1 << 31) + 1), -E2BIG);
    cr_assert_null(m);
    cr_assert_eq(ps_row_map_create(&m, 0), 0);
    cr_assert_eq(ps_row_map_find(m, 0), PS_ROW_NO_SLOT);
    cr_assert_eq(ps_row_map_insert(m, 0, 5), 0);
    cr_assert_eq(ps_row_map_insert(m, UINT64_MAX, 6), 0);
    cr_assert_eq(ps_row_map_insert(m, 0, 7), -EEXIST);
    cr_assert_eq(ps_row_map_insert(m, 1, PS_ROW_NO_SLOT), -EINVAL);
    cr_assert_eq(ps_row_map_find(m, 0), 5);
    cr_assert_eq(ps_row_map_find(m, UINT64_MAX), 6);
    cr_assert_eq(ps_row_map_remove(m, 1), -ENOENT);
    cr_assert_eq(ps_row_map_remove(m, 0), 0);
    cr_assert_eq(ps_row_map_remove(m, 0), -ENOENT);
    cr_assert_eq(ps_row_map_count(m), 1);
    cr_assert_eq(ps_row_map_reserve(m, ((size_t)1 << 31) + 1), -E2BIG);
    ps_row_map_free(m);
    ps_row_map_free(NULL);
}

/* IDs of the universe: scrambled, or patterned (only high bits set, or
 * multiples of 2^32), so both good and bad-looking keys are exercised. */
static uint64_t universe_id(int k, int pattern)
{
    switch (pattern) {
    case 0:
        return (uint64_t)k * 0x9e3779b97f4a7c15ULL + 12345;
    case 1:
        return (uint64_t)k << 44;
    default:
        return (uint64_t)k << 32;
    }
}

Test(row_map, random_operations_against_array, .timeout = 60)
{
    enum { U = 6000, OPS = 300000 };
    uint32_t *ref = malloc(U * sizeof(uint32_t));

    cr_assert_not_null(ref);
    for (int pattern = 0; pattern < 3; pattern++) {
        ps_row_map *m;
        size_t count = 0;
        rng_state = 99 + (uint64_t)pattern;
        for (int k = 0; k < U; k++)
            ref[k] = PS_ROW_NO_SLOT;
        cr_assert_eq(ps_row_map_create(&m, 0), 0);
        for (int op = 0; op < OPS; op++) {
            int k = (int)(rng_next() % U);
            uint64_t id = universe_id(k, pattern);
            /* Phases that fill up and drain, so removals meet long runs. */
            int insert_bias = (op / 50000) % 2 == 0 ? 70 : 30;
            int r = (int)(rng_next() % 100);
            if (r < insert_bias) {
                uint32_t slot = (uint32_t)(rng_next() % PS_ROW_NO_SLOT);
                int rc = ps_row_map_insert(m, id, slot);
                cr_assert_eq(rc, ref[k] == PS_ROW_NO_SLOT ? 0 : -EEXIST);
                if (rc == 0) {
                    ref[k] = slot;
                    count++;
                }
            } else {
                int rc = ps_row_map_remove(m, id);
                cr_assert_eq(rc, ref[k] == PS_ROW_NO_SLOT ? -ENOENT : 0);
                if (rc == 0) {
                    ref[k] = PS_ROW_NO_SLOT;
                    count--;
                }
            }
            if (op % 1000 == 0)
                for (int j = 0; j < U; j++)
                    cr_assert_eq(ps_row_map_find(m, universe_id(j, pattern)), ref[j],
                                 "pattern %d op %d id %d", pattern, op, j);
        }
        cr_assert_eq(ps_row_map_count(m), count);
        ps_row_map_free(m);
    }
    free(ref);
}

Test(row_map, reserve_then_insert_without_growth)
{
    ps_row_map *m;
    size_t bytes;

    cr_assert_eq(ps_row_map_create(&m, 0), 0);
    cr_assert_eq(ps_row_map_reserve(m, 10000), 0);
    bytes = ps_row_map_bytes(m);
    /* 10000 entries at most 3/4 full: 16384 entries of 16 bytes. */
    cr_assert_lt(bytes, 16384 * 16 + 1024);
    for (uint64_t id = 0; id < 10000; id++)
        cr_assert_eq(ps_row_map_insert(m, id, (uint32_t)id), 0);
    cr_assert_eq(ps_row_map_bytes(m), bytes);
    for (uint64_t id = 0; id < 10000; id++)
        cr_assert_eq(ps_row_map_find(m, id), (uint32_t)id);
    ps_row_map_free(m);
}
