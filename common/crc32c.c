/* CRC32C of frame payloads, which can be gigabytes, so the hardware path is
 * what matters: on x86-64 with SSE4.2 it runs three independent crc32
 * instruction streams over adjacent blocks and merges them with precomputed
 * "shift by N zero bytes" tables (after Mark Adler's crc32c.c), because one
 * stream is bound by the instruction's 3-cycle latency rather than its
 * 1-per-cycle throughput. Everything else uses a slice-by-8 table version.
 * The tables and the CPU check are set up once, thread-safely, on first use. */
#include "crc32c.h"

#include <pthread.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <nmmintrin.h>
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

static pthread_once_t ps__once = PTHREAD_ONCE_INIT;
static uint32_t ps__table[8][256];
#if PS__CRC_HW
static int ps__have_hw;
static uint32_t ps__shift_long[4][256];
static uint32_t ps__shift_short[4][256];
#endif

static void ps__sw_tables(void)
{
    for (uint32_t n = 0; n < 256; n++) {
        uint32_t c = n;
        for (int k = 0; k < 8; k++)
            c = c & 1 ? (c >> 1) ^ PS__POLY : c >> 1;
        ps__table[0][n] = c;
    }
    for (uint32_t n = 0; n < 256; n++)
        for (int k = 1; k < 8; k++)
            ps__table[k][n] = (ps__table[k - 1][n] >> 8) ^ ps__table[0][ps__table[k - 1][n] & 0xff];
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

static void ps__init(void)
{
    ps__sw_tables();
#if PS__CRC_HW
    __builtin_cpu_init();
    ps__have_hw = __builtin_cpu_supports("sse4.2");
    ps__shift_tables(ps__shift_long, PS__LONG);
    ps__shift_tables(ps__shift_short, PS__SHORT);
#endif
}

uint32_t ps_crc32c_sw(uint32_t crc, const void *data, size_t len)
{
    const unsigned char *p = data;

    pthread_once(&ps__once, ps__init);
    crc = ~crc;
    for (; len >= 8; p += 8, len -= 8) {
        /* Assembled byte by byte so the result does not depend on host
         * endianness; compilers turn this into one load on little-endian. */
        uint32_t lo = crc ^ ((uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                             (uint32_t)p[3] << 24);
        crc = ps__table[7][lo & 0xff] ^ ps__table[6][(lo >> 8) & 0xff] ^
              ps__table[5][(lo >> 16) & 0xff] ^ ps__table[4][lo >> 24] ^ ps__table[3][p[4]] ^
              ps__table[2][p[5]] ^ ps__table[1][p[6]] ^ ps__table[0][p[7]];
    }
    for (; len; p++, len--)
        crc = (crc >> 8) ^ ps__table[0][(crc ^ *p) & 0xff];
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
#endif

uint32_t ps_crc32c(uint32_t crc, const void *data, size_t len)
{
    pthread_once(&ps__once, ps__init);
#if PS__CRC_HW
    if (ps__have_hw)
        return ps__crc32c_hw(crc, data, len);
#endif
    return ps_crc32c_sw(crc, data, len);
}

/* Small enough that a block copied is still in L1 when it is checksummed. */
#define PS__COPY_BLOCK 16384

uint32_t ps_crc32c_copy(uint32_t crc, void *dst, const void *src, size_t len)
{
    uint8_t *d = dst;
    const uint8_t *s = src;

    while (len > 0) {
        size_t n = len < PS__COPY_BLOCK ? len : PS__COPY_BLOCK;
        memcpy(d, s, n);
        crc = ps_crc32c(crc, d, n);
        d += n;
        s += n;
        len -= n;
    }
    return crc;
}
