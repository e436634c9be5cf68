/* One checkpoint file read for a restore (see checkpoint_file.h). The
 * header and the tensor table are checked first, then the file's size
 * against what its server's share of that table needs under the file's
 * own plan (computed from the partition, nothing allocated for the file's
 * sake; the rows section, server/durability/checkpoint_rows, takes the rest), then the
 * body is streamed once through the CRC, and only after the caller has
 * adopted the table is it read again into the shard and row stores. */
#include "checkpoint_file.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "consistency.h"
#include "crc32c.h"
#include "partition.h"
#include "ps_error.h"
#include "tensor_table.h"
#include "le_bytes.h"

#define PS__CHUNK_HEADER_BYTES (6 * 8)
/* The packed tensor table's bytes at most: what a TABLE frame may carry. */
#define PS__MAX_TABLE_BYTES PS_TABLE_MAX_BYTES

struct ps_checkpoint_file {
    FILE *f;
    uint8_t *head; /* header and packed table */
    size_t head_len;
    uint8_t *blk; /* PS_CHECKPOINT_BLOCK_BYTES */
    uint64_t size;
    ps_model_spec spec;
    ps_checkpoint_plan plan;
    /* The file's server's chunks of the table's partition under the file's
     * plan, in key order (borrowed from part), each with the optimizer's
     * state; the bytes they and the header take. */
    ps_partition *part;
    const ps_chunk **chunk;
    int n;
    size_t state_per_weight;
    uint64_t bytes;
    /* What its clocks are held to besides its own clock: the job's mode and
     * clock lead (meta's). */
    uint32_t staleness;
    uint64_t clock_lead;
};

void ps_checkpoint_file_close(ps_checkpoint_file *cf)
{
    if (cf == NULL)
        return;
    if (cf->f)
        fclose(cf->f);
    free(cf->chunk);
    ps_partition_free(cf->part);
    ps_model_spec_free(&cf->spec);
    free(cf->head);
    free(cf->blk);
    free(cf);
}

const ps_model_spec *ps_checkpoint_file_table(const ps_checkpoint_file *cf)
{
    return &cf->spec;
}

void ps_checkpoint_file_plan(const ps_checkpoint_file *cf, ps_checkpoint_plan *out)
{
    *out = cf->plan;
}

/* The fixed header: magic, format, job, optimizer, and a plan this build
 * can cut the table by (its server among its servers). */
static int ps__check_header(ps_checkpoint_file *cf, uint32_t server, const ps_checkpoint_meta *meta,
                            char *why, size_t why_len)
{
    const uint8_t *h = cf->head;
    uint32_t version = ps_le_get32(h + 8);

    if (memcmp(h, PS_CHECKPOINT_MAGIC, 8) != 0)
        return ps_err_printf(why, why_len, -PS_EFORMAT, "not a shardps checkpoint (bad magic)");
    if (version < PS_CHECKPOINT_FORMAT)
        return ps_err_printf(
            why, why_len, -PS_EFORMAT,
            "format version %" PRIu32 ", written by an older build (%s); this build reads "
            "version %d: restore it with the build that wrote it, or start the job afresh",
            version,
            version == 5   ? "it holds no counts of its embedding rows (created, admitted, "
                             "evicted), which a restore would start from 0 again"
            : version == 4 ? "it holds no embedding rows, and its identity includes the number of "
                             "servers and the chunk size"
                           : "its tensor table is missing, or digested differently and limited to "
                             "64 KiB",
            PS_CHECKPOINT_FORMAT);
    if (version != PS_CHECKPOINT_FORMAT)
        return ps_err_printf(why, why_len, -PS_EFORMAT,
                             "format version %" PRIu32 ", newer than this build's (%d): restore "
                             "it with the build that wrote it",
                             version, PS_CHECKPOINT_FORMAT);
    /* The job first: another job's file is that job's, whatever else differs. */
    if (ps_le_get64(h + PS_CHECKPOINT_JOB_OFFSET) != meta->job)
        return ps_err_printf(why, why_len, -PS_EMISMATCH,
                             "belongs to another job (other job settings); start with the same "
                             "options");
    if (ps_le_get32(h + 20) != meta->optimizer)
        return ps_err_printf(why, why_len, -PS_EMISMATCH,
                             "saved with another optimizer; restore with the same --optimizer");
    cf->plan.server_index = ps_le_get32(h + 12);
    cf->plan.num_servers = ps_le_get32(h + 16);
    cf->plan.chunk_bytes = ps_le_get64(h + 32);
    cf->plan.clock = ps_le_get64(h + 40);
    cf->plan.total_steps = ps_le_get64(h + 48);
    if (cf->plan.server_index != server || cf->plan.num_servers < 1 ||
        cf->plan.num_servers > 4096 || server >= cf->plan.num_servers || cf->plan.chunk_bytes < 4 ||
        cf->plan.chunk_bytes > ((uint64_t)1 << 40))
        return ps_err_printf(why, why_len, -PS_EFORMAT,
                             "says it is server %" PRIu32 " of %" PRIu32 " with %" PRIu64
                             "-byte chunks, which cannot be this file of server %" PRIu32,
                             cf->plan.server_index, cf->plan.num_servers, cf->plan.chunk_bytes,
                             server);
    return 0;
}

/* The packed table after the header, into spec. */
static int ps__read_table(ps_checkpoint_file *cf, const ps_checkpoint_meta *meta, char *why,
                          size_t why_len)
{
    uint8_t *t_at = cf->head + PS_CHECKPOINT_HEADER_BYTES + 4;
    Shardps__TensorTable *t;
    char reason[200];
    uint32_t len;
    int rc;

    if (fread(cf->head + PS_CHECKPOINT_HEADER_BYTES, 1, 4, cf->f) != 4 ||
        (len = ps_le_get32(cf->head + PS_CHECKPOINT_HEADER_BYTES)) > PS__MAX_TABLE_BYTES ||
        fread(t_at, 1, len, cf->f) != len)
        return ps_err_printf(why, why_len, -PS_EFORMAT,
                             "its tensor table is truncated or over %zu bytes",
                             PS__MAX_TABLE_BYTES);
    cf->head_len = PS_CHECKPOINT_HEADER_BYTES + 4 + len;
    t = ps_tensor_table_unpack(t_at, len, reason, sizeof(reason));
    if (t == NULL)
        return ps_err_printf(why, why_len, -PS_EFORMAT, "its tensor table is corrupt: %s", reason);
    rc = ps_tensor_table_from_wire(t, meta->max_table_bytes, &cf->spec, reason, sizeof(reason));
    shardps__tensor_table__free_unpacked(t, NULL);
    if (rc < 0)
        return ps_err_printf(why, why_len, -PS_EFORMAT, "its tensor table is refused: %s", reason);
    /* The header's fingerprint doubles as the table's checksum, so a table is
     * trusted before the CRC over the whole file has been read. */
    if (ps_model_spec_fingerprint(&cf->spec) != ps_le_get64(cf->head + 24))
        return ps_err_printf(why, why_len, -PS_EFORMAT,
                             "its tensor table does not match its fingerprint (corrupt)");
    return 0;
}

/* The file's chunks under its plan, and the bytes they and the header
 * take. The plan's chunk count is bounded by the file's size first, so a
 * header naming tiny chunks of a large table allocates nothing large. */
static int ps__checkpoint_file_layout(ps_checkpoint_file *cf, const ps_checkpoint_meta *meta,
                                      char *why, size_t why_len)
{
    uint64_t elems = cf->plan.chunk_bytes / 4, most;
    int rc;

    most = (uint64_t)cf->spec.n_tensors + cf->spec.total_words / elems;
    if (most > (uint64_t)cf->plan.num_servers * (cf->size / PS__CHUNK_HEADER_BYTES + 1))
        return ps_err_printf(why, why_len, -PS_EFORMAT,
                             "%" PRIu64 " bytes cannot hold a share of its table in %" PRIu64
                             "-byte chunks (truncated)",
                             cf->size, cf->plan.chunk_bytes);
    rc = ps_partition_init(&cf->part, &cf->spec, (int)cf->plan.num_servers,
                           (size_t)cf->plan.chunk_bytes);
    if (rc < 0)
        return ps_err_printf(why, why_len, rc,
                             "cannot cut its tensors into %" PRIu64 "-byte chunks: %s",
                             cf->plan.chunk_bytes, ps_strerror(rc));
    cf->chunk =
        calloc((size_t)ps_partition_server_chunk_count(cf->part, (int)cf->plan.server_index) + 1,
               sizeof(*cf->chunk));
    if (cf->chunk == NULL)
        return ps_err_printf(why, why_len, -ENOMEM, "out of memory");
    cf->state_per_weight = meta->state_per_weight;
    cf->staleness = meta->staleness;
    cf->clock_lead = meta->clock_lead;
    cf->bytes = cf->head_len + sizeof(uint32_t);
    for (int i = 0; i < ps_partition_chunk_count(cf->part); i++) {
        const ps_chunk *c = ps_partition_chunk(cf->part, i);
        if (c->server != (int)cf->plan.server_index)
            continue;
        cf->chunk[cf->n++] = c;
        cf->bytes += PS__CHUNK_HEADER_BYTES + c->numel * (1 + cf->state_per_weight) * sizeof(float);
    }
    if (ps_le_get64(cf->head + 56) != (uint64_t)cf->n)
        return ps_err_printf(why, why_len, -PS_EMISMATCH,
                             "holds %" PRIu64 " chunks where its table's shard has %d",
                             ps_le_get64(cf->head + 56), cf->n);
    /* The chunks take bytes, the rows section the rest (4 bytes at least). */
    if (cf->size < cf->bytes + 4)
        return ps_err_printf(why, why_len, -PS_EFORMAT,
                             "%" PRIu64 " bytes where its table's shard needs at least %" PRIu64
                             " (truncated)",
                             cf->size, cf->bytes + 4);
    return 0;
}

int ps_checkpoint_file_open(ps_checkpoint_file **out, const char *path, uint32_t server,
                            const ps_checkpoint_meta *meta, char *why, size_t why_len)
{
    ps_checkpoint_file *cf = calloc(1, sizeof(*cf));
    struct stat st;
    int rc;

    *out = NULL;
    if (cf == NULL)
        return ps_err_printf(why, why_len, -ENOMEM, "out of memory");
    cf->f = fopen(path, "rb");
    if (cf->f == NULL) {
        rc = ps_err_printf(why, why_len, -errno, "cannot open: %s", strerror(errno));
        goto fail;
    }
    cf->head = malloc(PS_CHECKPOINT_HEADER_BYTES + 4 + PS__MAX_TABLE_BYTES);
    cf->blk = malloc(PS_CHECKPOINT_BLOCK_BYTES);
    if (cf->head == NULL || cf->blk == NULL) {
        rc = ps_err_printf(why, why_len, -ENOMEM, "out of memory");
        goto fail;
    }
    if (fstat(fileno(cf->f), &st) < 0) {
        rc = ps_err_printf(why, why_len, -errno, "cannot stat: %s", strerror(errno));
        goto fail;
    }
    cf->size = (uint64_t)st.st_size;
    /* Identity first, from the header and table alone, so a file of another
     * job is reported as such rather than as the wrong size. */
    if (fread(cf->head, 1, PS_CHECKPOINT_HEADER_BYTES, cf->f) != PS_CHECKPOINT_HEADER_BYTES) {
        rc = ps_err_printf(why, why_len, -PS_EFORMAT, "too short to be a checkpoint (truncated)");
        goto fail;
    }
    if ((rc = ps__check_header(cf, server, meta, why, why_len)) < 0 ||
        (rc = ps__read_table(cf, meta, why, why_len)) < 0 ||
        (rc = ps__checkpoint_file_layout(cf, meta, why, why_len)) < 0)
        goto fail;
    *out = cf;
    return 0;
fail:
    ps_checkpoint_file_close(cf);
    return rc;
}

/* The stored CRC32C at the end of the file, little-endian. Returns 0, or
 * -1 on a short read. */
static int ps__read_crc(FILE *f, uint32_t *want)
{
    uint8_t b[4];

    if (fread(b, 1, sizeof(b), f) != sizeof(b))
        return -1;
    *want = ps_le_get32(b);
    return 0;
}

/* What the file's rows section is held to. */
static void ps__rows_rule(const ps_checkpoint_file *cf, ps_checkpoint_rows_rule *rule)
{
    *rule = (ps_checkpoint_rows_rule){.clock = cf->plan.clock,
                                      .lead = cf->clock_lead,
                                      .staleness = cf->staleness,
                                      .server = cf->plan.server_index,
                                      .servers = cf->plan.num_servers};
}

/* A chunk header's clocks against the file's own clock (consistency.h):
 * 0, or -PS_EFORMAT with the reason in why. */
static int ps__chunk_clocks(const ps_checkpoint_file *cf, const ps_chunk *c, const uint8_t *ch,
                            char *why, size_t why_len)
{
    const ps_tensor_spec *t = &cf->spec.tensors[c->tensor_id];
    char reason[200];
    int rc = ps_consistency_saved_clocks(
        cf->staleness, cf->clock_lead, cf->plan.clock,
        t->kind == PS_KIND_PARAMETER ? PS_SAVED_PARAMETER : PS_SAVED_STATIC, ps_le_get64(ch + 24),
        ps_le_get64(ch + 32), reason, sizeof(reason));

    if (rc < 0)
        ps_err_printf(why, why_len, rc, "chunk %" PRIu32 " of tensor %s: %s", c->chunk_index,
                      t->name, reason);
    return rc;
}

int ps_checkpoint_file_verify(ps_checkpoint_file *cf, char *why, size_t why_len)
{
    uint32_t crc = ps_crc32c(0, cf->head, cf->head_len), want;
    uint8_t ch[PS__CHUNK_HEADER_BYTES];
    ps_checkpoint_rows_rule rule;
    char rows_why[256], clock_why[320];
    int bad_chunk = -1, bad_clock = 0, rows_rc;

    ps__rows_rule(cf, &rule);
    if (fseek(cf->f, (long)cf->head_len, SEEK_SET) != 0)
        goto short_read;
    for (int i = 0; i < cf->n; i++) {
        const ps_chunk *c = cf->chunk[i];
        if (ps_checkpoint_stream(cf->f, sizeof(ch), ch, NULL, &crc) < 0 ||
            ps_checkpoint_stream(cf->f, c->numel * (1 + cf->state_per_weight) * sizeof(float), NULL,
                                 cf->blk, &crc) < 0)
            goto short_read;
        if (bad_chunk < 0 && (ps_le_get64(ch) != c->key || ps_le_get64(ch + 8) != c->numel ||
                              ps_le_get64(ch + 16) != c->numel * cf->state_per_weight))
            bad_chunk = i;
        if (bad_clock == 0)
            bad_clock = ps__chunk_clocks(cf, c, ch, clock_why, sizeof(clock_why));
    }
    rows_rc = ps_checkpoint_rows_verify(cf->f, &cf->spec, &rule, cf->size - cf->bytes, cf->blk,
                                        &crc, rows_why, sizeof(rows_why));
    if (rows_rc == -ENOMEM)
        return ps_err_printf(why, why_len, rows_rc, "out of memory for one of its rows");
    if (rows_rc == -EIO || ps__read_crc(cf->f, &want) < 0)
        goto short_read;
    if (crc != want)
        return ps_err_printf(why, why_len, -PS_EFORMAT, "checksum mismatch (the file is corrupt)");
    if (bad_chunk >= 0)
        return ps_err_printf(why, why_len, -PS_EMISMATCH,
                             "chunk %d does not match this shard's layout", bad_chunk);
    if (bad_clock < 0)
        return ps_err_printf(why, why_len, bad_clock, "%s", clock_why);
    if (rows_rc < 0)
        snprintf(why, why_len, "%s", rows_why);
    return rows_rc;
short_read:
    return ps_err_printf(why, why_len, -PS_EFORMAT,
                         "short read (the file shrank while it was read)");
}

/* The file's chunk c (its weights and state in buf, k state floats a
 * weight) into the parts of the shard's chunks it overlaps, with its
 * clocks and update count where it holds a chunk's first word. */
static void ps__scatter(ps_shard *shard, const ps_chunk *c, const float *buf, size_t k,
                        const uint8_t *ch, ps_checkpoint_clocks *clocks)
{
    for (int j = 0; j < ps_shard_chunk_count(shard); j++) {
        const ps_chunk *d = ps_shard_chunk(shard, j);
        size_t lo, hi;
        if (d->tensor_id != c->tensor_id || d->offset >= c->offset + c->numel ||
            c->offset >= d->offset + d->numel)
            continue;
        lo = d->offset > c->offset ? d->offset : c->offset;
        hi = d->offset + d->numel < c->offset + c->numel ? d->offset + d->numel
                                                         : c->offset + c->numel;
        memcpy(ps_shard_weights_mut(shard, j) + (lo - d->offset), buf + (lo - c->offset),
               (hi - lo) * sizeof(float));
        if (k && ps_shard_state_floats(shard, j))
            memcpy(ps_shard_state_mut(shard, j) + k * (lo - d->offset),
                   buf + c->numel + k * (lo - c->offset), k * (hi - lo) * sizeof(float));
        if (lo == d->offset) {
            clocks->clock[j] = ps_le_get64(ch + 24);
            clocks->newest[j] = ps_le_get64(ch + 32);
            ps_shard_set_updates(shard, j, ps_le_get64(ch + 40));
        }
    }
}

/* The chunks of the file into another plan's shard, one at a time. */
static int ps__copy_replaced(ps_checkpoint_file *cf, ps_shard *shard, ps_checkpoint_clocks *clocks,
                             uint32_t *crc)
{
    uint8_t ch[PS__CHUNK_HEADER_BYTES];
    size_t most = 0, k = cf->state_per_weight;
    float *buf;
    int rc = 0;

    for (int i = 0; i < cf->n; i++)
        most = cf->chunk[i]->numel > most ? cf->chunk[i]->numel : most;
    buf = malloc((most * (1 + k) + 1) * sizeof(float));
    if (buf == NULL)
        return -ENOMEM;
    for (int i = 0; i < cf->n && rc == 0; i++) {
        const ps_chunk *c = cf->chunk[i];
        if (ps_checkpoint_stream(cf->f, sizeof(ch), ch, NULL, crc) < 0 ||
            ps_checkpoint_stream(cf->f, c->numel * (1 + k) * sizeof(float), (uint8_t *)buf, NULL,
                                 crc) < 0)
            rc = -PS_EFORMAT;
        else
            ps__scatter(shard, c, buf, k, ch, clocks);
    }
    free(buf);
    return rc;
}

/* The chunks of the file into the shard of its own plan: chunk i is local
 * chunk i. */
static int ps__copy_same(ps_checkpoint_file *cf, ps_shard *shard, ps_checkpoint_clocks *clocks,
                         uint32_t *crc)
{
    uint8_t ch[PS__CHUNK_HEADER_BYTES];

    for (int i = 0; i < ps_shard_chunk_count(shard); i++) {
        size_t numel = ps_shard_chunk(shard, i)->numel, state_n = ps_shard_state_floats(shard, i);
        if (ps_checkpoint_stream(cf->f, sizeof(ch), ch, NULL, crc) < 0 ||
            ps_checkpoint_stream(cf->f, numel * sizeof(float),
                                 (uint8_t *)ps_shard_weights_mut(shard, i), NULL, crc) < 0 ||
            (state_n &&
             ps_checkpoint_stream(cf->f, state_n * sizeof(float),
                                  (uint8_t *)ps_shard_state_mut(shard, i), NULL, crc) < 0))
            return -PS_EFORMAT;
        clocks->clock[i] = ps_le_get64(ch + 24);
        clocks->newest[i] = ps_le_get64(ch + 32);
        ps_shard_set_updates(shard, i, ps_le_get64(ch + 40));
    }
    return 0;
}

int ps_checkpoint_file_copy(ps_checkpoint_file *cf, ps_shard *shard, ps_checkpoint_clocks *clocks,
                            ps_checkpoint_rows *rows, int first, const ps_checkpoint_keep *keep,
                            char *why, size_t why_len)
{
    static const ps_checkpoint_keep all = {0, 0};
    uint32_t crc = ps_crc32c(0, cf->head, cf->head_len), want;
    ps_checkpoint_rows_rule rule;
    int rc;

    ps__rows_rule(cf, &rule);
    if (fseek(cf->f, (long)cf->head_len, SEEK_SET) != 0)
        goto changed;
    if (keep == NULL && ps_shard_chunk_count(shard) != cf->n)
        return ps_err_printf(why, why_len, -PS_EMISMATCH,
                             "holds %d chunks where this server's shard has %d", cf->n,
                             ps_shard_chunk_count(shard));
    rc = keep ? ps__copy_replaced(cf, shard, clocks, &crc) : ps__copy_same(cf, shard, clocks, &crc);
    if (rc == -ENOMEM)
        return ps_err_printf(why, why_len, rc, "out of memory");
    if (rc < 0)
        goto changed;
    rc = ps_checkpoint_rows_copy(
        cf->f, rows, first, keep ? keep : &all, &rule,
        ps_checkpoint_rows_counted(cf->plan.server_index, cf->plan.num_servers, keep), &crc, why,
        why_len);
    if (rc < 0)
        return rc;
    if (ps__read_crc(cf->f, &want) == 0 && want == crc)
        return 0;
changed:
    return ps_err_printf(why, why_len, -PS_EFORMAT, "the file changed while it was read");
}
