/* The rows of one embedding table that one server holds: rows of dim
 * floats addressed by 64-bit IDs, created when their first gradient is
 * applied, updated by a per-row optimizer, optionally admitted only after N
 * pushes and evicted after T steps untouched or beyond a capacity.
 *
 * Reads never create: a gather of an ID that is not stored answers the
 * table's initializer (common/row_init), and an apply of a gradient to it
 * starts from those values with zero optimizer state. Pushes are gradients,
 * never values: the caller hands a batch of unique IDs with their summed
 * gradients and the factor to scale them by (1/W in sync mode, as dense
 * chunks take the mean), and the rate of the step (the table's schedule,
 * server/rules/lr_schedule). A row whose update would not be finite is refused
 * and left as it was; the others go on.
 *
 * Policies, all optional:
 *   admission   a row is stored only at the admit_after-th push of its ID,
 *               counted in a bounded sketch (server/rows/row_admit); the pushes
 *               before are counted and dropped.
 *   expiry      a row not updated in the last expire_after steps reads as
 *               new (its initializer's values) from step last + T on, and
 *               an apply then starts it afresh; this is exact at every
 *               step whenever the memory is given back, which happens on
 *               such an apply, in ps_row_store_sweep, or in an eviction.
 *   capacity    at most capacity rows are stored: making room evicts the
 *               least recently updated row first, by (last step updated,
 *               ID) (rows made since the store last looked for the oldest
 *               are passed over until it looks again; they are as new as
 *               any).
 * The rules depend only on each row's own history (steps are the job's
 * global steps) except capacity, which counts the rows one server holds and
 * so depends on the number of servers.
 *
 * Memory: each row is one record in a slab of 2-4 MiB mapped from the
 * kernel (no per-row malloc): a 16-byte header (ID, last step updated,
 * update count), the values, then the optimizer state; plus 16-byte entries
 * of the ID index (server/rows/row_map) at most 3/4 full. At D = 64 that is
 * 528 + ~26 bytes per row with Adagrad (1.08x its 512 bytes of values and
 * state) and 784 + ~26 with Adam (1.05x of 768); bench-rows measures it.
 *
 * Checkpoints: ps_row_store_visit walks the stored rows (ID, values, state,
 * metadata) in slot order, a few at a time, and ps_row_store_insert puts
 * them back. The order is deterministic (the same calls give the same
 * order) and a store rebuilt by inserting another's rows in visit order
 * visits them in that order; after more training the two hold the same
 * rows bit for bit, though not necessarily in the same slots (the original
 * reuses the slots of rows it evicted). Nothing but the walk's order
 * depends on slots. The admission sketch is saved and restored through
 * ps_row_store_admission / ps_row_store_set_admission.
 *
 * Threads: not thread-safe. Gathers and visits only read and may run
 * together; an apply, insert, sweep or free must run alone. */
#ifndef PS_ROW_STORE_H
#define PS_ROW_STORE_H

#include <stddef.h>
#include <stdint.h>

#include "row_admit.h"
#include "row_init.h"
#include "row_optimizer.h"

#define PS_ROW_MAX_DIM 65536
/* Steps are stored in 32 bits; the largest step a store accepts. */
#define PS_ROW_MAX_STEP (UINT32_MAX - 1)
/* The most pushes admission counts (admit_after), and the most rows a
 * capacity may name (the slots a store can number). */
#define PS_ROW_MAX_ADMIT    UINT16_MAX
#define PS_ROW_MAX_CAPACITY ((uint64_t)UINT32_MAX - 1)

/* A plain value, the caller's. */
typedef struct {
    uint32_t table_id;
    uint32_t dim;          /* 1 .. PS_ROW_MAX_DIM */
    ps_row_init init;      /* the value of a row not stored */
    ps_row_opt_config opt; /* the per-row optimizer */
    /* Admission: 0 or 1 stores a row at its first push; N > 1 at its Nth,
     * counted in a sketch of sketch_depth rows of sketch_width counters
     * (row_admit.h's bounds) with sketch_seed. */
    uint32_t admit_after;
    uint32_t sketch_depth, sketch_width;
    uint64_t sketch_seed;
    uint32_t expire_after; /* 0: never; T: steps without an update after which a row is new */
    uint64_t capacity;     /* 0: unbounded; else the most rows stored */
    uint64_t expect_rows;  /* the index is sized for this many rows (0: grows from small) */
} ps_row_store_config;

/* The store's figures since it was created. */
typedef struct {
    uint64_t stored;   /* rows held now (expired ones until their memory is given back) */
    uint64_t created;  /* rows stored by an apply (again after an eviction) */
    uint64_t admitted; /* of those, rows that waited for admission (0 when it is off) */
    uint64_t filtered; /* pushes counted for admission and not applied */
    uint64_t evicted;  /* rows removed by expiry or capacity */
    uint64_t expired;  /* of those, by expiry */
    uint64_t refused;  /* row updates refused as not finite */
    uint64_t bytes;    /* memory allocated: slabs, index, sketch, scratch */
} ps_row_counters;

/* What one apply did. */
typedef struct {
    size_t applied;  /* rows updated, created ones included */
    size_t created;  /* rows stored by this apply */
    size_t filtered; /* pushes counted for admission, not applied */
    size_t refused;  /* rows left unchanged: the update was not finite */
    size_t evicted;  /* rows removed to make room or because they had expired */
} ps_row_apply_result;

/* One stored row as a visit shows it and an insert takes it. */
typedef struct {
    uint64_t id;
    uint32_t last_step;  /* the latest step that updated it */
    uint32_t updates;    /* updates applied (Adam's per-row step), saturating */
    const float *values; /* dim floats */
    const float *state;  /* ps_row_store_state_floats floats */
    /* A visit's row as stored (NULL for an insert): its 16-byte header (ID,
     * last step, update count, host order) then the values and the state,
     * contiguous, as a checkpoint writes a row (one copy, not five). */
    const void *record;
} ps_row_view;

typedef struct ps_row_store ps_row_store;

/* The rules of a configuration: dim in range, a valid initializer and
 * optimizer, a sketch shape row_admit accepts when admit_after > 1, an
 * admission threshold up to 65535, expect_rows up to 2^31 and capacity up
 * to 2^32 - 2 (the slots a store can number). Returns 0, or -EINVAL with
 * the reason in why. */
int ps_row_store_check(const ps_row_store_config *cfg, char *why, size_t why_len);

/* An empty store (the configuration is copied). Returns 0, -EINVAL (see
 * ps_row_store_check; why may be NULL) or -ENOMEM. */
int ps_row_store_create(ps_row_store **out, const ps_row_store_config *cfg, char *why,
                        size_t why_len);
void ps_row_store_free(ps_row_store *st);

/* Floats of optimizer state per row. */
size_t ps_row_store_state_floats(const ps_row_store *st);

/* out[i * dim ..] = row ids[i] as it reads at step: its values when stored
 * and not expired, else its initial values; nothing is created or touched.
 * n may be 0. *found (may be NULL) counts the stored rows among them.
 * Returns 0, or -ERANGE when step is beyond PS_ROW_MAX_STEP. */
int ps_row_store_gather(const ps_row_store *st, const uint64_t *ids, size_t n, uint64_t step,
                        float *out, size_t *found);

/* Applies the gradients grads[i * dim ..] * scale of the unique IDs ids[i]
 * (the wire refused a request naming one twice: row_wire.h, the one place
 * that rule is checked) at step with rate lr (see above). Everything that
 * can refuse the whole batch is checked before any row changes: -EINVAL
 * for a scale that is not finite, -ERANGE for a step beyond PS_ROW_MAX_STEP,
 * -ENOMEM when room for the batch's new rows cannot be made (-E2BIG when
 * it would take the store past 2^31 rows); after those,
 * rows are refused one by one (counted in res). res may be NULL. */
int ps_row_store_apply(ps_row_store *st, const uint64_t *ids, const float *grads, size_t n,
                       uint64_t step, float lr, float scale, ps_row_apply_result *res);

/* Gives back the memory of expired rows among the next max_slots slots (a
 * cursor that wraps, so calls spread the work), as seen at step. Returns
 * the number of rows removed, or -ERANGE for a bad step. */
long ps_row_store_sweep(ps_row_store *st, uint64_t step, size_t max_slots);

void ps_row_store_counters(const ps_row_store *st, ps_row_counters *out);

/* A restore's counts (a checkpoint's, server/durability/checkpoint_rows): adds c's
 * created, admitted, filtered, evicted, expired and refused to the store's,
 * so they go on from where the checkpointed store's were; stored and bytes
 * stay the store's own. */
void ps_row_store_add_counters(ps_row_store *st, const ps_row_counters *c);

/* Calls fn for up to max_rows stored rows from *cursor on (0 to start),
 * skipping rows expired at step, and moves the cursor past them; the row's
 * pointers are valid during the call only. Returns 1 when rows remain, 0
 * when the walk is complete, or fn's negative return (the cursor then
 * points at that row). The store must not change between the calls of one
 * walk. */
typedef int (*ps_row_visit_fn)(void *arg, const ps_row_view *row);
int ps_row_store_visit(const ps_row_store *st, uint64_t step, uint64_t *cursor, size_t max_rows,
                       ps_row_visit_fn fn, void *arg);

/* Stores a row as it was (a restore): values and state copied, nothing
 * counted as created. Returns 0, -EEXIST when the ID is stored, -ERANGE
 * when a value or state float is not finite or last_step is beyond
 * PS_ROW_MAX_STEP, or -ENOMEM. Nothing is evicted here: a restore onto
 * fewer servers may leave more rows than the capacity, and the next apply
 * that stores a row evicts the oldest down to it. */
int ps_row_store_insert(ps_row_store *st, const ps_row_view *row);

/* The admission sketch (NULL when admission is off), to save. Owned by the
 * store. */
const ps_row_admit *ps_row_store_admission(const ps_row_store *st);
/* Replaces the sketch with a restored one and takes it over on success.
 * Returns 0, or -PS_EMISMATCH when admission is off or the thresholds
 * differ (the caller keeps it). */
int ps_row_store_set_admission(ps_row_store *st, ps_row_admit *sketch);

#endif
