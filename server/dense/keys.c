/* A request's keys (see keys.h). */
#include "keys.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "ps_error.h"

int ps_keys_init(ps_keys *k, int n)
{
    k->seen = calloc((size_t)n + 1, sizeof(*k->seen));
    k->stamp = 0;
    k->n = n;
    return k->seen ? 0 : -ENOMEM;
}

void ps_keys_free(ps_keys *k)
{
    free(k->seen);
    memset(k, 0, sizeof(*k));
}

void ps_keys_begin(ps_keys *k)
{
    if (++k->stamp == 0) {
        memset(k->seen, 0, (size_t)k->n * sizeof(*k->seen));
        k->stamp = 1;
    }
}

long long ps_keys_resolve(ps_keys *k, const ps_shard *shard, int server_index, ps_peer *p,
                          const Shardps__Header *h, int *locals)
{
    long long bytes = 0;

    if (h->n_keys == 0 || h->n_keys > (size_t)k->n) {
        ps_peer_fail(p, -PS_EPROTO, "request names %zu keys; this server holds %d", h->n_keys,
                     k->n);
        return -1;
    }
    ps_keys_begin(k);
    for (size_t i = 0; i < h->n_keys; i++) {
        int local = ps_shard_find(shard, h->keys[i]);
        if (local < 0) {
            ps_peer_fail(p, -PS_EPROTO,
                         "key %" PRIu64 ":%" PRIu64 " is not held by server %d (wrong partition?)",
                         h->keys[i] >> 32, h->keys[i] & 0xffffffffu, server_index);
            return -1;
        }
        if (ps_keys_named(k, local)) {
            ps_peer_fail(p, -PS_EPROTO, "key %" PRIu64 ":%" PRIu64 " named twice in one request",
                         h->keys[i] >> 32, h->keys[i] & 0xffffffffu);
            return -1;
        }
        locals[i] = local;
        bytes += (long long)(ps_shard_chunk(shard, local)->numel * sizeof(float));
    }
    return bytes;
}
