/* Where an embedding row lives: a 64-bit hash of (table id, row ID) mapped
 * onto one of S servers.
 *
 * Rows are placed by hash, not by ID range, so sequential IDs, IDs that
 * share low or high bits, and Zipf-skewed IDs all spread evenly: each
 * server holds about 1/S of every table's rows and receives about 1/S of
 * every step's unique rows (tests/unit/test_row_place.c measures both on
 * Zipf-distributed IDs). The function is part of the stored format: a
 * checkpoint's rows are re-placed with it when restored onto a different
 * number of servers, and every client routes with it, so it is written out
 * here and never changes:
 *
 *     hash(table, id) = mix64(mix64(table) ^ id)        (mix64: common/mix64.h)
 *     server(hash, S) = ((hash >> 32) * S) >> 32        (S >= 1)
 *
 * For a fixed table the hash is a bijection of the IDs. The server is the
 * hash's top 32 bits scaled onto [0, S) (a multiply and a shift, no
 * division): every server gets either floor or ceil of 2^32 / S of the hash
 * values, a bias below 2^-32 relative. Modules that hash row IDs for
 * other purposes (the row store's index, the admission sketch) use other
 * functions of the ID, so their buckets stay independent of the server a
 * row is on.
 *
 * This is not consistent hashing: growing from S to S + 1 servers moves
 * about S/(S+1) of the rows. A restore streams every row anyway (it reads
 * all S checkpoint files), so that costs nothing there; nothing moves rows
 * between live servers. */
#ifndef PS_ROW_PLACE_H
#define PS_ROW_PLACE_H

#include <stddef.h>
#include <stdint.h>

/* The placement hash of row id of table table_id. */
uint64_t ps_row_hash(uint32_t table_id, uint64_t id);

/* The server (0 .. n_servers - 1) that holds the row whose hash is hash.
 * n_servers must be at least 1 (checked by whoever configured the job). */
static inline uint32_t ps_row_server_of(uint64_t hash, uint32_t n_servers)
{
    return (uint32_t)(((hash >> 32) * (uint64_t)n_servers) >> 32);
}

/* The server of row id of table table_id among n_servers (>= 1). */
uint32_t ps_row_place(uint32_t table_id, uint64_t id, uint32_t n_servers);

/* out[i] = ps_row_place(table_id, ids[i], n_servers) for i < n: how a
 * client splits a request's IDs by server. Returns 0, or -EINVAL when
 * n_servers is 0 (nothing written). */
int ps_row_place_many(uint32_t table_id, const uint64_t *ids, size_t n, uint32_t n_servers,
                      uint32_t *out);

#endif
