/* Tests for the float <-> half conversions behind --compress fp16, and the
 * float <-> bfloat16 ones (same layout: references by hand and by
 * definition, then every vector copy against them bit for bit). The plain
 * C references are checked against values worked out by hand (every kind of
 * edge: zeros, subnormals, ties, overflow, Inf, NaN), against the definition
 * of rounding to nearest even on random floats, and by a round trip through
 * every half. The F16C copies are then checked bit for bit against the
 * references: widening over all 65536 halves, narrowing over every float
 * exponent with the mantissas where rounding turns, plus millions of random
 * bit patterns, at lengths that leave every possible tail. */
#include <criterion/criterion.h>

#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../test_rng.h"
#include "half.h"

#define N_HALVES  65536
#define N_RANDOM  (1u << 22)
#define MAX_CHUNK 37 /* convert in pieces of 1..37 values, so tails of 0..7 all occur */

static float from_bits(uint32_t x)
{
    float f;
    memcpy(&f, &x, sizeof(f));
    return f;
}

static uint32_t to_bits(float f)
{
    uint32_t x;
    memcpy(&x, &f, sizeof(x));
    return x;
}

static uint16_t narrow_ref(float f)
{
    uint16_t h;
    ps_f32_to_f16_ref(&h, &f, 1);
    return h;
}

static float widen_ref(uint16_t h)
{
    float f;
    ps_f16_to_f32_ref(&f, &h, 1);
    return f;
}

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);
    cr_assert_not_null(p);
    return p;
}

/* ---- the references against hand-worked values ------------------------ */

/* Which way a case holds: exact pairs both ways, rounding cases only when
 * narrowing, and NaNs that widening quiets only when widening. */
enum { NARROW = 1, WIDEN = 2, BOTH = 3 };

static const struct {
    uint32_t f32;
    uint16_t f16;
    int way;
    const char *what;
} cases[] = {
    {0x00000000u, 0x0000u, BOTH, "+0"},
    {0x80000000u, 0x8000u, BOTH, "-0"},
    {0x3f800000u, 0x3c00u, BOTH, "1"},
    {0xc0000000u, 0xc000u, BOTH, "-2"},
    {0x3eaaaaabu, 0x3555u, NARROW, "1/3 rounds down"},
    {0x3eaaa000u, 0x3555u, BOTH, "0.333251953125, the half nearest 1/3"},
    {0x3f801000u, 0x3c00u, NARROW, "1 + 2^-11: a tie, to the even 1"},
    {0x3f803000u, 0x3c02u, NARROW, "1 + 3*2^-11: a tie, to the even 1 + 2^-9"},
    {0x3f801001u, 0x3c01u, NARROW, "just above a tie rounds up"},
    {0x3f800fffu, 0x3c00u, NARROW, "just below a tie rounds down"},
    {0x47000000u, 0x7800u, BOTH, "2^15"},
    {0x477fe000u, 0x7bffu, BOTH, "65504, the largest half"},
    {0x477fefffu, 0x7bffu, NARROW, "just below 65520 rounds to 65504"},
    {0x477ff000u, 0x7c00u, NARROW, "65520: a tie, to the even Inf"},
    {0x4e6e6b28u, 0x7c00u, NARROW, "1e9 overflows"},
    {0xce6e6b28u, 0xfc00u, NARROW, "-1e9 overflows"},
    {0x7f7fffffu, 0x7c00u, NARROW, "FLT_MAX overflows"},
    {0x7f800000u, 0x7c00u, BOTH, "+Inf"},
    {0xff800000u, 0xfc00u, BOTH, "-Inf"},
    {0x7fc00000u, 0x7e00u, BOTH, "quiet NaN"},
    {0xffc00000u, 0xfe00u, BOTH, "negative quiet NaN"},
    {0x7f800001u, 0x7e00u, NARROW, "signalling NaN, low payload: quieted"},
    {0x7fa00000u, 0x7f00u, NARROW, "signalling NaN, high payload kept and quieted"},
    {0x7fffffffu, 0x7fffu, NARROW, "NaN with every payload bit: the top ten kept"},
    {0x7fffe000u, 0x7fffu, BOTH, "half NaN with every payload bit"},
    {0x7fe00000u, 0x7d00u, WIDEN, "signalling half NaN: quieted, payload kept"},
    {0xffc02000u, 0xfc01u, WIDEN, "negative signalling half NaN, lowest payload"},
    {0x38800000u, 0x0400u, BOTH, "2^-14, the smallest normal half"},
    {0x38000000u, 0x0200u, BOTH, "2^-15, a subnormal half"},
    {0x387fc000u, 0x03ffu, BOTH, "1023 * 2^-24, the largest subnormal half"},
    {0x387fe000u, 0x0400u, NARROW, "1023.5 * 2^-24: a tie, to the even smallest normal"},
    {0x33800000u, 0x0001u, BOTH, "2^-24, the smallest subnormal half"},
    {0xb3800000u, 0x8001u, BOTH, "-2^-24"},
    {0x33000000u, 0x0000u, NARROW, "2^-25: a tie, to the even 0"},
    {0x33000001u, 0x0001u, NARROW, "just above 2^-25 rounds up"},
    {0xb3000001u, 0x8001u, NARROW, "just below -2^-25 rounds down"},
    {0x33c00000u, 0x0002u, NARROW, "1.5 * 2^-24: a tie, to the even 2 * 2^-24"},
    {0x33a00000u, 0x0001u, NARROW, "1.25 * 2^-24 rounds down"},
    {0x32ffffffu, 0x0000u, NARROW, "just below 2^-25 is 0"},
    {0x00000001u, 0x0000u, NARROW, "the smallest float subnormal is 0"},
    {0x80000001u, 0x8000u, NARROW, "the smallest negative float subnormal is -0"},
    {0x007fffffu, 0x0000u, NARROW, "the largest float subnormal is 0"},
};
#define N_CASES (sizeof(cases) / sizeof(cases[0]))

Test(half, references_convert_hand_worked_values)
{
    for (size_t i = 0; i < N_CASES; i++) {
        uint16_t h = narrow_ref(from_bits(cases[i].f32));
        uint32_t f = to_bits(widen_ref(cases[i].f16));
        if (cases[i].way & NARROW)
            cr_expect_eq(h, cases[i].f16, "%s: 0x%08x -> 0x%04x, want 0x%04x", cases[i].what,
                         cases[i].f32, h, cases[i].f16);
        if (cases[i].way & WIDEN)
            cr_expect_eq(f, cases[i].f32, "%s: 0x%04x -> 0x%08x, want 0x%08x", cases[i].what,
                         cases[i].f16, f, cases[i].f32);
    }
}

/* Widening is exact and narrowing the nearest, so every half comes back as
 * itself; a NaN comes back quieted. */
Test(half, reference_round_trips_every_half)
{
    for (uint32_t h = 0; h < N_HALVES; h++) {
        int nan = (h & 0x7c00u) == 0x7c00u && (h & 0x3ffu) != 0;
        uint16_t want = (uint16_t)(nan ? h | 0x200u : h);
        uint16_t got = narrow_ref(widen_ref((uint16_t)h));
        cr_assert_eq(got, want, "0x%04x came back as 0x%04x", h, got);
        cr_assert_eq(isnan(widen_ref((uint16_t)h)) != 0, nan, "0x%04x", h);
    }
}

/* Distance from f to the half with bits h, in double (exact here). */
static double dist(float f, uint32_t h)
{
    return fabs((double)f - (double)widen_ref((uint16_t)h));
}

/* The definition of round to nearest even, checked on random floats spread
 * evenly over the exponents a half can hold: no neighbouring half is nearer,
 * and on a tie the mantissa is even. */
Test(half, reference_rounds_to_the_nearest_even)
{
    rng_state = 11;
    for (int i = 0; i < 200000; i++) {
        uint64_t r = rng_next();
        /* Exponents 2^-26 .. 2^15 and any mantissa: subnormal halves,
         * normal ones and the ties between them all occur. */
        uint32_t exp = 127 - 26 + (uint32_t)(r % 42), sign = (uint32_t)(r >> 8) & 1u;
        float f = from_bits(sign << 31 | exp << 23 | ((uint32_t)(r >> 32) & 0x7fffffu));
        uint16_t h = narrow_ref(f);
        uint32_t mag = h & 0x7fffu;
        double d = dist(f, h);

        if (fabsf(f) >= 65520.0f)
            continue;
        cr_assert_lt(mag, 0x7c00u, "%a narrowed to Inf", (double)f);
        cr_assert_eq(h >> 15, sign, "%a changed sign", (double)f);
        if (mag > 0)
            cr_assert_leq(d, dist(f, (h & 0x8000u) | (mag - 1)), "%a -> 0x%04x: below is nearer",
                          (double)f, h);
        if (mag + 1 < 0x7c00u) {
            double up = dist(f, (h & 0x8000u) | (mag + 1));
            cr_assert_leq(d, up, "%a -> 0x%04x: above is nearer", (double)f, h);
            if (d == up)
                cr_assert_eq(mag & 1u, 0u, "%a -> 0x%04x: a tie to odd", (double)f, h);
        }
    }
}

/* ---- the F16C copies against the references --------------------------- */

/* Converts src in pieces of 1..MAX_CHUNK values with the fast copy and
 * compares each result with the reference, bit for bit. */
static void compare_narrow(const float *src, size_t n)
{
    uint16_t fast[MAX_CHUNK], ref[MAX_CHUNK];
    size_t len = 1;

    for (size_t i = 0; i < n; i += len, len = len % MAX_CHUNK + 1) {
        size_t k = n - i < len ? n - i : len;
        cr_assert_eq(ps_f32_to_f16_fast(fast, src + i, k), 0);
        ps_f32_to_f16_ref(ref, src + i, k);
        for (size_t j = 0; j < k; j++)
            cr_assert_eq(fast[j], ref[j], "0x%08x: F16C 0x%04x, reference 0x%04x",
                         to_bits(src[i + j]), fast[j], ref[j]);
    }
}

static void skip_without_f16c(void)
{
    uint16_t h;
    float f = 1.0f;

    if (ps_f32_to_f16_fast(&h, &f, 1) == -ENOTSUP)
        cr_skip_test("no F16C on this CPU or build: the references are used everywhere");
}

Test(half, fast_widening_matches_the_reference_on_every_half)
{
    uint16_t *in = xmalloc(N_HALVES * sizeof(*in));
    float *fast = xmalloc(N_HALVES * sizeof(*fast)), *ref = xmalloc(N_HALVES * sizeof(*ref));

    skip_without_f16c();
    for (uint32_t h = 0; h < N_HALVES; h++)
        in[h] = (uint16_t)h;
    /* All at once, then again in uneven pieces so every tail length runs. */
    cr_assert_eq(ps_f16_to_f32_fast(fast, in, N_HALVES), 0);
    ps_f16_to_f32_ref(ref, in, N_HALVES);
    for (uint32_t h = 0; h < N_HALVES; h++)
        cr_assert_eq(to_bits(fast[h]), to_bits(ref[h]), "0x%04x: F16C 0x%08x, reference 0x%08x", h,
                     to_bits(fast[h]), to_bits(ref[h]));
    memset(fast, 0, N_HALVES * sizeof(*fast));
    for (size_t i = 0, len = 1; i < N_HALVES; i += len, len = len % MAX_CHUNK + 1)
        cr_assert_eq(ps_f16_to_f32_fast(fast + i, in + i, N_HALVES - i < len ? N_HALVES - i : len),
                     0);
    cr_assert(memcmp(fast, ref, N_HALVES * sizeof(*fast)) == 0, "piecewise widening differs");
    free(in);
    free(fast);
    free(ref);
}

/* Every exponent, both signs, with the mantissas where narrowing decides:
 * the edges, and just below, at and above the tie for every shift a
 * subnormal half can need (13 to 24 bits dropped). */
Test(half, fast_narrowing_matches_the_reference_on_edge_cases)
{
    enum { PER_EXP = 2 + 12 * 6 + 3 };
    size_t n = 0, cap = 2 * 256 * PER_EXP + N_CASES;
    float *src = xmalloc(cap * sizeof(*src));

    skip_without_f16c();
    for (uint32_t sign = 0; sign < 2; sign++)
        for (uint32_t exp = 0; exp < 256; exp++) {
            uint32_t base = sign << 31 | exp << 23;
            src[n++] = from_bits(base);
            src[n++] = from_bits(base | 0x7fffffu);
            for (int shift = 13; shift <= 24; shift++) {
                /* At shift 24 the tie is the implicit bit itself: mantissa 0. */
                uint32_t tie = shift < 24 ? 1u << (shift - 1) : 0u;
                uint32_t odd = shift < 24 ? 1u << shift : 1u;
                src[n++] = from_bits(base | tie);
                src[n++] = from_bits(base | ((tie - 1u) & 0x7fffffu));
                src[n++] = from_bits(base | ((tie + 1u) & 0x7fffffu));
                src[n++] = from_bits(base | ((tie | odd) & 0x7fffffu));
                src[n++] = from_bits(base | (((tie | odd) - 1u) & 0x7fffffu));
                src[n++] = from_bits(base | (((tie | odd) + 1u) & 0x7fffffu));
            }
            src[n++] = from_bits(base | 0x400000u);
            src[n++] = from_bits(base | 0x000001u);
            src[n++] = from_bits(base | 0x7fe000u);
        }
    for (size_t i = 0; i < N_CASES; i++)
        src[n++] = from_bits(cases[i].f32);
    cr_assert_eq(n, cap);
    compare_narrow(src, n);
    free(src);
}

Test(half, fast_narrowing_matches_the_reference_on_random_patterns)
{
    float *src = xmalloc(N_RANDOM * sizeof(*src));

    skip_without_f16c();
    rng_state = 5;
    for (size_t i = 0; i < N_RANDOM; i += 2) {
        uint64_t r = rng_next();
        /* Half of them anywhere, half with an exponent a half can hold
         * (2^-26 .. 2^16), where nearly all the rounding happens. */
        src[i] = from_bits((uint32_t)r);
        src[i + 1] = from_bits(((uint32_t)(r >> 32) & 0x807fffffu) |
                               (127u - 26u + (uint32_t)(r >> 55) % 43u) << 23);
    }
    compare_narrow(src, N_RANDOM);
    free(src);
}

/* The plain names choose a copy; whichever it is, the results are the
 * reference's. */
Test(half, dispatching_names_give_the_reference_results)
{
    float in[19], back[19], ref_back[19];
    uint16_t h[19], ref_h[19];

    for (int i = 0; i < 19; i++)
        in[i] = (float)(i - 9) * 1.1f + (i == 3 ? FLT_MAX : 0.0f);
    ps_f32_to_f16(h, in, 19);
    ps_f32_to_f16_ref(ref_h, in, 19);
    cr_assert(memcmp(h, ref_h, sizeof(h)) == 0);
    ps_f16_to_f32(back, h, 19);
    ps_f16_to_f32_ref(ref_back, h, 19);
    cr_assert(memcmp(back, ref_back, sizeof(back)) == 0);
    cr_assert(isinf(back[3]));
    cr_assert_float_eq(back[10], 1.1f, 1e-3f);
}

/* ---- bfloat16 ---------------------------------------------------------- */

static uint16_t bf16_narrow_ref(float f)
{
    uint16_t h;
    ps_f32_to_bf16_ref(&h, &f, 1);
    return h;
}

static float bf16_widen_ref(uint16_t h)
{
    float f;
    ps_bf16_to_f32_ref(&f, &h, 1);
    return f;
}

static const struct {
    uint32_t f32;
    uint16_t bf16;
    const char *what;
} bf16_cases[] = {
    {0x00000000u, 0x0000u, "+0"},
    {0x80000000u, 0x8000u, "-0"},
    {0x3f800000u, 0x3f80u, "1"},
    {0xc0490fdbu, 0xc049u, "-pi rounds towards zero (low bits below half)"},
    {0x3eaaaaabu, 0x3eabu, "1/3 rounds up"},
    {0x3f808000u, 0x3f80u, "1 + 2^-8: a tie, to the even 1"},
    {0x3f818000u, 0x3f82u, "1 + 3*2^-8: a tie, to the even 1 + 2^-6"},
    {0x3f808001u, 0x3f81u, "just above a tie rounds up"},
    {0x3f807fffu, 0x3f80u, "just below a tie rounds down"},
    {0x3fff8000u, 0x4000u, "a tie that carries into the exponent"},
    {0x7f7f0000u, 0x7f7fu, "the largest bfloat16"},
    {0x7f7f7fffu, 0x7f7fu, "just below the tie above it stays"},
    {0x7f7f8000u, 0x7f80u, "the tie above the largest: to the even Inf"},
    {0x7f7fffffu, 0x7f80u, "FLT_MAX rounds to Inf"},
    {0xff7fffffu, 0xff80u, "-FLT_MAX rounds to -Inf"},
    {0x7f800000u, 0x7f80u, "+Inf"},
    {0xff800000u, 0xff80u, "-Inf"},
    {0x7fc00000u, 0x7fc0u, "quiet NaN"},
    {0xffc00000u, 0xffc0u, "negative quiet NaN"},
    {0x7f800001u, 0x7fc0u, "signalling NaN, low payload only: quieted, not Inf"},
    {0x7fa00000u, 0x7fe0u, "signalling NaN, high payload kept and quieted"},
    {0x7fffffffu, 0x7fffu, "NaN with every payload bit: not rounded"},
    {0xff80ffffu, 0xffc0u, "negative NaN, low payload only"},
    {0x00800000u, 0x0080u, "FLT_MIN, the smallest normal"},
    {0x00400000u, 0x0040u, "2^-127, a subnormal"},
    {0x00000001u, 0x0000u, "the smallest subnormal rounds to 0"},
    {0x80000001u, 0x8000u, "its negative to -0"},
    {0x00008000u, 0x0000u, "2^-134: a tie, to the even 0"},
    {0x00018000u, 0x0002u, "3 * 2^-134: a tie, to the even 2^-132"},
    {0x00008001u, 0x0001u, "just above the first tie rounds up to a subnormal"},
    {0x007fffffu, 0x0080u, "the largest subnormal rounds up to FLT_MIN"},
    {0x807f8000u, 0x8080u, "a negative subnormal tie, carrying to -FLT_MIN"},
};
#define N_BF16_CASES (sizeof(bf16_cases) / sizeof(bf16_cases[0]))

Test(bf16, reference_converts_hand_worked_values)
{
    for (size_t i = 0; i < N_BF16_CASES; i++) {
        uint16_t h = bf16_narrow_ref(from_bits(bf16_cases[i].f32));
        cr_expect_eq(h, bf16_cases[i].bf16, "%s: 0x%08x -> 0x%04x, want 0x%04x", bf16_cases[i].what,
                     bf16_cases[i].f32, h, bf16_cases[i].bf16);
    }
}

/* Widening is the pattern shifted up, NaNs and all; narrowing it back gives
 * every bfloat16 itself, a NaN quieted. */
Test(bf16, reference_widens_exactly_and_round_trips_every_value)
{
    for (uint32_t h = 0; h < N_HALVES; h++) {
        int nan = (h & 0x7f80u) == 0x7f80u && (h & 0x7fu) != 0;
        float f = bf16_widen_ref((uint16_t)h);
        uint16_t back = bf16_narrow_ref(f);
        cr_assert_eq(to_bits(f), h << 16, "0x%04x widened to 0x%08x", h, to_bits(f));
        cr_assert_eq(back, (uint16_t)(nan ? h | 0x40u : h), "0x%04x came back as 0x%04x", h, back);
    }
}

static double bf16_dist(float f, uint32_t h)
{
    return fabs((double)f - (double)bf16_widen_ref((uint16_t)h));
}

/* Round to nearest even by its definition, on random finite floats of every
 * exponent, subnormals included: no neighbour is nearer, a tie goes to the
 * even mantissa, and only values past the last tie become Inf. */
Test(bf16, reference_rounds_to_the_nearest_even)
{
    rng_state = 12;
    for (int i = 0; i < 400000; i++) {
        uint64_t r = rng_next();
        uint32_t x = (uint32_t)r;
        float f;
        uint16_t h;
        uint32_t mag;
        double d;

        /* A quarter exact ties, to make sure they are met. */
        if ((r >> 32) % 4 == 0)
            x = (x & 0xffff0000u) | 0x8000u;
        if ((x & 0x7f800000u) == 0x7f800000u)
            continue;
        f = from_bits(x);
        h = bf16_narrow_ref(f);
        mag = h & 0x7fffu;
        d = bf16_dist(f, h);
        cr_assert_eq(h >> 15, x >> 31, "0x%08x changed sign", x);
        if (mag == 0x7f80u) {
            cr_assert_geq(fabs((double)f), 0x1.ffp127, "0x%08x narrowed to Inf", x);
            continue;
        }
        if (mag > 0)
            cr_assert_leq(d, bf16_dist(f, (h & 0x8000u) | (mag - 1)),
                          "0x%08x -> 0x%04x: below is nearer", x, h);
        if (mag + 1 < 0x7f80u) {
            double up = bf16_dist(f, (h & 0x8000u) | (mag + 1));
            cr_assert_leq(d, up, "0x%08x -> 0x%04x: above is nearer", x, h);
            if (d == up)
                cr_assert_eq(mag & 1u, 0u, "0x%08x -> 0x%04x: a tie to odd", x, h);
        }
    }
}

/* The vector copies, each against the reference where the CPU has it. */
typedef int (*bf16_narrow_fn)(uint16_t *, const float *, size_t);
typedef int (*bf16_widen_fn)(float *, const uint16_t *, size_t);

static const struct {
    const char *name;
    bf16_narrow_fn narrow;
    bf16_widen_fn widen;
} bf16_copies[] = {
    {"AVX2", ps_f32_to_bf16_avx2, ps_bf16_to_f32_avx2},
    {"AVX-512", ps_f32_to_bf16_avx512, ps_bf16_to_f32_avx512},
};
#define N_BF16_COPIES (sizeof(bf16_copies) / sizeof(bf16_copies[0]))

/* Converts src in pieces of 1..MAX_CHUNK values (every tail of 8 and 16
 * lanes) with each copy the CPU has, bit for bit against the reference.
 * Returns how many copies ran. */
static int bf16_compare_narrow(const float *src, size_t n)
{
    uint16_t fast[MAX_CHUNK], ref[MAX_CHUNK];
    int ran = 0;

    for (size_t c = 0; c < N_BF16_COPIES; c++) {
        float one = 1.0f;
        uint16_t h;
        size_t len = 1;

        if (bf16_copies[c].narrow(&h, &one, 1) == -ENOTSUP)
            continue;
        ran++;
        for (size_t i = 0; i < n; i += len, len = len % MAX_CHUNK + 1) {
            size_t k = n - i < len ? n - i : len;
            cr_assert_eq(bf16_copies[c].narrow(fast, src + i, k), 0);
            ps_f32_to_bf16_ref(ref, src + i, k);
            for (size_t j = 0; j < k; j++)
                cr_assert_eq(fast[j], ref[j], "0x%08x: %s 0x%04x, reference 0x%04x",
                             to_bits(src[i + j]), bf16_copies[c].name, fast[j], ref[j]);
        }
    }
    return ran;
}

static void skip_if_none_ran(int ran)
{
    if (ran == 0)
        cr_skip_test("neither AVX2 nor AVX-512F on this CPU or build: the reference is used");
}

Test(bf16, vector_widening_matches_the_reference_on_every_value)
{
    uint16_t *in = xmalloc(N_HALVES * sizeof(*in));
    float *fast = xmalloc(N_HALVES * sizeof(*fast)), *ref = xmalloc(N_HALVES * sizeof(*ref));
    int ran = 0;

    for (uint32_t h = 0; h < N_HALVES; h++)
        in[h] = (uint16_t)h;
    ps_bf16_to_f32_ref(ref, in, N_HALVES);
    for (size_t c = 0; c < N_BF16_COPIES; c++) {
        if (bf16_copies[c].widen(fast, in, N_HALVES) == -ENOTSUP)
            continue;
        ran++;
        cr_assert(memcmp(fast, ref, N_HALVES * sizeof(*fast)) == 0, "%s widening differs",
                  bf16_copies[c].name);
        memset(fast, 0, N_HALVES * sizeof(*fast));
        for (size_t i = 0, len = 1; i < N_HALVES; i += len, len = len % MAX_CHUNK + 1)
            cr_assert_eq(
                bf16_copies[c].widen(fast + i, in + i, N_HALVES - i < len ? N_HALVES - i : len), 0);
        cr_assert(memcmp(fast, ref, N_HALVES * sizeof(*fast)) == 0, "%s piecewise widening differs",
                  bf16_copies[c].name);
    }
    free(in);
    free(fast);
    free(ref);
    skip_if_none_ran(ran);
}

/* Every exponent and sign, with the low 16 bits at and around the tie and
 * the edges, both parities of the kept part, and the hand-worked cases. */
Test(bf16, vector_narrowing_matches_the_reference_on_edge_cases)
{
    static const uint32_t low[] = {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu};
    static const uint32_t kept[] = {0x00u, 0x01u, 0x40u, 0x7eu, 0x7fu};
    enum { PER_EXP = sizeof(low) / sizeof(low[0]) * (sizeof(kept) / sizeof(kept[0])) };
    size_t n = 0, cap = 2 * 256 * PER_EXP + N_BF16_CASES;
    float *src = xmalloc(cap * sizeof(*src));

    for (uint32_t sign = 0; sign < 2; sign++)
        for (uint32_t exp = 0; exp < 256; exp++)
            for (size_t k = 0; k < sizeof(kept) / sizeof(kept[0]); k++)
                for (size_t l = 0; l < sizeof(low) / sizeof(low[0]); l++)
                    src[n++] = from_bits(sign << 31 | exp << 23 | kept[k] << 16 | low[l]);
    for (size_t i = 0; i < N_BF16_CASES; i++)
        src[n++] = from_bits(bf16_cases[i].f32);
    cr_assert_eq(n, cap);
    skip_if_none_ran(bf16_compare_narrow(src, n));
    free(src);
}

Test(bf16, vector_narrowing_matches_the_reference_on_random_patterns)
{
    float *src = xmalloc(N_RANDOM * sizeof(*src));

    rng_state = 6;
    for (size_t i = 0; i < N_RANDOM; i += 2) {
        uint64_t r = rng_next();
        /* Half of them anywhere; half exact ties, with random kept bits. */
        src[i] = from_bits((uint32_t)r);
        src[i + 1] = from_bits(((uint32_t)(r >> 32) & 0xffff0000u) | 0x8000u);
    }
    skip_if_none_ran(bf16_compare_narrow(src, N_RANDOM));
    free(src);
}

Test(bf16, dispatching_names_give_the_reference_results)
{
    float in[37], back[37], ref_back[37];
    uint16_t h[37], ref_h[37];

    for (int i = 0; i < 37; i++)
        in[i] = (float)(i - 18) * 1.1f + (i == 3 ? FLT_MAX : 0.0f);
    in[5] = from_bits(0x7f800001u);
    ps_f32_to_bf16(h, in, 37);
    ps_f32_to_bf16_ref(ref_h, in, 37);
    cr_assert(memcmp(h, ref_h, sizeof(h)) == 0);
    ps_bf16_to_f32(back, h, 37);
    ps_bf16_to_f32_ref(ref_back, h, 37);
    cr_assert(memcmp(back, ref_back, sizeof(back)) == 0);
    cr_assert(isinf(back[3]));
    cr_assert(isnan(back[5]));
    cr_assert_float_eq(back[19], 1.1f, 1e-2f);
}
