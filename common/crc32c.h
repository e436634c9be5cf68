/* CRC32C (Castagnoli), the checksum carried in every frame header.
 *
 * Uses carry-less multiplication (AVX-512 VPCLMULQDQ) or the SSE4.2 crc32
 * instruction when the CPU has them (checked once at run time) and a
 * table-driven software version otherwise; all give identical results, which
 * the tests check. */
#ifndef PS_CRC32C_H
#define PS_CRC32C_H

#include <stddef.h>
#include <stdint.h>

/* Extends crc over data[0..len). Start with crc = 0; chaining calls over
 * consecutive pieces equals one call over the whole. */
uint32_t ps_crc32c(uint32_t crc, const void *data, size_t len);

/* The portable version, always available, for tests and odd CPUs. */
uint32_t ps_crc32c_sw(uint32_t crc, const void *data, size_t len);

/* The crc32-instruction version (the table one on CPUs without SSE4.2), so
 * tests and benchmarks can compare it with what ps_crc32c picked. */
uint32_t ps_crc32c_sse42(uint32_t crc, const void *data, size_t len);

/* Which version ps_crc32c runs here: "avx512-vpclmulqdq", "sse4.2" or
 * "table". A static string. */
const char *ps_crc32c_impl(void);

#endif
