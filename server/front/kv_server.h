/* The parameter server's network face: accepts workers, runs the handshake,
 * answers pulls and applies pushes to its shard under the configured
 * consistency.
 *
 * One mechanism serves every mode: a pull is answered once the weights it
 * asks for are fresh enough. With staleness 0 (sync) pushes for a step are
 * averaged and applied once per chunk when `quorum` live workers have pushed
 * it (default: all of them), and a pull for step t is answered once step t-1
 * is applied everywhere on this server. With staleness s > 0 (ssp) each push
 * is applied on arrival and a worker at clock c is answered once c - (lowest
 * clock among live workers) <= s; async is s unbounded. A worker that leaves
 * (BYE, disconnect, missed heartbeats) stops counting at once, so the others
 * never wait for it; one that joins later starts at the current clock.
 *
 * Every pull reply carries the clock of its weights and every push names the
 * clock it was computed on, so the server drops gradients for steps already
 * applied (backup workers) and measures each applied gradient's staleness:
 * the newest step already applied to that chunk minus the step the gradient
 * was computed on.
 *
 * Training begins (pulls are answered) once all `world` ranks are present (a
 * rank that left before counts as never having said hello), so every run
 * sees the same sequence of barriers whatever the start-up order. */
#ifndef PS_KV_SERVER_H
#define PS_KV_SERVER_H

#include <stdint.h>
#include <uv.h>

#include "kv_config.h"
#include "kv_types.h"

/* What the server has seen so far; a plain snapshot. */
typedef struct {
    uint64_t pushes, pulls, bytes_in, bytes_out, updates, dropped, refused, nonfinite;
    uint64_t unstable;  /* updates refused that would have made a chunk non-finite */
    uint64_t too_large; /* chunks refused by max_grad_norm */
    uint64_t staleness_count, staleness_max;
    uint64_t clock; /* steps applied (sync) or newest step applied (async, ssp) */
    double staleness_mean, staleness_p99;
    int live_workers;
    int lost_workers; /* ranks that left unfinished and did not rejoin in time */
    /* What this server holds: 0 until the tensors are declared. */
    int chunks;
    uint64_t weight_bytes; /* float32 weights of its chunks */
    uint64_t memory_bytes; /* weights, optimizer state and sync accumulators */
    /* Embedding rows (all row tables): requests served, rows carried, rows
     * requests refused (a NaN or Inf gradient, an ID named twice), and the
     * row stores' counters (server/rows/row_store.h). */
    int row_tables;
    uint64_t row_pulls, row_pushes, rows_out, rows_in, rows_refused;
    uint64_t rows_stored, rows_created, rows_admitted, rows_evicted, rows_memory;
} ps_kv_server_stats;

/* cfg is copied. Returns 0, -EINVAL or -ENOMEM. */
int ps_kv_server_init(ps_kv_server **out, uv_loop_t *loop, const ps_kv_server_config *cfg,
                      ps_kv_server_done_cb done, void *arg);
/* Binds and listens on addr; writes the port actually bound (useful with port
 * 0). Returns 0 or a negative libuv error; after an error, stop the server and
 * run the loop before closing it, as after a successful start. */
int ps_kv_server_start(ps_kv_server *s, const struct sockaddr *addr, int *bound_port);
/* Loads the newest usable checkpoint at or before max_clock from
 * cfg.checkpoint_dir; call before start. Returns 0, or a negative code with every refused file and
 * its reason in err (see ps_checkpoint_restore). */
int ps_kv_server_restore(ps_kv_server *s, uint64_t max_clock, char *err, size_t err_len);
/* Writes a checkpoint now (no-op without a checkpoint_dir). Returns 0 or a
 * negative errno (logged). */
int ps_kv_server_checkpoint(ps_kv_server *s, const char *why);

/* Calls cb (once) when the server is at a step boundary, where a checkpoint
 * resumes exactly: in sync mode, every chunk at one clock with nothing of
 * the next step accumulated, which the live workers reach by completing the
 * step in progress (the next step's pushes cannot start before it is
 * complete everywhere); in async and ssp mode, at once. If that has not
 * happened within timeout_ms (a worker stuck mid-step), cb is called all
 * the same and a warning says the state is mid-step. For a clean shutdown:
 * quiesce, then checkpoint and stop in cb. */
void ps_kv_server_quiesce(ps_kv_server *s, uint32_t timeout_ms, ps_kv_server_done_cb cb, void *arg);

/* Stops listening and closes every connection; returns at once, the handles
 * finish closing as the loop runs. */
void ps_kv_server_stop(ps_kv_server *s);
/* Frees the server; call after stop once the loop has run dry. */
void ps_kv_server_close(ps_kv_server *s);

/* One live worker as this server sees it; a plain snapshot. */
typedef struct {
    uint32_t rank;
    uint64_t clock;         /* steps it has pushed here (or joined at) */
    uint64_t pushes, pulls; /* requests served for it on this connection */
    uint64_t bytes_in, bytes_out;
    double seconds_since_seen; /* since its last frame */
    char peer[64];             /* "127.0.0.1:40000" */
} ps_kv_server_worker;

void ps_kv_server_stats_get(const ps_kv_server *s, ps_kv_server_stats *out);
/* Fills out for the live worker of this rank; returns 0, or -ENOENT when no
 * worker of that rank is live (or rank is out of range). */
int ps_kv_server_worker_get(const ps_kv_server *s, int rank, ps_kv_server_worker *out);
/* The configuration the server runs with (borrowed, lives as long as s). */
const ps_kv_server_config *ps_kv_server_config_get(const ps_kv_server *s);
/* Logs one summary line of what the server did. */
void ps_kv_server_log_summary(const ps_kv_server *s);

#endif
