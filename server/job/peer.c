/* A peer's refusal: the reason goes back to it (REJECT during the
 * handshake, ERROR after), the log names it, and the connection closes once
 * the reason is written; nothing the peer sends after that is looked at.
 * Below the dispatcher and the handlers (kv_internal.h): both refuse peers
 * through here, and this file calls neither. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>

#include "kv_internal.h"
#include "ps_error.h"
#include "ps_log.h"

static void ps__on_refusal_sent(ps_conn *c, int status, void *arg)
{
    (void)status;
    (void)arg;
    ps_conn_close(c, 0);
}

int ps__peer_handshaking(const ps__peer *p)
{
    return p->state == PS__PEER_HANDSHAKE || p->state == PS__PEER_AUTH ||
           p->state == PS__PEER_TABLE;
}

void ps__peer_refuse(ps__peer *p, int err, char *reason)
{
    Shardps__Header h = SHARDPS__HEADER__INIT;

    p->failed = 1;
    h.type = ps__peer_handshaking(p) ? SHARDPS__MSG_TYPE__REJECT : SHARDPS__MSG_TYPE__ERROR;
    h.status = err;
    h.reason = reason;
    if (ps_conn_send(p->conn, &h, NULL, 0, ps__on_refusal_sent, NULL) < 0)
        ps_conn_close(p->conn, err);
}

void ps__peer_fail(ps__peer *p, int err, const char *fmt, ...)
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
    p->srv->n_refused++;
    ps__peer_refuse(p, err, reason);
}
