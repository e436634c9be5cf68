/* Deterministic partition of a model's tensors into keyed chunks spread over
 * servers.
 *
 * Each tensor is cut into chunks of at most chunk_bytes, and smaller when
 * that is needed for balance: no chunk exceeds an eighth of a server's fair
 * share (total / (8 * servers)), but none is cut below 4 KiB for that. A
 * chunk's key is (tensor_id << 32 | chunk_index). Chunks are placed largest
 * first, each on the server holding the fewest bytes so far (ties to the lower
 * index), which keeps any two servers within one chunk of each other, so the
 * heaviest server holds about 1 + 1/7 times the bytes of the lightest at
 * most (rounding aside) whenever the 4 KiB floor does not apply. Every
 * process computes the same partition from (spec, server count, chunk_bytes);
 * nothing about it is sent. */
#ifndef PS_PARTITION_H
#define PS_PARTITION_H

#include <stddef.h>
#include <stdint.h>

#include "model_spec.h"

#define PS_DEFAULT_CHUNK_BYTES (1u << 20)

typedef struct {
    uint64_t key;
    uint32_t tensor_id;
    uint32_t chunk_index;
    /* In 4-byte words (model_spec.h): elements for float32, two per int64
     * element. */
    size_t offset; /* first word within the tensor */
    size_t numel;  /* words */
    int server;
} ps_chunk;

typedef struct ps_partition ps_partition;

static inline uint64_t ps_key_make(uint32_t tensor_id, uint32_t chunk_index)
{
    return ((uint64_t)tensor_id << 32) | chunk_index;
}

/* Returns 0 and a partition the caller frees with ps_partition_free, or
 * -EINVAL (n_servers < 1 or > 4096, chunk_bytes < 4) or -ENOMEM. The spec is
 * copied; it need not outlive the partition. */
int ps_partition_init(ps_partition **out, const ps_model_spec *spec, int n_servers,
                      size_t chunk_bytes);
void ps_partition_free(ps_partition *p);

int ps_partition_n_servers(const ps_partition *p);
int ps_partition_chunk_count(const ps_partition *p);
/* The size tensors were cut at, in floats: every chunk but a tensor's last
 * has exactly this many. */
size_t ps_partition_chunk_elems(const ps_partition *p);
/* Chunks in key order (tensor, then chunk index); i in [0, count). */
const ps_chunk *ps_partition_chunk(const ps_partition *p, int i);
/* The chunk with this key, or NULL for a key that does not exist. */
const ps_chunk *ps_partition_find(const ps_partition *p, uint64_t key);
/* Float32 elements placed on server s (0 for s out of range). */
size_t ps_partition_server_numel(const ps_partition *p, int s);
/* Number of chunks placed on server s. */
int ps_partition_server_chunk_count(const ps_partition *p, int s);

#endif
