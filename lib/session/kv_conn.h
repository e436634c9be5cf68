/* The client's connections (kv_conn.c; the client's files are listed in
 * kv_state.h): one per server, opened, retried with backoff, corked, and
 * judged when it closes. What arrives on one is handed to the front through
 * the client's hooks (ps__client_hooks). */
#ifndef PS_KV_CONN_H
#define PS_KV_CONN_H

#include "kv_state.h"

/* Opens sv's connection, the backoff starting afresh; retries a refused
 * connection until the connect deadline. Failure is recorded with
 * ps__failf. */
void ps__conn_open(ps__remote *sv);
/* A server refused us for now: closes sv's connection and tries again with
 * backoff until the connect deadline. Returns 1 when a retry is scheduled,
 * 0 when none is left. */
int ps__conn_retry_later(ps__remote *sv, const char *reason);
/* ps__conn_retry_later for a server that asked us to come back (-EAGAIN:
 * no tensors yet for a joiner, its handshake slots taken, a table being
 * withdrawn), saying now and then that it waits. Returns 1 when a retry is
 * scheduled. */
int ps__conn_wait_and_retry(ps__remote *sv, const char *reason);
/* Holds what is sent on sv's connection until ps__conn_uncork, so that
 * requests started before a wait leave together. */
void ps__conn_cork(ps__remote *sv);
/* Sends what requests wait on sv's connection (none: nothing to do). */
void ps__conn_uncork(ps__remote *sv);

#endif
