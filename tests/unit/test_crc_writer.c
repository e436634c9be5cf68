/* Tests for the checksumming file writer: the bytes it writes for known
 * integers are their little-endian encoding, whatever the host's byte
 * order (what every reader of a checkpoint or saved model expects, through
 * common/le_bytes.h), its CRC is the CRC32C of exactly those bytes, and
 * the first error stops it. */
#include <criterion/criterion.h>

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "crc32c.h"
#include "crc_writer.h"
#include "le_bytes.h"

/* The little-endian bytes of the values written below, spelled out. */
static const uint8_t want[] = {
    0x04, 0x03, 0x02, 0x01,                         /* put32 0x01020304 */
    0x08, 0x07, 0x06, 0x05, 0x04, 0x03, 0x02, 0x01, /* put64 0x0102030405060708 */
    0xfe, 0xff, 0xff, 0xff,                         /* put32 0xfffffffe */
    0x01, 0x00, 0x00, 0x00, 0x00, 0x00, 0x00, 0x80, /* put64 2^63 + 1 */
    'a',  'b',  'c',                                /* put "abc", bytes as they are */
};

Test(crc_writer, integers_are_written_little_endian)
{
    char *buf = NULL;
    size_t len = 0;
    ps_crc_writer w = {open_memstream(&buf, &len), 0, 0};

    cr_assert_not_null(w.f);
    ps_crc_writer_put32(&w, 0x01020304u);
    ps_crc_writer_put64(&w, 0x0102030405060708ull);
    ps_crc_writer_put32(&w, 0xfffffffeu);
    ps_crc_writer_put64(&w, ((uint64_t)1 << 63) + 1);
    ps_crc_writer_put(&w, "abc", 3);
    cr_assert_eq(fclose(w.f), 0);
    cr_assert_eq(w.err, 0);
    cr_assert_eq(len, sizeof(want), "%zu bytes written, %zu expected", len, sizeof(want));
    for (size_t i = 0; i < len; i++)
        cr_assert_eq((uint8_t)buf[i], want[i], "byte %zu: 0x%02x, expected 0x%02x", i,
                     (uint8_t)buf[i], want[i]);
    cr_assert_eq(w.crc, ps_crc32c(0, want, sizeof(want)));
    free(buf);
}

/* The helpers the writer and the readers share agree with the bytes above. */
Test(crc_writer, le_bytes_helpers_match_the_encoding)
{
    uint8_t b[8];

    ps_le_put32(b, 0x01020304u);
    cr_assert_eq(memcmp(b, want, 4), 0);
    ps_le_put64(b, 0x0102030405060708ull);
    cr_assert_eq(memcmp(b, want + 4, 8), 0);
    cr_assert_eq(ps_le_get32(want), 0x01020304u);
    cr_assert_eq(ps_le_get64(want + 4), 0x0102030405060708ull);
    cr_assert_eq(ps_le_get64(want + 16), ((uint64_t)1 << 63) + 1);
}

/* A failed write is kept and everything after it is skipped, the CRC too. */
Test(crc_writer, the_first_error_stops_it)
{
    char path[] = "/tmp/test_crc_writer_XXXXXX";
    int fd = mkstemp(path);
    ps_crc_writer w = {NULL, 0, 0};
    uint32_t crc;

    cr_assert_geq(fd, 0);
    close(fd);
    w.f = fopen(path, "rb"); /* writes to it fail */
    cr_assert_not_null(w.f);
    setvbuf(w.f, NULL, _IONBF, 0);
    ps_crc_writer_put32(&w, 1);
    cr_assert_lt(w.err, 0);
    crc = w.crc;
    ps_crc_writer_put64(&w, 2);
    ps_crc_writer_put(&w, "x", 1);
    cr_assert_eq(w.crc, crc);
    fclose(w.f);
    unlink(path);
}
