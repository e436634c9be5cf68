/* The chunks one server owns: weights, optimizer state and, for synchronous
 * training, a gradient accumulator per chunk.
 *
 * A shard knows nothing about connections or clocks; the key-value server
 * decides when to accumulate and when to apply. Chunks are addressed by their
 * local index in [0, ps_shard_chunk_count), in key order. */
#ifndef PS_SHARD_H
#define PS_SHARD_H

#include <stddef.h>
#include <stdint.h>

#include "optimizer.h"
#include "partition.h"

typedef struct ps_shard ps_shard;

/* Takes the chunks that part places on server_index, described only: no
 * chunk has memory for its values until it is filled (ps_shard_fill), so a
 * shard of any size costs its descriptions alone. with_accumulators: each
 * chunk gets a gradient accumulator when filled (needed when pushes are
 * averaged before applying). part and opt are read during the call
 * only; spec is borrowed and must outlive the shard (its chunks draw their
 * initial values from it when filled). Returns 0, -EINVAL or -ENOMEM. */
int ps_shard_init(ps_shard **out, const ps_partition *part, int server_index,
                  const ps_model_spec *spec, const ps_optimizer_config *opt, int with_accumulators);
void ps_shard_free(ps_shard *s);
/* Gives chunk local its memory (weights, optimizer state and accumulator,
 * the last two zeroed) and, with initial_values, the spec's initial values
 * (else the weights are to be written, by a restore). Touches that chunk
 * alone, so chunks may be filled on several threads at once. Returns 0 (also
 * when it was filled already) or -ENOMEM with nothing kept. A chunk that is
 * not filled takes no update (accumulating does nothing, applying returns
 * -ENOMEM); reading its weights or state needs it filled. */
int ps_shard_fill(ps_shard *s, int local, int initial_values);
int ps_shard_filled(const ps_shard *s, int local);

int ps_shard_chunk_count(const ps_shard *s);
/* Local index of key, or -1 when this shard does not hold it. */
int ps_shard_find(const ps_shard *s, uint64_t key);
/* The chunk's description (borrowed from the shard). */
const ps_chunk *ps_shard_chunk(const ps_shard *s, int local);
const float *ps_shard_weights(const ps_shard *s, int local);
/* Total bytes of weights plus optimizer state plus accumulators, once every
 * chunk is filled. */
size_t ps_shard_memory_bytes(const ps_shard *s);

/* Adds g (chunk numel floats, borrowed) into the chunk's accumulator. */
void ps_shard_accumulate(ps_shard *s, int local, const float *g);
/* Applies the mean of the count accumulated gradients at learning rate lr
 * and clears the accumulator. Returns 0, or -ERANGE when the update would
 * have made a weight or optimizer state non-finite: then the chunk is left
 * as it was (the accumulator is cleared all the same). */
int ps_shard_apply_accumulated(ps_shard *s, int local, int count, float lr);
/* Applies g directly at learning rate lr (asynchronous training). Returns 0
 * or -ERANGE as above. */
int ps_shard_apply_grad(ps_shard *s, int local, const float *g, float lr);
/* Updates applied to this chunk so far. */
uint64_t ps_shard_updates(const ps_shard *s, int local);

/* For checkpoints: the chunk's optimizer state (NULL when it keeps none) and
 * its length, and write access to restore weights, state and update count.
 * Pointers are borrowed from the shard. */
const float *ps_shard_state(const ps_shard *s, int local);
size_t ps_shard_state_floats(const ps_shard *s, int local);
float *ps_shard_weights_mut(ps_shard *s, int local);
float *ps_shard_state_mut(ps_shard *s, int local);
void ps_shard_set_updates(ps_shard *s, int local, uint64_t updates);

#endif
