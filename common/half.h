/* IEEE 754 binary16 ("half") and bfloat16 conversion of float arrays, for
 * gradient compression on the wire (--compress fp16 or bf16): a worker narrows
 * its gradient before a push, the server widens it back and accumulates in
 * float32.
 *
 * Narrowing rounds to nearest, ties to even; values beyond the largest half
 * (65504, after rounding) become infinities of their sign, values below half
 * a subnormal step (2^-25) become zeros of their sign, NaNs stay NaN (quiet,
 * sign and the top payload bits kept). Widening is exact. These are IEEE's
 * conversions, and the ones x86's F16C instructions perform.
 *
 * Each direction has a plain C reference (`_ref`) and an F16C copy
 * (`_fast`), which the plain names pick at run time by the CPU; the two are
 * bit-identical on every input (tests/unit/test_half.c checks every half and
 * many float patterns). Arrays must not overlap; no alignment is needed.
 *
 * bfloat16 is a float32 with the low 16 mantissa bits dropped: the same
 * exponent range, 8 significant bits. Narrowing rounds to nearest, ties to
 * even, on the bit pattern: subnormals round like any other value (no flush
 * to zero), finite values that round past the largest bfloat16 become
 * infinities of their sign, and a NaN stays NaN (quieted; sign and the top
 * six payload bits kept). Widening is exact: the pattern shifted up 16 bits,
 * NaN payloads included. Each direction has a plain C reference and
 * integer-vector copies for AVX2 and AVX-512F, which the plain names pick at
 * run time (AVX-512F first); all are bit-identical on every input
 * (tests/unit/test_half.c). --compress bf16 sends it in pushes. */
#ifndef PS_HALF_H
#define PS_HALF_H

#include <stddef.h>
#include <stdint.h>

/* dst[i] = src[i] narrowed to half, i < n; the F16C copy when available. */
void ps_f32_to_f16(uint16_t *dst, const float *src, size_t n);
/* dst[i] = src[i] widened to float, i < n; the F16C copy when available. */
void ps_f16_to_f32(float *dst, const uint16_t *src, size_t n);

/* The portable references, always available. */
void ps_f32_to_f16_ref(uint16_t *dst, const float *src, size_t n);
void ps_f16_to_f32_ref(float *dst, const uint16_t *src, size_t n);

/* The F16C copies. Return 0, or -ENOTSUP without touching dst where the CPU
 * (or the build's target) has no F16C. */
int ps_f32_to_f16_fast(uint16_t *dst, const float *src, size_t n);
int ps_f16_to_f32_fast(float *dst, const uint16_t *src, size_t n);

/* dst[i] = src[i] narrowed to bfloat16, i < n; the fastest copy the CPU runs. */
void ps_f32_to_bf16(uint16_t *dst, const float *src, size_t n);
/* dst[i] = src[i] widened to float, i < n; the fastest copy the CPU runs. */
void ps_bf16_to_f32(float *dst, const uint16_t *src, size_t n);

/* The portable references, always available. */
void ps_f32_to_bf16_ref(uint16_t *dst, const float *src, size_t n);
void ps_bf16_to_f32_ref(float *dst, const uint16_t *src, size_t n);

/* The vector copies, named so that tests reach each one. Return 0, or
 * -ENOTSUP without touching dst where the CPU (or the build's target) lacks
 * the instructions. */
int ps_f32_to_bf16_avx2(uint16_t *dst, const float *src, size_t n);
int ps_bf16_to_f32_avx2(float *dst, const uint16_t *src, size_t n);
int ps_f32_to_bf16_avx512(uint16_t *dst, const float *src, size_t n);
int ps_bf16_to_f32_avx512(float *dst, const uint16_t *src, size_t n);

#endif
