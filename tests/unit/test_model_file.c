/* Tests for saved model files: a round trip keeps the description, table and
 * every value bit for bit; a damaged, truncated, foreign or inconsistent file
 * is refused with the right code and the file named; a table that is not the
 * description's is never written. */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "crc32c.h"
#include "model_file.h"
#include "ps_error.h"

static char dir[64], path[128];

static void make_dir(void)
{
    snprintf(dir, sizeof(dir), "/tmp/test_model_file.XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
    snprintf(path, sizeof(path), "%s/m.psmodel", dir);
}

static void remove_dir(void)
{
    unlink(path);
    rmdir(dir);
}

typedef struct {
    ps_model_desc desc;
    ps_model_spec table;
    float *values;
    const float *tensor[PS_MAX_TENSORS];
} model;

static void make_model(model *m, const char *text, const ps_act_shape *in, int classes)
{
    char err[256];
    size_t off = 0;

    cr_assert_eq(ps_model_desc_parse(&m->desc, text, "t", err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(ps_model_desc_resolve(&m->desc, in, classes, 99, &m->table, err, sizeof(err)), 0,
                 "%s", err);
    m->values = malloc(m->table.total_numel * sizeof(float));
    cr_assert_not_null(m->values);
    /* "Trained" values: anything but the initial ones, every bit pattern
     * class represented (negative zero, subnormal, large). */
    for (size_t i = 0; i < m->table.total_numel; i++)
        m->values[i] = (float)((double)(i * 2654435761u % 1000003u) / 1000.0 - 500.0);
    m->values[0] = -0.0f;
    m->values[1] = 1e-42f;
    m->values[2] = 3e38f;
    for (int i = 0; i < m->table.n_tensors; i++) {
        m->tensor[i] = m->values + off;
        off += m->table.tensors[i].numel;
    }
}

static const char *cnn_text = "conv2d out=4 kernel=3 pad=1\nrelu\nmaxpool kernel=2\n"
                              "dropout p=0.3\nflatten\ndense out=16\nrelu\ndense out=classes\n";
static const ps_act_shape cnn_in = {3, {2, 8, 8}};

Test(model_file, round_trip, .init = make_dir, .fini = remove_dir)
{
    model m;
    ps_saved_model s;
    char err[256], a[1024], b[1024];

    make_model(&m, cnn_text, &cnn_in, 5);
    cr_assert_eq(ps_model_file_write(path, &m.desc, &m.table, m.tensor, err, sizeof(err)), 0, "%s",
                 err);
    cr_assert_eq(access(strcat(strcpy(a, path), ".tmp"), F_OK), -1, "temporary file left");
    cr_assert_eq(ps_model_file_read(path, &s, err, sizeof(err)), 0, "%s", err);
    ps_model_desc_format(&m.desc, a, sizeof(a));
    ps_model_desc_format(&s.desc, b, sizeof(b));
    cr_assert_str_eq(a, b);
    cr_assert(s.desc.resolved);
    cr_assert_eq(s.desc.classes, 5);
    cr_assert_eq(s.desc.input.ndim, 3);
    cr_assert_eq(s.desc.input.d[0], 2);
    cr_assert_eq(s.desc.input.d[2], 8);
    cr_assert_eq(s.table.seed, 99);
    cr_assert_eq(ps_model_spec_fingerprint(&s.table), ps_model_spec_fingerprint(&m.table));
    cr_assert_eq(memcmp(s.data, m.values, m.table.total_numel * sizeof(float)), 0);
    for (int i = 0; i < s.table.n_tensors; i++)
        cr_assert_eq(s.tensor[i], s.data + (m.tensor[i] - m.values), "tensor %d", i);
    ps_saved_model_free(&s);
    cr_assert_null(s.data);

    /* Writing again replaces the file. */
    m.values[5] = 42.0f;
    cr_assert_eq(ps_model_file_write(path, &m.desc, &m.table, m.tensor, err, sizeof(err)), 0);
    cr_assert_eq(ps_model_file_read(path, &s, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(s.data[5], 42.0f);
    ps_saved_model_free(&s);
    free(m.values);
}

Test(model_file, write_refuses_a_foreign_table, .init = make_dir, .fini = remove_dir)
{
    model m, other;
    ps_model_desc unresolved;
    char err[256];

    make_model(&m, cnn_text, &cnn_in, 5);
    make_model(&other, cnn_text, &cnn_in, 6);
    cr_assert_eq(ps_model_file_write(path, &m.desc, &other.table, other.tensor, err, sizeof(err)),
                 -EINVAL);
    cr_assert_not_null(strstr(err, "the tensor table is not the one"), "%s", err);
    cr_assert_eq(ps_model_desc_parse(&unresolved, cnn_text, "t", err, sizeof(err)), 0);
    cr_assert_eq(ps_model_file_write(path, &unresolved, &m.table, m.tensor, err, sizeof(err)),
                 -EINVAL);
    cr_assert_eq(access(path, F_OK), -1);
    free(m.values);
    free(other.values);
}

static uint8_t *read_all(size_t *len)
{
    FILE *f = fopen(path, "rb");
    uint8_t *buf;

    cr_assert_not_null(f);
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    rewind(f);
    buf = malloc(*len);
    cr_assert_eq(fread(buf, 1, *len, f), *len);
    fclose(f);
    return buf;
}

/* Writes buf as the file, recomputing the trailing CRC when fix_crc. */
static void write_all(uint8_t *buf, size_t len, int fix_crc)
{
    FILE *f = fopen(path, "wb");

    if (fix_crc) {
        uint32_t crc = ps_crc32c(0, buf, len - 4);
        memcpy(buf + len - 4, &crc, 4);
    }
    cr_assert_not_null(f);
    cr_assert_eq(fwrite(buf, 1, len, f), len);
    fclose(f);
}

static void expect_refusal(int code, const char *msg)
{
    ps_saved_model s;
    char err[256];

    cr_assert_eq(ps_model_file_read(path, &s, err, sizeof(err)), code, "%s", err);
    cr_assert_not_null(strstr(err, path), "message does not name the file: %s", err);
    cr_assert_not_null(strstr(err, msg), "got \"%s\", want \"%s\"", err, msg);
    cr_assert_null(s.data);
}

Test(model_file, every_single_bit_flip_is_refused, .init = make_dir, .fini = remove_dir)
{
    static const ps_act_shape in = {1, {3, 0, 0}};
    model m;
    uint8_t *buf;
    size_t len;
    char err[256];

    make_model(&m, "dense out=classes\n", &in, 2);
    cr_assert_eq(ps_model_file_write(path, &m.desc, &m.table, m.tensor, err, sizeof(err)), 0);
    buf = read_all(&len);
    for (size_t i = 0; i < len; i++)
        for (int bit = 0; bit < 8; bit++) {
            ps_saved_model s;

            buf[i] ^= (uint8_t)(1u << bit);
            write_all(buf, len, 0);
            cr_assert_lt(ps_model_file_read(path, &s, err, sizeof(err)), 0, "byte %zu bit %d", i,
                         bit);
            buf[i] ^= (uint8_t)(1u << bit);
        }
    free(buf);
    free(m.values);
}

Test(model_file, damaged_files_refused_with_reason, .init = make_dir, .fini = remove_dir)
{
    model m;
    uint8_t *buf, *bigger;
    size_t len, text_len = strlen(cnn_text);
    char err[256];
    uint32_t v;

    make_model(&m, cnn_text, &cnn_in, 5);
    cr_assert_eq(ps_model_file_write(path, &m.desc, &m.table, m.tensor, err, sizeof(err)), 0);
    buf = read_all(&len);
    /* The canonical text spells out the defaults, so it is longer. */
    memcpy(&v, buf + 16, 4);
    cr_assert_gt(v, text_len);
    text_len = v;

    write_all(buf, len - 1, 0);
    expect_refusal(-PS_ECRC, "checksum mismatch");
    write_all(buf, 10, 0);
    expect_refusal(-PS_EFORMAT, "too short");
    buf[len / 2] ^= 0x40;
    write_all(buf, len, 0);
    expect_refusal(-PS_ECRC, "checksum mismatch");
    buf[len / 2] ^= 0x40;

    buf[0] = 'X';
    write_all(buf, len, 0);
    expect_refusal(-PS_EFORMAT, "wrong magic");
    buf[0] = 'S';
    v = 2;
    memcpy(buf + 8, &v, 4);
    write_all(buf, len, 1);
    expect_refusal(-PS_EVERSION, "format version 2; this build reads version 1");
    v = 1;
    memcpy(buf + 8, &v, 4);
    memcpy(buf + 12, &v, 4);
    write_all(buf, len, 1);
    expect_refusal(-PS_EFORMAT, "unknown flags 0x1");
    v = 0;
    memcpy(buf + 12, &v, 4);

    /* Consistent checksums over inconsistent content. */
    buf[20] = 'X'; /* "conv2d" -> "Xonv2d" */
    write_all(buf, len, 1);
    expect_refusal(-PS_EFORMAT, "(model text):1: unknown layer 'Xonv2d'");
    buf[20] = 'c';
    /* Input channels 2 -> 3: the text now makes conv1.weight [4,3,3,3]. */
    v = 3;
    memcpy(buf + 20 + text_len + 4, &v, 4);
    write_all(buf, len, 1);
    expect_refusal(-PS_EFORMAT, "tensor conv1.weight has another shape than its model says");
    v = 2;
    memcpy(buf + 20 + text_len + 4, &v, 4);
    /* Classes 5 -> 1: refused by the model's own check. */
    v = 1;
    memcpy(buf + 20 + text_len + 16, &v, 4);
    write_all(buf, len, 1);
    expect_refusal(-PS_EFORMAT, "the data has 1 classes");
    v = 5;
    memcpy(buf + 20 + text_len + 16, &v, 4);
    /* One more float than the tensors need. */
    bigger = malloc(len + 4);
    memcpy(bigger, buf, len - 4);
    memset(bigger + len - 4, 0, 8);
    write_all(bigger, len + 4, 1);
    expect_refusal(-PS_EFORMAT, "holds");
    free(bigger);

    write_all(buf, len, 1);
    {
        ps_saved_model s;
        cr_assert_eq(ps_model_file_read(path, &s, err, sizeof(err)), 0, "restored: %s", err);
        ps_saved_model_free(&s);
    }
    unlink(path);
    expect_refusal(-ENOENT, "cannot open");
    free(buf);
    free(m.values);
}

/* Issue 22, cause 10: input dimensions of 3 x (2^31-1) under a correct CRC
 * (what shardps-eval was handed) are refused with a reason; their product
 * used to overflow in model_desc (UBSan: signed integer overflow). */
Test(model_file, input_dims_whose_product_overflows, .init = make_dir, .fini = remove_dir)
{
    model m;
    uint8_t *buf;
    size_t len, text_len;
    char err[256];
    uint32_t v = INT32_MAX;

    make_model(&m, cnn_text, &cnn_in, 5);
    cr_assert_eq(ps_model_file_write(path, &m.desc, &m.table, m.tensor, err, sizeof(err)), 0);
    buf = read_all(&len);
    memcpy(&v, buf + 16, 4);
    text_len = v;
    v = INT32_MAX;
    for (int i = 0; i < 3; i++)
        memcpy(buf + 20 + text_len + 4 + 4 * i, &v, 4);
    write_all(buf, len, 1);
    expect_refusal(-PS_EFORMAT, "exceed");
    free(buf);
    free(m.values);
}

/* The peak resident memory of this process, in MiB. */
static double peak_rss_mib(void)
{
    struct rusage ru;

    cr_assert_eq(getrusage(RUSAGE_SELF, &ru), 0);
    return (double)ru.ru_maxrss / 1024;
}

/* Issue 22, cause 10: a 1 GiB file that is not a model file is refused on its
 * magic, without being read whole first (it was: 1 GiB of memory and of
 * reading for a file refused by its first 8 bytes). The file is sparse, so
 * only reading it costs; the process's peak RSS shows whether it was read. */
Test(model_file, a_large_file_is_judged_by_its_magic_first, .init = make_dir, .fini = remove_dir)
{
    FILE *f = fopen(path, "wb");
    double before;

    cr_assert_not_null(f);
    cr_assert_eq(fwrite("NOTMODEL", 1, 8, f), 8);
    cr_assert_eq(ftruncate(fileno(f), (off_t)1 << 30), 0);
    fclose(f);
    before = peak_rss_mib();
    expect_refusal(-PS_EFORMAT, "wrong magic");
    cr_assert_lt(peak_rss_mib() - before, 64, "peak RSS grew from %.0f to %.0f MiB", before,
                 peak_rss_mib());
}
