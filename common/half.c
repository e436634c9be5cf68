/* Float <-> half and float <-> bfloat16 conversion (see half.h). The references work on the bit
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
#define PS__HALF_X86 1
#else
#define PS__HALF_X86 0
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

#if PS__HALF_X86
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

/* ---- bfloat16 ---------------------------------------------------------- */

/* One float to bfloat16. Adding 0x7fff, plus one when the kept part is odd,
 * carries into the kept bits exactly when the dropped 16 bits are above
 * half, or at half with an odd kept part: round to nearest even. A carry out
 * of the mantissa moves to the next exponent, which is the right next value,
 * up to Inf. Only NaN must not be rounded: its payload could carry into the
 * exponent's neighbour or round to Inf. */
static uint16_t ps__bf16_narrow(float f)
{
    uint32_t x;

    memcpy(&x, &f, sizeof(x));
    if ((x & 0x7fffffffu) > 0x7f800000u)
        return (uint16_t)((x >> 16) | 0x0040u);
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

void ps_f32_to_bf16_ref(uint16_t *dst, const float *src, size_t n)
{
    for (size_t i = 0; i < n; i++)
        dst[i] = ps__bf16_narrow(src[i]);
}

void ps_bf16_to_f32_ref(float *dst, const uint16_t *src, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t x = (uint32_t)src[i] << 16;
        memcpy(&dst[i], &x, sizeof(x));
    }
}

/* The vector copies do the reference's integer arithmetic on 8 or 16 lanes
 * (not AVX512_BF16's VCVTNEPS2BF16, which flushes subnormals to zero). A
 * tail shorter than a vector goes through the reference: the rule is the
 * same integer arithmetic, so which one converts it makes no difference. */
#if PS__HALF_X86
#define PS__AVX2   __attribute__((target("avx2")))
#define PS__AVX512 __attribute__((target("avx512f")))

static PS__AVX2 void ps__bf16_narrow_avx2(uint16_t *dst, const float *src, size_t n)
{
    const __m256i one = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7fff);
    const __m256i abs = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
    const __m256i quiet = _mm256_set1_epi32(0x0040);
    size_t i = 0;

    for (; i + 8 <= n; i += 8) {
        __m256i x = _mm256_loadu_si256((const __m256i *)(src + i));
        __m256i hi = _mm256_srli_epi32(x, 16);
        __m256i r = _mm256_add_epi32(_mm256_add_epi32(x, bias), _mm256_and_si256(hi, one));
        /* Signed compare is right: both sides are below 2^31. */
        __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(x, abs), inf);
        r = _mm256_blendv_epi8(_mm256_srli_epi32(r, 16), _mm256_or_si256(hi, quiet), nan);
        /* Every lane is below 2^16, so unsigned saturation keeps it; packing
         * works per 128-bit half, and the permute brings the two results'
         * 64-bit pieces (0 and 2) together. */
        r = _mm256_permute4x64_epi64(_mm256_packus_epi32(r, r), 0x08);
        _mm_storeu_si128((__m128i *)(dst + i), _mm256_castsi256_si128(r));
    }
    ps_f32_to_bf16_ref(dst + i, src + i, n - i);
}

static PS__AVX2 void ps__bf16_widen_avx2(float *dst, const uint16_t *src, size_t n)
{
    size_t i = 0;

    for (; i + 8 <= n; i += 8) {
        __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(src + i)));
        _mm256_storeu_si256((__m256i *)(dst + i), _mm256_slli_epi32(h, 16));
    }
    ps_bf16_to_f32_ref(dst + i, src + i, n - i);
}

static PS__AVX512 void ps__bf16_narrow_avx512(uint16_t *dst, const float *src, size_t n)
{
    const __m512i one = _mm512_set1_epi32(1), bias = _mm512_set1_epi32(0x7fff);
    const __m512i abs = _mm512_set1_epi32(0x7fffffff), inf = _mm512_set1_epi32(0x7f800000);
    const __m512i quiet = _mm512_set1_epi32(0x0040);
    size_t i = 0;

    for (; i + 16 <= n; i += 16) {
        __m512i x = _mm512_loadu_si512(src + i);
        __m512i hi = _mm512_srli_epi32(x, 16);
        __m512i r = _mm512_add_epi32(_mm512_add_epi32(x, bias), _mm512_and_si512(hi, one));
        __mmask16 nan = _mm512_cmpgt_epu32_mask(_mm512_and_si512(x, abs), inf);
        r = _mm512_mask_or_epi32(_mm512_srli_epi32(r, 16), nan, hi, quiet);
        _mm256_storeu_si256((__m256i *)(dst + i), _mm512_cvtepi32_epi16(r));
    }
    ps_f32_to_bf16_ref(dst + i, src + i, n - i);
}

static PS__AVX512 void ps__bf16_widen_avx512(float *dst, const uint16_t *src, size_t n)
{
    size_t i = 0;

    for (; i + 16 <= n; i += 16) {
        __m512i h = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(src + i)));
        _mm512_storeu_si512(dst + i, _mm512_slli_epi32(h, 16));
    }
    ps_bf16_to_f32_ref(dst + i, src + i, n - i);
}

static int ps__have_avx2(void)
{
    return ps_cpu_features_get()->avx2;
}

static int ps__have_avx512(void)
{
    return ps_cpu_features_get()->avx512f;
}
#else
static int ps__have_avx2(void)
{
    return 0;
}

static int ps__have_avx512(void)
{
    return 0;
}

/* Never called (no x86-64 vectors here), but the wrappers name them. */
#define ps__bf16_narrow_avx2   ps_f32_to_bf16_ref
#define ps__bf16_widen_avx2    ps_bf16_to_f32_ref
#define ps__bf16_narrow_avx512 ps_f32_to_bf16_ref
#define ps__bf16_widen_avx512  ps_bf16_to_f32_ref
#endif

int ps_f32_to_bf16_avx2(uint16_t *dst, const float *src, size_t n)
{
    if (!ps__have_avx2())
        return -ENOTSUP;
    ps__bf16_narrow_avx2(dst, src, n);
    return 0;
}

int ps_bf16_to_f32_avx2(float *dst, const uint16_t *src, size_t n)
{
    if (!ps__have_avx2())
        return -ENOTSUP;
    ps__bf16_widen_avx2(dst, src, n);
    return 0;
}

int ps_f32_to_bf16_avx512(uint16_t *dst, const float *src, size_t n)
{
    if (!ps__have_avx512())
        return -ENOTSUP;
    ps__bf16_narrow_avx512(dst, src, n);
    return 0;
}

int ps_bf16_to_f32_avx512(float *dst, const uint16_t *src, size_t n)
{
    if (!ps__have_avx512())
        return -ENOTSUP;
    ps__bf16_widen_avx512(dst, src, n);
    return 0;
}

void ps_f32_to_bf16(uint16_t *dst, const float *src, size_t n)
{
    if (ps_f32_to_bf16_avx512(dst, src, n) < 0 && ps_f32_to_bf16_avx2(dst, src, n) < 0)
        ps_f32_to_bf16_ref(dst, src, n);
}

void ps_bf16_to_f32(float *dst, const uint16_t *src, size_t n)
{
    if (ps_bf16_to_f32_avx512(dst, src, n) < 0 && ps_bf16_to_f32_avx2(dst, src, n) < 0)
        ps_bf16_to_f32_ref(dst, src, n);
}
