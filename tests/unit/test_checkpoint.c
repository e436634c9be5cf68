/* Checkpoint files against a restoring server (issue 22, causes 4 and 9),
 * with real files in a scratch directory and a real ps_kv_server restoring
 * from them (no thread or socket: a restore runs before the server starts):
 *  - a crafted file (a valid header, job, fingerprint and CRC, a hostile
 *    table, no body) is refused before its table is adopted, and the intact
 *    older checkpoint of the real table still restores;
 *  - a table over the server's --max-model-bytes is refused by that limit;
 *  - damaged files (truncated, a bad header, random bytes) are told apart
 *    from other jobs' files, each with what is wrong;
 *  - a table of 4,096 tensors with 255-byte names (over 1 MiB packed, where
 *    format 3 held 64 KiB) is written and restored. */
#include <criterion/criterion.h>

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "checkpoint.h"
#include "crc32c.h"
#include "job_options.h"
#include "kv_server.h"
#include "ps_log.h"
#include "partition.h"
#include "ps_error.h"
#include "tensor_table.h"

#define CHUNK_BYTES 256

static char dir[64];
/* The job of the files written: the server's (NULL settings), or another. */
static const char *job_settings;

static ps_model_spec real;

static void setup(void)
{
    static const int sizes[] = {5, 16, 3};

    snprintf(dir, sizeof(dir), "/tmp/test_checkpoint.XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    cr_assert_eq(ps_model_spec_init_mlp(&real, sizes, 3, 7), 0);
    job_settings = NULL;
}

static void teardown(void)
{
    char cmd[128];

    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

static void server_config(ps_kv_server_config *cfg)
{
    memset(cfg, 0, sizeof(*cfg));
    ps_optimizer_defaults(&cfg->opt, PS_OPT_SGD);
    cfg->num_servers = 1;
    cfg->chunk_bytes = CHUNK_BYTES;
    cfg->world = 1;
    cfg->mode = PS_MODE_SYNC;
    cfg->max_payload = (size_t)1 << 20;
    cfg->checkpoint_dir = dir;
    cfg->keep_checkpoints = 10;
}

/* What the server of server_config() expects a checkpoint to say. */
static void meta_for(ps_checkpoint_meta *meta, const ps_kv_server_config *cfg,
                     const ps_model_spec *table, uint64_t clock)
{
    memset(meta, 0, sizeof(*meta));
    meta->num_servers = 1;
    meta->optimizer = (uint32_t)cfg->opt.kind;
    meta->fingerprint = ps_model_spec_fingerprint(table);
    meta->chunk_bytes = cfg->chunk_bytes;
    meta->clock = clock;
    meta->job = ps_job_fingerprint(job_settings, 0);
}

/* A real checkpoint of table at clock, written by the checkpoint module. */
static void write_real(const ps_kv_server_config *cfg, const ps_model_spec *table, uint64_t clock)
{
    ps_checkpoint_meta meta;
    ps_partition *part;
    ps_shard *shard;
    uint64_t *c, *n;
    ps_checkpoint_clocks clocks;

    meta_for(&meta, cfg, table, clock);
    cr_assert_eq(ps_partition_init(&part, table, 1, cfg->chunk_bytes), 0);
    cr_assert_eq(ps_shard_init(&shard, part, 0, table, &cfg->opt, 0), 0);
    c = calloc((size_t)ps_shard_chunk_count(shard), sizeof(*c));
    n = calloc((size_t)ps_shard_chunk_count(shard), sizeof(*n));
    cr_assert(c && n);
    clocks = (ps_checkpoint_clocks){c, n};
    for (int i = 0; i < ps_shard_chunk_count(shard); i++) {
        cr_assert_eq(ps_shard_fill(shard, i, 1), 0);
        c[i] = n[i] = clock;
    }
    cr_assert_eq(ps_checkpoint_write(dir, 10, &meta, table, shard, &clocks, NULL, NULL, 0), 0);
    ps_shard_free(shard);
    ps_partition_free(part);
    free(c);
    free(n);
}

static void put32(uint8_t **p, uint32_t v)
{
    memcpy(*p, &v, 4);
    *p += 4;
}

static void put64(uint8_t **p, uint64_t v)
{
    memcpy(*p, &v, 8);
    *p += 8;
}

/* The crafted file of the issue: a checkpoint header that is right in
 * everything a header can be checked for (magic, version, server, optimizer,
 * chunk size, job, the table's fingerprint, its chunk count), the table and
 * a correct CRC, and no body at all. */
static void write_crafted(const ps_kv_server_config *cfg, const ps_model_spec *table,
                          uint64_t clock)
{
    ps_checkpoint_meta meta;
    ps_tensor_table_wire w;
    ps_partition *part;
    uint8_t buf[4096], *p = buf;
    int chunks;
    char path[256];
    size_t tlen;
    FILE *f;

    meta_for(&meta, cfg, table, clock);
    cr_assert_eq(ps_partition_init(&part, table, 1, cfg->chunk_bytes), 0);
    chunks = ps_partition_chunk_count(part);
    ps_partition_free(part);
    ps_tensor_table_to_wire(table, &w);
    tlen = shardps__tensor_table__get_packed_size(&w.msg);
    memcpy(p, "SHPSCKPT", 8);
    p += 8;
    put32(&p, PS_CHECKPOINT_FORMAT);
    put32(&p, 0);
    put32(&p, 1);
    put32(&p, meta.optimizer);
    put64(&p, meta.fingerprint);
    put64(&p, meta.chunk_bytes);
    put64(&p, clock);
    put64(&p, 0);
    put64(&p, (uint64_t)chunks);
    put64(&p, meta.job);
    put32(&p, (uint32_t)tlen);
    p += shardps__tensor_table__pack(&w.msg, p);
    put32(&p, ps_crc32c(0, buf, (size_t)(p - buf)));
    snprintf(path, sizeof(path), "%s/server-0-clock-%012" PRIu64 ".ckpt", dir, clock);
    f = fopen(path, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(buf, 1, (size_t)(p - buf), f), (size_t)(p - buf));
    fclose(f);
}

/* One tensor of numel floats: the hostile table. */
static void hostile(ps_model_spec *t, int numel)
{
    memset(t, 0, sizeof(*t));
    t->seed = 1;
    cr_assert_eq(ps_model_spec_add_tensor(t, "x", 1, &numel, PS_INIT_HE_UNIFORM, 1, 1), 0);
}

/* Restores a server of cfg from dir; returns restore's code and the stats
 * the server then shows, the reasons of refused files in err. */
static int restore(const ps_kv_server_config *cfg, ps_kv_server_stats *st, char *err, size_t len)
{
    uv_loop_t loop;
    ps_kv_server *s;
    int rc;

    cr_assert_eq(uv_loop_init(&loop), 0);
    cr_assert_eq(ps_kv_server_init(&s, &loop, cfg, NULL, NULL), 0);
    rc = ps_kv_server_restore(s, UINT64_MAX, err, len);
    ps_kv_server_stats_get(s, st);
    ps_kv_server_close(s);
    cr_assert_eq(uv_loop_close(&loop), 0);
    return rc;
}

Test(checkpoint, crafted_table_without_a_body_adopts_nothing, .init = setup, .fini = teardown)
{
    ps_kv_server_config cfg;
    ps_kv_server_stats st;
    ps_model_spec bad;
    char err[4096];

    server_config(&cfg);
    write_real(&cfg, &real, 10);
    /* 4M floats: 16 MiB the old code allocated and filled for nothing. */
    hostile(&bad, 4 << 20);
    write_crafted(&cfg, &bad, 20);
    cr_assert_eq(restore(&cfg, &st, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(st.clock, 10, "restored clock %" PRIu64, st.clock);
    cr_assert_eq(st.weight_bytes, real.total_numel * sizeof(float));
    cr_assert(strstr(err, "clock-000000000020.ckpt: ") && strstr(err, "truncated"), "%s", err);
}

Test(checkpoint, a_table_over_the_limit_is_refused, .init = setup, .fini = teardown)
{
    ps_kv_server_config cfg;
    ps_kv_server_stats st;
    ps_model_spec big;
    char err[4096];

    server_config(&cfg);
    cfg.max_model_bytes = real.total_numel * sizeof(float);
    write_real(&cfg, &real, 10);
    hostile(&big, (int)real.total_numel + 1);
    write_real(&cfg, &big, 20);
    cr_assert_eq(restore(&cfg, &st, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(st.clock, 10);
    cr_assert(strstr(err, "clock-000000000020.ckpt: ") && strstr(err, "--max-model-bytes"), "%s",
              err);
}

Test(checkpoint, a_table_of_4096_tensors_with_255_byte_names_round_trips, .init = setup,
     .fini = teardown)
{
    ps_kv_server_config cfg;
    ps_kv_server_stats st;
    ps_model_spec big = {0};
    int shape[1] = {3};
    uint8_t *packed;
    size_t len;
    char err[4096], name[PS_MAX_NAME_BYTES + 1];

    big.seed = 7;
    for (int i = 0; i < PS_MAX_TENSORS; i++) {
        int k = snprintf(name, sizeof(name), "layers.%d.mlp.fc.weight.", i);
        memset(name + k, 'q', PS_MAX_NAME_BYTES - (size_t)k);
        name[PS_MAX_NAME_BYTES] = '\0';
        cr_assert_eq(ps_model_spec_add_tensor(&big, name, 1, shape, PS_INIT_HE_UNIFORM, 3, 3), 0);
    }
    cr_assert_eq(ps_tensor_table_pack(&big, &packed, &len), 0);
    cr_assert_gt(len, (size_t)1 << 20);
    free(packed);
    server_config(&cfg);
    write_real(&cfg, &big, 10);
    cr_assert_eq(restore(&cfg, &st, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(st.clock, 10);
    cr_assert_eq(st.weight_bytes, big.total_numel * sizeof(float));
    ps_model_spec_free(&big);
}

/* Everything the server logs, for the tests that judge its lines. */
static char logged[16384];

static void log_sink(void *arg, const char *line, size_t len)
{
    size_t used = strlen(logged);

    (void)arg;
    if (used + len < sizeof(logged))
        memcpy(logged + used, line, len);
}

/* Writes len bytes of data as the checkpoint file of clock. */
static void write_file(uint64_t clock, const void *data, size_t len)
{
    char path[256];
    FILE *f;

    snprintf(path, sizeof(path), "%s/server-0-clock-%012" PRIu64 ".ckpt", dir, clock);
    f = fopen(path, "wb");
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(data, 1, len, f), len);
    fclose(f);
}

static uint8_t *read_file(uint64_t clock, size_t *len)
{
    char path[256];
    uint8_t *buf = malloc(1 << 16);
    FILE *f;

    snprintf(path, sizeof(path), "%s/server-0-clock-%012" PRIu64 ".ckpt", dir, clock);
    f = fopen(path, "rb");
    cr_assert_not_null(f);
    *len = fread(buf, 1, 1 << 16, f);
    fclose(f);
    return buf;
}

/* Issue 22, cause 9: damaged files (empty, 10 bytes, a bit flipped in the
 * header's job field, random bytes) were all called "checkpoint files of
 * another job" at info level. Each is now named with what is wrong, in a
 * warning; another job's intact file is still named as such. */
Test(checkpoint, damaged_files_are_told_from_other_jobs, .init = setup, .fini = teardown)
{
    ps_kv_server_config cfg;
    ps_kv_server_stats st;
    char err[4096], *warn, *info;
    uint8_t *buf, noise[500];
    size_t len;

    server_config(&cfg);
    write_real(&cfg, &real, 10);
    job_settings = "mode=async\n";
    write_real(&cfg, &real, 40);
    job_settings = NULL;
    buf = read_file(10, &len);
    write_file(30, buf, 0);
    write_file(31, buf, 10);
    buf[64] ^= 0x10; /* the job fingerprint */
    write_file(32, buf, len);
    free(buf);
    for (size_t i = 0; i < sizeof(noise); i++)
        noise[i] = (uint8_t)(i * 2654435761u >> 13);
    write_file(33, noise, sizeof(noise));

    logged[0] = '\0';
    ps_log_set_sink(log_sink, NULL);
    cr_assert_eq(restore(&cfg, &st, err, sizeof(err)), 0, "%s", err);
    ps_log_set_sink(NULL, NULL);
    cr_assert_eq(st.clock, 10);
    warn = strstr(logged, "WARN ");
    cr_assert(warn && strstr(warn, "4 damaged checkpoint files"), "%s", logged);
    cr_assert(strstr(warn, "clock-000000000030.ckpt: truncated: 0 bytes"), "%s", warn);
    cr_assert(strstr(warn, "clock-000000000031.ckpt: truncated: 10 bytes"), "%s", warn);
    cr_assert(strstr(warn, "clock-000000000032.ckpt: checksum mismatch"), "%s", warn);
    cr_assert(strstr(warn, "clock-000000000033.ckpt: not a shardps checkpoint (bad magic)"), "%s",
              warn);
    info = strstr(logged, "of another job alone");
    cr_assert(strstr(logged, "leaving 1 checkpoint file of another job"), "%s", logged);
    cr_assert(strstr(info, "clock-000000000040.ckpt"), "%s", logged);
}
