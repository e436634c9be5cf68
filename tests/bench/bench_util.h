/* Small helpers the benchmark programs share: a monotonic clock, size lists
 * on the command line ("4K,256K,4M"), sizes printed for people, and the
 * comparison and percentile used on timing samples. Nothing here is part of
 * shardps itself; it exists so each bench states only what it measures. */
#ifndef PS_BENCH_UTIL_H
#define PS_BENCH_UTIL_H

#include <stddef.h>

/* Seconds on CLOCK_MONOTONIC. */
double ps_bench_now(void);

/* Parses "4K,256K,4M,1G" (suffixes K, M, G are powers of 1024; none is
 * bytes) into out[0..max). Returns the count, or -EINVAL for anything else
 * or more than max entries. */
int ps_bench_parse_sizes(const char *text, size_t *out, int max);

/* "4 KiB", "64 MiB", or "1000 B" into buf; returns buf. */
const char *ps_bench_size_text(size_t bytes, char *buf, size_t len);

/* Sorts v[0..n) ascending. */
void ps_bench_sort(double *v, size_t n);
/* Nearest-rank percentile (q in [0, 1]) of sorted v[0..n); NaN when n is 0. */
double ps_bench_pct(const double *v, size_t n, double q);

#endif
