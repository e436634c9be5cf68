/* A restore before the server starts (ps_kv_server_restore): the newest
 * usable checkpoint is read by durability.h, which builds the file's table
 * through the front when the server holds none; what it found is then put
 * where each part keeps it: every chunk's and row table's clocks into the
 * units, where the job resumes into the membership, and the table's life
 * committed. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "front.h"
#include "kv_server.h"
#include "ps_log.h"

static int ps__restore_adopt(void *arg, const ps_model_spec *spec)
{
    return ps_front_adopt(arg, spec, PS_TABLE_RESTORE);
}

static void ps__restore_release(void *arg)
{
    ps_front_free_table(arg);
}

int ps_kv_server_restore(ps_kv_server *s, uint64_t max_clock, char *err, size_t err_len)
{
    ps_durability_builder b = {ps__restore_adopt, ps__restore_release, s};
    ps_durability_restored got; /* 7 KiB */
    ps_units *u = &s->units;
    ps_row_counters c;
    char path[4096];
    int rc;

    rc = ps_durability_restore(&s->dur, &b, &s->tensors, &s->tables, max_clock, s->job.total_steps,
                               s->job.clock_lead, &got, path, sizeof(path), err, err_len);
    if (rc < 0)
        return rc;
    /* Buffers and frozen tensors stay out of the barrier whatever the file
     * says. */
    for (int i = 0; i < u->n_chunks; i++)
        ps_units_restored(u, i,
                          ps_tensors_chunk_static(&s->tensors, i) ? UINT64_MAX : s->dur.clocks[i],
                          s->dur.newest[i]);
    for (int i = 0; i < u->n_tables; i++)
        ps_units_restored(u, ps_units_table(u, i), got.rows.clock[i], got.rows.newest[i]);
    /* A server none of whose chunks is pushed goes on from the file's
     * clock: it has no step of its own to say where the job is. */
    ps_units_follow(u, got.clock);
    /* The embedding program's table, now with a checkpoint's values. */
    if (s->tensors.life.state == PS_TABLE_DECLARED)
        ps_tensors_event(&s->tensors, PS_TABLE_RESTORE);
    ps_job_restored(&s->job, got.clock, got.total_steps);
    if (s->tables.n == 0) {
        ps_info("restored clock %" PRIu64 " from %s", got.clock, path);
        return 0;
    }
    ps_row_tables_counters(&s->tables, &c);
    ps_info("restored clock %" PRIu64 " from %s (%" PRIu64 " embedding rows)", got.clock, path,
            c.stored);
    ps_durability_note_rows(&s->dur, &c, got.rows.counted);
    return 0;
}
