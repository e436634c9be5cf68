/* The tensors this server holds (see tensors.h). Calls the partition, the
 * shard, the apply queue, the keys, the values and the table's life rules. */
#include "tensors.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps_error.h"
#include "ps_log.h"

void ps_tensors_init(ps_tensors *t, uv_loop_t *loop, const ps_kv_server_config *cfg)
{
    memset(t, 0, sizeof(*t));
    t->loop = loop;
    t->cfg = cfg;
}

void ps_tensors_free(ps_tensors *t)
{
    /* The values before the chunks they are counted by. */
    ps_values_free(&t->values);
    ps_keys_free(&t->keys);
    ps_apply_queue_close(t->updates);
    ps_buf_pool_close(t->bufs);
    t->bufs = NULL;
    ps_shard_free(t->shard);
    ps_partition_free(t->part);
    ps_model_spec_free(&t->table);
    t->updates = NULL;
    t->shard = NULL;
    t->part = NULL;
    t->n_local = t->n_pushable = 0;
    t->has_table = 0;
    t->fills_left = 0;
    t->fill_failed = 0;
    memset(&t->life, 0, sizeof(t->life));
}

int ps_tensors_adopt(ps_tensors *t, const ps_model_spec *spec, ps_table_event how,
                     void (*settled)(void *arg), void *arg, uint64_t applied)
{
    const ps_kv_server_config *cfg = t->cfg;
    int rc;

    if (t->has_table)
        return -EEXIST;
    rc = ps_model_spec_copy(&t->table, spec);
    if (rc < 0)
        goto fail;
    ps_model_spec_digest(&t->table, t->table_digest);
    rc = ps_partition_init(&t->part, &t->table, cfg->num_servers, cfg->chunk_bytes);
    if (rc < 0)
        goto fail;
    rc = ps_shard_init(&t->shard, t->part, cfg->server_index, &t->table, &cfg->opt,
                       cfg->staleness == 0);
    if (rc < 0)
        goto fail;
    t->n_local = ps_shard_chunk_count(t->shard);
    t->share = ps_partition_server_numel(t->part, cfg->server_index) * sizeof(float);
    rc = -ENOMEM;
    if (ps_buf_pool_init(&t->bufs, 2 * (size_t)cfg->world * t->share) < 0 ||
        ps_apply_queue_init(&t->updates, t->loop, t->n_local, settled, arg) < 0 ||
        ps_keys_init(&t->keys, t->n_local) < 0 ||
        ps_values_init(&t->values, t->shard, &t->table) < 0)
        goto fail;
    /* Buffers and frozen tensors are never pushed: their chunks hold no
     * step back. */
    t->n_pushable = t->n_local;
    for (int i = 0; i < t->n_local; i++)
        t->n_pushable -= ps_tensors_chunk_static(t, i);
    t->has_table = 1;
    t->applied_base = applied;
    ps_table_life_step(&t->life, how);
    return 0;
fail:
    ps_tensors_free(t);
    return rc;
}

void ps_tensors_note_applied(ps_tensors *t, uint64_t applied)
{
    if (t->life.state == PS_TABLE_FILLED && applied > t->applied_base)
        ps_table_life_step(&t->life, PS_TABLE_APPLIED);
}

/* One chunk's memory and initial values, made on the thread pool. */
typedef struct {
    ps_apply_job job;
    ps_tensors *t;
    ps_shard *shard;
    int local, rc;
} ps__tensors_fill;

static void ps__tensors_fill_run(ps_apply_job *j)
{
    ps__tensors_fill *f = (ps__tensors_fill *)j;

    /* A table withdrawn meanwhile is only drained: no memory for it. */
    if (!atomic_load_explicit(&f->t->fills_cancelled, memory_order_relaxed) &&
        (f->rc = ps_shard_fill(f->shard, f->local, 1)) == 0)
        ps_values_fill(&f->t->values, f->shard, f->local);
}

static void ps__tensors_fill_done(ps_apply_job *j)
{
    ps__tensors_fill *f = (ps__tensors_fill *)j;
    ps_tensors *t = f->t;

    /* A withdrawn table only drains. */
    if (t->life.state == PS_TABLE_FILLING && f->rc < 0 && !t->fill_failed) {
        t->fill_failed = 1;
        snprintf(t->fill_why, sizeof(t->fill_why), "no memory to fill chunk %d of this server's %d",
                 f->local, t->n_local);
    } else if (t->life.state == PS_TABLE_FILLING) {
        t->fills_left--;
        ps_values_filled(&t->values, f->local);
    }
    free(f);
}

/* Hands every chunk's fill to the thread pool (never run here: that is the
 * point), in the apply queue, so whatever is submitted for a chunk later
 * runs after its fill. */
static void ps__tensors_fill_all(ps_tensors *t)
{
    atomic_store(&t->fills_cancelled, 0);
    t->fills_left = t->n_local;
    for (int i = 0; i < t->n_local; i++) {
        ps__tensors_fill *f = calloc(1, sizeof(*f));
        if (f != NULL) {
            f->job.run = ps__tensors_fill_run;
            f->job.done = ps__tensors_fill_done;
            f->t = t;
            f->shard = t->shard;
            f->local = i;
        }
        if (f == NULL || ps_apply_queue_submit(t->updates, i, &f->job, 0) < 0) {
            free(f);
            t->fill_failed = 1;
            snprintf(t->fill_why, sizeof(t->fill_why), "no memory to fill its chunks");
            return;
        }
    }
}

ps_table_action ps_tensors_event(ps_tensors *t, ps_table_event ev)
{
    int action = ps_table_life_step(&t->life, ev);

    if (action == PS_TABLE_FILL)
        ps__tensors_fill_all(t);
    if (action == PS_TABLE_WITHDRAW)
        atomic_store(&t->fills_cancelled, 1);
    return action < 0 ? PS_TABLE_KEEP : (ps_table_action)action;
}

ps_table_action ps_tensors_settle(ps_tensors *t, uint64_t applied)
{
    if (t->life.state != PS_TABLE_FILLING)
        return PS_TABLE_KEEP;
    if (t->fill_failed)
        return ps_tensors_event(t, PS_TABLE_CHECK_FAILED);
    if (t->fills_left > 0 || !ps_values_done(&t->values))
        return PS_TABLE_KEEP;
    ps_table_life_step(&t->life, PS_TABLE_FILL_DONE);
    ps_tensors_note_applied(t, applied);
    ps_info("the %d chunks of this server are filled (%.1f MiB)", t->n_local,
            (double)ps_shard_memory_bytes(t->shard) / (1 << 20));
    return PS_TABLE_KEEP;
}

int ps_tensors_may_outrank(const ps_tensors *t, uint32_t rank, int rank_live,
                           const ps_model_spec *spec)
{
    return spec != NULL && rank == 0 && !rank_live && ps_table_life_may_outrank(&t->life);
}

int ps_tensors_same(const ps_tensors *t, const ps_model_spec *spec)
{
    uint8_t digest[PS_TABLE_DIGEST_BYTES];

    ps_model_spec_digest(spec, digest);
    return memcmp(digest, t->table_digest, sizeof(digest)) == 0;
}
