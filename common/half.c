/* Float <-> half conversion (see half.h). The references work on the bit
 * patterns one value at a time, so they are exact by construction and need
 * no floating-point environment; the F16C copies convert eight values per
 * instruction. Which one runs is decided per call from the CPU's feature
 * bits (common/cpu), not by an ifunc, so the choice also works in the
 * ThreadSanitizer build, where optimizer.c has to give up its target_clones
 * (their resolver runs before TSan has started). */
#include "half.h"

#include <errno.h>
#include <string.h>

#include "cpu.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define PS__F16C 1
#else
#define PS__F16C 0
#endif

/* One float to half, rounding to nearest even. */
static uint16_t ps__narrow(float f)
{
    uint32_t x, mant, keep, rest, halfway, h;
    uint16_t sign;
    int e, shift;

    memcpy(&x, &f, sizeof(x));
    sign = (uint16_t)((x >> 16) & 0x8000u);
    mant = x & 0x7fffffu;
    /* The exponent re-biased for a half (bias 15 instead of 127). */
    e = (int)((x >> 23) & 0xffu) - 127 + 15;
    if (e == 0xff - 127 + 15) /* Inf stays Inf; a NaN is quieted, as IEEE asks */
        return sign | 0x7c00u | (mant ? 0x0200u | (uint16_t)(mant >> 13) : 0u);
    if (e >= 0x1f)
        return sign | 0x7c00u;
    /* Below 2^-25 (half the smallest subnormal half), float subnormals
     * included: the nearest half is a zero. 2^-25 itself ties to the even 0. */
    if (e < -10)
        return sign;
    if (e > 0) {
        shift = 13;
    } else {
        /* A subnormal half: the implicit leading bit becomes explicit and the
         * value is counted in steps of 2^-24. */
        mant |= 0x800000u;
        shift = 14 - e;
    }
    keep = mant >> shift;
    rest = mant & ((1u << shift) - 1u);
    halfway = 1u << (shift - 1);
    h = (e > 0 ? (uint32_t)e << 10 : 0u) + keep;
    /* A carry out of the mantissa moves to the next exponent, which is the
     * right next value: 0x3ff + 1 is the smallest normal, 0x7bff + 1 Inf. */
    if (rest > halfway || (rest == halfway && (keep & 1u)))
        h++;
    return (uint16_t)(sign | h);
}

/* One half to float; every half is exactly a float. */
static float ps__widen(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exp = (h >> 10) & 0x1fu, mant = h & 0x3ffu;
    uint32_t x;
    float f;

    if (exp == 0x1f) {
        x = sign | 0x7f800000u | (mant ? 0x400000u | mant << 13 : 0u);
    } else if (exp != 0) {
        x = sign | (exp + 127 - 15) << 23 | mant << 13;
    } else if (mant == 0) {
        x = sign;
    } else {
        /* A subnormal half, mant * 2^-24, is a normal float: shift the
         * leading one up to the implicit place, lowering the exponent. */
        uint32_t e = 127 - 14;
        while (!(mant & 0x400u)) {
            mant <<= 1;
            e--;
        }
        x = sign | e << 23 | (mant & 0x3ffu) << 13;
    }
    memcpy(&f, &x, sizeof(f));
    return f;
}

void ps_f32_to_f16_ref(uint16_t *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = ps__narrow(src[i]);
}

void ps_f16_to_f32_ref(float *dst, const uint16_t *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = ps__widen(src[i]);
}

#if PS__F16C
static int ps__have_f16c(void)
{
    return ps_cpu_features_get()->f16c;
}

#define PS__TARGET __attribute__((target("avx,f16c")))

/* Eight values each; _MM_FROUND_TO_NEAREST_INT is ties-to-even, whatever
 * MXCSR says. */
static inline PS__TARGET void ps__narrow8(uint16_t *dst, const float *src)
{
    _mm_storeu_si128((__m128i *)dst,
                     _mm256_cvtps_ph(_mm256_loadu_ps(src), _MM_FROUND_TO_NEAREST_INT));
}

static inline PS__TARGET void ps__widen8(float *dst, const uint16_t *src)
{
    _mm256_storeu_ps(dst, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)src)));
}

/* A tail shorter than eight goes through a zero-padded block, so every value
 * takes the same instruction as the bulk and nothing is read past the end. */
static PS__TARGET void ps__narrow_f16c(uint16_t *dst, const float *src, size_t n)
{
    size_t i = 0;

    for (; i + 8 <= n; i += 8)
        ps__narrow8(dst + i, src + i);
    if (i < n) {
        float in[8] = {0};
        uint16_t out[8];
        memcpy(in, src + i, (n - i) * sizeof(*in));
        ps__narrow8(out, in);
        memcpy(dst + i, out, (n - i) * sizeof(*out));
    }
}

static PS__TARGET void ps__widen_f16c(float *dst, const uint16_t *src, size_t n)
{
    size_t i = 0;

    for (; i + 8 <= n; i += 8)
        ps__widen8(dst + i, src + i);
    if (i < n) {
        uint16_t in[8] = {0};
        float out[8];
        memcpy(in, src + i, (n - i) * sizeof(*in));
        ps__widen8(out, in);
        memcpy(dst + i, out, (n - i) * sizeof(*out));
    }
}
#else
static int ps__have_f16c(void)
{
    return 0;
}

/* Never called (there is no F16C), but the _fast functions name them. */
#define ps__narrow_f16c ps_f32_to_f16_ref
#define ps__widen_f16c  ps_f16_to_f32_ref
#endif

int ps_f32_to_f16_fast(uint16_t *dst, const float *src, size_t n)
{
    if (!ps__have_f16c())
        return -ENOTSUP;
    ps__narrow_f16c(dst, src, n);
    return 0;
}

int ps_f16_to_f32_fast(float *dst, const uint16_t *src, size_t n)
{
    if (!ps__have_f16c())
        return -ENOTSUP;
    ps__widen_f16c(dst, src, n);
    return 0;
}

void ps_f32_to_f16(uint16_t *dst, const float *src, size_t n)
{
    if (ps_f32_to_f16_fast(dst, src, n) < 0)
        ps_f32_to_f16_ref(dst, src, n);
}

void ps_f16_to_f32(float *dst, const uint16_t *src, size_t n)
{
    if (ps_f16_to_f32_fast(dst, src, n) < 0)
        ps_f16_to_f32_ref(dst, src, n);
}
