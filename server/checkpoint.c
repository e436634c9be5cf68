/* Checkpoint files (see checkpoint.h). Writing streams through stdio while
 * the CRC accumulates; reading checks the header and the tensor table first,
 * then the file's size against what this server's share of that table needs
 * (computed from the partition, nothing allocated for it; the rows section,
 * server/checkpoint_rows, takes the rest), then streams the file once
 * through the CRC, checking each chunk header and the rows section's
 * structure, and only then has the table adopted and reads the file again
 * straight into its shard and row stores. */
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

#include "crc32c.h"
#include "crc_writer.h"
#include "partition.h"
#include "ps_error.h"
#include "tensor_table.h"

static const char ps__magic[8] = {'S', 'H', 'P', 'S', 'C', 'K', 'P', 'T'};

#define PS__HEADER_BYTES       (8 + 4 * 4 + 6 * 8)
#define PS__JOB_OFFSET         64
#define PS__CHUNK_HEADER_BYTES (6 * 8)
/* The packed tensor table's bytes at most: what a TABLE frame may carry. */
#define PS__MAX_TABLE_BYTES PS_TABLE_MAX_BYTES

static void ps__file_name(char *buf, size_t len, const char *dir, uint32_t server, uint64_t clock)
{
    snprintf(buf, len, "%s/server-%" PRIu32 "-clock-%012" PRIu64 ".ckpt", dir, server, clock);
}

/* The job a checkpoint file belongs to, from its header: 1 with *job set;
 * 2 for a checkpoint of an older format (its job cannot be told); 0 when it
 * cannot be one of any job, with what is wrong in why. */
static int ps__file_job(const char *path, uint64_t *job, char *why, size_t why_len)
{
    uint8_t h[PS__HEADER_BYTES];
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
                 PS__HEADER_BYTES);
        return 0;
    }
    if (memcmp(h, ps__magic, sizeof(ps__magic)) != 0) {
        snprintf(why, why_len, "not a shardps checkpoint (bad magic)");
        return 0;
    }
    memcpy(&version, h + 8, sizeof(version));
    if (version < PS_CHECKPOINT_FORMAT)
        return 2;
    if (version != PS_CHECKPOINT_FORMAT) {
        snprintf(why, why_len,
                 "format version %" PRIu32 ", which this build (version %d) cannot read", version,
                 PS_CHECKPOINT_FORMAT);
        return 0;
    }
    memcpy(job, h + PS__JOB_OFFSET, sizeof(*job));
    return 1;
}

/* Whether the file's CRC holds: another job's file is told from one whose
 * header was damaged (its job field too, perhaps) only by its checksum.
 * Streams the file in blocks; 1, or 0 with the reason in why. */
static int ps__crc_holds(const char *path, char *why, size_t why_len)
{
    uint8_t *blk = malloc(PS_CHECKPOINT_BLOCK_BYTES + 4);
    FILE *f = fopen(path, "rb");
    uint32_t crc = 0, want;
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
    memcpy(&want, blk, sizeof(want));
    ok = kept == 4 && crc == want;
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
    ps_crc_writer_put(&w, ps__magic, sizeof(ps__magic));
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
    {
        uint32_t crc = w.crc;
        ps_crc_writer_put(&w, &crc, sizeof(crc));
    }
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

static void ps__append(char *err, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void ps__append(char *err, size_t len, const char *fmt, ...)
{
    size_t used = strlen(err);
    va_list ap;

    if (used + 1 >= len)
        return;
    va_start(ap, fmt);
    vsnprintf(err + used, len - used, fmt, ap);
    va_end(ap);
}

static uint32_t ps__get32(const uint8_t *p)
{
    uint32_t v;
    memcpy(&v, p, sizeof(v));
    return v;
}

static uint64_t ps__get64(const uint8_t *p)
{
    uint64_t v;
    memcpy(&v, p, sizeof(v));
    return v;
}

/* What a file of this server must hold for a table, known before anything
 * is adopted: this server's chunks of the table's partition, in key order
 * (the shard's local order), each with the optimizer's state, and so the
 * file's exact size. */
typedef struct {
    ps_partition *part;
    const ps_chunk **chunk; /* this server's, borrowed from part */
    int n;
    size_t state_per_weight;
    size_t bytes;
} ps__layout;

static void ps__layout_free(ps__layout *l)
{
    free(l->chunk);
    ps_partition_free(l->part);
}

static int ps__layout_init(ps__layout *l, const ps_model_spec *spec, const ps_checkpoint_meta *meta,
                           size_t table_len)
{
    int rc;

    memset(l, 0, sizeof(*l));
    rc = ps_partition_init(&l->part, spec, (int)meta->num_servers, (size_t)meta->chunk_bytes);
    if (rc < 0)
        return rc;
    l->chunk = calloc((size_t)ps_partition_server_chunk_count(l->part, (int)meta->server_index) + 1,
                      sizeof(*l->chunk));
    if (l->chunk == NULL) {
        ps__layout_free(l);
        return -ENOMEM;
    }
    l->state_per_weight = meta->state_per_weight;
    l->bytes = PS__HEADER_BYTES + 4 + table_len + sizeof(uint32_t);
    for (int i = 0; i < ps_partition_chunk_count(l->part); i++) {
        const ps_chunk *c = ps_partition_chunk(l->part, i);
        if (c->server != (int)meta->server_index)
            continue;
        l->chunk[l->n++] = c;
        l->bytes += PS__CHUNK_HEADER_BYTES + c->numel * (1 + l->state_per_weight) * sizeof(float);
    }
    return 0;
}

/* Reads the fixed header and the tensor table of an open file into head
 * (PS__HEADER_BYTES + 4 + PS__MAX_TABLE_BYTES bytes) and checks that they
 * belong to this server and agree with each other. Writes the table into
 * spec and its packed length into table_len. Returns 0 or a negative code
 * with the reason in why. */
static int ps__read_identity(FILE *f, const ps_checkpoint_meta *meta, uint8_t *head,
                             ps_model_spec *spec, uint32_t *table_len, char *why, size_t why_len)
{
    Shardps__TensorTable *t;
    char reason[200];
    int rc;

    if (fread(head, 1, PS__HEADER_BYTES, f) != PS__HEADER_BYTES) {
        snprintf(why, why_len, "too short to be a checkpoint (truncated)");
        return -PS_EFORMAT;
    }
    if (memcmp(head, ps__magic, sizeof(ps__magic)) != 0) {
        snprintf(why, why_len, "not a shardps checkpoint (bad magic)");
        return -PS_EFORMAT;
    }
    if (ps__get32(head + 8) < PS_CHECKPOINT_FORMAT) {
        snprintf(why, why_len,
                 "format version %" PRIu32 ", written by an older build (%s); this build reads "
                 "version %d: restore it with the build that wrote it, or start the job afresh",
                 ps__get32(head + 8),
                 ps__get32(head + 8) == 4 ? "it holds no embedding rows"
                                          : "its tensor table is missing, or digested "
                                            "differently and limited to 64 KiB",
                 PS_CHECKPOINT_FORMAT);
        return -PS_EFORMAT;
    }
    if (ps__get32(head + 8) != PS_CHECKPOINT_FORMAT) {
        snprintf(why, why_len,
                 "format version %" PRIu32 ", newer than this build's (%d): restore it with "
                 "the build that wrote it",
                 ps__get32(head + 8), PS_CHECKPOINT_FORMAT);
        return -PS_EFORMAT;
    }
    /* The job first: another job's file is that job's, whatever else differs. */
    if (ps__get64(head + PS__JOB_OFFSET) != meta->job) {
        snprintf(why, why_len,
                 "belongs to another job (other job settings); start with the same options");
        return -PS_EMISMATCH;
    }
    if (ps__get32(head + 12) != meta->server_index || ps__get32(head + 16) != meta->num_servers) {
        snprintf(why, why_len,
                 "belongs to server %" PRIu32 " of %" PRIu32 ", this is %" PRIu32 " of %" PRIu32,
                 ps__get32(head + 12), ps__get32(head + 16), meta->server_index, meta->num_servers);
        return -PS_EMISMATCH;
    }
    if (ps__get32(head + 20) != meta->optimizer) {
        snprintf(why, why_len, "saved with another optimizer; restore with the same --optimizer");
        return -PS_EMISMATCH;
    }
    if (ps__get64(head + 32) != meta->chunk_bytes) {
        snprintf(why, why_len,
                 "saved with %" PRIu64 "-byte chunks; restore with the same "
                 "--chunk-bytes",
                 ps__get64(head + 32));
        return -PS_EMISMATCH;
    }
    if (fread(head + PS__HEADER_BYTES, 1, 4, f) != 4 ||
        (*table_len = ps__get32(head + PS__HEADER_BYTES)) > PS__MAX_TABLE_BYTES ||
        fread(head + PS__HEADER_BYTES + 4, 1, *table_len, f) != *table_len) {
        snprintf(why, why_len, "its tensor table is truncated or over %zu bytes",
                 PS__MAX_TABLE_BYTES);
        return -PS_EFORMAT;
    }
    t = ps_tensor_table_unpack(head + PS__HEADER_BYTES + 4, *table_len, reason, sizeof(reason));
    if (t == NULL) {
        snprintf(why, why_len, "its tensor table is corrupt: %s", reason);
        return -PS_EFORMAT;
    }
    rc = ps_tensor_table_from_wire(t, meta->max_table_bytes, spec, reason, sizeof(reason));
    shardps__tensor_table__free_unpacked(t, NULL);
    if (rc < 0) {
        snprintf(why, why_len, "its tensor table is refused: %s", reason);
        return -PS_EFORMAT;
    }
    /* The header's fingerprint doubles as the table's checksum, so a table is
     * trusted before the CRC over the whole file has been read. */
    if (ps_model_spec_fingerprint(spec) != ps__get64(head + 24)) {
        snprintf(why, why_len, "its tensor table does not match its fingerprint (corrupt)");
        return -PS_EFORMAT;
    }
    return 0;
}

/* The body after head (head_len bytes, already read and in the CRC), read
 * once to check it: every chunk header against the layout, the rows section
 * (rows_left bytes) against the table's row tables, and the CRC over the
 * whole file. Nothing is kept. A damaged file is called damaged (the CRC)
 * before its chunk layout or rows are judged. Returns 0 or a negative code
 * with the reason in why. */
static int ps__verify(FILE *f, const uint8_t *head, size_t head_len, const ps__layout *l,
                      const ps_model_spec *spec, uint64_t rows_left, uint8_t *blk, char *why,
                      size_t why_len)
{
    uint32_t crc = ps_crc32c(0, head, head_len), want;
    uint8_t ch[PS__CHUNK_HEADER_BYTES];
    char rows_why[256];
    int bad_chunk = -1, rows_rc;

    for (int i = 0; i < l->n; i++) {
        const ps_chunk *c = l->chunk[i];
        if (ps_checkpoint_stream(f, sizeof(ch), ch, NULL, &crc) < 0 ||
            ps_checkpoint_stream(f, c->numel * (1 + l->state_per_weight) * sizeof(float), NULL, blk,
                                 &crc) < 0)
            goto short_read;
        if (bad_chunk < 0 && (ps__get64(ch) != c->key || ps__get64(ch + 8) != c->numel ||
                              ps__get64(ch + 16) != c->numel * l->state_per_weight))
            bad_chunk = i;
    }
    rows_rc = ps_checkpoint_rows_verify(f, spec, rows_left, blk, &crc, rows_why, sizeof(rows_why));
    if (rows_rc == -EIO || fread(&want, 1, sizeof(want), f) != sizeof(want))
        goto short_read;
    if (crc != want) {
        snprintf(why, why_len, "checksum mismatch (the file is corrupt)");
        return -PS_EFORMAT;
    }
    if (bad_chunk >= 0) {
        snprintf(why, why_len, "chunk %d does not match this shard's layout", bad_chunk);
        return -PS_EMISMATCH;
    }
    if (rows_rc < 0)
        snprintf(why, why_len, "%s", rows_why);
    return rows_rc;
short_read:
    snprintf(why, why_len, "short read (the file shrank while it was read)");
    return -PS_EFORMAT;
}

/* The verified body, read again straight into the shard and row stores
 * adopted for it, with its clocks; the CRC is taken again, so a file that
 * changed since it was verified is caught (the caller then withdraws the
 * table). */
static int ps__copy(FILE *f, const uint8_t *head, size_t head_len, ps_shard *shard,
                    ps_checkpoint_clocks *clocks, ps_checkpoint_rows *rows, char *why,
                    size_t why_len)
{
    uint32_t crc = ps_crc32c(0, head, head_len), want;
    uint8_t ch[PS__CHUNK_HEADER_BYTES];
    int rc;

    if (fseek(f, (long)head_len, SEEK_SET) != 0)
        goto changed;
    for (int i = 0; i < ps_shard_chunk_count(shard); i++) {
        size_t numel = ps_shard_chunk(shard, i)->numel, state_n = ps_shard_state_floats(shard, i);
        if (ps_checkpoint_stream(f, sizeof(ch), ch, NULL, &crc) < 0 ||
            ps_checkpoint_stream(f, numel * sizeof(float),
                                 (uint8_t *)ps_shard_weights_mut(shard, i), NULL, &crc) < 0 ||
            (state_n &&
             ps_checkpoint_stream(f, state_n * sizeof(float),
                                  (uint8_t *)ps_shard_state_mut(shard, i), NULL, &crc) < 0))
            goto changed;
        clocks->clock[i] = ps__get64(ch + 24);
        clocks->newest[i] = ps__get64(ch + 32);
        ps_shard_set_updates(shard, i, ps__get64(ch + 40));
    }
    rc = ps_checkpoint_rows_copy(f, rows, &crc, why, why_len);
    if (rc < 0)
        return rc;
    if (fread(&want, 1, sizeof(want), f) == sizeof(want) && want == crc)
        return 0;
changed:
    snprintf(why, why_len, "the file changed while it was read");
    return -PS_EFORMAT;
}

/* Reads and checks one file completely (identity, table, the size its
 * table's shard needs, every chunk header, the CRC), and only then asks the
 * sink to adopt its table and copies the body into the shard it gives. A
 * file refused at any step leaves nothing adopted. Returns 0 or a negative
 * code with the reason in why. */
static int ps__load_one(const char *file, ps_checkpoint_meta *meta, const ps_checkpoint_sink *sink,
                        ps_checkpoint_clocks *clocks, ps_checkpoint_rows *rows, char *why,
                        size_t why_len)
{
    size_t head_len;
    int rc, adopted = 0;
    uint8_t *blk = NULL, *head = NULL;
    uint32_t table_len = 0;
    ps_model_spec spec = {0};
    ps__layout l = {0};
    ps_shard *shard;
    struct stat st;
    FILE *f = fopen(file, "rb");

    if (f == NULL) {
        snprintf(why, why_len, "cannot open: %s", strerror(errno));
        return -errno;
    }
    head = malloc(PS__HEADER_BYTES + 4 + PS__MAX_TABLE_BYTES);
    blk = malloc(PS_CHECKPOINT_BLOCK_BYTES);
    if (head == NULL || blk == NULL) {
        rc = -ENOMEM;
        snprintf(why, why_len, "out of memory");
        goto out;
    }
    /* Identity first, from the header and table alone, so a file of another
     * job is reported as such rather than as the wrong size. */
    rc = ps__read_identity(f, meta, head, &spec, &table_len, why, why_len);
    if (rc < 0)
        goto out;
    head_len = PS__HEADER_BYTES + 4 + table_len;
    rc = ps__layout_init(&l, &spec, meta, table_len);
    if (rc < 0) {
        snprintf(why, why_len, "cannot cut its tensors into %" PRIu64 "-byte chunks: %s",
                 meta->chunk_bytes, ps_strerror(rc));
        goto out;
    }
    rc = -PS_EMISMATCH;
    if (ps__get64(head + 56) != (uint64_t)l.n) {
        snprintf(why, why_len, "holds %" PRIu64 " chunks where its table's shard has %d",
                 ps__get64(head + 56), l.n);
        goto out;
    }
    rc = -PS_EFORMAT;
    /* The chunks take l.bytes, the rows section the rest (4 bytes at least). */
    if (fstat(fileno(f), &st) < 0 || (size_t)st.st_size < l.bytes + 4) {
        snprintf(why, why_len, "%lld bytes where its table's shard needs at least %zu (truncated)",
                 (long long)st.st_size, l.bytes + 4);
        goto out;
    }
    rc =
        ps__verify(f, head, head_len, &l, &spec, (uint64_t)st.st_size - l.bytes, blk, why, why_len);
    if (rc < 0)
        goto out;
    /* Every check passed: only now is the table adopted and the shard
     * touched. */
    rc = -PS_EMISMATCH;
    memset(rows, 0, sizeof(*rows));
    shard = sink->adopt(sink->arg, &spec, clocks, rows, why, why_len);
    if (shard == NULL)
        goto out;
    adopted = 1;
    rc = -PS_EMISMATCH;
    if (rows->n != spec.n_row_tables) {
        snprintf(why, why_len, "this server holds %d row tables where the file has %d", rows->n,
                 spec.n_row_tables);
        goto out;
    }
    rc = ps__copy(f, head, head_len, shard, clocks, rows, why, why_len);
    if (rc < 0)
        goto out;
    meta->clock = ps__get64(head + 40);
    if (ps__get64(head + 48) > meta->total_steps)
        meta->total_steps = ps__get64(head + 48);
    adopted = 0;
out:
    if (adopted)
        sink->withdraw(sink->arg);
    ps__layout_free(&l);
    ps_model_spec_free(&spec);
    free(blk);
    free(head);
    fclose(f);
    return rc;
}

int ps_checkpoint_restore(const char *dir, uint64_t max_clock, ps_checkpoint_meta *meta,
                          const ps_checkpoint_sink *sink, ps_checkpoint_clocks *clocks,
                          ps_checkpoint_rows *rows, char *path, size_t path_len, char *err,
                          size_t err_len)
{
    uint64_t *found = NULL;
    int n = ps__list(dir, meta->server_index, meta->job, 1, &found, NULL), rc = -ENOENT;

    err[0] = '\0';
    if (n < 0) {
        ps__append(err, err_len, "%s: %s; ", dir, strerror(-n));
        return n;
    }
    for (int i = 0; i < n; i++) {
        char file[4096], why[256];
        if (found[i] > max_clock)
            continue;
        ps__file_name(file, sizeof(file), dir, meta->server_index, found[i]);
        rc = ps__load_one(file, meta, sink, clocks, rows, why, sizeof(why));
        if (rc == 0) {
            snprintf(path, path_len, "%s", file);
            break;
        }
        ps__append(err, err_len, "%s: %s; ", file, why);
    }
    free(found);
    return n == 0 ? -ENOENT : rc;
}
