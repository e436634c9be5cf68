/* The server's connections and their refusals (see peer.h). Calls only the
 * transport and the log: every module that answers a peer refuses it
 * through here. */
#include "peer.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>

#include "ps_error.h"
#include "ps_log.h"

void ps_peers_add(ps_peers *set, ps_peer *p)
{
    p->set = set;
    p->prev = NULL;
    p->next = set->head;
    if (set->head)
        set->head->prev = p;
    set->head = p;
    set->n++;
}

void ps_peers_remove(ps_peers *set, ps_peer *p)
{
    if (p->prev)
        p->prev->next = p->next;
    else
        set->head = p->next;
    if (p->next)
        p->next->prev = p->prev;
    p->next = p->prev = NULL;
    set->n--;
}

static void ps__peer_on_refusal_sent(ps_conn *c, int status, void *arg)
{
    (void)status;
    (void)arg;
    ps_conn_close(c, 0);
}

void ps_peer_refuse(ps_peer *p, int err, char *reason)
{
    Shardps__Header h = SHARDPS__HEADER__INIT;

    p->failed = 1;
    h.type = ps_peer_handshaking(p) ? SHARDPS__MSG_TYPE__REJECT : SHARDPS__MSG_TYPE__ERROR;
    h.status = err;
    h.reason = reason;
    if (ps_conn_send(p->conn, &h, NULL, 0, ps__peer_on_refusal_sent, NULL) < 0)
        ps_conn_close(p->conn, err);
}

void ps_peer_fail(ps_peer *p, int err, const char *fmt, ...)
{
    char reason[1280];
    va_list ap;

    if (p->failed)
        return;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof(reason), fmt, ap);
    va_end(ap);
    /* A joiner told to come back until the tensors are declared is no
     * fault, and it asks again every second. */
    ps_log(err == -EAGAIN ? PS_LOG_INFO : PS_LOG_WARN, "closing %s: %s", p->name, reason);
    p->set->refused++;
    ps_peer_refuse(p, err, reason);
}

void ps_peer_send(ps_peer *p, Shardps__Header *h)
{
    int rc = ps_conn_send(p->conn, h, NULL, 0, NULL, NULL);

    if (rc < 0 && rc != -PS_ECLOSED)
        ps_conn_close(p->conn, rc);
}

void ps_peers_make_room(ps_peers *set, ps_peer *newcomer, int max_connections, int world)
{
    int slots = max_connections - world - set->n_evaluators, waiting = 0;
    ps_peer *oldest = NULL;
    char reason[160];

    if (slots < 1)
        slots = 1;
    for (ps_peer *p = set->head; p; p = p->next)
        if (ps_peer_handshaking(p) && !p->failed) {
            waiting++;
            if (p != newcomer)
                oldest = p; /* the list is newest first */
        }
    if (waiting <= slots || oldest == NULL)
        return;
    set->capped++;
    snprintf(reason, sizeof(reason),
             "all %d handshake slots of this server are taken (--max-connections %d, %d for the "
             "workers): the connection that waited longest gives way; come back",
             slots, max_connections, world);
    if (set->capped == 1 || set->capped % 100 == 0)
        ps_warn("closing %s for %s: %s (%" PRIu64 " so far)", oldest->name, newcomer->name, reason,
                set->capped);
    set->refused++;
    ps_peer_refuse(oldest, -EAGAIN, reason);
}

ps_peer *ps_peers_evaluator_to_replace(const ps_peers *set)
{
    ps_peer *idlest = NULL;

    /* The list is newest first: among those idle equally long, the one
     * admitted first gives way. */
    for (ps_peer *p = set->head; p; p = p->next)
        if (p->state == PS_PEER_EVALUATOR && !p->failed &&
            (idlest == NULL || p->last_read <= idlest->last_read))
            idlest = p;
    return idlest;
}

int ps_peers_evaluator_leave(ps_peers *set, ps_peer *p)
{
    if (p->state != PS_PEER_EVALUATOR)
        return 0;
    p->state = PS_PEER_GONE;
    set->n_evaluators--;
    return 1;
}
