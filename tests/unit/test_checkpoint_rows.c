/* Embedding rows in checkpoint files (server/durability/checkpoint_rows, issue 24
 * point 5), with real files in a scratch directory and real row stores:
 *  - rows trained for 12 steps (Adam rows with admission and expiry, an SGD
 *    table beside them), written at clock 12 and restored into fresh stores,
 *    are the same rows in the same visit order bit for bit (values, Adam
 *    state, update counts, last steps), the same admission sketch, the
 *    same table clocks and the same counters; trained on for 12 more steps,
 *    the restored stores equal the uninterrupted ones bit for bit (every
 *    stored row, the reads of expired and never-stored IDs, the counters);
 *  - a damaged rows section, a row table count or row count that disagrees
 *    with the file, a file of format 4 (no rows), one of format 5 (no row
 *    counters) and one of a newer format are each refused with their
 *    reason, and nothing of them is adopted;
 *  - a 1-server file restored onto 3 servers with a quarter of the chunk
 *    size: each server holds exactly the rows row_place gives it, bit for
 *    bit, the whole admission sketch, and every word of its new chunks
 *    with its Adam state, clocks and update count; new server 0 holds the
 *    file's counters, the others none; a 2-server file whose partner is
 *    missing is refused naming the missing file;
 *  - the counters of a 2-server set: restored onto 2 servers with other
 *    chunks, each server takes its own file's; onto 3, server 0 takes their
 *    sum and the others none;
 *  - clocks a file of its clock cannot hold (a chunk's or a row table's at
 *    2^64 - 1, a row last updated past its table's newest step) and a NaN
 *    row are refused before anything is adopted (issue 34 point 9);
 *  - a re-placing restore onto 3 servers leaves every server at one clock:
 *    a file of the newest set refused (a NaN row) sends all of them to the
 *    older set, a file left from an earlier plan splits nobody, and a share
 *    one server cannot take (an ID twice) refuses that server's restore in
 *    one sentence rather than sending it alone to an older clock (issue 34
 *    point 13). */
#include <criterion/criterion.h>

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint.h"
#include "crc32c.h"
#include "job_options.h"
#include "partition.h"
#include "ps_error.h"
#include "row_place.h"

#define CHUNK_BYTES 256
#define CLOCK       12
#define N_IDS       24

static char dir[64];
static ps_model_spec spec;
/* The plan files are written for, and the one a restore is made into. */
static uint32_t file_servers, servers, server;
static size_t file_chunk, chunk;
/* The clock files are written at, and the one the last restore gave. */
static uint64_t file_clock, restored_clock;
static ps_optimizer_config opt;

/* What a restore adopted: a shard and a row store per row table. */
typedef struct {
    ps_partition *part;
    ps_shard *shard;
    ps_row_store *store[2];
    uint64_t clock[64], newest[64];
    int adopted, withdrawn;
} sink_state;

static ps_row_store *make_store(int table)
{
    const ps_row_table_spec *t = &spec.row_tables[table];
    ps_row_store_config c;
    ps_row_store *st;
    char why[200];

    memset(&c, 0, sizeof(c));
    c.table_id = (uint32_t)table;
    c.dim = t->dim;
    c.init = t->init;
    c.init.seed = spec.seed;
    c.opt.opt = opt;
    if (t->optimizer[0])
        cr_assert_eq(ps_row_opt_parse(t->optimizer, &c.opt), 0);
    c.admit_after = t->admit_after;
    c.sketch_depth = 2;
    c.sketch_width = 1024;
    c.sketch_seed = spec.seed ^ (uint64_t)table;
    c.expire_after = t->expire_after;
    cr_assert_eq(ps_row_store_create(&st, &c, why, sizeof(why)), 0, "%s", why);
    return st;
}

static void setup(void)
{
    static const int sizes[] = {5, 16, 3};
    ps_row_table_spec users = {.name = "users", .dim = 8, .admit_after = 2, .expire_after = 6};
    ps_row_table_spec items = {.name = "items", .dim = 3, .optimizer = "sgd"};

    snprintf(dir, sizeof(dir), "/tmp/test_checkpoint_rows.XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    cr_assert_eq(ps_model_spec_init_mlp(&spec, sizes, 3, 7), 0);
    users.init.kind = PS_ROW_INIT_UNIFORM;
    users.init.lo = -0.5;
    users.init.hi = 0.5;
    cr_assert_eq(ps_model_spec_add_row_table(&spec, &users, NULL, 0), 0);
    cr_assert_eq(ps_model_spec_add_row_table(&spec, &items, NULL, 0), 0);
    ps_optimizer_defaults(&opt, PS_OPT_ADAM);
    file_servers = servers = 1;
    server = 0;
    file_chunk = chunk = CHUNK_BYTES;
    file_clock = CLOCK;
}

static void teardown(void)
{
    char cmd[128];

    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
    ps_model_spec_free(&spec);
}

/* One step of both tables: IDs that come and go (some pushed once, below
 * the admission threshold; some left to expire), gradients a function of
 * (step, ID, column). */
static void train(ps_row_store **st, uint64_t step)
{
    uint64_t ids[N_IDS];
    float grads[N_IDS * 8];
    size_t n = 0;

    for (uint64_t i = 0; i < N_IDS; i++) {
        uint64_t id = (i * 7 + step * (i % 3)) % 40 + (i % 5 == 0 ? step * 1000 : 0);
        int dup = 0;
        for (size_t j = 0; j < n; j++)
            dup |= ids[j] == id;
        if (!dup)
            ids[n++] = id;
    }
    for (size_t i = 0; i < n * 8; i++)
        grads[i] = 0.01f * (float)((i * 13 + step * 5) % 17) - 0.08f;
    cr_assert_eq(ps_row_store_apply(st[0], ids, grads, n, step, 0.05f, 0.5f, NULL), 0);
    cr_assert_eq(ps_row_store_apply(st[1], ids, grads, n / 2, step, 0.1f, 1.0f, NULL), 0);
}

typedef struct {
    ps_row_view row[512];
    float data[512][2 * 8 + 2];
    int n;
} rows_seen;

static int collect(void *arg, const ps_row_view *v)
{
    rows_seen *r = arg;

    cr_assert_lt(r->n, 512);
    r->row[r->n] = *v;
    r->n++;
    return 0;
}

/* Every stored row of a and b, in visit order, and both sketches are the
 * same bit for bit; reads at step agree too. */
static void assert_same(ps_row_store *a, ps_row_store *b, size_t dim, uint64_t step)
{
    rows_seen *ra = calloc(1, sizeof(*ra)), *rb = calloc(1, sizeof(*rb));
    size_t state = ps_row_store_state_floats(a);
    uint64_t ca = 0, cb = 0, ids[64];
    float ga[64 * 8], gb[64 * 8];
    const ps_row_admit *sa = ps_row_store_admission(a), *sb = ps_row_store_admission(b);

    cr_assert_eq(ps_row_store_visit(a, 0, &ca, SIZE_MAX, collect, ra), 0);
    cr_assert_eq(ps_row_store_visit(b, 0, &cb, SIZE_MAX, collect, rb), 0);
    cr_assert_gt(ra->n, 0);
    cr_assert_eq(ra->n, rb->n, "%d rows against %d", ra->n, rb->n);
    for (int i = 0; i < ra->n; i++) {
        cr_assert_eq(ra->row[i].id, rb->row[i].id);
        cr_assert_eq(ra->row[i].last_step, rb->row[i].last_step);
        cr_assert_eq(ra->row[i].updates, rb->row[i].updates);
        cr_assert_eq(memcmp(ra->row[i].values, rb->row[i].values, dim * 4), 0);
        cr_assert_eq(memcmp(ra->row[i].state, rb->row[i].state, state * 4), 0);
    }
    cr_assert_eq(sa == NULL, sb == NULL);
    if (sa) {
        size_t len = ps_row_admit_saved_size(sa);
        uint8_t *ba = malloc(len), *bb = malloc(len);
        cr_assert_eq(ps_row_admit_saved_size(sb), len);
        ps_row_admit_save(sa, ba, len);
        ps_row_admit_save(sb, bb, len);
        cr_assert_eq(memcmp(ba, bb, len), 0, "the admission sketches differ");
        free(ba);
        free(bb);
    }
    for (uint64_t i = 0; i < 64; i++)
        ids[i] = i < 40 ? i : i * 1000;
    cr_assert_eq(ps_row_store_gather(a, ids, 64, step, ga, NULL), 0);
    cr_assert_eq(ps_row_store_gather(b, ids, 64, step, gb, NULL), 0);
    cr_assert_eq(memcmp(ga, gb, 64 * dim * 4), 0);
    free(ra);
    free(rb);
}

/* The counts of events (not the rows held now, nor the memory) of a equal
 * want's. */
static void assert_counts(ps_row_store *a, const ps_row_counters *want, const char *what)
{
    ps_row_counters c, w = *want;

    ps_row_store_counters(a, &c);
    c.stored = c.bytes = w.stored = w.bytes = 0;
    cr_assert_eq(memcmp(&c, &w, sizeof(c)), 0,
                 "%s: %" PRIu64 " created, %" PRIu64 " evicted; expected %" PRIu64 ", %" PRIu64
                 " (or admitted, filtered, expired or refused differ)",
                 what, c.created, c.evicted, w.created, w.evicted);
}

static void assert_same_counts(ps_row_store *a, ps_row_store *b, const char *what)
{
    ps_row_counters want;

    ps_row_store_counters(b, &want);
    assert_counts(a, &want, what);
}

static ps_shard *adopt(void *arg, const ps_model_spec *table, ps_checkpoint_clocks *clocks,
                       ps_checkpoint_rows *rows, char *why, size_t why_len)
{
    sink_state *k = arg;

    (void)why;
    (void)why_len;
    k->adopted++;
    cr_assert_eq(ps_model_spec_fingerprint(table), ps_model_spec_fingerprint(&spec));
    cr_assert_eq(ps_partition_init(&k->part, &spec, (int)servers, chunk), 0);
    cr_assert_eq(ps_shard_init(&k->shard, k->part, (int)server, &spec, &opt, 0), 0);
    cr_assert_leq(ps_shard_chunk_count(k->shard), 64);
    for (int i = 0; i < ps_shard_chunk_count(k->shard); i++)
        cr_assert_eq(ps_shard_fill(k->shard, i, 0), 0);
    rows->n = 2;
    for (int i = 0; i < 2; i++) {
        rows->store[i] = k->store[i] = make_store(i);
        rows->dim[i] = spec.row_tables[i].dim;
    }
    clocks->clock = k->clock;
    clocks->newest = k->newest;
    return k->shard;
}

static void sink_free(sink_state *k)
{
    for (int i = 0; i < 2; i++)
        ps_row_store_free(k->store[i]);
    ps_shard_free(k->shard);
    ps_partition_free(k->part);
    memset(k, 0, sizeof(*k));
}

static void withdraw(void *arg)
{
    sink_state *k = arg;
    int adopted = k->adopted;

    sink_free(k);
    k->adopted = adopted;
    k->withdrawn = 1;
}

static void meta_for(ps_checkpoint_meta *meta)
{
    memset(meta, 0, sizeof(*meta));
    meta->server_index = server;
    meta->num_servers = servers;
    meta->optimizer = PS_OPT_ADAM;
    meta->fingerprint = ps_model_spec_fingerprint(&spec);
    meta->chunk_bytes = chunk;
    meta->clock = file_clock;
    meta->job = ps_job_fingerprint(NULL, 0);
    meta->state_per_weight = ps_optimizer_state_floats(&opt, 1);
    meta->max_table_bytes = 1 << 20;
}

/* What a file holds at word w of tensor t: weights, then Adam's 2 state
 * floats per weight. */
static float word_value(uint32_t t, size_t w, int plane)
{
    return (float)(t * 1000 + w) + 0.25f * (float)plane;
}

/* The file of a checkpoint of st (and a shard of spec, its words numbered
 * by word_value) at file_clock for server `server` of file_servers. */
static void write_file(ps_row_store **st, char *path, size_t len)
{
    ps_checkpoint_meta meta;
    ps_checkpoint_rows rows;
    ps_partition *part;
    ps_shard *shard;
    uint64_t c[64], n[64];
    ps_checkpoint_clocks clocks = {c, n};
    uint32_t restore_servers = servers;
    size_t restore_chunk = chunk;

    servers = file_servers;
    chunk = file_chunk;
    meta_for(&meta);
    cr_assert_eq(ps_partition_init(&part, &spec, (int)servers, chunk), 0);
    cr_assert_eq(ps_shard_init(&shard, part, (int)server, &spec, &opt, 0), 0);
    for (int i = 0; i < ps_shard_chunk_count(shard); i++) {
        const ps_chunk *ch = ps_shard_chunk(shard, i);
        cr_assert_eq(ps_shard_fill(shard, i, 1), 0);
        for (size_t j = 0; j < ch->numel; j++) {
            ps_shard_weights_mut(shard, i)[j] = word_value(ch->tensor_id, ch->offset + j, 0);
            for (int p = 1; p <= 2; p++)
                ps_shard_state_mut(shard, i)[2 * j + (size_t)p - 1] =
                    word_value(ch->tensor_id, ch->offset + j, p);
        }
        c[i] = n[i] = file_clock;
        ps_shard_set_updates(shard, i, CLOCK);
    }
    servers = restore_servers;
    chunk = restore_chunk;
    memset(&rows, 0, sizeof(rows));
    rows.n = 2;
    for (int i = 0; i < 2; i++) {
        rows.store[i] = st[i];
        rows.dim[i] = spec.row_tables[i].dim;
        /* A sync file's: a table's step is the one after the steps applied
         * to it, at most one past the file's clock. */
        rows.clock[i] = rows.newest[i] = file_clock + (uint64_t)i;
    }
    cr_assert_eq(ps_checkpoint_write(dir, 10, &meta, &spec, shard, &clocks, &rows, path, len), 0);
    rows.n = 1;
    cr_assert_eq(ps_checkpoint_write(dir, 10, &meta, &spec, shard, &clocks, &rows, NULL, 0),
                 -EINVAL, "rows that are not the table's are written");
    ps_shard_free(shard);
    ps_partition_free(part);
}

static int restore(sink_state *k, ps_checkpoint_rows *rows, char *err, size_t len)
{
    ps_checkpoint_sink sink = {adopt, withdraw, k};
    ps_checkpoint_meta meta;
    ps_checkpoint_clocks clocks = {NULL, NULL};
    char path[256];
    int rc;

    meta_for(&meta);
    memset(k, 0, sizeof(*k));
    rc = ps_checkpoint_restore(dir, UINT64_MAX, &meta, &sink, &clocks, rows, path, sizeof(path),
                               err, len);
    restored_clock = rc == 0 ? meta.clock : UINT64_MAX;
    return rc;
}

static void trained(ps_row_store **st, uint64_t steps)
{
    st[0] = make_store(0);
    st[1] = make_store(1);
    for (uint64_t s = 0; s < steps; s++)
        train(st, s);
}

Test(checkpoint_rows, a_restore_trains_on_bit_for_bit, .init = setup, .fini = teardown)
{
    ps_row_store *whole[2];
    sink_state k;
    ps_checkpoint_rows rows;
    ps_row_counters c;
    char path[256], err[1024];

    trained(whole, CLOCK);
    ps_row_store_counters(whole[0], &c);
    cr_assert_gt(c.filtered, 0, "no push waited for admission");
    cr_assert_gt(c.evicted + c.stored, c.created / 2);
    write_file(whole, path, sizeof(path));
    cr_assert_eq(restore(&k, &rows, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(k.adopted, 1);
    for (int i = 0; i < 2; i++) {
        cr_assert_eq(rows.clock[i], CLOCK + (uint64_t)i);
        cr_assert_eq(rows.newest[i], CLOCK + (uint64_t)i);
        assert_same(whole[i], k.store[i], spec.row_tables[i].dim, CLOCK);
        assert_same_counts(k.store[i], whole[i], "restored");
    }
    cr_assert_eq(rows.counted, 1);
    for (uint64_t s = CLOCK; s < 2 * CLOCK; s++) {
        train(whole, s);
        train(k.store, s);
    }
    for (int i = 0; i < 2; i++) {
        assert_same(whole[i], k.store[i], spec.row_tables[i].dim, 2 * CLOCK);
        assert_same_counts(k.store[i], whole[i], "trained on");
    }
    ps_row_store_counters(whole[0], &c);
    cr_assert_gt(c.expired, 0, "no row expired");
    cr_assert_gt(c.admitted, 0, "no row admitted");
    sink_free(&k);
    ps_row_store_free(whole[0]);
    ps_row_store_free(whole[1]);
}

/* The file's bytes, changed by fn, its CRC made right again when fix_crc. */
static void rewrite(const char *path, void (*fn)(uint8_t *, size_t), int fix_crc)
{
    FILE *f = fopen(path, "r+b");
    uint8_t *buf;
    long len;
    uint32_t crc;

    cr_assert_not_null(f);
    fseek(f, 0, SEEK_END);
    len = ftell(f);
    buf = malloc((size_t)len);
    rewind(f);
    cr_assert_eq(fread(buf, 1, (size_t)len, f), (size_t)len);
    fn(buf, (size_t)len);
    if (fix_crc) {
        crc = ps_crc32c(0, buf, (size_t)len - 4);
        memcpy(buf + len - 4, &crc, 4);
    }
    rewind(f);
    cr_assert_eq(fwrite(buf, 1, (size_t)len, f), (size_t)len);
    fclose(f);
    free(buf);
}

/* Where the rows section begins (after the header, the table and the
 * shard's chunks, each a 48-byte header and its weights and Adam state),
 * and the items table's record size and row count: it is the last table,
 * so its rows end right before the CRC. */
static size_t rows_at, items_rec, items_rows;

static void locate(size_t table_len)
{
    ps_partition *part;

    cr_assert_eq(ps_partition_init(&part, &spec, 1, CHUNK_BYTES), 0);
    rows_at = 8 + 4 * 4 + 6 * 8 + 4 + table_len;
    for (int i = 0; i < ps_partition_chunk_count(part); i++)
        rows_at += 48 + ps_partition_chunk(part, i)->numel * (1 + 2) * sizeof(float);
    ps_partition_free(part);
}

static void flip_near_end(uint8_t *b, size_t len)
{
    b[len - 4 - items_rec / 2] ^= 0x01;
}

static void more_items(uint8_t *b, size_t len)
{
    uint64_t n = items_rows + 1;
    memcpy(b + len - 4 - items_rows * items_rec - 8, &n, 8);
}

static void three_tables(uint8_t *b, size_t len)
{
    uint32_t tlen, three = 3, two;

    memcpy(&tlen, b + 72, 4);
    locate(tlen);
    cr_assert_lt(rows_at + 4, len);
    memcpy(&two, b + rows_at, 4);
    cr_assert_eq(two, 2, "the rows section does not start at %zu", rows_at);
    memcpy(b + rows_at, &three, 4);
}

/* The header's format version made `version`. */
static uint8_t version;

static void set_version(uint8_t *b, size_t len)
{
    (void)len;
    b[8] = version;
}

/* A file of the trained stores, changed by fn, is refused with want in the
 * reasons; nothing of it adopted. */
static void assert_refused(char *path, void (*fn)(uint8_t *, size_t), int fix_crc, const char *want)
{
    ps_row_store *whole[2];
    sink_state k;
    ps_checkpoint_rows rows;
    ps_row_counters c;
    char err[1024];

    trained(whole, CLOCK);
    ps_row_store_counters(whole[1], &c);
    items_rows = c.stored;
    items_rec = 16 + (3 + ps_row_store_state_floats(whole[1])) * sizeof(float);
    write_file(whole, path, 256);
    rewrite(path, fn, fix_crc);
    cr_assert_lt(restore(&k, &rows, err, sizeof(err)), 0);
    cr_assert_not_null(strstr(err, want), "'%s' not in '%s'", want, err);
    cr_assert_eq(k.adopted, 0, "a refused file was adopted");
    ps_row_store_free(whole[0]);
    ps_row_store_free(whole[1]);
}

Test(checkpoint_rows, damaged_or_wrong_rows_are_refused_before_adoption, .init = setup,
     .fini = teardown)
{
    char path[256];

    assert_refused(path, flip_near_end, 0, "checksum mismatch");
    unlink(path);
    assert_refused(path, more_items, 1, "bytes where");
    unlink(path);
    assert_refused(path, three_tables, 1, "holds 3 row tables where its table has 2");
    unlink(path);
    version = 4;
    assert_refused(path, set_version, 1,
                   "format version 4, written by an older build (it holds "
                   "no embedding rows");
    unlink(path);
    version = 5;
    assert_refused(path, set_version, 1,
                   "format version 5, written by an older build (it holds "
                   "no counts of its embedding rows (created, admitted, evicted), which a "
                   "restore would start from 0 again); this build reads version 6");
    unlink(path);
}

/* Issue 34 point 9: clocks a file of its clock cannot hold. Offsets: the
 * first chunk's header follows the table; a row table's clocks are 12
 * bytes into its header; the items table's last row ends before the CRC. */
static size_t first_chunk(const uint8_t *b)
{
    uint32_t tlen;

    memcpy(&tlen, b + 72, 4);
    return 8 + 4 * 4 + 6 * 8 + 4 + tlen;
}

static void chunk_clock_top(uint8_t *b, size_t len)
{
    uint64_t top = UINT64_MAX;

    (void)len;
    memcpy(b + first_chunk(b) + 24, &top, 8);
}

static void rows_clock_top(uint8_t *b, size_t len)
{
    uint64_t top = UINT64_MAX;
    uint32_t tlen;

    (void)len;
    memcpy(&tlen, b + 72, 4);
    locate(tlen);
    memcpy(b + rows_at + 4 + 12, &top, 8);
    memcpy(b + rows_at + 4 + 20, &top, 8);
}

static void last_row_in_the_future(uint8_t *b, size_t len)
{
    memcpy(b + len - 4 - items_rec + 8, &(uint32_t){1000}, 4);
}

static void last_row_nan(uint8_t *b, size_t len)
{
    memcpy(b + len - 4 - items_rec + 16, &(float){NAN}, 4);
}

/* A chunk clock of 2^64 - 1 left its chunk out of every step, untrained; a
 * row table's made its ceiling wrap to 0; a row last updated past its
 * table's newest step (it would never expire) was taken; a NaN row was
 * refused only once the table was adopted, by the one server it fell on.
 * Each is refused now before anything is adopted, naming it. */
Test(checkpoint_rows, clocks_and_rows_a_file_cannot_hold_are_refused_before_adoption, .init = setup,
     .fini = teardown)
{
    char path[256];

    assert_refused(path, chunk_clock_top, 1,
                   "chunk 0 of tensor fc1.weight: its chunk clocks (step 18446744073709551615, "
                   "newest 12) cannot be a sync file's of clock 12");
    unlink(path);
    assert_refused(path, rows_clock_top, 1,
                   "row table users: its clocks (step 18446744073709551615, newest "
                   "18446744073709551615) cannot be a sync file's of clock 12");
    unlink(path);
    assert_refused(path, last_row_in_the_future, 1,
                   "last updated at step 1000, where the table's newest step is 12");
    unlink(path);
    assert_refused(path, last_row_nan, 1, "holds a value or a state that is not finite");
    unlink(path);
}

/* The rows of st that row_place puts on server `at` of `of`, in stores of
 * their own: that server's share, as its file holds it. */
static void share_of(ps_row_store **st, uint32_t at, uint32_t of, ps_row_store **out)
{
    for (int t = 0; t < 2; t++) {
        rows_seen *r = calloc(1, sizeof(*r));
        uint64_t cursor = 0;
        out[t] = make_store(t);
        cr_assert_eq(ps_row_store_visit(st[t], 0, &cursor, SIZE_MAX, collect, r), 0);
        for (int i = 0; i < r->n; i++)
            if (ps_row_place((uint32_t)t, r->row[i].id, of) == at)
                cr_assert_eq(ps_row_store_insert(out[t], &r->row[i]), 0);
        free(r);
    }
}

/* The set of file_servers files at file_clock, each its server's share of
 * stores trained up to that clock; the path of server 1's in last. */
static void write_set(char *last, size_t len)
{
    ps_row_store *whole[2], *mine[2];

    trained(whole, file_clock);
    for (server = 0; server < file_servers; server++) {
        share_of(whole, server, file_servers, mine);
        write_file(mine, last, len);
        ps_row_store_free(mine[0]);
        ps_row_store_free(mine[1]);
    }
    ps_row_store_free(whole[0]);
    ps_row_store_free(whole[1]);
    snprintf(last, len, "%s/server-1-clock-%012llu.ckpt", dir, (unsigned long long)file_clock);
}

/* The ID of the last row of server 1's file at path (an items row). */
static uint64_t last_row_id(const char *path)
{
    FILE *f = fopen(path, "rb");
    uint64_t id;

    cr_assert_not_null(f);
    cr_assert_eq(fseek(f, -(long)(4 + items_rec), SEEK_END), 0);
    cr_assert_eq(fread(&id, 8, 1, f), 1);
    fclose(f);
    return id;
}

static void set_items_rec(void)
{
    ps_row_store *st = make_store(1);

    items_rec = 16 + (3 + ps_row_store_state_floats(st)) * sizeof(float);
    ps_row_store_free(st);
}

static void last_row_twice(uint8_t *b, size_t len)
{
    memcpy(b + len - 4 - items_rec, b + len - 4 - 2 * items_rec, 8);
}

/* Sets of 2 files at clocks 10 and 12, server 1's file at 12 changed by
 * fn, to be restored onto 3 servers (servers is set): returns the new
 * server the last row of that file falls on. */
static uint32_t two_sets(void (*fn)(uint8_t *, size_t))
{
    char path[256];

    set_items_rec();
    file_servers = 2;
    file_clock = 10;
    write_set(path, sizeof(path));
    file_clock = 12;
    write_set(path, sizeof(path));
    rewrite(path, fn, 1);
    servers = 3;
    return ps_row_place(1, last_row_id(path), 3);
}

/* Each of the `servers` servers restores clock want, words among the
 * reasons of what it refused. */
static void every_server_restores(uint64_t want, const char *words)
{
    ps_checkpoint_rows rows;
    char err[2048];

    for (server = 0; server < servers; server++) {
        sink_state k;
        cr_assert_eq(restore(&k, &rows, err, sizeof(err)), 0, "%s", err);
        cr_assert_eq(restored_clock, want, "server %u restored clock %llu", server,
                     (unsigned long long)restored_clock);
        cr_assert_not_null(strstr(err, words), "'%s' not in '%s'", words, err);
        sink_free(&k);
    }
}

/* Issue 34 point 13: a 2-server set at clocks 10 and 12, re-placed onto 3
 * servers, where one row of server 1's file at 12 is NaN. Its store, on
 * one new server only, refused it after the table was adopted: that server
 * restored 10 and the others 12. Every server refuses that file now, each
 * for the same reason, and all three restore 10. */
Test(checkpoint_rows, a_refused_file_of_a_re_placing_restore_leaves_every_server_at_one_clock,
     .init = setup, .fini = teardown)
{
    uint32_t bad = two_sets(last_row_nan);

    cr_assert_lt(bad, 3);
    every_server_restores(10, "server 1's: row table items: row");
}

/* A set of 3 files at clock 10, then a restore onto 2 servers trained on
 * to 12 (files of servers 0 and 1): server 2's file of clock 10 stays,
 * nobody's to prune. Restored onto 3 again, new server 2 took its own old
 * file alone (its plan's), clock 10, while the others re-placed 12. The
 * plan of a clock is server 0's file's now: all three re-place 12. */
Test(checkpoint_rows, a_file_left_from_an_earlier_plan_does_not_split_the_servers, .init = setup,
     .fini = teardown)
{
    char path[256];

    file_servers = 3;
    file_clock = 10;
    write_set(path, sizeof(path));
    file_servers = 2;
    file_clock = 12;
    write_set(path, sizeof(path));
    servers = 3;
    every_server_restores(12, "");
}

/* A file of a set that passes every check but holds one ID twice (no
 * store writes that; the set is whole otherwise): only the new server the
 * ID falls on can tell, once it copies. It used to fall back to clock 10
 * alone; now it refuses the restore in one sentence, and the others take
 * 12, the clock every server verified. */
Test(checkpoint_rows, a_share_a_server_cannot_take_refuses_its_restore_in_one_sentence,
     .init = setup, .fini = teardown)
{
    ps_checkpoint_rows rows;
    char err[2048];
    uint32_t dup = two_sets(last_row_twice);

    for (server = 0; server < 3; server++) {
        sink_state k;
        int rc = restore(&k, &rows, err, sizeof(err));
        if (server != dup) {
            cr_assert_eq(rc, 0, "%s", err);
            cr_assert_eq(restored_clock, 12);
            sink_free(&k);
            continue;
        }
        cr_assert_eq(rc, -ENOTRECOVERABLE, "server %u of the repeated ID: %d (%s)", server, rc,
                     err);
        cr_assert_not_null(strstr(err, "the 2 files of clock 12 passed every check, so the other "
                                       "servers restore that clock, but this server cannot take "
                                       "its share: row table 1: row"),
                           "%s", err);
        cr_assert_null(strstr(err, "; "), "more than one sentence: %s", err);
        cr_assert_eq(k.withdrawn, 1);
    }
}

/* A newer format is not even taken for this job's: the survey names it as
 * a file this build cannot read, and a restore finds nothing to restore. */
Test(checkpoint_rows, a_newer_format_is_named_and_left_alone, .init = setup, .fini = teardown)
{
    ps_row_store *whole[2];
    ps_checkpoint_survey sv;
    ps_checkpoint_meta meta;
    ps_checkpoint_rows rows;
    sink_state k;
    char path[256], err[1024];

    trained(whole, CLOCK);
    write_file(whole, path, sizeof(path));
    version = 7;
    rewrite(path, set_version, 1);
    cr_assert_eq(restore(&k, &rows, err, sizeof(err)), -ENOENT);
    cr_assert_eq(k.adopted, 0);
    meta_for(&meta);
    cr_assert_eq(ps_checkpoint_survey_dir(dir, &meta, &sv), 0);
    cr_assert_eq(sv.n_damaged, 1);
    cr_assert_not_null(strstr(sv.damaged, "format version 7, which this build (version 6) cannot "
                                          "read"),
                       "%s", sv.damaged);
    ps_row_store_free(whole[0]);
    ps_row_store_free(whole[1]);
}

static int count_rows(void *arg, const ps_row_view *v)
{
    (void)v;
    ++*(int *)arg;
    return 0;
}

/* One server's file (a 1-server plan, 256-byte chunks) restored onto 3
 * servers with 64-byte chunks: each new server holds exactly the rows
 * row_place gives it, bit for bit, the whole sketch, and every word of its
 * new chunks with its Adam state, clocks and update count. */
Test(checkpoint_rows, a_restore_onto_three_servers_re_places_rows_and_chunks, .init = setup,
     .fini = teardown)
{
    ps_row_store *whole[2];
    ps_checkpoint_rows rows;
    char path[256], err[1024];
    int total[2] = {0, 0}, want[2] = {0, 0};

    trained(whole, CLOCK);
    write_file(whole, path, sizeof(path));
    servers = 3;
    chunk = 64;
    for (server = 0; server < 3; server++) {
        sink_state k;
        cr_assert_eq(restore(&k, &rows, err, sizeof(err)), 0, "%s", err);
        for (int i = 0; i < ps_shard_chunk_count(k.shard); i++) {
            const ps_chunk *d = ps_shard_chunk(k.shard, i);
            cr_assert_eq(d->server, (int)server);
            cr_assert_eq(k.clock[i], CLOCK);
            cr_assert_eq(ps_shard_updates(k.shard, i), CLOCK);
            for (size_t j = 0; j < d->numel; j++) {
                cr_assert_eq(ps_shard_weights(k.shard, i)[j],
                             word_value(d->tensor_id, d->offset + j, 0));
                cr_assert_eq(ps_shard_state(k.shard, i)[2 * j + 1],
                             word_value(d->tensor_id, d->offset + j, 2));
            }
        }
        for (int t = 0; t < 2; t++) {
            rows_seen *r = calloc(1, sizeof(*r));
            uint64_t cursor = 0;
            cr_assert_eq(ps_row_store_visit(k.store[t], 0, &cursor, SIZE_MAX, collect, r), 0);
            for (int i = 0; i < r->n; i++) {
                /* At step 0 nothing reads as expired: the stored values. */
                float got[8], want_row[8];
                cr_assert_eq(ps_row_place((uint32_t)t, r->row[i].id, 3), server);
                cr_assert_eq(ps_row_store_gather(whole[t], &r->row[i].id, 1, 0, want_row, NULL), 0);
                cr_assert_eq(ps_row_store_gather(k.store[t], &r->row[i].id, 1, 0, got, NULL), 0);
                cr_assert_eq(memcmp(got, want_row, spec.row_tables[t].dim * 4), 0);
            }
            total[t] += r->n;
            free(r);
            cr_assert_eq(rows.clock[t], CLOCK + (uint64_t)t);
        }
        cr_assert_not_null(ps_row_store_admission(k.store[0]));
        cr_assert_eq(ps_row_admit_estimate(ps_row_store_admission(k.store[0]), 7),
                     ps_row_admit_estimate(ps_row_store_admission(whole[0]), 7));
        /* The job's counts on new server 0, none on the others. */
        cr_assert_eq(rows.counted, server == 0);
        for (int t = 0; t < 2; t++) {
            ps_row_counters none = {0};
            if (server == 0)
                assert_same_counts(k.store[t], whole[t], "server 0 of 3");
            else
                assert_counts(k.store[t], &none, "server 1 or 2 of 3");
        }
        sink_free(&k);
    }
    for (int t = 0; t < 2; t++) {
        uint64_t cursor = 0;
        cr_assert_eq(ps_row_store_visit(whole[t], 0, &cursor, SIZE_MAX, count_rows, &want[t]), 0);
        cr_assert_eq(total[t], want[t], "table %d: %d rows re-placed of %d", t, total[t], want[t]);
    }
    ps_row_store_free(whole[0]);
    ps_row_store_free(whole[1]);
}

/* A file written for 2 servers whose partner is missing: a server of 3
 * cannot re-place that clock, says which file is missing, and adopts
 * nothing. */
Test(checkpoint_rows, a_set_missing_a_file_is_refused, .init = setup, .fini = teardown)
{
    ps_row_store *whole[2];
    ps_checkpoint_rows rows;
    sink_state k;
    char path[256], err[1024];

    trained(whole, CLOCK);
    file_servers = 2;
    write_file(whole, path, sizeof(path));
    servers = 3;
    server = 2;
    cr_assert_eq(restore(&k, &rows, err, sizeof(err)), -PS_EFORMAT);
    cr_assert_not_null(strstr(err, "re-placing the 2 files of clock 12: server 1's: cannot open"),
                       "%s", err);
    cr_assert_eq(k.adopted, 0);
    ps_row_store_free(whole[0]);
    ps_row_store_free(whole[1]);
}

/* The rule as a pure function: a server's own file; the file of its index
 * onto as many servers; onto another number, every file to server 0 and
 * none to the others. */
Test(checkpoint_rows, whose_counters_a_server_takes)
{
    ps_checkpoint_keep two = {2, 1}, three0 = {3, 0}, three2 = {3, 2};

    cr_assert(ps_checkpoint_rows_counted(1, 2, NULL));
    cr_assert(ps_checkpoint_rows_counted(1, 2, &two) && !ps_checkpoint_rows_counted(0, 2, &two));
    cr_assert(ps_checkpoint_rows_counted(0, 2, &three0) &&
              ps_checkpoint_rows_counted(1, 2, &three0));
    cr_assert(!ps_checkpoint_rows_counted(0, 2, &three2) &&
              !ps_checkpoint_rows_counted(1, 2, &three2));
}

/* Rows no other store of these tests holds (IDs from 2^40), each pushed
 * twice so that admission stores them: counts unlike whole's. */
static void trained_apart(ps_row_store **st)
{
    uint64_t ids[5];
    float grads[5 * 8];

    st[0] = make_store(0);
    st[1] = make_store(1);
    for (size_t i = 0; i < 5; i++)
        ids[i] = ((uint64_t)1 << 40) + i;
    for (size_t i = 0; i < 5 * 8; i++)
        grads[i] = 0.01f * (float)i;
    for (uint64_t step = 0; step < 2; step++) {
        cr_assert_eq(ps_row_store_apply(st[0], ids, grads, 5, step, 0.05f, 1.0f, NULL), 0);
        cr_assert_eq(ps_row_store_apply(st[1], ids, grads, 2 + step, step, 0.1f, 1.0f, NULL), 0);
    }
}

/* A set of 2 files, each server's rows with its own counts: restored onto
 * 2 servers with other chunks (re-placed), each server takes its own
 * file's counts, which are exact since it holds that file's rows; onto 3,
 * server 0 takes the sum of both and the others none, so the sum over the
 * servers goes on. */
Test(checkpoint_rows, counters_follow_the_rule_of_a_re_placing_restore, .init = setup,
     .fini = teardown)
{
    ps_row_store *mine[2][2];
    ps_row_counters of[2][2], sum[2], none = {0};
    ps_checkpoint_rows rows;
    char path[256], err[1024];

    trained(mine[0], CLOCK);
    trained_apart(mine[1]);
    file_servers = 2;
    for (server = 0; server < 2; server++)
        write_file(mine[server], path, sizeof(path));
    for (int t = 0; t < 2; t++) {
        ps_row_store_counters(mine[0][t], &of[0][t]);
        ps_row_store_counters(mine[1][t], &of[1][t]);
        cr_assert(of[1][t].created > 0 && of[1][t].created != of[0][t].created);
        sum[t] = (ps_row_counters){
            .created = of[0][t].created + of[1][t].created,
            .admitted = of[0][t].admitted + of[1][t].admitted,
            .filtered = of[0][t].filtered + of[1][t].filtered,
            .evicted = of[0][t].evicted + of[1][t].evicted,
            .expired = of[0][t].expired + of[1][t].expired,
            .refused = of[0][t].refused + of[1][t].refused,
        };
    }
    chunk = 64;
    servers = 2;
    for (server = 0; server < 2; server++) {
        sink_state k;
        cr_assert_eq(restore(&k, &rows, err, sizeof(err)), 0, "%s", err);
        cr_assert_eq(rows.counted, 1);
        for (int t = 0; t < 2; t++)
            assert_counts(k.store[t], &of[server][t], "onto 2 servers, other chunks");
        sink_free(&k);
    }
    servers = 3;
    for (server = 0; server < 3; server++) {
        sink_state k;
        cr_assert_eq(restore(&k, &rows, err, sizeof(err)), 0, "%s", err);
        cr_assert_eq(rows.counted, server == 0 ? 2u : 0u);
        for (int t = 0; t < 2; t++)
            assert_counts(k.store[t], server == 0 ? &sum[t] : &none, "onto 3 servers");
        sink_free(&k);
    }
    for (int f = 0; f < 2; f++)
        for (int t = 0; t < 2; t++)
            ps_row_store_free(mine[f][t]);
}
