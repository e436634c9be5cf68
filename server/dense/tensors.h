/* The tensors this server holds, through their life (table_life.h): the
 * job's table, the partition cut from it, this server's shard of dense
 * chunks and the apply queue their work runs on.
 *
 * A server starts with no table: a worker's HELLO declares it (or a
 * verified checkpoint brings it, or the embedding program configures it),
 * and adopting it cuts the partition and sets up the shard. Until a step is
 * applied the declaration is only as real as the peers that made it: when
 * the last of them leaves, the table is withdrawn and nothing of it
 * survives. Once every rank has joined, every chunk gets its memory and
 * initial values on the thread pool (a large table filled on the loop
 * stalled every peer for seconds), first in each chunk's queue, so a pull is
 * answered and an update applied only after its chunk's fill.
 *
 * This module keeps the table's state and says what an event asks for
 * (ps_table_action); the front carries a withdrawal out, since it reaches
 * the peers, the job and the units too. Everything runs on the loop thread
 * but a fill's run, on the pool. */
#ifndef PS_TENSORS_H
#define PS_TENSORS_H

#include <stdatomic.h>
#include <stdint.h>
#include <uv.h>

#include "apply_queue.h"
#include "buf_pool.h"
#include "keys.h"
#include "kv_config.h"
#include "partition.h"
#include "shard.h"
#include "table_life.h"
#include "values.h"

typedef struct {
    const ps_kv_server_config *cfg; /* borrowed from the server */
    uv_loop_t *loop;
    /* The table is built (also while a withdrawn table drains); life: where
     * it is in its life. */
    int has_table;
    ps_table_life life;
    ps_model_spec table;                         /* owned while has_table */
    uint8_t table_digest[PS_TABLE_DIGEST_BYTES]; /* ps_model_spec_digest(&table) */
    ps_partition *part;
    ps_shard *shard;
    int n_local;
    int n_pushable;          /* local chunks of parameters: a worker's whole step */
    ps_apply_queue *updates; /* every chunk's fills, updates and writes, in order */
    /* Push payloads, rows replies and the unsent rest of pull replies,
     * reused: in sync mode every worker's push of a step and every
     * worker's reply can be in flight at once, so that many shard-sized
     * buffers are kept warm. */
    ps_buf_pool *bufs;
    size_t share;          /* float32 bytes of this server's chunks */
    ps_keys keys;          /* a request's keys, named once */
    ps_values values;      /* rank 0's initial values still to come */
    uint64_t applied_base; /* dense updates applied when the table was adopted */
    int fills_left;        /* chunks whose fill has not finished yet */
    /* Set when the table is withdrawn: fills not yet begun on the pool skip
     * their work (read there, hence atomic). */
    atomic_int fills_cancelled;
    /* A fill failed (no memory): the table must be withdrawn, for why. */
    int fill_failed;
    char fill_why[96];
} ps_tensors;

/* An empty holder for cfg's server (borrowed, must outlive t). */
void ps_tensors_init(ps_tensors *t, uv_loop_t *loop, const ps_kv_server_config *cfg);
/* Builds the partition, shard, keys and values of spec (copied), the pool
 * and the apply queue (settled(arg) after every job of it), the table's life
 * starting with how (PS_TABLE_DECLARE, _CONFIGURE or _RESTORE); applied:
 * the dense updates applied so far (a step after these commits the table).
 * Returns 0, -EEXIST when a table is built already, or a negative code with
 * nothing built. */
int ps_tensors_adopt(ps_tensors *t, const ps_model_spec *spec, ps_table_event how,
                     void (*settled)(void *arg), void *arg, uint64_t applied);
/* Frees what ps_tensors_adopt built; t holds no table after. */
void ps_tensors_free(ps_tensors *t);

/* The tensor chunk local is of. */
static inline const ps_tensor_spec *ps_tensors_of(const ps_tensors *t, int local)
{
    return &t->table.tensors[ps_shard_chunk(t->shard, local)->tensor_id];
}
/* Chunk local belongs to a buffer or a frozen tensor: never pushed. */
static inline int ps_tensors_chunk_static(const ps_tensors *t, int local)
{
    return ps_tensors_of(t, local)->kind != PS_KIND_PARAMETER;
}

/* Applies a lifecycle event and returns what it asks for; PS_TABLE_FILL
 * (every rank has joined: start) is carried out here, handing every
 * chunk's fill to the pool. */
ps_table_action ps_tensors_event(ps_tensors *t, ps_table_event ev);
/* A filling table is filled once every chunk's fill has run and every
 * initial value it waits for has come; a fill that failed asks for the
 * table's withdrawal instead: PS_TABLE_WITHDRAW, its reason in fill_why
 * (else PS_TABLE_KEEP). applied as for adopt: a step applied while chunks
 * were still filling commits the table once they all are. */
ps_table_action ps_tensors_settle(ps_tensors *t, uint64_t applied);
/* A step has been applied since the table was adopted: it is committed.
 * Looked at lazily, wherever the difference matters (a declarer leaving, a
 * checkpoint), rather than on every update. */
void ps_tensors_note_applied(ps_tensors *t, uint64_t applied);

/* Whether spec (a HELLO's declared table; NULL for a joiner) is rank 0's
 * and would outrank the table held, were they to differ: then the
 * comparison waits until every other check of the HELLO passed. */
int ps_tensors_may_outrank(const ps_tensors *t, uint32_t rank, int rank_live,
                           const ps_model_spec *spec);
/* spec's digest is the held table's. */
int ps_tensors_same(const ps_tensors *t, const ps_model_spec *spec);

#endif
