/* Tests for the admission sketch: exact codes; admission exactly at the
 * threshold when nothing collides; never an undercount and a small
 * overcount when much collides; saturation; the saved form round-trips bit
 * for bit and every damaged form is refused with its reason; merging. */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../test_rng.h"
#include "ps_error.h"
#include "row_admit.h"

Test(row_admit, codes)
{
    ps_row_admit *a;

    cr_assert_eq(ps_row_admit_create(&a, 0, 4, 1024, 1), -EINVAL);
    cr_assert_eq(ps_row_admit_create(&a, 65536, 4, 1024, 1), -EINVAL);
    cr_assert_eq(ps_row_admit_create(&a, 3, 0, 1024, 1), -EINVAL);
    cr_assert_eq(ps_row_admit_create(&a, 3, PS_ROW_ADMIT_MAX_DEPTH + 1, 1024, 1), -EINVAL);
    cr_assert_eq(ps_row_admit_create(&a, 3, 4, 1000, 1), -EINVAL);
    cr_assert_eq(ps_row_admit_create(&a, 3, 4, 32, 1), -EINVAL);
    cr_assert_eq(ps_row_admit_create(&a, 3, 4, PS_ROW_ADMIT_MAX_WIDTH * 2u, 1), -EINVAL);
    cr_assert_null(a);
    cr_assert_eq(ps_row_admit_create(&a, 3, 4, 1024, 1), 0);
    cr_assert_eq(ps_row_admit_threshold(a), 3);
    cr_assert_eq(ps_row_admit_bytes(a) >= 4 * 1024 * 2, 1);
    ps_row_admit_free(a);
    ps_row_admit_free(NULL);
}

Test(row_admit, admits_at_the_threshold)
{
    ps_row_admit *a;

    cr_assert_eq(ps_row_admit_create(&a, 5, 4, 1 << 16, 7), 0);
    for (uint64_t id = 0; id < 100; id++) {
        for (int k = 1; k < 5; k++) {
            cr_assert_eq(ps_row_admit_push(a, id * 1000003), 0);
            cr_assert_eq(ps_row_admit_estimate(a, id * 1000003), (uint32_t)k);
        }
        cr_assert_eq(ps_row_admit_push(a, id * 1000003), 1);
        cr_assert_eq(ps_row_admit_push(a, id * 1000003), 1);
    }
    ps_row_admit_free(a);
}

/* 20,000 IDs pushed 1-8 times into 4 x 1024 counters (about 90,000 pushes
 * on 1024 counters per row): estimates never below the truth; with the
 * conservative update the mean overcount stays below 60 pushes where the
 * plain sketch's bound e N / w is about 240. */
Test(row_admit, never_undercounts)
{
    enum { N = 20000 };
    uint8_t *truth = malloc(N);
    double over = 0.0;
    ps_row_admit *a;

    cr_assert_not_null(truth);
    cr_assert_eq(ps_row_admit_create(&a, 100, 4, 1024, 3), 0);
    rng_state = 5;
    for (int i = 0; i < N; i++)
        truth[i] = (uint8_t)(1 + rng_next() % 8);
    for (int round = 0; round < 8; round++)
        for (int i = 0; i < N; i++)
            if (truth[i] > round)
                ps_row_admit_push(a, (uint64_t)i);
    for (int i = 0; i < N; i++) {
        uint32_t e = ps_row_admit_estimate(a, (uint64_t)i);
        cr_assert_geq(e, truth[i]);
        over += e - truth[i];
    }
    cr_assert_lt(over / N, 60.0, "mean overcount %g", over / N);
    free(truth);
    ps_row_admit_free(a);
}

Test(row_admit, saturates)
{
    ps_row_admit *a;

    cr_assert_eq(ps_row_admit_create(&a, 65535, 1, 64, 3), 0);
    for (int i = 0; i < 65534; i++)
        cr_assert_eq(ps_row_admit_push(a, 42), 0);
    cr_assert_eq(ps_row_admit_push(a, 42), 1);
    cr_assert_eq(ps_row_admit_push(a, 42), 1);
    cr_assert_eq(ps_row_admit_estimate(a, 42), 65535);
    ps_row_admit_free(a);
}

static ps_row_admit *filled(uint64_t seed, uint64_t first)
{
    ps_row_admit *a;

    cr_assert_eq(ps_row_admit_create(&a, 4, 3, 256, seed), 0);
    for (uint64_t id = first; id < first + 500; id++)
        for (uint64_t k = 0; k <= id % 5; k++)
            ps_row_admit_push(a, id);
    return a;
}

Test(row_admit, save_and_load)
{
    ps_row_admit *a = filled(9, 0), *b;
    size_t size = ps_row_admit_saved_size(a);
    uint8_t *buf = malloc(size), *again = malloc(size);
    char why[200];

    cr_assert(buf && again);
    cr_assert_eq(size, 28 + 3 * 256 * 2);
    cr_assert_eq(ps_row_admit_save(a, buf, size - 1), -ENOSPC);
    cr_assert_eq(ps_row_admit_save(a, buf, size), (long)size);
    cr_assert_eq(ps_row_admit_load(&b, buf, size, why, sizeof(why)), 0);
    for (uint64_t id = 0; id < 1000; id++)
        cr_assert_eq(ps_row_admit_estimate(b, id), ps_row_admit_estimate(a, id));
    /* Pushes go on alike. */
    cr_assert_eq(ps_row_admit_push(a, 3), ps_row_admit_push(b, 3));
    cr_assert_eq(ps_row_admit_save(b, again, size), (long)size);
    cr_assert_eq(ps_row_admit_save(a, buf, size), (long)size);
    cr_assert_eq(memcmp(buf, again, size), 0);
    ps_row_admit_free(b);

    /* Damaged forms: each refused, with its reason. */
    cr_assert_eq(ps_row_admit_load(&b, buf, size - 1, why, sizeof(why)), -PS_EFORMAT);
    cr_assert(strstr(why, "expected"), "%s", why);
    cr_assert_eq(ps_row_admit_load(&b, buf, 10, why, sizeof(why)), -PS_EFORMAT);
    memcpy(again, buf, size);
    again[0] = 'X';
    cr_assert_eq(ps_row_admit_load(&b, again, size, why, sizeof(why)), -PS_EFORMAT);
    cr_assert(strstr(why, "header"), "%s", why);
    memcpy(again, buf, size);
    again[4] = 2;
    cr_assert_eq(ps_row_admit_load(&b, again, size, why, sizeof(why)), -PS_EFORMAT);
    cr_assert(strstr(why, "version"), "%s", why);
    memcpy(again, buf, size);
    again[16] = 0x55; /* width 0x155: not a power of two */
    cr_assert_eq(ps_row_admit_load(&b, again, size, why, sizeof(why)), -PS_EFORMAT);
    cr_assert(strstr(why, "out of range"), "%s", why);
    memcpy(again, buf, size);
    again[15] = 0x7f; /* depth huge */
    cr_assert_eq(ps_row_admit_load(&b, again, size, why, sizeof(why)), -PS_EFORMAT);
    cr_assert_null(b);
    free(buf);
    free(again);
    ps_row_admit_free(a);
}

/* Two servers' sketches of disjoint IDs merged: every ID's estimate is at
 * least its own count and at least what its own server's sketch said;
 * sketches of another seed do not merge. */
Test(row_admit, merge)
{
    ps_row_admit *a = filled(9, 0), *b = filled(9, 500), *c = filled(10, 0);
    ps_row_admit *a0 = filled(9, 0);

    cr_assert_eq(ps_row_admit_merge(a, c), -PS_EMISMATCH);
    cr_assert_eq(ps_row_admit_merge(a, b), 0);
    for (uint64_t id = 0; id < 1000; id++) {
        cr_assert_geq(ps_row_admit_estimate(a, id), (uint32_t)(id % 5 + 1));
        if (id < 500)
            cr_assert_geq(ps_row_admit_estimate(a, id), ps_row_admit_estimate(a0, id));
        else
            cr_assert_geq(ps_row_admit_estimate(a, id), ps_row_admit_estimate(b, id));
    }
    ps_row_admit_free(a);
    ps_row_admit_free(a0);
    ps_row_admit_free(b);
    ps_row_admit_free(c);
}
