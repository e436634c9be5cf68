/* The handshake (see handshake.h). Calls the membership, the tensors' and
 * units' reads, the job settings' rules, auth and the peer's refusal. */
#include "handshake.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clocks.h"
#include "job_options.h"
#include "ps_error.h"
#include "ps_log.h"
#include "tensor_table.h"
#include "validate.h"

/* The job settings a worker sent against ours. A HELLO without settings
 * (a client not given them) takes ours: it is admitted, but nothing it says
 * shapes the updates (its planned steps do not count). Returns 1 when the
 * settings were compared and agree, 0 when there was nothing to compare,
 * -1 after failing the peer. */
static int ps__handshake_check_settings(const ps_handshake *hs, ps_peer *p,
                                        const Shardps__Hello *hello)
{
    char diff[1024];
    int n;

    if (hs->cfg->job_settings == NULL || hello->job_settings == NULL || !*hello->job_settings)
        return 0;
    n = ps_job_settings_diff(hello->job_settings, hs->cfg->job_settings, "the worker",
                             "this server", diff, sizeof(diff));
    if (n == 0)
        return 1;
    if (n < 0)
        ps_peer_fail(p, -PS_EPROTO, "the HELLO's job settings are malformed (or over %d bytes)",
                     PS_JOB_SETTINGS_MAX - 1);
    else
        ps_peer_fail(p, -PS_EMISMATCH,
                     "job settings differ (%d): %s; start every process "
                     "of the job with the same options",
                     n, diff);
    return -1;
}

/* The HELLO's server list and chunking against ours: they decide which
 * keys live here. Returns 0, or -1 after failing the peer. */
static int ps__handshake_check_partition(const ps_handshake *hs, ps_peer *p,
                                         const Shardps__Hello *hello)
{
    const ps_kv_server_config *cfg = hs->cfg;

    if (hello->num_servers != (uint32_t)cfg->num_servers ||
        hello->chunk_bytes != cfg->chunk_bytes) {
        ps_peer_fail(p, -PS_EMISMATCH,
                     "partition mismatch: worker has %u servers and %" PRIu64
                     "-byte chunks, this server %d and %zu; use the same server list and "
                     "--chunk-bytes everywhere",
                     hello->num_servers, hello->chunk_bytes, cfg->num_servers, cfg->chunk_bytes);
        return -1;
    }
    if (hello->server_index != (uint32_t)cfg->server_index) {
        ps_peer_fail(p, -PS_EMISMATCH,
                     "the worker lists this address as server %u, but this is server %d; "
                     "fix the order of --servers",
                     hello->server_index, cfg->server_index);
        return -1;
    }
    return 0;
}

static int ps__handshake_may_outrank(const ps_handshake *hs, const Shardps__Hello *hello,
                                     const ps_model_spec *spec)
{
    return ps_tensors_may_outrank(
        hs->tensors, hello->rank,
        hello->rank < (uint32_t)hs->cfg->world && hs->job->workers[hello->rank] != NULL, spec);
}

/* A HELLO's declared table (spec, from its TABLE frame, already checked
 * against the limits; NULL for a joiner, who declares none) against the one
 * held: the same (or a joiner: JOIN), none held (ADOPT: the front adopts
 * it), or another, which is refused with the first difference, unless it is
 * rank 0's over one only other ranks declared (OUTRANKS: that one is
 * withdrawn, its declarers told why, and rank 0's adopted). */
static ps_hs_verdict ps__handshake_check_table(const ps_handshake *hs, ps_peer *p,
                                               const Shardps__Hello *hello,
                                               const ps_model_spec *spec, char *why, size_t why_len)
{
    const ps_tensors *t = hs->tensors;

    /* A table being withdrawn is neither compared with nor replaced until
     * the work still in flight on it has drained: come back. */
    if (t->life.state == PS_TABLE_WITHDRAWN) {
        ps_peer_fail(p, -EAGAIN,
                     "the tensor table declared before is being withdrawn (its declarers left); "
                     "come back in a moment");
        return PS_HS_REFUSED;
    }
    /* No table: the client joins the job as declared (and learns the
     * tensors from a TABLE frame), which needs a table to join. Until a
     * worker declares one, -EAGAIN tells a joiner to come back (ps_kv_client
     * waits within its connect timeout); nothing about it is kept here. */
    if (spec == NULL) {
        if (t->has_table)
            return PS_HS_JOIN;
        ps_peer_fail(p, -EAGAIN,
                     "no tensor table yet: no worker has declared the job's tensors to this "
                     "server, so there is nothing to join");
        return PS_HS_REFUSED;
    }
    if (!t->has_table)
        return PS_HS_ADOPT;
    if (ps_tensors_same(t, spec))
        return PS_HS_JOIN;
    /* Both tables are here: the refusal names the first difference. */
    if (ps__handshake_may_outrank(hs, hello, spec)) {
        if (ps_tensor_table_diff(spec, &t->table, "from rank 0", "declared first", why, why_len) ==
            0)
            snprintf(why, why_len, "the tables' digests differ");
        return PS_HS_OUTRANKS;
    }
    if (ps_tensor_table_diff(spec, &t->table, "from the worker", "on this server", why, why_len) ==
        0)
        snprintf(why, why_len, "the tables' digests differ");
    ps_peer_fail(p, -PS_EMISMATCH,
                 "model mismatch: %s; every process of a job must declare the same "
                 "tensors and --seed",
                 why);
    return PS_HS_REFUSED;
}

ps_hs_verdict ps_handshake_judge(ps_handshake *hs, ps_peer *p, const Shardps__Hello *hello,
                                 const ps_model_spec *spec, char *why, size_t why_len)
{
    const ps_kv_server_config *cfg = hs->cfg;
    int early;

    if (hello == NULL || hello->role != SHARDPS__ROLE__ROLE_WORKER) {
        ps_peer_fail(p, -PS_EPROTO, "first message must be a worker's or an evaluator's HELLO");
        return PS_HS_REFUSED;
    }
    p->agreed = ps__handshake_check_settings(hs, p, hello);
    if (p->agreed < 0)
        return PS_HS_REFUSED;
    /* A table held already is compared at once, like the settings (unless
     * rank 0's may outrank it: then once all else agrees)... */
    early = ps_table_life_holds(&hs->tensors->life) && !ps__handshake_may_outrank(hs, hello, spec);
    if (early && ps__handshake_check_table(hs, p, hello, spec, why, why_len) == PS_HS_REFUSED)
        return PS_HS_REFUSED;
    if (ps__handshake_check_partition(hs, p, hello) < 0)
        return PS_HS_REFUSED;
    if (hello->world != (uint32_t)cfg->world || hello->rank >= hello->world) {
        ps_peer_fail(p, -PS_EMISMATCH,
                     "worker says rank %u of %u, this server expects %d workers (ranks 0..%d)",
                     hello->rank, hello->world, cfg->world, cfg->world - 1);
        return PS_HS_REFUSED;
    }
    if (hs->job->workers[hello->rank]) {
        /* -EADDRINUSE tells a worker that is reconnecting to try again: its
         * old connection may simply not have been seen closing yet. The
         * reason does not say where the live worker is: a stranger learns
         * nothing from asking. The log does. */
        ps_info("%s asked for rank %u, live from %s", p->name, hello->rank,
                ps_conn_peer(hs->job->workers[hello->rank]->conn));
        ps_peer_fail(p, -EADDRINUSE, "rank %u is already connected", hello->rank);
        return PS_HS_REFUSED;
    }
    /* ...while a first one (or rank 0's over another) is adopted last,
     * once all else agrees. */
    return early ? PS_HS_JOIN : ps__handshake_check_table(hs, p, hello, spec, why, why_len);
}

static void ps__handshake_free_sent(ps_conn *c, int status, void *arg)
{
    (void)c;
    (void)status;
    free(arg);
}

/* A joiner (or an evaluator) learns the job's tensors: the table this
 * server holds, packed, as a TABLE frame just before its WELCOME (which
 * carries its digest). */
static int ps__handshake_send_table(const ps_handshake *hs, ps_peer *p, uint64_t request_id)
{
    Shardps__Header h = SHARDPS__HEADER__INIT;
    ps_iov iov;
    uint8_t *packed;
    size_t len;
    int rc = ps_tensor_table_pack(&hs->tensors->table, &packed, &len);

    if (rc < 0)
        return rc;
    h.type = SHARDPS__MSG_TYPE__TABLE;
    h.request_id = request_id;
    iov.base = packed;
    iov.len = len;
    rc = ps_conn_send(p->conn, &h, &iov, 1, ps__handshake_free_sent, packed);
    if (rc < 0)
        free(packed);
    return rc;
}

/* The WELCOME that admits p at clock, with the table's digest; a joiner
 * (declared: 0) gets the table first; values_wanted: the declaring rank 0
 * is to WRITE its initial values (values.h). Returns 0, or a negative code
 * with the connection closing. */
static int ps__handshake_welcome(const ps_handshake *hs, ps_peer *p, uint64_t request_id,
                                 uint64_t clock, int declared, int values_wanted)
{
    Shardps__Header h = SHARDPS__HEADER__INIT;
    Shardps__Welcome w = SHARDPS__WELCOME__INIT;
    int rc;

    h.type = SHARDPS__MSG_TYPE__WELCOME;
    h.request_id = request_id;
    w.clock = clock;
    w.mode = (char *)ps_mode_name(hs->cfg->mode);
    w.staleness = hs->cfg->staleness;
    w.heartbeat_ms = hs->cfg->heartbeat_timeout_ms / 4;
    w.table_digest.len = PS_TABLE_DIGEST_BYTES;
    w.table_digest.data = (uint8_t *)hs->tensors->table_digest;
    w.values_wanted = values_wanted;
    h.welcome = &w;
    rc = declared ? 0 : ps__handshake_send_table(hs, p, request_id);
    if (rc == 0)
        rc = ps_conn_send(p->conn, &h, NULL, 0, NULL, NULL);
    if (rc < 0)
        ps_conn_close(p->conn, rc);
    return rc;
}

/* The limits of an admitted peer: what it may send, and how much of what
 * it is sent may queue (two full pulls of this server's share). */
static void ps__handshake_open(const ps_handshake *hs, ps_peer *p)
{
    ps_conn_set_max_payload(p->conn, hs->cfg->max_payload);
    ps_conn_set_max_write_queue(p->conn, 2 * hs->tensors->share + PS_PEER_WRITE_QUEUE_HEADROOM);
}

/* An evaluator reads the job's weights and nothing else: it joins the table
 * the workers declared (declaring none), takes no rank and an evaluator slot
 * (validate.h) instead of a worker's, so no number of evaluators can keep a
 * worker out, and is in no barrier, quorum or count the job waits on. When
 * every evaluator slot is taken, the one that has read least lately gives
 * way to it (peer.h): otherwise whoever took them first, strangers without
 * the token included, would keep the job's evaluator out for as long as
 * they stayed. */
ps_hs_verdict ps_handshake_evaluator(ps_handshake *hs, ps_peer *p, const Shardps__Hello *hello,
                                     uint64_t request_id, ps_peer **gives_way)
{
    uint64_t clock = ps_units_progress_clock(hs->units, hs->cfg->staleness);
    char why[256];
    int rc;

    *gives_way = NULL;
    if (hello->table_digest.len > 0) {
        ps_peer_fail(p, -PS_EPROTO, "an evaluator declares no tensors: it reads the job's");
        return PS_HS_REFUSED;
    }
    if (ps__handshake_check_settings(hs, p, hello) < 0 ||
        ps__handshake_check_table(hs, p, hello, NULL, why, sizeof(why)) == PS_HS_REFUSED ||
        ps__handshake_check_partition(hs, p, hello) < 0)
        return PS_HS_REFUSED;
    rc = ps_validate_evaluator_slot(hs->max_connections, hs->cfg->world, hs->peers->n_evaluators,
                                    why, sizeof(why));
    if (rc < 0 && (*gives_way = ps_peers_evaluator_to_replace(hs->peers)) == NULL) {
        ps_peer_fail(p, rc, "%s", why);
        return PS_HS_REFUSED;
    }
    p->state = PS_PEER_EVALUATOR;
    p->last_read = p->last_seen;
    hs->peers->n_evaluators++;
    ps__handshake_open(hs, p);
    snprintf(p->name, sizeof(p->name), "evaluator (%s)", ps_conn_peer(p->conn));
    ps_info("%s joined at clock %" PRIu64 "; it reads the weights and holds no rank", p->name,
            clock);
    if (ps__handshake_welcome(hs, p, request_id, clock, 0, 0) < 0) {
        /* Closing: it takes nobody's slot. */
        *gives_way = NULL;
        return PS_HS_REFUSED;
    }
    return PS_HS_JOIN;
}

void ps_handshake_place(ps_handshake *hs, ps_peer *p, const Shardps__Hello *hello)
{
    ps_consistency_view v;

    p->rank = hello->rank;
    /* A plan counts toward the schedule only from a HELLO whose settings
     * were compared and agree; it is read when training starts. */
    p->planned = p->agreed == 1 ? hello->total_steps : 0;
    /* A joining worker starts where the job is: the steps applied (sync), or
     * the clock every live worker has reached; a push of it for a chunk
     * already past that clock is dropped as late. */
    ps_clocks_view(hs->job, hs->units, -1, &v);
    p->clock = ps_consistency_join_clock(&v, hs->job->resume_clock);
    p->earned = p->clock;
    ps__handshake_open(hs, p);
    snprintf(p->name, sizeof(p->name), "worker %u (%s)", p->rank, ps_conn_peer(p->conn));
}

int ps_handshake_welcome(ps_handshake *hs, ps_peer *p, uint64_t request_id, int declared)
{
    const ps_tensors *t = hs->tensors;

    /* Only the declaring rank 0 has the model's own values to send. */
    return ps__handshake_welcome(hs, p, request_id, p->clock, declared,
                                 p->rank == 0 && declared &&
                                     ps_values_wanted(&t->values, &t->life)) < 0
               ? -1
               : 0;
}

/* Keeps a deep copy of the HELLO while its sender is challenged: packed and
 * unpacked again, as protobuf-c has no copy. Its size was bounded by the
 * frame decoder. */
static int ps__handshake_copy_hello(ps_peer *p, const Shardps__Hello *hello)
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
 * declarer once the TABLE it announced has come. */
static ps_hs_verdict ps__handshake_proven(ps_peer *p, const Shardps__Hello *hello,
                                          uint64_t request_id)
{
    if (hello->table_digest.len == 0)
        return PS_HS_READY;
    if (hello->table_digest.len != PS_TABLE_DIGEST_BYTES) {
        ps_peer_fail(p, -PS_EPROTO,
                     "the HELLO's table_digest is %zu bytes: %d, or none to join the job's "
                     "tensors",
                     hello->table_digest.len, PS_TABLE_DIGEST_BYTES);
        return PS_HS_REFUSED;
    }
    if (p->hello == NULL && ps__handshake_copy_hello(p, hello) < 0) {
        ps_peer_fail(p, -ENOMEM, "out of memory");
        return PS_HS_REFUSED;
    }
    p->hello_id = request_id;
    p->state = PS_PEER_TABLE;
    /* The TABLE's size is judged on its header, before a byte of it is
     * buffered (the place callback: at most PS_TABLE_MAX_BYTES), with a
     * reason that names it rather than the frame limit's. */
    ps_conn_set_max_payload(p->conn, SIZE_MAX);
    return PS_HS_WAIT;
}

/* The declarer's TABLE frame, after its HELLO (and proof). */
static ps_hs_verdict ps__handshake_table(const ps_handshake *hs, ps_peer *p, const ps_frame *f,
                                         ps_model_spec *spec, int *has_spec)
{
    uint8_t digest[PS_TABLE_DIGEST_BYTES];
    char why[256];
    int rc;

    /* Shape checked by the place callback (an empty payload never reaches
     * it). */
    if (ps_validate_table_frame(f->hdr->type, f->hdr->n_keys, f->payload_len, why, sizeof(why)) <
        0) {
        ps_peer_fail(p, -PS_EPROTO, "%s", why);
        return PS_HS_REFUSED;
    }
    rc = ps_tensor_table_decode(f->payload, f->payload_len, hs->cfg->max_model_bytes, spec, why,
                                sizeof(why));
    if (rc < 0) {
        ps_peer_fail(p,
                     rc == -E2BIG    ? -PS_ETOOBIG
                     : rc == -ENOMEM ? -ENOMEM
                                     : -PS_EPROTO,
                     "tensor table refused: %s", why);
        return PS_HS_REFUSED;
    }
    *has_spec = 1;
    ps_model_spec_digest(spec, digest);
    if (memcmp(digest, p->hello->table_digest.data, PS_TABLE_DIGEST_BYTES) != 0) {
        ps_peer_fail(p, -PS_EPROTO,
                     "tensor table refused: its digest is not the one the HELLO announced (a "
                     "client that digests the table differently, or a damaged table)");
        return PS_HS_REFUSED;
    }
    return PS_HS_READY;
}

/* First frame: a HELLO. Without authentication it is judged at once; with
 * it, the server proves itself and waits for the worker's proof before
 * looking at anything else the HELLO says. */
static ps_hs_verdict ps__handshake_hello(const ps_handshake *hs, ps_peer *p, const ps_frame *f)
{
    const Shardps__Hello *hello = f->hdr->hello;
    Shardps__Header h = SHARDPS__HEADER__INIT;
    uint8_t mac[PS_AUTH_MAC_BYTES];
    int rc;

    if (f->hdr->type != SHARDPS__MSG_TYPE__HELLO || hello == NULL) {
        ps_peer_fail(p, -PS_EPROTO, "expected HELLO, got message type %d", f->hdr->type);
        return PS_HS_REFUSED;
    }
    if (!hs->cfg->auth && hello->client_nonce.len != 0) {
        /* The worker would wait for our proof before sending its table. */
        ps_peer_fail(p, -PS_EREJECTED,
                     "this server does not authenticate, but the worker does; start the servers "
                     "with --auth-token-file too");
        return PS_HS_REFUSED;
    }
    if (!hs->cfg->auth)
        return ps__handshake_proven(p, hello, f->hdr->request_id);
    if (hello->client_nonce.len != PS_AUTH_NONCE_BYTES) {
        ps_peer_fail(p, -PS_EREJECTED,
                     "this server requires authentication; start the worker with "
                     "--auth-token-file");
        return PS_HS_REFUSED;
    }
    if (ps__handshake_copy_hello(p, hello) < 0) {
        ps_peer_fail(p, -ENOMEM, "out of memory");
        return PS_HS_REFUSED;
    }
    p->hello_id = f->hdr->request_id;
    memcpy(p->client_nonce, hello->client_nonce.data, PS_AUTH_NONCE_BYTES);
    ps_auth_nonce(p->server_nonce);
    ps_auth_mac(hs->cfg->auth_key, "server", p->client_nonce, p->server_nonce, mac);
    h.type = SHARDPS__MSG_TYPE__AUTH_CHALLENGE;
    h.request_id = f->hdr->request_id;
    h.auth_nonce.len = PS_AUTH_NONCE_BYTES;
    h.auth_nonce.data = p->server_nonce;
    h.auth_mac.len = PS_AUTH_MAC_BYTES;
    h.auth_mac.data = mac;
    p->state = PS_PEER_AUTH;
    rc = ps_conn_send(p->conn, &h, NULL, 0, NULL, NULL);
    if (rc < 0)
        ps_conn_close(p->conn, rc);
    return PS_HS_WAIT;
}

static ps_hs_verdict ps__handshake_auth(const ps_handshake *hs, ps_peer *p, const ps_frame *f)
{
    const Shardps__Header *h = f->hdr;

    if (h->type != SHARDPS__MSG_TYPE__AUTH_RESPONSE ||
        !ps_auth_check(hs->cfg->auth_key, "worker", p->server_nonce, p->client_nonce,
                       h->auth_mac.data, h->auth_mac.len)) {
        /* Deliberately vague to the peer; the log says who failed. */
        ps_warn("authentication failed for %s", p->name);
        ps_peer_fail(p, -PS_EREJECTED, "authentication failed");
        return PS_HS_REFUSED;
    }
    p->state = PS_PEER_HANDSHAKE;
    return ps__handshake_proven(p, p->hello, p->hello_id);
}

ps_hs_verdict ps_handshake_frame(ps_handshake *hs, ps_peer *p, const ps_frame *f,
                                 const Shardps__Hello **hello, uint64_t *request_id,
                                 ps_model_spec *spec, int *has_spec)
{
    ps_hs_verdict v;

    *has_spec = 0;
    switch (p->state) {
    case PS_PEER_HANDSHAKE:
        v = ps__handshake_hello(hs, p, f);
        break;
    case PS_PEER_AUTH:
        v = ps__handshake_auth(hs, p, f);
        break;
    case PS_PEER_TABLE:
        v = ps__handshake_table(hs, p, f, spec, has_spec);
        break;
    default:
        return PS_HS_REFUSED;
    }
    if (v != PS_HS_READY)
        return v;
    /* The HELLO kept while it was proven or its TABLE came, or the frame's. */
    *hello = p->hello ? p->hello : f->hdr->hello;
    *request_id = p->hello ? p->hello_id : f->hdr->request_id;
    return PS_HS_READY;
}

void ps_handshake_say_strangers(const ps_kv_server_config *cfg)
{
    /* Once per job: server 0 speaks for all. What is and is not possible is
     * measured in docs/reliability.md ("What a stranger can still do"). */
    if (cfg->auth || cfg->server_index != 0)
        return;
    ps_info("without --auth-token-file anyone who can reach this server is a worker to this job: "
            "a stranger can take a free rank before its worker (which is then refused), push "
            "gradients as that rank, and end a rank's run by saying goodbye as it; it cannot keep "
            "a table it declared or values it wrote once it leaves, have a table checkpointed, "
            "stall the server with a large one, keep the evaluator out, or set the schedule "
            "(docs/reliability.md)");
}
