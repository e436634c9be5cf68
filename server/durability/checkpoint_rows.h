/* The embedding rows of a checkpoint (server/durability/checkpoint.c's file, format 6):
 * the section after the dense chunks that holds every row table of the
 * server with its clocks, its counters, its admission sketch and every
 * stored row with its optimizer state and counters, so a restore is exact
 * and its counts go on rather than restart.
 *
 * Section (little-endian): u32 row table count (the file's tensor table's),
 * then per table in table order
 *     u32 table index, u32 dim, u32 state floats per row,
 *     u64 clock, u64 newest (the table's step accumulated and 1 + newest
 *     step applied, as a chunk's),
 *     u64 created, admitted, filtered, evicted, expired, refused (the
 *     store's counts, ps_row_counters; format 6 on),
 *     u64 sketch bytes (0: admission is off) and the sketch
 *     (ps_row_admit_save's form),
 *     u64 row count, then per row: u64 ID, u32 last step updated, u32
 *     update count (Adam's per-row step, expiry's last step), dim floats of
 *     values, the state floats.
 * Rows are written in the store's visit order, every stored row (expired
 * ones too: the live store still holds them, and an expired row reads and
 * updates as a new one either way), so a store rebuilt from them evicts
 * and trains on as the original (row_store.h).
 *
 * Reading is in two passes as for the chunks: a verify pass streams the
 * section through the CRC and checks its structure against the file's
 * table (counts bounded by the bytes left, nothing allocated for them), and
 * a copy pass, once the file is adopted, inserts the rows into the stores
 * the sink gives. Memory of a restore: one block and one row record, plus
 * one admission sketch at a time.
 *
 * The counters are the store's, so per server. A restore onto the same
 * number of servers (whatever the chunk size) gives each server its own
 * file's: it holds that file's rows, so the counts are exact. Onto another
 * number, which server's rows were created, admitted or evicted where is
 * not recoverable (the evicted ones are not in the files at all), but the
 * job's totals are: new server 0 takes the sum of every file's counters and
 * the others start at 0, so the sum over the servers (what a dashboard
 * adds up) goes on exactly. */
#ifndef PS_CHECKPOINT_ROWS_H
#define PS_CHECKPOINT_ROWS_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "crc_writer.h"
#include "model_spec.h"
#include "row_store.h"
#include "row_table.h"

/* Files are read in blocks of this size. */
#define PS_CHECKPOINT_BLOCK_BYTES ((size_t)1 << 20)

/* A server's row tables as a checkpoint writes them (borrowed stores) and
 * a restore fills them (the sink gives the stores; the clocks are the
 * files' once the restore succeeded). sketch: a restore's admission
 * sketches, summed over the files read until ps_checkpoint_rows_finish
 * hands them to the stores (owned; NULL before). Zero it before use. */
typedef struct {
    int n;
    ps_row_store *store[PS_MAX_ROW_TABLES];
    uint32_t dim[PS_MAX_ROW_TABLES]; /* each store's */
    uint64_t clock[PS_MAX_ROW_TABLES], newest[PS_MAX_ROW_TABLES];
    ps_row_admit *sketch[PS_MAX_ROW_TABLES];
    uint32_t counted; /* a restore's files whose counters the stores took */
} ps_checkpoint_rows;

/* Which rows of a file a restore keeps: every one (servers 0), or those
 * common/row_place puts on server `server` of `servers` (a restore onto
 * another number of servers reads every old file). */
typedef struct {
    uint32_t servers, server;
} ps_checkpoint_keep;

/* What a file's rows section is held to: the file's own clock, the job's
 * mode and clock lead (a table's clocks by ps_consistency_saved_clocks),
 * and the plan the file was written for (its server of servers). */
typedef struct {
    uint64_t clock, lead;
    uint32_t staleness;
    uint32_t server, servers;
} ps_checkpoint_rows_rule;

/* Streams n bytes of f through the CRC, into dst when it is not NULL, else
 * through blk (PS_CHECKPOINT_BLOCK_BYTES). Returns 0, or -1 on a short
 * read. */
int ps_checkpoint_stream(FILE *f, size_t n, uint8_t *dst, uint8_t *blk, uint32_t *crc);

/* Writes the section for rows (NULL: no row tables) through w. The stores
 * must not change during the call. Returns 0 or w's error (-ENOMEM when a
 * sketch cannot be staged). */
int ps_checkpoint_rows_write(ps_crc_writer *w, const ps_checkpoint_rows *rows);

/* Reads exactly left bytes of f (the section: all that lies between the
 * chunks and the CRC) through the CRC and checks them against table's row
 * tables and rule: each table's clocks against the file's, and every row
 * as a store holds it (its last step below its table's newest and within
 * PS_ROW_MAX_STEP, every value and state float finite), so that a file
 * that any store would refuse a row of is refused here, before anything is
 * adopted, by every server that reads it. Returns 0; -PS_EFORMAT or
 * -PS_EMISMATCH with the reason in why (the rest of the section is still
 * read, so the caller can tell a damaged file by its CRC first); -ENOMEM
 * (a row larger than a block, and no memory for it); or -EIO on a short
 * read. */
int ps_checkpoint_rows_verify(FILE *f, const ps_model_spec *table,
                              const ps_checkpoint_rows_rule *rule, uint64_t left, uint8_t *blk,
                              uint32_t *crc, char *why, size_t why_len);

/* Reads the verified section of one file again into rows->store[] (rows->n
 * of them, the table's): the rows keep selects, inserted; the admission
 * sketches added into rows->sketch[]; with counted, the file's counters
 * added to the stores' (rows->counted counts such files); the clocks taken
 * from the first file (first) and newest the most of all files'. A row that
 * common/row_place does not put on the file's own server (rule's server of
 * servers) is not restored: no client sends it there (a peer that did
 * could not have it read back), and so no ID comes from two files of a
 * set. Returns 0 or a negative code with the reason in why: a row or a
 * sketch the store refuses, or a short read (the file changed since it was
 * verified). */
int ps_checkpoint_rows_copy(FILE *f, ps_checkpoint_rows *rows, int first,
                            const ps_checkpoint_keep *keep, const ps_checkpoint_rows_rule *rule,
                            int counted, uint32_t *crc, char *why, size_t why_len);

/* Whether a file written by server file_server of file_servers gives its
 * counters to server keep->server of keep->servers (keep NULL: a restore of
 * the server's own file), by the rule above. */
int ps_checkpoint_rows_counted(uint32_t file_server, uint32_t file_servers,
                               const ps_checkpoint_keep *keep);

/* After the last file: hands the summed sketches to their stores (ok), or
 * frees them (a failed restore). Returns 0, or -PS_EMISMATCH with the
 * reason in why when a store refuses its sketch. */
int ps_checkpoint_rows_finish(ps_checkpoint_rows *rows, int ok, char *why, size_t why_len);

#endif
