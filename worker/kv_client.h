/* The worker's view of the parameter servers: connects to every server,
 * handshakes, and moves whole models of weights and gradients by key.
 *
 * Requests are started without blocking (ps_kv_client_pull / _push) and
 * completed together by ps_kv_client_wait, which runs the client's own libuv
 * loop; so a push of step t and the pull of step t+1 travel at the same time.
 * Buffers passed to a request are borrowed until wait returns: a push sends
 * straight from the gradient buffers, a pull writes straight into the
 * parameter buffers. */
#ifndef PS_KV_CLIENT_H
#define PS_KV_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "model_spec.h"

typedef struct {
    ps_model_spec spec;
    int rank, world;
    const char *const *servers; /* "host:port", in server-index order; borrowed during init */
    int n_servers;
    size_t chunk_bytes;
    double connect_timeout_s; /* keep retrying refused connections this long */
    size_t max_payload;
} ps_kv_client_config;

typedef struct ps_kv_client ps_kv_client;

/* Resolves the server addresses. Returns 0, -EINVAL (an address that does not
 * parse; the message names it) or -ENOMEM. */
int ps_kv_client_init(ps_kv_client **out, const ps_kv_client_config *cfg);

/* Connects and handshakes with every server, retrying refused connections
 * until the timeout; writes the clock this worker starts at. Returns 0,
 * -PS_ETIMEOUT, -PS_EREJECTED (the server's reason is logged) or another
 * negative code. */
int ps_kv_client_connect(ps_kv_client *c, uint64_t *start_clock);

/* Starts pulling every tensor at clock into params[tensor_id]. */
int ps_kv_client_pull(ps_kv_client *c, uint64_t clock, float *const *params);
/* Starts pushing grads[tensor_id] as the gradients of step clock. */
int ps_kv_client_push(ps_kv_client *c, uint64_t clock, const float *const *grads);
/* Runs until every started request has completed. Returns 0 or the first
 * error (-PS_ECLOSED when a server went away, the server's code for a refused
 * request); errors are logged with the server's address. */
int ps_kv_client_wait(ps_kv_client *c);

/* Pushes dropped by servers as late so far (joined mid-step). */
uint64_t ps_kv_client_dropped(const ps_kv_client *c);
/* Payload bytes sent and received so far. */
uint64_t ps_kv_client_bytes_sent(const ps_kv_client *c);
uint64_t ps_kv_client_bytes_received(const ps_kv_client *c);

/* Says goodbye to every server (so barriers stop counting this worker at
 * once), closes the connections and frees the client. NULL is allowed. */
void ps_kv_client_close(ps_kv_client *c);

#endif
