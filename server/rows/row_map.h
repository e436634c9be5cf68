/* The row store's index: 64-bit row ID -> 32-bit slot, one table on one
 * server.
 *
 * Open addressing with linear probing over 16-byte entries (ID, slot) in a
 * power-of-two array kept at most 3/4 full, doubled when it would pass
 * that; removal shifts the entries after it back (no tombstones), so the
 * array never degrades and a find stops at the first empty entry. Any
 * 64-bit value is a valid ID (emptiness is marked in the slot). The
 * bucket of an ID is taken from a hash other than placement's
 * (common/row_place.h), so the IDs one server holds, which share
 * placement-hash bits, still fill the array evenly. About 21-32 bytes per
 * stored row.
 *
 * Not thread-safe: finds may run concurrently with each other, never with
 * an insert or a removal. */
#ifndef PS_ROW_MAP_H
#define PS_ROW_MAP_H

#include <stddef.h>
#include <stdint.h>

/* No slot: an ID not in the map. Slots are 0 .. PS_ROW_NO_SLOT - 1. */
#define PS_ROW_NO_SLOT UINT32_MAX

typedef struct ps_row_map ps_row_map;

/* A map sized for expect entries without growing (0: a small one). Returns
 * 0 or -ENOMEM (-E2BIG when expect is beyond 2^31). */
int ps_row_map_create(ps_row_map **out, size_t expect);
void ps_row_map_free(ps_row_map *m);

/* The slot of id, or PS_ROW_NO_SLOT. */
uint32_t ps_row_map_find(const ps_row_map *m, uint64_t id);

/* Asks the CPU to start loading id's bucket, for a find a little later: the
 * row store's batch loops look a few IDs ahead so the index's cache misses
 * overlap. */
void ps_row_map_prefetch(const ps_row_map *m, uint64_t id);

/* Adds id -> slot (slot < PS_ROW_NO_SLOT). Returns 0, -EEXIST when id is
 * already there (nothing changed), -EINVAL for a bad slot, or -ENOMEM when
 * growing failed (the map is as it was). */
int ps_row_map_insert(ps_row_map *m, uint64_t id, uint32_t slot);

/* Makes room for count entries in all, so that inserts up to that many
 * cannot fail. Returns 0, -E2BIG beyond 2^31, or -ENOMEM (unchanged). */
int ps_row_map_reserve(ps_row_map *m, size_t count);

/* Removes id. Returns 0 or -ENOENT. */
int ps_row_map_remove(ps_row_map *m, uint64_t id);

size_t ps_row_map_count(const ps_row_map *m);
/* Bytes the map has allocated. */
size_t ps_row_map_bytes(const ps_row_map *m);

#endif
