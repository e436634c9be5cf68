/* A request's keys against this server's chunks: each must be one this
 * server holds, named once. Pulls and pushes resolve their keys here, below
 * them (kv_internal.h); this file calls only the peer's refusal. */
#include <inttypes.h>
#include <string.h>

#include "kv_internal.h"
#include "ps_error.h"

long long ps__resolve_keys(ps_kv_server *s, ps__peer *p, const Shardps__Header *h, int *locals)
{
    long long bytes = 0;

    if (h->n_keys == 0 || h->n_keys > (size_t)s->n_local) {
        ps__peer_fail(p, -PS_EPROTO, "request names %zu keys; this server holds %d", h->n_keys,
                      s->n_local);
        return -1;
    }
    /* One stamp per request marks the chunks it named, so a repeat is seen
     * without clearing a table every time. */
    if (++s->seen_stamp == 0) {
        memset(s->seen, 0, (size_t)s->n_local * sizeof(*s->seen));
        s->seen_stamp = 1;
    }
    for (size_t i = 0; i < h->n_keys; i++) {
        int local = ps_shard_find(s->shard, h->keys[i]);
        if (local < 0) {
            ps__peer_fail(p, -PS_EPROTO,
                          "key %" PRIu64 ":%" PRIu64 " is not held by server %d (wrong partition?)",
                          h->keys[i] >> 32, h->keys[i] & 0xffffffffu, s->cfg.server_index);
            return -1;
        }
        if (s->seen[local] == s->seen_stamp) {
            ps__peer_fail(p, -PS_EPROTO, "key %" PRIu64 ":%" PRIu64 " named twice in one request",
                          h->keys[i] >> 32, h->keys[i] & 0xffffffffu);
            return -1;
        }
        s->seen[local] = s->seen_stamp;
        locals[i] = local;
        bytes += (long long)(ps_shard_chunk(s->shard, local)->numel * sizeof(float));
    }
    return bytes;
}
