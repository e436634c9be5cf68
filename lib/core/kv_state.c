/* The key-value client's shared state (kv_state.h): what every file of the
 * client calls down to. The client's first error, a server distrusted, the
 * chunk layout it shares with the servers, the reads of its state that the
 * interface offers (kv_client.h), and the freeing of everything it holds. */
#include "kv_state.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
int ps__state_layout(ps_kv_client *c)
{
    int rc = ps_partition_init(&c->part, &c->cfg.spec, c->n_servers, c->cfg.chunk_bytes);

    for (int t = 0; t < c->cfg.spec.n_tensors; t++)
        c->has_int64 |= c->cfg.spec.tensors[t].dtype == PS_DTYPE_I64;

    for (int s = 0; rc == 0 && s < c->n_servers; s++) {
        ps__remote *sv = &c->servers[s];
        ps__remote_share *sh = &sv->share;
        int n = ps_partition_server_chunk_count(c->part, s), k = 0;

        sh->keys = calloc((size_t)n + 1, sizeof(*sh->keys));
        sh->chunks = calloc((size_t)n + 1, sizeof(*sh->chunks));
        sh->pieces = calloc((size_t)n + 1, sizeof(*sh->pieces));
        sv->dense.pushes = calloc((size_t)n + 1, sizeof(*sv->dense.pushes));
        sh->half_at = calloc((size_t)n + 1, sizeof(*sh->half_at));
        if (sh->keys == NULL || sh->chunks == NULL || sh->pieces == NULL ||
            sv->dense.pushes == NULL || sh->half_at == NULL)
            return -ENOMEM;
        for (int i = 0; i < ps_partition_chunk_count(c->part); i++) {
            const ps_chunk *ch = ps_partition_chunk(c->part, i);
            if (ch->server != s)
                continue;
            sh->keys[k] = ch->key;
            sh->half_at[k] = sh->bytes / sizeof(float);
            sh->chunks[k++] = ch;
            sh->bytes += ch->numel * sizeof(float);
        }
        sh->n_keys = k;
        if (c->cfg.compress != PS_COMPRESS_NONE &&
            (sh->half = malloc(sh->bytes / 2 ? sh->bytes / 2 : 1)) == NULL)
            return -ENOMEM;
    }
    return rc;
}

size_t ps__state_reply_limit(const ps__remote *sv)
{
    return sv->share.bytes < sv->cl->cfg.max_payload ? sv->share.bytes : sv->cl->cfg.max_payload;
}

void ps__state_free(ps_kv_client *c)
{
    for (int s = 0; c->servers && s < c->n_servers; s++) {
        ps__remote *sv = &c->servers[s];
        free(sv->share.keys);
        free(sv->share.chunks);
        free(sv->share.pieces);
        free(sv->share.half);
        free(sv->share.half_at);
        free(sv->dense.pushes);
        ps_model_spec_free(&sv->hs.told);
    }
    free(c->servers);
    free(c->table_packed);
    ps_id_set_free(&c->rows.seen);
    free(c->rows.pushed);
    free(c->rows.buf);
    ps_model_spec_free(&c->cfg.spec);
    ps_partition_free(c->part);
    free(c);
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
