/* What the server reports of itself: the figures of ps_kv_server_stats
 * gathered from each module's own counters, one live worker's view, and
 * the summary line. Reads only. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "front.h"
#include "kv_server.h"
#include "ps_log.h"

void ps_kv_server_stats_get(const ps_kv_server *s, ps_kv_server_stats *out)
{
    const ps_chunks_counters *d = &s->chunks.n;
    const ps_rows_counters *r = &s->rows.n;
    const ps_tensors *t = &s->tensors;
    ps_row_counters rc;
    uint64_t n = 0, seen = 0;

    memset(out, 0, sizeof(*out));
    out->pushes = d->pushes;
    out->pulls = s->held.n.pulls;
    out->bytes_in = d->bytes_in + r->bytes_in;
    out->bytes_out = s->held.n.bytes_out;
    out->updates = d->applied;
    out->dropped = d->dropped + r->dropped;
    out->refused = s->peers.refused;
    out->nonfinite = d->nonfinite;
    out->unstable = d->unstable + r->unstable;
    out->too_large = d->too_large;
    out->live_workers = s->job.live;
    out->lost_workers = s->job.n_lost;
    out->clock = ps_units_progress_clock(&s->units, s->cfg.staleness);
    out->chunks = t->n_local;
    out->weight_bytes = t->has_table ? t->share : 0;
    out->memory_bytes = t->has_table ? ps_shard_memory_bytes(t->shard) : 0;
    ps_row_tables_counters(&s->tables, &rc);
    out->row_tables = s->tables.n;
    out->row_pulls = s->held.n.row_pulls;
    out->row_pushes = r->pushes;
    out->rows_out = s->held.n.rows_out;
    out->rows_in = r->rows_in;
    out->rows_refused = r->refused;
    out->rows_stored = rc.stored;
    out->rows_created = rc.created;
    out->rows_admitted = rc.admitted;
    out->rows_evicted = rc.evicted;
    out->rows_memory = rc.bytes;
    for (int b = 0; b < PS_CHUNKS_STALE_BINS; b++)
        n += d->stale_hist[b];
    out->staleness_count = n;
    out->staleness_max = d->stale_max;
    if (n == 0)
        return;
    out->staleness_mean = (double)d->stale_sum / (double)n;
    for (int b = 0; b < PS_CHUNKS_STALE_BINS; b++) {
        seen += d->stale_hist[b];
        if ((double)seen >= 0.99 * (double)n) {
            out->staleness_p99 = b;
            break;
        }
    }
}

int ps_kv_server_worker_get(const ps_kv_server *s, int rank, ps_kv_server_worker *out)
{
    const ps_peer *p;

    if (rank < 0 || rank >= s->cfg.world || s->job.workers[rank] == NULL)
        return -ENOENT;
    p = s->job.workers[rank];
    memset(out, 0, sizeof(*out));
    out->rank = p->rank;
    out->clock = p->clock;
    out->pushes = p->n_pushes;
    out->pulls = p->n_pulls;
    out->bytes_in = p->bytes_in;
    out->bytes_out = p->bytes_out;
    out->seconds_since_seen = (double)(uv_now(s->loop) - p->last_seen) / 1000;
    snprintf(out->peer, sizeof(out->peer), "%s", ps_conn_peer(p->conn));
    return 0;
}

const ps_kv_server_config *ps_kv_server_config_get(const ps_kv_server *s)
{
    return &s->cfg;
}

void ps_kv_server_log_summary(const ps_kv_server *s)
{
    const char *note = s->dur.rows_note;
    ps_kv_server_stats st;

    ps_kv_server_stats_get(s, &st);
    ps_info("summary: clock %" PRIu64 ", %" PRIu64 " pushes (%.1f MB in), %" PRIu64
            " pulls (%.1f MB out), %" PRIu64 " chunk updates, %" PRIu64
            " late pushes dropped, %" PRIu64 " non-finite pushes rejected, %" PRIu64
            " updates refused as non-finite, %" PRIu64 " chunks over --max-grad-norm, %" PRIu64
            " connections refused, %d of %d workers lost (left unfinished, not back within "
            "--rejoin-timeout), %" PRIu64 " bytes of weights in %d chunks (%" PRIu64
            " with optimizer state); staleness mean %.2f, p99 %.0f, max %" PRIu64,
            st.clock, st.pushes, (double)st.bytes_in / 1e6, st.pulls, (double)st.bytes_out / 1e6,
            st.updates, st.dropped, st.nonfinite, st.unstable, st.too_large, st.refused,
            st.lost_workers, s->cfg.world, st.weight_bytes, st.chunks, st.memory_bytes,
            st.staleness_mean, st.staleness_p99, st.staleness_max);
    if (st.row_tables > 0)
        ps_info("summary of %d row table%s: %" PRIu64 " rows pulls (%" PRIu64 " rows), %" PRIu64
                " rows pushes (%" PRIu64 " rows), %" PRIu64 " rows requests refused; rows %" PRIu64
                " stored, %" PRIu64 " created, %" PRIu64 " admitted, %" PRIu64
                " evicted, %.1f MiB%s%s%s",
                st.row_tables, st.row_tables == 1 ? "" : "s", st.row_pulls, st.rows_out,
                st.row_pushes, st.rows_in, st.rows_refused, st.rows_stored, st.rows_created,
                st.rows_admitted, st.rows_evicted, (double)st.rows_memory / (1 << 20),
                note ? " (" : "", note ? note : "", note ? ")" : "");
}
