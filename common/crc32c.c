/* CRC32C of frame payloads, which can be gigabytes, so the hardware paths are
 * what matter. With AVX-512 and VPCLMULQDQ, buffers of 256 bytes and more are
 * folded 256 bytes at a time by carry-less multiplication (the method of
 * Intel's "Fast CRC Computation for Generic Polynomials Using PCLMULQDQ"),
 * four times the bytes per cycle of the crc32 instruction. With SSE4.2 alone
 * it runs three independent crc32 instruction streams over adjacent blocks
 * and merges them with precomputed "shift by N zero bytes" tables (after Mark
 * Adler's crc32c.c), because one stream is bound by the instruction's 3-cycle
 * latency rather than its 1-per-cycle throughput. Everything else uses a
 * slice-by-8 table version. Tables, folding constants and the CPU check are
 * set up once, thread-safely, on first use. */
#include "crc32c.h"

#include "cpu.h"

#include <pthread.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define PS__CRC_HW 1
#else
#define PS__CRC_HW 0
#endif

/* The reflected Castagnoli polynomial. */
#define PS__POLY 0x82f63b78u

/* Sizes of the blocks the three hardware streams work on: LONG for the bulk,
 * SHORT to mop up what is left before going to a single stream. */
#define PS__LONG  8192
#define PS__SHORT 256

static pthread_once_t ps__crc32c_once = PTHREAD_ONCE_INIT;
static uint32_t ps__crc32c_table[8][256];
#if PS__CRC_HW
static int ps__have_hw, ps__have_fold;
static uint32_t ps__shift_long[4][256];
static uint32_t ps__shift_short[4][256];
/* Folding constants, {multiplier of a 128-bit lane's low half, of its high
 * half}, for moving a lane forward by 2048, 1536, 1024, 512, 384, 256 and 128
 * bits. */
enum { PS__K2048, PS__K1536, PS__K1024, PS__K512, PS__K384, PS__K256, PS__K128, PS__NK };
static uint64_t ps__fold_k[PS__NK][2];
#endif

static void ps__sw_tables(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ PS__POLY : c >> 1;
        ps__crc32c_table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++)
        for (int k = 1; k < 8; k++)
            ps__crc32c_table[k][n] = (ps__crc32c_table[k - 1][n] >> 8) ^
                                     ps__crc32c_table[0][ps__crc32c_table[k - 1][n] & 0xff];
}

#if PS__CRC_HW
/* A CRC register is shifted through zero bytes by a linear map over GF(2);
 * mat holds that map as 32 columns, one per input bit. */
static uint32_t ps__gf2_times(const uint32_t *mat, uint32_t vec)
{
    uint32_t sum = 0;
    for (; vec; vec >>= 1, mat++)
        if (vec & 1)
            sum ^= *mat;
    return sum;
}

static void ps__gf2_square(uint32_t *square, const uint32_t *mat)
{
    for (int n = 0; n < 32; n++)
        square[n] = ps__gf2_times(mat, mat[n]);
}

/* Builds byte-wise lookup tables for the map "append len zero bytes" (len a
 * power of two), so merging two stream results costs four table reads. */
static void ps__shift_tables(uint32_t tables[4][256], size_t len)
{
    uint32_t op[32], tmp[32];

    /* Start from the map for one zero bit, then square it: 3 squarings give
     * one byte, and each further squaring doubles the length. */
    op[0] = PS__POLY;
    for (int n = 1; n < 32; n++)
        op[n] = 1u << (n - 1);
    for (size_t bits = 1; bits < 8 * len; bits <<= 1) {
        ps__gf2_square(tmp, op);
        memcpy(op, tmp, sizeof(op));
    }
    for (uint32_t n = 0; n < 256; n++)
        for (int k = 0; k < 4; k++)
            tables[k][n] = ps__gf2_times(op, n << (8 * k));
}

static uint32_t ps__shift(uint32_t tables[4][256], uint32_t crc)
{
    return tables[0][crc & 0xff] ^ tables[1][(crc >> 8) & 0xff] ^ tables[2][(crc >> 16) & 0xff] ^
           tables[3][crc >> 24];
}
#endif

#if PS__CRC_HW
/* x^e mod P for the Castagnoli polynomial in its normal (unreflected) form,
 * bit-reflected and shifted left by one: the form a carry-less multiply of
 * reflected operands needs (its 127-bit product lands one bit low). */
static uint64_t ps__fold_constant(unsigned e)
{
    uint64_t r = 1, out = 0;

    for (unsigned i = 0; i < e; i++) {
        r <<= 1;
        if (r & (1ull << 32))
            r ^= 0x11edc6f41ull;
    }
    for (int b = 0; b < 32; b++)
        out |= ((r >> b) & 1) << (31 - b);
    return out << 1;
}

#endif

static void ps__init(void)
{
    ps__sw_tables();
#if PS__CRC_HW
    static const unsigned dist[PS__NK] = {2048, 1536, 1024, 512, 384, 256, 128};

    ps__have_hw = ps_cpu_features_get()->sse42;
    ps__shift_tables(ps__shift_long, PS__LONG);
    ps__shift_tables(ps__shift_short, PS__SHORT);
    for (int i = 0; i < PS__NK; i++) {
        ps__fold_k[i][0] = ps__fold_constant(dist[i] + 32);
        ps__fold_k[i][1] = ps__fold_constant(dist[i] - 32);
    }
    ps__have_fold = ps__have_hw && ps_cpu_features_get()->avx512_vpclmulqdq;
#endif
}

uint32_t ps_crc32c_sw(uint32_t crc, const void *data, size_t len)
{
    const unsigned char *p = data;

    pthread_once(&ps__crc32c_once, ps__init);
    crc = ~crc;
    for (; len >= 8; p += 8, len -= 8) {
        /* Assembled byte by byte so the result does not depend on host
         * endianness; compilers turn this into one load on little-endian. */
        uint32_t lo = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                             (uint32_t)p[3] << 24);
        crc = ps__crc32c_table[7][lo & 0xff] ^ ps__crc32c_table[6][(lo >> 8) & 0xff] ^
              ps__crc32c_table[5][(lo >> 16) & 0xff] ^ ps__crc32c_table[4][lo >> 24] ^
              ps__crc32c_table[3][p[4]] ^ ps__crc32c_table[2][p[5]] ^ ps__crc32c_table[1][p[6]] ^
              ps__crc32c_table[0][p[7]];
    }
    for (; len; p++, len--)
        crc = (crc >> 8) ^ ps__crc32c_table[0][(crc ^ *p) & 0xff];
    return ~crc;
}

#if PS__CRC_HW
static inline __attribute__((target("sse4.2"))) uint64_t ps__hw_u64(uint64_t crc,
                                                                    const unsigned char *p)
{
    uint64_t v;
    memcpy(&v, p, 8);
    return _mm_crc32_u64(crc, v);
}

/* Runs three streams over consecutive blocks of block bytes each, for as
 * many triples as fit, and returns the merged register. */
static inline __attribute__((target("sse4.2"))) uint64_t ps__hw_triples(uint64_t crc0,
                                                                        const unsigned char **pp,
                                                                        size_t *lenp, size_t block,
                                                                        uint32_t shift[4][256])
{
    const unsigned char *p = *pp;
    size_t len = *lenp;

    while (len >= 3 * block) {
        uint64_t crc1 = 0, crc2 = 0;
        const unsigned char *end = p + block;
        do {
            crc0 = ps__hw_u64(crc0, p);
            crc1 = ps__hw_u64(crc1, p + block);
            crc2 = ps__hw_u64(crc2, p + 2 * block);
            p += 8;
        } while (p < end);
        /* CRC registers are linear: the register over (A, B) equals A's
         * register shifted through |B| zero bytes, xor B's register from 0. */
        crc0 = ps__shift(shift, (uint32_t)crc0) ^ crc1;
        crc0 = ps__shift(shift, (uint32_t)crc0) ^ crc2;
        p += 2 * block;
        len -= 3 * block;
    }
    *pp = p;
    *lenp = len;
    return crc0;
}

static __attribute__((target("sse4.2"))) uint32_t ps__crc32c_hw(uint32_t crc, const void *data,
                                                                size_t len)
{
    const unsigned char *p = data;
    uint64_t crc0 = ~crc;

    /* Aligned 8-byte loads never straddle a cache line. */
    for (; len && ((uintptr_t)p & 7); p++, len--)
        crc0 = _mm_crc32_u8((uint32_t)crc0, *p);
    crc0 = ps__hw_triples(crc0, &p, &len, PS__LONG, ps__shift_long);
    crc0 = ps__hw_triples(crc0, &p, &len, PS__SHORT, ps__shift_short);
    for (; len >= 8; p += 8, len -= 8)
        crc0 = ps__hw_u64(crc0, p);
    for (; len; p++, len--)
        crc0 = _mm_crc32_u8((uint32_t)crc0, *p);
    return ~(uint32_t)crc0;
}

#define PS__FOLD_TARGET __attribute__((target("avx512f,vpclmulqdq,pclmul,sse4.2")))

/* Moves every 128-bit lane of x forward by the distance k stands for (its
 * low half times k[0] xor its high half times k[1]) and adds y: one
 * three-way xor. */
static inline PS__FOLD_TARGET __m512i ps__fold(__m512i x, __m512i k, __m512i y)
{
    return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(x, k, 0x00),
                                     _mm512_clmulepi64_epi128(x, k, 0x11), y, 0x96);
}

static inline PS__FOLD_TARGET __m512i ps__fold_k512(int i)
{
    return _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)ps__fold_k[i]));
}

static inline PS__FOLD_TARGET __m128i ps__fold_lane(__m128i x, int i)
{
    __m128i k = _mm_loadu_si128((const __m128i *)ps__fold_k[i]);
    return _mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11));
}

/* Four 64-byte accumulators take 256 bytes per round. Folding keeps the
 * remainder of the message so far in the 128 bits in front of the next
 * block, so what is left at the end is a 16-byte message with the same CRC,
 * which two crc32 instructions finish. The register's starting value goes
 * into the first four bytes, which is what starting from it means. */
static PS__FOLD_TARGET uint32_t ps__crc32c_fold(uint32_t crc, const void *data, size_t len)
{
    const unsigned char *p = data;
    __m512i a0, a1, a2, a3, k;
    __m128i l0, l1, l2, l3, r;
    uint64_t st;

    if (len < 256)
        return ps__crc32c_hw(crc, data, len);
    a0 = _mm512_xor_si512(_mm512_loadu_si512(p),
                          _mm512_zextsi128_si512(_mm_cvtsi32_si128((int)~crc)));
    a1 = _mm512_loadu_si512(p + 64);
    a2 = _mm512_loadu_si512(p + 128);
    a3 = _mm512_loadu_si512(p + 192);
    p += 256;
    len -= 256;
    k = ps__fold_k512(PS__K2048);
    for (; len >= 256; p += 256, len -= 256) {
        a0 = ps__fold(a0, k, _mm512_loadu_si512(p));
        a1 = ps__fold(a1, k, _mm512_loadu_si512(p + 64));
        a2 = ps__fold(a2, k, _mm512_loadu_si512(p + 128));
        a3 = ps__fold(a3, k, _mm512_loadu_si512(p + 192));
    }
    a3 = ps__fold(a0, ps__fold_k512(PS__K1536), a3);
    a3 = ps__fold(a1, ps__fold_k512(PS__K1024), a3);
    k = ps__fold_k512(PS__K512);
    a3 = ps__fold(a2, k, a3);
    for (; len >= 64; p += 64, len -= 64)
        a3 = ps__fold(a3, k, _mm512_loadu_si512(p));
    l0 = _mm512_extracti32x4_epi32(a3, 0);
    l1 = _mm512_extracti32x4_epi32(a3, 1);
    l2 = _mm512_extracti32x4_epi32(a3, 2);
    l3 = _mm512_extracti32x4_epi32(a3, 3);
    r = _mm_xor_si128(l3, ps__fold_lane(l0, PS__K384));
    r = _mm_xor_si128(r, ps__fold_lane(l1, PS__K256));
    r = _mm_xor_si128(r, ps__fold_lane(l2, PS__K128));
    st = _mm_crc32_u64(0, (uint64_t)_mm_cvtsi128_si64(r));
    st = _mm_crc32_u64(st, (uint64_t)_mm_extract_epi64(r, 1));
    return len ? ps__crc32c_hw(~(uint32_t)st, p, len) : ~(uint32_t)st;
}
#endif

uint32_t ps_crc32c(uint32_t crc, const void *data, size_t len)
{
    pthread_once(&ps__crc32c_once, ps__init);
#if PS__CRC_HW
    if (ps__have_fold)
        return ps__crc32c_fold(crc, data, len);
#endif
    return ps_crc32c_sse42(crc, data, len);
}

uint32_t ps_crc32c_sse42(uint32_t crc, const void *data, size_t len)
{
    pthread_once(&ps__crc32c_once, ps__init);
#if PS__CRC_HW
    if (ps__have_hw)
        return ps__crc32c_hw(crc, data, len);
#endif
    return ps_crc32c_sw(crc, data, len);
}

const char *ps_crc32c_impl(void)
{
    pthread_once(&ps__crc32c_once, ps__init);
#if PS__CRC_HW
    if (ps__have_fold)
        return "avx512-vpclmulqdq";
    if (ps__have_hw)
        return "sse4.2";
#endif
    return "table";
}
