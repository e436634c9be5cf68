/* The server's observability: a Prometheus text endpoint (/metrics, format
 * 0.0.4, served by libmicrohttpd) and a JSON-lines file written at a fixed
 * interval, both fed from the same snapshot of the kv server.
 *
 * The kv server lives on one libuv loop and is not thread-safe, so this module
 * reads it only through its public snapshot functions, and only on the loop
 * thread. The HTTP side runs on libmicrohttpd's own thread and never touches
 * the server: it asks the loop for a fresh snapshot (uv_async_send), waits for
 * it under a mutex, and renders from its private copy. The loop therefore
 * never blocks on a scraper, and a scraper sees figures no older than the
 * request. */
#ifndef PS_METRICS_HTTP_H
#define PS_METRICS_HTTP_H

#include <stdint.h>
#include <sys/socket.h>
#include <uv.h>

#include "kv_server.h"

/* One server's figures at one moment; a plain value. */
typedef struct {
    double unix_time;
    int server_index, num_servers, world;
    char mode[16];
    ps_kv_server_stats stats;
    int n_workers;                /* live workers in workers[] */
    ps_kv_server_worker *workers; /* owned by whoever filled the snapshot */
} ps_metrics_snapshot;

typedef struct {
    const struct sockaddr *bind; /* address the endpoint binds, port ignored; NULL: 127.0.0.1 */
    int port;                    /* -1: no endpoint; 0: any free port */
    const char *file;  /* JSON-lines path, appended to (a restarted server goes on); NULL: none */
    double interval_s; /* between file lines; <= 0: 1 s */
} ps_metrics_config;

typedef struct ps_metrics ps_metrics;

/* Starts the endpoint and/or the file for srv on loop (the loop srv runs on).
 * srv is borrowed and must outlive ps_metrics_stop; cfg's strings are used
 * during the call only (bind too). Writes the bound HTTP port (or -1). Returns 0,
 * -ENOMEM, -errno of the file, or -EADDRINUSE/-EINVAL when the endpoint cannot
 * be started; on error no thread is left running, but handles may still be
 * closing: run the loop before closing it. Call on the loop thread. */
int ps_metrics_start(ps_metrics **out, uv_loop_t *loop, const ps_kv_server *srv,
                     const ps_metrics_config *cfg, int *bound_port);
/* Writes the final file line, stops the HTTP thread and closes the loop
 * handles; the memory is freed once the loop has run their close callbacks.
 * Call on the loop thread, before srv is closed. NULL is a no-op. */
void ps_metrics_stop(ps_metrics *m);

/* Rendering, exposed for tests and tools. Each writes a malloc'd,
 * NUL-terminated text to *out (the caller frees it) and returns 0 or -ENOMEM. */
int ps_metrics_render_prometheus(const ps_metrics_snapshot *s, char **out, size_t *len);
/* One JSON object without a newline; elapsed is seconds since the start. */
int ps_metrics_render_json(const ps_metrics_snapshot *s, double elapsed, int final, char **out,
                           size_t *len);

#endif
