/* Durability (see durability.h). Calls the checkpoint files, the tensors'
 * shard and queue, the units' clocks and the row tables' stores. */
#include "durability.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "job_options.h"
#include "ps_error.h"
#include "ps_log.h"
#include "tensor_table.h"

void ps_durability_init(ps_durability *d, const ps_kv_server_config *cfg)
{
    memset(d, 0, sizeof(*d));
    d->cfg = cfg;
}

int ps_durability_adopt(ps_durability *d, int n_chunks)
{
    d->clocks = calloc((size_t)n_chunks + 1, sizeof(uint64_t));
    d->newest = calloc((size_t)n_chunks + 1, sizeof(uint64_t));
    d->n_chunks = n_chunks;
    if (d->clocks == NULL || d->newest == NULL) {
        ps_durability_release(d);
        return -ENOMEM;
    }
    return 0;
}

void ps_durability_release(ps_durability *d)
{
    free(d->clocks);
    free(d->newest);
    d->clocks = d->newest = NULL;
    d->n_chunks = 0;
    d->due = d->again = 0;
}

void ps_durability_forget(ps_durability *d)
{
    d->ckpt_clock = 0;
    d->rows_note = NULL;
}

/* A checkpoint's job: the job's settings but the number of servers and the
 * chunk size, which a restore may change (it re-places what the files hold
 * onto the new plan). */
static uint64_t ps__durability_job(const char *settings)
{
    char kept[PS_JOB_SETTINGS_MAX];
    size_t used = 0;

    kept[0] = '\0';
    for (const char *p = settings ? settings : ""; *p;) {
        const char *nl = strchr(p, '\n');
        size_t line = nl ? (size_t)(nl - p) + 1 : strlen(p);
        if (strncmp(p, "num-servers=", 12) != 0 && strncmp(p, "chunk-bytes=", 12) != 0 &&
            used + line < sizeof(kept)) {
            memcpy(kept + used, p, line);
            used += line;
            kept[used] = '\0';
        }
        p += line;
    }
    return ps_job_fingerprint(kept, 0);
}

/* What a checkpoint of this server must say about itself, and where its
 * per-chunk clocks are: d's own, which a due checkpoint fills and a restore
 * reads into (borrowed, not freed). */
static void ps__durability_identity(const ps_durability *d, const ps_tensors *t,
                                    uint64_t total_steps, ps_checkpoint_meta *meta,
                                    ps_checkpoint_clocks *clocks)
{
    const ps_kv_server_config *cfg = d->cfg;

    memset(meta, 0, sizeof(*meta));
    meta->server_index = (uint32_t)cfg->server_index;
    meta->num_servers = (uint32_t)cfg->num_servers;
    meta->optimizer = (uint32_t)cfg->opt.kind;
    meta->fingerprint = t->has_table ? ps_model_spec_fingerprint(&t->table) : 0;
    meta->chunk_bytes = cfg->chunk_bytes;
    meta->total_steps = total_steps;
    /* The settings alone: a server restores before any worker has declared
     * the tensors, so the table is not known then; the table callback of the
     * restore checks the model. */
    meta->job = ps__durability_job(cfg->job_settings);
    clocks->clock = d->clocks;
    clocks->newest = d->newest;
}

/* The row tables as a checkpoint takes them (borrowed stores); their
 * clocks are their units'. */
static void ps__durability_rows(const ps_tensors *t, const ps_units *u, const ps_row_tables *r,
                                ps_checkpoint_rows *rows)
{
    memset(rows, 0, sizeof(*rows));
    rows->n = r->n;
    for (int i = 0; i < r->n; i++) {
        const ps_chunk_clock *c = &u->clock[ps_units_table(u, i)];
        rows->store[i] = r->t[i].store;
        rows->dim[i] = t->table.row_tables[i].dim;
        rows->clock[i] = c->clock;
        rows->newest[i] = c->newest;
    }
}

void ps_durability_ask(ps_durability *d, const char *why, const ps_tensors *t, const ps_units *u)
{
    if (d->due) {
        d->again = 1;
        snprintf(d->again_why, sizeof(d->again_why), "%s", why);
        return;
    }
    snprintf(d->why, sizeof(d->why), "%s", why);
    d->due = 1;
    d->seq = ps_apply_queue_next_seq(t->updates);
    d->due_clock = ps_units_progress_clock(u, d->cfg->staleness);
    for (int i = 0; i < d->n_chunks; i++) {
        d->clocks[i] = u->clock[i].clock;
        d->newest[i] = u->clock[i].newest;
    }
}

/* Writes the checkpoint that was due, with the clocks taken when it was
 * asked for: the updates before it are applied, none after it started. */
static int ps__durability_write(ps_durability *d, const ps_tensors *t, const ps_units *u,
                                const ps_row_tables *r, uint64_t total_steps)
{
    ps_checkpoint_rows rows; /* 7 KiB */
    ps_checkpoint_meta meta;
    ps_checkpoint_clocks clocks;
    char path[4096];
    uint64_t t0 = uv_hrtime();
    int rc;

    ps__durability_identity(d, t, total_steps, &meta, &clocks);
    meta.clock = d->due_clock;
    ps__durability_rows(t, u, r, &rows);
    rc = ps_checkpoint_write(d->cfg->checkpoint_dir, d->cfg->keep_checkpoints, &meta, &t->table,
                             t->shard, &clocks, &rows, path, sizeof(path));
    if (rc < 0) {
        ps_error("checkpoint at clock %" PRIu64 " into %s failed: %s; the previous ones are kept",
                 meta.clock, d->cfg->checkpoint_dir, ps_strerror(rc));
        return rc;
    }
    d->ckpt_clock = meta.clock;
    ps_info("checkpoint (%s) at clock %" PRIu64 ": %s in %.1f ms", d->why, meta.clock, path,
            (double)(uv_hrtime() - t0) / 1e6);
    return 0;
}

int ps_durability_try_write(ps_durability *d, const ps_tensors *t, const ps_units *u,
                            const ps_row_tables *r, uint64_t total_steps)
{
    int rc;

    if (!d->due || !ps_apply_queue_settled_before(t->updates, d->seq))
        return 0;
    d->due = 0;
    rc = ps__durability_write(d, t, u, r, total_steps);
    if (d->again) {
        d->again = 0;
        ps_durability_ask(d, d->again_why, t, u);
        return ps_durability_try_write(d, t, u, r, total_steps);
    }
    return rc;
}

int ps_durability_periodic_due(const ps_durability *d, uint64_t progress)
{
    return d->cfg->checkpoint_dir != NULL && d->cfg->checkpoint_every != 0 && !d->due &&
           progress >= d->ckpt_clock + d->cfg->checkpoint_every;
}

int ps_durability_timer_due(const ps_durability *d, uint64_t progress)
{
    return progress != d->ckpt_clock && !d->due;
}

/* Another job's files in the directory (a volume that outlived its job)
 * are neither restored nor pruned: one line names them. Damaged files are
 * left alone too, each named with what is wrong, as a warning: one of them
 * may have been this job's. */
void ps_durability_survey(ps_durability *d, const ps_tensors *t)
{
    const char *dir = d->cfg->checkpoint_dir;
    ps_checkpoint_meta meta;
    ps_checkpoint_clocks clocks;
    ps_checkpoint_survey sv;

    if (dir == NULL || d->foreign_logged)
        return;
    d->foreign_logged = 1;
    ps__durability_identity(d, t, 0, &meta, &clocks);
    if (ps_checkpoint_survey_dir(dir, &meta, &sv) < 0)
        return;
    if (sv.n_other > 0)
        ps_info("leaving %d checkpoint file%s of another job alone in %s (neither restored nor "
                "pruned): %s",
                sv.n_other, sv.n_other == 1 ? "" : "s", dir, sv.other);
    if (sv.n_damaged > 0)
        ps_warn("%d damaged checkpoint file%s in %s, left alone (neither restored nor pruned; "
                "remove %s once looked at): %s",
                sv.n_damaged, sv.n_damaged == 1 ? "" : "s", dir, sv.n_damaged == 1 ? "it" : "them",
                sv.damaged);
}

/* The restore's sink, for the duration of ps_durability_restore. */
typedef struct {
    ps_durability *d;
    const ps_durability_builder *b;
    ps_tensors *t;
    ps_row_tables *r;
} ps__durability_sink;

static void ps__durability_withdraw(void *arg);

/* A verified checkpoint's table: adopted when the server holds none (it
 * starts without one, unless its embedding program gave one, which the
 * file must then hold). */
static ps_shard *ps__durability_adopt(void *arg, const ps_model_spec *table,
                                      ps_checkpoint_clocks *clocks, ps_checkpoint_rows *rows,
                                      char *why, size_t why_len)
{
    ps__durability_sink *k = arg;
    ps_tensors *t = k->t;
    char diff[256];
    int rc;

    if (t->has_table) {
        if (ps_tensor_table_diff(table, &t->table, "in the file", "on this server", diff,
                                 sizeof(diff)) != 0) {
            snprintf(why, why_len, "saved for another model: %s", diff);
            return NULL;
        }
    } else if ((rc = k->b->adopt(k->b->arg, table)) < 0) {
        snprintf(why, why_len, "cannot hold its tensors: %s", ps_strerror(rc));
        return NULL;
    } else {
        k->d->restoring = 1;
    }
    /* Memory for the file's values, now that it has passed every check
     * (the embedding program's table also gets its initial values, which
     * it keeps should the copy fail). */
    for (int i = 0; i < t->n_local; i++)
        if (ps_shard_fill(t->shard, i, !k->d->restoring) < 0) {
            snprintf(why, why_len, "no memory to hold its %d chunks", t->n_local);
            ps__durability_withdraw(k);
            return NULL;
        }
    clocks->clock = k->d->clocks;
    clocks->newest = k->d->newest;
    memset(rows, 0, sizeof(*rows));
    rows->n = k->r->n;
    for (int i = 0; i < k->r->n; i++) {
        rows->store[i] = k->r->t[i].store;
        rows->dim[i] = t->table.row_tables[i].dim;
    }
    return t->shard;
}

/* The file adopted failed after all: nothing of it stays. */
static void ps__durability_withdraw(void *arg)
{
    ps__durability_sink *k = arg;

    if (k->d->restoring)
        k->b->release(k->b->arg);
    k->d->restoring = 0;
}

int ps_durability_restore(ps_durability *d, const ps_durability_builder *b, ps_tensors *t,
                          ps_row_tables *r, uint64_t max_clock, uint64_t total_steps,
                          uint64_t clock_lead, ps_durability_restored *out, char *path,
                          size_t path_len, char *err, size_t err_len)
{
    ps__durability_sink k = {d, b, t, r};
    ps_checkpoint_sink sink = {ps__durability_adopt, ps__durability_withdraw, &k};
    ps_checkpoint_meta meta;
    ps_checkpoint_clocks clocks;
    int rc;

    if (d->cfg->checkpoint_dir == NULL) {
        snprintf(err, err_len, "no checkpoint directory given");
        return -EINVAL;
    }
    ps_durability_survey(d, t);
    ps__durability_identity(d, t, total_steps, &meta, &clocks);
    err[0] = '\0';
    meta.state_per_weight = ps_optimizer_state_floats(&d->cfg->opt, 1);
    meta.max_table_bytes = d->cfg->max_model_bytes;
    meta.staleness = d->cfg->staleness;
    meta.clock_lead = clock_lead;
    memset(out, 0, sizeof(*out));
    rc = ps_checkpoint_restore(d->cfg->checkpoint_dir, max_clock, &meta, &sink, &clocks, &out->rows,
                               path, path_len, err, err_len);
    d->restoring = 0;
    if (rc < 0)
        return rc;
    out->clock = meta.clock;
    out->total_steps = meta.total_steps;
    d->ckpt_clock = meta.clock;
    if (*err)
        ps_warn("skipped unusable checkpoints: %s", err);
    return 0;
}

void ps_durability_note_rows(ps_durability *d, const ps_row_counters *c, uint32_t counted)
{
    d->rows_note = NULL;
    if (counted == 0) {
        d->rows_note =
            "counted since the restore: server 0 carries the job's counts from before it";
        ps_info("row counts start at 0 on this server: a restore onto another number of servers "
                "carries the job's counts from before it on server 0");
        return;
    }
    if (counted > 1)
        d->rows_note = "with the job's counts from before the restore, summed over the servers "
                       "it had";
    ps_info("row counts go on from %" PRIu64 " created, %" PRIu64 " admitted, %" PRIu64
            " evicted%s",
            c->created, c->admitted, c->evicted,
            counted > 1 ? " (the job's, summed over the files of the servers before the "
                          "restore: which server counted what is not kept)"
                        : "");
}
