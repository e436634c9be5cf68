/* The rows section of a checkpoint (see checkpoint_rows.h). */
#include "checkpoint_rows.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "consistency.h"
#include "crc32c.h"
#include "ps_error.h"
#include "row_admit.h"
#include "row_place.h"
#include "le_bytes.h"

/* u32 index, dim, state floats; u64 clock, newest, 6 counters, sketch
 * bytes; where the counters and the sketch's length lie in it */
#define PS__TABLE_HEADER 84u
#define PS__AT_COUNTERS  28
#define PS__AT_SKETCH    76
/* u64 ID, u32 last step, u32 updates */
#define PS__ROW_HEADER 16u
/* Rows visited per call while writing. */
#define PS__VISIT_BATCH 4096

int ps_checkpoint_stream(FILE *f, size_t n, uint8_t *dst, uint8_t *blk, uint32_t *crc)
{
    while (n > 0) {
        size_t take = dst ? n : n < PS_CHECKPOINT_BLOCK_BYTES ? n : PS_CHECKPOINT_BLOCK_BYTES;
        uint8_t *at = dst ? dst : blk;
        if (fread(at, 1, take, f) != take)
            return -1;
        *crc = ps_crc32c(*crc, at, take);
        n -= take;
        if (dst)
            dst += take;
    }
    return 0;
}

/* Rows are staged in a block and written a block at a time: one fwrite
 * and one CRC call per block. Each row's record (header, values, state) is
 * already the file's form, so staging it is one copy. (Five small writes
 * a row through stdio made a rows checkpoint twice as slow per byte as a
 * dense one; writev of the records in place, 256 at a time, 1.3 times;
 * runs of records written from the slabs, with or without stdio's 1 MiB
 * buffer, no measurable gain: docs/performance.md.) */
typedef struct {
    ps_crc_writer *w;
    size_t rec;   /* bytes of a row in the file */
    uint8_t *buf; /* PS_CHECKPOINT_BLOCK_BYTES and a row */
    size_t used;
    uint64_t rows; /* written */
} ps__row_writer;

static void ps__flush_rows(ps__row_writer *rw)
{
    ps_crc_writer_put(rw->w, rw->buf, rw->used);
    rw->used = 0;
}

static int ps__write_row(void *arg, const ps_row_view *row)
{
    ps__row_writer *rw = arg;
    uint8_t *at;

    if (rw->used + rw->rec > PS_CHECKPOINT_BLOCK_BYTES)
        ps__flush_rows(rw);
    at = rw->buf + rw->used;
    memcpy(at, row->record, rw->rec);
    /* The store's header is in host order; the file's is little-endian. */
    ps_le_put64(at, row->id);
    ps_le_put32(at + 8, row->last_step);
    ps_le_put32(at + 12, row->updates);
    rw->used += rw->rec;
    rw->rows++;
    return rw->w->err;
}

/* Every stored row of one store, in visit order, after their count: the
 * store's count of rows held, which a visit at step 0 (nothing counts as
 * expired) walks exactly; checked after. The block has room for one row
 * more than PS_CHECKPOINT_BLOCK_BYTES, so any row fits after a flush. */
static int ps__write_table(ps_crc_writer *w, const ps_row_store *st, size_t dim)
{
    ps__row_writer rw = {
        .w = w, .rec = PS__ROW_HEADER + (dim + ps_row_store_state_floats(st)) * sizeof(float)};
    ps_row_counters c;
    uint64_t cursor = 0;
    int more;

    rw.buf = malloc(PS_CHECKPOINT_BLOCK_BYTES + rw.rec);
    if (rw.buf == NULL)
        return -ENOMEM;
    ps_row_store_counters(st, &c);
    ps_crc_writer_put64(w, c.stored);
    while ((more = ps_row_store_visit(st, 0, &cursor, PS__VISIT_BATCH, ps__write_row, &rw)) == 1)
        ;
    ps__flush_rows(&rw);
    free(rw.buf);
    if (more == 0 && rw.rows != c.stored)
        more = -EIO;
    return more < 0 ? more : w->err;
}

int ps_checkpoint_rows_write(ps_crc_writer *w, const ps_checkpoint_rows *rows)
{
    int n = rows ? rows->n : 0, rc;

    ps_crc_writer_put32(w, (uint32_t)n);
    for (int i = 0; i < n; i++) {
        const ps_row_store *st = rows->store[i];
        const ps_row_admit *sketch = ps_row_store_admission(st);
        size_t dim = rows->dim[i];
        ps_row_counters c;

        ps_crc_writer_put32(w, (uint32_t)i);
        ps_crc_writer_put32(w, (uint32_t)dim);
        ps_crc_writer_put32(w, (uint32_t)ps_row_store_state_floats(st));
        ps_row_store_counters(st, &c);
        ps_crc_writer_put64(w, rows->clock[i]);
        ps_crc_writer_put64(w, rows->newest[i]);
        ps_crc_writer_put64(w, c.created);
        ps_crc_writer_put64(w, c.admitted);
        ps_crc_writer_put64(w, c.filtered);
        ps_crc_writer_put64(w, c.evicted);
        ps_crc_writer_put64(w, c.expired);
        ps_crc_writer_put64(w, c.refused);
        ps_crc_writer_put64(w, sketch ? ps_row_admit_saved_size(sketch) : 0);
        if (sketch) {
            size_t len = ps_row_admit_saved_size(sketch);
            uint8_t *buf = malloc(len);
            if (buf == NULL)
                return -ENOMEM;
            ps_row_admit_save(sketch, buf, len);
            ps_crc_writer_put(w, buf, len);
            free(buf);
        }
        rc = ps__write_table(w, st, dim);
        if (rc < 0)
            return rc;
    }
    return w->err;
}

/* The rest of the section through the CRC, after a structural fault: the
 * caller tells a damaged file (its CRC) from a wrong one. */
static int ps__skip(FILE *f, uint64_t left, uint8_t *blk, uint32_t *crc, int rc)
{
    return ps_checkpoint_stream(f, (size_t)left, NULL, blk, crc) < 0 ? -EIO : rc;
}

/* Whether n floats are all finite: a store refuses any other row. */
static int ps__rows_section_finite(const float *v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!isfinite(v[i]))
            return 0;
    return 1;
}

/* Streams one table's rows (rows records of rec bytes, dim values and
 * state floats each) through the CRC a block at a time (a record larger
 * than a block on its own), judging each as a store would take it; the
 * first fault goes into *fault and why, and the rest is still read.
 * Returns 0, -EIO on a short read, or -ENOMEM. */
static int ps__rows_section_records(FILE *f, const ps_row_table_spec *t, uint64_t rows, size_t rec,
                                    uint64_t newest, uint8_t *blk, uint32_t *crc, int *fault,
                                    char *why, size_t why_len)
{
    size_t per = rec <= PS_CHECKPOINT_BLOCK_BYTES ? PS_CHECKPOINT_BLOCK_BYTES / rec : 1;
    size_t floats = (rec - PS__ROW_HEADER) / sizeof(float);
    uint8_t *buf = rec <= PS_CHECKPOINT_BLOCK_BYTES ? blk : malloc(rec);
    int rc = 0;

    if (buf == NULL)
        return -ENOMEM;
    for (uint64_t r = 0; r < rows && rc == 0; r += per) {
        size_t k = rows - r < per ? (size_t)(rows - r) : per;
        if (ps_checkpoint_stream(f, k * rec, buf, NULL, crc) < 0) {
            rc = -EIO;
            break;
        }
        for (size_t i = 0; i < k && *fault == 0; i++) {
            const uint8_t *at = buf + i * rec;
            uint32_t last = ps_le_get32(at + 8);
            if (last > PS_ROW_MAX_STEP || last >= newest)
                *fault = ps_err_printf(why, why_len, -PS_EFORMAT,
                                       "row table %s: row %" PRIu64 " last updated at step %" PRIu32
                                       ", where the table's newest step is %" PRIu64,
                                       t->name, ps_le_get64(at), last, newest ? newest - 1 : 0);
            else if (!ps__rows_section_finite((const float *)(at + PS__ROW_HEADER), floats))
                *fault = ps_err_printf(why, why_len, -PS_EFORMAT,
                                       "row table %s: row %" PRIu64
                                       " holds a value or a state that is not finite",
                                       t->name, ps_le_get64(at));
        }
    }
    if (buf != blk)
        free(buf);
    return rc;
}

int ps_checkpoint_rows_verify(FILE *f, const ps_model_spec *table,
                              const ps_checkpoint_rows_rule *rule, uint64_t left, uint8_t *blk,
                              uint32_t *crc, char *why, size_t why_len)
{
    uint8_t h[PS__TABLE_HEADER];
    char reason[200];
    uint32_t n;
    int fault = 0, rc;

    if (left < 4)
        return ps__skip(f, left, blk, crc,
                        ps_err_printf(why, why_len, -PS_EFORMAT, "its rows section is missing"));
    if (ps_checkpoint_stream(f, 4, h, NULL, crc) < 0)
        return -EIO;
    left -= 4;
    n = ps_le_get32(h);
    if (n != (uint32_t)table->n_row_tables)
        return ps__skip(f, left, blk, crc,
                        ps_err_printf(why, why_len, -PS_EMISMATCH,
                                      "holds %" PRIu32 " row tables where its table has %d", n,
                                      table->n_row_tables));
    for (uint32_t i = 0; i < n; i++) {
        uint64_t sketch, rows, rec, clock, newest;
        uint32_t dim, state;

        if (left < PS__TABLE_HEADER + 8)
            return ps__skip(
                f, left, blk, crc,
                ps_err_printf(why, why_len, -PS_EFORMAT, "row table %" PRIu32 " is cut short", i));
        if (ps_checkpoint_stream(f, PS__TABLE_HEADER, h, NULL, crc) < 0)
            return -EIO;
        left -= PS__TABLE_HEADER;
        dim = ps_le_get32(h + 4);
        state = ps_le_get32(h + 8);
        sketch = ps_le_get64(h + PS__AT_SKETCH);
        if (ps_le_get32(h) != i || dim != table->row_tables[i].dim || state > 4 * PS_ROW_MAX_DIM)
            return ps__skip(f, left, blk, crc,
                            ps_err_printf(why, why_len, -PS_EMISMATCH,
                                          "row table %" PRIu32 " (%s) does not match its table's "
                                          "(dim %" PRIu32 ", %" PRIu32 " state floats a row)",
                                          i, table->row_tables[i].name, dim, state));
        if (sketch > left - 8)
            return ps__skip(f, left, blk, crc,
                            ps_err_printf(why, why_len, -PS_EFORMAT,
                                          "row table %s: a sketch of %" PRIu64
                                          " bytes where %" PRIu64 " are left",
                                          table->row_tables[i].name, sketch, left - 8));
        /* The table's clocks against the file's (consistency.h): a fault,
         * not a break in the structure, so the rest is read as usual. */
        clock = ps_le_get64(h + 12);
        newest = ps_le_get64(h + 20);
        if (fault == 0 && (rc = ps_consistency_saved_clocks(rule->staleness, rule->lead,
                                                            rule->clock, PS_SAVED_ROWS, clock,
                                                            newest, reason, sizeof(reason))) < 0)
            fault = ps_err_printf(why, why_len, rc, "row table %s: %s", table->row_tables[i].name,
                                  reason);
        if (ps_checkpoint_stream(f, (size_t)sketch, NULL, blk, crc) < 0 ||
            ps_checkpoint_stream(f, 8, h, NULL, crc) < 0)
            return -EIO;
        left -= sketch + 8;
        rows = ps_le_get64(h);
        rec = PS__ROW_HEADER + ((uint64_t)dim + state) * sizeof(float);
        if (rows > left / rec)
            return ps__skip(f, left, blk, crc,
                            ps_err_printf(why, why_len, -PS_EFORMAT,
                                          "row table %s: %" PRIu64 " rows of %" PRIu64
                                          " bytes where %" PRIu64 " bytes are left",
                                          table->row_tables[i].name, rows, rec, left));
        rc = ps__rows_section_records(f, &table->row_tables[i], rows, (size_t)rec, newest, blk, crc,
                                      &fault, why, why_len);
        if (rc < 0)
            return rc;
        left -= rows * rec;
    }
    if (left != 0)
        return ps__skip(f, left, blk, crc,
                        ps_err_printf(why, why_len, -PS_EFORMAT,
                                      "%" PRIu64 " bytes after its rows section", left));
    return fault;
}

/* A table's sketch of len bytes, added into *sum (taken over when NULL). */
static int ps__copy_sketch(FILE *f, const ps_row_store *st, uint64_t len, ps_row_admit **sum,
                           uint32_t *crc, const char *name, char *why, size_t why_len)
{
    ps_row_admit *sketch = NULL;
    uint8_t *buf;
    char reason[160];
    int rc;

    if ((len == 0) != (ps_row_store_admission(st) == NULL))
        return ps_err_printf(why, why_len, -PS_EMISMATCH,
                             "row table %s: admission is %s here but %s in the file", name,
                             len ? "off" : "on", len ? "on" : "off");
    if (len == 0)
        return 0;
    buf = malloc((size_t)len);
    if (buf == NULL)
        return ps_err_printf(why, why_len, -ENOMEM, "row table %s: no memory for its sketch", name);
    if (ps_checkpoint_stream(f, (size_t)len, buf, NULL, crc) < 0)
        rc = ps_err_printf(why, why_len, -PS_EFORMAT, "the file changed while it was read");
    else if ((rc = ps_row_admit_load(&sketch, buf, (size_t)len, reason, sizeof(reason))) < 0)
        ps_err_printf(why, why_len, rc, "row table %s: %s", name, reason);
    free(buf);
    if (rc < 0)
        return rc;
    if (*sum == NULL) {
        *sum = sketch;
        return 0;
    }
    rc = ps_row_admit_merge(*sum, sketch);
    ps_row_admit_free(sketch);
    if (rc < 0)
        return ps_err_printf(why, why_len, rc,
                             "row table %s: its sketch's shape differs from another file's", name);
    return 0;
}

/* Whether row id of table is one the file (own: its server of servers)
 * holds as its own and keep selects. */
static int ps__rows_kept(uint32_t table, uint64_t id, const ps_checkpoint_keep *own,
                         const ps_checkpoint_keep *keep)
{
    return (own->servers <= 1 || ps_row_place(table, id, own->servers) == own->server) &&
           (keep->servers == 0 || ps_row_place(table, id, keep->servers) == keep->server);
}

/* A table's rows into its store, one record at a time: the file's own rows
 * that keep selects. */
static int ps__copy_table(FILE *f, ps_row_store *st, uint32_t table, size_t dim, size_t state,
                          uint64_t rows, const ps_checkpoint_keep *own,
                          const ps_checkpoint_keep *keep, uint32_t *crc, const char *name,
                          char *why, size_t why_len)
{
    size_t rec = PS__ROW_HEADER + (dim + state) * sizeof(float);
    uint8_t *buf = malloc(rec);
    int rc = 0;

    if (buf == NULL)
        return ps_err_printf(why, why_len, -ENOMEM, "row table %s: out of memory", name);
    for (uint64_t r = 0; r < rows && rc == 0; r++) {
        ps_row_view v;
        if (ps_checkpoint_stream(f, rec, buf, NULL, crc) < 0) {
            rc = ps_err_printf(why, why_len, -PS_EFORMAT, "the file changed while it was read");
            break;
        }
        v.id = ps_le_get64(buf);
        if (!ps__rows_kept(table, v.id, own, keep))
            continue;
        v.last_step = ps_le_get32(buf + 8);
        v.updates = ps_le_get32(buf + 12);
        v.values = (const float *)(buf + PS__ROW_HEADER);
        v.state = v.values + dim;
        rc = ps_row_store_insert(st, &v);
        if (rc < 0)
            ps_err_printf(why, why_len, rc, "row table %s: row %" PRIu64 " refused: %s", name, v.id,
                          ps_strerror(rc));
    }
    free(buf);
    return rc;
}

/* A table's counters, as written (six u64 from p), added to the store's. */
static void ps__add_counters(ps_row_store *st, const uint8_t *p)
{
    ps_row_counters c = {.created = ps_le_get64(p),
                         .admitted = ps_le_get64(p + 8),
                         .filtered = ps_le_get64(p + 16),
                         .evicted = ps_le_get64(p + 24),
                         .expired = ps_le_get64(p + 32),
                         .refused = ps_le_get64(p + 40)};

    ps_row_store_add_counters(st, &c);
}

int ps_checkpoint_rows_counted(uint32_t file_server, uint32_t file_servers,
                               const ps_checkpoint_keep *keep)
{
    if (keep == NULL || keep->servers == 0)
        return 1;
    return file_servers == keep->servers ? file_server == keep->server : keep->server == 0;
}

int ps_checkpoint_rows_copy(FILE *f, ps_checkpoint_rows *rows, int first,
                            const ps_checkpoint_keep *keep, const ps_checkpoint_rows_rule *rule,
                            int counted, uint32_t *crc, char *why, size_t why_len)
{
    ps_checkpoint_keep own = {rule->servers, rule->server};
    uint8_t h[PS__TABLE_HEADER];
    int rc;

    if (ps_checkpoint_stream(f, 4, h, NULL, crc) < 0 || ps_le_get32(h) != (uint32_t)rows->n)
        goto changed;
    rows->counted += counted != 0;
    for (int i = 0; i < rows->n; i++) {
        ps_row_store *st = rows->store[i];
        size_t dim = rows->dim[i], state = ps_row_store_state_floats(st);
        char name[32];

        snprintf(name, sizeof(name), "%d", i);
        if (ps_checkpoint_stream(f, PS__TABLE_HEADER, h, NULL, crc) < 0)
            goto changed;
        if (ps_le_get32(h + 4) != dim || ps_le_get32(h + 8) != state)
            return ps_err_printf(why, why_len, -PS_EMISMATCH,
                                 "row table %s: dim %" PRIu32 " with %" PRIu32
                                 " state floats a row, this server's has %zu and %zu",
                                 name, ps_le_get32(h + 4), ps_le_get32(h + 8), dim, state);
        if (first)
            rows->clock[i] = ps_le_get64(h + 12);
        if (first || ps_le_get64(h + 20) > rows->newest[i])
            rows->newest[i] = ps_le_get64(h + 20);
        if (counted)
            ps__add_counters(st, h + PS__AT_COUNTERS);
        rc = ps__copy_sketch(f, st, ps_le_get64(h + PS__AT_SKETCH), &rows->sketch[i], crc, name,
                             why, why_len);
        if (rc < 0)
            return rc;
        if (ps_checkpoint_stream(f, 8, h, NULL, crc) < 0)
            goto changed;
        rc = ps__copy_table(f, st, (uint32_t)i, dim, state, ps_le_get64(h), &own, keep, crc, name,
                            why, why_len);
        if (rc < 0)
            return rc;
    }
    return 0;
changed:
    return ps_err_printf(why, why_len, -PS_EFORMAT, "the file changed while it was read");
}

int ps_checkpoint_rows_finish(ps_checkpoint_rows *rows, int ok, char *why, size_t why_len)
{
    int rc = 0;

    for (int i = 0; i < rows->n; i++) {
        if (rows->sketch[i] == NULL)
            continue;
        if (ok && rc == 0 && ps_row_store_set_admission(rows->store[i], rows->sketch[i]) == 0) {
            rows->sketch[i] = NULL;
            continue;
        }
        if (ok && rc == 0)
            rc = ps_err_printf(why, why_len, -PS_EMISMATCH,
                               "row table %d: its sketch does not fit this table's", i);
        ps_row_admit_free(rows->sketch[i]);
        rows->sketch[i] = NULL;
    }
    return rc;
}
