/* Raw peers of the fixture's server (see kv_peer.h). */
#include "kv_peer.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "partition.h"

kv_peer_keys ks;

void keys_load(void)
{
    ps_partition *part;

    memset(&ks, 0, sizeof(ks));
    cr_assert_eq(ps_partition_init(&part, &fx.spec, 1, CHUNK_BYTES), 0);
    for (int i = 0; i < ps_partition_chunk_count(part); i++) {
        const ps_chunk *c = ps_partition_chunk(part, i);
        cr_assert_lt(ks.n, 256);
        ks.keys[ks.n] = c->key;
        ks.numel[ks.n++] = c->numel;
        ks.total += c->numel;
    }
    ps_partition_free(part);
}

/* Starts a server of world workers in the given mode and loads its keys. */
void peer_server_up(ps_kv_server_config *cfg, int world, uint32_t staleness, const char *mode)
{
    cfg->world = world;
    cfg->staleness = staleness;
    cr_assert_eq(ps_mode_parse(mode, &cfg->mode), 0, "%s", mode);
    server_up_with(cfg);
    keys_load();
}

void peer_open(peer *p)
{
    p->fd = raw_connect();
    cr_assert_eq(ps_frame_decoder_init(&p->dec, (size_t)64 << 20), 0);
    p->clock = 0;
}

void peer_close(peer *p)
{
    if (p->fd >= 0)
        close(p->fd);
    p->fd = -1;
    ps_frame_decoder_free(p->dec);
    p->dec = NULL;
}

/* A frame with a payload, encoded correctly. */
void peer_send(peer *p, Shardps__Header *h, const void *payload, size_t len)
{
    ps_iov iov = {payload, len};
    uint8_t *head;
    size_t head_len;

    cr_assert_eq(ps_frame_encode(h, &iov, payload ? 1 : 0, &head, &head_len), 0);
    cr_assert_eq(raw_send(p->fd, head, head_len), 0);
    free(head);
    if (len)
        raw_send(p->fd, payload, len);
}

/* Reads frames until one of type want arrives; an ERROR or REJECT first
 * fails the test with its reason. */
void peer_expect(peer *p, Shardps__MsgType want, ps_frame *f, const char *what)
{
    for (;;) {
        raw_read_frame(p->fd, p->dec, f, what);
        if (f->hdr->type == want)
            return;
        cr_assert(f->hdr->type != SHARDPS__MSG_TYPE__ERROR &&
                      f->hdr->type != SHARDPS__MSG_TYPE__REJECT,
                  "%s: refused: %s", what, f->hdr->reason ? f->hdr->reason : "");
    }
}

/* The server must refuse: a frame of type want whose reason contains
 * reason, then close the connection. Returns nothing; the peer is closed. */
void peer_expect_refusal(peer *p, Shardps__MsgType want, const char *reason, const char *what)
{
    ps_frame f;

    for (;;) {
        raw_read_frame(p->fd, p->dec, &f, what);
        if (f.hdr->type == SHARDPS__MSG_TYPE__ERROR || f.hdr->type == SHARDPS__MSG_TYPE__REJECT)
            break;
    }
    cr_assert_eq(f.hdr->type, want, "%s: got type %d (%s)", what, f.hdr->type,
                 f.hdr->reason ? f.hdr->reason : "");
    cr_assert(f.hdr->reason && strstr(f.hdr->reason, reason), "%s: reason \"%s\" lacks \"%s\"",
              what, f.hdr->reason ? f.hdr->reason : "", reason);
    expect_closed(p->fd, what);
    p->fd = -1;
    peer_close(p);
}

void peer_join(peer *p, uint32_t rank, uint32_t world)
{
    Shardps__Header h;
    Shardps__Hello hello;
    ps_frame f;

    peer_open(p);
    make_hello_as(&h, &hello, &fx.spec, rank, world);
    raw_send_frame(p->fd, &h);
    peer_expect(p, SHARDPS__MSG_TYPE__WELCOME, &f, "join");
    p->clock = f.hdr->welcome->clock;
}

void peer_pull(peer *p, uint64_t clock)
{
    Shardps__Header h = SHARDPS__HEADER__INIT;

    h.type = SHARDPS__MSG_TYPE__PULL;
    h.request_id = 10 + clock;
    h.clock = clock;
    h.n_keys = (size_t)ks.n;
    h.keys = ks.keys;
    raw_send_frame(p->fd, &h);
}

/* Reads a pull reply into w (ks.total floats). Returns its clock. */
uint64_t peer_pull_reply(peer *p, float *w, const char *what)
{
    ps_frame f;

    peer_expect(p, SHARDPS__MSG_TYPE__PULL_REPLY, &f, what);
    cr_assert_eq(f.payload_len, ks.total * sizeof(float), "%s: reply size", what);
    memcpy(w, f.payload, f.payload_len);
    return f.hdr->clock;
}

/* A push of every key, every value v, at clock. */
void peer_push(peer *p, uint64_t clock, float v)
{
    Shardps__Header h = SHARDPS__HEADER__INIT;
    float *g = malloc(ks.total * sizeof(float));

    cr_assert_not_null(g);
    for (size_t i = 0; i < ks.total; i++)
        g[i] = v;
    h.type = SHARDPS__MSG_TYPE__PUSH;
    h.request_id = 1000 + clock;
    h.clock = clock;
    h.dtype = SHARDPS__DTYPE__DTYPE_F32;
    h.n_keys = (size_t)ks.n;
    h.keys = ks.keys;
    peer_send(p, &h, g, ks.total * sizeof(float));
    free(g);
}

/* Reads the push's acknowledgement; returns how many chunks it dropped. */
int peer_push_reply(peer *p, const char *what)
{
    ps_frame f;

    peer_expect(p, SHARDPS__MSG_TYPE__PUSH_REPLY, &f, what);
    return f.hdr->status;
}

void peer_bye(peer *p)
{
    Shardps__Header h = SHARDPS__HEADER__INIT;

    h.type = SHARDPS__MSG_TYPE__BYE;
    h.request_id = 99;
    raw_send_frame(p->fd, &h);
}

int done_calls(void)
{
    int n;

    pthread_mutex_lock(&fx.done_lock);
    n = fx.done_calls;
    pthread_mutex_unlock(&fx.done_lock);
    return n;
}
