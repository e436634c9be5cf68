/* Reusable large buffers.
 *
 * A buffer of tens of megabytes from malloc is a fresh mapping: every page
 * faults on first touch and is unmapped again by free, so a server that
 * allocated one per pull reply spent most of a large step in the kernel. The
 * pool keeps returned buffers and hands them out again, so their pages stay
 * mapped and warm and minor faults per step stay flat.
 *
 * Lifecycle: ps_buf_pool_init -> get/put any number of times ->
 * ps_buf_pool_close. A buffer remembers its pool, so whoever ends up holding
 * it (a write callback, say) returns it with ps_buf_pool_put alone; the pool
 * itself is freed once it is closed and every buffer has come back. */
#ifndef PS_BUF_POOL_H
#define PS_BUF_POOL_H

#include <stddef.h>

typedef struct ps_buf_pool ps_buf_pool;

/* max_idle_bytes: returned buffers beyond this many bytes in all are freed
 * (smallest first: the big ones are the expensive ones to fault in again).
 * Returns 0 or -ENOMEM. */
int ps_buf_pool_init(ps_buf_pool **out, size_t max_idle_bytes);

/* A buffer of at least size bytes, 64-byte aligned, contents undefined: the
 * smallest idle one that fits, else a new one. The caller owns it until it
 * hands it to ps_buf_pool_put. NULL when out of memory. */
void *ps_buf_pool_get(ps_buf_pool *p, size_t size);

/* Gives a buffer from ps_buf_pool_get back to its pool. NULL is allowed. */
void ps_buf_pool_put(void *buf);

/* Buffers handed out so far that were new allocations rather than reuse:
 * flat once the pool has warmed up. */
size_t ps_buf_pool_allocations(const ps_buf_pool *p);

/* Frees the idle buffers now and the pool once the last buffer still out is
 * put back. NULL is allowed. */
void ps_buf_pool_close(ps_buf_pool *p);

#endif
