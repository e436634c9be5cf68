/* A file writer that keeps a running CRC32C of everything written and the
 * first error, so a format writer (checkpoints, saved models) can write field
 * after field and check once at the end. put32 and put64 write integers
 * little-endian whatever the host's byte order (common/le_bytes.h), as the
 * readers read them; put writes bytes as they are (float arrays stay in
 * the host's order, little-endian on every platform shardps builds for). */
#ifndef PS_CRC_WRITER_H
#define PS_CRC_WRITER_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct {
    FILE *f;      /* borrowed; the caller opens and closes it */
    uint32_t crc; /* CRC32C of every byte written so far */
    int err;      /* 0, or the first write's negative errno; later writes are skipped */
} ps_crc_writer;

void ps_crc_writer_put(ps_crc_writer *w, const void *p, size_t n);
void ps_crc_writer_put32(ps_crc_writer *w, uint32_t v);
void ps_crc_writer_put64(ps_crc_writer *w, uint64_t v);

#endif
