/* Checkpoint files (see checkpoint.h): their names, listing and surveying a
 * directory, writing (through stdio while the CRC accumulates; the rows
 * section by server/durability/checkpoint_rows), and the restore driver, which picks
 * the clock and the files to read and has server/checkpoint_file verify
 * each completely before the table is adopted and then copy it. */
#include "checkpoint.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint_file.h"
#include "crc32c.h"
#include "crc_writer.h"
#include "le_bytes.h"
#include "partition.h"
#include "ps_error.h"
#include "tensor_table.h"

static void ps__file_name(char *buf, size_t len, const char *dir, uint32_t server, uint64_t clock)
{
    snprintf(buf, len, "%s/server-%" PRIu32 "-clock-%012" PRIu64 ".ckpt", dir, server, clock);
}

/* The job a checkpoint file belongs to, from its header: 1 with *job set;
 * 2 for a checkpoint of an older format (its job cannot be told); 0 when it
 * cannot be one of any job, with what is wrong in why. */
static int ps__file_job(const char *path, uint64_t *job, char *why, size_t why_len)
{
    uint8_t h[PS_CHECKPOINT_HEADER_BYTES];
    FILE *f = fopen(path, "rb");
    uint32_t version;
    size_t got;

    if (f == NULL) {
        snprintf(why, why_len, "cannot open: %s", strerror(errno));
        return 0;
    }
    got = fread(h, 1, sizeof(h), f);
    fclose(f);
    if (got != sizeof(h)) {
        snprintf(why, why_len, "truncated: %zu bytes, shorter than a checkpoint's header (%d)", got,
                 PS_CHECKPOINT_HEADER_BYTES);
        return 0;
    }
    if (memcmp(h, PS_CHECKPOINT_MAGIC, 8) != 0) {
        snprintf(why, why_len, "not a shardps checkpoint (bad magic)");
        return 0;
    }
    version = ps_le_get32(h + 8);
    if (version < PS_CHECKPOINT_FORMAT)
        return 2;
    if (version != PS_CHECKPOINT_FORMAT) {
        snprintf(why, why_len,
                 "format version %" PRIu32 ", which this build (version %d) cannot read", version,
                 PS_CHECKPOINT_FORMAT);
        return 0;
    }
    *job = ps_le_get64(h + PS_CHECKPOINT_JOB_OFFSET);
    return 1;
}

/* Whether the file's CRC holds: another job's file is told from one whose
 * header was damaged (its job field too, perhaps) only by its checksum.
 * Streams the file in blocks; 1, or 0 with the reason in why. */
static int ps__crc_holds(const char *path, char *why, size_t why_len)
{
    uint8_t *blk = malloc(PS_CHECKPOINT_BLOCK_BYTES + 4);
    FILE *f = fopen(path, "rb");
    uint32_t crc = 0;
    size_t got, kept = 0;
    int ok = 0;

    if (blk == NULL || f == NULL) {
        snprintf(why, why_len, "cannot read it to check its checksum");
        goto out;
    }
    /* The last 4 bytes read are the stored CRC; everything before is summed. */
    while ((got = fread(blk + kept, 1, PS_CHECKPOINT_BLOCK_BYTES, f)) > 0) {
        size_t have = kept + got;
        kept = have < 4 ? have : 4;
        crc = ps_crc32c(crc, blk, have - kept);
        memmove(blk, blk + have - kept, kept);
    }
    ok = kept == 4 && crc == ps_le_get32(blk);
    if (!ok)
        snprintf(why, why_len, "checksum mismatch (the file is corrupt; its header may be too)");
out:
    if (f)
        fclose(f);
    free(blk);
    return ok;
}

/* Appends "FILE" or "FILE: reason" to a ", "- or "; "-separated list, as long
 * as it fits. */
static void ps__name_append(char *list, size_t len, const char *name, const char *why)
{
    size_t used = strlen(list);

    if (used + 1 < len)
        snprintf(list + used, len - used, "%s%s%s%s", used ? (why ? "; " : ", ") : "", name,
                 why ? ": " : "", why ? why : "");
}

/* Checkpoint clocks of this server and job found in dir, newest first; the
 * caller frees *out. With with_old, files of an older format are listed
 * too, so that a restore refuses them with their reason; pruning leaves
 * them alone. The files of this server that are not this job's go into
 * survey (may be NULL): another job's, whose CRC is checked so that a
 * damaged header is not taken for one, and damaged ones with what is wrong.
 * Returns the count or a negative errno. */
static int ps__list(const char *dir, uint32_t server, uint64_t job, int with_old, uint64_t **out,
                    ps_checkpoint_survey *survey)
{
    char prefix[48], path[4096], why[160];
    size_t plen;
    DIR *d = opendir(dir);
    struct dirent *e;
    uint64_t *clocks = NULL;
    int n = 0, cap = 0;

    if (survey)
        memset(survey, 0, sizeof(*survey));
    if (d == NULL)
        return -errno;
    plen = (size_t)snprintf(prefix, sizeof(prefix), "server-%" PRIu32 "-clock-", server);
    while ((e = readdir(d)) != NULL) {
        char *end;
        uint64_t clock, file_job = 0;
        int kind;
        if (strncmp(e->d_name, prefix, plen) != 0)
            continue;
        clock = strtoull(e->d_name + plen, &end, 10);
        if (end == e->d_name + plen || strcmp(end, ".ckpt") != 0)
            continue;
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        kind = ps__file_job(path, &file_job, why, sizeof(why));
        if (!(kind == 2 && with_old) && (kind != 1 || file_job != job)) {
            if (survey == NULL)
                continue;
            if (kind == 0 || (kind == 1 && !ps__crc_holds(path, why, sizeof(why)))) {
                survey->n_damaged++;
                ps__name_append(survey->damaged, sizeof(survey->damaged), e->d_name, why);
            } else {
                survey->n_other++;
                ps__name_append(survey->other, sizeof(survey->other), e->d_name, NULL);
            }
            continue;
        }
        if (n == cap) {
            uint64_t *grown = realloc(clocks, (size_t)(cap = cap ? 2 * cap : 16) * sizeof(*clocks));
            if (grown == NULL) {
                free(clocks);
                closedir(d);
                return -ENOMEM;
            }
            clocks = grown;
        }
        clocks[n++] = clock;
    }
    closedir(d);
    /* Newest first: insertion sort, the list is short. */
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && clocks[j] > clocks[j - 1]; j--) {
            uint64_t t = clocks[j];
            clocks[j] = clocks[j - 1];
            clocks[j - 1] = t;
        }
    *out = clocks;
    return n;
}

int ps_checkpoint_survey_dir(const char *dir, const ps_checkpoint_meta *meta,
                             ps_checkpoint_survey *out)
{
    uint64_t *mine = NULL;
    int n = ps__list(dir, meta->server_index, meta->job, 0, &mine, out);

    free(mine);
    return n < 0 ? n : 0;
}

static int ps__fsync_dir(const char *dir)
{
    int fd = open(dir, O_RDONLY | O_DIRECTORY);
    int rc = 0;

    if (fd < 0)
        return -errno;
    if (fsync(fd) < 0)
        rc = -errno;
    close(fd);
    return rc;
}

int ps_checkpoint_write(const char *dir, int keep, const ps_checkpoint_meta *meta,
                        const ps_model_spec *table, const ps_shard *shard,
                        const ps_checkpoint_clocks *clocks, const ps_checkpoint_rows *rows,
                        char *path, size_t path_len)
{
    char final[4096], tmp[4200];
    ps_crc_writer w = {NULL, 0, 0};
    uint64_t *old = NULL;
    int n = ps_shard_chunk_count(shard), rc, n_old;
    uint8_t *packed = NULL;
    size_t packed_len;

    for (int i = 0; i < n; i++)
        if (!ps_shard_filled(shard, i))
            return -EINVAL;
    if ((rows ? rows->n : 0) != table->n_row_tables)
        return -EINVAL;
    rc = ps_tensor_table_pack(table, &packed, &packed_len);
    if (rc < 0)
        return rc;
    if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
        rc = -errno;
        free(packed);
        return rc;
    }
    ps__file_name(final, sizeof(final), dir, meta->server_index, meta->clock);
    snprintf(tmp, sizeof(tmp), "%s.tmp", final);
    w.f = fopen(tmp, "wb");
    if (w.f == NULL) {
        rc = -errno;
        free(packed);
        return rc;
    }
    /* Writes of a MiB: the small headers go out with what follows them.
     * (stdio then copies each staged block of rows once more, since its
     * buffer is never empty when one arrives; stdio's default buffer
     * instead made no measurable difference: docs/performance.md.) */
    setvbuf(w.f, NULL, _IOFBF, PS_CHECKPOINT_BLOCK_BYTES);
    ps_crc_writer_put(&w, PS_CHECKPOINT_MAGIC, 8);
    ps_crc_writer_put32(&w, PS_CHECKPOINT_FORMAT);
    ps_crc_writer_put32(&w, meta->server_index);
    ps_crc_writer_put32(&w, meta->num_servers);
    ps_crc_writer_put32(&w, meta->optimizer);
    ps_crc_writer_put64(&w, meta->fingerprint);
    ps_crc_writer_put64(&w, meta->chunk_bytes);
    ps_crc_writer_put64(&w, meta->clock);
    ps_crc_writer_put64(&w, meta->total_steps);
    ps_crc_writer_put64(&w, (uint64_t)n);
    ps_crc_writer_put64(&w, meta->job);
    ps_crc_writer_put32(&w, (uint32_t)packed_len);
    ps_crc_writer_put(&w, packed, packed_len);
    free(packed);
    for (int i = 0; i < n; i++) {
        const ps_chunk *c = ps_shard_chunk(shard, i);
        size_t state_n = ps_shard_state_floats(shard, i);
        ps_crc_writer_put64(&w, c->key);
        ps_crc_writer_put64(&w, c->numel);
        ps_crc_writer_put64(&w, state_n);
        ps_crc_writer_put64(&w, clocks->clock[i]);
        ps_crc_writer_put64(&w, clocks->newest[i]);
        ps_crc_writer_put64(&w, ps_shard_updates(shard, i));
        ps_crc_writer_put(&w, ps_shard_weights(shard, i), c->numel * sizeof(float));
        ps_crc_writer_put(&w, ps_shard_state(shard, i), state_n * sizeof(float));
    }
    rc = ps_checkpoint_rows_write(&w, rows);
    if (rc < 0 && w.err == 0)
        w.err = rc;
    ps_crc_writer_put32(&w, w.crc);
    rc = w.err;
    if (rc == 0 && fflush(w.f) != 0)
        rc = -errno;
    if (rc == 0 && fsync(fileno(w.f)) < 0)
        rc = -errno;
    if (fclose(w.f) != 0 && rc == 0)
        rc = -errno;
    if (rc == 0 && rename(tmp, final) < 0)
        rc = -errno;
    if (rc < 0)
        goto fail;
    rc = ps__fsync_dir(dir);
    if (rc < 0)
        return rc;
    if (path)
        snprintf(path, path_len, "%s", final);
    /* Only this job's files count against keep: another job's are left
     * alone, however new. */
    n_old = ps__list(dir, meta->server_index, meta->job, 0, &old, NULL);
    for (int i = keep > 0 ? keep : 1; i < n_old; i++) {
        ps__file_name(final, sizeof(final), dir, meta->server_index, old[i]);
        unlink(final);
    }
    free(old);
    return 0;
fail:
    unlink(tmp);
    return rc;
}

static void ps__checkpoint_append(char *err, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void ps__checkpoint_append(char *err, size_t len, const char *fmt, ...)
{
    size_t used = strlen(err);
    va_list ap;

    if (used + 1 >= len)
        return;
    va_start(ap, fmt);
    vsnprintf(err + used, len - used, fmt, ap);
    va_end(ap);
}

/* Opens the file of server k at clock for a restore and holds its header
 * clock to its name's, so that a set of one clock is of one clock. Returns
 * 0 with *out, or a negative code with the reason in why. */
static int ps__open_at(ps_checkpoint_file **out, const char *dir, uint32_t k, uint64_t clock,
                       const ps_checkpoint_meta *meta, char *name, size_t name_len, char *why,
                       size_t why_len)
{
    ps_checkpoint_plan plan;
    int rc;

    ps__file_name(name, name_len, dir, k, clock);
    rc = ps_checkpoint_file_open(out, name, k, meta, why, why_len);
    if (rc < 0)
        return rc;
    ps_checkpoint_file_plan(*out, &plan);
    if (plan.clock == clock)
        return 0;
    ps_checkpoint_file_close(*out);
    *out = NULL;
    return ps_err_printf(why, why_len, -PS_EFORMAT,
                         "says clock %" PRIu64 " where its name says %" PRIu64, plan.clock, clock);
}

/* After the table is adopted: the n_files files into the sink's shard and
 * stores (first is file 0's, open; the others are opened again), then the
 * sketches handed over. Returns 0 or a negative code with the reason in
 * why; the caller withdraws the table on failure. */
static int ps__copy_all(const char *dir, uint64_t clock, uint32_t n_files, int same,
                        ps_checkpoint_file *first, const ps_checkpoint_meta *meta, ps_shard *shard,
                        ps_checkpoint_clocks *clocks, ps_checkpoint_rows *rows, char *why,
                        size_t why_len)
{
    ps_checkpoint_keep keep = {meta->num_servers, meta->server_index};
    ps_checkpoint_file *cf = NULL;
    char name[4096];
    int rc = 0;

    if (rows->n != ps_checkpoint_file_table(first)->n_row_tables)
        return ps_err_printf(why, why_len, -PS_EMISMATCH,
                             "this server holds %d row tables where the file has %d", rows->n,
                             ps_checkpoint_file_table(first)->n_row_tables);
    for (uint32_t k = 0; k < n_files && rc == 0; k++) {
        if (k > 0 &&
            (rc = ps__open_at(&cf, dir, k, clock, meta, name, sizeof(name), why, why_len)) < 0)
            break;
        rc = ps_checkpoint_file_copy(k > 0 ? cf : first, shard, clocks, rows, k == 0,
                                     same ? NULL : &keep, why, why_len);
        ps_checkpoint_file_close(cf);
        cf = NULL;
    }
    return rc < 0 ? rc : ps_checkpoint_rows_finish(rows, 1, why, why_len);
}

/* Every file of one restore verified completely, before anything is
 * adopted: file 0 (first, open) and, re-placing, files 1 .. n_files - 1,
 * each of first's plan and model. Returns 0 or a negative code with the
 * reason in why. */
static int ps__verify_all(const char *dir, uint64_t clock, uint32_t n_files, int same,
                          ps_checkpoint_file *first, const ps_checkpoint_meta *meta, char *why,
                          size_t why_len)
{
    ps_checkpoint_plan plan, other;
    ps_checkpoint_file *cf = NULL;
    char name[4096], reason[512];
    int rc = 0;

    ps_checkpoint_file_plan(first, &plan);
    for (uint32_t k = 0; k < n_files; k++) {
        if (k > 0)
            rc = ps__open_at(&cf, dir, k, clock, meta, name, sizeof(name), reason, sizeof(reason));
        if (rc == 0 && k > 0) {
            ps_checkpoint_file_plan(cf, &other);
            if (other.num_servers != plan.num_servers || other.chunk_bytes != plan.chunk_bytes ||
                ps_model_spec_fingerprint(ps_checkpoint_file_table(cf)) !=
                    ps_model_spec_fingerprint(ps_checkpoint_file_table(first)))
                rc = ps_err_printf(reason, sizeof(reason), -PS_EMISMATCH,
                                   "written for another plan or model than server 0's");
        }
        if (rc == 0)
            rc = ps_checkpoint_file_verify(k > 0 ? cf : first, reason, sizeof(reason));
        ps_checkpoint_file_close(cf);
        cf = NULL;
        if (rc == 0)
            continue;
        if (same)
            return ps_err_printf(why, why_len, rc, "%s", reason);
        /* A member missing or unreadable makes the set unusable. */
        return ps_err_printf(why, why_len, rc > -PS__ERR_BASE && rc != -ENOMEM ? -PS_EFORMAT : rc,
                             "re-placing the %" PRIu32 " files of clock %" PRIu64
                             ": server %" PRIu32 "'s: %s",
                             n_files, clock, k, reason);
    }
    return 0;
}

/* Whether a file's plan is this server's (meta's): a restore reads it
 * alone. */
static int ps__same_plan(const ps_checkpoint_file *cf, const ps_checkpoint_meta *meta)
{
    ps_checkpoint_plan plan;

    ps_checkpoint_file_plan(cf, &plan);
    return plan.num_servers == meta->num_servers && plan.chunk_bytes == meta->chunk_bytes &&
           plan.server_index == meta->server_index;
}

/* Which files of clock a restore reads. The plan they were written for is
 * server 0's file's, so that every server of a restore makes the same
 * choice: another plan than this server's, and every file of that clock is
 * re-placed; this plan, and this server reads its own file alone (a server
 * whose files are all gone re-places the others' as a new one does). With
 * server 0's file unreadable or absent (a volume of this server's alone),
 * this server's own file decides. own, zero: this server's and server 0's
 * file of clock are listed; any_own: this server has files of other
 * clocks. Opens the file the restore starts from into *first (*same: this
 * server's own, of its plan). Returns 0; 1 when clock is not one for this
 * server (only server 0 checkpointed it); or a negative code with the
 * reason in why and the file it is about in file. */
static int ps__pick(const char *dir, uint64_t clock, int own, int zero, int any_own,
                    const ps_checkpoint_meta *meta, ps_checkpoint_file **first, int *same,
                    char *file, size_t file_len, char *why, size_t why_len)
{
    ps_checkpoint_plan plan;
    char reason[512];
    uint32_t self = meta->server_index;
    int zero_rc =
        zero ? ps__open_at(first, dir, 0, clock, meta, file, file_len, reason, sizeof(reason))
             : ps_err_printf(reason, sizeof(reason), -ENOENT, "missing");
    int zero_plan = 0, rc;

    *same = 0;
    if (zero_rc == 0) {
        ps_checkpoint_file_plan(*first, &plan);
        zero_plan = plan.num_servers == meta->num_servers && plan.chunk_bytes == meta->chunk_bytes;
        if (self == 0 || !zero_plan || (!own && !any_own)) {
            *same = self == 0 && zero_plan;
            return 0;
        }
        ps_checkpoint_file_close(*first);
        *first = NULL;
    }
    if (!own && any_own && zero_rc == 0)
        return 1;
    if (!own || self == 0) {
        ps__file_name(file, file_len, dir, 0, clock);
        return ps_err_printf(why, why_len, zero_rc, "%s", reason);
    }
    rc = ps__open_at(first, dir, self, clock, meta, file, file_len, why, why_len);
    if (rc < 0)
        return rc;
    *same = ps__same_plan(*first, meta);
    if (*same)
        return 0;
    /* This server's file of another plan than its own: the set it belongs
     * to is re-placed from server 0's file, which is of this plan (this
     * server's is left from an earlier plan) or unreadable. */
    ps_checkpoint_file_close(*first);
    *first = NULL;
    ps__file_name(file, file_len, dir, 0, clock);
    if (zero_plan)
        return ps_err_printf(why, why_len, -PS_EMISMATCH,
                             "written for this plan, where this server's file of that clock is "
                             "of another (left from an earlier plan)");
    return ps_err_printf(why, why_len, zero_rc, "%s", reason);
}

/* Reads the files of one restore at clock (ps__pick): this server's own
 * file of its plan alone, or every file of the plan server 0's was written
 * for (a different number of servers or chunk size), re-placed. Every file
 * is verified completely before the table (file 0's) is adopted. A
 * re-placing restore reads what every server of the job reads, so every
 * server verifies the same set the same way; once it has, that clock is
 * this restore's: what fails in the copy after (this server's memory, a
 * row its store refuses) is -ENOTRECOVERABLE, since an older clock would
 * put this server at another clock than the others. Writes the file (or a
 * description of the files) read into file. Returns 0, 1 (not a clock for
 * this server), or a negative code with the reason in why. */
static int ps__load(const char *dir, uint64_t clock, int own, int zero, int any_own,
                    ps_checkpoint_meta *meta, const ps_checkpoint_sink *sink,
                    ps_checkpoint_clocks *clocks, ps_checkpoint_rows *rows, char *file,
                    size_t file_len, char *why, size_t why_len)
{
    ps_checkpoint_file *first = NULL;
    ps_checkpoint_plan plan;
    ps_shard *shard = NULL;
    char reason[512];
    uint32_t n_files;
    int rc, same = 0;

    rc =
        ps__pick(dir, clock, own, zero, any_own, meta, &first, &same, file, file_len, why, why_len);
    if (rc != 0)
        return rc;
    ps_checkpoint_file_plan(first, &plan);
    n_files = same ? 1 : plan.num_servers;
    rc = ps__verify_all(dir, clock, n_files, same, first, meta, why, why_len);
    if (rc < 0)
        goto out;
    /* Every check passed: only now is the table adopted and the shard
     * touched. */
    memset(rows, 0, sizeof(*rows));
    shard = sink->adopt(sink->arg, ps_checkpoint_file_table(first), clocks, rows, reason,
                        sizeof(reason));
    rc = shard == NULL ? -PS_EMISMATCH
                       : ps__copy_all(dir, clock, n_files, same, first, meta, shard, clocks, rows,
                                      reason, sizeof(reason));
    /* A table this server cannot adopt is refused as usual: every server
     * holds the same table to it, and it is the file's, not the clock's. */
    if (rc < 0 && (same || shard == NULL))
        snprintf(why, why_len, "%s", reason);
    else if (rc < 0)
        rc = ps_err_printf(why, why_len, -ENOTRECOVERABLE,
                           "the %" PRIu32 " files of clock %" PRIu64
                           " passed every check, so the other servers restore that clock, but "
                           "this server cannot take its share: %s",
                           n_files, clock, reason);
    if (rc < 0)
        goto out;
    if (!same)
        snprintf(file, file_len,
                 "the %" PRIu32 " files of clock %" PRIu64 " in %s (%" PRIu32 " servers, %" PRIu64
                 "-byte chunks), re-placed",
                 n_files, clock, dir, plan.num_servers, plan.chunk_bytes);
    meta->clock = plan.clock;
    if (plan.total_steps > meta->total_steps)
        meta->total_steps = plan.total_steps;
    shard = NULL;
out:
    if (shard) {
        ps_checkpoint_rows_finish(rows, 0, NULL, 0);
        sink->withdraw(sink->arg);
    }
    ps_checkpoint_file_close(first);
    return rc;
}

/* Whether clock is in the n clocks of list. */
static int ps__has_clock(const uint64_t *list, int n, uint64_t clock)
{
    for (int i = 0; i < n; i++)
        if (list[i] == clock)
            return 1;
    return 0;
}

int ps_checkpoint_restore(const char *dir, uint64_t max_clock, ps_checkpoint_meta *meta,
                          const ps_checkpoint_sink *sink, ps_checkpoint_clocks *clocks,
                          ps_checkpoint_rows *rows, char *path, size_t path_len, char *err,
                          size_t err_len)
{
    uint64_t *own = NULL, *zero = NULL;
    uint32_t self = meta->server_index;
    int n_own = ps__list(dir, self, meta->job, 1, &own, NULL), n_zero = 0, rc = -ENOENT;
    int a = 0, b = 0;

    err[0] = '\0';
    if (n_own < 0) {
        ps__checkpoint_append(err, err_len, "%s: %s; ", dir, strerror(-n_own));
        return n_own;
    }
    /* Server 0's clocks too: they say which restores there are for a
     * server new to the job (the set grew), and which plan each clock was
     * written for. */
    if (self != 0 && (n_zero = ps__list(dir, 0, meta->job, 1, &zero, NULL)) < 0)
        n_zero = 0;
    if (self == 0) {
        zero = own;
        n_zero = n_own;
    }
    /* Every clock of either list, newest first. */
    while (a < n_own || b < n_zero) {
        uint64_t clock = a < n_own && (b >= n_zero || own[a] >= zero[b]) ? own[a] : zero[b];
        char file[4096], why[768];
        int load;
        while (a < n_own && own[a] == clock)
            a++;
        while (b < n_zero && zero[b] == clock)
            b++;
        if (clock > max_clock)
            continue;
        load = ps__load(dir, clock, ps__has_clock(own, n_own, clock),
                        ps__has_clock(zero, n_zero, clock), n_own > 0, meta, sink, clocks, rows,
                        file, sizeof(file), why, sizeof(why));
        if (load == 1)
            continue;
        rc = load;
        if (rc == 0) {
            snprintf(path, path_len, "%s", file);
            break;
        }
        if (rc == -ENOTRECOVERABLE) {
            /* One sentence: the older clocks are not this server's to try. */
            snprintf(err, err_len, "%s", why);
            break;
        }
        ps__checkpoint_append(err, err_len, "%s: %s; ", file, why);
    }
    if (zero != own)
        free(zero);
    free(own);
    return n_own == 0 && n_zero == 0 ? -ENOENT : rc;
}
