/* Helpers shared by the benchmark programs (see bench_util.h). */
#include "bench_util.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

double ps_bench_now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

int ps_bench_parse_sizes(const char *text, size_t *out, int max)
{
    const char *p = text;
    int n = 0;

    while (*p) {
        char *end;
        unsigned long long v = strtoull(p, &end, 10);
        if (end == p || n == max)
            return -EINVAL;
        if (*end == 'K' || *end == 'k')
            v <<= 10, end++;
        else if (*end == 'M' || *end == 'm')
            v <<= 20, end++;
        else if (*end == 'G' || *end == 'g')
            v <<= 30, end++;
        if (*end != ',' && *end != '\0')
            return -EINVAL;
        out[n++] = (size_t)v;
        p = *end ? end + 1 : end;
    }
    return n;
}

const char *ps_bench_size_text(size_t b, char *buf, size_t len)
{
    if (b >= (1u << 20) && b % (1u << 20) == 0)
        snprintf(buf, len, "%zu MiB", b >> 20);
    else if (b >= 1024 && b % 1024 == 0)
        snprintf(buf, len, "%zu KiB", b >> 10);
    else
        snprintf(buf, len, "%zu B", b);
    return buf;
}

static int ps__cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void ps_bench_sort(double *v, size_t n)
{
    qsort(v, n, sizeof(double), ps__cmp_double);
}

double ps_bench_pct(const double *v, size_t n, double q)
{
    size_t k = (size_t)ceil(q * (double)n);

    return n == 0 ? NAN : v[k == 0 ? 0 : k - 1];
}
