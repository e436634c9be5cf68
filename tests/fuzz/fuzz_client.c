/* libFuzzer target for the worker's side of the wire: a real ps_kv_client
 * (lib/core/kv_client.h with lib/core/server_reply.c's checks, over
 * common/transport.c) against a server whose every answer comes from the
 * input. The input is a list of records (fuzz_common.h: [u16 len][header]
 * [u16 len][payload], re-encoded with correct lengths and CRCs so mutated
 * answers pass the frame decoder and meet the client's own checks). A thread
 * plays the server on loopback TCP: for each frame the client sends (other
 * than heartbeats) it answers with the next record, and once the records run
 * out it closes the connection. The client does what a worker does: connect,
 * pull, then push and pull for two steps, with the small model of
 * fuzz_common.h on one server; request ids are deterministic (HELLO 1, PULL
 * 2, PUSHes 3 to 12, PULL 13, ...), so the seeds answer them exactly.
 * Whatever the answers, the client must end (an error, the records' end, or
 * its 2 s request timeout), and what it accepted must hold: a start clock and
 * weights clocks within the steps planned, finite weights, no more chunks
 * dropped than pushed. PSF_VERBOSE=1 shows the client's log. */
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "frame.h"
#include "fuzz_common.h"
#include "kv_client.h"
#include "ps_log.h"

#define FC_STEPS       2
#define FC_TOTAL_STEPS 4

#define FC_CHECK(cond, what)                                                                       \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_client: %s:%d: %s\n", __FILE__, __LINE__, what);                 \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static struct {
    int listen_fd;
    char addr[64];
    ps_model_spec spec;
} fc;

/* One input's server side. */
typedef struct {
    const uint8_t *data;
    size_t len;
} fc_server;

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a);

    (void)argc;
    (void)argv;
    /* Nearly every input ends in an error line: keep them out of the run
     * (above PS_LOG_ERROR nothing is logged). PSF_VERBOSE=1 shows them. */
    ps_log_set_level(getenv("PSF_VERBOSE") ? PS_LOG_DEBUG : (ps_log_level)(PS_LOG_ERROR + 1));
    psf_spec(&fc.spec);
    fc.listen_fd = socket(AF_INET, SOCK_STREAM, 0);
    FC_CHECK(fc.listen_fd >= 0, "socket");
    FC_CHECK(bind(fc.listen_fd, (struct sockaddr *)&a, sizeof(a)) == 0, "bind");
    FC_CHECK(listen(fc.listen_fd, 4) == 0, "listen");
    FC_CHECK(getsockname(fc.listen_fd, (struct sockaddr *)&a, &alen) == 0, "getsockname");
    snprintf(fc.addr, sizeof(fc.addr), "127.0.0.1:%u", ntohs(a.sin_port));
    return 0;
}

static int fc_send_all(int fd, const uint8_t *p, size_t n)
{
    while (n > 0) {
        ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Accepts the client and answers each of its frames with the next record.
 * A receive timeout guards against a client that neither speaks nor closes:
 * the test then fails on the client's side, not here. */
static void *fc_serve(void *arg)
{
    fc_server *sv = arg;
    struct timeval tv = {5, 0};
    int one = 1;
    ps_frame_decoder *dec;
    int fd = accept(fc.listen_fd, NULL, NULL);

    FC_CHECK(fd >= 0, "accept");
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    /* Answers go one by one: without this, Nagle holds each behind the ACK
     * of the one before. */
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    FC_CHECK(ps_frame_decoder_init(&dec, PS_DEFAULT_MAX_PAYLOAD) == 0, "decoder");
    for (int gone = 0; !gone;) {
        uint8_t *buf;
        size_t len;
        ssize_t n;
        ps_frame f;
        int rc;

        ps_frame_decoder_buf(dec, &buf, &len);
        n = recv(fd, buf, len, 0);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        ps_frame_decoder_commit(dec, (size_t)n);
        while ((rc = ps_frame_decoder_next(dec, &f)) == 1) {
            psf_buf out = {0};
            if (f.hdr->type == SHARDPS__MSG_TYPE__HEARTBEAT)
                continue;
            if (sv->len == 0) {
                /* Out of answers: hang up, as a server that went away. */
                shutdown(fd, SHUT_RDWR);
                break;
            }
            FC_CHECK(psf_next_record(&sv->data, &sv->len, &out) == 0, "record");
            /* The client may have given up on us already. */
            gone = fc_send_all(fd, out.p, out.len) < 0;
            psf_buf_free(&out);
            if (gone)
                break;
        }
        FC_CHECK(rc >= 0, "the client sent a frame that does not decode");
    }
    ps_frame_decoder_free(dec);
    close(fd);
    return NULL;
}

static int fc_all_finite(float *const *t)
{
    for (int i = 0; i < fc.spec.n_tensors; i++)
        for (size_t j = 0; j < fc.spec.tensors[i].numel; j++)
            if (!isfinite(t[i][j]))
                return 0;
    return 1;
}

/* The worker's part: connect, pull, then push and pull each step. */
static void fc_client(void)
{
    const char *servers[1] = {fc.addr};
    ps_kv_client_config cfg = {0};
    ps_kv_client *c = NULL;
    ps_kv_client_stats st;
    float *params[PS_MAX_TENSORS], *grads[PS_MAX_TENSORS];
    uint64_t clock = 0, pushed = 0;
    int rc;

    for (int i = 0; i < fc.spec.n_tensors; i++) {
        params[i] = calloc(fc.spec.tensors[i].numel, sizeof(float));
        grads[i] = calloc(fc.spec.tensors[i].numel, sizeof(float));
        FC_CHECK(params[i] && grads[i], "alloc");
    }
    cfg.spec = fc.spec;
    cfg.world = 1;
    cfg.servers = servers;
    cfg.n_servers = 1;
    cfg.chunk_bytes = PSF_CHUNK_BYTES;
    cfg.connect_timeout_s = 0; /* no retries: a REJECT ends the input */
    cfg.request_timeout_s = 2;
    cfg.max_payload = (size_t)1 << 20;
    cfg.total_steps = FC_TOTAL_STEPS;
    FC_CHECK(ps_kv_client_init(&c, &cfg) == 0, "init");
    rc = ps_kv_client_connect(c, &clock);
    if (rc == 0) {
        FC_CHECK(clock <= FC_TOTAL_STEPS, "accepted a start clock past the steps planned");
        rc = ps_kv_client_pull(c, clock, params);
        if (rc == 0)
            rc = ps_kv_client_wait(c);
    }
    for (int step = 0; rc == 0 && step < FC_STEPS; step++) {
        FC_CHECK(fc_all_finite(params), "accepted weights that are not finite");
        clock = ps_kv_client_weights_clock(c);
        FC_CHECK(clock <= FC_TOTAL_STEPS, "accepted weights of a clock past the steps planned");
        rc = ps_kv_client_push(c, (const float *const *)grads);
        if (rc == 0) {
            pushed += 10;
            rc = ps_kv_client_pull(c, clock + 1, params);
        }
        if (rc == 0)
            rc = ps_kv_client_wait(c);
    }
    if (rc == 0)
        FC_CHECK(fc_all_finite(params), "accepted weights that are not finite");
    ps_kv_client_stats_get(c, &st);
    FC_CHECK(st.dropped <= pushed, "counted more chunks dropped than were pushed");
    ps_kv_client_abandon(c);
    for (int i = 0; i < fc.spec.n_tensors; i++) {
        free(params[i]);
        free(grads[i]);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fc_server sv = {data, size};
    pthread_t t;

    FC_CHECK(pthread_create(&t, NULL, fc_serve, &sv) == 0, "thread");
    fc_client();
    pthread_join(t, NULL);
    return 0;
}
