/* The sum of one step's row pushes, for one table on one server: what a
 * sync-mode server holds between the first worker's push of a step and the
 * apply, as a dense chunk holds its accumulator.
 *
 * Each push brings unique IDs with their gradients (the client summed
 * repeats, and the wire refused a push naming one twice: row_wire.h, the
 * one place that rule is checked); the accumulator adds them into one gradient per ID, IDs in the
 * order first pushed, so the step's apply (ps_row_store_apply with scale
 * 1/W, as a chunk takes the mean) gets unique IDs with summed gradients.
 * Gradients of an ID are added in the order their pushes arrive, as a
 * chunk's are. Memory is kept between steps (reset empties it); a push is
 * added whole or not at all. Not thread-safe. */
#ifndef PS_ROW_ACCUM_H
#define PS_ROW_ACCUM_H

#include <stddef.h>
#include <stdint.h>

typedef struct ps_row_accum ps_row_accum;

/* An empty accumulator of rows of dim (1 .. PS_ROW_MAX_DIM) floats. Returns
 * 0, -EINVAL or -ENOMEM. */
int ps_row_accum_create(ps_row_accum **out, uint32_t dim);
void ps_row_accum_free(ps_row_accum *a);

/* Adds one push of unique IDs: grads[i * dim ..] to the sum of ids[i],
 * i < n. Returns 0, or -ENOMEM with nothing added. */
int ps_row_accum_add(ps_row_accum *a, const uint64_t *ids, const float *grads, size_t n);

/* The step's unique IDs and summed gradients (count * dim floats), in the
 * order first pushed; owned by the accumulator and valid until the next
 * add or reset. Returns the count. */
size_t ps_row_accum_rows(const ps_row_accum *a, const uint64_t **ids, const float **sums);

/* Empties it for the next step, keeping its memory. */
void ps_row_accum_reset(ps_row_accum *a);

#endif
