/* A set of 64-bit IDs, each with a 32-bit value, for the rows paths that
 * must tell repeats apart in a request of up to millions of IDs: the client
 * numbering a call's unique IDs (lib/transfer/kv_rows.c) and the server
 * refusing an ID named twice (server/rows/row_wire.c, the one place the
 * server checks it; the row store takes unique IDs as given). Sorting did
 * this before at O(n log n) and a copy; an open-addressing table (linear
 * probing on ps_mix64 of the ID, at most half full) does it in one pass,
 * and a generation counter empties it in O(1), so one set is kept and
 * reused call after call without touching its memory again.
 *
 * It grows to the largest call's size (16 bytes a slot, two slots an ID:
 * 32 MiB for 2^20 IDs) and gives that back once it has been far too large
 * for a while: after PS_ID_SET_SHRINK_AFTER resets in a row that each
 * needed at most 1/8 of a capacity above PS_ID_SET_KEEP_SLOTS, it is
 * reallocated at the most those resets needed. A reset that needs more
 * breaks the streak, so a workload that mixes large and small calls keeps
 * its capacity and does not reallocate; a shrink costs one allocation of
 * the new size, at most once per PS_ID_SET_SHRINK_AFTER resets.
 *
 * Lifecycle: a zeroed ps_id_set is empty and owns nothing;
 * ps_id_set_reset before each batch, ps_id_set_put per ID,
 * ps_id_set_free at the end. Not thread-safe. */
#ifndef PS_ID_SET_H
#define PS_ID_SET_H

#include <stddef.h>
#include <stdint.h>

/* Capacities up to this many slots (1 MiB) are kept whatever the calls. */
#define PS_ID_SET_KEEP_SLOTS ((size_t)1 << 16)
/* Resets in a row, each needing at most 1/8 of the capacity, before it
 * shrinks. */
#define PS_ID_SET_SHRINK_AFTER 16

typedef struct {
    uint64_t *ids;
    uint32_t *vals;
    uint32_t *gen; /* a slot is in use when gen[slot] == cur */
    size_t cap;    /* a power of two, 0 before the first reset */
    uint32_t cur;
    /* Resets in a row that needed at most cap / 8 slots, and the most
     * slots one of them needed. */
    uint32_t small;
    size_t small_peak;
} ps_id_set;

/* Empties the set and makes room for n IDs (n < 2^31), shrinking it as
 * described above. Returns 0, or -ENOMEM (the set is then empty and usable
 * for no more than it had room for before). */
int ps_id_set_reset(ps_id_set *s, size_t n);

/* Adds id with value v and returns -1 when it was absent; when it was
 * present, returns the value it was added with and changes nothing. At
 * most the n of the last reset IDs may be added. */
int64_t ps_id_set_put(ps_id_set *s, uint64_t id, uint32_t v);

void ps_id_set_free(ps_id_set *s);

#endif
