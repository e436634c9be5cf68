/* Tests for the buffer pool (common/buf_pool.c): buffers come back for
 * reuse instead of being reallocated (the point: no page faults per step),
 * the idle limit is kept, and a pool closed with buffers still out lives
 * until they return. ASan reports any leak or use after free. */
#include <criterion/criterion.h>

#include <stdint.h>
#include <string.h>

#include "buf_pool.h"

Test(buf_pool, returned_buffer_is_reused)
{
    ps_buf_pool *p = NULL;
    void *a, *b;

    cr_assert_eq(ps_buf_pool_init(&p, 1 << 20), 0);
    a = ps_buf_pool_get(p, 100000);
    cr_assert_not_null(a);
    cr_assert_eq((uintptr_t)a % 64, 0, "not 64-byte aligned");
    memset(a, 1, 100000);
    ps_buf_pool_put(a);
    b = ps_buf_pool_get(p, 90000); /* smaller fits in the idle one */
    cr_assert_eq(b, a);
    cr_assert_eq(ps_buf_pool_allocations(p), 1);
    ps_buf_pool_put(b);
    ps_buf_pool_close(p);
}

Test(buf_pool, smallest_fitting_buffer_is_chosen)
{
    ps_buf_pool *p = NULL;
    void *small, *big, *got;

    cr_assert_eq(ps_buf_pool_init(&p, 1 << 20), 0);
    small = ps_buf_pool_get(p, 1000);
    big = ps_buf_pool_get(p, 200000);
    ps_buf_pool_put(big);
    ps_buf_pool_put(small);
    got = ps_buf_pool_get(p, 500);
    cr_assert_eq(got, small);
    ps_buf_pool_put(got);
    got = ps_buf_pool_get(p, 150000);
    cr_assert_eq(got, big);
    ps_buf_pool_put(got);
    got = ps_buf_pool_get(p, 300000); /* nothing fits: a new one */
    cr_assert_neq(got, big);
    cr_assert_eq(ps_buf_pool_allocations(p), 3);
    ps_buf_pool_put(got);
    ps_buf_pool_close(p);
}

Test(buf_pool, idle_bytes_stay_under_the_limit)
{
    ps_buf_pool *p = NULL;
    void *a, *b, *c;

    /* Room for one 100 kB buffer idle: of three returned, the two smallest
     * are freed and the biggest, the costly one to fault in, is kept. */
    cr_assert_eq(ps_buf_pool_init(&p, 120000), 0);
    a = ps_buf_pool_get(p, 100000);
    b = ps_buf_pool_get(p, 40000);
    c = ps_buf_pool_get(p, 50000);
    ps_buf_pool_put(a);
    ps_buf_pool_put(b);
    ps_buf_pool_put(c);
    cr_assert_eq(ps_buf_pool_get(p, 100000), a);
    cr_assert_eq(ps_buf_pool_allocations(p), 3);
    ps_buf_pool_put(a);
    a = ps_buf_pool_get(p, 1000);
    b = ps_buf_pool_get(p, 1000);
    cr_assert_eq(ps_buf_pool_allocations(p), 4, "a small one survived");
    ps_buf_pool_put(a);
    ps_buf_pool_put(b);
    ps_buf_pool_close(p);
}

Test(buf_pool, close_with_buffers_out_waits_for_them)
{
    ps_buf_pool *p = NULL;
    void *a;

    cr_assert_eq(ps_buf_pool_init(&p, 1 << 20), 0);
    a = ps_buf_pool_get(p, 4096);
    cr_assert_not_null(a);
    ps_buf_pool_close(p);
    memset(a, 2, 4096); /* still ours: ASan would flag a freed buffer */
    ps_buf_pool_put(a); /* frees it and the pool */
    ps_buf_pool_put(NULL);
}
