/* WRITE frames: rank 0's initial values of INIT_VALUES tensors before the
 * table is set, and its buffers (BatchNorm's running statistics) once it is
 * filled. Every key and the payload are judged before anything is kept; the
 * values are then queued behind the chunk's fill and earlier updates (or,
 * before the fill is submitted, kept beside the chunk: values.h), so the
 * pulls numbered after a refresh see it; in sync mode a refresh rank 0 makes
 * during a step waits until that step is applied. int64 buffers are carried
 * as their bytes. */
#ifndef PS_WRITES_H
#define PS_WRITES_H

#include "peer.h"
#include "tensors.h"

/* Handles p's WRITE frame f against t, the steps applied to every chunk
 * being server_clock. Returns 0, or -1 after failing the peer. */
int ps_writes_handle(ps_tensors *t, ps_peer *p, const ps_frame *f, uint64_t server_clock);
/* Sync: the buffers' refreshes of the steps now applied (before
 * server_clock) are queued, ahead of the pulls of the next step. */
void ps_writes_release(ps_tensors *t, uint64_t server_clock);

#endif
