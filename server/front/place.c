/* Where a frame's payload lands: the transport's place callback, which
 * judges every frame that carries a payload on its header alone, before a
 * byte of it is stored (front.h). Changes nothing but the peer's placed
 * buffer, or fails the peer. */
#include "front.h"
#include "ps_error.h"
#include "unit_wire.h"
#include "validate.h"

/* Where a frame's payload lands; every frame with a payload is judged here,
 * on its header alone, before a byte of it is stored: a declarer's TABLE,
 * a PUSH (chunks.h), the rows requests (rows.h); initial values land in the
 * connection's buffer, and writes.h checks them against their keys (within
 * --max-payload, like a push). Any other type carries no payload. A
 * refusal (negative) stops the connection reading; the ERROR naming why
 * goes out first. */
int ps_front_place(ps_conn *c, const Shardps__Header *h, const ps_frame_piece **pieces)
{
    ps_peer *p = ps_conn_data(c);
    ps_kv_server *s = ps_front_of(p);
    char why[256];
    int rc;

    if (!p->failed && p->state == PS_PEER_TABLE) {
        rc = ps_validate_table_frame(h->type, h->n_keys, h->payload_bytes, why, sizeof(why));
        if (rc < 0)
            ps_peer_fail(p, rc, "%s", why);
        return rc;
    }
    /* An evaluator is told why nothing it sends carries a payload. */
    if (!p->failed && p->state == PS_PEER_EVALUATOR &&
        ps_validate_evaluator_type(h->type, why, sizeof(why)) < 0)
        ps_peer_fail(p, -PS_EPROTO, "%s", why);
    /* Nothing more is read from a peer already refused or gone. */
    if (p->failed || p->state != PS_PEER_WORKER)
        return -PS_EPROTO;
    if (h->type == SHARDPS__MSG_TYPE__WRITE)
        return 0;
    if (ps_validate_worker_type(h->type, why, sizeof(why)) < 0 ||
        (h->type != SHARDPS__MSG_TYPE__PUSH && h->type != SHARDPS__MSG_TYPE__PULL_ROWS &&
         h->type != SHARDPS__MSG_TYPE__PUSH_ROWS &&
         ps_validate_payload(h->type, h->dtype, h->unused, 0, h->payload_bytes, why, sizeof(why)) <
             0)) {
        ps_peer_fail(p, -PS_EPROTO, "%s", why);
        return -PS_EPROTO;
    }
    rc = h->type == SHARDPS__MSG_TYPE__PUSH ? ps_chunks_judge_push(&s->chunks, p, h)
         : h->type == SHARDPS__MSG_TYPE__PULL_ROWS || h->type == SHARDPS__MSG_TYPE__PUSH_ROWS
             ? ps_rows_judge(&s->rows, p, h)
             : 0;
    if (rc < 0)
        return rc;
    return ps_unit_wire_place(s->tensors.bufs, p, h->payload_bytes, pieces);
}
