/* The partition every process derives on its own from (spec, server count,
 * chunk_bytes): tensors are cut into chunks small enough that every server
 * gets a share, and chunks are placed largest first on the least-loaded
 * server (longest-processing-time greedy), which keeps any two servers within
 * one chunk of each other. Chunks are stored in
 * key order with each tensor's first index, so a key is found in O(1). */
#include "partition.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>

#include "server_list.h"

/* With chunks of at most 1/k of the mean server load, the greedy placement
 * keeps the heaviest server within 1 + 1/(k - 1) of the lightest (the spread
 * is at most one chunk, and the lightest holds at least the mean minus one);
 * k = 8 gives 1.14. */
#define PS__SHARES_PER_SERVER 8
/* Below 4 KiB a chunk costs more in frames and jobs than it buys in balance. */
#define PS__MIN_CUT_ELEMS 1024

struct ps_partition {
    int n_servers;
    int n_tensors;
    int n_chunks;
    size_t chunk_elems;
    ps_chunk *chunks; /* key order */
    /* Tensor t's chunks are chunks[first[t] .. first[t + 1]). */
    int first[PS_MAX_TENSORS + 1];
    size_t *server_numel;
    int *server_chunks;
};

/* Largest first; equal sizes in key order so every process sorts alike. */
static int ps__cmp_size_desc(const void *a, const void *b)
{
    const ps_chunk *x = *(const ps_chunk *const *)a, *y = *(const ps_chunk *const *)b;

    if (x->numel != y->numel)
        return x->numel > y->numel ? -1 : 1;
    return x->key < y->key ? -1 : x->key > y->key;
}

/* Min-heap of server indices ordered by (load, index), so the least-loaded
 * server, lowest index among equals, is at the root. */
static int ps__less(const size_t *load, int a, int b)
{
    return load[a] < load[b] || (load[a] == load[b] && a < b);
}

static void ps__sift_down(int *heap, int n, const size_t *load)
{
    int i = 0;

    for (;;) {
        int l = 2 * i + 1, r = l + 1, m = i;
        if (l < n && ps__less(load, heap[l], heap[m]))
            m = l;
        if (r < n && ps__less(load, heap[r], heap[m]))
            m = r;
        if (m == i)
            return;
        int t = heap[i];
        heap[i] = heap[m];
        heap[m] = t;
        i = m;
    }
}

/* Cuts every tensor into chunks in key order. */
static void ps__cut(ps_partition *p, const ps_model_spec *spec, size_t chunk_elems)
{
    int c = 0;

    for (int t = 0; t < spec->n_tensors; t++) {
        size_t numel = spec->tensors[t].words;
        p->first[t] = c;
        for (size_t off = 0, i = 0; off < numel; off += chunk_elems, i++, c++) {
            ps_chunk *ch = &p->chunks[c];
            ch->tensor_id = (uint32_t)t;
            ch->chunk_index = (uint32_t)i;
            ch->key = ps_key_make(ch->tensor_id, ch->chunk_index);
            ch->offset = off;
            ch->numel = numel - off < chunk_elems ? numel - off : chunk_elems;
        }
    }
    p->first[spec->n_tensors] = c;
}

/* Places chunks largest first, each on the least-loaded server. The identity
 * array is the initial heap: all loads are zero, so index order is heap order. */
static int ps__partition_place(ps_partition *p)
{
    ps_chunk **order = malloc(sizeof(*order) * (size_t)(p->n_chunks ? p->n_chunks : 1));
    int *heap = malloc(sizeof(*heap) * (size_t)p->n_servers);
    int rc = -ENOMEM;

    if (!order || !heap)
        goto fail;
    for (int i = 0; i < p->n_chunks; i++)
        order[i] = &p->chunks[i];
    qsort(order, (size_t)p->n_chunks, sizeof(*order), ps__cmp_size_desc);
    for (int s = 0; s < p->n_servers; s++)
        heap[s] = s;
    for (int i = 0; i < p->n_chunks; i++) {
        int s = heap[0];
        order[i]->server = s;
        p->server_numel[s] += order[i]->numel;
        p->server_chunks[s]++;
        ps__sift_down(heap, p->n_servers, p->server_numel);
    }
    rc = 0;
fail:
    free(heap);
    free(order);
    return rc;
}

/* The cut size: chunk_bytes, or less so that every server gets a share. */
static size_t ps__cut_elems(const ps_model_spec *spec, int n_servers, size_t chunk_bytes)
{
    size_t limit = chunk_bytes / sizeof(float), total = 0, parts, share;

    for (int t = 0; t < spec->n_tensors; t++)
        total += spec->tensors[t].words;
    parts = (size_t)PS__SHARES_PER_SERVER * (size_t)n_servers;
    share = total / parts + !!(total % parts);
    if (share < PS__MIN_CUT_ELEMS)
        share = PS__MIN_CUT_ELEMS;
    return share < limit ? share : limit;
}

int ps_partition_init(ps_partition **out, const ps_model_spec *spec, int n_servers,
                      size_t chunk_bytes)
{
    size_t chunk_elems, n_chunks = 0;
    ps_partition *p = NULL;
    int rc;

    if (!out || !spec || n_servers < 1 || n_servers > PS_MAX_SERVERS ||
        chunk_bytes < sizeof(float) || spec->n_tensors < 0 || spec->n_tensors > PS_MAX_TENSORS)
        return -EINVAL;
    chunk_elems = ps__cut_elems(spec, n_servers, chunk_bytes);
    /* Chunks are counted in ints and indexed by 32 bits; refuse rather than
     * wrap for absurdly fine cuts of huge models. */
    for (int t = 0; t < spec->n_tensors; t++) {
        n_chunks += spec->tensors[t].words / chunk_elems + !!(spec->tensors[t].words % chunk_elems);
        if (n_chunks > INT_MAX)
            return -EINVAL;
    }

    rc = -ENOMEM;
    p = calloc(1, sizeof(*p));
    if (!p)
        goto fail;
    p->n_servers = n_servers;
    p->n_tensors = spec->n_tensors;
    p->n_chunks = (int)n_chunks;
    p->chunk_elems = chunk_elems;
    p->chunks = calloc(n_chunks ? n_chunks : 1, sizeof(*p->chunks));
    p->server_numel = calloc((size_t)n_servers, sizeof(*p->server_numel));
    p->server_chunks = calloc((size_t)n_servers, sizeof(*p->server_chunks));
    if (!p->chunks || !p->server_numel || !p->server_chunks)
        goto fail;
    ps__cut(p, spec, chunk_elems);
    rc = ps__partition_place(p);
    if (rc < 0)
        goto fail;
    *out = p;
    return 0;
fail:
    ps_partition_free(p);
    return rc;
}

void ps_partition_free(ps_partition *p)
{
    if (!p)
        return;
    free(p->server_chunks);
    free(p->server_numel);
    free(p->chunks);
    free(p);
}

int ps_partition_n_servers(const ps_partition *p)
{
    return p->n_servers;
}

int ps_partition_chunk_count(const ps_partition *p)
{
    return p->n_chunks;
}

size_t ps_partition_chunk_elems(const ps_partition *p)
{
    return p->chunk_elems;
}

const ps_chunk *ps_partition_chunk(const ps_partition *p, int i)
{
    return i >= 0 && i < p->n_chunks ? &p->chunks[i] : NULL;
}

const ps_chunk *ps_partition_find(const ps_partition *p, uint64_t key)
{
    uint64_t t = key >> 32, i = key & 0xffffffffu;

    if (t >= (uint64_t)p->n_tensors || i >= (uint64_t)(p->first[t + 1] - p->first[t]))
        return NULL;
    return &p->chunks[p->first[t] + (int)i];
}

size_t ps_partition_server_numel(const ps_partition *p, int s)
{
    return s >= 0 && s < p->n_servers ? p->server_numel[s] : 0;
}

int ps_partition_server_chunk_count(const ps_partition *p, int s)
{
    return s >= 0 && s < p->n_servers ? p->server_chunks[s] : 0;
}
