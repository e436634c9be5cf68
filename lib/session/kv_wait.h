/* The client's waiting (kv_wait.c; the client's files are listed in
 * kv_state.h): the loop run until every request started is answered, each
 * server's deadline on what it owes, the heartbeats, a server's word on why
 * it holds our pull, and the program's stop flag. */
#ifndef PS_KV_WAIT_H
#define PS_KV_WAIT_H

#include <stdint.h>
#include <uv.h>

#include "kv_state.h"

/* The request timeout while no server has said how often it expects a
 * heartbeat (before the WELCOMEs, or servers without heartbeat timeouts). */
#define PS__DEFAULT_REQUEST_MS 30000

/* Runs the loop until nothing is outstanding or an error; returns c->error. */
int ps__wait_run(ps_kv_client *c);
/* Every server that welcomed us asked for them: heartbeats at least every
 * every_ms from now on (0: nothing asked). */
void ps__wait_keep_alive(ps_kv_client *c, uint32_t every_ms);
/* The automatic request timeout (no --request-timeout), once every server
 * has welcomed us: from the heartbeat intervals they asked for. */
void ps__wait_auto_timeout(ps_kv_client *c);
/* A frame came from sv: unless it only says why the server waits, part of
 * an answer, from which what sv owes us is counted anew. */
void ps__wait_heard(ps__remote *sv, const ps_frame *f);
/* WAITING: the server explains why it holds our pull; said in our log and
 * kept for a timeout's message. */
void ps__wait_on_waiting(ps__remote *sv, const ps_frame *f);
/* A timer callback that does nothing: the timer only wakes the loop. */
void ps__wait_on_deadline(uv_timer_t *t);

#endif
