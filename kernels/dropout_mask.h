/* The dropout mask as a pure function of (seed, step, element), shared by the
 * CPU (layers.c) and the GPU (layers_cuda.cu) so both draw the same mask bit
 * for bit: integer arithmetic only, compiled for host and device alike.
 *
 * It is SplitMix64 (a stream of 64-bit values from a counter, each passed
 * through a strong finaliser) started at a key mixed from seed and step, read
 * at position i. Keys of neighbouring steps are themselves finalised, so the
 * streams of step t and t + 1 are not shifted copies of each other. */
#ifndef PS_DROPOUT_MASK_H
#define PS_DROPOUT_MASK_H

#include <stdint.h>

#ifdef __CUDACC__
#define PS_HOST_DEVICE __host__ __device__
#else
#define PS_HOST_DEVICE
#endif

#define PS_DROPOUT_GOLDEN 0x9e3779b97f4a7c15ULL
/* The mask compares 24 random bits with a threshold: 2^24 keeps everything. */
#define PS_DROPOUT_BITS 24

static inline PS_HOST_DEVICE uint64_t ps_dropout_mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* The key of one layer's mask at one step; computed once per call. */
static inline PS_HOST_DEVICE uint64_t ps_dropout_key(uint64_t seed, uint64_t step)
{
    return ps_dropout_mix(seed ^ ps_dropout_mix(step + PS_DROPOUT_GOLDEN));
}

/* Non-zero when element i is kept. */
static inline PS_HOST_DEVICE int ps_dropout_keep(uint64_t key, uint64_t i, uint32_t threshold)
{
    uint64_t h = ps_dropout_mix(key + (i + 1) * PS_DROPOUT_GOLDEN);
    return (uint32_t)(h >> (64 - PS_DROPOUT_BITS)) < threshold;
}

#endif
