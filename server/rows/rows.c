/* Row tables as units (see rows.h). Calls the row tables' stores and
 * accumulators, the wire rules, the units, the membership's view and rate,
 * and the peer's refusal. */
#include "rows.h"

#include <errno.h>
#include <inttypes.h>
#include <stdlib.h>
#include <string.h>

#include "clocks.h"
#include "ps_error.h"
#include "ps_log.h"
#include "row_wire.h"
#include "unit_wire.h"

void ps_rows_init(ps_rows *r, const ps_kv_server_config *cfg, const ps_job *job,
                  const ps_tensors *tensors, ps_units *units, ps_row_tables *tables)
{
    memset(r, 0, sizeof(*r));
    r->cfg = cfg;
    r->job = job;
    r->tensors = tensors;
    r->units = units;
    r->tables = tables;
}

static const ps_row_table_spec *ps__rows_spec(const ps_rows *r, uint32_t table)
{
    return &r->tensors->table.row_tables[table];
}

int ps_rows_judge(ps_rows *r, ps_peer *p, const Shardps__Header *h)
{
    uint32_t dims[PS_MAX_ROW_TABLES];
    ps_rows_limits lim = {(uint32_t)r->tables->n, dims, r->cfg->max_row_ids};
    char why[256];
    int rc;

    for (int i = 0; i < r->tables->n; i++)
        dims[i] = ps__rows_spec(r, (uint32_t)i)->dim;
    rc = ps_rows_check_header(&lim, h, why, sizeof(why));
    if (rc < 0) {
        ps_peer_fail(p, rc, "%s", why);
        return -PS_EPROTO;
    }
    return 0;
}

/* The clock of a rows request: not before the job starts, and not past
 * what the mode allows this rank (the chunks' ceiling). */
static int ps__rows_clock_ok(const ps_rows *r, ps_peer *p, const Shardps__Header *h,
                             const ps_consistency_view *v)
{
    uint64_t ceiling = ps_consistency_clock_ceiling(v, p->earned);

    if (!r->job->started && h->type == SHARDPS__MSG_TYPE__PUSH_ROWS) {
        ps_peer_fail(p, -PS_EPROTO, "rows push before every rank has joined");
        return 0;
    }
    if (h->clock > ceiling) {
        ps_peer_fail(p, -PS_EPROTO,
                     "rows request for clock %" PRIu64 " from a worker at clock %" PRIu64
                     ": clock past what the mode allows (at most %" PRIu64 ")",
                     h->clock, p->clock, ceiling);
        return 0;
    }
    return 1;
}

/* The request's header judged again, as the job may have moved while it
 * arrived, and the view its clock is judged by. Returns 0, or -1 after
 * failing the peer. */
static int ps__rows_check(ps_rows *r, ps_peer *p, const Shardps__Header *h, ps_consistency_view *v)
{
    if (ps_rows_judge(r, p, h) < 0)
        return -1;
    ps_clocks_view(r->job, r->units, ps_units_table(r->units, (int)h->row_table), v);
    return ps__rows_clock_ok(r, p, h, v) ? 0 : -1;
}

/* The request's IDs (and a push's gradients) taken apart and checked: each
 * ID once is the wire's rule, and only here is it checked. The caller
 * frees *ids and *widened; *grads points into the payload or at *widened.
 * Returns 0; 1 for a push holding a NaN or Inf gradient (refused, logged
 * and counted here; the peer goes on, as with a dense push's); or -1 after
 * failing (closing) the peer. */
static int ps__rows_parse(ps_rows *r, ps_peer *p, const ps_frame *f, uint64_t **ids,
                          float **widened, const float **grads)
{
    const Shardps__Header *h = f->hdr;
    const ps_row_table_spec *spec = ps__rows_spec(r, h->row_table);
    size_t n = (size_t)h->row_count, dim = spec->dim;
    int wide = h->type == SHARDPS__MSG_TYPE__PUSH_ROWS && h->dtype != SHARDPS__DTYPE__DTYPE_F32;
    char why[256];
    int rc;

    *ids = malloc((n + 1) * sizeof(**ids));
    *widened = wide ? malloc((n * dim + 1) * sizeof(**widened)) : NULL;
    *grads = NULL;
    if (*ids == NULL || (wide && *widened == NULL)) {
        ps_conn_close(p->conn, -ENOMEM);
        return -1;
    }
    rc = ps_rows_parse(ps_unit_wire_payload(p, f), h->type, h->dtype, h->row_count, (uint32_t)dim,
                       *ids, *widened, grads, &r->tables->seen, why, sizeof(why));
    if (rc == 0)
        return 0;
    if (rc == -ENOMEM) {
        ps_conn_close(p->conn, rc);
        return -1;
    }
    r->n.refused++;
    if (rc == -ERANGE) {
        r->n.nonfinite++;
        if (r->n.nonfinite == 1 || r->n.nonfinite % 100 == 0)
            ps_warn("refused a rows push from %s at clock %" PRIu64 ": row table %s: %s (%" PRIu64
                    " such pushes so far)",
                    p->name, h->clock, spec->name, why, r->n.nonfinite);
        return 1;
    }
    ps_peer_fail(p, rc, "row table %s: %s", spec->name, why);
    return -1;
}

ps_pull *ps_rows_pull(ps_rows *r, ps_peer *p, const ps_frame *f)
{
    const Shardps__Header *h = f->hdr;
    uint64_t *ids = NULL;
    float *widened = NULL;
    const float *grads;
    ps_consistency_view v;
    ps_pull *q = NULL;

    if (ps__rows_check(r, p, h, &v) < 0 || ps__rows_parse(r, p, f, &ids, &widened, &grads) != 0)
        goto out;
    q = ps_pull_new(p, h->request_id, h->clock, (int)h->row_table, (size_t)h->row_count, NULL, ids);
    ids = NULL;
    if (q == NULL)
        ps_conn_close(p->conn, -ENOMEM);
out:
    free(ids);
    free(widened);
    ps_unit_wire_done(p);
    return q;
}

/* Counts and logs what an apply refused or did. */
static void ps__rows_applied(ps_rows *r, uint32_t table, int rc, const ps_row_apply_result *res)
{
    const char *name = ps__rows_spec(r, table)->name;

    if (rc < 0) {
        ps_error("row table %s: an update of the step failed (%s); its gradients are lost", name,
                 ps_strerror(rc));
        return;
    }
    if (res->refused > 0) {
        r->n.unstable += res->refused;
        ps_warn("row table %s: refused %zu row updates that would make a row non-finite; those "
                "rows are unchanged",
                name, res->refused);
    }
}

void ps_rows_apply_step(ps_rows *r, int table)
{
    ps_row_table *t = &r->tables->t[table];
    const ps_chunk_clock *c = &r->units->clock[ps_units_table(r->units, table)];
    int divisor = ps_consistency_step_divisor(c);
    ps_row_apply_result res;
    const uint64_t *ids;
    const float *sums;
    size_t n = ps_row_accum_rows(t->accum, &ids, &sums);
    int rc = 0;

    memset(&res, 0, sizeof(res));
    if (divisor > 0 && n > 0)
        rc = ps_row_store_apply(t->store, ids, sums, n, c->clock, ps_job_rate(r->job, c->clock, 0),
                                1.0f / (float)divisor, &res);
    ps__rows_applied(r, (uint32_t)table, rc, &res);
    ps_row_accum_reset(t->accum);
}

int ps_rows_push(ps_rows *r, ps_peer *p, const ps_frame *f)
{
    const Shardps__Header *h = f->hdr;
    uint64_t *ids = NULL, staleness = 0;
    float *widened = NULL;
    const float *grads = NULL;
    ps_consistency_view v;
    size_t n = (size_t)h->row_count;
    int dropped = 0, rejected = 0, usable, unit, rc = -1;
    int sync = r->cfg->staleness == 0;
    ps_unit_verdict verdict;
    ps_row_table *t;
    Shardps__Header ack = SHARDPS__HEADER__INIT;

    if (ps__rows_check(r, p, h, &v) < 0)
        goto out;
    t = &r->tables->t[h->row_table];
    unit = ps_units_table(r->units, (int)h->row_table);
    if (sync && ps_consistency_sync_push(r->units->clock[unit].clock, h->clock) == PS_CLOCK_AHEAD) {
        ps_peer_fail(p, -PS_EPROTO,
                     "rows push for step %" PRIu64 " of row table %s before step %" PRIu64
                     " was applied: clock past what the mode allows",
                     h->clock, ps__rows_spec(r, h->row_table)->name, r->units->clock[unit].clock);
        goto out;
    }
    usable = ps__rows_parse(r, p, f, &ids, &widened, &grads);
    if (usable < 0)
        goto out;
    usable = usable == 0;
    rejected = usable ? 0 : (int)(n < INT32_MAX ? n : INT32_MAX);
    verdict = ps_units_judge(r->units, p->rank, unit, h->clock, sync);
    if (verdict != PS_UNIT_NEW) {
        /* A repeat after a reconnect, or late for a step applied without
         * it: dropped, as a chunk's. */
        dropped = (int)(n < INT32_MAX ? n : INT32_MAX);
        r->n.dropped++;
    } else if (sync) {
        /* A refused push counts toward the step but adds nothing, as a
         * chunk's: the rows take the mean of the usable pushes. */
        int err = usable ? ps_row_accum_add(t->accum, ids, grads, n) : 0;
        if (err < 0) {
            ps_conn_close(p->conn, err);
            goto out;
        }
        if (h->clock + 1 > p->fed)
            p->fed = h->clock + 1;
        ps_units_count(r->units, p->rank, unit, h->clock,
                       !usable ? PS_UNIT_REFUSED
                       : n > 0 ? PS_UNIT_GRAD
                               : PS_UNIT_UNUSED);
    } else if (usable) {
        ps_row_apply_result res;
        int err;

        staleness = ps_consistency_staleness(r->units->clock[unit].newest, h->clock);
        memset(&res, 0, sizeof(res));
        err = ps_row_store_apply(t->store, ids, grads, n, h->clock,
                                 ps_job_rate(r->job, h->clock, staleness), 1.0f, &res);
        ps__rows_applied(r, h->row_table, err, &res);
        ps_units_applied(r->units, p->rank, unit, h->clock);
    }
    r->n.pushes++;
    r->n.rows_in += n;
    r->n.bytes_in += f->payload_len;
    p->n_pushes++;
    p->bytes_in += f->payload_len;
    ack.type = SHARDPS__MSG_TYPE__PUSH_ROWS_REPLY;
    ack.request_id = h->request_id;
    ack.clock = h->clock;
    ack.row_table = h->row_table;
    ack.row_count = h->row_count;
    ps_unit_wire_ack(p, &ack, dropped + rejected, rejected, staleness);
    rc = 0;
out:
    free(ids);
    free(widened);
    ps_unit_wire_done(p);
    return rc;
}
