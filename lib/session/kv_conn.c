/* The client's connections (kv_conn.h): opening one to each server,
 * retrying with backoff while a server is unreachable or asks us to come
 * back, saying now and then that we wait, corking what is sent before a
 * wait, and judging a connection that closes. A connection that opens and
 * each frame that arrives go to the front through the client's hooks; the
 * handshake and the requests that travel on a connection live above
 * (kv_handshake.c, kv_transfer.c, kv_rows.c). */
#include "kv_conn.h"

#include <stdint.h>
#include <stdio.h>
#include <uv.h>

#include "ps_error.h"
#include "ps_log.h"
#include "tensor_table.h"

/* Past this many queued bytes the connection stops reading (transport.h). A
 * worker may queue a whole step's pushes before it waits for the replies, so
 * the limit is generous: only a server that stops reading reaches it. */
#define PS__WRITE_QUEUE_LIMIT ((size_t)1 << 30)
/* While a server cannot be reached, say so this often: each attempt would
 * flood the log, silence looks like a hang. */
#define PS__WAIT_LOG_MS 5000
/* The first backoff of a connection; it doubles up to 1 s. */
#define PS__FIRST_RETRY_MS 50

static void ps__conn_start(ps__remote *sv);

static void ps__conn_on_retry(uv_timer_t *t)
{
    ps__remote *sv = t->data;

    sv->link.retrying = 0;
    ps__conn_start(sv);
}

/* Tries sv again after its backoff, which doubles up to 1 s. */
static void ps__conn_backoff(ps__remote *sv)
{
    uv_timer_start(&sv->link.retry, ps__conn_on_retry, sv->link.retry_ms, 0);
    sv->link.retry_ms = sv->link.retry_ms * 2 > 1000 ? 1000 : sv->link.retry_ms * 2;
}

/* One "waiting for server" line every PS__WAIT_LOG_MS at most. */
static void ps__conn_say_waiting(ps__remote *sv, const char *reason)
{
    ps_kv_client *c = sv->cl;

    if (uv_now(&c->loop) < sv->link.next_wait_log_ms)
        return;
    ps_info("waiting for server %d at %s (%.0f s left): %s", sv->index, sv->addr_text,
            (double)(c->deadline_ms - uv_now(&c->loop)) / 1000, reason);
    sv->link.next_wait_log_ms = uv_now(&c->loop) + PS__WAIT_LOG_MS;
}

/* A server refused us for now (our previous connection, from before a
 * reconnect, is still live there): try again with backoff until the connect
 * deadline. Returns 1 when a retry is scheduled. */
int ps__conn_retry_later(ps__remote *sv, const char *reason)
{
    ps_kv_client *c = sv->cl;

    if (sv->hs.welcomed || uv_now(&c->loop) + sv->link.retry_ms > c->deadline_ms)
        return 0;
    ps_debug("server %d (%s) asks us to retry: %s", sv->index, sv->addr_text, reason);
    sv->link.retrying = 1;
    ps_conn_close(sv->link.conn, 0);
    ps__conn_backoff(sv);
    return 1;
}

/* A server asks us to come back (-EAGAIN): a joiner reached it before any
 * worker declared the tensors, or all its handshake slots were taken, or
 * the table it held is being withdrawn. Wait and try again, saying so now
 * and then, until the connect deadline. Returns 1 when a retry is
 * scheduled. */
int ps__conn_wait_and_retry(ps__remote *sv, const char *reason)
{
    if (!ps__conn_retry_later(sv, reason))
        return 0;
    ps__conn_say_waiting(sv, reason);
    return 1;
}

/* A frame of sv's: the connection speaks shardps; the front routes it. */
static void ps__conn_on_frame(ps_conn *conn, const ps_frame *f)
{
    ps__remote *sv = ps_conn_data(conn);

    if (sv->cl->error != 0)
        return;
    sv->link.heard = 1;
    sv->cl->hooks.on_frame(sv, f);
}

static void ps__conn_on_close(ps_conn *conn, int err)
{
    ps__remote *sv = ps_conn_data(conn);
    ps_kv_client *c = sv->cl;
    const char *detail = ps_conn_error(conn);

    sv->link.conn = NULL;
    sv->link.corked = 0;
    if (err == 0 || sv->link.retrying)
        return;
    /* Bytes that are not a frame (a bad length, version or checksum, or more
     * payload than any answer of ours can carry) are a broken server, not a
     * lost connection: reconnecting would meet the same server. */
    if ((err == -PS_EPROTO || err == -PS_ETOOBIG) && !sv->link.heard) {
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
    if (err == -PS_ECLOSED && !sv->link.heard && !sv->hs.welcomed) {
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
        if (uv_now(&c->loop) + sv->link.retry_ms > c->deadline_ms) {
            ps__failf(c, -PS_ETIMEOUT,
                      "cannot reach server %d at %s: %s (gave up after the connect timeout; is "
                      "it running, and is the address right?)",
                      sv->index, sv->addr_text, uv_strerror(status));
            return;
        }
        ps__conn_say_waiting(sv, uv_strerror(status));
        ps__conn_backoff(sv);
        return;
    }
    sv->link.conn = conn;
    sv->link.heard = 0;
    c->hooks.on_open(sv);
}

static void ps__conn_start(ps__remote *sv)
{
    ps_kv_client *c = sv->cl;
    /* No answer of a server carries more than a pull of all its keys (or,
     * joining, the job's table): a larger frame is refused before a byte of
     * it is stored. Pulled weights are scanned for Inf and NaN as they
     * arrive. */
    ps_conn_config cc = {.on_frame = ps__conn_on_frame,
                         .on_close = ps__conn_on_close,
                         .place = c->hooks.place,
                         .max_payload = c->joining && c->part == NULL ? PS_TABLE_MAX_BYTES
                                                                      : ps__state_reply_limit(sv),
                         .max_write_queue = PS__WRITE_QUEUE_LIMIT,
                         .scan_nonfinite = 1};
    int rc = ps_conn_connect(&c->loop, (struct sockaddr *)&sv->addr, &cc, sv, ps__conn_on_connect);

    if (rc < 0)
        ps__failf(c, rc, "cannot connect to server %d (%s): %s", sv->index, sv->addr_text,
                  uv_strerror(rc));
}

void ps__conn_open(ps__remote *sv)
{
    sv->link.retry_ms = PS__FIRST_RETRY_MS;
    ps__conn_start(sv);
}

void ps__conn_cork(ps__remote *sv)
{
    if (!sv->link.corked)
        ps_conn_cork(sv->link.conn);
    sv->link.corked = 1;
}

void ps__conn_uncork(ps__remote *sv)
{
    if (sv->link.corked && sv->link.conn)
        ps_conn_uncork(sv->link.conn);
    sv->link.corked = 0;
}
