/* The parameter server's network face: accepts workers, runs the handshake,
 * answers pulls and applies pushes to its shard under the configured
 * consistency.
 *
 * One mechanism serves every mode. A worker's clock at this server is the
 * number of steps whose gradients it has pushed for all of this server's keys.
 * A pull at clock t is answered once t - (lowest clock among live workers) <=
 * staleness; sync is staleness 0, async is unbounded. With staleness 0 pushes
 * for a step are averaged and applied once every live worker has pushed that
 * chunk; otherwise each push is applied as it arrives. A worker that leaves
 * (BYE, disconnect) stops counting toward both rules at once, so the others
 * never wait for it; one that joins later starts at the current clock.
 *
 * Training begins (pulls are answered) once all `world` ranks have said hello,
 * so every run sees the same sequence of barriers whatever the start-up order. */
#ifndef PS_KV_SERVER_H
#define PS_KV_SERVER_H

#include <stdint.h>
#include <uv.h>

#include "model_spec.h"
#include "optimizer.h"

#define PS_STALENESS_UNBOUNDED UINT32_MAX

typedef struct {
    ps_model_spec spec;
    ps_optimizer_config opt;
    int server_index;
    int num_servers;
    size_t chunk_bytes;
    int world;          /* workers expected */
    uint32_t staleness; /* 0 = sync; PS_STALENESS_UNBOUNDED = async */
    const char *mode;   /* name for logs and the Welcome: "sync", "async", "ssp" */
    size_t max_payload;
} ps_kv_server_config;

typedef struct ps_kv_server ps_kv_server;

/* Called each time the last live worker leaves once training has started
 * (every rank joined); the server stays usable, and a worker may rejoin, until
 * it is stopped. */
typedef void (*ps_kv_server_done_cb)(ps_kv_server *s, void *arg);

/* cfg is copied. Returns 0, -EINVAL or -ENOMEM. */
int ps_kv_server_init(ps_kv_server **out, uv_loop_t *loop, const ps_kv_server_config *cfg,
                      ps_kv_server_done_cb done, void *arg);
/* Binds and listens on addr; writes the port actually bound (useful with port
 * 0). Returns 0 or a negative libuv error; after an error, stop the server and
 * run the loop before closing it, as after a successful start. */
int ps_kv_server_start(ps_kv_server *s, const struct sockaddr *addr, int *bound_port);
/* Stops listening and closes every connection; returns at once, the handles
 * finish closing as the loop runs. */
void ps_kv_server_stop(ps_kv_server *s);
/* Frees the server; call after stop once the loop has run dry. */
void ps_kv_server_close(ps_kv_server *s);

/* Logs one summary line of what the server did. */
void ps_kv_server_log_summary(const ps_kv_server *s);

#endif
