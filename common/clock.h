/* The one monotonic clock every program measures time with: durations,
 * deadlines and rates never jump when the wall clock is set. */
#ifndef PS_CLOCK_H
#define PS_CLOCK_H

#include <time.h>

/* Seconds on CLOCK_MONOTONIC (an arbitrary origin: subtract two readings). */
double ps_clock_now(void);

/* The CLOCK_MONOTONIC time seconds from now, normalised, for waits that
 * take an absolute deadline (pthread_cond_timedwait on a condition variable
 * set to CLOCK_MONOTONIC). seconds must be >= 0. */
struct timespec ps_clock_after(double seconds);

#endif
