/* What rank 0's values have left to do (see values.h). */
#include "values.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int ps_values_takes(const ps_shard *shard, const ps_model_spec *spec, int local)
{
    return spec->tensors[ps_shard_chunk(shard, local)->tensor_id].init == PS_INIT_VALUES;
}

int ps_values_init(ps_values *v, const ps_shard *shard, const ps_model_spec *spec)
{
    memset(v, 0, sizeof(*v));
    v->n = ps_shard_chunk_count(shard);
    v->written = calloc((size_t)v->n + 1, 1);
    v->pending = calloc((size_t)v->n + 1, sizeof(*v->pending));
    if (v->written == NULL || v->pending == NULL) {
        ps_values_free(v);
        return -ENOMEM;
    }
    for (int i = 0; i < v->n; i++)
        v->takes += ps_values_takes(shard, spec, i);
    v->left = v->takes;
    v->parked_tail = &v->parked;
    return 0;
}

void ps_values_free(ps_values *v)
{
    while (v->parked) {
        ps_values_refresh *r = v->parked;
        v->parked = r->next;
        free(r->vals);
        free(r);
    }
    for (int i = 0; v->pending && i < v->n; i++)
        free(v->pending[i]);
    free(v->pending);
    free(v->written);
    memset(v, 0, sizeof(*v));
}

int ps_values_wanted(const ps_values *v, const ps_table_life *life)
{
    return v->left > 0 && life->state != PS_TABLE_COMMITTED;
}

int ps_values_forget(ps_values *v, const ps_table_life *life)
{
    int forgotten = v->takes - v->left;

    if (forgotten == 0 || (life->state != PS_TABLE_DECLARED && life->state != PS_TABLE_FILLING))
        return 0;
    memset(v->written, 0, (size_t)v->n);
    v->left = v->takes;
    /* Declared, nothing is submitted yet: what came waits here alone.
     * Filling, each fill job reads its chunk's pending values on the pool
     * and ps_values_filled frees them; the copies already queued still
     * count in inflight and run before the next rank 0's. */
    for (int i = 0; life->state == PS_TABLE_DECLARED && i < v->n; i++) {
        free(v->pending[i]);
        v->pending[i] = NULL;
    }
    return forgotten;
}

int ps_values_done(const ps_values *v)
{
    return v->left == 0 && v->inflight == 0;
}

void ps_values_fill(const ps_values *v, ps_shard *shard, int local)
{
    if (v->pending[local] != NULL)
        memcpy(ps_shard_weights_mut(shard, local), v->pending[local],
               ps_shard_chunk(shard, local)->numel * sizeof(float));
}

void ps_values_filled(ps_values *v, int local)
{
    free(v->pending[local]);
    v->pending[local] = NULL;
}
