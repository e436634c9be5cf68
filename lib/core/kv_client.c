/* Worker-side key-value client (see kv_client.h): its creation and freeing,
 * the chunk layout it shares with the servers, and its first error. The rest
 * of the client lives beside it (kv_client_internal.h names the pieces).
 * Single-threaded: all I/O happens inside ps_kv_client_connect / _wait on the
 * client's private loop. */
#include "kv_client.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "kv_client_internal.h"
#include "ps_error.h"
#include "ps_log.h"

/* The client's first error, logged and kept for ps_kv_client_last_error (a
 * library user may not read our stderr); later ones only follow from it.
 * An evaluator loses its servers at the end of every job it follows: that
 * is how it learns the job is over, so a lost or refused connection is no
 * error there (its caller names the failures that are). */
void ps__failf(ps_kv_client *c, int err, const char *fmt, ...)
{
    va_list ap;

    if (c->error != 0)
        return;
    va_start(ap, fmt);
    vsnprintf(c->last_error, sizeof(c->last_error), fmt, ap);
    va_end(ap);
    if (c->cfg.evaluator && ps_error_is_connection_loss(err))
        ps_info("%s", c->last_error);
    else
        ps_error("%s", c->last_error);
    c->error = err;
}

/* A server broke the protocol or lied: one line naming it, and the client
 * fails with -PS_EPROTO, which is never retried by reconnecting. */
void ps__distrust(ps__remote *sv, const char *why)
{
    ps__failf(sv->cl, -PS_EPROTO, "server %d (%s) %s; not trusting it", sv->index, sv->addr_text,
              why);
}

/* Cuts cfg.spec into chunks exactly as the servers do (ps_partition: the
 * tensors, the server count and chunk_bytes, which every server checked in
 * our HELLO) and gives each server its keys. Returns 0 or a negative code. */
int ps__layout(ps_kv_client *c)
{
    int rc = ps_partition_init(&c->part, &c->cfg.spec, c->n_servers, c->cfg.chunk_bytes);

    for (int t = 0; t < c->cfg.spec.n_tensors; t++)
        c->has_int64 |= c->cfg.spec.tensors[t].dtype == PS_DTYPE_I64;

    for (int s = 0; rc == 0 && s < c->n_servers; s++) {
        ps__remote *sv = &c->servers[s];
        int n = ps_partition_server_chunk_count(c->part, s), k = 0;

        sv->keys = calloc((size_t)n + 1, sizeof(*sv->keys));
        sv->chunks = calloc((size_t)n + 1, sizeof(*sv->chunks));
        sv->pieces = calloc((size_t)n + 1, sizeof(*sv->pieces));
        sv->pushes = calloc((size_t)n + 1, sizeof(*sv->pushes));
        sv->half_at = calloc((size_t)n + 1, sizeof(*sv->half_at));
        if (sv->keys == NULL || sv->chunks == NULL || sv->pieces == NULL || sv->pushes == NULL ||
            sv->half_at == NULL)
            return -ENOMEM;
        for (int i = 0; i < ps_partition_chunk_count(c->part); i++) {
            const ps_chunk *ch = ps_partition_chunk(c->part, i);
            if (ch->server != s)
                continue;
            sv->keys[k] = ch->key;
            sv->half_at[k] = sv->bytes / sizeof(float);
            sv->chunks[k++] = ch;
            sv->bytes += ch->numel * sizeof(float);
        }
        sv->n_keys = k;
        if (c->cfg.compress != PS_COMPRESS_NONE &&
            (sv->half = malloc(sv->bytes / 2 ? sv->bytes / 2 : 1)) == NULL)
            return -ENOMEM;
    }
    return rc;
}

int ps_kv_client_init(ps_kv_client **out, const ps_kv_client_config *cfg)
{
    ps_kv_client *c = calloc(1, sizeof(*c));
    char err[256];
    int rc = -ENOMEM;

    if (c == NULL)
        return -ENOMEM;
    /* An evaluator reads the job's tensors; it has none of its own. */
    if (cfg->evaluator && cfg->spec.n_tensors > 0) {
        free(c);
        return -EINVAL;
    }
    c->cfg = *cfg;
    c->cfg.servers = NULL;
    c->cfg.auth_key = NULL;
    c->cfg.spec.tensors = NULL;
    if (ps_model_spec_copy(&c->cfg.spec, &cfg->spec) < 0) {
        free(c);
        return -ENOMEM;
    }
    if (cfg->auth_key) {
        c->auth = 1;
        memcpy(c->auth_key, cfg->auth_key, PS_AUTH_KEY_BYTES);
    }
    c->n_servers = cfg->n_servers;
    c->max_clock = cfg->total_steps ? cfg->total_steps : PS_REPLY_MAX_CLOCK;
    c->request_ms = cfg->request_timeout_s > 0 ? (uint64_t)(cfg->request_timeout_s * 1000)
                                               : PS__DEFAULT_REQUEST_MS;
    uv_loop_init(&c->loop);
    uv_timer_init(&c->loop, &c->heartbeat);
    c->heartbeat.data = c;
    uv_timer_init(&c->loop, &c->deadline);
    c->servers = calloc((size_t)cfg->n_servers, sizeof(*c->servers));
    if (c->servers == NULL)
        goto fail;
    for (int s = 0; s < cfg->n_servers; s++) {
        ps__remote *sv = &c->servers[s];

        sv->cl = c;
        sv->index = s;
        snprintf(sv->addr_text, sizeof(sv->addr_text), "%s", cfg->servers[s]);
        uv_timer_init(&c->loop, &sv->retry);
        sv->retry.data = sv;
        c->n_timers = s + 1;
        if (ps_parse_hostport(cfg->servers[s], &sv->addr, 0, err, sizeof(err)) < 0) {
            ps_error("server %d: %s", s, err);
            rc = -EINVAL;
            goto fail;
        }
    }
    c->joining = cfg->spec.n_tensors == 0;
    if (!c->joining && (rc = ps__layout(c)) < 0)
        goto fail;
    if (!c->joining) {
        rc = ps_tensor_table_pack(&c->cfg.spec, &c->table_packed, &c->table_len);
        if (rc == -E2BIG)
            ps_error("the tensor table packs into more than %zu bytes (PS_TABLE_MAX_BYTES)",
                     PS_TABLE_MAX_BYTES);
        if (rc < 0)
            goto fail;
        ps_model_spec_digest(&c->cfg.spec, c->digest);
    }
    *out = c;
    return 0;
fail:
    ps_kv_client_abandon(c);
    return rc;
}

const char *ps_kv_client_last_error(const ps_kv_client *c)
{
    if (c->error == 0)
        return "";
    return c->last_error[0] ? c->last_error : ps_strerror(c->error);
}

const ps_model_spec *ps_kv_client_spec(const ps_kv_client *c)
{
    return &c->cfg.spec;
}

void ps_kv_client_stats_get(const ps_kv_client *c, ps_kv_client_stats *out)
{
    *out = c->stats;
}

/* How long a client being freed lets what it queued reach the servers (see
 * ps__client_free) before it closes the connections regardless. */
#define PS__FLUSH_MS 2000

static void ps__on_bye_sent(ps_conn *conn, int status, void *arg)
{
    (void)status;
    (void)arg;
    ps_conn_close(conn, 0);
}

static int ps__any_connection(const ps_kv_client *c)
{
    for (int s = 0; s < c->n_timers; s++)
        if (c->servers[s].conn)
            return 1;
    return 0;
}

static void ps__client_free(ps_kv_client *c, int goodbye)
{
    uint64_t until;

    if (c == NULL)
        return;
    uv_close((uv_handle_t *)&c->heartbeat, NULL);
    /* Each connection closes once what was queued on it is written: the
     * goodbye, or (abandoning) the rest of a step's pushes, which must reach
     * the servers still up when another went away mid-step, or they would
     * be left a step behind it. A HEARTBEAT marks the end of the queue. */
    for (int s = 0; s < c->n_timers; s++) {
        ps__remote *sv = &c->servers[s];
        Shardps__Header h = SHARDPS__HEADER__INIT;

        uv_close((uv_handle_t *)&sv->retry, NULL);
        if (sv->conn == NULL)
            continue;
        /* Requests started and never waited for leave before the goodbye,
         * which would otherwise wait behind them for ever. */
        ps__uncork(sv);
        h.type = goodbye ? SHARDPS__MSG_TYPE__BYE : SHARDPS__MSG_TYPE__HEARTBEAT;
        if (!sv->welcomed || ps_conn_send(sv->conn, &h, NULL, 0, ps__on_bye_sent, NULL) < 0)
            ps_conn_close(sv->conn, 0);
    }
    /* Bounded: a server that stopped reading cannot hold us. */
    uv_update_time(&c->loop);
    until = uv_now(&c->loop) + PS__FLUSH_MS;
    uv_timer_start(&c->deadline, ps__on_deadline, PS__FLUSH_MS, 0);
    while (ps__any_connection(c) && uv_now(&c->loop) < until)
        uv_run(&c->loop, UV_RUN_ONCE);
    for (int s = 0; s < c->n_timers; s++)
        if (c->servers[s].conn)
            ps_conn_close(c->servers[s].conn, 0);
    uv_close((uv_handle_t *)&c->deadline, NULL);
    /* Let the goodbyes reach the wire and every handle finish closing. */
    uv_run(&c->loop, UV_RUN_DEFAULT);
    uv_loop_close(&c->loop);
    for (int s = 0; c->servers && s < c->n_servers; s++) {
        free(c->servers[s].keys);
        free(c->servers[s].chunks);
        free(c->servers[s].pieces);
        free(c->servers[s].pushes);
        free(c->servers[s].half);
        free(c->servers[s].half_at);
        ps_model_spec_free(&c->servers[s].told);
    }
    free(c->servers);
    free(c->table_packed);
    ps__rows_client_free(c);
    ps_model_spec_free(&c->cfg.spec);
    ps_partition_free(c->part);
    free(c);
}

void ps_kv_client_close(ps_kv_client *c)
{
    ps__client_free(c, 1);
}

void ps_kv_client_abandon(ps_kv_client *c)
{
    ps__client_free(c, 0);
}
