/* Durability: when checkpoints are taken (every N steps, every T seconds,
 * on request), writing them once the updates before them are applied, and
 * restoring the newest usable one at start. The file format is checkpoint.c's.
 * Embedding rows are written as they are when the file is written, with
 * their tables' clocks (rows are applied on the loop, and a sync pull waits
 * for a due checkpoint, so a worker that pulls before it pushes has pushed
 * the checkpoint's step and nothing after); a sync step of rows pushed but
 * not yet applied is not kept, as a chunk's is not. */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "checkpoint.h"
#include "job_options.h"
#include "kv_internal.h"
#include "ps_error.h"
#include "ps_log.h"
#include "tensor_table.h"

/* A checkpoint's job: the job's settings but the number of servers and the
 * chunk size, which a restore may change (it re-places what the files hold
 * onto the new plan). */
static uint64_t ps__checkpoint_job(const char *settings)
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
 * per-chunk clocks are: the server's own ckpt_clocks/ckpt_newest, which a
 * due checkpoint fills and a restore reads into (borrowed, not freed). */
static void ps__checkpoint_identity(const ps_kv_server *s, ps_checkpoint_meta *meta,
                                    ps_checkpoint_clocks *clocks)
{
    memset(meta, 0, sizeof(*meta));
    meta->server_index = (uint32_t)s->cfg.server_index;
    meta->num_servers = (uint32_t)s->cfg.num_servers;
    meta->optimizer = (uint32_t)s->cfg.opt.kind;
    meta->fingerprint = s->has_table ? ps_model_spec_fingerprint(&s->table) : 0;
    meta->chunk_bytes = s->cfg.chunk_bytes;
    meta->total_steps = s->total_steps;
    /* The settings alone: a server restores before any worker has declared
     * the tensors, so the table is not known then; the table callback of the
     * restore checks the model. */
    meta->job = ps__checkpoint_job(s->cfg.job_settings);
    clocks->clock = s->ckpt_clocks;
    clocks->newest = s->ckpt_newest;
}

/* The row tables as a checkpoint takes them (borrowed stores). */
static void ps__checkpoint_rows(const ps_kv_server *s, ps_checkpoint_rows *rows)
{
    rows->n = s->n_rows;
    for (int i = 0; i < s->n_rows; i++) {
        rows->store[i] = s->rows[i].store;
        rows->dim[i] = s->rows[i].dim;
        rows->clock[i] = s->rows[i].clock.clock;
        rows->newest[i] = s->rows[i].clock.newest;
    }
}

/* Writes the checkpoint that was due, with the clocks taken when it was
 * asked for: the updates before it are applied, none after it started. */
static int ps__write_checkpoint(ps_kv_server *s)
{
    ps_checkpoint_rows rows; /* 7 KiB */
    ps_checkpoint_meta meta;
    ps_checkpoint_clocks clocks;
    char path[4096];
    const char *why = s->ckpt_why;
    uint64_t t0 = uv_hrtime();
    int rc;

    ps__checkpoint_identity(s, &meta, &clocks);
    meta.clock = s->ckpt_due_clock;
    ps__checkpoint_rows(s, &rows);
    rc = ps_checkpoint_write(s->cfg.checkpoint_dir, s->cfg.keep_checkpoints, &meta, &s->table,
                             s->shard, &clocks, &rows, path, sizeof(path));
    if (rc < 0) {
        ps_error("checkpoint at clock %" PRIu64 " into %s failed: %s; the previous ones are kept",
                 meta.clock, s->cfg.checkpoint_dir, ps_strerror(rc));
        return rc;
    }
    s->ckpt_clock = meta.clock;
    ps_info("checkpoint (%s) at clock %" PRIu64 ": %s in %.1f ms", why, meta.clock, path,
            (double)(uv_hrtime() - t0) / 1e6);
    return 0;
}

/* Takes the clocks of everything submitted so far; the weights follow once
 * those updates have run. */
static void ps__checkpoint_due(ps_kv_server *s, const char *why)
{
    snprintf(s->ckpt_why, sizeof(s->ckpt_why), "%s", why);
    s->ckpt_due = 1;
    s->ckpt_seq = ps_apply_queue_next_seq(s->updates);
    s->ckpt_due_clock = ps__progress_clock(s);
    for (int i = 0; i < s->n_local; i++) {
        s->ckpt_clocks[i] = s->sync[i].clock;
        s->ckpt_newest[i] = s->sync[i].newest;
    }
}

/* Writes the due checkpoint once the updates before it are applied, then
 * the one asked for meanwhile, if any. */
int ps__try_checkpoint(ps_kv_server *s)
{
    int rc;

    if (!s->ckpt_due || !ps_apply_queue_settled_before(s->updates, s->ckpt_seq))
        return 0;
    s->ckpt_due = 0;
    rc = ps__write_checkpoint(s);
    if (s->ckpt_again) {
        s->ckpt_again = 0;
        ps__checkpoint_due(s, s->ckpt_again_why);
        return ps__try_checkpoint(s);
    }
    return rc;
}

int ps_kv_server_checkpoint(ps_kv_server *s, const char *why)
{
    if (s->cfg.checkpoint_dir == NULL)
        return 0;
    /* Before a step is applied there is nothing to keep: the table is only
     * declared (by whoever said HELLO first), and a checkpoint of it would
     * outlive a declaration that is withdrawn when its declarer leaves. */
    if (!ps__table_may_checkpoint(s)) {
        ps_info("no checkpoint (%s): no step has been applied, so there is nothing to keep", why);
        return 0;
    }
    if (s->ckpt_due) {
        s->ckpt_again = 1;
        snprintf(s->ckpt_again_why, sizeof(s->ckpt_again_why), "%s", why);
        return 0;
    }
    ps__checkpoint_due(s, why);
    return ps__try_checkpoint(s);
}

/* Called after every push, before waiting pulls are answered: in sync mode a
 * checkpoint of a step is on disk before any worker sees that step's weights,
 * so a restored server is never behind what a worker has already seen (pulls
 * numbered after a due checkpoint wait for it). */
void ps__maybe_checkpoint(ps_kv_server *s)
{
    uint64_t clock;

    if (s->cfg.checkpoint_dir == NULL || s->cfg.checkpoint_every == 0 || s->ckpt_due)
        return;
    clock = ps__progress_clock(s);
    if (clock >= s->ckpt_clock + s->cfg.checkpoint_every)
        ps_kv_server_checkpoint(s, "periodic");
}

static void ps__on_checkpoint_timer(uv_timer_t *t)
{
    ps_kv_server *s = t->data;

    if (ps__progress_clock(s) != s->ckpt_clock && !s->ckpt_due)
        ps_kv_server_checkpoint(s, "timer");
}

static void ps__log_foreign(ps_kv_server *s);

static void ps__restore_withdraw(void *arg);

/* A verified checkpoint's table: adopted when the server holds none (it
 * starts without one, unless its embedding program gave one, which the
 * file must then hold). */
static ps_shard *ps__restore_adopt(void *arg, const ps_model_spec *table,
                                   ps_checkpoint_clocks *clocks, ps_checkpoint_rows *rows,
                                   char *why, size_t why_len)
{
    ps_kv_server *s = arg;
    char diff[256];
    int rc;

    if (s->has_table) {
        if (ps_tensor_table_diff(table, &s->table, "in the file", "on this server", diff,
                                 sizeof(diff)) != 0) {
            snprintf(why, why_len, "saved for another model: %s", diff);
            return NULL;
        }
    } else if ((rc = ps__adopt_table(s, table, PS_TABLE_RESTORE)) < 0) {
        snprintf(why, why_len, "cannot hold its tensors: %s", ps_strerror(rc));
        return NULL;
    } else {
        s->restoring = 1;
    }
    /* Memory for the file's values, now that it has passed every check
     * (the embedding program's table also gets its initial values, which
     * it keeps should the copy fail). */
    for (int i = 0; i < s->n_local; i++)
        if (ps_shard_fill(s->shard, i, !s->restoring) < 0) {
            snprintf(why, why_len, "no memory to hold its %d chunks", s->n_local);
            ps__restore_withdraw(s);
            return NULL;
        }
    clocks->clock = s->ckpt_clocks;
    clocks->newest = s->ckpt_newest;
    ps__checkpoint_rows(s, rows);
    return s->shard;
}

/* The file adopted failed after all: nothing of it stays. */
static void ps__restore_withdraw(void *arg)
{
    ps_kv_server *s = arg;

    if (s->restoring)
        ps__free_table(s);
    s->restoring = 0;
}

/* What the rows' counters of the summary and /metrics go on from after a
 * restore that took the counters of `counted` files (checkpoint_rows.h's
 * rule: onto another number of servers, server 0 carries the job's), said
 * now and kept for the summary. */
static void ps__note_row_counts(ps_kv_server *s, const ps_kv_server_stats *st, uint32_t counted)
{
    s->rows_note = NULL;
    if (counted == 0) {
        s->rows_note =
            "counted since the restore: server 0 carries the job's counts from before it";
        ps_info("row counts start at 0 on this server: a restore onto another number of servers "
                "carries the job's counts from before it on server 0");
        return;
    }
    if (counted > 1)
        s->rows_note = "with the job's counts from before the restore, summed over the servers "
                       "it had";
    ps_info("row counts go on from %" PRIu64 " created, %" PRIu64 " admitted, %" PRIu64
            " evicted%s",
            st->rows_created, st->rows_admitted, st->rows_evicted,
            counted > 1 ? " (the job's, summed over the files of the servers before the "
                          "restore: which server counted what is not kept)"
                        : "");
}

int ps_kv_server_restore(ps_kv_server *s, uint64_t max_clock, char *err, size_t err_len)
{
    ps_checkpoint_sink sink = {ps__restore_adopt, ps__restore_withdraw, s};
    ps_checkpoint_rows rows; /* 7 KiB */
    ps_checkpoint_meta meta;
    ps_checkpoint_clocks clocks;
    char path[4096];
    int rc;

    if (s->cfg.checkpoint_dir == NULL) {
        snprintf(err, err_len, "no checkpoint directory given");
        return -EINVAL;
    }
    ps__log_foreign(s);
    ps__checkpoint_identity(s, &meta, &clocks);
    err[0] = '\0';
    meta.state_per_weight = ps_optimizer_state_floats(&s->cfg.opt, 1);
    meta.max_table_bytes = s->cfg.max_model_bytes;
    rc = ps_checkpoint_restore(s->cfg.checkpoint_dir, max_clock, &meta, &sink, &clocks, &rows, path,
                               sizeof(path), err, err_len);
    s->restoring = 0;
    if (rc == 0) {
        for (int i = 0; i < s->n_local; i++) {
            /* Buffers and frozen tensors stay out of the barrier whatever
             * the file says. */
            s->sync[i].clock = ps__chunk_static(s, i) ? UINT64_MAX : clocks.clock[i];
            s->sync[i].newest = clocks.newest[i];
        }
        for (int i = 0; i < s->n_rows; i++) {
            s->rows[i].clock.clock = rows.clock[i];
            s->rows[i].clock.newest = rows.newest[i];
        }
        /* The embedding program's table, now with a checkpoint's values. */
        if (s->life.state == PS_TABLE_DECLARED)
            ps_table_life_step(&s->life, PS_TABLE_RESTORE);
        s->total_steps = meta.total_steps;
        s->resume_clock = meta.clock;
        s->restored_clock = meta.clock;
        s->ckpt_clock = meta.clock;
        if (*err)
            ps_warn("skipped unusable checkpoints: %s", err);
        if (s->n_rows > 0) {
            ps_kv_server_stats st;
            memset(&st, 0, sizeof(st));
            ps__rows_stats(s, &st);
            ps_info("restored clock %" PRIu64 " from %s (%" PRIu64 " embedding rows)", meta.clock,
                    path, st.rows_stored);
            ps__note_row_counts(s, &st, rows.counted);
        } else {
            ps_info("restored clock %" PRIu64 " from %s", meta.clock, path);
        }
    }
    return rc;
}

/* Another job's files in the directory (a volume that outlived its job)
 * are neither restored nor pruned: one line names them. Damaged files are
 * left alone too, each named with what is wrong, as a warning: one of them
 * may have been this job's. */
static void ps__log_foreign(ps_kv_server *s)
{
    ps_checkpoint_meta meta;
    ps_checkpoint_clocks clocks;
    ps_checkpoint_survey sv;

    ps__checkpoint_identity(s, &meta, &clocks);
    if (s->foreign_logged)
        return;
    s->foreign_logged = 1;
    if (ps_checkpoint_survey_dir(s->cfg.checkpoint_dir, &meta, &sv) < 0)
        return;
    if (sv.n_other > 0)
        ps_info("leaving %d checkpoint file%s of another job alone in %s (neither restored nor "
                "pruned): %s",
                sv.n_other, sv.n_other == 1 ? "" : "s", s->cfg.checkpoint_dir, sv.other);
    if (sv.n_damaged > 0)
        ps_warn("%d damaged checkpoint file%s in %s, left alone (neither restored nor pruned; "
                "remove %s once looked at): %s",
                sv.n_damaged, sv.n_damaged == 1 ? "" : "s", s->cfg.checkpoint_dir,
                sv.n_damaged == 1 ? "it" : "them", sv.damaged);
}

void ps__durability_start(ps_kv_server *s)
{
    uint64_t every;

    if (s->cfg.checkpoint_dir == NULL)
        return;
    ps__log_foreign(s);
    if (s->cfg.checkpoint_seconds <= 0)
        return;
    every = (uint64_t)(s->cfg.checkpoint_seconds * 1000);
    uv_timer_init(s->loop, &s->ckpt_timer);
    s->ckpt_timer.data = s;
    s->ckpt_timer_on = 1;
    uv_timer_start(&s->ckpt_timer, ps__on_checkpoint_timer, every, every);
}

void ps__durability_stop(ps_kv_server *s)
{
    if (s->ckpt_timer_on)
        uv_close((uv_handle_t *)&s->ckpt_timer, NULL);
    s->ckpt_timer_on = 0;
    if (s->quiesce_timer_on)
        uv_close((uv_handle_t *)&s->quiesce_timer, NULL);
    s->quiesce_timer_on = 0;
}

/* Sync: every chunk at one clock with nothing of that step accumulated. A
 * checkpoint taken here resumes exactly; one taken mid-step holds chunks a
 * step apart and loses what was accumulated. */
static int ps__at_step_boundary(const ps_kv_server *s)
{
    if (s->cfg.staleness != 0)
        return 1;
    uint64_t step = ps__server_clock(s);

    for (int i = 0; i < s->n_local; i++)
        if ((!ps__chunk_static(s, i) && s->sync[i].clock != step) || s->sync[i].pushes > 0 ||
            s->sync[i].live_pushes > 0)
            return 0;
    return 1;
}

static void ps__quiesced(ps_kv_server *s, int in_time)
{
    ps_kv_server_done_cb cb = s->quiesce_cb;

    if (cb == NULL)
        return;
    s->quiesce_cb = NULL;
    if (s->quiesce_timer_on)
        uv_timer_stop(&s->quiesce_timer);
    if (!in_time)
        ps_warn("the step in progress did not complete in time (%d worker%s live): the state "
                "is mid-step, and a run resumed from a checkpoint of it will not equal an "
                "uninterrupted one",
                s->live, s->live == 1 ? "" : "s");
    cb(s, s->quiesce_arg);
}

/* With nobody live, nothing more will complete the step: now, as it is. */
void ps__maybe_quiesced(ps_kv_server *s)
{
    if (s->quiesce_cb && (ps__at_step_boundary(s) || s->live == 0))
        ps__quiesced(s, ps__at_step_boundary(s));
}

static void ps__on_quiesce_timeout(uv_timer_t *t)
{
    ps__quiesced(t->data, ps__at_step_boundary(t->data));
}

void ps_kv_server_quiesce(ps_kv_server *s, uint32_t timeout_ms, ps_kv_server_done_cb cb, void *arg)
{
    s->quiesce_cb = cb;
    s->quiesce_arg = arg;
    ps__maybe_quiesced(s);
    if (s->quiesce_cb == NULL)
        return;
    ps_info("waiting up to %.1f s for the step in progress to complete (a checkpoint at a step "
            "boundary resumes exactly)",
            timeout_ms / 1000.0);
    if (!s->quiesce_timer_on) {
        uv_timer_init(s->loop, &s->quiesce_timer);
        s->quiesce_timer.data = s;
        s->quiesce_timer_on = 1;
    }
    uv_timer_start(&s->quiesce_timer, ps__on_quiesce_timeout, timeout_ms, 0);
}
