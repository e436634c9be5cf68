/* The server-in-a-thread fixture for the key-value server's unit tests (see
 * kv_fixture.c): fx is the server under test; server_up starts the default
 * one (a 5-16-3 MLP in 64-byte chunks, sync, one worker, plain SGD at LR),
 * server_up_with any configuration (start from kv_fixture_config). */
#ifndef KV_FIXTURE_H
#define KV_FIXTURE_H

#include <criterion/criterion.h>
#include <pthread.h>
#include <stdint.h>
#include <uv.h>

#include "frame.h"
#include "kv_server.h"
#include "tensor_table.h"

/* Small chunks, so the model spans several chunks per tensor and a request
 * carries many keys. */
#define CHUNK_BYTES 64
#define LR          0.1f

typedef struct {
    uv_loop_t loop;
    uv_async_t stop;
    ps_kv_server *srv;
    pthread_t thread;
    int running;
    int done_calls; /* written on the server thread under done_lock */
    pthread_mutex_t done_lock;
    pthread_cond_t done_cond;
    int port;
    char addr[32];
    ps_model_spec spec;
    ps_kv_server_stats stats; /* as the server ended, taken by server_down */
    int restore;              /* server_up_with restores from cfg's checkpoint dir first */
} kv_fixture_state;

extern kv_fixture_state fx;

/* Resets fx and fills cfg with the default configuration (fx.spec too). */
void kv_fixture_config(ps_kv_server_config *cfg);
/* Starts the server of cfg, after kv_fixture_config. */
void server_up_with(const ps_kv_server_config *cfg);
void server_up(void);
/* Stops the server (idempotent) and checks every handle closed. */
void server_down(void);
/* Waits until the server has called its done callback. */
void wait_done(void);

/* Raw peers: a blocking socket to the server with 5-second timeouts. */
int raw_connect(void);
/* Sends everything, or stops early when the server has hung up; 0 or -errno. */
int raw_send(int fd, const void *data, size_t len);
/* h, encoded; a HELLO that declares a table (make_hello) is followed by the
 * TABLE frame with that table. */
void raw_send_frame(int fd, Shardps__Header *h);
/* h with payload_len bytes of payload. */
void raw_send_payload(int fd, Shardps__Header *h, const void *payload, size_t payload_len);
/* The server must end the connection within the timeout; closes fd. */
void expect_closed(int fd, const char *what);
/* Reads until d yields a frame (owned by d until the next call). */
void raw_read_frame(int fd, ps_frame_decoder *d, ps_frame *f, const char *what);
/* A HELLO as ps_kv_client would send it, for rank 0 of world 1 or as given,
 * declaring table (fx.spec, or another to be refused). The HELLO points into
 * the fixture's storage until the next make_hello. */
void make_hello(Shardps__Header *h, Shardps__Hello *hello, const ps_model_spec *table);
void make_hello_as(Shardps__Header *h, Shardps__Hello *hello, const ps_model_spec *table,
                   uint32_t rank, uint32_t world);

/* A libshardps call (shardps.h) on handle h returned code, and h's sentence
 * holds words. */
#define expect_err(h, call, code, words)                                                           \
    do {                                                                                           \
        int rc_ = (call);                                                                          \
        cr_assert_eq(rc_, (code), "%s returned %d, not %d (%s)", #call, rc_, (code),               \
                     shardps_last_error(h));                                                       \
        cr_assert(strstr(shardps_last_error(h), (words)) != NULL, "'%s' not in '%s'", (words),     \
                  shardps_last_error(h));                                                          \
    } while (0)

#endif
