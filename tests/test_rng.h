/* The tests' random inputs: SplitMix64, seeded by each test through
 * rng_state, so every random case is reproducible from its seed and the same
 * on every machine. One copy for all test programs, header-only because each
 * program is a single file. */
#ifndef PS_TEST_RNG_H
#define PS_TEST_RNG_H

#include <stddef.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>

static uint64_t rng_state;

/* The next 64 random bits. */
static inline uint64_t rng_next(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Uniform in [0, 1), from the top 53 bits. */
static inline double rng_uniform(void)
{
    return (double)(rng_next() >> 11) * 0x1.0p-53;
}

/* n floats uniform in [-scale, scale). */
static inline void fill_random(float *p, size_t n, double scale)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (float)((2.0 * rng_uniform() - 1.0) * scale);
}

/* n floats uniform in [-scale, scale), malloc'd (freed by the caller). A
 * failed allocation aborts, which every test runner reports as a failure;
 * one spare float keeps malloc(0) from returning NULL. */
static inline float *rng_floats(size_t n, double scale)
{
    float *p = (float *)malloc((n + 1) * sizeof(float));
    if (!p)
        abort();
    fill_random(p, n, scale);
    return p;
}

/* |p[i]| for i < n, in a new array freed by the caller: the magnitudes a
 * reference is run on to bound the rounding of a sum of products. */
static inline float *abs_copy(const float *p, size_t n)
{
    float *a = rng_floats(n, 0.0);
    for (size_t i = 0; i < n; i++)
        a[i] = fabsf(p[i]);
    return a;
}

#endif
