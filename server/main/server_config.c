/* shardps-server's key-value server configuration from the job (see
 * server_config.h). */
#include "server_config.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "auth.h"
#include "ps_error.h"
#include "ps_log.h"

/* Seconds as the milliseconds a timer takes, saturated. */
static uint32_t ps__ms(double seconds)
{
    return seconds * 1000 >= UINT32_MAX ? UINT32_MAX : (uint32_t)(seconds * 1000);
}

/* --apply-threads, auto settled: on 2 cores every core is already busy with
 * a loop or a worker, and handing updates to another thread measured 10-20%
 * slower (docs/performance.md). */
static int ps__apply_threads(int asked)
{
    int cores = (int)uv_available_parallelism();

    if (asked >= 0)
        return asked;
    return cores < 4 ? 0 : cores / 2 < 4 ? cores / 2 : 4;
}

int ps_server_config_build(ps_kv_server_config *cfg, const ps_job_options *o,
                           const ps_job_plan *plan, int server_index, char *err, size_t len)
{
    ps_optimizer_kind kind;
    int threads = ps__apply_threads(o->apply_threads);

    memset(cfg, 0, sizeof(*cfg));
    /* The table's choices are the parsers' names (job_kinds.h), so none of
     * the three can fail. */
    ps_optimizer_parse(o->optimizer, &kind);
    ps_optimizer_defaults(&cfg->opt, kind);
    cfg->opt.momentum = (float)o->momentum;
    cfg->opt.weight_decay = (float)o->weight_decay;
    ps_lr_schedule_parse(o->lr_schedule, &cfg->lr.kind);
    cfg->lr.base_lr = o->lr;
    cfg->lr.warmup_steps = (uint64_t)o->warmup_steps;
    cfg->lr.total_steps = (uint64_t)o->total_steps;
    cfg->lr.step_size = (uint64_t)o->lr_step_size;
    cfg->lr.gamma = o->lr_gamma;
    cfg->lr.min_lr = o->min_lr;
    /* The tensors come from the first worker's HELLO (or the checkpoint
     * restored), so this server serves any model its workers declare. */
    cfg->max_model_bytes = (size_t)o->max_model_bytes;
    cfg->server_index = server_index;
    cfg->num_servers = plan->num_servers;
    cfg->chunk_bytes = (size_t)o->chunk_bytes;
    cfg->world = o->workers;
    ps_mode_parse(o->mode, &cfg->mode);
    cfg->staleness = cfg->mode == PS_MODE_SYNC    ? 0
                     : cfg->mode == PS_MODE_ASYNC ? PS_STALENESS_UNBOUNDED
                                                  : (uint32_t)o->staleness;
    cfg->max_payload = (size_t)o->max_payload;
    cfg->quorum = o->sync_quorum;
    cfg->staleness_damping = o->staleness_damping;
    cfg->heartbeat_timeout_ms = ps__ms(o->heartbeat_timeout);
    cfg->rejoin_timeout_ms = ps__ms(o->rejoin_timeout);
    cfg->checkpoint_dir = o->checkpoint_dir;
    cfg->checkpoint_every = (uint32_t)o->checkpoint_every;
    cfg->checkpoint_seconds = o->checkpoint_seconds;
    cfg->keep_checkpoints = o->keep_checkpoints;
    cfg->reject_nonfinite = o->reject_nonfinite;
    cfg->max_connections = o->max_connections;
    cfg->handshake_timeout_ms = ps__ms(o->handshake_timeout);
    cfg->max_grad_norm = o->max_grad_norm;
    cfg->max_clock_lead = (uint64_t)o->max_clock_lead;
    cfg->max_row_ids = (uint64_t)o->max_row_ids;
    cfg->job_settings = plan->settings;
    cfg->pool_updates = threads > 0;
    cfg->pool_min_bytes = (size_t)o->apply_pool_min_bytes;
    if (threads > 0) {
        char n[16];
        snprintf(n, sizeof(n), "%d", threads);
        setenv("UV_THREADPOOL_SIZE", n, 1);
        ps_info("optimizer updates of chunks from %.0f bytes on %d threads",
                o->apply_pool_min_bytes, threads);
    } else {
        ps_info("optimizer updates on the event loop (--apply-threads to change)");
    }
    if (o->auth_token_file) {
        int loose = 0;
        if (ps_auth_load_key(o->auth_token_file, cfg->auth_key, &loose, err, len) < 0)
            return -PS_EUSAGE;
        cfg->auth = 1;
        if (loose)
            ps_warn("%s is readable by other users; chmod 600 it", o->auth_token_file);
    }
    return 0;
}
