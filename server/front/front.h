/* The key-value server as the front holds it: one struct of the modules it
 * sequences, each owning its own state (membership.h, tensors.h,
 * row_tables.h, units.h, held.h, durability.h, peer.h) and the handlers
 * that judge frames (handshake.h, chunks.h, rows.h, writes.h), plus the
 * listener and the timers. Only the front's files include this: every
 * other module is handed the parts it works on. Loop thread only. */
#ifndef PS_FRONT_H
#define PS_FRONT_H

#include <stddef.h>
#include <uv.h>

#include "chunks.h"
#include "durability.h"
#include "handshake.h"
#include "held.h"
#include "kv_types.h"
#include "membership.h"
#include "peer.h"
#include "row_tables.h"
#include "rows.h"
#include "tensors.h"
#include "units.h"

struct ps_kv_server {
    uv_loop_t *loop;
    ps_kv_server_config cfg;
    ps_peers peers;             /* every connection */
    ps_job job;                 /* who is in the job */
    ps_tensors tensors;         /* the table, its shard and apply queue */
    ps_row_tables tables;       /* this server's row stores */
    ps_units units;             /* every chunk's and row table's step clock */
    ps_handshake hs;            /* the handshake's judge */
    ps_chunks chunks;           /* pushes and pulls of chunks */
    ps_rows rows;               /* pushes and pulls of rows */
    ps_held held;               /* the pulls held */
    ps_durability dur;          /* checkpoints */
    void (*settled)(void *arg); /* the apply queue's completions, to the front */
    uv_tcp_t listener;
    int listening, stopping;
    uint32_t handshake_timeout_ms; /* cfg's, or its default */
    uv_timer_t liveness;           /* every connection's deadlines */
    uv_timer_t waits;              /* the held pulls explained */
    uv_timer_t ckpt_timer;         /* --checkpoint-seconds */
    uv_timer_t quiesce_timer;      /* ps_kv_server_quiesce's deadline */
    int liveness_on, waits_on, ckpt_timer_on, quiesce_timer_on;
    ps_kv_server_done_cb done;
    void *done_arg;
    /* ps_kv_server_quiesce: who to tell at the next step boundary. */
    ps_kv_server_done_cb quiesce_cb;
    void *quiesce_arg;
};

/* The server a connection belongs to: its peer set is one of the server's
 * members. */
static inline ps_kv_server *ps_front_of(const ps_peer *p)
{
    return (ps_kv_server *)((char *)p->set - offsetof(ps_kv_server, peers));
}

/* place.c: the transport's place callback (transport.h). */
int ps_front_place(ps_conn *c, const Shardps__Header *h, const ps_frame_piece **pieces);

/* table.c: the table's parts together. */
/* Builds every part of a table of spec (tensors, row tables, units,
 * checkpoint clocks), its life starting with how. Returns 0, -EEXIST when
 * a table is built already, or a negative code with nothing built. */
int ps_front_adopt(ps_kv_server *s, const ps_model_spec *spec, ps_table_event how);
/* Frees what ps_front_adopt built; the server holds no table after. */
void ps_front_free_table(ps_kv_server *s);
/* Nothing of a withdrawn table survives (why: for the log and its peers):
 * the peers that joined it, workers and evaluators, are closed with why,
 * who joined the job and what the job was to do is forgotten, and the table
 * is freed once drained. */
void ps_front_withdraw(ps_kv_server *s, const char *why);
/* A withdrawn table whose work has drained is freed. */
void ps_front_release_withdrawn(ps_kv_server *s);
/* Applies a table event, withdrawing the table (for why) if it asks. */
void ps_front_table_event(ps_kv_server *s, ps_table_event ev, const char *why);
/* Rank 0's table over one other ranks declared first (issue 23 pt 2: the
 * job starts from rank 0's model, whoever came first): the held table is
 * withdrawn, its declarers told that rank 0 declared another and how
 * (diff). Returns 0 when the server now holds no table (rank 0's is
 * adopted next), or -1 after failing rank 0 with -EAGAIN (the old table is
 * still draining: come back). */
int ps_front_outranked(ps_kv_server *s, ps_peer *p, const char *diff);
/* The table a HELLO declared becomes the server's. Returns 0, or -1 after
 * failing the peer. */
int ps_front_declare(ps_kv_server *s, ps_peer *p, const Shardps__Hello *hello,
                     const ps_model_spec *spec);

#endif
