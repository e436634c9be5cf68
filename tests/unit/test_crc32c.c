/* Tests for CRC32C: published check values, each hardware path (the one
 * ps_crc32c picked, and the crc32-instruction one) against the portable one
 * over every length and alignment near the block boundaries the hardware
 * paths switch at, and chaining, which frame code relies on when a payload
 * arrives in pieces. */
#include <criterion/criterion.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crc32c.h"

/* Large enough for several 3 x 8 KiB hardware triples plus odd tails. */
#define BUF_LEN (3 * 3 * 8192 + 3 * 256 * 2 + 77)

static uint64_t rng_state;

static uint8_t rng_byte(void)
{
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint8_t)(rng_state >> 56);
}

static uint8_t *random_buffer(size_t len, uint64_t seed)
{
    uint8_t *buf = malloc(len);
    cr_assert_not_null(buf);
    rng_state = seed;
    for (size_t i = 0; i < len; i++)
        buf[i] = rng_byte();
    return buf;
}

/* Every version against the portable one. */
static void check_same(uint32_t crc, const void *data, size_t len, const char *what)
{
    uint32_t want = ps_crc32c_sw(crc, data, len);

    cr_assert_eq(ps_crc32c(crc, data, len), want, "%s %s len %zu", ps_crc32c_impl(), what, len);
    cr_assert_eq(ps_crc32c_sse42(crc, data, len), want, "sse4.2 %s len %zu", what, len);
}

static void check_both(uint32_t crc, const void *data, size_t len, uint32_t want)
{
    cr_assert_eq(ps_crc32c(crc, data, len), want, "hw len %zu: %08x != %08x", len,
                 ps_crc32c(crc, data, len), want);
    cr_assert_eq(ps_crc32c_sse42(crc, data, len), want, "sse4.2 len %zu", len);
    cr_assert_eq(ps_crc32c_sw(crc, data, len), want, "sw len %zu: %08x != %08x", len,
                 ps_crc32c_sw(crc, data, len), want);
}

Test(crc32c, known_vectors)
{
    uint8_t zeros[32] = {0}, ones[32], inc[32], dec[32];

    memset(ones, 0xff, sizeof(ones));
    for (int i = 0; i < 32; i++) {
        inc[i] = (uint8_t)i;
        dec[i] = (uint8_t)(31 - i);
    }
    check_both(0, "123456789", 9, 0xE3069283u);
    check_both(0, zeros, 32, 0x8A9136AAu);
    check_both(0, ones, 32, 0x62A8AB43u);
    /* RFC 3720 (iSCSI) B.4 incrementing and decrementing patterns. */
    check_both(0, inc, 32, 0x46DD794Eu);
    check_both(0, dec, 32, 0x113FDB5Cu);
}

Test(crc32c, empty_is_identity)
{
    check_both(0, "", 0, 0);
    check_both(0x12345678u, NULL, 0, 0x12345678u);
}

Test(crc32c, hw_equals_sw_lengths_and_alignments)
{
    uint8_t *buf = random_buffer(BUF_LEN + 64, 1);
    /* Around the folding path's 256-byte rounds and 64-byte steps, and the
     * crc32 path's 3 x 256 and 3 x 8192 triples. */
    static const size_t long_lens[] = {
        255,          256,    257,  319,  320,          511,      512,          767,
        768,          769,    1023, 1024, 3 * 8192 - 1, 3 * 8192, 3 * 8192 + 1, 3 * 8192 + 775,
        2 * 3 * 8192, BUF_LEN};

    for (size_t off = 0; off < 64; off += off < 8 ? 1 : 7) {
        char what[32];
        snprintf(what, sizeof(what), "off %zu", off);
        for (size_t len = 0; len <= 1100; len++)
            check_same(0, buf + off, len, what);
        for (size_t k = 0; k < sizeof(long_lens) / sizeof(long_lens[0]); k++)
            check_same(7, buf + off, long_lens[k], what);
    }
    free(buf);
}

Test(crc32c, hw_equals_sw_random_buffers)
{
    for (uint64_t seed = 2; seed < 50; seed++) {
        uint8_t *buf = random_buffer(BUF_LEN, seed);
        rng_state = seed * 977;
        size_t off = rng_byte() % 64;
        size_t len = ((size_t)rng_byte() << 8 | rng_byte()) % (BUF_LEN - off);
        uint32_t crc = (uint32_t)(seed * 0x9e3779b9u);
        char what[48];

        snprintf(what, sizeof(what), "seed %llu off %zu", (unsigned long long)seed, off);
        check_same(crc, buf + off, len, what);
        free(buf);
    }
}

Test(crc32c, chaining_pieces_equals_whole)
{
    uint8_t *buf = random_buffer(BUF_LEN, 99);
    uint32_t whole = ps_crc32c(0, buf, BUF_LEN);
    static const size_t cuts[] = {1, 3, 8, 13, 256, 1000, 8192, 24577};

    cr_assert_eq(whole, ps_crc32c_sw(0, buf, BUF_LEN));
    for (size_t k = 0; k < sizeof(cuts) / sizeof(cuts[0]); k++) {
        uint32_t hw = 0, sw = 0;
        for (size_t pos = 0; pos < BUF_LEN; pos += cuts[k]) {
            size_t n = BUF_LEN - pos < cuts[k] ? BUF_LEN - pos : cuts[k];
            hw = ps_crc32c(hw, buf + pos, n);
            sw = ps_crc32c_sw(sw, buf + pos, n);
        }
        cr_assert_eq(hw, whole, "hw pieces of %zu", cuts[k]);
        cr_assert_eq(sw, whole, "sw pieces of %zu", cuts[k]);
    }
    /* Every two-piece split of a short prefix, where the alignment prologue
     * and the tails of both pieces interact. */
    for (size_t cut = 0; cut <= 600; cut++) {
        cr_assert_eq(ps_crc32c(ps_crc32c(0, buf, cut), buf + cut, 600 - cut),
                     ps_crc32c_sw(0, buf, 600), "cut %zu", cut);
    }
    free(buf);
}

Test(crc32c, detects_single_bit_flip)
{
    uint8_t *buf = random_buffer(4096, 5);
    uint32_t good = ps_crc32c(0, buf, 4096);

    for (size_t bit = 0; bit < 4096 * 8; bit += 61) {
        buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
        cr_assert_neq(ps_crc32c(0, buf, 4096), good, "bit %zu", bit);
        buf[bit / 8] ^= (uint8_t)(1u << (bit % 8));
    }
    free(buf);
}
