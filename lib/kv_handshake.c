/* The client's handshake with every server (kv_client_internal.h): the
 * HELLO that declares our tensors (or, joining, none), the auth challenge and
 * our proof, the WELCOME with the server's mode, clock and table (a joiner
 * learns the job's table from it, a declarer checks it is the one it
 * declared), a REJECT or ERROR that refuses us, and
 * ps_kv_client_connect, which runs it on every server and settles what the
 * WELCOMEs decide: a joiner's chunk layout, the request timeout, the clock we
 * start at. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <uv.h>

#include "kv_client_internal.h"
#include "ps_error.h"
#include "ps_log.h"
#include "tensor_table.h"

/* The automatic request timeout: 3 heartbeat timeouts of the servers, each 4
 * of the intervals their WELCOMEs ask for. A sync barrier waits at most about
 * one heartbeat timeout for a worker that stopped, so this is slack enough
 * for a barrier and short enough for a dead server. */
#define PS__AUTO_HEARTBEATS     12
#define PS__MIN_AUTO_REQUEST_MS 1000

/* Opens the handshake on sv's new connection. */
void ps__send_hello(ps__server *sv)
{
    ps_kv_client *c = sv->cl;
    Shardps__Header h = SHARDPS__HEADER__INIT;
    Shardps__Hello hello = SHARDPS__HELLO__INIT;
    ps_tensor_table_wire table;
    int rc;

    hello.role = c->cfg.evaluator ? SHARDPS__ROLE__ROLE_EVALUATOR : SHARDPS__ROLE__ROLE_WORKER;
    hello.rank = c->cfg.evaluator ? 0 : (uint32_t)c->cfg.rank;
    hello.world = c->cfg.evaluator ? 0 : (uint32_t)c->cfg.world;
    /* The tensors, declared to every server: the first HELLO a server gets
     * makes them the job's, and it refuses any other. A joiner sends none. */
    ps_tensor_table_to_wire(&c->cfg.spec, &table);
    hello.table = c->joining ? NULL : &table.msg;
    hello.num_servers = (uint32_t)c->n_servers;
    hello.chunk_bytes = c->cfg.chunk_bytes;
    hello.server_index = (uint32_t)sv->index;
    hello.total_steps = c->cfg.evaluator ? 0 : c->cfg.total_steps;
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
    rc = ps_conn_send(sv->conn, &h, NULL, 0, NULL, NULL);
    if (rc < 0)
        ps__failf(c, rc, "cannot send our HELLO to server %d (%s): %s", sv->index, sv->addr_text,
                  ps_strerror(rc));
}

/* The server proves it holds the token; we answer with our own proof. */
void ps__handle_challenge(ps__server *sv, const ps_frame *f)
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

/* The table a WELCOME carries, checked as a server checks a declared one
 * (and against what these servers can answer in one frame), whoever we
 * are: a joiner takes the first server's as the job's, and every other
 * server must hold the same; a declarer's servers must hold exactly the
 * table it declared, since a server that adopted another would have
 * refused its HELLO. */
static int ps__check_table(ps__server *sv, const Shardps__TensorTable *t)
{
    ps_kv_client *c = sv->cl;
    ps_model_spec spec;
    char why[256], text[320], side[128];

    if (t == NULL || t->n_tensors == 0) {
        ps__distrust(sv, c->joining ? "sent a WELCOME without the tensor table we joined to learn"
                                    : "sent a WELCOME without the tensor table it holds");
        return -1;
    }
    if (ps_tensor_table_from_wire(t, 0, &spec, why, sizeof(why)) < 0) {
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
    if (c->joining && c->welcomes == 0) {
        c->cfg.spec = spec;
        return 0;
    }
    snprintf(side, sizeof(side), "on server %d (%s)", sv->index, sv->addr_text);
    if (ps_tensor_table_diff(&spec, &c->cfg.spec, side,
                             c->joining ? "on the first server to welcome us" : "as we declared it",
                             why, sizeof(why)) == 0)
        return 0;
    if (c->joining) {
        ps__failf(c, -PS_EMISMATCH,
                  "the servers hold different tensor tables: %s; are they servers of one job?",
                  why);
        return -1;
    }
    snprintf(text, sizeof(text), "welcomed us with another tensor table than we declared: %s", why);
    ps__distrust(sv, text);
    return -1;
}

void ps__handle_welcome(ps__server *sv, const ps_frame *f)
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
    if (ps__check_table(sv, f->hdr->welcome->table) < 0)
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

void ps__handle_refusal(ps__server *sv, const ps_frame *f)
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
        /* -EAGAIN: come back (no tensors declared yet, for a joiner; all
         * handshake slots taken, or a table being withdrawn, for anyone),
         * until the connect deadline. */
        if (h->status == -EAGAIN && ps__wait_and_retry(sv, reason))
            return;
        if (h->status == -EAGAIN && sv->cl->joining && strstr(reason, "no tensor table yet")) {
            ps__failf(sv->cl, -PS_ETIMEOUT,
                      "server %d (%s) still holds no tensors after the connect timeout (%.0f s): "
                      "no worker has declared the job's tensors, so there is nothing to join; "
                      "start a worker that declares them (or declare them here)",
                      sv->index, sv->addr_text, sv->cl->cfg.connect_timeout_s);
            return;
        }
        if (h->status == -EAGAIN) {
            ps__failf(sv->cl, -PS_ETIMEOUT,
                      "server %d (%s) still asks us to come back after the connect timeout (%.0f "
                      "s): %s",
                      sv->index, sv->addr_text, sv->cl->cfg.connect_timeout_s, reason);
            return;
        }
        if (h->status == -EADDRINUSE && !sv->cl->cfg.rejoining && sv->cl->error == 0)
            ps_error("another worker already holds rank %d (is --rank right?)", sv->cl->cfg.rank);
    }
    ps__failf(sv->cl, rc, "server %d (%s) refused us: %s", sv->index, sv->addr_text, reason);
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
