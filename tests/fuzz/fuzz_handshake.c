/* libFuzzer target for the server's network face: a real ps_kv_server
 * (server/front/kv_server.c over common/transport.c) on its own libuv loop,
 * listening on 127.0.0.1 port 0, driven in-process over loopback TCP. Each
 * input becomes the byte stream of one connection (fuzz_common.h: the first
 * byte may put a valid HELLO in front, and may ask for the rest to be read as
 * records re-encoded with correct lengths and CRCs, so the fuzzer reaches
 * pulls and pushes after the handshake as well as the handshake itself). The
 * stream is written, then our side shuts down writing; the loop runs until
 * the server has closed the connection, which it must do once it has seen the
 * end of the stream if not before, within a second. The server lives across
 * inputs, as a daemon lives across peers: state one input leaves behind is
 * the next one's starting point. Every PSF_PROBE_EVERY inputs a well-behaved
 * worker connects and must be welcomed, so a server that survives but stops
 * serving is caught too. Logging is turned down to errors to keep each run
 * short (PSF_VERBOSE=1 turns it back on). A hang or a broken expectation aborts, which libFuzzer
 * reports. */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <uv.h>

#include "frame.h"
#include "fuzz_common.h"
#include "kv_server.h"
#include "ps_log.h"

#define PSF_PROBE_EVERY 64
/* Longest a connection may stay open after our side finished writing, and
 * longest one may take in all (a server that stops reading a peer that is
 * still writing would otherwise hold it forever). */
#define PSF_DEADLINE_MS 1000
#define PSF_TOTAL_MS    5000

#define FH_CHECK(cond, what)                                                                       \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_handshake: %s:%d: %s\n", __FILE__, __LINE__, what);              \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static struct {
    uv_loop_t loop;
    ps_kv_server *srv;
    struct sockaddr_in addr;
    uint64_t runs;
} fh;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    static ps_model_spec spec; /* the server's table; it must outlive init */
    ps_kv_server_config cfg;
    int port;

    (void)argc;
    (void)argv;
    /* A reset while the server writes must cost a connection, not the run. */
    signal(SIGPIPE, SIG_IGN);
    /* PSF_VERBOSE=1 shows the server's log, for replaying one input. */
    ps_log_set_level(getenv("PSF_VERBOSE") ? PS_LOG_DEBUG : PS_LOG_ERROR);
    memset(&cfg, 0, sizeof(cfg));
    psf_spec(&spec);
    cfg.table = &spec;
    ps_optimizer_defaults(&cfg.opt, PS_OPT_SGD);
    cfg.lr.base_lr = 0.01;
    cfg.server_index = 0;
    cfg.num_servers = 1;
    cfg.chunk_bytes = PSF_CHUNK_BYTES;
    cfg.world = 1;
    cfg.staleness = 0;
    cfg.mode = PS_MODE_SYNC;
    cfg.max_payload = (size_t)1 << 16;
    cfg.reject_nonfinite = 1;
    FH_CHECK(uv_loop_init(&fh.loop) == 0, "uv_loop_init");
    FH_CHECK(ps_kv_server_init(&fh.srv, &fh.loop, &cfg, NULL, NULL) == 0, "server init");
    FH_CHECK(uv_ip4_addr("127.0.0.1", 0, &fh.addr) == 0, "address");
    FH_CHECK(ps_kv_server_start(fh.srv, (const struct sockaddr *)&fh.addr, &port) == 0, "listen");
    fh.addr.sin_port = htons((uint16_t)port);
    return 0;
}

static uint64_t fh_now_ms(void)
{
    return uv_hrtime() / 1000000;
}

/* Reads what the server sent, into dec when given (else discarded). Returns
 * 1 once the server has closed, else 0. */
static int fh_drain(int fd, ps_frame_decoder *dec)
{
    uint8_t scratch[4096], *buf;
    size_t room;
    ssize_t n;

    for (;;) {
        if (dec)
            ps_frame_decoder_buf(dec, &buf, &room);
        else
            buf = scratch, room = sizeof(scratch);
        n = recv(fd, buf, room, MSG_DONTWAIT);
        if (n > 0) {
            if (dec)
                ps_frame_decoder_commit(dec, (size_t)n);
            continue;
        }
        if (n == 0 || errno == ECONNRESET || errno == EPIPE)
            return 1;
        return 0; /* EAGAIN, or ENOTCONN while still connecting */
    }
}

/* Whether dec holds a WELCOME (frames before it are skipped). */
static int fh_welcomed(ps_frame_decoder *dec)
{
    ps_frame f;
    int rc;

    while ((rc = ps_frame_decoder_next(dec, &f)) == 1)
        if (f.hdr->type == SHARDPS__MSG_TYPE__WELCOME)
            return 1;
    FH_CHECK(rc == 0, "the server sent a frame that does not decode");
    return 0;
}

/* One connection: writes buf, then shuts down our side (after a WELCOME when
 * welcome is set), and runs the server's loop until it has closed the
 * connection. Aborts if that takes longer than the deadline. */
static void fh_connection(const uint8_t *buf, size_t len, int welcome)
{
    ps_frame_decoder *dec = NULL;
    uint64_t deadline = 0, give_up = fh_now_ms() + PSF_TOTAL_MS;
    size_t off = 0;
    int fd, shut = 0, closed = 0, welcomed = 0;

    fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    FH_CHECK(fd >= 0, "socket");
    FH_CHECK(connect(fd, (struct sockaddr *)&fh.addr, sizeof(fh.addr)) == 0 || errno == EINPROGRESS,
             "connect");
    if (welcome)
        FH_CHECK(ps_frame_decoder_init(&dec, (size_t)1 << 20) == 0, "decoder");
    while (!closed) {
        struct pollfd pf[2];
        int timeout;

        uv_run(&fh.loop, UV_RUN_NOWAIT);
        if (off < len) {
            ssize_t n = send(fd, buf + off, len - off, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n > 0)
                off += (size_t)n;
            else if (n < 0 && (errno == EPIPE || errno == ECONNRESET))
                off = len; /* the server hung up early: fine */
        }
        closed = fh_drain(fd, dec);
        if (welcome && !welcomed)
            welcomed = fh_welcomed(dec);
        if (off == len && !shut && (!welcome || welcomed || closed)) {
            shutdown(fd, SHUT_WR);
            shut = 1;
            deadline = fh_now_ms() + PSF_DEADLINE_MS;
        }
        if (closed)
            break;
        FH_CHECK(!shut || fh_now_ms() < deadline,
                 "the server kept a connection open after the peer finished sending");
        FH_CHECK(fh_now_ms() < give_up, "a connection neither finished nor closed");
        pf[0].fd = fd;
        pf[0].events = (short)(POLLIN | (off < len ? POLLOUT : 0));
        pf[1].fd = uv_backend_fd(&fh.loop);
        pf[1].events = POLLIN;
        timeout = uv_backend_timeout(&fh.loop);
        if (timeout < 0 || timeout > 10)
            timeout = 10;
        poll(pf, 2, timeout);
    }
    close(fd);
    /* Let the server's close callbacks run before the next input. */
    uv_run(&fh.loop, UV_RUN_NOWAIT);
    uv_run(&fh.loop, UV_RUN_NOWAIT);
    if (welcome)
        FH_CHECK(welcomed, "the server is up but refused a valid worker");
    ps_frame_decoder_free(dec);
}

/* A well-behaved worker must still be welcomed. */
static void fh_probe(void)
{
    ps_model_spec spec;
    Shardps__Header h;
    Shardps__Hello hello;
    psf_buf b = {0};

    psf_spec(&spec);
    psf_hello(&h, &hello, &spec);
    FH_CHECK(psf_hello_frames(&b, &h) == 0, "encode HELLO");
    fh_connection(b.p, b.len, 1);
    psf_buf_free(&b);
    ps_model_spec_free(&spec);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    psf_buf stream = {0};

    FH_CHECK(psf_stream(data, size, &stream) == 0, "out of memory building the stream");
    fh_connection(stream.p, stream.len, 0);
    psf_buf_free(&stream);
    if (++fh.runs % PSF_PROBE_EVERY == 0)
        fh_probe();
    return 0;
}
