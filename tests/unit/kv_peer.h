/* Raw peers for the key-value server's unit tests (test_kv_hostile.c,
 * test_kv_evaluator.c): a blocking socket to the fixture's server
 * (kv_fixture.h) that sends exactly the frames a test writes and reads what
 * the server answers, and the keys of that one server. */
#ifndef KV_PEER_H
#define KV_PEER_H

#include <stdint.h>

#include "kv_fixture.h"

/* A raw peer: its socket and a decoder for what the server sends it. */
typedef struct {
    int fd;
    ps_frame_decoder *dec;
    uint64_t clock; /* from the WELCOME */
} peer;

/* The keys of the one server and their sizes, in key order. */
typedef struct {
    uint64_t keys[256];
    size_t numel[256];
    int n;
    size_t total; /* floats over every key */
} kv_peer_keys;
extern kv_peer_keys ks;

void keys_load(void);
/* Starts a server of world workers in the given mode and loads its keys. */
void peer_server_up(ps_kv_server_config *cfg, int world, uint32_t staleness, const char *mode);
void peer_open(peer *p);
void peer_close(peer *p);
/* A frame with a payload, encoded correctly. */
void peer_send(peer *p, Shardps__Header *h, const void *payload, size_t len);
/* Reads frames until one of type want arrives; an ERROR or REJECT first
 * fails the test with its reason. */
void peer_expect(peer *p, Shardps__MsgType want, ps_frame *f, const char *what);
/* The server must refuse: a frame of type want whose reason contains
 * reason, then close the connection. Returns nothing; the peer is closed. */
void peer_expect_refusal(peer *p, Shardps__MsgType want, const char *reason, const char *what);
void peer_join(peer *p, uint32_t rank, uint32_t world);
void peer_pull(peer *p, uint64_t clock);
/* Reads a pull reply into w (ks.total floats). Returns its clock. */
uint64_t peer_pull_reply(peer *p, float *w, const char *what);
/* A push of every key, every value v, at clock. */
void peer_push(peer *p, uint64_t clock, float v);
/* Reads the push's acknowledgement; returns how many chunks it dropped. */
int peer_push_reply(peer *p, const char *what);
void peer_bye(peer *p);
int done_calls(void);

#endif
