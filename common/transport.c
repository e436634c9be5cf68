/* Framed connections over libuv (see transport.h). */
#include "transport.h"

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buf_pool.h"
#include "ps_error.h"
#include "ps_log.h"
#include "server_list.h"

/* Room for this many frames and payload pieces in a write before its arrays
 * move to the heap: a reply or an ack plus a reply, a push of a few chunks. */
#define PS__INLINE_FRAMES 4
#define PS__INLINE_BUFS   16
/* A corked batch is written early once it holds this many pieces (Linux
 * takes at most 1024 iovecs in one writev; libuv splits above that anyway). */
#define PS__MAX_BATCH_BUFS 1024

typedef struct {
    uint8_t *head; /* [prefix][header], owned by the write */
    ps_conn_sent_cb sent;
    void *arg;
} ps__frame_out;

/* One uv_write: every frame queued on a connection while it was corked, or a
 * single frame otherwise. */
typedef struct {
    uv_write_t req;
    ps_conn *conn;
    size_t bytes;
    int n_frames, cap_frames;
    int n_bufs, cap_bufs;
    ps__frame_out *frames;
    uv_buf_t *bufs;
    ps__frame_out inline_frames[PS__INLINE_FRAMES];
    uv_buf_t inline_bufs[PS__INLINE_BUFS];
} ps__transport_write;

struct ps_conn {
    uv_tcp_t tcp;
    ps_conn_config cfg;
    void *data;
    ps_frame_decoder *dec;
    int closing;
    int reading;
    int delivering; /* inside ps__deliver: frames are being handed out */
    int corked;     /* ps_conn_cork depth; frames wait in batch until 0 */
    ps__transport_write *batch;
    int close_err;
    char peer[64];
    ps_conn_connect_cb connect_cb;
    uv_connect_t connect_req;
};

static void ps__transport_on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf);
static void ps__on_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf);

static void ps__on_uv_close(uv_handle_t *h)
{
    ps_conn *c = h->data;

    if (c->cfg.on_close)
        c->cfg.on_close(c, c->close_err);
    ps_frame_decoder_free(c->dec);
    free(c);
}

static void ps__flush(ps_conn *c);

void ps_conn_close(ps_conn *c, int err)
{
    if (c->closing)
        return;
    /* Frames queued while corked (a goodbye, an error's reason) go out
     * first: libuv writes what fits at once and cancels only the rest. */
    c->corked = 0;
    ps__flush(c);
    if (c->closing) /* the flush failed and closed it */
        return;
    c->closing = 1;
    c->close_err = err;
    uv_read_stop((uv_stream_t *)&c->tcp);
    uv_close((uv_handle_t *)&c->tcp, ps__on_uv_close);
}

static void ps__deliver(ps_conn *c);

static void ps__update_reading(ps_conn *c)
{
    size_t queued =
        uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp) + (c->batch ? c->batch->bytes : 0);
    int want = !c->closing && queued <= c->cfg.max_write_queue;

    if (want == c->reading)
        return;
    if (want) {
        if (uv_read_start((uv_stream_t *)&c->tcp, ps__transport_on_alloc, ps__on_read) == 0)
            c->reading = 1;
        /* Frames that arrived before reading paused are handed out now. */
        ps__deliver(c);
    } else {
        uv_read_stop((uv_stream_t *)&c->tcp);
        c->reading = 0;
    }
}

static void ps__transport_on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
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
    /* Replies to every frame of this read leave in one write. */
    ps_conn_cork(c);
    while (!c->closing && c->reading && (rc = ps_frame_decoder_next(c->dec, &f)) == 1)
        c->cfg.on_frame(c, &f);
    if (!c->closing && rc < 0 && c->cfg.on_decode_error)
        c->cfg.on_decode_error(c, rc);
    ps_conn_uncork(c);
    c->delivering = 0;
    if (!c->closing && rc < 0)
        ps_conn_close(c, rc);
}

static int ps__transport_place(void *arg, const Shardps__Header *hdr, const ps_frame_piece **pieces)
{
    ps_conn *c = arg;

    return c->cfg.place(c, hdr, pieces);
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
    if (cfg->place)
        ps_frame_decoder_set_place(c->dec, ps__transport_place, c);
    ps_frame_decoder_set_scan_nonfinite(c->dec, cfg->scan_nonfinite);
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

static void ps__transport_on_connect(uv_connect_t *req, int status)
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
    rc = uv_tcp_connect(&c->connect_req, &c->tcp, addr, ps__transport_on_connect);
    if (rc < 0)
        goto fail;
    return 0;
fail:
    c->cfg.on_close = NULL;
    ps_conn_close(c, rc);
    return rc;
}

static void ps__write_free(ps__transport_write *w)
{
    for (int i = 0; i < w->n_frames; i++)
        free(w->frames[i].head);
    if (w->frames != w->inline_frames)
        free(w->frames);
    if (w->bufs != w->inline_bufs)
        free(w->bufs);
    free(w);
}

/* Tells each frame's sender, in order, then frees the write. */
static void ps__transport_write_done(ps__transport_write *w, int status)
{
    for (int i = 0; i < w->n_frames; i++)
        if (w->frames[i].sent)
            w->frames[i].sent(w->conn, status, w->frames[i].arg);
    ps__write_free(w);
}

static void ps__on_write(uv_write_t *req, int status)
{
    ps__transport_write *w = req->data;
    ps_conn *c = w->conn;

    ps__transport_write_done(w, status);
    if (status < 0 && status != UV_ECANCELED)
        ps_conn_close(c, status);
    else
        ps__update_reading(c);
}

static void ps__flush(ps_conn *c)
{
    ps__transport_write *w = c->batch;
    int rc;

    if (w == NULL)
        return;
    c->batch = NULL;
    if (w->n_frames == 0) { /* a send that failed after creating it */
        ps__write_free(w);
        return;
    }
    w->req.data = w;
    rc = uv_write(&w->req, (uv_stream_t *)&c->tcp, w->bufs, (unsigned int)w->n_bufs, ps__on_write);
    if (rc < 0) {
        ps__transport_write_done(w, rc);
        ps_conn_close(c, rc);
    }
}

/* Doubles an array that starts inline in the write; 0 or -ENOMEM. */
static int ps__transport_grow(void **arr, void *inline_arr, int *cap, int need, size_t elem)
{
    int n = *cap;
    void *p;

    while (n < need)
        n *= 2;
    if (n == *cap)
        return 0;
    p = *arr == inline_arr ? malloc((size_t)n * elem) : realloc(*arr, (size_t)n * elem);
    if (p == NULL)
        return -ENOMEM;
    if (*arr == inline_arr)
        memcpy(p, inline_arr, (size_t)*cap * elem);
    *arr = p;
    *cap = n;
    return 0;
}

/* The batch frames are appended to, created on first use. */
static ps__transport_write *ps__batch(ps_conn *c)
{
    ps__transport_write *w = c->batch;

    if (w)
        return w;
    w = calloc(1, sizeof(*w));
    if (w == NULL)
        return NULL;
    w->conn = c;
    w->frames = w->inline_frames;
    w->cap_frames = PS__INLINE_FRAMES;
    w->bufs = w->inline_bufs;
    w->cap_bufs = PS__INLINE_BUFS;
    c->batch = w;
    return w;
}

/* Appends a frame to the batch: head (owned from here on, freed with the
 * write) minus its first head_skip bytes, then the payload pieces. */
static int ps__queue(ps_conn *c, uint8_t *head, size_t head_skip, size_t head_len,
                     const ps_iov *payload, int n, ps_conn_sent_cb sent, void *arg)
{
    ps__transport_write *w = ps__batch(c);
    ps__frame_out *fo;
    size_t total = 0;

    if (w == NULL ||
        ps__transport_grow((void **)&w->frames, w->inline_frames, &w->cap_frames, w->n_frames + 1,
                           sizeof(*w->frames)) < 0 ||
        ps__transport_grow((void **)&w->bufs, w->inline_bufs, &w->cap_bufs, w->n_bufs + n + 1,
                           sizeof(*w->bufs)) < 0) {
        free(head);
        return -ENOMEM;
    }
    fo = &w->frames[w->n_frames++];
    fo->head = head;
    fo->sent = sent;
    fo->arg = arg;
    if (head_skip < head_len)
        w->bufs[w->n_bufs++] =
            uv_buf_init((char *)head + head_skip, (unsigned int)(head_len - head_skip));
    for (int i = 0; i < n; i++) {
        w->bufs[w->n_bufs++] = uv_buf_init((char *)payload[i].base, (unsigned int)payload[i].len);
        total += payload[i].len;
    }
    w->bytes += head_len - head_skip + total;
    if (c->corked == 0 || w->n_bufs >= PS__MAX_BATCH_BUFS)
        ps__flush(c);
    ps__update_reading(c);
    return 0;
}

int ps_conn_send(ps_conn *c, Shardps__Header *hdr, const ps_iov *payload, int n,
                 ps_conn_sent_cb sent, void *arg)
{
    uint8_t *head = NULL;
    size_t head_len;
    int rc;

    if (c->closing)
        return -PS_ECLOSED;
    rc = ps_frame_encode(hdr, payload, n, &head, &head_len);
    if (rc < 0)
        return rc;
    return ps__queue(c, head, 0, head_len, payload, n, sent, arg);
}

static void ps__on_rest_sent(ps_conn *c, int status, void *arg)
{
    (void)c;
    (void)status;
    ps_buf_pool_put(arg);
}

/* Drops the first k bytes of a batch that a direct write has sent. */
static void ps__batch_advance(ps__transport_write *w, size_t k)
{
    int i = 0;

    while (k > 0 && k >= w->bufs[i].len)
        k -= w->bufs[i++].len;
    memmove(w->bufs, w->bufs + i, (size_t)(w->n_bufs - i) * sizeof(*w->bufs));
    w->n_bufs -= i;
    w->bufs[0].base += k;
    w->bufs[0].len -= (unsigned int)k;
    w->bytes -= k;
}

/* Writes the corked batch and then [head][payload] to the socket in one
 * system call, without waiting, as far as it takes them (an ack and the
 * reply after it then cost one write, and the peer one wake-up). The batch is
 * done with either way: sent, or its rest queued. Returns the bytes of the
 * frame written (0 if the socket is full or others are queued first) or a
 * negative libuv error. */
static ssize_t ps__try_write_frame(ps_conn *c, uint8_t *head, size_t head_len,
                                   const ps_iov *payload, int n)
{
    uv_buf_t inline_bufs[PS__INLINE_BUFS], *bufs = inline_bufs;
    ps__transport_write *w = c->batch;
    int nb = w ? w->n_bufs : 0, k;
    size_t done;

    if (uv_stream_get_write_queue_size((uv_stream_t *)&c->tcp) != 0 ||
        (nb + n + 1 > PS__INLINE_BUFS &&
         (bufs = malloc((size_t)(nb + n + 1) * sizeof(*bufs))) == NULL)) {
        ps__flush(c); /* the caller copies the whole frame, which needs no array */
        return 0;
    }
    if (nb > 0)
        memcpy(bufs, w->bufs, (size_t)nb * sizeof(*bufs));
    bufs[nb] = uv_buf_init((char *)head, (unsigned int)head_len);
    for (int i = 0; i < n; i++)
        bufs[nb + 1 + i] = uv_buf_init((char *)payload[i].base, (unsigned int)payload[i].len);
    k = uv_try_write((uv_stream_t *)&c->tcp, bufs, (unsigned int)(nb + n + 1));
    if (bufs != inline_bufs)
        free(bufs);
    if (k < 0 && k != UV_EAGAIN)
        return k;
    done = k > 0 ? (size_t)k : 0;
    if (w == NULL)
        return (ssize_t)done;
    if (done >= w->bytes) {
        done -= w->bytes;
        c->batch = NULL;
        ps__transport_write_done(w, 0);
        return (ssize_t)done;
    }
    ps__batch_advance(w, done);
    ps__flush(c);
    return 0;
}

int ps_conn_send_transient(ps_conn *c, Shardps__Header *hdr, const ps_iov *payload, int n,
                           ps_buf_pool *pool)
{
    uint8_t *head = NULL, *rest = NULL;
    size_t head_len, total = 0, skip, rest_len, off = 0, pos = 0;
    ssize_t done;
    ps_iov rest_iov;
    int rc;

    if (c->closing)
        return -PS_ECLOSED;
    for (int i = 0; i < n; i++)
        total += payload[i].len;
    rc = ps_frame_encode(hdr, payload, n, &head, &head_len);
    if (rc < 0)
        return rc;
    /* Whatever is waiting goes first, so frames keep their order. */
    done = ps__try_write_frame(c, head, head_len, payload, n);
    if (c->closing) {
        rc = -PS_ECLOSED;
        goto fail;
    }
    if (done < 0) {
        ps_conn_close(c, (int)done);
        rc = -PS_ECLOSED;
        goto fail;
    }
    if ((size_t)done == head_len + total) {
        free(head);
        ps__update_reading(c);
        return 0;
    }
    skip = (size_t)done < head_len ? (size_t)done : head_len;
    rest_len = total - ((size_t)done - skip);
    if (rest_len == 0)
        return ps__queue(c, head, skip, head_len, NULL, 0, NULL, NULL);
    /* Sized for the whole payload: the rest varies from call to call, and
     * buffers of one size serve every reply (and the server's pushes) alike
     * instead of making the pool allocate, and fault in, new ones. */
    rest = ps_buf_pool_get(pool, total);
    if (rest == NULL) {
        rc = -ENOMEM;
        goto fail;
    }
    /* The payload bytes the socket did not take: from (done - skip) on. */
    for (int i = 0; i < n; pos += payload[i].len, i++) {
        size_t from = (size_t)done - skip, a;
        if (pos + payload[i].len <= from)
            continue;
        a = from > pos ? from - pos : 0;
        memcpy(rest + off, (const uint8_t *)payload[i].base + a, payload[i].len - a);
        off += payload[i].len - a;
    }
    rest_iov.base = rest;
    rest_iov.len = rest_len;
    return ps__queue(c, head, skip, head_len, &rest_iov, 1, ps__on_rest_sent, rest);
fail:
    free(head);
    ps_buf_pool_put(rest);
    return rc;
}

void ps_conn_cork(ps_conn *c)
{
    c->corked++;
}

void ps_conn_uncork(ps_conn *c)
{
    if (c->corked > 0 && --c->corked == 0 && !c->closing)
        ps__flush(c);
}

void ps_conn_set_max_payload(ps_conn *c, size_t max_payload)
{
    ps_frame_decoder_set_max_payload(c->dec, max_payload);
}

void ps_conn_set_max_write_queue(ps_conn *c, size_t max_write_queue)
{
    c->cfg.max_write_queue = max_write_queue;
    ps__update_reading(c);
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

int ps_parse_hostport(const char *text, struct sockaddr_storage *addr, int allow_zero, char *err,
                      size_t errlen)
{
    char host[256];
    const char *colon = strrchr(text, ':');
    struct addrinfo hints, *res = NULL;
    size_t hlen;
    long port;
    int rc = ps_hostport_check(text, allow_zero, err, errlen);

    if (rc < 0)
        return rc;
    hlen = (size_t)(colon - text);
    if (hlen >= sizeof(host))
        return ps_err_printf(err, errlen, -EINVAL, "address '%s': the host name is too long", text);
    memcpy(host, text, hlen);
    host[hlen] = '\0';
    /* "[::1]:7000" */
    if (host[0] == '[' && hlen >= 2 && host[hlen - 1] == ']') {
        memmove(host, host + 1, hlen - 2);
        host[hlen - 2] = '\0';
    }
    port = strtol(colon + 1, NULL, 10);
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    rc = getaddrinfo(host, NULL, &hints, &res);
    if (rc != 0 || res == NULL)
        return ps_err_printf(err, errlen, -PS_EUSAGE, "address '%s': host '%s' not found (%s)",
                             text, host, rc != 0 ? gai_strerror(rc) : "no address");
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
