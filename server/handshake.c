/* The handshake: a HELLO is checked against this server's job settings,
 * cluster and tensor table (the first one it is sent is adopted: tensors.c)
 * (and, with --auth-token-file, proven by a challenge and response
 * before anything it says is looked at); a declarer's table follows in a
 * TABLE frame, which must match the digest its HELLO carried; the worker is
 * then admitted at the job's current clock with a WELCOME (a joiner first
 * gets the table in a TABLE frame), or refused with a REJECT naming why.
 * A HELLO with the evaluator's role is admitted read-only, without a rank
 * (and told the table as a joiner is). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "job_options.h"
#include "kv_internal.h"
#include "ps_error.h"
#include "ps_log.h"
#include "tensor_table.h"
#include "validate.h"

/* The job settings a worker sent against ours. A HELLO without settings
 * (a client not given them) takes ours: it is admitted, but nothing it says
 * shapes the updates (its planned steps do not count, ps__admit). Returns 1
 * when the settings were compared and agree, 0 when there was nothing to
 * compare, -1 after failing the peer. */
static int ps__check_job_settings(ps_kv_server *s, ps__peer *p, const Shardps__Hello *hello)
{
    char diff[1024];
    int n;

    if (s->cfg.job_settings == NULL || hello->job_settings == NULL || !*hello->job_settings)
        return 0;
    n = ps_job_settings_diff(hello->job_settings, s->cfg.job_settings, "the worker", "this server",
                             diff, sizeof(diff));
    if (n == 0)
        return 1;
    if (n < 0)
        ps__peer_fail(p, -PS_EPROTO, "the HELLO's job settings are malformed (or over %d bytes)",
                      PS_JOB_SETTINGS_MAX - 1);
    else
        ps__peer_fail(p, -PS_EMISMATCH,
                      "job settings differ (%d): %s; start every process "
                      "of the job with the same options",
                      n, diff);
    return -1;
}

/* The HELLO's server list and chunking against ours: they decide which
 * keys live here. Returns 0, or -1 after failing the peer. */
static int ps__check_partition(ps_kv_server *s, ps__peer *p, const Shardps__Hello *hello)
{
    if (hello->num_servers != (uint32_t)s->cfg.num_servers ||
        hello->chunk_bytes != s->cfg.chunk_bytes) {
        ps__peer_fail(p, -PS_EMISMATCH,
                      "partition mismatch: worker has %u servers and %" PRIu64
                      "-byte chunks, this server %d and %zu; use the same server list and "
                      "--chunk-bytes everywhere",
                      hello->num_servers, hello->chunk_bytes, s->cfg.num_servers,
                      s->cfg.chunk_bytes);
        return -1;
    }
    if (hello->server_index != (uint32_t)s->cfg.server_index) {
        ps__peer_fail(p, -PS_EMISMATCH,
                      "the worker lists this address as server %u, but this is server %d; "
                      "fix the order of --servers",
                      hello->server_index, s->cfg.server_index);
        return -1;
    }
    return 0;
}

static int ps__check_hello(ps_kv_server *s, ps__peer *p, const Shardps__Hello *hello,
                           const ps_model_spec *spec)
{
    if (hello == NULL || hello->role != SHARDPS__ROLE__ROLE_WORKER) {
        ps__peer_fail(p, -PS_EPROTO, "first message must be a worker's or an evaluator's HELLO");
        return -1;
    }
    p->agreed = ps__check_job_settings(s, p, hello);
    if (p->agreed < 0)
        return -1;
    /* A table held already is compared at once, like the settings (unless
     * rank 0's may outrank it: then once all else agrees)... */
    if (ps_table_life_holds(&s->life) && !ps__table_may_outrank(s, hello, spec) &&
        ps__check_table(s, p, hello, spec) < 0)
        return -1;
    if (ps__check_partition(s, p, hello) < 0)
        return -1;
    if (hello->world != (uint32_t)s->cfg.world || hello->rank >= hello->world) {
        ps__peer_fail(p, -PS_EMISMATCH,
                      "worker says rank %u of %u, this server expects %d workers (ranks 0..%d)",
                      hello->rank, hello->world, s->cfg.world, s->cfg.world - 1);
        return -1;
    }
    if (s->workers[hello->rank]) {
        /* -EADDRINUSE tells a worker that is reconnecting to try again: its
         * old connection may simply not have been seen closing yet. */
        /* The reason does not say where the live worker is: a stranger
         * learns nothing from asking. The log does. */
        ps_info("%s asked for rank %u, live from %s", p->name, hello->rank,
                ps_conn_peer(s->workers[hello->rank]->conn));
        ps__peer_fail(p, -EADDRINUSE, "rank %u is already connected", hello->rank);
        return -1;
    }
    /* ...while a first one (or rank 0's over another) is adopted last,
     * once all else agrees. */
    return ps_table_life_holds(&s->life) && !ps__table_may_outrank(s, hello, spec)
               ? 0
               : ps__check_table(s, p, hello, spec);
}

static void ps__free_sent(ps_conn *c, int status, void *arg)
{
    (void)c;
    (void)status;
    free(arg);
}

/* A joiner (or an evaluator) learns the job's tensors: the table this
 * server holds, packed, as a TABLE frame just before its WELCOME (which
 * carries its digest). */
static int ps__send_table(ps_kv_server *s, ps__peer *p, uint64_t request_id)
{
    Shardps__Header h = SHARDPS__HEADER__INIT;
    ps_iov iov;
    uint8_t *packed;
    size_t len;
    int rc = ps_tensor_table_pack(&s->table, &packed, &len);

    if (rc < 0)
        return rc;
    h.type = SHARDPS__MSG_TYPE__TABLE;
    h.request_id = request_id;
    iov.base = packed;
    iov.len = len;
    rc = ps_conn_send(p->conn, &h, &iov, 1, ps__free_sent, packed);
    if (rc < 0)
        free(packed);
    return rc;
}

/* The WELCOME that admits p at clock, with the table's digest; a joiner
 * (declared: 0) gets the table first; values_wanted: the declaring rank 0
 * is to WRITE its initial values (values.c). Returns 0, or a negative code
 * with the connection closing. */
static int ps__welcome(ps_kv_server *s, ps__peer *p, uint64_t request_id, uint64_t clock,
                       int declared, int values_wanted)
{
    Shardps__Header h = SHARDPS__HEADER__INIT;
    Shardps__Welcome w = SHARDPS__WELCOME__INIT;
    int rc;

    h.type = SHARDPS__MSG_TYPE__WELCOME;
    h.request_id = request_id;
    w.clock = clock;
    w.mode = (char *)ps_mode_name(s->cfg.mode);
    w.staleness = s->cfg.staleness;
    w.heartbeat_ms = s->cfg.heartbeat_timeout_ms / 4;
    w.table_digest.len = PS_TABLE_DIGEST_BYTES;
    w.table_digest.data = s->table_digest;
    w.values_wanted = values_wanted;
    h.welcome = &w;
    rc = declared ? 0 : ps__send_table(s, p, request_id);
    if (rc == 0)
        rc = ps_conn_send(p->conn, &h, NULL, 0, NULL, NULL);
    if (rc < 0)
        ps_conn_close(p->conn, rc);
    return rc;
}

/* An evaluator reads the job's weights and nothing else: it joins the table
 * the workers declared (declaring none), takes no rank and an evaluator slot
 * (validate.h) instead of a worker's, so no number of evaluators can keep a
 * worker out, and is in no barrier, quorum or count the job waits on. */
static void ps__admit_evaluator(ps_kv_server *s, ps__peer *p, const Shardps__Hello *hello,
                                uint64_t request_id)
{
    char why[256];
    int rc;

    if (hello->table_digest.len > 0) {
        ps__peer_fail(p, -PS_EPROTO, "an evaluator declares no tensors: it reads the job's");
        return;
    }
    if (ps__check_job_settings(s, p, hello) < 0 || ps__check_table(s, p, hello, NULL) < 0 ||
        ps__check_partition(s, p, hello) < 0)
        return;
    rc = ps_validate_evaluator_slot(s->max_connections, s->cfg.world, s->n_evaluators, why,
                                    sizeof(why));
    if (rc < 0) {
        ps__peer_fail(p, rc, "%s", why);
        return;
    }
    p->state = PS__PEER_EVALUATOR;
    s->n_evaluators++;
    ps_conn_set_max_payload(p->conn, s->cfg.max_payload);
    ps_conn_set_max_write_queue(p->conn, s->max_write_queue);
    snprintf(p->name, sizeof(p->name), "evaluator (%s)", ps_conn_peer(p->conn));
    ps_info("%s joined at clock %" PRIu64 "; it reads the weights and holds no rank", p->name,
            ps__progress_clock(s));
    (void)ps__welcome(s, p, request_id, ps__progress_clock(s), 0, 0);
}

/* Admits a worker whose HELLO has passed authentication (if any): model and
 * cluster checks, then WELCOME. */
static void ps__admit(ps_kv_server *s, ps__peer *p, const Shardps__Hello *hello,
                      uint64_t request_id, const ps_model_spec *spec)
{
    ps_consistency_view v;

    if (hello != NULL && hello->role == SHARDPS__ROLE__ROLE_EVALUATOR) {
        ps__admit_evaluator(s, p, hello, request_id);
        return;
    }
    if (ps__check_hello(s, p, hello, spec) < 0)
        return;
    p->rank = hello->rank;
    /* A plan counts toward the schedule only from a HELLO whose settings
     * were compared and agree; it is read when training starts. */
    p->planned = p->agreed == 1 ? hello->total_steps : 0;
    /* A joining worker starts where the job is: the steps applied (sync), or
     * the clock every live worker has reached; a push of it for a chunk
     * already past that clock is dropped as late. */
    ps__view(s, &v);
    p->clock = ps_consistency_join_clock(&v, s->resume_clock);
    p->earned = p->clock;
    if (s->rank_pushed[p->rank] == NULL &&
        (s->rank_pushed[p->rank] = calloc((size_t)s->n_local + 1, sizeof(uint64_t))) == NULL) {
        ps__table_abandoned(s);
        ps_conn_close(p->conn, -ENOMEM);
        return;
    }
    p->pushed = s->rank_pushed[p->rank];
    /* A rank that fed the step under way before it dropped out counts as
     * having pushed it again, now that it is back. */
    for (int i = 0; i < s->n_local; i++)
        if (p->pushed[i] == s->sync[i].clock + 1 && s->sync[i].pushes > 0)
            s->sync[i].live_pushes++;
    ps__rows_peer_joined(s, p);
    p->state = PS__PEER_WORKER;
    ps_conn_set_max_payload(p->conn, s->cfg.max_payload);
    ps_conn_set_max_write_queue(p->conn, s->max_write_queue);
    s->workers[p->rank] = p;
    s->live++;
    s->left_at[p->rank] = 0;
    if (s->lost[p->rank]) {
        s->lost[p->rank] = 0;
        s->n_lost--;
        ps_info("worker %u, counted as lost, is back", p->rank);
    }
    snprintf(p->name, sizeof(p->name), "worker %u (%s)", p->rank, ps_conn_peer(p->conn));
    if (spec != NULL)
        ps__table_declarer_joined(s, p);

    /* Only the declaring rank 0 has the model's own values to send. */
    if (ps__welcome(s, p, request_id, p->clock, spec != NULL,
                    p->rank == 0 && spec != NULL && ps__values_wanted(s)) < 0)
        return;
    if (!s->started) {
        /* A rank that left before the start no longer counts as joined
         * (tensors.c), so each rank here is new. */
        s->has_joined[p->rank] = 1;
        s->joined++;
        if (s->joined < s->cfg.world)
            ps_info("%s joined; waiting for %d more", p->name, s->cfg.world - s->joined);
        else
            ps_info("%s joined", p->name);
        ps__maybe_start(s);
    } else {
        ps_info("%s joined at clock %" PRIu64 "; %d live", p->name, p->clock, s->live);
    }
    ps__release_pulls(s);
}

/* Keeps a deep copy of the HELLO while its sender is challenged: packed and
 * unpacked again, as protobuf-c has no copy. Its size was bounded by the
 * frame decoder. */
static int ps__copy_hello(ps__peer *p, const Shardps__Hello *hello)
{
    size_t len = shardps__hello__get_packed_size(hello);
    uint8_t *buf = malloc(len ? len : 1);

    if (buf == NULL)
        return -ENOMEM;
    shardps__hello__pack(hello, buf);
    p->hello = shardps__hello__unpack(NULL, len, buf);
    free(buf);
    return p->hello ? 0 : -ENOMEM;
}

/* The HELLO is proven (or needed no proof): a joiner is judged now, a
 * declarer once the TABLE it announced has come (ps__handle_table). */
static void ps__proven(ps_kv_server *s, ps__peer *p, const Shardps__Hello *hello,
                       uint64_t request_id)
{
    if (hello->table_digest.len == 0) {
        ps__admit(s, p, hello, request_id, NULL);
        return;
    }
    if (hello->table_digest.len != PS_TABLE_DIGEST_BYTES) {
        ps__peer_fail(p, -PS_EPROTO,
                      "the HELLO's table_digest is %zu bytes: %d, or none to join the job's "
                      "tensors",
                      hello->table_digest.len, PS_TABLE_DIGEST_BYTES);
        return;
    }
    if (p->hello == NULL && ps__copy_hello(p, hello) < 0) {
        ps__peer_fail(p, -ENOMEM, "out of memory");
        return;
    }
    p->hello_id = request_id;
    p->state = PS__PEER_TABLE;
    /* The TABLE's size is judged on its header, before a byte of it is
     * buffered (ps__place_push: at most PS_TABLE_MAX_BYTES), with a reason
     * that names it rather than the frame limit's. */
    ps_conn_set_max_payload(p->conn, SIZE_MAX);
}

void ps__handle_table(ps_kv_server *s, ps__peer *p, const ps_frame *f)
{
    uint8_t digest[PS_TABLE_DIGEST_BYTES];
    ps_model_spec spec;
    char why[256];
    int rc;

    /* Shape checked by ps__place_push (an empty payload never reaches it). */
    if (ps_validate_table_frame(f->hdr->type, f->hdr->n_keys, f->payload_len, why, sizeof(why)) <
        0) {
        ps__peer_fail(p, -PS_EPROTO, "%s", why);
        return;
    }
    rc = ps_tensor_table_decode(f->payload, f->payload_len, s->cfg.max_model_bytes, &spec, why,
                                sizeof(why));
    if (rc < 0) {
        ps__peer_fail(p,
                      rc == -E2BIG    ? -PS_ETOOBIG
                      : rc == -ENOMEM ? -ENOMEM
                                      : -PS_EPROTO,
                      "tensor table refused: %s", why);
        return;
    }
    ps_model_spec_digest(&spec, digest);
    if (memcmp(digest, p->hello->table_digest.data, PS_TABLE_DIGEST_BYTES) != 0)
        ps__peer_fail(p, -PS_EPROTO,
                      "tensor table refused: its digest is not the one the HELLO announced (a "
                      "client that digests the table differently, or a damaged table)");
    else
        ps__admit(s, p, p->hello, p->hello_id, &spec);
    ps_model_spec_free(&spec);
}

/* First frame: a HELLO. Without authentication it is judged at once; with
 * it, the server proves itself and waits for the worker's proof before
 * looking at anything else the HELLO says. */
void ps__handle_hello(ps_kv_server *s, ps__peer *p, const ps_frame *f)
{
    const Shardps__Hello *hello = f->hdr->hello;
    Shardps__Header h = SHARDPS__HEADER__INIT;
    uint8_t mac[PS_AUTH_MAC_BYTES];
    int rc;

    if (f->hdr->type != SHARDPS__MSG_TYPE__HELLO || hello == NULL) {
        ps__peer_fail(p, -PS_EPROTO, "expected HELLO, got message type %d", f->hdr->type);
        return;
    }
    if (!s->cfg.auth && hello->client_nonce.len != 0) {
        /* The worker would wait for our proof before sending its table. */
        ps__peer_fail(p, -PS_EREJECTED,
                      "this server does not authenticate, but the worker does; start the servers "
                      "with --auth-token-file too");
        return;
    }
    if (!s->cfg.auth) {
        ps__proven(s, p, hello, f->hdr->request_id);
        return;
    }
    if (hello->client_nonce.len != PS_AUTH_NONCE_BYTES) {
        ps__peer_fail(p, -PS_EREJECTED,
                      "this server requires authentication; start the worker with "
                      "--auth-token-file");
        return;
    }
    if (ps__copy_hello(p, hello) < 0) {
        ps__peer_fail(p, -ENOMEM, "out of memory");
        return;
    }
    p->hello_id = f->hdr->request_id;
    memcpy(p->client_nonce, hello->client_nonce.data, PS_AUTH_NONCE_BYTES);
    ps_auth_nonce(p->server_nonce);
    ps_auth_mac(s->cfg.auth_key, "server", p->client_nonce, p->server_nonce, mac);
    h.type = SHARDPS__MSG_TYPE__AUTH_CHALLENGE;
    h.request_id = f->hdr->request_id;
    h.auth_nonce.len = PS_AUTH_NONCE_BYTES;
    h.auth_nonce.data = p->server_nonce;
    h.auth_mac.len = PS_AUTH_MAC_BYTES;
    h.auth_mac.data = mac;
    p->state = PS__PEER_AUTH;
    rc = ps_conn_send(p->conn, &h, NULL, 0, NULL, NULL);
    if (rc < 0)
        ps_conn_close(p->conn, rc);
}

void ps__handle_auth(ps_kv_server *s, ps__peer *p, const ps_frame *f)
{
    const Shardps__Header *h = f->hdr;

    if (h->type != SHARDPS__MSG_TYPE__AUTH_RESPONSE ||
        !ps_auth_check(s->cfg.auth_key, "worker", p->server_nonce, p->client_nonce,
                       h->auth_mac.data, h->auth_mac.len)) {
        /* Deliberately vague to the peer; the log says who failed. */
        ps_warn("authentication failed for %s", p->name);
        ps__peer_fail(p, -PS_EREJECTED, "authentication failed");
        return;
    }
    p->state = PS__PEER_HANDSHAKE;
    ps__proven(s, p, p->hello, p->hello_id);
}

void ps__say_strangers(const ps_kv_server *s)
{
    /* Once per job: server 0 speaks for all. What is and is not possible is
     * measured in docs/reliability.md ("What a stranger can still do"). */
    if (s->cfg.auth || s->cfg.server_index != 0)
        return;
    ps_info("without --auth-token-file anyone who can reach this server is a worker to this job: "
            "a stranger can take a free rank before its worker (which is then refused), push "
            "gradients as that rank, and end a rank's run by saying goodbye as it; it cannot keep "
            "a table it declared once it leaves, have one checkpointed, stall the server with a "
            "large one, or set the schedule (docs/reliability.md)");
}
