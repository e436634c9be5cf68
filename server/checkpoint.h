/* Server checkpoints: one file per server and clock, holding that server's
 * chunks (weights, optimizer state, clocks) and what they belong to.
 *
 * Format (all little-endian): magic "SHPSCKPT", u32 format version, a fixed
 * header (server index and count, optimizer, model fingerprint, chunk size,
 * clock, planned steps, chunk count, job fingerprint), the job's tensor table
 * (u32 length and a packed TensorTable message, proto/shardps.proto), then per
 * chunk its key, sizes, clocks, update count, weights and state, and last a
 * CRC32C of every byte before it. Files of older versions, which lacked the
 * job fingerprint or the table, are refused with that reason: a server restored
 * from one could not know its job or its tensors.
 * A file is written beside its final name, fsynced, renamed into place, and
 * the directory fsynced, so a crash leaves either the old set or the new one.
 * On load, the size, checksum and header are all verified before anything is
 * copied into the shard; a bad file is refused by name with the reason, and
 * the next older one is tried.
 *
 * Every file carries its job's fingerprint (ps_job_fingerprint): listing,
 * restoring and pruning look only at the files of this server's own job, so
 * a directory may hold other jobs' files (a volume that outlived its job),
 * which are never restored nor deleted. */
#ifndef PS_CHECKPOINT_H
#define PS_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "model_spec.h"
#include "shard.h"

#define PS_CHECKPOINT_FORMAT 3

/* Identity and position of a checkpoint; a plain value. */
typedef struct {
    uint32_t server_index, num_servers;
    uint32_t optimizer;   /* ps_optimizer_kind */
    uint64_t fingerprint; /* of the tensor table (ps_model_spec_fingerprint) */
    uint64_t chunk_bytes;
    uint64_t clock; /* steps applied (sync) or newest step (async) */
    uint64_t total_steps;
    uint64_t job; /* ps_job_fingerprint of the job's settings */
} ps_checkpoint_meta;

/* Per local chunk clocks saved with the weights; arrays of the shard's chunk
 * count, owned by the caller. */
typedef struct {
    uint64_t *clock;  /* sync: step being accumulated */
    uint64_t *newest; /* 1 + newest step applied */
} ps_checkpoint_clocks;

/* Writes the shard's state and the job's tensor table (borrowed) to dir and
 * removes all but the newest keep files of this server and job. Writes the
 * file's path into path (may be NULL). Returns 0 or a negative errno; on
 * failure the previous checkpoints are untouched. */
int ps_checkpoint_write(const char *dir, int keep, const ps_checkpoint_meta *meta,
                        const ps_model_spec *table, const ps_shard *shard,
                        const ps_checkpoint_clocks *clocks, char *path, size_t path_len);

/* Called during a restore with the tensor table of a file whose header and
 * table are sound, before its body is read: returns the shard to load that
 * file into and fills clocks (arrays of its chunk count), or NULL with the
 * reason in why to refuse the file. The shard stays the caller's. */
typedef ps_shard *(*ps_checkpoint_table_fn)(void *arg, const ps_model_spec *table,
                                            ps_checkpoint_clocks *clocks, char *why,
                                            size_t why_len);

/* How many checkpoint files of server meta->server_index in dir belong to
 * another job than meta->job (or to one this build cannot tell); their names
 * go into names, ", "-separated and truncated to names_len. Returns the
 * count or a negative errno (-ENOENT: no such directory). */
int ps_checkpoint_foreign(const char *dir, const ps_checkpoint_meta *meta, char *names,
                          size_t names_len);

/* Restores the newest valid checkpoint of server meta->server_index and job
 * meta->job whose clock is at most max_clock from dir into the shard and
 * clocks table_fn gives for its table, and writes its clock into meta->clock.
 * Files that are
 * truncated, corrupt, or belong to another model, partition or optimizer are
 * refused: each refusal is appended to err as "FILE: reason; ". Returns 0,
 * -ENOENT when no checkpoint of this server and job exists, or -PS_EFORMAT /
 * -PS_EMISMATCH when none of them is usable. */
int ps_checkpoint_restore(const char *dir, uint64_t max_clock, ps_checkpoint_meta *meta,
                          ps_checkpoint_table_fn table_fn, void *arg, ps_checkpoint_clocks *clocks,
                          char *path, size_t path_len, char *err, size_t err_len);

#endif
