/* The server-in-a-thread fixture shared by test_kv_server and
 * test_kv_hostile: a real ps_kv_server on its own libuv loop in a second
 * thread, listening on an ephemeral port, and the raw blocking-socket peers
 * (5-second timeouts, so a server that fails to answer or hang up fails the
 * test instead of hanging it). See kv_fixture.h. */
#include "kv_fixture.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

kv_fixture_state fx;

static void on_stop(uv_async_t *a)
{
    /* Runs on the server's thread, the only one allowed to touch it. */
    ps_kv_server_stop(fx.srv);
    uv_close((uv_handle_t *)a, NULL);
}

static void on_done(ps_kv_server *s, void *arg)
{
    (void)s;
    (void)arg;
    pthread_mutex_lock(&fx.done_lock);
    fx.done_calls++;
    pthread_cond_signal(&fx.done_cond);
    pthread_mutex_unlock(&fx.done_lock);
}

/* A goodbye is processed on the server's thread some time after the client
 * sent it; stopping the server first would lose it. */
void wait_done(void)
{
    pthread_mutex_lock(&fx.done_lock);
    while (fx.done_calls == 0)
        pthread_cond_wait(&fx.done_cond, &fx.done_lock);
    pthread_mutex_unlock(&fx.done_lock);
}

static void *server_thread(void *arg)
{
    (void)arg;
    uv_run(&fx.loop, UV_RUN_DEFAULT);
    return NULL;
}

void kv_fixture_config(ps_kv_server_config *cfg)
{
    static const int sizes[] = {5, 16, 3};

    memset(&fx, 0, sizeof(fx));
    cr_assert_eq(ps_model_spec_init_mlp(&fx.spec, sizes, 3, 1234), 0);
    memset(cfg, 0, sizeof(*cfg));
    cfg->table = &fx.spec;
    ps_optimizer_defaults(&cfg->opt, PS_OPT_SGD);
    cfg->lr.base_lr = LR;
    cfg->opt.momentum = 0.0f;
    cfg->server_index = 0;
    cfg->num_servers = 1;
    cfg->chunk_bytes = CHUNK_BYTES;
    cfg->world = 1;
    cfg->staleness = 0;
    cfg->mode = PS_MODE_SYNC;
    cfg->max_payload = (size_t)1 << 20;
    cfg->reject_nonfinite = 1;
    /* Far beyond any test, so that a peer a test keeps silent on purpose
     * (good_worker_trains_after_and_beside_bad_peers) is not closed under
     * it on a slow machine; a test of the timeout sets its own. */
    cfg->handshake_timeout_ms = 600000;
}

void server_up_with(const ps_kv_server_config *cfg)
{
    struct sockaddr_in addr;

    /* libuv writes with write(2), so a peer that resets while a reply is
     * queued would raise SIGPIPE and kill the test process; daemons and
     * libuv's own test runner ignore it for the same reason. */
    signal(SIGPIPE, SIG_IGN);
    pthread_mutex_init(&fx.done_lock, NULL);
    pthread_cond_init(&fx.done_cond, NULL);
    cr_assert_eq(uv_loop_init(&fx.loop), 0);
    cr_assert_eq(ps_kv_server_init(&fx.srv, &fx.loop, cfg, on_done, NULL), 0);
    if (fx.restore) {
        char err[1024];
        cr_assert_eq(ps_kv_server_restore(fx.srv, UINT64_MAX, err, sizeof(err)), 0, "%s", err);
    }
    cr_assert_eq(uv_ip4_addr("127.0.0.1", 0, &addr), 0);
    cr_assert_eq(ps_kv_server_start(fx.srv, (const struct sockaddr *)&addr, &fx.port), 0);
    cr_assert_gt(fx.port, 0);
    snprintf(fx.addr, sizeof(fx.addr), "127.0.0.1:%d", fx.port);
    cr_assert_eq(uv_async_init(&fx.loop, &fx.stop, on_stop), 0);
    /* Everything above happened before the thread exists, so it sees it all. */
    cr_assert_eq(pthread_create(&fx.thread, NULL, server_thread, NULL), 0);
    fx.running = 1;
}

void server_up(void)
{
    ps_kv_server_config cfg;

    kv_fixture_config(&cfg);
    server_up_with(&cfg);
}

void server_down(void)
{
    if (!fx.running)
        return;
    fx.running = 0;
    cr_assert_eq(uv_async_send(&fx.stop), 0);
    cr_assert_eq(pthread_join(fx.thread, NULL), 0);
    ps_kv_server_stats_get(fx.srv, &fx.stats);
    ps_kv_server_log_summary(fx.srv);
    ps_kv_server_close(fx.srv);
    /* Every handle (listener, connections, the async) must have closed. */
    cr_assert_eq(uv_loop_close(&fx.loop), 0);
}

/* ---- raw peers --------------------------------------------------------- */

int raw_connect(void)
{
    struct timeval tv = {.tv_sec = 5, .tv_usec = 0};
    struct sockaddr_in addr;
    int fd = socket(AF_INET, SOCK_STREAM, 0);

    cr_assert_geq(fd, 0, "socket: %s", strerror(errno));
    cr_assert_eq(setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)), 0);
    cr_assert_eq(setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)), 0);
    memset(&addr, 0, sizeof(addr));
    addr.sin_family = AF_INET;
    addr.sin_port = htons((uint16_t)fx.port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    cr_assert_eq(connect(fd, (struct sockaddr *)&addr, sizeof(addr)), 0, "connect: %s",
                 strerror(errno));
    return fd;
}

/* Sends everything, or stops early when the server has already hung up
 * (which is what the garbage senders provoke). Returns 0 or -errno. */
int raw_send(int fd, const void *data, size_t len)
{
    const uint8_t *p = data;

    while (len > 0) {
        ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            cr_assert(errno == EPIPE || errno == ECONNRESET, "send: %s", strerror(errno));
            return -errno;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* The table of the HELLO made last, packed, and its digest: they must live
 * until the HELLO is sent. */
static uint8_t *hello_packed;
static size_t hello_packed_len;
static uint8_t hello_digest[PS_TABLE_DIGEST_BYTES];

void raw_send_payload(int fd, Shardps__Header *h, const void *payload, size_t payload_len)
{
    ps_iov iov = {payload, payload_len};
    uint8_t *head;
    size_t len;

    cr_assert_eq(ps_frame_encode(h, &iov, 1, &head, &len), 0);
    cr_assert_eq(raw_send(fd, head, len), 0);
    cr_assert_eq(raw_send(fd, payload, payload_len), 0);
    free(head);
}

void raw_send_frame(int fd, Shardps__Header *h)
{
    uint8_t *head;
    size_t len;

    cr_assert_eq(ps_frame_encode(h, NULL, 0, &head, &len), 0);
    cr_assert_eq(raw_send(fd, head, len), 0);
    free(head);
    /* A declaring HELLO is followed by its table, as ps_kv_client sends it. */
    if (h->type == SHARDPS__MSG_TYPE__HELLO && h->hello && h->hello->table_digest.len > 0) {
        Shardps__Header t = SHARDPS__HEADER__INIT;
        t.type = SHARDPS__MSG_TYPE__TABLE;
        t.request_id = h->request_id;
        raw_send_payload(fd, &t, hello_packed, hello_packed_len);
    }
}

/* The server must end the connection: EOF or a reset, within the receive
 * timeout. Anything it says first (a REJECT or ERROR) is skipped. */
void expect_closed(int fd, const char *what)
{
    uint8_t buf[4096];

    for (;;) {
        ssize_t n = recv(fd, buf, sizeof(buf), 0);
        if (n > 0)
            continue;
        if (n == 0)
            break;
        if (errno == EINTR)
            continue;
        cr_assert(errno != EAGAIN && errno != EWOULDBLOCK,
                  "%s: the server kept the connection open for 5 s", what);
        break; /* ECONNRESET: the server closed with our bytes unread. */
    }
    close(fd);
}

/* Reads until d yields a frame; fails on EOF, error or timeout. The frame
 * belongs to d until the next call on it. */
void raw_read_frame(int fd, ps_frame_decoder *d, ps_frame *f, const char *what)
{
    for (;;) {
        uint8_t *buf;
        size_t room;
        ssize_t n;
        int rc = ps_frame_decoder_next(d, f);

        cr_assert_geq(rc, 0, "%s: bad frame from the server: %s", what, ps_frame_decoder_error(d));
        if (rc == 1)
            return;
        ps_frame_decoder_buf(d, &buf, &room);
        n = recv(fd, buf, room, 0);
        if (n < 0 && errno == EINTR)
            continue;
        cr_assert_gt(n, 0, "%s: no frame from the server (%s)", what,
                     n == 0 ? "it closed" : strerror(errno));
        ps_frame_decoder_commit(d, (size_t)n);
    }
}

/* A HELLO as ps_kv_client would send it for rank 0 of world 1. */
void make_hello(Shardps__Header *h, Shardps__Hello *hello, const ps_model_spec *table)
{
    make_hello_as(h, hello, table, 0, 1);
}

void make_hello_as(Shardps__Header *h, Shardps__Hello *hello, const ps_model_spec *table,
                   uint32_t rank, uint32_t world)
{
    shardps__header__init(h);
    shardps__hello__init(hello);
    hello->role = SHARDPS__ROLE__ROLE_WORKER;
    hello->rank = rank;
    hello->world = world;
    free(hello_packed);
    hello_packed = NULL;
    cr_assert_eq(ps_tensor_table_pack(table, &hello_packed, &hello_packed_len), 0);
    ps_model_spec_digest(table, hello_digest);
    hello->table_digest.len = sizeof(hello_digest);
    hello->table_digest.data = hello_digest;
    hello->num_servers = 1;
    hello->chunk_bytes = CHUNK_BYTES;
    hello->server_index = 0;
    h->type = SHARDPS__MSG_TYPE__HELLO;
    h->request_id = 1;
    h->hello = hello;
}
