/* libFuzzer target: the checkpoint loader (server/durability/checkpoint.c) on one file
 * made of the input's bytes, in a scratch directory, as a restoring server
 * reads it (server 0 of 1, Adam, the fuzz model's 64-byte chunks, a table of
 * at most 1 MiB): the header and table checks, the size its table's shard
 * needs, the rows section's structure, the CRC streamed through, and only
 * then the sink, which builds a shard and a row store per row table (Adam;
 * small admission sketches) for the file's table as a server does. Invariants: the sink is
 * called only for a file that then restores (or withdraws it), so a refused
 * file adopts nothing; a restore names the table its header fingerprints;
 * the survey of the directory sees the file once at most. Also replayed by
 * make test (fuzz_replay_checkpoint). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "checkpoint.h"
#include "fuzz_common.h"
#include "job_options.h"
#include "partition.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* What a restore adopted. */
typedef struct {
    ps_optimizer_config opt;
    ps_partition *part;
    ps_shard *shard;
    ps_row_store *store[PS_MAX_ROW_TABLES];
    int n_stores;
    ps_model_spec table; /* the shard's (it borrows it) */
    uint64_t *clock, *newest;
    uint64_t fingerprint;
    int adopted, withdrawn;
} fc_sink;

static void fc_free(fc_sink *k)
{
    ps_shard_free(k->shard);
    for (int i = 0; i < k->n_stores; i++)
        ps_row_store_free(k->store[i]);
    k->n_stores = 0;
    ps_partition_free(k->part);
    ps_model_spec_free(&k->table);
    free(k->clock);
    free(k->newest);
    k->shard = NULL;
    k->part = NULL;
    k->clock = k->newest = NULL;
}

/* A row store for row table i of k's table, as a server makes one. */
static int fc_store(fc_sink *k, int i)
{
    const ps_row_table_spec *t = &k->table.row_tables[i];
    ps_row_store_config c;

    memset(&c, 0, sizeof(c));
    c.table_id = (uint32_t)i;
    c.dim = t->dim;
    c.init = t->init;
    c.opt.opt = k->opt;
    c.admit_after = t->admit_after;
    c.sketch_depth = 1;
    c.sketch_width = 64;
    c.expire_after = t->expire_after;
    c.capacity = t->capacity;
    return ps_row_store_create(&k->store[i], &c, NULL, 0);
}

static ps_shard *fc_adopt(void *arg, const ps_model_spec *table, ps_checkpoint_clocks *clocks,
                          ps_checkpoint_rows *rows, char *why, size_t why_len)
{
    fc_sink *k = arg;
    int n;

    k->adopted++;
    k->fingerprint = ps_model_spec_fingerprint(table);
    if (ps_model_spec_copy(&k->table, table) < 0 ||
        ps_partition_init(&k->part, &k->table, 1, PSF_CHUNK_BYTES) < 0 ||
        ps_shard_init(&k->shard, k->part, 0, &k->table, &k->opt, 0) < 0)
        goto fail;
    n = ps_shard_chunk_count(k->shard);
    k->clock = calloc((size_t)n + 1, sizeof(uint64_t));
    k->newest = calloc((size_t)n + 1, sizeof(uint64_t));
    if (k->clock == NULL || k->newest == NULL)
        goto fail;
    for (int i = 0; i < n; i++)
        if (ps_shard_fill(k->shard, i, 0) < 0)
            goto fail;
    for (; k->n_stores < k->table.n_row_tables; k->n_stores++)
        if (fc_store(k, k->n_stores) < 0)
            goto fail;
    rows->n = k->n_stores;
    for (int i = 0; i < k->n_stores; i++) {
        rows->store[i] = k->store[i];
        rows->dim[i] = k->table.row_tables[i].dim;
    }
    clocks->clock = k->clock;
    clocks->newest = k->newest;
    return k->shard;
fail:
    snprintf(why, why_len, "cannot hold it");
    fc_free(k);
    k->withdrawn++;
    return NULL;
}

static void fc_withdraw(void *arg)
{
    fc_sink *k = arg;

    fc_free(k);
    k->withdrawn++;
}

/* The scratch directory and its one file, removed at exit. */
static char dir[64], file[128];

static void fc_cleanup(void)
{
    unlink(file);
    rmdir(dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fc_sink k;
    ps_checkpoint_sink sink = {fc_adopt, fc_withdraw, &k};
    ps_checkpoint_meta meta;
    ps_checkpoint_clocks clocks = {NULL, NULL};
    static ps_checkpoint_rows rows;
    ps_checkpoint_survey sv;
    char path[256], err[4096];
    FILE *f;
    int rc;

    if (dir[0] == '\0') {
        snprintf(dir, sizeof(dir), "%s/fuzz_checkpoint.XXXXXX",
                 access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
        if (mkdtemp(dir) == NULL)
            abort();
        snprintf(file, sizeof(file), "%s/server-0-clock-000000000001.ckpt", dir);
        atexit(fc_cleanup);
    }
    f = fopen(file, "wb");
    if (f == NULL || fwrite(data, 1, size, f) != size || fclose(f) != 0)
        abort();
    memset(&k, 0, sizeof(k));
    ps_optimizer_defaults(&k.opt, PS_OPT_ADAM);
    memset(&meta, 0, sizeof(meta));
    meta.num_servers = 1;
    meta.optimizer = PS_OPT_ADAM;
    meta.chunk_bytes = PSF_CHUNK_BYTES;
    meta.job = ps_job_fingerprint(NULL, 0);
    meta.state_per_weight = ps_optimizer_state_floats(&k.opt, 1);
    meta.max_table_bytes = 1 << 20;
    rc = ps_checkpoint_restore(dir, UINT64_MAX, &meta, &sink, &clocks, &rows, path, sizeof(path),
                               err, sizeof(err));
    /* A file restored is at least a header: its fingerprint (offset 24) is
     * the table's, its clock (offset 40) the one restored. */
    if (rc == 0) {
        uint64_t fingerprint, clock;
        if (size < 48 || k.adopted != 1 || k.withdrawn != 0 || k.shard == NULL)
            abort();
        memcpy(&fingerprint, data + 24, sizeof(fingerprint));
        memcpy(&clock, data + 40, sizeof(clock));
        if (k.fingerprint != fingerprint || meta.clock != clock)
            abort();
    }
    if (rc < 0 && (k.adopted != k.withdrawn || k.shard != NULL))
        abort();
    fc_free(&k);
    if (ps_checkpoint_survey_dir(dir, &meta, &sv) < 0 || sv.n_other + sv.n_damaged > 1)
        abort();
    return 0;
}
