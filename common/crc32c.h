/* CRC32C (Castagnoli), the checksum carried in every frame header.
 *
 * Uses the SSE4.2 crc32 instruction when the CPU has it (checked once at run
 * time) and a table-driven software version otherwise; both give identical
 * results, which the tests check. */
#ifndef PS_CRC32C_H
#define PS_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Extends crc over data[0..len). Start with crc = 0; chaining calls over
 * consecutive pieces equals one call over the whole. */
uint32_t ps_crc32c(uint32_t crc, const void *data, size_t len);

/* Copies src[0..len) to dst and extends crc over the bytes, in one walk over
 * memory: each block is checksummed right after it is copied, while it is
 * still in cache. The areas must not overlap. */
uint32_t ps_crc32c_copy(uint32_t crc, void *dst, const void *src, size_t len);

/* The portable version, always available, for tests and odd CPUs. */
uint32_t ps_crc32c_sw(uint32_t crc, const void *data, size_t len);

#endif
