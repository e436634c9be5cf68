/* The client's handshake with each server (kv_handshake.c; the client's
 * files are listed in kv_state.h). The front hands each handler the frame
 * it routed there; whatever fails the handshake is recorded with ps__failf
 * or ps__distrust. */
#ifndef PS_KV_HANDSHAKE_H
#define PS_KV_HANDSHAKE_H

#include "kv_state.h"

/* Sends the HELLO (and, without auth, our TABLE) on sv's connection, just
 * opened: the front's on_open hook. */
void ps__hs_send_hello(ps__remote *sv);
/* AUTH_CHALLENGE: checks the server's proof and sends ours (then our TABLE). */
void ps__hs_on_challenge(ps__remote *sv, const ps_frame *f);
/* Joining: the job's table, sent just before the WELCOME. */
void ps__hs_on_table(ps__remote *sv, const ps_frame *f);
/* WELCOME: sv admits us; a joiner learns the job's table from it. Returns
 * 1 when it did (sv->hs.welcome then holds its mode, clock and heartbeat
 * interval), 0 when the client failed instead. */
int ps__hs_on_welcome(ps__remote *sv, const ps_frame *f);
/* REJECT or ERROR: a retry where the refusal is for now, else a failure. */
void ps__hs_on_refusal(ps__remote *sv, const ps_frame *f);

#endif
