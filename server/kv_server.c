/* The key-value server's front: the listener, one peer per connection,
 * dispatch of each frame to its handler (handshake.c, pulls.c, pushes.c,
 * membership.c for who leaves), liveness timeouts, lifecycle and stats. It
 * is the top of the front: it calls the handlers and the shared files below
 * them (peer.c, clocks.c, keys.c), and nothing calls it back (kv_internal.h).
 * The rules live in consistency.c, checkpoints in durability.c. Everything
 * runs on the libuv loop thread, so shard state needs no locks. */
#include "kv_server.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv_internal.h"
#include "row_table.h"
#include "ps_error.h"
#include "ps_log.h"

/* Default deadline for a connection to say HELLO and finish its handshake,
 * and for a refused peer to take its reason and go. */
#define PS__HANDSHAKE_TIMEOUT_MS 10000
/* Default wait for a rank that left unfinished (see --rejoin-timeout). */
#define PS__REJOIN_TIMEOUT_MS 30000
/* How often (at most) the pulls held for other workers are looked at; each
 * is explained every wait_report_ms it waits (pulls.c). */
#define PS__WAIT_CHECK_MS 1000

/* A goodbye ends the connection. It counts as the rank finishing only once
 * the job has started: before that, a rank that says hello and goodbye
 * (anyone, without a token) is as if it never came, and training still waits
 * for every rank. */
static void ps__handle_bye(ps_kv_server *s, ps__peer *p)
{
    if (s->started) {
        s->finished[p->rank] = 1;
        ps__worker_leave(s, p, "finished");
    } else {
        ps__worker_leave(s, p, "said goodbye before the job started");
    }
    ps_conn_close(p->conn, 0);
}

static void ps__on_frame(ps_conn *c, const ps_frame *f)
{
    ps__peer *p = ps_conn_data(c);
    ps_kv_server *s = p->srv;

    if (p->failed || p->state == PS__PEER_GONE)
        return;
    p->last_seen = uv_now(s->loop);
    if (p->state == PS__PEER_HANDSHAKE) {
        ps__handle_hello(s, p, f);
        return;
    }
    if (p->state == PS__PEER_AUTH) {
        ps__handle_auth(s, p, f);
        return;
    }
    if (p->state == PS__PEER_TABLE) {
        ps__handle_table(s, p, f);
        return;
    }
    if (p->state == PS__PEER_EVALUATOR) {
        ps__handle_evaluator(s, p, f);
        return;
    }
    switch (f->hdr->type) {
    case SHARDPS__MSG_TYPE__PULL:
        ps__handle_pull(s, p, f);
        break;
    case SHARDPS__MSG_TYPE__PUSH:
        ps__handle_push(s, p, f);
        break;
    case SHARDPS__MSG_TYPE__PULL_ROWS:
        ps__handle_pull_rows(s, p, f);
        break;
    case SHARDPS__MSG_TYPE__PUSH_ROWS:
        ps__handle_push_rows(s, p, f);
        break;
    case SHARDPS__MSG_TYPE__WRITE:
        ps__handle_write(s, p, f);
        break;
    case SHARDPS__MSG_TYPE__BYE:
        ps__handle_bye(s, p);
        break;
    case SHARDPS__MSG_TYPE__HEARTBEAT:
        break;
    default:
        ps__peer_fail(p, -PS_EPROTO, "unexpected message type %d from a worker", f->hdr->type);
        break;
    }
}

/* The decoder refused what the peer sent (a wrong version, a size over a
 * limit, a bad checksum, a payload the place callback refused): the reason
 * goes back in a REJECT or ERROR before the connection closes. */
static void ps__on_decode_error(ps_conn *c, int err)
{
    ps__peer *p = ps_conn_data(c);

    ps__peer_fail(p, err, "%s: %s", ps_strerror(err), ps_conn_error(c));
}

static void ps__on_conn_close(ps_conn *c, int err)
{
    ps__peer *p = ps_conn_data(c);
    ps_kv_server *s = p->srv;

    if (err < 0 && err != -PS_ECLOSED && !p->failed) {
        const char *detail = ps_conn_error(c);
        ps_warn("closing %s: %s%s%s", p->name, ps_strerror(err), *detail ? ": " : "", detail);
        s->n_refused++;
    }
    ps__worker_leave(s, p, err == -PS_ECLOSED || err == 0 ? "disconnected" : ps_strerror(err));
    ps__evaluator_leave(s, p, err == -PS_ECLOSED || err == 0 ? "disconnected" : ps_strerror(err));
    s->n_peers--;
    if (p->prev)
        p->prev->next = p->next;
    else
        s->peers = p->next;
    if (p->next)
        p->next->prev = p->prev;
    ps_buf_pool_put(p->push_piece.base);
    if (p->hello)
        shardps__hello__free_unpacked(p->hello, NULL);
    free(p);
}

/* Every connection state has a deadline. Before HELLO and during the
 * handshake: the handshake timeout (a connection that never completes it
 * holds a descriptor for nothing); a refused peer that does not take its
 * reason: the same. An admitted worker that has sent nothing for the
 * heartbeat timeout (stopped, partitioned, hung, or stuck mid-frame) leaves
 * the barrier; its connection is closed so that, if it wakes up, it
 * reconnects and rejoins at the current clock. After BYE the connection is
 * closed at once. */
static void ps__on_liveness_check(uv_timer_t *t)
{
    ps_kv_server *s = t->data;
    uint64_t now = uv_now(s->loop);

    for (ps__peer *p = s->peers; p; p = p->next) {
        if (now - p->last_seen <= s->handshake_timeout_ms)
            continue;
        if (p->failed) {
            ps_conn_close(p->conn, -PS_ETIMEOUT);
        } else if (ps__peer_handshaking(p)) {
            ps_warn("closing %s: no handshake within %.1f s", p->name,
                    s->handshake_timeout_ms / 1000.0);
            s->n_refused++;
            p->failed = 1;
            ps_conn_close(p->conn, -PS_ETIMEOUT);
        } else if (p->state == PS__PEER_EVALUATOR && s->cfg.heartbeat_timeout_ms > 0 &&
                   now - p->last_seen > s->cfg.heartbeat_timeout_ms) {
            /* Its slot is not held by a process that went silent; a live
             * one reconnects. */
            ps__evaluator_leave(s, p, "heartbeat timeout");
            ps_conn_close(p->conn, -PS_ETIMEOUT);
        }
    }
    for (int r = 0; s->cfg.heartbeat_timeout_ms > 0 && r < s->cfg.world; r++) {
        ps__peer *p = s->workers[r];
        if (p == NULL || now - p->last_seen <= s->cfg.heartbeat_timeout_ms)
            continue;
        ps_warn("%s silent for %.1f s (heartbeat timeout %.1f s)", p->name,
                (double)(now - p->last_seen) / 1000, s->cfg.heartbeat_timeout_ms / 1000.0);
        ps__worker_leave(s, p, "heartbeat timeout");
        ps_conn_close(p->conn, -PS_ETIMEOUT);
    }
    ps__check_rejoins(s, now);
}

static void ps__on_waits_timer(uv_timer_t *t)
{
    ps__report_waits(t->data);
}

/* Connection slots: admitted workers hold one each (at most one per rank),
 * admitted evaluators one each (at most half of the rest, validate.h), and
 * the rest of --max-connections is for connections still in their
 * handshake. When those are all taken, the one that has waited longest
 * gives way to the newcomer (told -EAGAIN: come back), rather than the
 * newcomer being refused: a worker's handshake takes a round trip or two,
 * so connections that idle until their deadline cannot keep it out (with
 * --auth-token-file, nobody without the token gets past a handshake slot).
 * The log names the first and every hundredth, so a flood cannot flood it. */
static void ps__make_room(ps_kv_server *s, ps__peer *newcomer)
{
    int slots = s->max_connections - s->cfg.world - s->n_evaluators, waiting = 0;
    ps__peer *oldest = NULL;
    char reason[160];

    if (slots < 1)
        slots = 1;
    for (ps__peer *p = s->peers; p; p = p->next)
        if (ps__peer_handshaking(p) && !p->failed) {
            waiting++;
            if (p != newcomer)
                oldest = p; /* the list is newest first */
        }
    if (waiting <= slots || oldest == NULL)
        return;
    s->n_capped++;
    snprintf(reason, sizeof(reason),
             "all %d handshake slots of this server are taken (--max-connections %d, %d for the "
             "workers): the connection that waited longest gives way; come back",
             slots, s->max_connections, s->cfg.world);
    if (s->n_capped == 1 || s->n_capped % 100 == 0)
        ps_warn("closing %s for %s: %s (%" PRIu64 " so far)", oldest->name, newcomer->name, reason,
                s->n_capped);
    s->n_refused++;
    ps__peer_refuse(oldest, -EAGAIN, reason);
}

static void ps__on_connection(uv_stream_t *listener, int status)
{
    ps_kv_server *s = listener->data;
    /* No payload until the peer is admitted: a HELLO carries none. */
    ps_conn_config cc = {.on_frame = ps__on_frame,
                         .on_close = ps__on_conn_close,
                         .place = ps__place_push,
                         .on_decode_error = ps__on_decode_error,
                         /* Nothing large is sent before admission,
                          * which sets the limit for this server's
                          * share (ps__admit). */
                         .max_write_queue = PS__WRITE_QUEUE_HEADROOM,
                         .scan_nonfinite = s->cfg.reject_nonfinite};
    ps__peer *p;
    ps_conn *c;

    if (status < 0) {
        ps_warn("accept failed: %s", uv_strerror(status));
        return;
    }
    p = calloc(1, sizeof(*p));
    if (p == NULL) {
        ps_warn("out of memory accepting a connection");
        return;
    }
    p->srv = s;
    if (ps_conn_accept(listener, &cc, p, &c) < 0) {
        free(p);
        return;
    }
    p->conn = c;
    p->last_seen = uv_now(s->loop);
    snprintf(p->name, sizeof(p->name), "peer %s", ps_conn_peer(c));
    p->next = s->peers;
    if (s->peers)
        s->peers->prev = p;
    s->peers = p;
    s->n_peers++;
    ps__make_room(s, p);
}

int ps_kv_server_init(ps_kv_server **out, uv_loop_t *loop, const ps_kv_server_config *cfg,
                      ps_kv_server_done_cb done, void *arg)
{
    ps_kv_server *s;
    int rc = -ENOMEM;

    if (cfg->world < 1 || cfg->num_servers < 1 || cfg->server_index < 0 ||
        cfg->server_index >= cfg->num_servers)
        return -EINVAL;
    s = calloc(1, sizeof(*s));
    if (s == NULL)
        return -ENOMEM;
    s->loop = loop;
    s->cfg = *cfg;
    s->done = done;
    s->done_arg = arg;
    s->total_steps = cfg->lr.total_steps;
    s->max_connections = cfg->max_connections > 0 ? cfg->max_connections : 2 * cfg->world + 16;
    s->handshake_timeout_ms =
        cfg->handshake_timeout_ms > 0 ? cfg->handshake_timeout_ms : PS__HANDSHAKE_TIMEOUT_MS;
    s->rejoin_timeout_ms =
        cfg->rejoin_timeout_ms > 0 ? cfg->rejoin_timeout_ms : PS__REJOIN_TIMEOUT_MS;
    s->wait_report_ms = cfg->wait_report_ms > 0 ? cfg->wait_report_ms : PS__WAIT_REPORT_MS;
    /* Servers see a worker's push of a step one after the other, so a worker
     * joining now may be welcomed one step further by another server; and a
     * server restored from a checkpoint taken every N steps may be up to N
     * steps behind the others. */
    if (s->cfg.max_row_ids == 0)
        s->cfg.max_row_ids = PS_ROWS_DEFAULT_MAX_IDS;
    s->clock_lead = cfg->max_clock_lead > 0 ? cfg->max_clock_lead
                                            : 1 + (cfg->checkpoint_dir ? cfg->checkpoint_every : 0);
    rc = -ENOMEM;
    s->cfg.table = NULL;
    s->workers = calloc((size_t)cfg->world, sizeof(*s->workers));
    s->live_clocks = calloc((size_t)cfg->world, sizeof(*s->live_clocks));
    s->wait_ranks = calloc((size_t)cfg->world, 1);
    s->rank_pushed = calloc((size_t)cfg->world, sizeof(*s->rank_pushed));
    s->finished = calloc((size_t)cfg->world, 1);
    s->has_joined = calloc((size_t)cfg->world, 1);
    s->left_at = calloc((size_t)cfg->world, sizeof(*s->left_at));
    s->lost = calloc((size_t)cfg->world, 1);
    if (s->workers == NULL || s->live_clocks == NULL || s->wait_ranks == NULL ||
        s->rank_pushed == NULL || s->finished == NULL || s->has_joined == NULL ||
        s->left_at == NULL || s->lost == NULL)
        goto fail;
    if (cfg->table && (rc = ps__adopt_table(s, cfg->table, PS_TABLE_CONFIGURE)) < 0)
        goto fail;
    *out = s;
    return 0;
fail:
    ps_kv_server_close(s);
    return rc;
}

int ps_kv_server_start(ps_kv_server *s, const struct sockaddr *addr, int *bound_port)
{
    struct sockaddr_storage ss;
    int len = sizeof(ss);
    int rc;

    uv_tcp_init(s->loop, &s->listener);
    s->listener.data = s;
    s->listening = 1;
    rc = uv_tcp_bind(&s->listener, addr, 0);
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)&s->listener, 128, ps__on_connection);
    if (rc == 0)
        rc = uv_tcp_getsockname(&s->listener, (struct sockaddr *)&ss, &len);
    if (rc < 0)
        return rc;
    {
        uint64_t every = s->handshake_timeout_ms;
        if (s->cfg.heartbeat_timeout_ms > 0 && s->cfg.heartbeat_timeout_ms < every)
            every = s->cfg.heartbeat_timeout_ms;
        if (s->rejoin_timeout_ms < every)
            every = s->rejoin_timeout_ms;
        every = every / 4 ? every / 4 : 1;
        uv_timer_init(s->loop, &s->liveness);
        s->liveness.data = s;
        s->liveness_on = 1;
        uv_timer_start(&s->liveness, ps__on_liveness_check, every, every);
    }
    uv_timer_init(s->loop, &s->waits);
    s->waits.data = s;
    s->waits_on = 1;
    {
        uint64_t every =
            s->wait_report_ms < PS__WAIT_CHECK_MS ? s->wait_report_ms : PS__WAIT_CHECK_MS;
        uv_timer_start(&s->waits, ps__on_waits_timer, every, every);
    }
    ps__durability_start(s);
    *bound_port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                 : ((struct sockaddr_in *)&ss)->sin_port);
    if (!s->has_table)
        ps_info("server %d of %d (mode %s) waits for the first worker to declare the tensors",
                s->cfg.server_index, s->cfg.num_servers, ps_mode_name(s->cfg.mode));
    ps__say_strangers(s);
    return 0;
}

void ps_kv_server_stop(ps_kv_server *s)
{
    if (s->stopping)
        return;
    s->stopping = 1;
    if (s->listening && !uv_is_closing((uv_handle_t *)&s->listener))
        uv_close((uv_handle_t *)&s->listener, NULL);
    if (s->liveness_on)
        uv_close((uv_handle_t *)&s->liveness, NULL);
    if (s->waits_on)
        uv_close((uv_handle_t *)&s->waits, NULL);
    ps__durability_stop(s);
    for (ps__peer *p = s->peers; p; p = p->next)
        ps_conn_close(p->conn, 0);
}

void ps_kv_server_close(ps_kv_server *s)
{
    if (s == NULL)
        return;
    ps__drop_pulls(s, NULL);
    ps__free_table(s);
    for (int r = 0; s->rank_pushed && r < s->cfg.world; r++)
        free(s->rank_pushed[r]);
    free(s->rank_pushed);
    free(s->finished);
    free(s->has_joined);
    free(s->left_at);
    free(s->lost);
    free(s->workers);
    free(s->live_clocks);
    free(s->wait_ranks);
    free(s);
}

void ps_kv_server_stats_get(const ps_kv_server *s, ps_kv_server_stats *out)
{
    uint64_t n = 0, seen = 0;

    memset(out, 0, sizeof(*out));
    out->pushes = s->n_pushes;
    out->pulls = s->n_pulls;
    out->bytes_in = s->bytes_in;
    out->bytes_out = s->bytes_out;
    out->updates = s->n_applied;
    out->dropped = s->n_dropped;
    out->refused = s->n_refused;
    out->nonfinite = s->n_nonfinite;
    out->unstable = s->n_unstable;
    out->too_large = s->n_too_large;
    out->live_workers = s->live;
    out->lost_workers = s->n_lost;
    out->clock = ps__progress_clock(s);
    out->chunks = s->n_local;
    out->weight_bytes =
        s->has_table ? ps_partition_server_numel(s->part, s->cfg.server_index) * sizeof(float) : 0;
    out->memory_bytes = s->has_table ? ps_shard_memory_bytes(s->shard) : 0;
    ps__rows_stats(s, out);
    for (int b = 0; b < PS__STALE_BINS; b++)
        n += s->stale_hist[b];
    out->staleness_count = n;
    out->staleness_max = s->stale_max;
    if (n == 0)
        return;
    out->staleness_mean = (double)s->stale_sum / (double)n;
    for (int b = 0; b < PS__STALE_BINS; b++) {
        seen += s->stale_hist[b];
        if ((double)seen >= 0.99 * (double)n) {
            out->staleness_p99 = b;
            break;
        }
    }
}

int ps_kv_server_worker_get(const ps_kv_server *s, int rank, ps_kv_server_worker *out)
{
    const ps__peer *p;

    if (rank < 0 || rank >= s->cfg.world || s->workers[rank] == NULL)
        return -ENOENT;
    p = s->workers[rank];
    memset(out, 0, sizeof(*out));
    out->rank = p->rank;
    out->clock = p->clock;
    out->pushes = p->n_pushes;
    out->pulls = p->n_pulls;
    out->bytes_in = p->bytes_in;
    out->bytes_out = p->bytes_out;
    out->seconds_since_seen = (double)(uv_now(s->loop) - p->last_seen) / 1000;
    snprintf(out->peer, sizeof(out->peer), "%s", ps_conn_peer(p->conn));
    return 0;
}

const ps_kv_server_config *ps_kv_server_config_get(const ps_kv_server *s)
{
    return &s->cfg;
}

void ps_kv_server_log_summary(const ps_kv_server *s)
{
    ps_kv_server_stats st;

    ps_kv_server_stats_get(s, &st);
    ps_info("summary: clock %" PRIu64 ", %" PRIu64 " pushes (%.1f MB in), %" PRIu64
            " pulls (%.1f MB out), %" PRIu64 " chunk updates, %" PRIu64
            " late pushes dropped, %" PRIu64 " non-finite pushes rejected, %" PRIu64
            " updates refused as non-finite, %" PRIu64 " chunks over --max-grad-norm, %" PRIu64
            " connections refused, %d of %d workers lost (left unfinished, not back within "
            "--rejoin-timeout), %" PRIu64 " bytes of weights in %d chunks (%" PRIu64
            " with optimizer state); staleness mean %.2f, p99 %.0f, max %" PRIu64,
            st.clock, st.pushes, (double)st.bytes_in / 1e6, st.pulls, (double)st.bytes_out / 1e6,
            st.updates, st.dropped, st.nonfinite, st.unstable, st.too_large, st.refused,
            st.lost_workers, s->cfg.world, st.weight_bytes, st.chunks, st.memory_bytes,
            st.staleness_mean, st.staleness_p99, st.staleness_max);
    if (st.row_tables > 0)
        ps_info("summary of %d row table%s: %" PRIu64 " rows pulls (%" PRIu64 " rows), %" PRIu64
                " rows pushes (%" PRIu64 " rows), %" PRIu64 " rows requests refused; rows %" PRIu64
                " stored, %" PRIu64 " created, %" PRIu64 " admitted, %" PRIu64
                " evicted, %.1f MiB%s%s%s",
                st.row_tables, st.row_tables == 1 ? "" : "s", st.row_pulls, st.rows_out,
                st.row_pushes, st.rows_in, st.rows_refused, st.rows_stored, st.rows_created,
                st.rows_admitted, st.rows_evicted, (double)st.rows_memory / (1 << 20),
                s->rows_note ? " (" : "", s->rows_note ? s->rows_note : "",
                s->rows_note ? ")" : "");
}
