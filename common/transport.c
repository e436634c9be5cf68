/* Framed connections over libuv (see transport.h). */
#include "transport.h"

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps_error.h"
#include "ps_log.h"

/* Headroom for iovecs in one write: the header plus this many payload pieces
 * fit in the request itself; more are allocated. */
#define PS__INLINE_BUFS 8

struct ps_conn {
    uv_tcp_t tcp;
    ps_conn_config cfg;
    void *data;
    ps_frame_decoder *dec;
    int closing;
    int reading;
    int delivering; /* inside ps__deliver: frames are being handed out */
    int close_err;
    char peer[64];
    ps_conn_connect_cb connect_cb;
    uv_connect_t connect_req;
};

typedef struct {
    uv_write_t req;
    ps_conn *conn;
    uint8_t *head; /* [prefix][header], owned by the request */
    ps_conn_sent_cb sent;
    void *arg;
    uv_buf_t *bufs;
    uv_buf_t inline_bufs[PS__INLINE_BUFS + 1];
} ps__write;

static void ps__on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void ps__on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

static void ps__on_uv_close(uv_handle_t *h)
{
    ps_conn *c = h->data;

    if (c->cfg.on_close)
        c->cfg.on_close(c, c->close_err);
    ps_frame_decoder_free(c->dec);
    free(c);
}

void ps_conn_close(ps_conn *c, int err)
{
    if (c->closing)
        return;
    c->closing = 1;
    c->close_err = err;
    uv_read_stop((uv_stream_t *)&c->tcp);
    uv_close((uv_handle_t *)&c->tcp, ps__on_uv_close);
}

static void ps__deliver(ps_conn *c);

static void ps__update_reading(ps_conn *c)
{
    size_t queued = uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp);
    int want = !c->closing && queued <= c->cfg.max_write_queue;

    if (want == c->reading)
        return;
    if (want) {
        if (uv_read_start((uv_stream_t *)&c->tcp, ps__on_alloc, ps__on_read) == 0)
            c->reading = 1;
        /* Frames that arrived before reading paused are handed out now. */
        ps__deliver(c);
    } else {
        uv_read_stop((uv_stream_t *)&c->tcp);
        c->reading = 0;
    }
}

static void ps__on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    ps_conn *c = h->data;
    uint8_t *p;
    size_t len;

    (void)suggested;
    ps_frame_decoder_buf(c->dec, &p, &len);
    /* libuv's read length is an unsigned int on some platforms; cap it. */
    if (len > (1u << 30))
        len = 1u << 30;
    *buf = uv_buf_init((char *)p, (unsigned int)len);
}

static void ps__on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    ps_conn *c = s->data;

    (void)buf;
    if (nread < 0) {
        ps_conn_close(c, nread == UV_EOF ? -PS_ECLOSED : (int)nread);
        return;
    }
    ps_frame_decoder_commit(c->dec, (size_t)nread);
    ps__deliver(c);
}

/* Hands out complete frames while the connection reads: once a reply queue
 * over max_write_queue pauses reading, the frames already buffered wait too,
 * so one read's worth of requests cannot push the queue past its limit. */
static void ps__deliver(ps_conn *c)
{
    ps_frame f;
    int rc = 0;

    if (c->delivering)
        return;
    c->delivering = 1;
    while (!c->closing && c->reading && (rc = ps_frame_decoder_next(c->dec, &f)) == 1)
        c->cfg.on_frame(c, &f);
    c->delivering = 0;
    if (!c->closing && rc < 0)
        ps_conn_close(c, rc);
}

static ps_conn *ps__conn_new(uv_loop_t *loop, const ps_conn_config *cfg, void *data)
{
    ps_conn *c = calloc(1, sizeof(*c));

    if (c == NULL)
        return NULL;
    if (ps_frame_decoder_init(&c->dec, cfg->max_payload) < 0) {
        free(c);
        return NULL;
    }
    c->cfg = *cfg;
    c->data = data;
    uv_tcp_init(loop, &c->tcp);
    c->tcp.data = c;
    snprintf(c->peer, sizeof(c->peer), "?");
    return c;
}

static void ps__conn_started(ps_conn *c)
{
    struct sockaddr_storage ss;
    int len = sizeof(ss);

    uv_tcp_nodelay(&c->tcp, 1);
    if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &len) == 0)
        ps_format_addr((struct sockaddr *)&ss, c->peer, sizeof(c->peer));
    ps__update_reading(c);
}

int ps_conn_accept(uv_stream_t *listener, const ps_conn_config *cfg, void *data, ps_conn **out)
{
    ps_conn *c = ps__conn_new(listener->loop, cfg, data);
    int rc;

    if (c == NULL)
        return -ENOMEM;
    rc = uv_accept(listener, (uv_stream_t *)&c->tcp);
    if (rc < 0)
        goto fail;
    ps__conn_started(c);
    *out = c;
    return 0;
fail:
    c->cfg.on_close = NULL;
    ps_conn_close(c, rc);
    return rc;
}

static void ps__on_connect(uv_connect_t *req, int status)
{
    ps_conn *c = req->data;

    if (status < 0 || c->closing) {
        c->cfg.on_close = NULL;
        c->connect_cb(NULL, status < 0 ? status : UV_ECANCELED, c->data);
        ps_conn_close(c, status);
        return;
    }
    ps__conn_started(c);
    c->connect_cb(c, 0, c->data);
}

int ps_conn_connect(uv_loop_t *loop, const struct sockaddr *addr, const ps_conn_config *cfg,
                    void *data, ps_conn_connect_cb cb)
{
    ps_conn *c = ps__conn_new(loop, cfg, data);
    int rc;

    if (c == NULL)
        return -ENOMEM;
    c->connect_cb = cb;
    c->connect_req.data = c;
    rc = uv_tcp_connect(&c->connect_req, &c->tcp, addr, ps__on_connect);
    if (rc < 0)
        goto fail;
    return 0;
fail:
    c->cfg.on_close = NULL;
    ps_conn_close(c, rc);
    return rc;
}

static void ps__on_write(uv_write_t *req, int status)
{
    ps__write *w = req->data;
    ps_conn *c = w->conn;

    if (w->sent)
        w->sent(c, status, w->arg);
    free(w->head);
    if (w->bufs != w->inline_bufs)
        free(w->bufs);
    free(w);
    if (status < 0 && status != UV_ECANCELED)
        ps_conn_close(c, status);
    else
        ps__update_reading(c);
}

int ps_conn_send(ps_conn *c, Shardps__Header *hdr, const ps_iov *payload, int n,
                 ps_conn_sent_cb sent, void *arg)
{
    ps__write *w = NULL;
    size_t head_len;
    int rc;

    if (c->closing)
        return -PS_ECLOSED;
    w = calloc(1, sizeof(*w));
    if (w == NULL)
        return -ENOMEM;
    rc = ps_frame_encode(hdr, payload, n, &w->head, &head_len);
    if (rc < 0)
        goto fail;
    w->bufs = w->inline_bufs;
    if (n > PS__INLINE_BUFS) {
        w->bufs = calloc((size_t)n + 1, sizeof(uv_buf_t));
        if (w->bufs == NULL) {
            rc = -ENOMEM;
            goto fail;
        }
    }
    w->bufs[0] = uv_buf_init((char *)w->head, (unsigned int)head_len);
    for (int i = 0; i < n; i++)
        w->bufs[i + 1] = uv_buf_init((char *)payload[i].base, (unsigned int)payload[i].len);
    w->conn = c;
    w->sent = sent;
    w->arg = arg;
    w->req.data = w;
    rc = uv_write(&w->req, (uv_stream_t *)&c->tcp, w->bufs, (unsigned int)n + 1, ps__on_write);
    if (rc < 0)
        goto fail;
    ps__update_reading(c);
    return 0;
fail:
    if (w->bufs != w->inline_bufs)
        free(w->bufs);
    free(w->head);
    free(w);
    return rc;
}

void ps_conn_set_max_payload(ps_conn *c, size_t max_payload)
{
    ps_frame_decoder_set_max_payload(c->dec, max_payload);
}

void *ps_conn_data(const ps_conn *c)
{
    return c->data;
}

void ps_conn_set_data(ps_conn *c, void *data)
{
    c->data = data;
}

const char *ps_conn_peer(const ps_conn *c)
{
    return c->peer;
}

const char *ps_conn_error(const ps_conn *c)
{
    return ps_frame_decoder_error(c->dec);
}

uv_loop_t *ps_conn_loop(const ps_conn *c)
{
    return c->tcp.loop;
}

int ps_parse_hostport(const char *text, struct sockaddr_storage *addr, int allow_zero)
{
    char host[256];
    const char *colon = strrchr(text, ':');
    struct addrinfo hints, *res = NULL;
    char *end;
    long port;
    size_t hlen;

    if (colon == NULL || colon == text)
        return -EINVAL;
    hlen = (size_t)(colon - text);
    if (hlen >= sizeof(host))
        return -EINVAL;
    memcpy(host, text, hlen);
    host[hlen] = '\0';
    /* "[::1]:7000" */
    if (host[0] == '[' && hlen >= 2 && host[hlen - 1] == ']') {
        memmove(host, host + 1, hlen - 2);
        host[hlen - 2] = '\0';
    }
    errno = 0;
    port = strtol(colon + 1, &end, 10);
    if (errno || *end != '\0' || end == colon + 1 || port < (allow_zero ? 0 : 1) || port > 65535)
        return -EINVAL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host, NULL, &hints, &res) != 0 || res == NULL)
        return -PS_EUSAGE;
    memset(addr, 0, sizeof(*addr));
    memcpy(addr, res->ai_addr, res->ai_addrlen);
    if (addr->ss_family == AF_INET)
        ((struct sockaddr_in *)addr)->sin_port = htons((uint16_t)port);
    else
        ((struct sockaddr_in6 *)addr)->sin6_port = htons((uint16_t)port);
    freeaddrinfo(res);
    return 0;
}

void ps_format_addr(const struct sockaddr *addr, char *buf, size_t len)
{
    char ip[INET6_ADDRSTRLEN] = "?";
    int port = 0;

    if (addr->sa_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)addr;
        uv_ip4_name(a, ip, sizeof(ip));
        port = ntohs(a->sin_port);
        snprintf(buf, len, "%s:%d", ip, port);
    } else if (addr->sa_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)addr;
        uv_ip6_name(a, ip, sizeof(ip));
        port = ntohs(a->sin6_port);
        snprintf(buf, len, "[%s]:%d", ip, port);
    } else {
        snprintf(buf, len, "?");
    }
}
