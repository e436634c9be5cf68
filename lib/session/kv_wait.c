/* The client's waiting (kv_wait.h): its loop runs only inside
 * connect, wait and progress, until every request started is answered or a
 * server fails us. Each server has a deadline on the answer it owes (the
 * request timeout), and the servers that asked for heartbeats get them while
 * the worker waits. A server holding our pull for other workers says so
 * (WAITING), and we say it too. */
#include "kv_wait.h"

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <uv.h>

#include "kv_conn.h"
#include "ps_error.h"
#include "ps_log.h"

/* The automatic request timeout: 3 heartbeat timeouts of the servers, each 4
 * of the intervals their WELCOMEs ask for. A sync barrier waits at most about
 * one heartbeat timeout for a worker that stopped, so this is slack enough
 * for a barrier and short enough for a dead server. */
#define PS__AUTO_HEARTBEATS     12
#define PS__MIN_AUTO_REQUEST_MS 1000

/* The heartbeat timer's callback: a HEARTBEAT to every welcomed server that
 * asked for them. */
static void ps__wait_on_heartbeat(uv_timer_t *t)
{
    ps_kv_client *c = t->data;

    for (int s = 0; s < c->n_servers; s++) {
        ps__remote *sv = &c->servers[s];
        Shardps__Header h = SHARDPS__HEADER__INIT;

        if (sv->link.conn == NULL || !sv->hs.welcomed || sv->hs.welcome.heartbeat_ms == 0)
            continue;
        h.type = SHARDPS__MSG_TYPE__HEARTBEAT;
        if (ps_conn_send(sv->link.conn, &h, NULL, 0, NULL, NULL) < 0)
            ps__failf(c, -PS_ECLOSED, "cannot send a heartbeat to server %d (%s)", sv->index,
                      sv->addr_text);
    }
}

/* What sv owes us and since when it is overdue (UINT64_MAX: nothing owed). */
static uint64_t ps__wait_owed_until(const ps__remote *sv, const char **what)
{
    const ps_kv_client *c = sv->cl;
    uint64_t limit = c->request_ms;
    int pull = 0;

    if (sv->link.conn == NULL || sv->link.retrying)
        return UINT64_MAX;
    if (!sv->hs.welcomed) {
        *what = "its WELCOME";
    } else if (sv->dense.pull_dest != NULL) {
        *what = "the answer to a pull";
        pull = 1;
    } else if (sv->dense.push_n > 0) {
        *what = "the acknowledgement of a push";
    } else if (sv->rows.busy) {
        *what =
            sv->rows.req.push ? "the acknowledgement of a rows push" : "the answer to a rows pull";
        pull = !sv->rows.req.push;
    } else {
        return UINT64_MAX;
    }
    /* Before its first answer to a pull, dense or rows, a server may be
     * waiting for the whole job to join, which may take as long as
     * connecting does. */
    if (pull && !sv->owed.answered)
        limit += (uint64_t)(c->cfg.connect_timeout_s * 1000);
    return sv->owed.since_ms + limit;
}

static uint64_t ps__wait_next_deadline(ps_kv_client *c)
{
    uint64_t due = UINT64_MAX;
    const char *what;

    for (int s = 0; s < c->n_servers; s++) {
        uint64_t t = ps__wait_owed_until(&c->servers[s], &what);
        if (t < due)
            due = t;
    }
    return due;
}

void ps__wait_on_deadline(uv_timer_t *t)
{
    /* Nothing to do here: waking the loop lets ps__wait_run look. */
    (void)t;
}

void ps__wait_keep_alive(ps_kv_client *c, uint32_t every_ms)
{
    if (every_ms && (!uv_is_active((uv_handle_t *)&c->heartbeat) ||
                     uv_timer_get_repeat(&c->heartbeat) > every_ms))
        uv_timer_start(&c->heartbeat, ps__wait_on_heartbeat, every_ms, every_ms);
}

void ps__wait_auto_timeout(ps_kv_client *c)
{
    uint64_t hb = 0;

    for (int s = 0; s < c->n_servers; s++)
        if (c->servers[s].hs.welcome.heartbeat_ms > hb)
            hb = c->servers[s].hs.welcome.heartbeat_ms;
    c->request_ms = hb == 0 ? PS__DEFAULT_REQUEST_MS : hb * PS__AUTO_HEARTBEATS;
    if (c->request_ms < PS__MIN_AUTO_REQUEST_MS)
        c->request_ms = PS__MIN_AUTO_REQUEST_MS;
}

/* A WAITING says the server is alive but not that it will answer: the
 * deadline on what it owes us stands. Any other frame is part of an
 * answer. */
void ps__wait_heard(ps__remote *sv, const ps_frame *f)
{
    if (f->hdr->type != SHARDPS__MSG_TYPE__WAITING)
        sv->owed.since_ms = uv_now(&sv->cl->loop);
}

void ps__wait_on_waiting(ps__remote *sv, const ps_frame *f)
{
    ps_kv_client *c = sv->cl;
    ps_reply_pull rows = {0};
    const ps_reply_pull *held = NULL;
    char why[256];

    /* The pull it may hold: the dense one, or a rows pull in flight. */
    if (sv->dense.pull_dest) {
        held = &sv->dense.pull;
    } else if (sv->rows.busy && !sv->rows.req.push) {
        rows.request_id = sv->rows.req.request_id;
        rows.clock = sv->rows.req.clock;
        held = &rows;
    }
    if (ps_reply_check_waiting(f, held, sv->owed.waiting, sizeof(sv->owed.waiting), why,
                               sizeof(why)) < 0) {
        ps__distrust(sv, why);
        return;
    }
    sv->owed.waiting_id = f->hdr->request_id;
    sv->owed.waiting_ms = uv_now(&c->loop);
    ps_info("waiting for server %d (%s): %s (%.0f s so far)", sv->index, sv->addr_text,
            sv->owed.waiting, (double)(sv->owed.waiting_ms - sv->owed.since_ms) / 1000);
}

/* Whether sv said why it holds the pull in flight (a WAITING for it), dense
 * or rows. */
static int ps__wait_said_why(const ps__remote *sv)
{
    if (sv->owed.waiting_ms == 0)
        return 0;
    if (sv->dense.pull_dest != NULL)
        return sv->owed.waiting_id == sv->dense.pull.request_id;
    return sv->rows.busy && !sv->rows.req.push && sv->owed.waiting_id == sv->rows.req.request_id;
}

/* A server that owes us an answer has sent nothing for too long. If it said
 * it holds our pull for other workers, they are the ones named: the server
 * is alive and waiting too. */
static void ps__wait_fail_overdue(ps__remote *sv, const char *what)
{
    ps_kv_client *c = sv->cl;
    uint64_t now = uv_now(&c->loop);
    double waited = (double)(now - sv->owed.since_ms) / 1000;

    if (ps__wait_said_why(sv) && sv->owed.waiting_ms >= sv->owed.since_ms) {
        ps__failf(c, -PS_ETIMEOUT,
                  "gave up after %.1f s waiting for %s from server %d (%s), which is waiting for "
                  "other workers: %s (said %.0f s ago); are they running? (--request-timeout "
                  "%.1f s, and before training starts also --connect-timeout)",
                  waited, what, sv->index, sv->addr_text, sv->owed.waiting,
                  (double)(now - sv->owed.waiting_ms) / 1000, (double)c->request_ms / 1000);
        return;
    }
    ps__failf(c, -PS_ETIMEOUT,
              "server %d (%s) sent nothing for %.1f s while we waited for %s (request timeout "
              "%.1f s, --request-timeout); giving up on it",
              sv->index, sv->addr_text, waited, what, (double)c->request_ms / 1000);
}

/* A deadline passed. Whatever already arrived is read first: a process that
 * was stopped (SIGSTOP, a suspended VM) wakes with its timers overdue and the
 * server's answer, or the server closing on it, already in the socket. Only a
 * server still owing an answer after that has gone silent. */
static void ps__wait_check_overdue(ps_kv_client *c)
{
    uv_run(&c->loop, UV_RUN_NOWAIT);
    uv_update_time(&c->loop);
    for (int s = 0; s < c->n_servers && c->error == 0; s++) {
        ps__remote *sv = &c->servers[s];
        const char *what = "";
        uint64_t due = ps__wait_owed_until(sv, &what);
        if (due <= uv_now(&c->loop))
            ps__wait_fail_overdue(sv, what);
    }
}

void ps_kv_client_set_stop_flag(ps_kv_client *c, const volatile sig_atomic_t *flag)
{
    c->cfg.stop = flag;
}

/* The program asked us to stop (see ps_kv_client_set_stop_flag): gives up
 * on what is owed, connecting at once, waiting once the wait is a long one.
 * Returns 1 when the client has failed with -EINTR. */
static int ps__wait_stop_asked(ps_kv_client *c)
{
    const ps__remote *owes = NULL;
    const char *what = "";

    uint64_t now = uv_now(&c->loop);
    int held = 0;

    if (c->cfg.stop == NULL || *c->cfg.stop == 0 || c->error != 0)
        return 0;
    if (c->stop_seen_ms == 0)
        c->stop_seen_ms = now ? now : 1;
    /* Waiting, the step ends as it would: our pushes are delivered, and a
     * pull the servers answer soon is taken (the program then stops at the
     * step's boundary), unless they said they hold it for other workers,
     * or it has not come within the grace. */
    if (c->connecting == 0) {
        for (int s = 0; s < c->n_servers; s++) {
            if (c->servers[s].link.conn != NULL && c->servers[s].dense.push_n > 0)
                return 0;
            held |= ps__wait_said_why(&c->servers[s]);
        }
        if (!held && now - c->stop_seen_ms < PS_KV_STOP_GRACE_MS)
            return 0;
    }
    for (int s = 0; s < c->n_servers && owes == NULL; s++) {
        const ps__remote *sv = &c->servers[s];
        if (!sv->hs.welcomed)
            what = sv->link.conn ? "to welcome us" : "to accept a connection";
        else if (sv->dense.pull_dest != NULL)
            what = "to answer a pull";
        else
            continue;
        owes = sv;
    }
    c->error = -EINTR;
    if (owes)
        snprintf(c->last_error, sizeof(c->last_error),
                 "stopped on request while waiting for server %d (%s) %s%s%s", owes->index,
                 owes->addr_text, what, ps__wait_said_why(owes) ? "; it said: " : "",
                 ps__wait_said_why(owes) ? owes->owed.waiting : "");
    else
        snprintf(c->last_error, sizeof(c->last_error), "stopped on request");
    return 1;
}

/* The loop only runs inside connect, wait and progress, so the heartbeat
 * timer fires while the worker waits on the servers or calls progress; while
 * it computes, its pushes and pulls are its sign of life. The timer keeps
 * running between calls: a loop that evaluates for longer than the servers'
 * heartbeat timeout stays in the job by calling progress now and then. */
int ps__wait_run(ps_kv_client *c)
{
    uint64_t every = 0;

    /* The loop's clock stood still while the worker computed. */
    uv_update_time(&c->loop);
    for (int s = 0; s < c->n_servers; s++) {
        ps__remote *sv = &c->servers[s];
        uint32_t hb = sv->hs.welcome.heartbeat_ms;
        if (hb && (every == 0 || hb < every))
            every = hb;
        /* The server cannot answer before we wait: requests are corked. */
        if (sv->hs.welcomed)
            sv->owed.since_ms = uv_now(&c->loop);
    }
    if (every && (!uv_is_active((uv_handle_t *)&c->heartbeat) ||
                  uv_timer_get_repeat(&c->heartbeat) != every))
        uv_timer_start(&c->heartbeat, ps__wait_on_heartbeat, every, every);
    while (c->error == 0 && (c->outstanding > 0 || c->connecting > 0) && !ps__wait_stop_asked(c)) {
        uint64_t due = ps__wait_next_deadline(c), now;
        uv_update_time(&c->loop);
        now = uv_now(&c->loop);
        if (due <= now) {
            ps__wait_check_overdue(c);
            continue;
        }
        /* A signal does not wake the loop (libuv polls again after EINTR):
         * with a stop flag, the loop wakes to look at it. */
        if (c->cfg.stop && (due == UINT64_MAX || due - now > PS_KV_STOP_CHECK_MS))
            due = now + PS_KV_STOP_CHECK_MS;
        if (due != UINT64_MAX)
            uv_timer_start(&c->deadline, ps__wait_on_deadline, due - now, 0);
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

int ps_kv_client_flush(ps_kv_client *c)
{
    for (int s = 0; s < c->n_servers; s++)
        ps__conn_uncork(&c->servers[s]);
    return ps_kv_client_progress(c);
}

int ps_kv_client_wait(ps_kv_client *c)
{
    for (int s = 0; s < c->n_servers; s++)
        ps__conn_uncork(&c->servers[s]);
    return ps__wait_run(c);
}
