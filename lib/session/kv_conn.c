/* The client's connections (kv_client_internal.h): opening one to each
 * server, retrying with backoff while a server is unreachable or asks us to
 * come back, saying now and then that we wait, routing each frame that
 * arrives to its handler, and judging a connection that closes. The handshake
 * and the requests that travel on a connection live in kv_handshake.c and
 * kv_transfer.c. */
#include <stdint.h>
#include <stdio.h>
#include <uv.h>

#include "kv_client_internal.h"
#include "ps_error.h"
#include "ps_log.h"

/* Past this many queued bytes the connection stops reading (transport.h). A
 * worker may queue a whole step's pushes before it waits for the replies, so
 * the limit is generous: only a server that stops reading reaches it. */
#define PS__WRITE_QUEUE_LIMIT ((size_t)1 << 30)
/* While a server cannot be reached, say so this often: each attempt would
 * flood the log, silence looks like a hang. */
#define PS__WAIT_LOG_MS 5000

static void ps__on_retry(uv_timer_t *t)
{
    ps__remote *sv = t->data;

    sv->retrying = 0;
    ps__start_connect(sv);
}

/* Tries sv again after its backoff, which doubles up to 1 s. */
static void ps__backoff(ps__remote *sv)
{
    uv_timer_start(&sv->retry, ps__on_retry, sv->retry_ms, 0);
    sv->retry_ms = sv->retry_ms * 2 > 1000 ? 1000 : sv->retry_ms * 2;
}

/* One "waiting for server" line every PS__WAIT_LOG_MS at most. */
static void ps__say_waiting(ps__remote *sv, const char *reason)
{
    ps_kv_client *c = sv->cl;

    if (uv_now(&c->loop) < sv->next_wait_log_ms)
        return;
    ps_info("waiting for server %d at %s (%.0f s left): %s", sv->index, sv->addr_text,
            (double)(c->deadline_ms - uv_now(&c->loop)) / 1000, reason);
    sv->next_wait_log_ms = uv_now(&c->loop) + PS__WAIT_LOG_MS;
}

/* A server refused us for now (our previous connection, from before a
 * reconnect, is still live there): try again with backoff until the connect
 * deadline. Returns 1 when a retry is scheduled. */
int ps__retry_later(ps__remote *sv, const char *reason)
{
    ps_kv_client *c = sv->cl;

    if (sv->welcomed || uv_now(&c->loop) + sv->retry_ms > c->deadline_ms)
        return 0;
    ps_debug("server %d (%s) asks us to retry: %s", sv->index, sv->addr_text, reason);
    sv->retrying = 1;
    ps_conn_close(sv->conn, 0);
    ps__backoff(sv);
    return 1;
}

/* A server asks us to come back (-EAGAIN): a joiner reached it before any
 * worker declared the tensors, or all its handshake slots were taken, or
 * the table it held is being withdrawn. Wait and try again, saying so now
 * and then, until the connect deadline. Returns 1 when a retry is
 * scheduled. */
int ps__wait_and_retry(ps__remote *sv, const char *reason)
{
    if (!ps__retry_later(sv, reason))
        return 0;
    ps__say_waiting(sv, reason);
    return 1;
}

/* Routes a server's frame to its handler. Any frame but a WAITING is part
 * of an answer, so what the server owes us is counted from here. */
static void ps__conn_on_frame(ps_conn *conn, const ps_frame *f)
{
    ps__remote *sv = ps_conn_data(conn);
    ps_kv_client *c = sv->cl;
    const Shardps__Header *h = f->hdr;
    char why[128], name[32];

    if (c->error != 0)
        return;
    sv->heard = 1;
    /* A WAITING says the server is alive but not that it will answer: the
     * deadline on what it owes us stands. */
    if (h->type != SHARDPS__MSG_TYPE__WAITING)
        sv->owed_since_ms = uv_now(&c->loop);
    switch (h->type) {
    case SHARDPS__MSG_TYPE__WELCOME:
        ps__handle_welcome(sv, f);
        break;
    case SHARDPS__MSG_TYPE__TABLE:
        ps__handle_told_table(sv, f);
        break;
    case SHARDPS__MSG_TYPE__AUTH_CHALLENGE:
        ps__handle_challenge(sv, f);
        break;
    case SHARDPS__MSG_TYPE__REJECT:
    case SHARDPS__MSG_TYPE__ERROR:
        ps__handle_refusal(sv, f);
        break;
    case SHARDPS__MSG_TYPE__PULL_REPLY:
        ps__handle_pull_reply(sv, f);
        break;
    case SHARDPS__MSG_TYPE__PUSH_REPLY:
        ps__handle_push_reply(sv, f);
        break;
    case SHARDPS__MSG_TYPE__WAITING:
        ps__handle_waiting(sv, f);
        break;
    case SHARDPS__MSG_TYPE__PULL_ROWS_REPLY:
    case SHARDPS__MSG_TYPE__PUSH_ROWS_REPLY:
        ps__handle_rows_reply(sv, f);
        break;
    default:
        snprintf(why, sizeof(why), "sent a %s, which no server sends",
                 ps_reply_type_name(h->type, name, sizeof(name)));
        ps__distrust(sv, why);
        break;
    }
}

static void ps__conn_on_close(ps_conn *conn, int err)
{
    ps__remote *sv = ps_conn_data(conn);
    ps_kv_client *c = sv->cl;
    const char *detail = ps_conn_error(conn);

    sv->conn = NULL;
    sv->corked = 0;
    if (err == 0 || sv->retrying)
        return;
    /* Bytes that are not a frame (a bad length, version or checksum, or more
     * payload than any answer of ours can carry) are a broken server, not a
     * lost connection: reconnecting would meet the same server. */
    if ((err == -PS_EPROTO || err == -PS_ETOOBIG) && !sv->heard) {
        /* Not one frame yet: most likely another program at that port (an
         * HTTP server given by mistake), which retrying cannot change. */
        ps__failf(c, -PS_EPROTO, "server %d (%s) is not a shardps server: %s", sv->index,
                  sv->addr_text, *detail ? detail : ps_strerror(err));
        return;
    }
    if (err == -PS_EPROTO || err == -PS_EVERSION || err == -PS_ETOOBIG || err == -PS_ECRC) {
        char why[320];
        snprintf(why, sizeof(why), "sent a malformed frame (%s%s%s)", ps_strerror(err),
                 *detail ? ": " : "", detail);
        ps__distrust(sv, why);
        return;
    }
    /* A shardps server says why before it closes on a HELLO; a program
     * that closes without a word is most likely not one (an HTTP port given
     * by mistake). */
    if (err == -PS_ECLOSED && !sv->heard && !sv->welcomed) {
        ps__failf(c, err,
                  "server %d (%s) closed the connection without answering our HELLO: another "
                  "program at that address (a server's --metrics-port?), or a server stopping",
                  sv->index, sv->addr_text);
        return;
    }
    ps__failf(c, err, "lost connection to server %d (%s): %s%s%s", sv->index, sv->addr_text,
              ps_strerror(err), *detail ? ": " : "", detail);
}

static void ps__conn_on_connect(ps_conn *conn, int status, void *data)
{
    ps__remote *sv = data;
    ps_kv_client *c = sv->cl;

    if (status < 0) {
        if (uv_now(&c->loop) + sv->retry_ms > c->deadline_ms) {
            ps__failf(c, -PS_ETIMEOUT,
                      "cannot reach server %d at %s: %s (gave up after the connect timeout; is "
                      "it running, and is the address right?)",
                      sv->index, sv->addr_text, uv_strerror(status));
            return;
        }
        ps__say_waiting(sv, uv_strerror(status));
        ps__backoff(sv);
        return;
    }
    sv->conn = conn;
    sv->heard = 0;
    ps__send_hello(sv);
}

void ps__start_connect(ps__remote *sv)
{
    ps_kv_client *c = sv->cl;
    /* No answer of a server carries more than a pull of all its keys (or,
     * joining, the job's table): a larger frame is refused before a byte of
     * it is stored. Pulled weights are scanned for Inf and NaN as they
     * arrive. */
    size_t max = sv->bytes < c->cfg.max_payload ? sv->bytes : c->cfg.max_payload;
    ps_conn_config cc = {.on_frame = ps__conn_on_frame,
                         .on_close = ps__conn_on_close,
                         .place = ps__place_reply,
                         .max_payload = c->joining && c->part == NULL ? PS_TABLE_MAX_BYTES : max,
                         .max_write_queue = PS__WRITE_QUEUE_LIMIT,
                         .scan_nonfinite = 1};
    int rc = ps_conn_connect(&c->loop, (struct sockaddr *)&sv->addr, &cc, sv, ps__conn_on_connect);

    if (rc < 0)
        ps__failf(c, rc, "cannot connect to server %d (%s): %s", sv->index, sv->addr_text,
                  uv_strerror(rc));
}
