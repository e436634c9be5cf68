/* libshardps entries that are not exported yet (lib/shardps.map lists only
 * the public ones): built into the library and into ps_worker, so tests and
 * the programs linked with ps_worker can call them until the public entry
 * that would wrap each is added to include/shardps.h. */
#ifndef PS_SHARDPS_INTERNAL_H
#define PS_SHARDPS_INTERNAL_H

#include <stdint.h>

#include "shardps.h"

/* Declares the next tensor with the caller's own initial values (INIT_VALUES:
 * the servers draw nothing for it): name and shape as shardps_declare, kind
 * 0 (a parameter), 1 (a buffer) or 2 (frozen), values its float32 elements
 * in row-major order, borrowed until shardps_connect returns. Only rank 0
 * sends them (once, to servers that ask: a server restored from a
 * checkpoint does not); every rank must declare the same table, and every
 * rank's first pull returns these values bit for bit. Returns 0 or a
 * negative code (shardps_last_error says why). The public entry to wrap it:
 * shardps_declare_values in a new version node (SHARDPS_1.4). */
int ps_shardps_declare_values(shardps *h, const char *name, int ndim, const int64_t *shape,
                              int kind, const float *values);

/* Rank 0, connected: writes the buffers whose values[t] is not NULL (one
 * entry per tensor, n_values of them; float32 values, or an int64 buffer's
 * elements as their bytes), borrowed for the call. Called before the
 * step's pushes, every rank's next pull holds them (DDP's broadcast of rank
 * 0's buffers). Buffers are never pushed (shardps_push refuses them), nor
 * updated by the optimizer. The public entry to wrap it:
 * shardps_write_buffers in SHARDPS_1.4. */
int ps_shardps_write_buffers(shardps *h, const void *const *values, int n_values);

#endif
