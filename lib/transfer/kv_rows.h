/* The client's embedding rows (kv_rows.c; the client's files are listed in
 * kv_state.h): the replies of its PULL_ROWS and PUSH_ROWS, which the front
 * routes here. The calls themselves are kv_client.h's. */
#ifndef PS_KV_ROWS_H
#define PS_KV_ROWS_H

#include "kv_state.h"

/* The place callback's share for a PULL_ROWS_REPLY (the front's,
 * transport.h): the rows land straight in the pull's destination when the
 * header matches the pull in flight; returns the pieces (1; *pieces: sv's
 * own, valid until the reply is handled) or 0. */
int ps__rows_place(ps__remote *sv, const Shardps__Header *h, const ps_frame_piece **pieces);
void ps__rows_on_reply(ps__remote *sv, const ps_frame *f);

#endif
