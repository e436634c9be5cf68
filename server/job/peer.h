/* The server's connections: one peer per connection, from its first byte
 * to its close callback, and the set of them. A peer is a handshake in
 * progress, an admitted worker (a rank of the job), an admitted evaluator,
 * or gone. What a peer may send in each state is validate.h's; who is in
 * the job is membership.h's. This file holds what every module that
 * answers a peer shares: its refusal (REJECT during the handshake, ERROR
 * after), counted once, and the connection slots a newcomer may take.
 *
 * Ownership: a peer is allocated by the front when a connection is
 * accepted and freed in that connection's close callback, after the set
 * has let it go (ps_peers_remove); every other pointer to it (a rank in
 * membership.h, a held pull) is borrowed and dropped before then. */
#ifndef PS_PEER_H
#define PS_PEER_H

#include <stdint.h>

#include "auth.h"
#include "shardps.pb-c.h"
#include "transport.h"

/* Queued reply bytes past which a peer's requests are no longer read: two
 * full pulls of this server's share plus this headroom (set at admission),
 * so a well-behaved worker (one pull in flight) never waits on it and a
 * peer that never reads costs little; before admission, the headroom
 * alone. */
#define PS_PEER_WRITE_QUEUE_HEADROOM ((size_t)16 << 20)

typedef enum {
    PS_PEER_HANDSHAKE, /* waiting for HELLO */
    PS_PEER_AUTH,      /* challenged; waiting for AUTH_RESPONSE */
    PS_PEER_TABLE,     /* proven (or no auth), declaring: waiting for its TABLE */
    PS_PEER_WORKER,
    /* Admitted read-only: holds no rank, is in no barrier, quorum or worker
     * slot, cannot push; its pulls are snapshots answered at once. */
    PS_PEER_EVALUATOR,
    PS_PEER_GONE,
} ps_peer_state;

typedef struct ps_peers ps_peers;
typedef struct ps_peer ps_peer;

struct ps_peer {
    ps_peer *next, *prev; /* in the set, newest first */
    ps_peers *set;        /* the set it is in (borrowed) */
    ps_conn *conn;
    ps_peer_state state;
    int failed;       /* an ERROR is on its way; ignore further frames */
    int declarer;     /* admitted with a HELLO that declared the tensors */
    int agreed;       /* its HELLO's job settings were compared and agree (1) or absent (0) */
    uint64_t planned; /* steps it plans, from an agreeing HELLO (0: none counted) */
    uint32_t rank;
    uint64_t clock;  /* steps fully pushed to this server */
    uint64_t earned; /* its join clock, or 1 + the step of its last complete push */
    int keys_pushed; /* keys pushed so far at `clock` */
    int pending;     /* pulls held for it */
    uint64_t fed;    /* sync: 1 + step its last push went into (0: none) */
    uint64_t n_pushes, n_pulls, bytes_in, bytes_out;
    uint64_t last_seen; /* loop time (ms) of its last frame */
    /* An evaluator: loop time (ms) of its admission or its last PULL, so
     * the one that reads least gives way when its slots are all taken. */
    uint64_t last_read;
    char name[96]; /* "worker 1 (127.0.0.1:40000)" for logs */
    /* Authentication or the declared table in progress: the HELLO waits
     * here until it is proven and its TABLE has come, a deep copy (owned:
     * shardps__hello__free_unpacked), as the frame goes away. */
    Shardps__Hello *hello;
    uint64_t hello_id;
    uint8_t client_nonce[PS_AUTH_NONCE_BYTES], server_nonce[PS_AUTH_NONCE_BYTES];
    /* Where the payload of the frame being read lands: a pooled buffer
     * (unit_wire.h), taken over by the handler or given back when the frame
     * was not handled or the peer goes. */
    ps_frame_piece piece;
};

struct ps_peers {
    ps_peer *head;     /* every open connection, newest first */
    int n;             /* open connections */
    int n_evaluators;  /* of those, admitted evaluators */
    uint64_t refused;  /* peers refused or closed for a fault */
    uint64_t capped;   /* handshakes closed to make room (--max-connections) */
    uint64_t replaced; /* evaluators closed to make room for another */
};

void ps_peers_add(ps_peers *set, ps_peer *p);
void ps_peers_remove(ps_peers *set, ps_peer *p);

/* In the handshake still: HELLO, AUTH_RESPONSE or TABLE awaited. */
static inline int ps_peer_handshaking(const ps_peer *p)
{
    return p->state == PS_PEER_HANDSHAKE || p->state == PS_PEER_AUTH || p->state == PS_PEER_TABLE;
}
/* Refuses p with reason (REJECT during the handshake, ERROR after) and
 * closes once it is written; nothing p sends after this is looked at. Not
 * logged or counted: the caller does that. */
void ps_peer_refuse(ps_peer *p, int err, char *reason);
/* A protocol violation: tell the peer why, log it, count it, and close once
 * the reason is written. */
void ps_peer_fail(ps_peer *p, int err, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* Sends a header-only frame to p; a send that fails closes the connection
 * (one that is closing already is left to close). */
void ps_peer_send(ps_peer *p, Shardps__Header *h);

/* Connection slots: admitted workers hold one each (world in all),
 * admitted evaluators one each, and the rest of max_connections is for
 * connections still in their handshake. When those are all taken, the one
 * that has waited longest gives way to the newcomer (told -EAGAIN: come
 * back), rather than the newcomer being refused: a worker's handshake takes
 * a round trip or two, so connections that idle until their deadline
 * cannot keep it out. The log names the first and every hundredth. */
void ps_peers_make_room(ps_peers *set, ps_peer *newcomer, int max_connections, int world);

/* Evaluator slots (how many: validate.h's ps_validate_evaluator_slot). When
 * a newcomer finds them all taken, the admitted evaluator that has gone
 * longest without a pull (since its admission, if it never pulled) gives
 * way, as a handshake does above: evaluators that only hold their slot
 * cannot keep out one that reads, such as the job's, which pulls after
 * every score. Returns it (the front lets it go), or NULL when none may
 * (every one is closing already). */
ps_peer *ps_peers_evaluator_to_replace(const ps_peers *set);
/* p, an admitted evaluator, leaves (a goodbye, silence, its table
 * withdrawn, giving way to a newcomer): its slot is free at once and its
 * frames are no longer looked at. Returns 1, or 0 when p was not an
 * admitted evaluator (nothing changed). */
int ps_peers_evaluator_leave(ps_peers *set, ps_peer *p);

#endif
