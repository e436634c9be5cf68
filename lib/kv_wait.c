/* The client's waiting (kv_client_internal.h): its loop runs only inside
 * connect, wait and progress, until every request started is answered or a
 * server fails us. Each server has a deadline on the answer it owes (the
 * request timeout), and the servers that asked for heartbeats get them while
 * the worker waits. */
#include <stdint.h>
#include <uv.h>

#include "kv_client_internal.h"
#include "ps_error.h"

void ps__on_heartbeat(uv_timer_t *t)
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

void ps__on_deadline(uv_timer_t *t)
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

/* The loop only runs inside connect, wait and progress, so the heartbeat
 * timer fires while the worker waits on the servers or calls progress; while
 * it computes, its pushes and pulls are its sign of life. The timer keeps
 * running between calls: a loop that evaluates for longer than the servers'
 * heartbeat timeout stays in the job by calling progress now and then. */
int ps__run_until_done(ps_kv_client *c)
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
    if (every && (!uv_is_active((uv_handle_t *)&c->heartbeat) ||
                  uv_timer_get_repeat(&c->heartbeat) != every))
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
    return c->error;
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
