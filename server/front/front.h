/* The key-value server as the front holds it: one struct of the modules it
 * sequences, each owning its own state (membership.h, tensors.h,
 * row_tables.h, units.h, held.h, durability.h, peer.h) and the handlers
 * that judge frames (handshake.h, chunks.h, rows.h, writes.h), plus the
 * listener and the timers. Only the front's files include this: every
 * other module is handed the parts it works on. Loop thread only. */
#ifndef PS_FRONT_H
#define PS_FRONT_H

#include <uv.h>

#include "chunks.h"
#include "durability.h"
#include "handshake.h"
#include "held.h"
#include "kv_server.h"
#include "membership.h"
#include "peer.h"
#include "row_tables.h"
#include "rows.h"
#include "tensors.h"
#include "units.h"

struct ps_kv_server {
    uv_loop_t *loop;
    ps_kv_server_config cfg;
    ps_peers peers;         /* every connection */
    ps_job job;             /* who is in the job */
    ps_tensors tensors;     /* the table, its shard and apply queue */
    ps_row_tables tables;   /* this server's row stores */
    ps_units units;         /* every chunk's and row table's step clock */
    ps_handshake hs;        /* the handshake's judge */
    ps_chunks chunks;        /* pushes and pulls of chunks */
    ps_rows rows;           /* pushes and pulls of rows */
    ps_held held;           /* the pulls held */
    ps_durability dur;      /* checkpoints */
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

/* Builds every part of a table of spec (tensors, row tables, units,
 * checkpoint clocks), its life starting with how. Returns 0, -EEXIST when
 * a table is built already, or a negative code with nothing built
 * (kv_server.c). */
int ps_front_adopt(ps_kv_server *s, const ps_model_spec *spec, ps_table_event how);
/* Frees what ps_front_adopt built; the server holds no table after. */
void ps_front_free_table(ps_kv_server *s);

#endif
