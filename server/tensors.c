/* The tensors this server holds. A server starts with no table: the first
 * worker's HELLO declares it (or a restored checkpoint brings it), and
 * adopting it builds everything sized by the model: the partition, the shard
 * with its initial values, the per-chunk clocks and the apply queue. Every
 * later HELLO must declare the same table, or it is refused with the first
 * difference named, or declare none and join the job as it is (the WELCOME
 * tells it the tensors; before any table, it is told to come back). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>

#include "kv_internal.h"
#include "ps_error.h"
#include "ps_log.h"
#include "tensor_table.h"

void ps__free_table(ps_kv_server *s)
{
    ps_apply_queue_close(s->updates);
    ps_buf_pool_close(s->bufs);
    free(s->ckpt_clocks);
    free(s->ckpt_newest);
    ps_shard_free(s->shard);
    ps_partition_free(s->part);
    free(s->sync);
    free(s->seen);
    s->updates = NULL;
    s->bufs = NULL;
    s->ckpt_clocks = s->ckpt_newest = NULL;
    s->shard = NULL;
    s->part = NULL;
    s->sync = NULL;
    s->seen = NULL;
    s->n_local = 0;
    s->has_table = 0;
}

int ps__adopt_table(ps_kv_server *s, const ps_model_spec *spec)
{
    size_t share;
    int rc;

    if (s->has_table)
        return -EEXIST;
    s->table = *spec;
    rc = ps_partition_init(&s->part, &s->table, s->cfg.num_servers, s->cfg.chunk_bytes);
    if (rc < 0)
        goto fail;
    rc = ps_shard_init(&s->shard, s->part, s->cfg.server_index, &s->table, &s->cfg.opt,
                       s->cfg.staleness == 0);
    if (rc < 0)
        goto fail;
    rc = -ENOMEM;
    s->n_local = ps_shard_chunk_count(s->shard);
    share = ps_partition_server_numel(s->part, s->cfg.server_index) * sizeof(float);
    s->max_write_queue = 2 * share + PS__WRITE_QUEUE_HEADROOM;
    /* In sync mode every worker's push of a step and every worker's reply
     * can be in flight at once: keep that many shard-sized buffers warm. */
    if (ps_buf_pool_init(&s->bufs, 2 * (size_t)s->cfg.world * share) < 0 ||
        ps_apply_queue_init(&s->updates, s->loop, s->n_local, ps__on_updates_settled, s) < 0)
        goto fail;
    s->sync = calloc((size_t)s->n_local + 1, sizeof(*s->sync));
    s->seen = calloc((size_t)s->n_local + 1, sizeof(*s->seen));
    s->ckpt_clocks = calloc((size_t)s->n_local + 1, sizeof(uint64_t));
    s->ckpt_newest = calloc((size_t)s->n_local + 1, sizeof(uint64_t));
    if (s->sync == NULL || s->seen == NULL || s->ckpt_clocks == NULL || s->ckpt_newest == NULL)
        goto fail;
    s->has_table = 1;
    ps_info("server %d of %d holds %d chunks of %d tensors: %zu bytes of weights (%.1f MiB with "
            "optimizer state), mode %s",
            s->cfg.server_index, s->cfg.num_servers, s->n_local, s->table.n_tensors, share,
            (double)ps_shard_memory_bytes(s->shard) / (1 << 20), s->cfg.mode);
    return 0;
fail:
    ps__free_table(s);
    return rc;
}

int ps__check_table(ps_kv_server *s, ps__peer *p, const Shardps__Hello *hello)
{
    ps_model_spec spec;
    char why[256];
    int rc;

    /* No table: the client joins the job as declared (and learns the
     * tensors from the WELCOME), which needs a table to join. Until a worker
     * declares one, -EAGAIN tells a joiner to come back (ps_kv_client waits
     * within its connect timeout); nothing about it is kept here. */
    if (hello->table == NULL || hello->table->n_tensors == 0) {
        if (s->has_table)
            return 0;
        ps__peer_fail(p, -EAGAIN,
                      "no tensor table yet: no worker has declared the job's tensors to this "
                      "server, so there is nothing to join");
        return -1;
    }
    rc = ps_tensor_table_from_wire(hello->table, s->cfg.max_model_bytes, &spec, why, sizeof(why));
    if (rc < 0) {
        ps__peer_fail(p, rc == -E2BIG ? -PS_ETOOBIG : -PS_EPROTO, "tensor table refused: %s", why);
        return -1;
    }
    if (s->has_table) {
        if (ps_tensor_table_diff(&spec, &s->table, "from the worker", "on this server", why,
                                 sizeof(why)) == 0)
            return 0;
        ps__peer_fail(p, -PS_EMISMATCH,
                      "model mismatch: %s; every process of a job must declare the same "
                      "tensors and --seed",
                      why);
        return -1;
    }
    rc = ps__adopt_table(s, &spec);
    if (rc < 0) {
        ps__peer_fail(p, rc == -ENOMEM ? -ENOMEM : -PS_EPROTO,
                      "this server cannot hold the declared tensors in %d servers of "
                      "%zu-byte chunks: %s",
                      s->cfg.num_servers, s->cfg.chunk_bytes, ps_strerror(rc));
        return -1;
    }
    ps_info("tensor table of %d tensors (%zu bytes) declared by worker %u (%s)", spec.n_tensors,
            spec.total_numel * sizeof(float), hello->rank, ps_conn_peer(p->conn));
    return 0;
}
