/* The client's handshake with every server (kv_handshake.h): the HELLO
 * that declares our tensors by digest (or, joining, none), the auth
 * challenge and our proof, the TABLE frame with the declared table (sent
 * after the HELLO, or after the proof), the joiner's TABLE frame from the
 * server, the WELCOME with the server's mode, clock and table digest (a
 * joiner checks the table it was sent against it, a declarer that it is the
 * one it declared), and a REJECT or ERROR that refuses us, retried through
 * kv_conn.c where the refusal is for now. The front (kv_front.c) runs it on
 * every server and settles what the WELCOMEs decide. */
#include "kv_handshake.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "kv_conn.h"
#include "ps_error.h"
#include "ps_log.h"
#include "tensor_table.h"

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
    h.request_id = sv->hs.hello_id;
    rc = ps_conn_send(sv->link.conn, &h, &iov, 1, NULL, NULL);
    if (rc < 0)
        ps__failf(c, rc, "cannot send our tensor table to server %d (%s): %s", sv->index,
                  sv->addr_text, ps_strerror(rc));
}

/* Opens the handshake on sv's new connection. */
void ps__hs_send_hello(ps__remote *sv)
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
    sv->hs.server_proved = 0;
    if (c->auth) {
        ps_auth_nonce(sv->hs.client_nonce);
        hello.client_nonce.len = PS_AUTH_NONCE_BYTES;
        hello.client_nonce.data = sv->hs.client_nonce;
    }
    h.type = SHARDPS__MSG_TYPE__HELLO;
    h.request_id = ++c->next_id;
    h.hello = &hello;
    sv->hs.hello_id = h.request_id;
    sv->owed.since_ms = uv_now(&c->loop);
    rc = ps_conn_send(sv->link.conn, &h, NULL, 0, NULL, NULL);
    if (rc < 0)
        ps__failf(c, rc, "cannot send our HELLO to server %d (%s): %s", sv->index, sv->addr_text,
                  ps_strerror(rc));
    else if (!c->auth)
        ps__hs_send_table(sv);
}

/* The server proves it holds the token; we answer with our own proof. */
void ps__hs_on_challenge(ps__remote *sv, const ps_frame *f)
{
    ps_kv_client *c = sv->cl;
    const Shardps__Header *h = f->hdr;
    Shardps__Header r = SHARDPS__HEADER__INIT;
    uint8_t mac[PS_AUTH_MAC_BYTES];
    int rc;

    if (sv->hs.welcomed || sv->hs.server_proved || h->request_id != sv->hs.hello_id) {
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
        !ps_auth_check(c->auth_key, "server", sv->hs.client_nonce, h->auth_nonce.data,
                       h->auth_mac.data, h->auth_mac.len)) {
        ps__failf(c, -PS_EREJECTED,
                  "server %d (%s) could not prove it holds our auth token; refusing it (a "
                  "different token, or not this job's server)",
                  sv->index, sv->addr_text);
        return;
    }
    sv->hs.server_proved = 1;
    ps_auth_mac(c->auth_key, "worker", h->auth_nonce.data, sv->hs.client_nonce, mac);
    r.type = SHARDPS__MSG_TYPE__AUTH_RESPONSE;
    r.request_id = h->request_id;
    r.auth_mac.len = PS_AUTH_MAC_BYTES;
    r.auth_mac.data = mac;
    rc = ps_conn_send(sv->link.conn, &r, NULL, 0, NULL, NULL);
    if (rc < 0)
        ps__failf(c, rc, "cannot send our proof to server %d (%s): %s", sv->index, sv->addr_text,
                  ps_strerror(rc));
    else
        ps__hs_send_table(sv);
}

void ps__hs_on_table(ps__remote *sv, const ps_frame *f)
{
    ps_kv_client *c = sv->cl;
    char why[256], text[320];

    if (!c->joining || sv->hs.welcomed || sv->hs.told.n_tensors > 0 ||
        f->hdr->request_id != sv->hs.hello_id || (c->auth && !sv->hs.server_proved)) {
        ps__distrust(sv, "sent a TABLE that answers no HELLO of ours");
        return;
    }
    /* Checked as a server checks a declared one. */
    if (ps_tensor_table_decode(f->payload, f->payload_len, 0, &sv->hs.told, why, sizeof(why)) < 0) {
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
    if (sv->hs.told.n_tensors == 0) {
        ps__distrust(sv, "sent a WELCOME without the tensor table we joined to learn");
        return -1;
    }
    ps_model_spec_digest(&sv->hs.told, told);
    if (memcmp(digest->data, told, PS_TABLE_DIGEST_BYTES) != 0) {
        ps__distrust(sv, "sent a WELCOME whose digest is not that of the table it sent");
        return -1;
    }
    /* A pull reply carries a server's whole share in one frame of at most
     * max_payload: a larger table cannot be served to us by these servers. */
    if (sv->hs.told.total_words > c->cfg.max_payload / sizeof(float) * (size_t)c->n_servers) {
        snprintf(why, sizeof(why),
                 "sent a table of %zu bytes, more than %d servers answer in frames of at most "
                 "%zu bytes (max-payload)",
                 sv->hs.told.total_words * sizeof(float), c->n_servers, c->cfg.max_payload);
        ps__distrust(sv, why);
        return -1;
    }
    if (c->welcomes == 0) {
        ps_model_spec_free(&c->cfg.spec);
        c->cfg.spec = sv->hs.told;
        memset(&sv->hs.told, 0, sizeof(sv->hs.told));
        memcpy(c->digest, told, PS_TABLE_DIGEST_BYTES);
        return 0;
    }
    if (memcmp(told, c->digest, PS_TABLE_DIGEST_BYTES) == 0) {
        ps_model_spec_free(&sv->hs.told);
        return 0;
    }
    snprintf(side, sizeof(side), "on server %d (%s)", sv->index, sv->addr_text);
    if (ps_tensor_table_diff(&sv->hs.told, &c->cfg.spec, side, "on the first server to welcome us",
                             why, sizeof(why)) == 0)
        snprintf(why, sizeof(why), "their digests differ");
    ps_model_spec_free(&sv->hs.told);
    ps__failf(c, -PS_EMISMATCH,
              "the servers hold different tensor tables: %s; are they servers of one job?", why);
    return -1;
}

int ps__hs_on_welcome(ps__remote *sv, const ps_frame *f)
{
    ps_kv_client *c = sv->cl;
    ps_reply_welcome w;
    char why[256];

    if (sv->hs.welcomed) {
        ps__distrust(sv, "sent a second WELCOME");
        return 0;
    }
    if (c->auth && !sv->hs.server_proved) {
        ps__failf(c, -PS_EREJECTED,
                  "server %d (%s) does not authenticate; refusing to train against it (start it "
                  "with --auth-token-file)",
                  sv->index, sv->addr_text);
        return 0;
    }
    if (ps_reply_check_welcome(f, sv->hs.hello_id, c->max_clock, &w, why, sizeof(why)) < 0) {
        ps__distrust(sv, why);
        return 0;
    }
    if (ps__hs_check_table(sv, &f->hdr->welcome->table_digest) < 0)
        return 0;
    if (c->welcomes > 0 && w.staleness != c->mode.staleness) {
        snprintf(why, sizeof(why),
                 "runs with staleness %" PRIu32 " but another server of this job with %" PRIu32,
                 w.staleness, c->mode.staleness);
        ps__distrust(sv, why);
        return 0;
    }
    c->mode = w;
    c->welcomes++;
    sv->hs.welcomed = 1;
    sv->hs.welcome = w;
    sv->dense.pulled_clock = w.clock;
    c->connecting--;
    ps_debug("server %d (%s) welcomed us at clock %" PRIu64 ", mode %s", sv->index, sv->addr_text,
             w.clock, f->hdr->welcome->mode);
    return 1;
}

void ps__hs_on_refusal(ps__remote *sv, const ps_frame *f)
{
    const Shardps__Header *h = f->hdr;
    char reason[256];
    int rc = ps_reply_refusal(f, reason, sizeof(reason));

    if (h->type == SHARDPS__MSG_TYPE__REJECT) {
        /* A REJECT answers a HELLO: after the WELCOME, an ERROR says no. */
        if (sv->hs.welcomed) {
            ps__distrust(sv, "sent a REJECT after welcoming us");
            return;
        }
        /* Our rank is live there. Rejoining, that may be our own old
         * connection not yet seen closing; otherwise another worker holds the
         * rank, and waiting would only hide the mistake. */
        if (h->status == -EADDRINUSE && sv->cl->cfg.rejoining && ps__conn_retry_later(sv, reason))
            return;
        /* -EAGAIN: come back (no tensors declared yet, for a joiner; all
         * handshake slots taken, or a table being withdrawn, for anyone),
         * until the connect deadline. */
        if (h->status == -EAGAIN && ps__conn_wait_and_retry(sv, reason))
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
