/* ps-fuzz-corpus's seeds for the targets that read tables and files
 * (fuzz_table, fuzz_checkpoint, fuzz_model; issue 22), each made by the
 * code that writes the real thing: packed tables as a HELLO carries them,
 * checkpoint files from ps_checkpoint_write, model files from
 * ps_model_file_write; then a few broken ones of each (a NUL in a name, 33
 * tensors, fans at the limit, a header with no body, a file cut short). */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "checkpoint.h"
#include "crc32c.h"
#include "fuzz_common.h"
#include "job_options.h"
#include "model_file.h"
#include "partition.h"
#include "tensor_table.h"

static int cf_write(const char *dir, const char *target, const char *name, const void *data,
                    size_t len)
{
    char path[4096];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s", dir, target);
    if (mkdir(path, 0755) < 0 && errno != EEXIST)
        return -errno;
    snprintf(path, sizeof(path), "%s/%s/%s", dir, target, name);
    f = fopen(path, "wb");
    if (f == NULL || fwrite(data, 1, len, f) != len || fclose(f) != 0) {
        fprintf(stderr, "ps-fuzz-corpus: cannot write %s: %s\n", path, strerror(errno));
        return -EIO;
    }
    return 0;
}

/* The whole file at path into *buf (caller frees); its length or -1. */
static long cf_read(const char *path, uint8_t **buf)
{
    FILE *f = fopen(path, "rb");
    long len = -1;

    *buf = NULL;
    if (f && fseek(f, 0, SEEK_END) == 0 && (len = ftell(f)) >= 0 && fseek(f, 0, SEEK_SET) == 0 &&
        (*buf = malloc((size_t)len + 1)) != NULL && fread(*buf, 1, (size_t)len, f) == (size_t)len) {
        fclose(f);
        return len;
    }
    if (f)
        fclose(f);
    free(*buf);
    *buf = NULL;
    return -1;
}

static int cf_table(const char *dir, const char *name, const ps_model_spec *spec, const char *nul)
{
    uint8_t *buf, *at;
    size_t len;
    int rc;

    if (ps_tensor_table_pack(spec, &buf, &len) < 0)
        return -1;
    /* A NUL put into a name after packing: protobuf-c cannot pack one. */
    if (nul && (at = memmem(buf, len, nul, strlen(nul))) != NULL)
        at[1] = '\0';
    rc = cf_write(dir, "table", name, buf, len);
    free(buf);
    return rc;
}

/* n tensors with names of the longest length, every kind and dtype. */
static int cf_big(ps_model_spec *spec, int n)
{
    static const ps_tensor_kind kinds[] = {PS_KIND_PARAMETER, PS_KIND_BUFFER, PS_KIND_FROZEN};
    char name[PS_MAX_NAME_BYTES + 1];
    int shape[2] = {2, 3};

    memset(spec, 0, sizeof(*spec));
    spec->seed = 5;
    for (int i = 0; i < n; i++) {
        int k = snprintf(name, sizeof(name), "model.layers.%d.norm.", i);
        ps_tensor_decl d = {name, 1 + i % 2, shape,        PS_INIT_HE_UNIFORM,
                            3,    2,         kinds[i % 3], PS_DTYPE_F32};
        memset(name + k, 'z', PS_MAX_NAME_BYTES - (size_t)k);
        name[PS_MAX_NAME_BYTES] = '\0';
        if (i % 3 != 0) {
            d.init = i % 2 ? PS_INIT_VALUES : PS_INIT_ZERO;
            d.dtype = i % 4 == 1 ? PS_DTYPE_I64 : PS_DTYPE_F32;
        }
        if (ps_model_spec_add(spec, &d) < 0)
            return -1;
    }
    return 0;
}

static int cf_tables(const char *dir)
{
    static const int mlp[] = {784, 256, 128, 10};
    ps_model_spec spec, one;
    int rc = 0, n = 4;

    psf_spec(&spec);
    rc |= cf_table(dir, "fuzz-model", &spec, NULL);
    rc |= cf_table(dir, "fuzz-model-nul-name", &spec, "fc1.weight");
    ps_model_spec_free(&spec);
    rc |= ps_model_spec_init_mlp(&spec, mlp, 4, 1);
    rc |= cf_table(dir, "default-mlp", &spec, NULL);
    ps_model_spec_free(&spec);
    rc |= cf_big(&spec, 12);
    rc |= cf_table(dir, "kinds-and-long-names", &spec, NULL);
    ps_model_spec_free(&spec);
    memset(&one, 0, sizeof(one));
    rc |= ps_model_spec_add_tensor(&one, "x", 1, &n, PS_INIT_XAVIER_UNIFORM, INT32_MAX, INT32_MAX);
    rc |= cf_table(dir, "max-fans", &one, NULL);
    /* 4,097 tensors: one more than a table holds, built as a message. */
    {
        ps_tensor_table_wire w;
        Shardps__TensorDecl **ptrs = malloc((PS_MAX_TENSORS + 1) * sizeof(*ptrs));
        uint8_t *buf = NULL;
        size_t len = 0;
        if (ptrs == NULL || ps_tensor_table_to_wire(&one, &w) < 0) {
            free(ptrs);
            ps_model_spec_free(&one);
            return -1;
        }
        for (int i = 0; i <= PS_MAX_TENSORS; i++)
            ptrs[i] = w.decl_ptrs[0];
        w.msg.tensors = ptrs;
        w.msg.n_tensors = PS_MAX_TENSORS + 1;
        len = shardps__tensor_table__get_packed_size(&w.msg);
        buf = malloc(len);
        if (buf != NULL) {
            shardps__tensor_table__pack(&w.msg, buf);
            rc |= cf_write(dir, "table", "4097-tensors", buf, len);
        }
        rc |= buf == NULL;
        free(buf);
        free(ptrs);
        ps_tensor_table_wire_free(&w);
    }
    ps_model_spec_free(&one);
    return rc;
}

/* A real checkpoint of the fuzz model with Adam's state, at clock 3, as
 * fuzz_checkpoint's restoring server expects it; then broken copies. With
 * rows, the model has a row table of dim 4 (the job's Adam) holding 6 rows
 * (the seeds' names start "rows-"). */
static int cf_checkpoints(const char *dir, int with_rows)
{
    static const uint64_t ids[] = {1, 2, 3, 1u << 20, UINT64_MAX, 77};
    ps_row_table_spec emb = {.name = "emb", .dim = 4};
    ps_row_store_config rc_cfg = {.dim = 4};
    ps_checkpoint_rows rows = {0};
    ps_row_store *store = NULL;
    float grads[6 * 4];
    char tmp[] = "/tmp/ps-fuzz-corpus.XXXXXX", path[4096];
    ps_checkpoint_meta meta;
    ps_optimizer_config opt;
    ps_model_spec spec;
    ps_partition *part = NULL;
    ps_shard *shard = NULL;
    uint64_t clock[64], newest[64];
    ps_checkpoint_clocks clocks = {clock, newest};
    uint8_t *buf = NULL;
    long len;
    int rc = -1, n;

    psf_spec(&spec);
    ps_optimizer_defaults(&opt, PS_OPT_ADAM);
    if (mkdtemp(tmp) == NULL || ps_partition_init(&part, &spec, 1, PSF_CHUNK_BYTES) < 0 ||
        ps_shard_init(&shard, part, 0, &spec, &opt, 0) < 0)
        goto out;
    if (with_rows) {
        for (int i = 0; i < 6 * 4; i++)
            grads[i] = 0.01f * (float)i;
        rc_cfg.opt.opt = opt;
        if (ps_model_spec_add_row_table(&spec, &emb, NULL, 0) < 0 ||
            ps_row_store_create(&store, &rc_cfg, NULL, 0) < 0 ||
            ps_row_store_apply(store, ids, grads, 6, 2, 0.1f, 1.0f, NULL) < 0)
            goto out;
        rows =
            (ps_checkpoint_rows){.n = 1, .store = {store}, .dim = {4}, .clock = {3}, .newest = {3}};
    }
    n = ps_shard_chunk_count(shard);
    for (int i = 0; i < n && i < 64; i++) {
        if (ps_shard_fill(shard, i, 1) < 0)
            goto out;
        for (size_t k = 0; k < ps_shard_state_floats(shard, i); k++)
            ps_shard_state_mut(shard, i)[k] = 0.001f * (float)k;
        clock[i] = newest[i] = 3;
        ps_shard_set_updates(shard, i, 3);
    }
    memset(&meta, 0, sizeof(meta));
    meta.num_servers = 1;
    meta.optimizer = PS_OPT_ADAM;
    meta.fingerprint = ps_model_spec_fingerprint(&spec);
    meta.chunk_bytes = PSF_CHUNK_BYTES;
    meta.clock = 3;
    meta.total_steps = 10;
    meta.job = ps_job_fingerprint(NULL, 0);
    if (n > 64 ||
        ps_checkpoint_write(tmp, 1, &meta, &spec, shard, &clocks, &rows, path, sizeof(path)) < 0 ||
        (len = cf_read(path, &buf)) < 0)
        goto out;
    if (with_rows) {
        rc = cf_write(dir, "checkpoint", "rows-adam-clock-3", buf, (size_t)len);
        rc |= cf_write(dir, "checkpoint", "rows-cut-in-the-rows", buf, (size_t)len - 40);
        buf[len - 30] ^= 0x20;
        rc |= cf_write(dir, "checkpoint", "rows-bit-flipped", buf, (size_t)len);
    } else {
        rc = cf_write(dir, "checkpoint", "adam-clock-3", buf, (size_t)len);
        rc |= cf_write(dir, "checkpoint", "cut-after-the-table", buf, (size_t)len / 4);
        rc |= cf_write(dir, "checkpoint", "header-only", buf, 72);
        buf[len / 2] ^= 0x20;
        rc |= cf_write(dir, "checkpoint", "bit-flipped", buf, (size_t)len);
    }
    unlink(path);
out:
    free(buf);
    ps_row_store_free(store);
    ps_shard_free(shard);
    ps_partition_free(part);
    ps_model_spec_free(&spec);
    rmdir(tmp);
    return rc;
}

static int cf_model(const char *dir, const char *name, const char *text, const ps_act_shape *in)
{
    char path[] = "/tmp/ps-fuzz-corpus-model.XXXXXX", err[256];
    const float *tensor[PS_MAX_MODEL_TENSORS];
    ps_model_desc desc;
    ps_model_spec table = {0};
    float *values = NULL;
    uint8_t *buf = NULL;
    long len;
    int fd = mkstemp(path), rc = -1;

    if (fd < 0)
        return -errno;
    close(fd);
    if (ps_model_desc_parse(&desc, text, name, err, sizeof(err)) != 0 ||
        ps_model_desc_resolve(&desc, in, 3, 5, &table, err, sizeof(err)) != 0 ||
        (values = calloc(table.total_numel, sizeof(float))) == NULL)
        goto out;
    for (size_t i = 0, off = 0; i < (size_t)table.n_tensors; i++) {
        tensor[i] = values + off;
        off += table.tensors[i].numel;
    }
    if (ps_model_file_write(path, &desc, &table, tensor, err, sizeof(err)) != 0 ||
        (len = cf_read(path, &buf)) < 0)
        goto out;
    rc = cf_write(dir, "model", name, buf, (size_t)len);
out:
    free(buf);
    free(values);
    ps_model_spec_free(&table);
    unlink(path);
    return rc;
}

static int cf_models(const char *dir)
{
    static const ps_act_shape flat = {1, {5, 0, 0}}, image = {3, {1, 6, 6}};

    return cf_model(dir, "mlp", "flatten\ndense out=16\nrelu\ndense out=classes\n", &flat) |
           cf_model(dir, "cnn",
                    "conv2d out=2 kernel=3 pad=1\nrelu\nmaxpool kernel=2\ndropout p=0.25\n"
                    "flatten\ndense out=classes\n",
                    &image);
}

int psf_file_seeds(const char *dir)
{
    return cf_tables(dir) | cf_checkpoints(dir, 0) | cf_checkpoints(dir, 1) | cf_models(dir);
}
