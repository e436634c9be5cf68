/* Tests for the monotonic clock: it never goes back, and a deadline is the
 * given time ahead, normalised. */
#include <criterion/criterion.h>

#include "clock.h"

Test(clock, monotonic_and_deadlines_ahead)
{
    double a = ps_clock_now(), b = ps_clock_now();
    struct timespec now, d;

    cr_assert_geq(b, a);
    clock_gettime(CLOCK_MONOTONIC, &now);
    d = ps_clock_after(1.75);
    cr_assert_geq(d.tv_nsec, 0);
    cr_assert_lt(d.tv_nsec, 1000000000L);
    double ahead = (double)(d.tv_sec - now.tv_sec) + (double)(d.tv_nsec - now.tv_nsec) * 1e-9;
    cr_assert(ahead >= 1.75 && ahead < 2.75, "deadline %.3f s ahead", ahead);
}
