/* The one 64-bit mixer behind the embedding tables' hashes and counter-based
 * random values: SplitMix64's output function (Steele, Lea and Flood 2014),
 * the golden-ratio increment followed by two xor-shift-multiply rounds.
 *
 * It is a bijection of the 64-bit integers with full avalanche, so a
 * counter or an ID run through it gives well-spread, independent-looking
 * bits; row_place, row_init, zipf and row_admit all build on it. Its
 * constants are part of the stored format: row placement (which server
 * holds a row) and row initial values are defined by it, so changing it
 * moves every row of every checkpoint. Header-only so the hot loops inline
 * it. */
#ifndef PS_MIX64_H
#define PS_MIX64_H

#include <stdint.h>

static inline uint64_t ps_mix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* A uniform double in [0, 1) from the top 53 bits of x. */
static inline double ps_mix64_unit(uint64_t x)
{
    return (double)(x >> 11) * 0x1.0p-53;
}

#endif
