/* The table's parts together: built from a declared, configured or
 * restored spec (the tensors, this server's row stores, the units of both,
 * the checkpoint clocks), withdrawn (its peers let go, the job forgotten)
 * and freed once the work in flight on it has drained. The front's
 * sequence (kv_server.c) and a restore (restore.c) call these; they call
 * the modules that own each part. */
#include <errno.h>
#include <stdio.h>

#include "front.h"
#include "ps_error.h"
#include "ps_log.h"

int ps_front_adopt(ps_kv_server *s, const ps_model_spec *spec, ps_table_event how)
{
    ps_tensors *t = &s->tensors;
    int rc;

    rc = ps_tensors_adopt(t, spec, how, s->settled, s, s->chunks.n.applied);
    if (rc < 0)
        return rc;
    rc = ps_row_tables_build(&s->tables, &s->cfg, &t->table);
    if (rc == 0)
        rc = ps_units_init(&s->units, t->n_local, s->tables.n, s->cfg.world);
    if (rc == 0)
        rc = ps_durability_adopt(&s->dur, t->n_local);
    if (rc < 0) {
        ps_front_free_table(s);
        return rc;
    }
    /* Buffers and frozen tensors are never pushed: their chunks hold no
     * step back (the server's clock is the least of the others'). */
    for (int i = 0; i < t->n_local; i++)
        if (ps_tensors_chunk_static(t, i))
            ps_units_set_static(&s->units, i);
    ps_info("server %d of %d holds %d chunks of %d tensors: %zu bytes of weights (%.1f MiB with "
            "optimizer state), mode %s",
            s->cfg.server_index, s->cfg.num_servers, t->n_local, t->table.n_tensors, t->share,
            (double)ps_shard_memory_bytes(t->shard) / (1 << 20), ps_mode_name(s->cfg.mode));
    return 0;
}

void ps_front_free_table(ps_kv_server *s)
{
    ps_held_drop(&s->held, NULL);
    ps_row_tables_free(&s->tables);
    ps_units_free(&s->units);
    ps_durability_release(&s->dur);
    ps_tensors_free(&s->tensors);
}

/* A withdrawn table is freed once the work still in flight on it has
 * drained. */
void ps_front_release_withdrawn(ps_kv_server *s)
{
    if (s->tensors.life.state != PS_TABLE_WITHDRAWN || !ps_apply_queue_idle(s->tensors.updates))
        return;
    ps_front_free_table(s);
    ps_info("the withdrawn tensor table is released; waiting for a worker to declare the tensors");
}

/* Nothing of a withdrawn table survives: the peers that joined it, workers
 * and evaluators, are closed, who joined the job and what the job was to
 * do is forgotten, and the table itself is freed once the work in flight
 * on it has drained. An evaluator left admitted would read (or, leaving,
 * drop pulls against) a table that is gone, or one declared after it that
 * it never agreed on. */
void ps_front_withdraw(ps_kv_server *s, const char *why)
{
    uint64_t now = uv_now(s->loop);
    char reason[1024], read[1024];

    ps_warn("the tensor table of %d tensors is withdrawn: %s; nothing of it is kept, and the next "
            "worker to declare the tensors declares them anew",
            s->tensors.table.n_tensors, why);
    snprintf(reason, sizeof(reason),
             "the tensor table this worker joined was withdrawn (%s); connect again to declare or "
             "join the job's tensors",
             why);
    snprintf(read, sizeof(read),
             "the tensor table this evaluator read was withdrawn (%s); connect again to read the "
             "job's tensors once a worker has declared them",
             why);
    for (ps_peer *p = s->peers.head; p; p = p->next) {
        if (ps_peers_evaluator_leave(&s->peers, p)) {
            ps_held_drop(&s->held, p);
            ps_peer_fail(p, -PS_EMISMATCH, "%s", read);
            continue;
        }
        if (!ps_job_leave(&s->job, p, "its tensor table was withdrawn", now))
            continue;
        ps_held_drop(&s->held, p);
        ps_peer_fail(p, -PS_EMISMATCH, "%s", reason);
    }
    ps_job_forget(&s->job);
    ps_durability_forget(&s->dur);
    ps_held_drop(&s->held, NULL);
    ps_front_release_withdrawn(s);
}

/* Carries out what a table event asks for. */
void ps_front_table_event(ps_kv_server *s, ps_table_event ev, const char *why)
{
    if (ps_tensors_event(&s->tensors, ev) == PS_TABLE_WITHDRAW)
        ps_front_withdraw(s, why);
}

/* Rank 0's table over one other ranks declared first (issue 23 pt 2: the
 * job starts from rank 0's model, whoever came first): the held table is
 * withdrawn, its declarers told that rank 0 declared another and how the
 * two differ. Returns 0 when the server now holds no table (rank 0's is
 * adopted next), or -1 after failing rank 0 with -EAGAIN (the old table is
 * still draining: come back). */
int ps_front_outranked(ps_kv_server *s, ps_peer *p, const char *diff)
{
    char ranks[128] = "", why[800];
    size_t n = 0;
    int count = 0;

    for (ps_peer *q = s->peers.head; q; q = q->next)
        if (q->state == PS_PEER_WORKER && q->declarer && n < sizeof(ranks)) {
            n += (size_t)snprintf(ranks + n, sizeof(ranks) - n, "%s%u", count ? ", " : "", q->rank);
            count++;
        }
    snprintf(why, sizeof(why), "rank 0 declared another table than rank%s %s: %s",
             count == 1 ? "" : "s", ranks, diff);
    ps_tensors_event(&s->tensors, PS_TABLE_OUTRANKED);
    ps_front_withdraw(s, why);
    if (!s->tensors.has_table)
        return 0;
    ps_peer_fail(p, -EAGAIN,
                 "the tensor table other ranks declared gives way to rank 0's and is still "
                 "being withdrawn; come back in a moment");
    return -1;
}

/* The table a HELLO declared becomes the server's. Returns 0, or -1 after
 * failing the peer. */
int ps_front_declare(ps_kv_server *s, ps_peer *p, const Shardps__Hello *hello,
                     const ps_model_spec *spec)
{
    int rc = ps_front_adopt(s, spec, PS_TABLE_DECLARE);

    if (rc < 0) {
        ps_peer_fail(p, rc == -ENOMEM ? -ENOMEM : -PS_EPROTO,
                     "this server cannot hold the declared tensors in %d servers of "
                     "%zu-byte chunks: %s",
                     s->cfg.num_servers, s->cfg.chunk_bytes, ps_strerror(rc));
        return -1;
    }
    ps_info(
        "tensor table of %d tensors (%zu bytes) declared by worker %u (%s); it is the job's once "
        "a step is applied, and withdrawn if every worker that declared it leaves before",
        spec->n_tensors, spec->total_words * sizeof(float), hello->rank, ps_conn_peer(p->conn));
    return 0;
}
