/* Worker-side key-value client (see kv_client.h). Single-threaded: all I/O
 * happens inside ps_kv_client_connect / _wait on the client's private loop. */
#include "kv_client.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "auth.h"
#include "frame.h"
#include "half.h"
#include "partition.h"
#include "ps_error.h"
#include "ps_log.h"
#include "server_reply.h"
#include "tensor_table.h"
#include "transport.h"

#define PS__WRITE_QUEUE_LIMIT ((size_t)1 << 30)
/* Pushed chunks smaller than this wait to share a write (see
 * ps__push_chunk): below it a system call costs more than the bytes. */
#define PS__CORK_BYTES ((size_t)64 << 10)
/* While a server cannot be reached, say so this often: each attempt would
 * flood the log, silence looks like a hang. */
#define PS__WAIT_LOG_MS 5000
/* The request timeout while no server has said how often it expects a
 * heartbeat (before the WELCOMEs, or servers without heartbeat timeouts). */
#define PS__DEFAULT_REQUEST_MS 30000
/* The automatic request timeout: 3 heartbeat timeouts of the servers, each 4
 * of the intervals their WELCOMEs ask for. A sync barrier waits at most about
 * one heartbeat timeout for a worker that stopped, so this is slack enough
 * for a barrier and short enough for a dead server. */
#define PS__AUTO_HEARTBEATS     12
#define PS__MIN_AUTO_REQUEST_MS 1000

typedef struct ps_kv_client ps_kv_client;

typedef struct {
    ps_kv_client *cl;
    int index;
    char addr_text[96];
    struct sockaddr_storage addr;
    ps_conn *conn;
    int welcomed;
    ps_reply_welcome welcome;
    uint64_t hello_id;
    uint64_t pulled_clock; /* clock of the weights in the last pull reply */
    int pulled;            /* a pull reply came on this connection */
    /* The time from which the answer this server owes us is counted: the
     * HELLO, the start of a wait, or its last frame, whichever is latest. */
    uint64_t owed_since_ms;
    uint64_t retry_ms;
    uint64_t next_wait_log_ms; /* loop time of the next "waiting for server" line */
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
    uint16_t *half;  /* --compress fp16/bf16: the push payloads (owned; see ps__push_chunk) */
    size_t *half_at; /* where chunk i's values start in half */
    /* Outstanding requests: at most one pull, and one push per chunk, which
     * wait in pushes (a ring of n_keys) since acks come in order. */
    ps_reply_pull pull;
    ps_reply_push *pushes;
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
    uv_timer_t deadline;   /* wakes the loop when a server's answer is overdue */
    uint64_t request_ms;   /* the request timeout in force */
    uint64_t max_clock;    /* the last step a server may report */
    int welcomes;          /* servers that welcomed us on this client */
    ps_reply_welcome mode; /* the first WELCOME's mode, which every server must share */
    int auth;
    uint8_t auth_key[PS_AUTH_KEY_BYTES];
    /* The config declared no tensors: the first WELCOME's table becomes
     * cfg.spec, every other server must hold the same, and the chunks are
     * laid out once all have welcomed us (ps__layout). */
    int joining;
    ps_kv_client_stats stats;
    char last_error[512]; /* the sentence behind error */
};

/* The client's first error, logged and kept for ps_kv_client_last_error (a
 * library user may not read our stderr); later ones only follow from it. */
__attribute__((format(printf, 3, 4))) static void ps__failf(ps_kv_client *c, int err,
                                                            const char *fmt, ...)
{
    va_list ap;

    if (c->error != 0)
        return;
    va_start(ap, fmt);
    vsnprintf(c->last_error, sizeof(c->last_error), fmt, ap);
    va_end(ap);
    ps_error("%s", c->last_error);
    c->error = err;
}

/* A server broke the protocol or lied: one line naming it, and the client
 * fails with -PS_EPROTO, which is never retried by reconnecting. */
static void ps__distrust(ps__server *sv, const char *why)
{
    ps__failf(sv->cl, -PS_EPROTO, "server %d (%s) %s; not trusting it", sv->index, sv->addr_text,
              why);
}

/* The server proves it holds the token; we answer with our own proof. */
static void ps__handle_challenge(ps__server *sv, const ps_frame *f)
{
    ps_kv_client *c = sv->cl;
    const Shardps__Header *h = f->hdr;
    Shardps__Header r = SHARDPS__HEADER__INIT;
    uint8_t mac[PS_AUTH_MAC_BYTES];
    int rc;

    if (sv->welcomed || sv->server_proved || h->request_id != sv->hello_id) {
        ps__distrust(sv, "sent an AUTH_CHALLENGE that answers no HELLO of ours");
        return;
    }
    if (!c->auth) {
        ps__failf(c, -PS_EREJECTED,
                  "server %d (%s) requires authentication; start the worker with "
                  "--auth-token-file",
                  sv->index, sv->addr_text);
        return;
    }
    if (h->auth_nonce.len != PS_AUTH_NONCE_BYTES ||
        !ps_auth_check(c->auth_key, "server", sv->client_nonce, h->auth_nonce.data,
                       h->auth_mac.data, h->auth_mac.len)) {
        ps__failf(c, -PS_EREJECTED,
                  "server %d (%s) could not prove it holds our auth token; refusing it (a "
                  "different token, or not this job's server)",
                  sv->index, sv->addr_text);
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
        ps__failf(c, rc, "cannot send our proof to server %d (%s): %s", sv->index, sv->addr_text,
                  ps_strerror(rc));
}

static void ps__on_heartbeat(uv_timer_t *t);

/* A joiner's tensors: those of the first server to welcome it, checked as a
 * server checks a declared table; every other server must hold the same. */
static int ps__learn_table(ps__server *sv, const Shardps__TensorTable *t)
{
    ps_kv_client *c = sv->cl;
    ps_model_spec spec;
    char why[256], side[128];

    if (t == NULL || t->n_tensors == 0) {
        ps__distrust(sv, "sent a WELCOME without the tensor table we joined to learn");
        return -1;
    }
    if (ps_tensor_table_from_wire(t, 0, &spec, why, sizeof(why)) < 0) {
        char text[320];
        snprintf(text, sizeof(text), "sent a tensor table that fails our checks (%s)", why);
        ps__distrust(sv, text);
        return -1;
    }
    /* A pull reply carries a server's whole share in one frame of at most
     * max_payload: a larger table cannot be served to us by these servers. */
    if (spec.total_numel > c->cfg.max_payload / sizeof(float) * (size_t)c->n_servers) {
        snprintf(why, sizeof(why),
                 "sent a table of %zu bytes, more than %d servers answer in frames of at most "
                 "%zu bytes (max-payload)",
                 spec.total_numel * sizeof(float), c->n_servers, c->cfg.max_payload);
        ps__distrust(sv, why);
        return -1;
    }
    if (c->welcomes == 0) {
        c->cfg.spec = spec;
        return 0;
    }
    snprintf(side, sizeof(side), "on server %d (%s)", sv->index, sv->addr_text);
    if (ps_tensor_table_diff(&spec, &c->cfg.spec, side, "on the first server to welcome us", why,
                             sizeof(why)) == 0)
        return 0;
    ps__failf(c, -PS_EMISMATCH,
              "the servers hold different tensor tables: %s; are they servers of one job?", why);
    return -1;
}

static void ps__handle_welcome(ps__server *sv, const ps_frame *f)
{
    ps_kv_client *c = sv->cl;
    ps_reply_welcome w;
    char why[256];

    if (sv->welcomed) {
        ps__distrust(sv, "sent a second WELCOME");
        return;
    }
    if (c->auth && !sv->server_proved) {
        ps__failf(c, -PS_EREJECTED,
                  "server %d (%s) does not authenticate; refusing to train against it (start it "
                  "with --auth-token-file)",
                  sv->index, sv->addr_text);
        return;
    }
    if (ps_reply_check_welcome(f, sv->hello_id, c->max_clock, &w, why, sizeof(why)) < 0) {
        ps__distrust(sv, why);
        return;
    }
    if (c->joining && ps__learn_table(sv, f->hdr->welcome->table) < 0)
        return;
    if (c->welcomes > 0 && w.staleness != c->mode.staleness) {
        snprintf(why, sizeof(why),
                 "runs with staleness %" PRIu32 " but another server of this job with %" PRIu32,
                 w.staleness, c->mode.staleness);
        ps__distrust(sv, why);
        return;
    }
    /* The other servers (or, joining, a declarer) may keep us longer than
     * this one's heartbeat timeout: it hears from us meanwhile. */
    if (w.heartbeat_ms && (!uv_is_active((uv_handle_t *)&c->heartbeat) ||
                           uv_timer_get_repeat(&c->heartbeat) > w.heartbeat_ms))
        uv_timer_start(&c->heartbeat, ps__on_heartbeat, w.heartbeat_ms, w.heartbeat_ms);
    c->mode = w;
    c->welcomes++;
    sv->welcomed = 1;
    sv->welcome = w;
    sv->pulled_clock = w.clock;
    c->connecting--;
    ps_debug("server %d (%s) welcomed us at clock %" PRIu64 ", mode %s", sv->index, sv->addr_text,
             w.clock, f->hdr->welcome->mode);
}

/* A pull reply whose header passes every check is read straight into the
 * caller's tensors, one piece per chunk, with no copy and no model-sized
 * buffer of our own. Anything else lands in the connection's buffer and is
 * refused when it is complete, so a lying header never touches a weight. */
static int ps__place_reply(ps_conn *conn, const Shardps__Header *h, const ps_frame_piece **pieces)
{
    ps__server *sv = ps_conn_data(conn);
    char why[256];

    if (h->type != SHARDPS__MSG_TYPE__PULL_REPLY || sv->pull_dest == NULL ||
        ps_reply_check_pull_header(h, &sv->pull, why, sizeof(why)) < 0)
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
 * it did not match. Weights that are not finite are refused after the fact:
 * the worker then fails and never computes on them. */
static void ps__handle_pull_reply(ps__server *sv, const ps_frame *f)
{
    char why[256];

    if (ps_reply_check_pull(f, sv->pull_dest ? &sv->pull : NULL, f->payload == NULL, why,
                            sizeof(why)) < 0) {
        ps__distrust(sv, why);
        return;
    }
    sv->cl->stats.bytes_received += f->payload_len;
    sv->pulled_clock = f->hdr->clock;
    sv->pulled = 1;
    sv->pull_dest = NULL;
    sv->cl->outstanding--;
}

static void ps__handle_push_reply(ps__server *sv, const ps_frame *f)
{
    ps_kv_client *c = sv->cl;
    const Shardps__Header *h = f->hdr;
    char why[256];

    if (ps_reply_check_push(f, sv->push_n ? &sv->pushes[sv->push_head] : NULL, why, sizeof(why)) <
        0) {
        ps__distrust(sv, why);
        return;
    }
    c->stats.dropped += (uint64_t)h->status;
    /* Rejected chunks are some of those not applied; never more. */
    c->stats.rejected += h->rejected < (uint32_t)h->status ? h->rejected : (uint32_t)h->status;
    c->stats.acked++; /* a push frame carries one chunk */
    c->stats.staleness_sum += h->staleness;
    c->stats.staleness_count++;
    if (h->staleness > c->stats.staleness_max)
        c->stats.staleness_max = h->staleness;
    sv->push_head = (sv->push_head + 1) % sv->n_keys;
    sv->push_n--;
    c->outstanding--;
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

/* A joiner reached a server that holds no tensors yet: wait for a worker to
 * declare them, saying so now and then, until the connect deadline. Returns 1
 * when a retry is scheduled. */
static int ps__wait_for_table(ps__server *sv, const char *reason)
{
    ps_kv_client *c = sv->cl;

    if (!ps__retry_later(sv, reason))
        return 0;
    if (uv_now(&c->loop) >= sv->next_wait_log_ms) {
        ps_info("waiting for server %d at %s (%.0f s left): %s", sv->index, sv->addr_text,
                (double)(c->deadline_ms - uv_now(&c->loop)) / 1000, reason);
        sv->next_wait_log_ms = uv_now(&c->loop) + PS__WAIT_LOG_MS;
    }
    return 1;
}

static void ps__handle_refusal(ps__server *sv, const ps_frame *f)
{
    const Shardps__Header *h = f->hdr;
    char reason[256];
    int rc = ps_reply_refusal(f, reason, sizeof(reason));

    if (h->type == SHARDPS__MSG_TYPE__REJECT) {
        /* A REJECT answers a HELLO: after the WELCOME, an ERROR says no. */
        if (sv->welcomed) {
            ps__distrust(sv, "sent a REJECT after welcoming us");
            return;
        }
        /* Our rank is live there. Rejoining, that may be our own old
         * connection not yet seen closing; otherwise another worker holds the
         * rank, and waiting would only hide the mistake. */
        if (h->status == -EADDRINUSE && sv->cl->cfg.rejoining && ps__retry_later(sv, reason))
            return;
        if (h->status == -EAGAIN && sv->cl->joining && ps__wait_for_table(sv, reason))
            return;
        if (h->status == -EAGAIN && sv->cl->joining) {
            ps__failf(sv->cl, -PS_ETIMEOUT,
                      "server %d (%s) still holds no tensors after the connect timeout (%.0f s): "
                      "no worker has declared the job's tensors, so there is nothing to join; "
                      "start a worker that declares them (or declare them here)",
                      sv->index, sv->addr_text, sv->cl->cfg.connect_timeout_s);
            return;
        }
        if (h->status == -EADDRINUSE && !sv->cl->cfg.rejoining && sv->cl->error == 0)
            ps_error("another worker already holds rank %d (is --rank right?)", sv->cl->cfg.rank);
    }
    ps__failf(sv->cl, rc, "server %d (%s) refused us: %s", sv->index, sv->addr_text, reason);
}

static void ps__on_frame(ps_conn *conn, const ps_frame *f)
{
    ps__server *sv = ps_conn_data(conn);
    ps_kv_client *c = sv->cl;
    const Shardps__Header *h = f->hdr;
    char why[128], name[32];

    if (c->error != 0)
        return;
    sv->owed_since_ms = uv_now(&c->loop);
    switch (h->type) {
    case SHARDPS__MSG_TYPE__WELCOME:
        ps__handle_welcome(sv, f);
        break;
    case SHARDPS__MSG_TYPE__AUTH_CHALLENGE:
        ps__handle_challenge(sv, f);
        break;
    case SHARDPS__MSG_TYPE__REJECT:
    case SHARDPS__MSG_TYPE__ERROR:
        ps__handle_refusal(sv, f);
        break;
    case SHARDPS__MSG_TYPE__PULL_REPLY:
        ps__handle_pull_reply(sv, f);
        break;
    case SHARDPS__MSG_TYPE__PUSH_REPLY:
        ps__handle_push_reply(sv, f);
        break;
    default:
        snprintf(why, sizeof(why), "sent a %s, which no server sends",
                 ps_reply_type_name(h->type, name, sizeof(name)));
        ps__distrust(sv, why);
        break;
    }
}

static void ps__on_close(ps_conn *conn, int err)
{
    ps__server *sv = ps_conn_data(conn);
    ps_kv_client *c = sv->cl;
    const char *detail = ps_conn_error(conn);

    sv->conn = NULL;
    sv->corked = 0;
    if (err == 0 || sv->retrying)
        return;
    /* Bytes that are not a frame (a bad length, version or checksum, or more
     * payload than any answer of ours can carry) are a broken server, not a
     * lost connection: reconnecting would meet the same server. */
    if (err == -PS_EPROTO || err == -PS_EVERSION || err == -PS_ETOOBIG || err == -PS_ECRC) {
        char why[320];
        snprintf(why, sizeof(why), "sent a malformed frame (%s%s%s)", ps_strerror(err),
                 *detail ? ": " : "", detail);
        ps__distrust(sv, why);
        return;
    }
    ps__failf(c, err, "lost connection to server %d (%s): %s%s%s", sv->index, sv->addr_text,
              ps_strerror(err), *detail ? ": " : "", detail);
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
    ps_tensor_table_wire table;
    int rc;

    if (status < 0) {
        if (uv_now(&c->loop) + sv->retry_ms > c->deadline_ms) {
            ps__failf(c, -PS_ETIMEOUT,
                      "cannot reach server %d at %s: %s (gave up after the connect timeout; is "
                      "it running, and is the address right?)",
                      sv->index, sv->addr_text, uv_strerror(status));
            return;
        }
        if (uv_now(&c->loop) >= sv->next_wait_log_ms) {
            ps_info("waiting for server %d at %s (%.0f s left): %s", sv->index, sv->addr_text,
                    (double)(c->deadline_ms - uv_now(&c->loop)) / 1000, uv_strerror(status));
            sv->next_wait_log_ms = uv_now(&c->loop) + PS__WAIT_LOG_MS;
        }
        uv_timer_start(&sv->retry, ps__on_retry, sv->retry_ms, 0);
        sv->retry_ms = sv->retry_ms * 2 > 1000 ? 1000 : sv->retry_ms * 2;
        return;
    }
    sv->conn = conn;
    hello.role = SHARDPS__ROLE__ROLE_WORKER;
    hello.rank = (uint32_t)c->cfg.rank;
    hello.world = (uint32_t)c->cfg.world;
    /* The tensors, declared to every server: the first HELLO a server gets
     * makes them the job's, and it refuses any other. A joiner sends none. */
    ps_tensor_table_to_wire(&c->cfg.spec, &table);
    hello.table = c->joining ? NULL : &table.msg;
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
    sv->hello_id = h.request_id;
    sv->owed_since_ms = uv_now(&c->loop);
    rc = ps_conn_send(conn, &h, NULL, 0, NULL, NULL);
    if (rc < 0)
        ps__failf(c, rc, "cannot send our HELLO to server %d (%s): %s", sv->index, sv->addr_text,
                  ps_strerror(rc));
}

static void ps__start_connect(ps__server *sv)
{
    ps_kv_client *c = sv->cl;
    /* No answer of a server carries more than a pull of all its keys: a
     * larger frame is refused before a byte of it is stored. Pulled weights
     * are scanned for Inf and NaN as they arrive. */
    ps_conn_config cc = {.on_frame = ps__on_frame,
                         .on_close = ps__on_close,
                         .place = ps__place_reply,
                         .max_payload =
                             sv->bytes < c->cfg.max_payload ? sv->bytes : c->cfg.max_payload,
                         .max_write_queue = PS__WRITE_QUEUE_LIMIT,
                         .scan_nonfinite = 1};
    int rc = ps_conn_connect(&c->loop, (struct sockaddr *)&sv->addr, &cc, sv, ps__on_connect);

    if (rc < 0)
        ps__failf(c, rc, "cannot connect to server %d (%s): %s", sv->index, sv->addr_text,
                  uv_strerror(rc));
}

/* Cuts cfg.spec into chunks exactly as the servers do (ps_partition: the
 * tensors, the server count and chunk_bytes, which every server checked in
 * our HELLO) and gives each server its keys. Returns 0 or a negative code. */
static int ps__layout(ps_kv_client *c)
{
    int rc = ps_partition_init(&c->part, &c->cfg.spec, c->n_servers, c->cfg.chunk_bytes);

    for (int s = 0; rc == 0 && s < c->n_servers; s++) {
        ps__server *sv = &c->servers[s];
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
    c->cfg = *cfg;
    c->cfg.servers = NULL;
    c->cfg.auth_key = NULL;
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
        ps__server *sv = &c->servers[s];

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

        if (sv->conn == NULL || !sv->welcomed || sv->welcome.heartbeat_ms == 0)
            continue;
        h.type = SHARDPS__MSG_TYPE__HEARTBEAT;
        if (ps_conn_send(sv->conn, &h, NULL, 0, NULL, NULL) < 0)
            ps__failf(c, -PS_ECLOSED, "cannot send a heartbeat to server %d (%s)", sv->index,
                      sv->addr_text);
    }
}

/* What sv owes us and since when it is overdue (UINT64_MAX: nothing owed). */
static uint64_t ps__owed_until(const ps__server *sv, const char **what)
{
    const ps_kv_client *c = sv->cl;
    uint64_t limit = c->request_ms;

    if (sv->conn == NULL || sv->retrying)
        return UINT64_MAX;
    if (!sv->welcomed) {
        *what = "its WELCOME";
    } else if (sv->pull_dest != NULL) {
        *what = "the answer to a pull";
        /* Before its first answer a server may be waiting for the whole job
         * to join, which may take as long as connecting does. */
        if (!sv->pulled)
            limit += (uint64_t)(c->cfg.connect_timeout_s * 1000);
    } else if (sv->push_n > 0) {
        *what = "the acknowledgement of a push";
    } else {
        return UINT64_MAX;
    }
    return sv->owed_since_ms + limit;
}

static uint64_t ps__next_deadline(ps_kv_client *c)
{
    uint64_t due = UINT64_MAX;
    const char *what;

    for (int s = 0; s < c->n_servers; s++) {
        uint64_t t = ps__owed_until(&c->servers[s], &what);
        if (t < due)
            due = t;
    }
    return due;
}

static void ps__on_deadline(uv_timer_t *t)
{
    /* Nothing to do here: waking the loop lets ps__run_until_done look. */
    (void)t;
}

/* A deadline passed. Whatever already arrived is read first: a process that
 * was stopped (SIGSTOP, a suspended VM) wakes with its timers overdue and the
 * server's answer, or the server closing on it, already in the socket. Only a
 * server still owing an answer after that has gone silent. */
static void ps__check_overdue(ps_kv_client *c)
{
    uv_run(&c->loop, UV_RUN_NOWAIT);
    uv_update_time(&c->loop);
    for (int s = 0; s < c->n_servers && c->error == 0; s++) {
        ps__server *sv = &c->servers[s];
        const char *what = "";
        uint64_t due = ps__owed_until(sv, &what);
        if (due > uv_now(&c->loop))
            continue;
        ps__failf(c, -PS_ETIMEOUT,
                  "server %d (%s) sent nothing for %.1f s while we waited for %s (request timeout "
                  "%.1f s, --request-timeout); giving up on it",
                  sv->index, sv->addr_text, (double)(uv_now(&c->loop) - sv->owed_since_ms) / 1000,
                  what, (double)c->request_ms / 1000);
    }
}

/* The loop only runs inside connect and wait, so the heartbeat timer fires
 * exactly while the worker is waiting on the servers; while it computes, its
 * pushes and pulls are its sign of life. */
static int ps__run_until_done(ps_kv_client *c)
{
    uint64_t every = 0;

    /* The loop's clock stood still while the worker computed. */
    uv_update_time(&c->loop);
    for (int s = 0; s < c->n_servers; s++) {
        ps__server *sv = &c->servers[s];
        uint32_t hb = sv->welcome.heartbeat_ms;
        if (hb && (every == 0 || hb < every))
            every = hb;
        /* The server cannot answer before we wait: requests are corked. */
        if (sv->welcomed)
            sv->owed_since_ms = uv_now(&c->loop);
    }
    if (every)
        uv_timer_start(&c->heartbeat, ps__on_heartbeat, every, every);
    while (c->error == 0 && (c->outstanding > 0 || c->connecting > 0)) {
        uint64_t due = ps__next_deadline(c);
        uv_update_time(&c->loop);
        if (due <= uv_now(&c->loop)) {
            ps__check_overdue(c);
            continue;
        }
        if (due != UINT64_MAX)
            uv_timer_start(&c->deadline, ps__on_deadline, due - uv_now(&c->loop), 0);
        else
            uv_timer_stop(&c->deadline);
        uv_run(&c->loop, UV_RUN_ONCE);
    }
    uv_timer_stop(&c->deadline);
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
    if (c->joining && c->part == NULL) {
        rc = ps__layout(c);
        if (rc < 0) {
            ps__failf(c, rc,
                      "cannot lay out the %d tensors the servers hold in %zu-byte chunks: %s",
                      c->cfg.spec.n_tensors, c->cfg.chunk_bytes, ps_strerror(rc));
            return rc;
        }
        /* Connected before the answers' size was known. */
        for (int s = 0; s < c->n_servers; s++) {
            ps__server *sv = &c->servers[s];
            if (sv->conn)
                ps_conn_set_max_payload(
                    sv->conn, sv->bytes < c->cfg.max_payload ? sv->bytes : c->cfg.max_payload);
        }
    }
    if (c->cfg.request_timeout_s <= 0) {
        uint64_t hb = 0;
        for (int s = 0; s < c->n_servers; s++)
            if (c->servers[s].welcome.heartbeat_ms > hb)
                hb = c->servers[s].welcome.heartbeat_ms;
        c->request_ms = hb == 0 ? PS__DEFAULT_REQUEST_MS : hb * PS__AUTO_HEARTBEATS;
        if (c->request_ms < PS__MIN_AUTO_REQUEST_MS)
            c->request_ms = PS__MIN_AUTO_REQUEST_MS;
    }
    /* Servers advance independently, so a worker joining mid-run may be
     * welcomed at different clocks. In sync mode it starts at the lowest: each
     * push is labelled with the clock of the weights it came from, so every
     * server gets a gradient for its own current step. Elsewhere it starts at
     * the highest, and the others move its clock forward on its first pull. */
    *start_clock = c->servers[0].welcome.clock;
    for (int s = 1; s < c->n_servers; s++) {
        uint64_t w = c->servers[s].welcome.clock;
        if (c->mode.sync ? w < *start_clock : w > *start_clock)
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
        sv->pull.request_id = h.request_id;
        sv->pull.clock = clock;
        sv->pull.sync = c->mode.sync;
        sv->pull.max_clock = c->max_clock;
        sv->pull.n_keys = (size_t)sv->n_keys;
        sv->pull.keys = sv->keys;
        sv->pull.bytes = sv->bytes;
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
    if (c->cfg.compress != PS_COMPRESS_NONE) {
        /* Each chunk has its own place in the server's buffer of halves,
         * since all of a step's chunks are in flight together; like the
         * gradients, it is borrowed by the send until wait returns. */
        uint16_t *half = sv->half + sv->half_at[i];
        if (c->cfg.compress == PS_COMPRESS_BF16) {
            ps_f32_to_bf16(half, grad, ch->numel);
            h.dtype = SHARDPS__DTYPE__DTYPE_BF16;
        } else {
            ps_f32_to_f16(half, grad, ch->numel);
            h.dtype = SHARDPS__DTYPE__DTYPE_F16;
        }
        iov.base = half;
        iov.len = ch->numel * sizeof(uint16_t);
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
    sv->pushes[(sv->push_head + sv->push_n) % sv->n_keys] =
        (ps_reply_push){.request_id = h.request_id,
                        .clock = step,
                        .n_keys = 1,
                        .max_staleness = c->mode.sync ? 0 : c->max_clock};
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

const char *ps_kv_client_last_error(const ps_kv_client *c)
{
    if (c->error == 0)
        return "";
    return c->last_error[0] ? c->last_error : ps_strerror(c->error);
}

uint64_t ps_kv_client_weights_clock(const ps_kv_client *c)
{
    uint64_t m = UINT64_MAX;

    for (int s = 0; s < c->n_servers; s++)
        if (c->servers[s].n_keys > 0 && c->servers[s].pulled_clock < m)
            m = c->servers[s].pulled_clock;
    return m == UINT64_MAX ? 0 : m;
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
        ps__server *sv = &c->servers[s];
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
