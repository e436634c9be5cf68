/* Framed message connections over libuv TCP.
 *
 * The bottom layer of shardps: turns a byte stream into frames and back. A
 * ps_conn owns its socket, its frame decoder and its queued writes. Reads go
 * straight into the decoder's buffers (a large payload lands in its own buffer,
 * not a staging copy); writes are scatter/gather, so tensor bytes are sent from
 * where they live. When more than max_write_queue bytes are waiting to be sent
 * the connection stops reading, so a peer that does not read cannot make us
 * buffer without bound.
 *
 * Lifecycle: ps_conn_connect / ps_conn_accept -> frames via on_frame ->
 * ps_conn_close (from anywhere, any number of times) -> on_close, after which
 * the ps_conn is freed. Memory is released only in libuv's close callback, so a
 * callback may close its own connection safely. */
#ifndef PS_TRANSPORT_H
#define PS_TRANSPORT_H

#include <stddef.h>
#include <uv.h>

#include "buf_pool.h"
#include "frame.h"

typedef struct ps_conn ps_conn;

/* The frame and its buffers belong to the connection and are valid only during
 * the callback. */
typedef void (*ps_conn_frame_cb)(ps_conn *c, const ps_frame *f);
/* Called once, when the connection is gone: err is 0 after a local close
 * without error, or why it ended (-PS_ECLOSED for the peer closing, a decoder
 * or socket error). The connection is freed right after it returns. */
typedef void (*ps_conn_close_cb)(ps_conn *c, int err);
/* The payload handed to ps_conn_send may be reused once this runs; status is 0
 * or a libuv error (UV_ECANCELED when the connection closed first). */
typedef void (*ps_conn_sent_cb)(ps_conn *c, int status, void *arg);
/* Result of ps_conn_connect: 0 and a connection, or an error and NULL. */
typedef void (*ps_conn_connect_cb)(ps_conn *c, int status, void *data);
/* May say where an incoming frame's payload goes (see ps_frame_place_cb):
 * returns the number of pieces, 0 for the connection's own buffer, or a
 * negative code to refuse the frame (the connection closes, see
 * on_decode_error). */
typedef int (*ps_conn_place_cb)(ps_conn *c, const Shardps__Header *hdr,
                                const ps_frame_piece **pieces);

typedef struct {
    ps_conn_frame_cb on_frame;
    ps_conn_close_cb on_close;
    ps_conn_place_cb place; /* NULL: every payload lands in the connection's buffer */
    /* May be NULL. A frame failed to decode (err; ps_conn_error says why) or
     * place refused one: called just before the connection closes, so a
     * reason sent from here goes out first. */
    void (*on_decode_error)(ps_conn *c, int err);
    size_t max_payload;     /* frames announcing more are refused */
    size_t max_write_queue; /* stop reading above this many queued bytes */
    int scan_nonfinite;     /* see ps_frame_decoder_set_scan_nonfinite */
} ps_conn_config;

/* Accepts one pending connection on listener. cfg is copied; data is the
 * caller's, returned by ps_conn_data. Returns 0 or a negative libuv/errno
 * code. */
int ps_conn_accept(uv_stream_t *listener, const ps_conn_config *cfg, void *data, ps_conn **out);

/* Starts connecting to addr; cb runs once with the result. The connection
 * starts reading as soon as it is established. Returns 0 or an error (then cb
 * never runs). */
int ps_conn_connect(uv_loop_t *loop, const struct sockaddr *addr, const ps_conn_config *cfg,
                    void *data, ps_conn_connect_cb cb);

/* Queues one frame. hdr is packed now and may be freed on return; the payload
 * pieces are borrowed until sent runs (sent may be NULL if the caller does not
 * need to know). Returns 0, -PS_ECLOSED if the connection is closing, or an
 * encoding error; sent is not called when this fails. */
int ps_conn_send(ps_conn *c, Shardps__Header *hdr, const ps_iov *payload, int n,
                 ps_conn_sent_cb sent, void *arg);

/* Sends a frame whose payload may change as soon as this returns, such as
 * weights that the next update overwrites: it is checksummed and written to
 * the socket now, as far as the socket takes it, and only the rest is copied
 * (into a buffer from pool, returned there once sent) to go out later. When
 * the peer keeps up, a pull reply then costs no copy at all. Frames queued
 * before it (corked ones too) are sent first. Returns 0, -PS_ECLOSED if the
 * connection is closing or the write failed (it is then closing), or
 * -ENOMEM / an encoding error. */
int ps_conn_send_transient(ps_conn *c, Shardps__Header *hdr, const ps_iov *payload, int n,
                           ps_buf_pool *pool);

/* While corked (calls nest), frames wait on the connection and leave in one
 * write at the last uncork, so a request pair or an ack and a reply share a
 * system call and a segment. Frames handed to on_frame's callback are always
 * corked: replies to everything one read brought go out together. */
void ps_conn_cork(ps_conn *c);
void ps_conn_uncork(ps_conn *c);

/* Closes the connection; err is passed to on_close (0 for an ordinary close).
 * Safe to call repeatedly and from inside any callback. */
void ps_conn_close(ps_conn *c, int err);

/* Raises or lowers the largest payload accepted from now on: a server
 * accepts none before a peer has been admitted, so an unauthenticated peer
 * cannot make it allocate. */
void ps_conn_set_max_payload(ps_conn *c, size_t max_payload);
/* Sets the queued bytes above which reading pauses from now on: a server
 * learns how large its replies are only once it holds its tensors. */
void ps_conn_set_max_write_queue(ps_conn *c, size_t max_write_queue);

void *ps_conn_data(const ps_conn *c);
void ps_conn_set_data(ps_conn *c, void *data);
/* "127.0.0.1:54321": the peer's address, for log lines. */
const char *ps_conn_peer(const ps_conn *c);
/* The decoder's explanation after a protocol error, else "". */
const char *ps_conn_error(const ps_conn *c);
uv_loop_t *ps_conn_loop(const ps_conn *c);

/* Resolves "host:port" (IPv4 or IPv6 literal, or a name resolved once). The
 * port may be 0 when allow_zero. Returns 0, or -EINVAL (the syntax, checked
 * as ps_hostport_check does) or -PS_EUSAGE (the host is not found) with one
 * line in err saying which. */
int ps_parse_hostport(const char *text, struct sockaddr_storage *addr, int allow_zero, char *err,
                      size_t errlen);
/* Formats an address as "host:port" into buf. */
void ps_format_addr(const struct sockaddr *addr, char *buf, size_t len);

#endif
