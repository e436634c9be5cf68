/* The key-value server's configuration: what shardps-server's one place
 * (main/server_config.c) or an embedding program sets before
 * ps_kv_server_init, which copies it. Beside the public API (kv_server.h)
 * rather than in it, so that every module of the server reads the same
 * settings without including the front that sequences them. */
#ifndef PS_KV_CONFIG_H
#define PS_KV_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "auth.h"
#include "consistency.h"
#include "job_kinds.h"
#include "lr_schedule.h"
#include "model_spec.h"
#include "optimizer.h"

typedef struct {
    /* The job's tensors when the embedding program declares them (read
     * during init only); NULL: the first worker's HELLO declares them. */
    const ps_model_spec *table;
    size_t max_model_bytes;  /* a declared table's float32 bytes at most; 0: no limit */
    ps_optimizer_config opt; /* the update rule; its rate per step comes from lr below */
    int server_index;
    int num_servers;
    size_t chunk_bytes;
    int world;          /* workers expected */
    uint32_t staleness; /* 0 = sync; PS_STALENESS_UNBOUNDED = async */
    ps_mode mode;       /* ps_mode_name gives its name for logs and the Welcome */
    size_t max_payload;
    int quorum;                    /* sync: pushes that complete a step; 0 = every live worker */
    uint32_t heartbeat_timeout_ms; /* a live worker silent this long leaves; 0 = never */
    /* A started rank that left without finishing is lost once it has not
     * rejoined for this long; the job then finishes without it. 0 = 30 s. */
    uint32_t rejoin_timeout_ms;
    int staleness_damping; /* async/ssp: scale the rate by 1 / (1 + staleness) */
    int reject_nonfinite;  /* drop pushes holding NaN or Inf (counted, logged) */
    int pool_updates;      /* large chunks' updates on libuv's thread pool; 0: all on the loop */
    size_t pool_min_bytes; /* with pool_updates: chunks from this size go to the pool */
    ps_lr_schedule lr;     /* the rate over steps, from base_lr (--lr) */
    const char *checkpoint_dir;    /* NULL: no checkpoints (borrowed, must outlive s) */
    uint32_t checkpoint_every;     /* steps between checkpoints; 0 = not by steps */
    double checkpoint_seconds;     /* seconds between checkpoints; 0 = not by time */
    int keep_checkpoints;          /* newest files kept per server */
    int auth;                      /* peers must prove they hold the token behind auth_key */
    int max_connections;           /* open connections at most, world of them for the workers, the
                                      rest for handshakes; 0 = 2 * world + 16 */
    uint32_t handshake_timeout_ms; /* before HELLO, mid-handshake, after a refusal; 0 = 10 s */
    /* A pull held this long by other workers is explained to its worker
     * (WAITING) and in the log, again at this interval; 0 = 5 s. */
    uint32_t wait_report_ms;
    double max_grad_norm;    /* refuse a chunk's gradient of larger L2 norm; 0 = no limit */
    uint64_t max_clock_lead; /* async, ssp: clocks a worker may be past this server; 0 = 1 +
                                checkpoint_every */
    uint64_t max_row_ids;    /* a rows request's IDs at most; 0 = 2^20 */
    uint8_t auth_key[PS_AUTH_KEY_BYTES];
    /* The job's settings (ps_job_settings_format); a worker whose HELLO
     * carries others is refused, each difference named. Borrowed; NULL: not
     * compared. */
    const char *job_settings;
} ps_kv_server_config;

#endif
