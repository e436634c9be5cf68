/* Chunk storage and update application for one server (see shard.h). */
#include "shard.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    ps_chunk desc;
    float *weights;
    float *state; /* optimizer state, NULL when the optimizer keeps none */
    float *accum; /* NULL unless with_accumulators */
    size_t state_n;
    uint64_t updates;
    /* What the checked update knows of weights and state; forgotten
     * whenever they are handed out to be written (ps_shard_*_mut). */
    ps_optimizer_bounds bounds;
} ps__shard_chunk;

struct ps_shard {
    ps_optimizer_config opt;
    /* Borrowed: the server's table, which outlives its shard; for the
     * initial values of chunks filled later. */
    const ps_model_spec *spec;
    int with_accumulators;
    int n;
    ps__shard_chunk *chunks;
    size_t memory_bytes;
};

void ps_shard_free(ps_shard *s)
{
    if (s == NULL)
        return;
    for (int i = 0; i < s->n; i++) {
        free(s->chunks[i].weights);
        free(s->chunks[i].state);
        free(s->chunks[i].accum);
    }
    free(s->chunks);
    free(s);
}

int ps_shard_init(ps_shard **out, const ps_partition *part, int server_index,
                  const ps_model_spec *spec, const ps_optimizer_config *opt, int with_accumulators)
{
    ps_shard *s;
    int total = ps_partition_chunk_count(part);

    if (server_index < 0 || server_index >= ps_partition_n_servers(part))
        return -EINVAL;
    s = calloc(1, sizeof(*s));
    if (s == NULL)
        return -ENOMEM;
    s->opt = *opt;
    s->spec = spec;
    s->with_accumulators = with_accumulators;
    s->chunks =
        calloc((size_t)ps_partition_server_chunk_count(part, server_index) + 1, sizeof(*s->chunks));
    if (s->chunks == NULL) {
        free(s);
        return -ENOMEM;
    }
    for (int i = 0; i < total; i++) {
        const ps_chunk *c = ps_partition_chunk(part, i);
        ps__shard_chunk *sc;

        if (c->server != server_index)
            continue;
        sc = &s->chunks[s->n++];
        sc->desc = *c;
        sc->state_n = ps_optimizer_state_floats(opt, c->numel);
        s->memory_bytes += (c->numel * (with_accumulators ? 2 : 1) + sc->state_n) * sizeof(float);
    }
    *out = s;
    return 0;
}

int ps_shard_fill(ps_shard *s, int local, int initial_values)
{
    ps__shard_chunk *sc = &s->chunks[local];
    size_t n = sc->desc.numel;

    if (sc->weights)
        return 0;
    sc->weights = malloc(n * sizeof(float));
    if (sc->state_n)
        sc->state = calloc(sc->state_n, sizeof(float));
    if (s->with_accumulators)
        sc->accum = calloc(n, sizeof(float));
    if (sc->weights == NULL || (sc->state_n && sc->state == NULL) ||
        (s->with_accumulators && sc->accum == NULL)) {
        free(sc->weights);
        free(sc->state);
        free(sc->accum);
        sc->weights = sc->state = sc->accum = NULL;
        return -ENOMEM;
    }
    if (initial_values)
        ps_model_spec_init_values(s->spec, (int)sc->desc.tensor_id, sc->desc.offset, n,
                                  sc->weights);
    return 0;
}

int ps_shard_filled(const ps_shard *s, int local)
{
    return s->chunks[local].weights != NULL;
}

int ps_shard_chunk_count(const ps_shard *s)
{
    return s->n;
}

int ps_shard_find(const ps_shard *s, uint64_t key)
{
    int lo = 0, hi = s->n - 1;

    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        uint64_t k = s->chunks[mid].desc.key;
        if (k == key)
            return mid;
        if (k < key)
            lo = mid + 1;
        else
            hi = mid - 1;
    }
    return -1;
}

const ps_chunk *ps_shard_chunk(const ps_shard *s, int local)
{
    return &s->chunks[local].desc;
}

const float *ps_shard_weights(const ps_shard *s, int local)
{
    return s->chunks[local].weights;
}

size_t ps_shard_memory_bytes(const ps_shard *s)
{
    return s->memory_bytes;
}

void ps_shard_accumulate(ps_shard *s, int local, const float *g)
{
    ps__shard_chunk *c = &s->chunks[local];
    float *restrict acc = c->accum;
    size_t n = c->desc.numel;

    if (acc == NULL)
        return;
    for (size_t i = 0; i < n; i++)
        acc[i] += g[i];
}

int ps_shard_apply_accumulated(ps_shard *s, int local, int count, float lr)
{
    ps__shard_chunk *c = &s->chunks[local];
    float *restrict acc = c->accum;
    size_t n = c->desc.numel;
    float inv = 1.0f / (float)count;
    int rc;

    if (acc == NULL)
        return -ENOMEM;
    if (count > 1)
        for (size_t i = 0; i < n; i++)
            acc[i] *= inv;
    rc = ps_shard_apply_grad(s, local, acc, lr);
    memset(acc, 0, n * sizeof(float));
    return rc;
}

int ps_shard_apply_grad(ps_shard *s, int local, const float *g, float lr)
{
    ps__shard_chunk *c = &s->chunks[local];
    int rc;

    if (c->weights == NULL)
        return -ENOMEM;
    rc = ps_optimizer_apply_checked(&s->opt, lr, c->weights, c->state, g, c->desc.numel,
                                    c->updates + 1, &c->bounds);
    if (rc == 0)
        c->updates++;
    return rc;
}

uint64_t ps_shard_updates(const ps_shard *s, int local)
{
    return s->chunks[local].updates;
}

const float *ps_shard_state(const ps_shard *s, int local)
{
    return s->chunks[local].state;
}

size_t ps_shard_state_floats(const ps_shard *s, int local)
{
    return s->chunks[local].state_n;
}

float *ps_shard_weights_mut(ps_shard *s, int local)
{
    s->chunks[local].bounds.known = 0;
    return s->chunks[local].weights;
}

float *ps_shard_state_mut(ps_shard *s, int local)
{
    s->chunks[local].bounds.known = 0;
    return s->chunks[local].state;
}

void ps_shard_set_updates(ps_shard *s, int local, uint64_t updates)
{
    s->chunks[local].updates = updates;
}
