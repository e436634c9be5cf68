/* The key-value client's front (kv_client.h; the files below it are listed
 * in kv_state.h): its creation, connecting to every server and freeing,
 * and the one place that routes what the connections report. A frame goes
 * to the file that owns its kind of state, a reply's payload to the file
 * that placed the request, and what follows an event the handler does not
 * own is run here: a server that welcomed us gets heartbeats. The lower
 * files never call back up; they are reached through ps__client_hooks,
 * set here. Single-threaded: all I/O happens inside ps_kv_client_connect /
 * _wait / _progress on the client's private loop. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "kv_conn.h"
#include "kv_handshake.h"
#include "kv_rows.h"
#include "kv_state.h"
#include "kv_transfer.h"
#include "kv_wait.h"
#include "ps_error.h"
#include "ps_log.h"
#include "tensor_table.h"

/* How long a client being freed lets what it queued reach the servers (see
 * ps__front_free) before it closes the connections regardless. */
#define PS__FLUSH_MS 2000

/* Routes a server's frame to the file that owns what it answers. */
static void ps__front_on_frame(ps__remote *sv, const ps_frame *f)
{
    const Shardps__Header *h = f->hdr;
    char why[128], name[32];

    ps__wait_heard(sv, f);
    switch (h->type) {
    case SHARDPS__MSG_TYPE__WELCOME:
        /* The other servers (or, joining, a declarer) may keep us longer
         * than this one's heartbeat timeout: it hears from us meanwhile. */
        if (ps__hs_on_welcome(sv, f))
            ps__wait_keep_alive(sv->cl, sv->hs.welcome.heartbeat_ms);
        break;
    case SHARDPS__MSG_TYPE__TABLE:
        ps__hs_on_table(sv, f);
        break;
    case SHARDPS__MSG_TYPE__AUTH_CHALLENGE:
        ps__hs_on_challenge(sv, f);
        break;
    case SHARDPS__MSG_TYPE__REJECT:
    case SHARDPS__MSG_TYPE__ERROR:
        ps__hs_on_refusal(sv, f);
        break;
    case SHARDPS__MSG_TYPE__PULL_REPLY:
        ps__transfer_on_pull_reply(sv, f);
        break;
    case SHARDPS__MSG_TYPE__PUSH_REPLY:
        ps__transfer_on_push_reply(sv, f);
        break;
    case SHARDPS__MSG_TYPE__WAITING:
        ps__wait_on_waiting(sv, f);
        break;
    case SHARDPS__MSG_TYPE__PULL_ROWS_REPLY:
    case SHARDPS__MSG_TYPE__PUSH_ROWS_REPLY:
        ps__rows_on_reply(sv, f);
        break;
    default:
        snprintf(why, sizeof(why), "sent a %s, which no server sends",
                 ps_reply_type_name(h->type, name, sizeof(name)));
        ps__distrust(sv, why);
        break;
    }
}

/* Every connection's place callback: a reply's payload goes where the
 * request that it answers asked for it. */
static int ps__front_place(ps_conn *conn, const Shardps__Header *h, const ps_frame_piece **pieces)
{
    ps__remote *sv = ps_conn_data(conn);

    if (h->type == SHARDPS__MSG_TYPE__PULL_ROWS_REPLY)
        return ps__rows_place(sv, h, pieces);
    return ps__transfer_place(sv, h, pieces);
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
    c->hooks = (ps__client_hooks){
        .on_open = ps__hs_send_hello, .on_frame = ps__front_on_frame, .place = ps__front_place};
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
        uv_timer_init(&c->loop, &sv->link.retry);
        sv->link.retry.data = sv;
        c->n_timers = s + 1;
        if (ps_parse_hostport(cfg->servers[s], &sv->addr, 0, err, sizeof(err)) < 0) {
            ps_error("server %d: %s", s, err);
            rc = -EINVAL;
            goto fail;
        }
    }
    c->joining = cfg->spec.n_tensors == 0;
    if (!c->joining && (rc = ps__state_layout(c)) < 0)
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

int ps_kv_client_connect(ps_kv_client *c, uint64_t *start_clock)
{
    int rc;

    c->deadline_ms = uv_now(&c->loop) + (uint64_t)(c->cfg.connect_timeout_s * 1000);
    c->connecting = c->n_servers;
    for (int s = 0; s < c->n_servers; s++)
        ps__conn_open(&c->servers[s]);
    rc = ps__wait_run(c);
    if (rc < 0)
        return rc;
    for (int s = 0; s < c->n_servers; s++)
        if (c->servers[s].hs.welcome.values_wanted &&
            (rc = ps__transfer_write(&c->servers[s], 1, c->cfg.values)) < 0)
            return rc;
    /* Borrowed for this call only. */
    c->cfg.values = NULL;
    if (c->joining && c->part == NULL) {
        rc = ps__state_layout(c);
        if (rc < 0) {
            ps__failf(c, rc,
                      "cannot lay out the %d tensors the servers hold in %zu-byte chunks: %s",
                      c->cfg.spec.n_tensors, c->cfg.chunk_bytes, ps_strerror(rc));
            return rc;
        }
        /* Connected before the answers' size was known. */
        for (int s = 0; s < c->n_servers; s++) {
            ps__remote *sv = &c->servers[s];
            if (sv->link.conn)
                ps_conn_set_max_payload(sv->link.conn, ps__state_reply_limit(sv));
        }
    }
    if (c->cfg.request_timeout_s <= 0)
        ps__wait_auto_timeout(c);
    /* Servers advance independently, so a worker joining mid-run may be
     * welcomed at different clocks. In sync mode it starts at the lowest: each
     * push is labelled with the clock of the weights it came from, so every
     * server gets a gradient for its own current step. Elsewhere it starts at
     * the highest, and the others move its clock forward on its first pull. */
    *start_clock = c->servers[0].hs.welcome.clock;
    for (int s = 1; s < c->n_servers; s++) {
        uint64_t w = c->servers[s].hs.welcome.clock;
        if (c->mode.sync ? w < *start_clock : w > *start_clock)
            *start_clock = w;
    }
    return 0;
}

static void ps__front_on_bye_sent(ps_conn *conn, int status, void *arg)
{
    (void)status;
    (void)arg;
    ps_conn_close(conn, 0);
}

static int ps__front_any_connection(const ps_kv_client *c)
{
    for (int s = 0; s < c->n_timers; s++)
        if (c->servers[s].link.conn)
            return 1;
    return 0;
}

static void ps__front_free(ps_kv_client *c, int goodbye)
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

        uv_close((uv_handle_t *)&sv->link.retry, NULL);
        if (sv->link.conn == NULL)
            continue;
        /* Requests started and never waited for leave before the goodbye,
         * which would otherwise wait behind them for ever. */
        ps__conn_uncork(sv);
        h.type = goodbye ? SHARDPS__MSG_TYPE__BYE : SHARDPS__MSG_TYPE__HEARTBEAT;
        if (!sv->hs.welcomed ||
            ps_conn_send(sv->link.conn, &h, NULL, 0, ps__front_on_bye_sent, NULL) < 0)
            ps_conn_close(sv->link.conn, 0);
    }
    /* Bounded: a server that stopped reading cannot hold us. */
    uv_update_time(&c->loop);
    until = uv_now(&c->loop) + PS__FLUSH_MS;
    uv_timer_start(&c->deadline, ps__wait_on_deadline, PS__FLUSH_MS, 0);
    while (ps__front_any_connection(c) && uv_now(&c->loop) < until)
        uv_run(&c->loop, UV_RUN_ONCE);
    for (int s = 0; s < c->n_timers; s++)
        if (c->servers[s].link.conn)
            ps_conn_close(c->servers[s].link.conn, 0);
    uv_close((uv_handle_t *)&c->deadline, NULL);
    /* Let the goodbyes reach the wire and every handle finish closing. */
    uv_run(&c->loop, UV_RUN_DEFAULT);
    uv_loop_close(&c->loop);
    ps__state_free(c);
}

void ps_kv_client_close(ps_kv_client *c)
{
    ps__front_free(c, 1);
}

void ps_kv_client_abandon(ps_kv_client *c)
{
    ps__front_free(c, 0);
}
