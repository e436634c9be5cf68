/* What every unit's requests share on the wire: where a judged frame's
 * payload lands, and the acknowledgement of a push. A push (of chunks or
 * of rows) is read straight into a pooled buffer rather than the
 * connection's own, so its updates can keep it after the frame is handled
 * while the connection reads the next one; the reply to a push says what
 * became of it. */
#ifndef PS_UNIT_WIRE_H
#define PS_UNIT_WIRE_H

#include <stdint.h>

#include "buf_pool.h"
#include "peer.h"

/* The last step of the place callback for a judged frame: its payload of
 * bytes lands in a buffer of pool (p's, until taken or given back; the one
 * of a frame that was then not handled is given back first). Returns 1
 * with *pieces set, or 0 when the pool has no such buffer (the transport
 * then buffers it itself). */
int ps_unit_wire_place(ps_buf_pool *pool, ps_peer *p, uint64_t bytes,
                       const ps_frame_piece **pieces);
/* The frame's payload: where it was placed, or the connection's buffer. */
const uint8_t *ps_unit_wire_payload(const ps_peer *p, const ps_frame *f);
/* The handler is done with the frame: a placed buffer it did not take is
 * given back to the pool. */
void ps_unit_wire_done(ps_peer *p);
/* Acknowledges a push: h is the reply as far as its kind fills it (type,
 * request id, clock, and for rows the table and count); dropped (status),
 * rejected and the staleness (saturated to 32 bits) are added here. */
void ps_unit_wire_ack(ps_peer *p, Shardps__Header *h, int dropped, int rejected,
                      uint64_t staleness);

#endif
