/* A request's keys against this server's chunks: each must be one this
 * server holds, named once. Pushes, pulls and WRITEs resolve their keys
 * here. One stamp per request marks the chunks it named, so a repeat is
 * seen without clearing a table every time. */
#ifndef PS_KEYS_H
#define PS_KEYS_H

#include <stdint.h>

#include "peer.h"
#include "shard.h"

typedef struct {
    uint32_t *seen; /* per local chunk: stamp of the request that last named it */
    uint32_t stamp;
    int n;
} ps_keys;

/* Marks for n chunks. Returns 0 or -ENOMEM. */
int ps_keys_init(ps_keys *k, int n);
void ps_keys_free(ps_keys *k);
/* A new request: no chunk is named in it yet. */
void ps_keys_begin(ps_keys *k);
/* Marks chunk local as named by this request; 1 when it was already. */
static inline int ps_keys_named(ps_keys *k, int local)
{
    if (k->seen[local] == k->stamp)
        return 1;
    k->seen[local] = k->stamp;
    return 0;
}

/* Resolves and checks a request's keys against shard (server server_index):
 * at least one, at most the shard's chunks, each held here and named once.
 * Fills locals; returns the float32 bytes they span, or -1 after failing
 * the peer. */
long long ps_keys_resolve(ps_keys *k, const ps_shard *shard, int server_index, ps_peer *p,
                          const Shardps__Header *h, int *locals);

#endif
