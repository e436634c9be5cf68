/* Tests for ps_conn_send_transient (common/transport.c): a frame whose
 * payload the caller overwrites as soon as the call returns, as the server
 * does with weights, must still arrive exactly as it was at the call, with a
 * valid CRC, after the frames queued before it. The receiver is a plain
 * blocking socket read by a second thread, with a small receive buffer and a
 * late start, so the socket cannot take a large frame at once and the copied
 * rest is what gets sent; a small frame must go out whole with no copy, and
 * one behind a frame the socket could not take must be copied whole. */
#include <criterion/criterion.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "buf_pool.h"
#include "frame.h"
#include "transport.h"

typedef struct {
    int fd;
    size_t want_frames;
    /* copied out of the decoder */
    Shardps__MsgType type[2];
    uint8_t *payload[2];
    size_t payload_len[2];
    size_t got;
    int decode_rc;
    uv_async_t *done;
} reader;

static void *read_frames(void *arg)
{
    reader *r = arg;
    ps_frame_decoder *d = NULL;
    uint8_t buf[65536];
    ps_frame f;

    r->decode_rc = ps_frame_decoder_init(&d, PS_DEFAULT_MAX_PAYLOAD);
    while (r->decode_rc == 0 && r->got < r->want_frames) {
        ssize_t n = read(r->fd, buf, sizeof(buf));
        size_t off = 0;
        int rc;
        if (n <= 0) {
            r->decode_rc = -1;
            break;
        }
        while (off < (size_t)n)
            off += ps_frame_decoder_feed(d, buf + off, (size_t)n - off);
        while ((rc = ps_frame_decoder_next(d, &f)) == 1 && r->got < r->want_frames) {
            r->type[r->got] = f.hdr->type;
            r->payload_len[r->got] = f.payload_len;
            r->payload[r->got] = malloc(f.payload_len + 1);
            memcpy(r->payload[r->got], f.payload, f.payload_len);
            r->got++;
        }
        if (rc < 0)
            r->decode_rc = rc;
    }
    ps_frame_decoder_free(d);
    uv_async_send(r->done);
    return NULL;
}

typedef struct {
    ps_conn *conn;
    int status;
} connected;

static void on_connect(ps_conn *c, int status, void *data)
{
    connected *k = data;
    k->conn = c;
    k->status = status;
}

static void on_frame(ps_conn *c, const ps_frame *f)
{
    (void)c;
    (void)f;
}

static void on_close(ps_conn *c, int err)
{
    (void)c;
    (void)err;
}

static void on_done(uv_async_t *a)
{
    connected *k = a->data;
    ps_conn_close(k->conn, 0);
    uv_close((uv_handle_t *)a, NULL);
}

/* Sends a frame of first_bytes with ps_conn_send and then one of big_bytes
 * with ps_conn_send_transient, both corked together, scribbles over the
 * transient payload right after, and returns how many buffers the pool had
 * to allocate for copies. */
static size_t send_and_check(size_t first_bytes, size_t big_bytes)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a);
    int lfd = socket(AF_INET, SOCK_STREAM, 0), small_buf = 4096;
    uv_loop_t loop;
    uv_async_t done;
    connected k = {NULL, 1};
    ps_conn_config cfg = {.on_frame = on_frame,
                          .on_close = on_close,
                          .max_payload = 1024,
                          .max_write_queue = (size_t)1 << 30};
    ps_buf_pool *pool = NULL;
    uint8_t *small = malloc(first_bytes), *big = malloc(big_bytes), *want = malloc(big_bytes);
    reader r = {.want_frames = 2, .done = &done};
    pthread_t th;
    size_t copies;

    cr_assert(lfd >= 0 && small && big && want);
    /* Set before listen, so the accepted socket starts with it. */
    setsockopt(lfd, SOL_SOCKET, SO_RCVBUF, &small_buf, sizeof(small_buf));
    cr_assert_eq(bind(lfd, (struct sockaddr *)&a, sizeof(a)), 0);
    cr_assert_eq(listen(lfd, 1), 0);
    cr_assert_eq(getsockname(lfd, (struct sockaddr *)&a, &alen), 0);
    cr_assert_eq(ps_buf_pool_init(&pool, big_bytes), 0);
    cr_assert_eq(uv_loop_init(&loop), 0);
    cr_assert_eq(ps_conn_connect(&loop, (struct sockaddr *)&a, &cfg, &k, on_connect), 0);
    while (k.status == 1)
        uv_run(&loop, UV_RUN_ONCE);
    cr_assert_eq(k.status, 0);
    r.fd = accept(lfd, NULL, NULL);
    cr_assert(r.fd >= 0);
    cr_assert_eq(uv_async_init(&loop, &done, on_done), 0);
    done.data = &k;

    for (size_t i = 0; i < first_bytes; i++)
        small[i] = (uint8_t)(i * 7);
    for (size_t i = 0; i < big_bytes; i++)
        big[i] = (uint8_t)(i * 13 + (i >> 16));
    memcpy(want, big, big_bytes);
    {
        Shardps__Header h1 = SHARDPS__HEADER__INIT, h2 = SHARDPS__HEADER__INIT;
        ps_iov one = {small, first_bytes};
        /* Three uneven pieces, as the chunks of a reply are. */
        ps_iov three[3] = {{big, big_bytes / 3},
                           {big + big_bytes / 3, big_bytes / 2 - big_bytes / 3},
                           {big + big_bytes / 2, big_bytes - big_bytes / 2}};
        h1.type = SHARDPS__MSG_TYPE__PUSH_REPLY;
        h2.type = SHARDPS__MSG_TYPE__PULL_REPLY;
        ps_conn_cork(k.conn);
        cr_assert_eq(ps_conn_send(k.conn, &h1, &one, 1, NULL, NULL), 0);
        cr_assert_eq(ps_conn_send_transient(k.conn, &h2, three, 3, pool), 0);
        ps_conn_uncork(k.conn);
    }
    /* What an update does to the weights right after the reply was sent. */
    memset(big, 0xee, big_bytes);
    copies = ps_buf_pool_allocations(pool);
    cr_assert_eq(pthread_create(&th, NULL, read_frames, &r), 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    pthread_join(th, NULL);

    cr_assert_eq(r.decode_rc, 0, "the receiver could not decode the stream (bad CRC?)");
    cr_assert_eq(r.got, 2);
    cr_assert_eq(r.type[0], SHARDPS__MSG_TYPE__PUSH_REPLY, "the frame queued first came second");
    cr_assert_eq(r.payload_len[0], first_bytes);
    cr_assert(memcmp(r.payload[0], small, first_bytes) == 0);
    cr_assert_eq(r.type[1], SHARDPS__MSG_TYPE__PULL_REPLY);
    cr_assert_eq(r.payload_len[1], big_bytes);
    cr_assert(memcmp(r.payload[1], want, big_bytes) == 0,
              "the bytes sent changed with the caller's buffer");

    for (int i = 0; i < 2; i++)
        free(r.payload[i]);
    close(r.fd);
    close(lfd);
    cr_assert_eq(uv_loop_close(&loop), 0);
    ps_buf_pool_close(pool);
    free(small);
    free(big);
    free(want);
    return copies;
}

Test(transport, transient_payload_too_big_for_the_socket_is_copied_in_time, .timeout = 60)
{
    /* Far more than a 4 KiB receive buffer and the sender's autotuned send
     * buffer together can hold before anyone reads. */
    cr_assert_eq(send_and_check(1000, (size_t)48 << 20), 1,
                 "the unsent rest should have been copied");
}

Test(transport, transient_payload_the_socket_takes_is_not_copied, .timeout = 60)
{
    cr_assert_eq(send_and_check(1000, 2000), 0, "a frame the socket took whole was copied");
}

/* The frame queued first is too big for the socket: the direct write takes
 * only part of it, its rest is queued, and the transient frame behind it must
 * be copied whole and still come second. */
Test(transport, transient_payload_behind_a_full_socket_is_copied_and_stays_second, .timeout = 60)
{
    cr_assert_eq(send_and_check((size_t)48 << 20, 3000), 1,
                 "the transient frame behind the queued one should have been copied");
}
