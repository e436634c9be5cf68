/* Tests for the step accumulator of row pushes: sums against plain
 * additions in push order (bit for bit), IDs in first-pushed order, reset,
 * and growth over many rows. A push naming an ID twice never reaches it:
 * the wire refuses it (test_row_wire.c). */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "../test_rng.h"
#include "row_accum.h"

#define D 5

Test(row_accum, sums_in_push_order)
{
    ps_row_accum *a;
    uint64_t p1[3] = {7, 3, 9}, p2[2] = {3, 11}, p3[4] = {11, 7, 1, 3};
    float g1[3 * D], g2[2 * D], g3[4 * D], want[5][D];
    const uint64_t order[5] = {7, 3, 9, 11, 1};
    const uint64_t *ids;
    const float *sums;

    cr_assert_eq(ps_row_accum_create(&a, 0), -EINVAL);
    cr_assert_eq(ps_row_accum_create(&a, D), 0);
    rng_state = 4;
    fill_random(g1, 3 * D, 1.0);
    fill_random(g2, 2 * D, 1.0);
    fill_random(g3, 4 * D, 1.0);
    cr_assert_eq(ps_row_accum_add(a, p1, g1, 3), 0);
    cr_assert_eq(ps_row_accum_add(a, p2, g2, 2), 0);
    cr_assert_eq(ps_row_accum_add(a, p3, g3, 4), 0);
    for (int k = 0; k < D; k++) {
        want[0][k] = 0.0f + g1[0 * D + k] + g3[1 * D + k];                 /* 7 */
        want[1][k] = 0.0f + g1[1 * D + k] + g2[0 * D + k] + g3[3 * D + k]; /* 3 */
        want[2][k] = 0.0f + g1[2 * D + k];                                 /* 9 */
        want[3][k] = 0.0f + g2[1 * D + k] + g3[0 * D + k];                 /* 11 */
        want[4][k] = 0.0f + g3[2 * D + k];                                 /* 1 */
    }
    cr_assert_eq(ps_row_accum_rows(a, &ids, &sums), 5);
    cr_assert_eq(memcmp(ids, order, sizeof(order)), 0);
    cr_assert_eq(memcmp(sums, want, sizeof(want)), 0);
    ps_row_accum_reset(a);
    cr_assert_eq(ps_row_accum_rows(a, &ids, &sums), 0);
    cr_assert_eq(ps_row_accum_add(a, p2, g2, 2), 0);
    cr_assert_eq(ps_row_accum_rows(a, &ids, &sums), 2);
    cr_assert_eq(ids[0], 3);
    cr_assert_eq(memcmp(sums, g2, sizeof(g2)), 0);
    ps_row_accum_free(a);
    ps_row_accum_free(NULL);
}

/* Three workers push overlapping halves of 20,000 IDs; every sum equals
 * the plain one. */
Test(row_accum, many_rows)
{
    enum { U = 20000 };
    ps_row_accum *a;
    uint64_t *ids = malloc(U * sizeof(uint64_t));
    float *g = malloc(U * D * sizeof(float)), *ref = calloc(U * D, sizeof(float));
    const uint64_t *out;
    const float *sums;
    size_t n;

    cr_assert(ids && g && ref);
    cr_assert_eq(ps_row_accum_create(&a, D), 0);
    rng_state = 12;
    for (int w = 0; w < 3; w++) {
        size_t k = 0;
        for (uint64_t u = (uint64_t)w; u < U; u += 1 + (uint64_t)(w + 1) % 3)
            ids[k++] = u << 40;
        fill_random(g, k * D, 1.0);
        cr_assert_eq(ps_row_accum_add(a, ids, g, k), 0);
        for (size_t i = 0; i < k; i++)
            for (int d = 0; d < D; d++)
                ref[(ids[i] >> 40) * D + d] += g[i * D + d];
    }
    n = ps_row_accum_rows(a, &out, &sums);
    cr_assert_eq(n, U);
    for (size_t i = 0; i < n; i++)
        cr_assert_eq(memcmp(&sums[i * D], &ref[(out[i] >> 40) * D], D * sizeof(float)), 0);
    free(ids);
    free(g);
    free(ref);
    ps_row_accum_free(a);
}
