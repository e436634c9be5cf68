/* Little-endian integers in byte buffers: the saved forms (checkpoints,
 * saved models, the admission sketch) are little-endian whatever the host's
 * byte order, and a buffer's bytes need not be aligned for the integer they
 * hold. Compilers turn each of these into one load or store on a
 * little-endian host. */
#ifndef PS_LE_BYTES_H
#define PS_LE_BYTES_H

#include <stdint.h>

static inline uint32_t ps_le_get32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t ps_le_get64(const uint8_t *p)
{
    return (uint64_t)ps_le_get32(p) | (uint64_t)ps_le_get32(p + 4) << 32;
}

static inline void ps_le_put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static inline void ps_le_put64(uint8_t *p, uint64_t v)
{
    ps_le_put32(p, (uint32_t)v);
    ps_le_put32(p + 4, (uint32_t)(v >> 32));
}

#endif
