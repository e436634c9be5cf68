/* One checkpoint file read for a restore (server/durability/checkpoint.c's format):
 * opened with its identity checked, verified completely, then copied into
 * a shard and row stores, either those of the plan it was written for or
 * those of another (a different number of servers or chunk size).
 *
 * A file is read against its own plan, from its header (the number of
 * servers, its server's index, the chunk size): its chunks are that
 * server's chunks of the table's partition under that plan. Copied into
 * the same plan, chunk i goes into local chunk i. Copied into another
 * (ps_checkpoint_keep names this server in the new plan), every part of a
 * file's chunk that falls into one of this shard's chunks is copied there
 * (weights and the optimizer state of each weight, which sit together:
 * server/rules/optimizer.h), a chunk's clocks and update count come from the old
 * chunk that held its first word, and only the rows common/row_place puts
 * on this server are kept; a restore reads every old file this way, so
 * every word and row lands somewhere exactly once.
 *
 * Internal to server/durability/checkpoint.c; tests use it through checkpoint.h. */
#ifndef PS_CHECKPOINT_FILE_H
#define PS_CHECKPOINT_FILE_H

#include <stddef.h>
#include <stdint.h>

#include "checkpoint.h"

/* The header's layout: magic, version, server index and count, optimizer,
 * then the table's fingerprint, chunk size, clock, planned steps, chunk
 * count and job as u64. */
#define PS_CHECKPOINT_MAGIC        "SHPSCKPT" /* 8 bytes, no terminator in the file */
#define PS_CHECKPOINT_HEADER_BYTES (8 + 4 * 4 + 6 * 8)
#define PS_CHECKPOINT_JOB_OFFSET   64

typedef struct ps_checkpoint_file ps_checkpoint_file;

/* What a file says about itself. */
typedef struct {
    uint32_t server_index, num_servers;
    uint64_t chunk_bytes, clock, total_steps;
} ps_checkpoint_plan;

/* Opens path, the file of server `server`, and checks its header and table
 * (magic, format, job, optimizer, its server index and plan, the table and
 * its fingerprint, the chunk count and the size its plan needs). Returns 0
 * with *out (close it), or a negative code with the reason in why. */
int ps_checkpoint_file_open(ps_checkpoint_file **out, const char *path, uint32_t server,
                            const ps_checkpoint_meta *meta, char *why, size_t why_len);
void ps_checkpoint_file_close(ps_checkpoint_file *cf);

/* The file's table (owned by cf) and plan. */
const ps_model_spec *ps_checkpoint_file_table(const ps_checkpoint_file *cf);
void ps_checkpoint_file_plan(const ps_checkpoint_file *cf, ps_checkpoint_plan *out);

/* Streams the whole body once: every chunk header against the plan, the
 * rows section against the table, the CRC. Nothing is kept. Returns 0 or a
 * negative code with the reason in why (a damaged file is called damaged
 * before anything else is judged). */
int ps_checkpoint_file_verify(ps_checkpoint_file *cf, char *why, size_t why_len);

/* Copies the verified body into shard (filled, of the new plan when keep
 * is not NULL), clocks and rows (first: the first file of this restore;
 * see ps_checkpoint_rows_copy), taking the CRC again. Returns 0 or a
 * negative code with the reason in why. */
int ps_checkpoint_file_copy(ps_checkpoint_file *cf, ps_shard *shard, ps_checkpoint_clocks *clocks,
                            ps_checkpoint_rows *rows, int first, const ps_checkpoint_keep *keep,
                            char *why, size_t why_len);

#endif
