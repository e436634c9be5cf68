/* ps-fake-server: a parameter server that lies, for tests/integration/
 * lying_server.sh. It speaks the protocol well enough for a real
 * shardps-worker to get as far as one chosen lie, then tells it (or goes
 * silent), so the test can check the worker gives up on it, naming it.
 * Its WELCOME carries the tensor table a worker of its options declares,
 * unless the case lies about that table.
 *
 *   ps-fake-server --case NAME [--hidden 32] [--seed 1] [--chunk-bytes N]
 *                  --ready-fd FD
 *
 * Listens on 127.0.0.1 port 0 and writes the port, then a line per accepted
 * connection ("accepted N", also on stderr), to the ready fd, so the test
 * synchronises on them. Serves connections one after another until killed. An honest answer
 * is a WELCOME in sync mode at clock 0 (heartbeat every 500 ms), a PULL_REPLY
 * of zeros for exactly the keys asked, a PUSH_REPLY with status 0; the case
 * replaces one of them (see fs_cases). Blocking sockets: a single client at a
 * time is all a test needs. */
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "frame.h"
#include "model_spec.h"
#include "partition.h"
#include "tensor_table.h"

typedef struct {
    const char *name;
    const char *what;
} fs_case;

static const fs_case fs_cases[] = {
    {"honest", "tells no lie"},
    {"full-once", "no lie: its first connection is refused -EAGAIN (all handshake slots taken), "
                  "then it is honest"},
    {"silent", "accepts, reads, never sends a byte"},
    {"silent-after-welcome", "welcomes, then never answers a pull"},
    {"stall-mid-frame", "sends half of the first PULL_REPLY, then nothing"},
    {"welcome-clock", "WELCOME at clock 2^64-1"},
    {"welcome-mode", "WELCOME with mode \"bogus\""},
    {"welcome-no-table", "WELCOME without the tensor table's digest"},
    {"welcome-table-other", "WELCOME naming another table than the worker declared (its seed "
                            "differs)"},
    {"pull-dtype", "PULL_REPLY with dtype 99"},
    {"pull-clock", "PULL_REPLY at clock 2^64-1"},
    {"pull-nan", "PULL_REPLY whose weights are NaN"},
    {"pull-ahead", "no lie: every PULL_REPLY at clock 3 at least, the end of lying_server.sh's "
                   "3-step job (a sync job that went on without this worker)"},
    {"push-status", "PUSH_REPLY with status 2^31-1 (chunks dropped)"},
    {"error-reset", "ERROR with status -ECONNRESET and a reason with escape codes"},
    {"oversized-reply", "PUSH_REPLY announcing a 1 MiB payload"},
    {"waiting-stranger", "WAITING for a pull the worker did not make"},
    {"http", "answers the HELLO like an HTTP server: \"HTTP/1.1 400 Bad Request\""},
};

static struct {
    const char *name;
    ps_partition *part;
    ps_model_spec spec; /* the honest tensor table */
    int ready_fd;
    int conn; /* connections accepted so far */
} fs;

static int fs_is(const char *name)
{
    return strcmp(fs.name, name) == 0;
}

static int send_all(int fd, const void *p, size_t n)
{
    const uint8_t *b = p;

    while (n > 0) {
        ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR)
            continue;
        if (w <= 0)
            return -1;
        b += w;
        n -= (size_t)w;
    }
    return 0;
}

/* Sends h with the payload; with half, only the first half of the payload. */
static int send_frame(int fd, Shardps__Header *h, const void *payload, size_t len, int half)
{
    ps_iov iov = {payload, len};
    uint8_t *head;
    size_t head_len;
    int rc;

    if (ps_frame_encode(h, &iov, len ? 1 : 0, &head, &head_len) < 0)
        return -1;
    rc = send_all(fd, head, head_len);
    free(head);
    if (rc == 0 && len > 0)
        rc = send_all(fd, payload, half ? len / 2 : len);
    return rc;
}

static int answer_hello(int fd, const Shardps__Header *req)
{
    Shardps__Header h = SHARDPS__HEADER__INIT;
    Shardps__Welcome w = SHARDPS__WELCOME__INIT;
    uint8_t digest[PS_TABLE_DIGEST_BYTES];

    h.type = SHARDPS__MSG_TYPE__WELCOME;
    h.request_id = req->request_id;
    w.clock = fs_is("welcome-clock") ? UINT64_MAX : 0;
    w.mode = fs_is("welcome-mode") ? "bogus" : "sync";
    w.heartbeat_ms = 500;
    /* The honest table's digest, or the case's lie about it. */
    fs.spec.seed ^= fs_is("welcome-table-other");
    ps_model_spec_digest(&fs.spec, digest);
    fs.spec.seed ^= fs_is("welcome-table-other");
    if (!fs_is("welcome-no-table")) {
        w.table_digest.len = sizeof(digest);
        w.table_digest.data = digest;
    }
    h.welcome = &w;
    return send_frame(fd, &h, NULL, 0, 0);
}

static int answer_pull(int fd, const Shardps__Header *req)
{
    Shardps__Header h = SHARDPS__HEADER__INIT;
    size_t numel = 0;
    float *w;
    int rc;

    for (size_t i = 0; i < req->n_keys; i++) {
        const ps_chunk *ch = ps_partition_find(fs.part, req->keys[i]);
        if (ch == NULL)
            return -1;
        numel += ch->numel;
    }
    w = calloc(numel ? numel : 1, sizeof(float));
    if (w == NULL)
        return -1;
    if (fs_is("pull-nan"))
        for (size_t i = 0; i < numel; i++)
            w[i] = NAN;
    h.type = SHARDPS__MSG_TYPE__PULL_REPLY;
    h.request_id = req->request_id;
    h.clock = fs_is("pull-clock") ? UINT64_MAX : req->clock;
    if (fs_is("pull-ahead") && h.clock < 3)
        h.clock = 3;
    h.dtype = fs_is("pull-dtype") ? 99 : SHARDPS__DTYPE__DTYPE_F32;
    h.n_keys = req->n_keys;
    h.keys = req->keys;
    rc = send_frame(fd, &h, w, numel * sizeof(float), fs_is("stall-mid-frame"));
    free(w);
    return rc;
}

static int answer_push(int fd, const Shardps__Header *req)
{
    Shardps__Header h = SHARDPS__HEADER__INIT;
    static uint8_t junk[1 << 20];

    /* The test reads which steps were pushed. */
    fprintf(stderr, "push at clock %llu\n", (unsigned long long)req->clock);
    h.type = SHARDPS__MSG_TYPE__PUSH_REPLY;
    h.request_id = req->request_id;
    h.clock = req->clock;
    h.status = fs_is("push-status") ? INT32_MAX : 0;
    return send_frame(fd, &h, junk, fs_is("oversized-reply") ? sizeof(junk) : 0, 0);
}

static int answer_error(int fd, const Shardps__Header *req)
{
    Shardps__Header h = SHARDPS__HEADER__INIT;

    h.type = SHARDPS__MSG_TYPE__ERROR;
    h.request_id = req->request_id;
    h.status = -ECONNRESET;
    h.reason = "all is well\033[2J\nworker 0: done";
    return send_frame(fd, &h, NULL, 0, 0);
}

/* A WAITING for a pull the worker did not make (the one after req). */
static int answer_waiting(int fd, const Shardps__Header *req)
{
    Shardps__Header h = SHARDPS__HEADER__INIT;

    h.type = SHARDPS__MSG_TYPE__WAITING;
    h.request_id = req->request_id + 1;
    h.clock = req->clock;
    h.reason = "waiting for rank 1 of 2 to join";
    return send_frame(fd, &h, NULL, 0, 0);
}

/* What a web server says to bytes that are no HTTP request. */
static int answer_http(int fd)
{
    static const char r[] = "HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n"
                            "Connection: close\r\n\r\n";

    return send_all(fd, r, sizeof(r) - 1);
}

/* What a real server says to the oldest connection waiting for its
 * handshake when all handshake slots are taken. */
static int answer_full(int fd, const Shardps__Header *req)
{
    Shardps__Header h = SHARDPS__HEADER__INIT;

    h.type = SHARDPS__MSG_TYPE__REJECT;
    h.request_id = req->request_id;
    h.status = -EAGAIN;
    h.reason = "all 18 handshake slots of this server are taken (--max-connections 20, 2 for the "
               "workers): the connection that waited longest gives way; come back";
    send_frame(fd, &h, NULL, 0, 0);
    return -1;
}

/* Answers one request the way the case says. Returns -1 to stop answering
 * (the client then hears nothing more until it closes). */
static int answer(int fd, const Shardps__Header *req)
{
    switch (req->type) {
    case SHARDPS__MSG_TYPE__HELLO:
        if (fs_is("http")) {
            answer_http(fd);
            return -1;
        }
        if (fs_is("full-once") && fs.conn == 1)
            return answer_full(fd, req);
        return fs_is("silent") ? -1 : answer_hello(fd, req);
    case SHARDPS__MSG_TYPE__PULL:
        if (fs_is("silent-after-welcome"))
            return -1;
        if (fs_is("error-reset"))
            return answer_error(fd, req);
        if (fs_is("waiting-stranger")) {
            answer_waiting(fd, req);
            return -1;
        }
        return answer_pull(fd, req) < 0 || fs_is("stall-mid-frame") ? -1 : 0;
    case SHARDPS__MSG_TYPE__PUSH:
        return answer_push(fd, req);
    default: /* HEARTBEAT, BYE */
        return 0;
    }
}

/* Reads the client's frames until it closes, answering while the case lets
 * it. */
static void serve(int fd)
{
    ps_frame_decoder *dec;
    int answering = 1;

    if (ps_frame_decoder_init(&dec, PS_DEFAULT_MAX_PAYLOAD) < 0)
        return;
    for (;;) {
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
        while ((rc = ps_frame_decoder_next(dec, &f)) == 1)
            if (answering && answer(fd, f.hdr) < 0)
                answering = 0;
        if (rc < 0)
            break;
    }
    ps_frame_decoder_free(dec);
}

static int usage(void)
{
    fprintf(stderr, "usage: ps-fake-server --case NAME --ready-fd FD [--hidden 32] [--seed 1] "
                    "[--chunk-bytes N]\ncases:\n");
    for (size_t i = 0; i < sizeof(fs_cases) / sizeof(fs_cases[0]); i++)
        fprintf(stderr, "  %-22s %s\n", fs_cases[i].name, fs_cases[i].what);
    return 2;
}

int main(int argc, char **argv)
{
    const char *hidden = "32";
    int sizes[PS_MAX_LAYERS + 1], nh, seed = 1, lfd, known = 0;
    size_t chunk_bytes = PS_DEFAULT_CHUNK_BYTES;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a);
    char line[32];

    fs.ready_fd = -1;
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--case") == 0)
            fs.name = argv[i + 1];
        else if (strcmp(argv[i], "--hidden") == 0)
            hidden = argv[i + 1];
        else if (strcmp(argv[i], "--seed") == 0)
            seed = atoi(argv[i + 1]);
        else if (strcmp(argv[i], "--chunk-bytes") == 0)
            chunk_bytes = (size_t)strtoull(argv[i + 1], NULL, 10);
        else if (strcmp(argv[i], "--ready-fd") == 0)
            fs.ready_fd = atoi(argv[i + 1]);
        else
            return usage();
    }
    for (size_t i = 0; fs.name && i < sizeof(fs_cases) / sizeof(fs_cases[0]); i++)
        known |= strcmp(fs.name, fs_cases[i].name) == 0;
    nh = ps_model_spec_parse_sizes(hidden, sizes + 1, PS_MAX_LAYERS - 1);
    if (!known || fs.ready_fd < 0 || nh < 0)
        return usage();
    sizes[0] = 784;
    sizes[nh + 1] = 10;
    if (ps_model_spec_init_mlp(&fs.spec, sizes, nh + 2, (uint64_t)seed) < 0 ||
        ps_partition_init(&fs.part, &fs.spec, 1, chunk_bytes) < 0)
        return usage();
    signal(SIGPIPE, SIG_IGN);
    lfd = socket(AF_INET, SOCK_STREAM, 0);
    if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(lfd, 8) < 0 ||
        getsockname(lfd, (struct sockaddr *)&a, &alen) < 0) {
        perror("ps-fake-server: listen");
        return 1;
    }
    snprintf(line, sizeof(line), "%u\n", ntohs(a.sin_port));
    if (write(fs.ready_fd, line, strlen(line)) < 0)
        return 1;
    for (int n = 1;; n++) {
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0) {
            if (errno == EINTR)
                continue;
            perror("ps-fake-server: accept");
            return 1;
        }
        /* The test may have stopped reading the ready fd: the line on stderr
         * is the record, the one on the fd only a signal. */
        fs.conn = n;
        snprintf(line, sizeof(line), "accepted %d\n", n);
        fputs(line, stderr);
        if (write(fs.ready_fd, line, strlen(line)) < 0)
            fs.ready_fd = -1;
        serve(fd);
        close(fd);
    }
}
