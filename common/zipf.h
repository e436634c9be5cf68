/* Zipf-distributed ranks from a seed: the skewed IDs that recommendation
 * data is made of (a few items very popular, a long tail seen once), for the
 * tests, the benches and the data generator.
 *
 * Rank k (0-based) of n is drawn with probability proportional to
 * (k + 1)^-s. Sampling is Hörmann and Derflinger's rejection-inversion
 * ("Rejection-inversion to generate variates from monotone discrete
 * distributions", 1996): constant time and memory for any n up to 2^53 and
 * any exponent s > 0, no table; 1.00-1.02 uniform draws per rank (s from
 * 0.5 to 2 over 10 million ranks). The
 * uniforms come from SplitMix64 over the seed, so a sampler started from
 * the same (n, s, seed) gives the same ranks on every run of the same build
 * (the arithmetic goes through libm's exp, log, log1p and expm1; another
 * libm may round one of them differently and, very rarely, change a rank).
 *
 * Ranks are not IDs: rank 0 is the most popular. ps_zipf_scramble maps
 * ranks to IDs bijectively, so the popular IDs are scattered over the
 * 64-bit space as real IDs are. */
#ifndef PS_ZIPF_H
#define PS_ZIPF_H

#include <stdint.h>

/* A plain value: copy it to fork a stream, nothing to free. */
typedef struct {
    uint64_t n;
    double s;
    uint64_t state;        /* SplitMix64 counter */
    double h_x1, h_n, cut; /* the hat's bounds and the squeeze (see zipf.c) */
} ps_zipf;

/* Sets z up to draw ranks in [0, n) with exponent s from seed. Returns 0, or
 * -EINVAL when n is 0 or above 2^53, or s is not a finite number in
 * (0, 100]. */
int ps_zipf_init(ps_zipf *z, uint64_t n, double s, uint64_t seed);

/* The next rank, in [0, n). */
uint64_t ps_zipf_next(ps_zipf *z);

/* The next 64 random bits of z's stream (what ps_zipf_next draws from), for
 * a caller that needs other random choices reproducible from the same seed,
 * such as a shuffle. */
uint64_t ps_zipf_bits(ps_zipf *z);

/* An ID for rank under salt: a bijection of the 64-bit integers for each
 * salt, so distinct ranks give distinct IDs, scattered over the whole
 * range. */
uint64_t ps_zipf_scramble(uint64_t rank, uint64_t salt);

#endif
