/* Worker-side key-value client (see kv_client.h). Single-threaded: all I/O
 * happens inside ps_kv_client_connect / _wait on the client's private loop. */
#include "kv_client.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "auth.h"
#include "frame.h"
#include "half.h"
#include "partition.h"
#include "ps_error.h"
#include "ps_log.h"
#include "transport.h"

#define PS__WRITE_QUEUE_LIMIT ((size_t)1 << 30)
/* Pushed chunks smaller than this wait to share a write (see
 * ps__push_chunk): below it a system call costs more than the bytes. */
#define PS__CORK_BYTES ((size_t)64 << 10)

typedef struct ps_kv_client ps_kv_client;

typedef struct {
    ps_kv_client *cl;
    int index;
    char addr_text[96];
    struct sockaddr_storage addr;
    ps_conn *conn;
    int welcomed;
    uint64_t welcome_clock;
    uint32_t heartbeat_ms;
    uint64_t pulled_clock; /* clock of the weights in the last pull reply */
    uint64_t retry_ms;
    uv_timer_t retry;
    int retrying; /* this connection was refused for now; a new one is coming */
    uint8_t client_nonce[PS_AUTH_NONCE_BYTES];
    int server_proved; /* the server showed it holds the auth token */
    /* This server's keys in key order and their chunks. */
    int n_keys;
    uint64_t *keys;
    const ps_chunk **chunks;
    ps_frame_piece *pieces; /* where a pull reply's chunks land */
    size_t bytes;
    uint16_t *half;  /* --compress fp16: the push payloads (owned; see ps__push_chunk) */
    size_t *half_at; /* where chunk i's values start in half */
    /* Outstanding requests: at most one pull, and one push per chunk, whose
     * ids wait in push_ids (a ring of n_keys) since acks come in order. */
    uint64_t pull_id;
    uint64_t *push_ids;
    int push_head, push_n;
    float *const *pull_dest;
    int corked; /* requests wait on the connection until ps_kv_client_wait */
} ps__server;

struct ps_kv_client {
    uv_loop_t loop;
    ps_kv_client_config cfg;
    ps_partition *part;
    ps__server *servers;
    int n_servers;
    int n_timers; /* servers whose retry timer is initialised */
    uint64_t next_id;
    int outstanding;
    int error;
    uint64_t deadline_ms;
    int connecting;
    uv_timer_t heartbeat;
    int sync_mode; /* the servers average pushes per step (staleness 0) */
    int auth;
    uint8_t auth_key[PS_AUTH_KEY_BYTES];
    ps_kv_client_stats stats;
};

static void ps__fail(ps_kv_client *c, int err)
{
    if (c->error == 0)
        c->error = err;
}

/* The server proves it holds the token; we answer with our own proof. */
static void ps__handle_challenge(ps__server *sv, const ps_frame *f)
{
    ps_kv_client *c = sv->cl;
    const Shardps__Header *h = f->hdr;
    Shardps__Header r = SHARDPS__HEADER__INIT;
    uint8_t mac[PS_AUTH_MAC_BYTES];
    int rc;

    if (!c->auth) {
        ps_error("server %d (%s) requires authentication; start the worker with "
                 "--auth-token-file",
                 sv->index, sv->addr_text);
        ps__fail(c, -PS_EREJECTED);
        return;
    }
    if (h->auth_nonce.len != PS_AUTH_NONCE_BYTES ||
        !ps_auth_check(c->auth_key, "server", sv->client_nonce, h->auth_nonce.data,
                       h->auth_mac.data, h->auth_mac.len)) {
        ps_error("server %d (%s) could not prove it holds our auth token; refusing it (a "
                 "different token, or not this job's server)",
                 sv->index, sv->addr_text);
        ps__fail(c, -PS_EREJECTED);
        return;
    }
    sv->server_proved = 1;
    ps_auth_mac(c->auth_key, "worker", h->auth_nonce.data, sv->client_nonce, mac);
    r.type = SHARDPS__MSG_TYPE__AUTH_RESPONSE;
    r.request_id = h->request_id;
    r.auth_mac.len = PS_AUTH_MAC_BYTES;
    r.auth_mac.data = mac;
    rc = ps_conn_send(sv->conn, &r, NULL, 0, NULL, NULL);
    if (rc < 0)
        ps__fail(c, rc);
}

static void ps__handle_welcome(ps__server *sv, const ps_frame *f)
{
    const Shardps__Welcome *w = f->hdr->welcome;

    if (sv->cl->auth && !sv->server_proved) {
        ps_error("server %d (%s) does not authenticate; refusing to train against it (start it "
                 "with --auth-token-file)",
                 sv->index, sv->addr_text);
        ps__fail(sv->cl, -PS_EREJECTED);
        return;
    }

    if (w == NULL) {
        ps_error("server %d (%s) sent WELCOME without details", sv->index, sv->addr_text);
        ps__fail(sv->cl, -PS_EPROTO);
        return;
    }
    sv->welcomed = 1;
    sv->welcome_clock = w->clock;
    sv->pulled_clock = w->clock;
    sv->heartbeat_ms = w->heartbeat_ms;
    sv->cl->sync_mode = w->staleness == 0;
    sv->cl->connecting--;
    ps_debug("server %d (%s) welcomed us at clock %" PRIu64 ", mode %s", sv->index, sv->addr_text,
             w->clock, w->mode);
}

/* True when h answers the pull in flight with exactly the keys and bytes
 * asked for. */
static int ps__reply_matches(const ps__server *sv, const Shardps__Header *h)
{
    return sv->pull_dest != NULL && h->request_id == sv->pull_id &&
           h->n_keys == (size_t)sv->n_keys && h->payload_bytes == sv->bytes &&
           memcmp(h->keys, sv->keys, (size_t)sv->n_keys * sizeof(uint64_t)) == 0;
}

/* A pull reply that matches is read straight into the caller's tensors, one
 * piece per chunk, with no copy and no model-sized buffer of our own. */
static int ps__place_reply(ps_conn *conn, const Shardps__Header *h, const ps_frame_piece **pieces)
{
    ps__server *sv = ps_conn_data(conn);

    if (h->type != SHARDPS__MSG_TYPE__PULL_REPLY || !ps__reply_matches(sv, h))
        return 0;
    for (int i = 0; i < sv->n_keys; i++) {
        const ps_chunk *ch = sv->chunks[i];
        sv->pieces[i].base = sv->pull_dest[ch->tensor_id] + ch->offset;
        sv->pieces[i].len = ch->numel * sizeof(float);
    }
    *pieces = sv->pieces;
    return sv->n_keys;
}

/* Checks a pull reply against what was asked; it is already in place unless
 * it did not match. */
static void ps__handle_pull_reply(ps__server *sv, const ps_frame *f)
{
    const Shardps__Header *h = f->hdr;

    if (sv->pull_dest == NULL || h->request_id != sv->pull_id) {
        ps_error("server %d (%s) answered a pull we did not make", sv->index, sv->addr_text);
        ps__fail(sv->cl, -PS_EPROTO);
        return;
    }
    if (!ps__reply_matches(sv, h) || f->payload != NULL) {
        ps_error("server %d (%s) answered with other keys or sizes than requested", sv->index,
                 sv->addr_text);
        ps__fail(sv->cl, -PS_EPROTO);
        return;
    }
    sv->cl->stats.bytes_received += f->payload_len;
    sv->pulled_clock = h->clock;
    sv->pull_dest = NULL;
    sv->cl->outstanding--;
}

static void ps__on_retry(uv_timer_t *t);

/* A server refused us for now (our previous connection, from before a
 * reconnect, is still live there): try again with backoff until the connect
 * deadline. Returns 1 when a retry is scheduled. */
static int ps__retry_later(ps__server *sv, const char *reason)
{
    ps_kv_client *c = sv->cl;

    if (sv->welcomed || uv_now(&c->loop) + sv->retry_ms > c->deadline_ms)
        return 0;
    ps_debug("server %d (%s) asks us to retry: %s", sv->index, sv->addr_text, reason);
    sv->retrying = 1;
    ps_conn_close(sv->conn, 0);
    uv_timer_start(&sv->retry, ps__on_retry, sv->retry_ms, 0);
    sv->retry_ms = sv->retry_ms * 2 > 1000 ? 1000 : sv->retry_ms * 2;
    return 1;
}

static void ps__on_frame(ps_conn *conn, const ps_frame *f)
{
    ps__server *sv = ps_conn_data(conn);
    ps_kv_client *c = sv->cl;
    const Shardps__Header *h = f->hdr;

    switch (h->type) {
    case SHARDPS__MSG_TYPE__WELCOME:
        ps__handle_welcome(sv, f);
        break;
    case SHARDPS__MSG_TYPE__AUTH_CHALLENGE:
        ps__handle_challenge(sv, f);
        break;
    case SHARDPS__MSG_TYPE__REJECT:
        if (h->status == -EADDRINUSE && ps__retry_later(sv, h->reason))
            break;
        /* fall through */
    case SHARDPS__MSG_TYPE__ERROR:
        ps_error("server %d (%s) refused us: %s", sv->index, sv->addr_text,
                 h->reason && *h->reason ? h->reason : "(no reason given)");
        ps__fail(c, h->type == SHARDPS__MSG_TYPE__REJECT
                        ? -PS_EREJECTED
                        : (h->status < 0 ? h->status : -PS_EPROTO));
        break;
    case SHARDPS__MSG_TYPE__PULL_REPLY:
        ps__handle_pull_reply(sv, f);
        break;
    case SHARDPS__MSG_TYPE__PUSH_REPLY:
        if (sv->push_n == 0 || h->request_id != sv->push_ids[sv->push_head]) {
            ps_error("server %d (%s) acknowledged a push we did not make", sv->index,
                     sv->addr_text);
            ps__fail(c, -PS_EPROTO);
            break;
        }
        if (h->status > 0)
            c->stats.dropped += (uint64_t)h->status;
        c->stats.rejected += h->rejected;
        c->stats.acked++; /* a push frame carries one chunk */
        c->stats.staleness_sum += h->staleness;
        c->stats.staleness_count++;
        if (h->staleness > c->stats.staleness_max)
            c->stats.staleness_max = h->staleness;
        sv->push_head = (sv->push_head + 1) % sv->n_keys;
        sv->push_n--;
        c->outstanding--;
        break;
    default:
        ps_error("server %d (%s) sent unexpected message type %d", sv->index, sv->addr_text,
                 h->type);
        ps__fail(c, -PS_EPROTO);
        break;
    }
}

static void ps__on_close(ps_conn *conn, int err)
{
    ps__server *sv = ps_conn_data(conn);
    ps_kv_client *c = sv->cl;

    sv->conn = NULL;
    sv->corked = 0;
    if (err == 0 || sv->retrying)
        return;
    if (c->error == 0) {
        const char *detail = ps_conn_error(conn);
        ps_error("lost connection to server %d (%s): %s%s%s", sv->index, sv->addr_text,
                 ps_strerror(err), *detail ? ": " : "", detail);
    }
    ps__fail(c, err == -PS_ECLOSED ? -PS_ECLOSED : err);
}

static void ps__start_connect(ps__server *sv);

static void ps__on_retry(uv_timer_t *t)
{
    ps__server *sv = t->data;

    sv->retrying = 0;
    ps__start_connect(sv);
}

static void ps__on_connect(ps_conn *conn, int status, void *data)
{
    ps__server *sv = data;
    ps_kv_client *c = sv->cl;
    Shardps__Header h = SHARDPS__HEADER__INIT;
    Shardps__Hello hello = SHARDPS__HELLO__INIT;
    int rc;

    if (status < 0) {
        if (uv_now(&c->loop) + sv->retry_ms > c->deadline_ms) {
            ps_error("cannot reach server %d at %s: %s (gave up after the connect timeout; is "
                     "it running, and is the address right?)",
                     sv->index, sv->addr_text, uv_strerror(status));
            ps__fail(c, -PS_ETIMEOUT);
            return;
        }
        ps_debug("server %d (%s) not reachable yet (%s); retrying in %" PRIu64 " ms", sv->index,
                 sv->addr_text, uv_strerror(status), sv->retry_ms);
        uv_timer_start(&sv->retry, ps__on_retry, sv->retry_ms, 0);
        sv->retry_ms = sv->retry_ms * 2 > 1000 ? 1000 : sv->retry_ms * 2;
        return;
    }
    sv->conn = conn;
    hello.role = SHARDPS__ROLE__ROLE_WORKER;
    hello.rank = (uint32_t)c->cfg.rank;
    hello.world = (uint32_t)c->cfg.world;
    hello.model_fingerprint = ps_model_spec_fingerprint(&c->cfg.spec);
    hello.num_servers = (uint32_t)c->n_servers;
    hello.chunk_bytes = c->cfg.chunk_bytes;
    hello.server_index = (uint32_t)sv->index;
    hello.total_steps = c->cfg.total_steps;
    hello.job_settings = (char *)c->cfg.job_settings;
    sv->server_proved = 0;
    if (c->auth) {
        ps_auth_nonce(sv->client_nonce);
        hello.client_nonce.len = PS_AUTH_NONCE_BYTES;
        hello.client_nonce.data = sv->client_nonce;
    }
    h.type = SHARDPS__MSG_TYPE__HELLO;
    h.request_id = ++c->next_id;
    h.hello = &hello;
    rc = ps_conn_send(conn, &h, NULL, 0, NULL, NULL);
    if (rc < 0)
        ps__fail(c, rc);
}

static void ps__start_connect(ps__server *sv)
{
    ps_kv_client *c = sv->cl;
    ps_conn_config cc = {.on_frame = ps__on_frame,
                         .on_close = ps__on_close,
                         .place = ps__place_reply,
                         .max_payload = c->cfg.max_payload,
                         .max_write_queue = PS__WRITE_QUEUE_LIMIT};
    int rc = ps_conn_connect(&c->loop, (struct sockaddr *)&sv->addr, &cc, sv, ps__on_connect);

    if (rc < 0) {
        ps_error("cannot connect to server %d (%s): %s", sv->index, sv->addr_text, uv_strerror(rc));
        ps__fail(c, rc);
    }
}

int ps_kv_client_init(ps_kv_client **out, const ps_kv_client_config *cfg)
{
    ps_kv_client *c = calloc(1, sizeof(*c));
    int rc = -ENOMEM;

    if (c == NULL)
        return -ENOMEM;
    c->cfg = *cfg;
    c->cfg.servers = NULL;
    c->cfg.auth_key = NULL;
    if (cfg->auth_key) {
        c->auth = 1;
        memcpy(c->auth_key, cfg->auth_key, PS_AUTH_KEY_BYTES);
    }
    c->n_servers = cfg->n_servers;
    uv_loop_init(&c->loop);
    uv_timer_init(&c->loop, &c->heartbeat);
    c->heartbeat.data = c;
    rc = ps_partition_init(&c->part, &cfg->spec, cfg->n_servers, cfg->chunk_bytes);
    if (rc < 0)
        goto fail;
    rc = -ENOMEM;
    c->servers = calloc((size_t)cfg->n_servers, sizeof(*c->servers));
    if (c->servers == NULL)
        goto fail;
    for (int s = 0; s < cfg->n_servers; s++) {
        ps__server *sv = &c->servers[s];
        int n = ps_partition_server_chunk_count(c->part, s), k = 0;

        /* The previous server's address check left rc at 0. */
        rc = -ENOMEM;
        sv->cl = c;
        sv->index = s;
        snprintf(sv->addr_text, sizeof(sv->addr_text), "%s", cfg->servers[s]);
        uv_timer_init(&c->loop, &sv->retry);
        sv->retry.data = sv;
        c->n_timers = s + 1;
        sv->keys = calloc((size_t)n + 1, sizeof(*sv->keys));
        sv->chunks = calloc((size_t)n + 1, sizeof(*sv->chunks));
        sv->pieces = calloc((size_t)n + 1, sizeof(*sv->pieces));
        sv->push_ids = calloc((size_t)n + 1, sizeof(*sv->push_ids));
        sv->half_at = calloc((size_t)n + 1, sizeof(*sv->half_at));
        if (sv->keys == NULL || sv->chunks == NULL || sv->pieces == NULL || sv->push_ids == NULL ||
            sv->half_at == NULL)
            goto fail;
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
        if (cfg->compress == PS_COMPRESS_FP16 &&
            (sv->half = malloc(sv->bytes / 2 ? sv->bytes / 2 : 1)) == NULL)
            goto fail;
        rc = ps_parse_hostport(cfg->servers[s], &sv->addr, 0);
        if (rc < 0) {
            ps_error("server address '%s' is not HOST:PORT with a reachable host name",
                     cfg->servers[s]);
            rc = -EINVAL;
            goto fail;
        }
    }
    *out = c;
    return 0;
fail:
    ps_kv_client_abandon(c);
    return rc;
}

static void ps__on_heartbeat(uv_timer_t *t)
{
    ps_kv_client *c = t->data;

    for (int s = 0; s < c->n_servers; s++) {
        ps__server *sv = &c->servers[s];
        Shardps__Header h = SHARDPS__HEADER__INIT;

        if (sv->conn == NULL || !sv->welcomed || sv->heartbeat_ms == 0)
            continue;
        h.type = SHARDPS__MSG_TYPE__HEARTBEAT;
        if (ps_conn_send(sv->conn, &h, NULL, 0, NULL, NULL) < 0)
            ps__fail(c, -PS_ECLOSED);
    }
}

/* The loop only runs inside connect and wait, so the heartbeat timer fires
 * exactly while the worker is waiting on the servers; while it computes, its
 * pushes and pulls are its sign of life. */
static int ps__run_until_done(ps_kv_client *c)
{
    uint64_t every = 0;

    for (int s = 0; s < c->n_servers; s++)
        if (c->servers[s].heartbeat_ms && (every == 0 || c->servers[s].heartbeat_ms < every))
            every = c->servers[s].heartbeat_ms;
    if (every)
        uv_timer_start(&c->heartbeat, ps__on_heartbeat, every, every);
    while (c->error == 0 && (c->outstanding > 0 || c->connecting > 0))
        uv_run(&c->loop, UV_RUN_ONCE);
    uv_timer_stop(&c->heartbeat);
    return c->error;
}

int ps_kv_client_connect(ps_kv_client *c, uint64_t *start_clock)
{
    int rc;

    c->deadline_ms = uv_now(&c->loop) + (uint64_t)(c->cfg.connect_timeout_s * 1000);
    c->connecting = c->n_servers;
    for (int s = 0; s < c->n_servers; s++) {
        c->servers[s].retry_ms = 50;
        ps__start_connect(&c->servers[s]);
    }
    rc = ps__run_until_done(c);
    if (rc < 0)
        return rc;
    /* Servers advance independently, so a worker joining mid-run may be
     * welcomed at different clocks. In sync mode it starts at the lowest: each
     * push is labelled with the clock of the weights it came from, so every
     * server gets a gradient for its own current step. Elsewhere it starts at
     * the highest, and the others move its clock forward on its first pull. */
    *start_clock = c->servers[0].welcome_clock;
    for (int s = 1; s < c->n_servers; s++) {
        uint64_t w = c->servers[s].welcome_clock;
        if (c->sync_mode ? w < *start_clock : w > *start_clock)
            *start_clock = w;
    }
    return 0;
}

/* Requests started before wait leave together when it begins. */
static void ps__cork(ps__server *sv)
{
    if (!sv->corked)
        ps_conn_cork(sv->conn);
    sv->corked = 1;
}

static void ps__uncork(ps__server *sv)
{
    if (sv->corked && sv->conn)
        ps_conn_uncork(sv->conn);
    sv->corked = 0;
}

int ps_kv_client_pull(ps_kv_client *c, uint64_t clock, float *const *params)
{
    for (int s = 0; s < c->n_servers; s++) {
        ps__server *sv = &c->servers[s];
        Shardps__Header h = SHARDPS__HEADER__INIT;
        int rc;

        if (sv->n_keys == 0)
            continue;
        if (sv->conn == NULL || sv->pull_dest != NULL)
            return sv->conn == NULL ? -PS_ECLOSED : -EBUSY;
        h.type = SHARDPS__MSG_TYPE__PULL;
        h.request_id = ++c->next_id;
        h.clock = clock;
        h.n_keys = (size_t)sv->n_keys;
        h.keys = sv->keys;
        /* Held until wait, so it leaves with the push in one write. */
        ps__cork(sv);
        rc = ps_conn_send(sv->conn, &h, NULL, 0, NULL, NULL);
        if (rc < 0)
            return rc;
        sv->pull_id = h.request_id;
        sv->pull_dest = params;
        c->outstanding++;
    }
    return 0;
}

/* One frame per chunk, so a server applies each chunk as soon as it has
 * arrived, while the next one is still on the wire. Small frames wait for
 * wait() and leave with the pull in one write; a large one leaves now (with
 * any small ones before it), since its bytes are better on the wire than
 * queued behind the CRC of the next. */
static int ps__push_chunk(ps_kv_client *c, ps__server *sv, int i, const float *grad, uint64_t step)
{
    const ps_chunk *ch = sv->chunks[i];
    Shardps__Header h = SHARDPS__HEADER__INIT;
    ps_iov iov = {grad, ch->numel * sizeof(float)};
    int rc;

    if (sv->conn == NULL)
        return -PS_ECLOSED;
    if (sv->push_n == sv->n_keys)
        return -EBUSY;
    h.dtype = SHARDPS__DTYPE__DTYPE_F32;
    if (c->cfg.compress == PS_COMPRESS_FP16) {
        /* Each chunk has its own place in the server's buffer of halves,
         * since all of a step's chunks are in flight together; like the
         * gradients, it is borrowed by the send until wait returns. */
        uint16_t *half = sv->half + sv->half_at[i];
        ps_f32_to_f16(half, grad, ch->numel);
        iov.base = half;
        iov.len = ch->numel * sizeof(uint16_t);
        h.dtype = SHARDPS__DTYPE__DTYPE_F16;
    }
    h.type = SHARDPS__MSG_TYPE__PUSH;
    h.request_id = ++c->next_id;
    h.clock = step;
    h.n_keys = 1;
    h.keys = &sv->keys[i];
    if (iov.len < PS__CORK_BYTES)
        ps__cork(sv);
    else
        ps__uncork(sv);
    rc = ps_conn_send(sv->conn, &h, &iov, 1, NULL, NULL);
    if (rc < 0)
        return rc;
    sv->push_ids[(sv->push_head + sv->push_n) % sv->n_keys] = h.request_id;
    sv->push_n++;
    c->stats.bytes_sent += iov.len;
    c->outstanding++;
    return 0;
}

int ps_kv_client_push_tensor(ps_kv_client *c, int tensor_id, const float *grad)
{
    uint64_t step = ps_kv_client_weights_clock(c);

    if (tensor_id < 0 || tensor_id >= c->cfg.spec.n_tensors)
        return -EINVAL;
    for (int s = 0; s < c->n_servers; s++) {
        ps__server *sv = &c->servers[s];

        /* A server already past our step (it was restored less far back than
         * another, or we are a straggler) gets nothing this step: it waits
         * for us instead of running ahead, and the servers fall back into
         * step. */
        if (sv->n_keys == 0 || sv->pulled_clock != step)
            continue;
        for (int i = 0; i < sv->n_keys; i++) {
            int rc;
            if (sv->chunks[i]->tensor_id != (uint32_t)tensor_id)
                continue;
            rc = ps__push_chunk(c, sv, i, grad + sv->chunks[i]->offset, step);
            if (rc < 0)
                return rc;
        }
    }
    return 0;
}

int ps_kv_client_push(ps_kv_client *c, const float *const *grads)
{
    for (int t = c->cfg.spec.n_tensors - 1; t >= 0; t--) {
        int rc = ps_kv_client_push_tensor(c, t, grads[t]);
        if (rc < 0)
            return rc;
    }
    return 0;
}

int ps_kv_client_progress(ps_kv_client *c)
{
    uv_run(&c->loop, UV_RUN_NOWAIT);
    return c->error;
}

int ps_kv_client_wait(ps_kv_client *c)
{
    for (int s = 0; s < c->n_servers; s++)
        ps__uncork(&c->servers[s]);
    return ps__run_until_done(c);
}

uint64_t ps_kv_client_weights_clock(const ps_kv_client *c)
{
    uint64_t m = UINT64_MAX;

    for (int s = 0; s < c->n_servers; s++)
        if (c->servers[s].n_keys > 0 && c->servers[s].pulled_clock < m)
            m = c->servers[s].pulled_clock;
    return m == UINT64_MAX ? 0 : m;
}

void ps_kv_client_stats_get(const ps_kv_client *c, ps_kv_client_stats *out)
{
    *out = c->stats;
}

static void ps__on_bye_sent(ps_conn *conn, int status, void *arg)
{
    (void)status;
    (void)arg;
    ps_conn_close(conn, 0);
}

static void ps__client_free(ps_kv_client *c, int goodbye)
{
    if (c == NULL)
        return;
    uv_close((uv_handle_t *)&c->heartbeat, NULL);
    for (int s = 0; s < c->n_timers; s++) {
        ps__server *sv = &c->servers[s];
        Shardps__Header h = SHARDPS__HEADER__INIT;

        uv_close((uv_handle_t *)&sv->retry, NULL);
        if (sv->conn == NULL)
            continue;
        h.type = SHARDPS__MSG_TYPE__BYE;
        if (!goodbye || !sv->welcomed ||
            ps_conn_send(sv->conn, &h, NULL, 0, ps__on_bye_sent, NULL) < 0)
            ps_conn_close(sv->conn, 0);
    }
    /* Let the goodbyes reach the wire and every handle finish closing. */
    uv_run(&c->loop, UV_RUN_DEFAULT);
    uv_loop_close(&c->loop);
    for (int s = 0; c->servers && s < c->n_servers; s++) {
        free(c->servers[s].keys);
        free(c->servers[s].chunks);
        free(c->servers[s].pieces);
        free(c->servers[s].push_ids);
        free(c->servers[s].half);
        free(c->servers[s].half_at);
    }
    free(c->servers);
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
