/* Server checkpoints: one file per server and clock, holding that server's
 * chunks (weights, optimizer state, clocks), its embedding rows (every
 * stored row with its optimizer state and counters, each table's clocks and
 * admission sketch) and what they belong to.
 *
 * Format (all little-endian): magic "SHPSCKPT", u32 format version, a fixed
 * header (server index and count, optimizer, model fingerprint, chunk size,
 * clock, planned steps, chunk count, job fingerprint), the job's tensor table
 * (u32 length and a packed TensorTable message, proto/shardps.proto), then per
 * chunk its key, sizes, clocks, update count, weights and state, then the
 * rows section (server/durability/checkpoint_rows.h), and last a CRC32C of every byte
 * before it. Files of older versions, which lacked the rows' counters (5),
 * the rows (4), the job fingerprint or the table (3 and older), are refused
 * with that reason: a server restored from one could not know its job, its
 * tensors or its rows, or would count its rows from 0 again; files of newer
 * versions are refused as unknown.
 * A file is written beside its final name, fsynced, renamed into place, and
 * the directory fsynced, so a crash leaves either the old set or the new one.
 * On load, the header, the table, the size, the chunk layout, the rows and
 * the checksum are all verified before the file's table is adopted or
 * anything is copied; a bad file is refused by name with the reason
 * (nothing of it adopted), and the next older one is tried. The header's
 * server count and chunk size are the plan the file was written for, not
 * part of its identity: a restore onto another plan reads every file of a
 * clock and re-places what they hold (ps_checkpoint_restore).
 *
 * Every file carries its job's fingerprint (ps_job_fingerprint): listing,
 * restoring and pruning look only at the files of this server's own job, so
 * a directory may hold other jobs' files (a volume that outlived its job),
 * which are never restored nor deleted. */
#ifndef PS_CHECKPOINT_H
#define PS_CHECKPOINT_H

#include <stddef.h>
#include <stdint.h>

#include "checkpoint_rows.h"
#include "model_spec.h"
#include "shard.h"

#define PS_CHECKPOINT_FORMAT 6

/* Identity and position of a checkpoint; a plain value. */
typedef struct {
    uint32_t server_index, num_servers;
    uint32_t optimizer;   /* ps_optimizer_kind */
    uint64_t fingerprint; /* of the tensor table (ps_model_spec_fingerprint) */
    uint64_t chunk_bytes;
    uint64_t clock; /* steps applied (sync) or newest step (async) */
    uint64_t total_steps;
    uint64_t job; /* ps_job_fingerprint of the job's settings */
    /* A restore's expectations, not stored: the optimizer state floats per
     * weight (ps_optimizer_state_floats of one), the most float32 bytes of
     * a table the server takes (0: no limit), and the job's mode and clock
     * lead, which the clocks a file holds are judged by
     * (ps_consistency_saved_clocks). */
    uint64_t state_per_weight;
    uint64_t max_table_bytes;
    uint32_t staleness;
    uint64_t clock_lead;
} ps_checkpoint_meta;

/* Per local chunk clocks saved with the weights; arrays of the shard's chunk
 * count, owned by the caller. */
typedef struct {
    uint64_t *clock;  /* sync: step being accumulated */
    uint64_t *newest; /* 1 + newest step applied */
} ps_checkpoint_clocks;

/* Writes the shard's state (every chunk filled), the row tables' (rows may
 * be NULL when the table has none; their stores must not change during the
 * call) and the job's tensor table (borrowed) to dir and removes all but
 * the newest keep files of this server and job. Writes the file's path into
 * path (may be NULL). Returns 0 or a negative errno (-EINVAL: a chunk is
 * not filled, or rows do not match the table's row tables); on failure the
 * previous checkpoints are untouched. */
int ps_checkpoint_write(const char *dir, int keep, const ps_checkpoint_meta *meta,
                        const ps_model_spec *table, const ps_shard *shard,
                        const ps_checkpoint_clocks *clocks, const ps_checkpoint_rows *rows,
                        char *path, size_t path_len);

/* Where a restore puts what it finds. adopt is called with a file's tensor
 * table only once the whole file has been verified (identity, size, chunk
 * layout, rows section, CRC): it returns the shard to copy that file into
 * and fills clocks (arrays of its chunk count) and rows (n and the empty
 * store and dim of each of the table's row tables; the copy fills their
 * clocks), or NULL with the reason in why to refuse the file. withdraw is
 * called if that file then fails all the same (it changed while it was
 * read, or a store refused a row): whatever adopt took must be forgotten
 * (a table the server already held keeps what was copied into it).
 * Both get arg; the shard stays the caller's; table is valid during the
 * call only (copy what is kept of it). */
typedef struct {
    ps_shard *(*adopt)(void *arg, const ps_model_spec *table, ps_checkpoint_clocks *clocks,
                       ps_checkpoint_rows *rows, char *why, size_t why_len);
    void (*withdraw)(void *arg);
    void *arg;
} ps_checkpoint_sink;

/* The files of server meta->server_index in dir that are not this job's
 * (meta->job): another job's (header and CRC intact), named in other
 * (", "-separated), and damaged ones (too short, not a checkpoint, a format
 * this build cannot read, a CRC that does not hold: a header may be damaged
 * too) with what is wrong in damaged ("FILE: reason; ..."), both cut to
 * fit. Neither kind is ever restored or pruned. */
typedef struct {
    int n_other, n_damaged;
    char other[1024];
    char damaged[2048];
} ps_checkpoint_survey;

/* Fills out for dir. Returns 0 or a negative errno (-ENOENT: no such
 * directory). Reads every file that is not this job's whole, for its CRC. */
int ps_checkpoint_survey_dir(const char *dir, const ps_checkpoint_meta *meta,
                             ps_checkpoint_survey *out);

/* Restores the newest valid checkpoint of job meta->job whose clock is at
 * most max_clock from dir into the shard, clocks and row stores the sink
 * gives for its table, writes the row tables' clocks into rows and its
 * clock into meta->clock. meta's server index and count and chunk size are
 * this server's plan. The clocks tried are this server's files' and server
 * 0's, newest first, and which files of a clock are read is decided by
 * server 0's file of it, so that every server of a restore makes the same
 * choice: written for this plan, this server's own file is read alone
 * (each server falls back to its own older file on its own); for another
 * plan (another number of servers or chunk size), or when this server has
 * no file at all (it is new), every file of that clock is read and
 * re-placed (checkpoint_file.h). Without server 0's file (a directory of
 * this server's alone) this server's own decides. Files that are
 * truncated, corrupt, hold a table over meta->max_table_bytes, belong to
 * another model or optimizer, say another clock than their name, or hold
 * clocks their own clock cannot (ps_consistency_saved_clocks) or rows a
 * store would refuse, and sets missing a file, are refused before a table
 * is adopted: each refusal is appended to err as "FILE: reason; ". A
 * re-placing set that passed every check is the restore of every server
 * that reads it: should this server then fail to take its share (memory,
 * a row its store refuses), no older clock is tried, and err holds that
 * one sentence. Returns 0, -ENOENT when no checkpoint of this job exists
 * for this server, -ENOTRECOVERABLE for the failed share, or -PS_EFORMAT /
 * -PS_EMISMATCH when none of them is usable. */
int ps_checkpoint_restore(const char *dir, uint64_t max_clock, ps_checkpoint_meta *meta,
                          const ps_checkpoint_sink *sink, ps_checkpoint_clocks *clocks,
                          ps_checkpoint_rows *rows, char *path, size_t path_len, char *err,
                          size_t err_len);

#endif
