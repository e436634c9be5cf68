/* The client's dense requests (kv_transfer.c; the client's files are listed
 * in kv_state.h): pulls, pushes and writes by key, and the replies that
 * complete them, which the front routes here. */
#ifndef PS_KV_TRANSFER_H
#define PS_KV_TRANSFER_H

#include "kv_state.h"

/* The place callback's share for a PULL_REPLY (the front's, transport.h):
 * the chunks land straight in the caller's tensors when the header matches
 * the pull in flight; returns the count of pieces (*pieces: sv's own array,
 * pointing into the caller's tensors, both valid until the reply is
 * handled), or 0 (into the connection's buffer). */
int ps__transfer_place(ps__remote *sv, const Shardps__Header *h, const ps_frame_piece **pieces);
void ps__transfer_on_pull_reply(ps__remote *sv, const ps_frame *f);
void ps__transfer_on_push_reply(ps__remote *sv, const ps_frame *f);
/* One WRITE to sv: initial, rank 0's initial values (every chunk of an
 * INIT_VALUES tensor); else the chunks of the buffers values gives (NULL
 * entries skipped). values[t]: tensor t's words, borrowed for the call (the
 * frame carries a copy). Returns 0 or a negative code (the client failed). */
int ps__transfer_write(ps__remote *sv, int initial, const void *const *values);

#endif
