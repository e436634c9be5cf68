/* The client's handshake with every server (kv_client_internal.h): the
 * HELLO that declares our tensors by digest (or, joining, none), the auth
 * challenge and our proof, the TABLE frame with the declared table (sent
 * after the HELLO, or after the proof), the joiner's TABLE frame from the
 * server, the WELCOME with the server's mode, clock and table digest (a
 * joiner checks the table it was sent against it, a declarer that it is the
 * one it declared), a REJECT or ERROR that refuses us, and
 * ps_kv_client_connect, which runs it on every server and settles what the
 * WELCOMEs decide: a joiner's chunk layout, the request timeout, the clock we
 * start at. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
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

/* A declarer's table, once the server may read it: right after the HELLO,
 * or after our proof. The payload is the client's own, kept until it is
 * freed. */
static void ps__hs_send_table(ps__remote *sv)
{
    ps_kv_client *c = sv->cl;
    Shardps__Header h = SHARDPS__HEADER__INIT;
    ps_iov iov = {c->table_packed, c->table_len};
    int rc;

    if (c->joining)
        return;
    h.type = SHARDPS__MSG_TYPE__TABLE;
    h.request_id = sv->hello_id;
    rc = ps_conn_send(sv->conn, &h, &iov, 1, NULL, NULL);
    if (rc < 0)
        ps__failf(c, rc, "cannot send our tensor table to server %d (%s): %s", sv->index,
                  sv->addr_text, ps_strerror(rc));
}

/* Opens the handshake on sv's new connection. */
void ps__send_hello(ps__remote *sv)
{
    ps_kv_client *c = sv->cl;
    Shardps__Header h = SHARDPS__HEADER__INIT;
    Shardps__Hello hello = SHARDPS__HELLO__INIT;
    int rc;

    hello.role = c->cfg.evaluator ? SHARDPS__ROLE__ROLE_EVALUATOR : SHARDPS__ROLE__ROLE_WORKER;
    hello.rank = c->cfg.evaluator ? 0 : (uint32_t)c->cfg.rank;
    hello.world = c->cfg.evaluator ? 0 : (uint32_t)c->cfg.world;
    /* The tensors, declared to every server by digest, then in a TABLE
     * frame: the first a server gets makes them the job's, and it refuses
     * any other. A joiner (and an evaluator) declares none. */
    if (!c->joining) {
        hello.table_digest.len = PS_TABLE_DIGEST_BYTES;
        hello.table_digest.data = c->digest;
    }
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
    else if (!c->auth)
        ps__hs_send_table(sv);
}

/* The server proves it holds the token; we answer with our own proof. */
void ps__handle_challenge(ps__remote *sv, const ps_frame *f)
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
    else
        ps__hs_send_table(sv);
}

void ps__handle_told_table(ps__remote *sv, const ps_frame *f)
{
    ps_kv_client *c = sv->cl;
    char why[256], text[320];

    if (!c->joining || sv->welcomed || sv->told.n_tensors > 0 ||
        f->hdr->request_id != sv->hello_id || (c->auth && !sv->server_proved)) {
        ps__distrust(sv, "sent a TABLE that answers no HELLO of ours");
        return;
    }
    /* Checked as a server checks a declared one. */
    if (ps_tensor_table_decode(f->payload, f->payload_len, 0, &sv->told, why, sizeof(why)) < 0) {
        snprintf(text, sizeof(text), "sent a tensor table that fails our checks (%s)", why);
        ps__distrust(sv, text);
    }
}

/* The table a WELCOME names by digest, whoever we are: a joiner takes the
 * first server's (sent in its TABLE frame) as the job's, and every other
 * server must hold the same; a declarer's servers must hold exactly the
 * table it declared, since a server that adopted another would have
 * refused its HELLO. */
static int ps__hs_check_table(ps__remote *sv, const ProtobufCBinaryData *digest)
{
    ps_kv_client *c = sv->cl;
    uint8_t told[PS_TABLE_DIGEST_BYTES];
    char why[512], side[128];

    if (digest->len != PS_TABLE_DIGEST_BYTES) {
        ps__distrust(sv, "sent a WELCOME without the digest of the tensor table it holds");
        return -1;
    }
    if (!c->joining) {
        if (memcmp(digest->data, c->digest, PS_TABLE_DIGEST_BYTES) == 0)
            return 0;
        ps__distrust(sv, "welcomed us with another tensor table than we declared (its digest "
                         "differs)");
        return -1;
    }
    if (sv->told.n_tensors == 0) {
        ps__distrust(sv, "sent a WELCOME without the tensor table we joined to learn");
        return -1;
    }
    ps_model_spec_digest(&sv->told, told);
    if (memcmp(digest->data, told, PS_TABLE_DIGEST_BYTES) != 0) {
        ps__distrust(sv, "sent a WELCOME whose digest is not that of the table it sent");
        return -1;
    }
    /* A pull reply carries a server's whole share in one frame of at most
     * max_payload: a larger table cannot be served to us by these servers. */
    if (sv->told.total_words > c->cfg.max_payload / sizeof(float) * (size_t)c->n_servers) {
        snprintf(why, sizeof(why),
                 "sent a table of %zu bytes, more than %d servers answer in frames of at most "
                 "%zu bytes (max-payload)",
                 sv->told.total_words * sizeof(float), c->n_servers, c->cfg.max_payload);
        ps__distrust(sv, why);
        return -1;
    }
    if (c->welcomes == 0) {
        ps_model_spec_free(&c->cfg.spec);
        c->cfg.spec = sv->told;
        memset(&sv->told, 0, sizeof(sv->told));
        memcpy(c->digest, told, PS_TABLE_DIGEST_BYTES);
        return 0;
    }
    if (memcmp(told, c->digest, PS_TABLE_DIGEST_BYTES) == 0) {
        ps_model_spec_free(&sv->told);
        return 0;
    }
    snprintf(side, sizeof(side), "on server %d (%s)", sv->index, sv->addr_text);
    if (ps_tensor_table_diff(&sv->told, &c->cfg.spec, side, "on the first server to welcome us",
                             why, sizeof(why)) == 0)
        snprintf(why, sizeof(why), "their digests differ");
    ps_model_spec_free(&sv->told);
    ps__failf(c, -PS_EMISMATCH,
              "the servers hold different tensor tables: %s; are they servers of one job?", why);
    return -1;
}

void ps__handle_welcome(ps__remote *sv, const ps_frame *f)
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
    if (ps__hs_check_table(sv, &f->hdr->welcome->table_digest) < 0)
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

void ps__handle_refusal(ps__remote *sv, const ps_frame *f)
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
    for (int s = 0; s < c->n_servers; s++)
        if (c->servers[s].welcome.values_wanted &&
            (rc = ps__send_write(&c->servers[s], 1, c->cfg.values)) < 0)
            return rc;
    /* Borrowed for this call only. */
    c->cfg.values = NULL;
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
            ps__remote *sv = &c->servers[s];
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
