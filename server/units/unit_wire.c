/* Payload placement and push acknowledgements (see unit_wire.h). */
#include "unit_wire.h"

#include <stddef.h>

int ps_unit_wire_place(ps_buf_pool *pool, ps_peer *p, uint64_t bytes, const ps_frame_piece **pieces)
{
    ps_buf_pool_put(p->piece.base);
    p->piece.base = ps_buf_pool_get(pool, (size_t)bytes);
    if (p->piece.base == NULL)
        return 0;
    p->piece.len = (size_t)bytes;
    *pieces = &p->piece;
    return 1;
}

const uint8_t *ps_unit_wire_payload(const ps_peer *p, const ps_frame *f)
{
    return f->payload ? f->payload : p->piece.base;
}

void ps_unit_wire_done(ps_peer *p)
{
    ps_buf_pool_put(p->piece.base);
    p->piece.base = NULL;
}

void ps_unit_wire_ack(ps_peer *p, Shardps__Header *h, int dropped, int rejected, uint64_t staleness)
{
    h->status = dropped;
    h->rejected = (uint32_t)rejected;
    h->staleness = staleness > UINT32_MAX ? UINT32_MAX : (uint32_t)staleness;
    ps_peer_send(p, h);
}
