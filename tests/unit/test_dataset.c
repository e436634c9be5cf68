/* Unit tests of the data loader (IDX and .npy files) and the epoch order.
 * Small files, plain and gzip, are written into a fresh temporary directory
 * per test (the .npy ones by the test itself, as np.save lays them out); every
 * malformed case must come back with its exact error code and a one-line
 * message that names the offending file. The real Fashion-MNIST is loaded
 * too where the machine has it. */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "dataset.h"
#include "job_options.h"
#include "ps_error.h"

#define N_SAMPLES 5
#define ROWS      3
#define COLS      2
#define IMG_BYTES (16 + N_SAMPLES * ROWS * COLS)
#define LAB_BYTES (8 + N_SAMPLES)
#define MAX_FILES 16

static char tmpdir[64];
static char paths[MAX_FILES][128];
static int n_paths;

static void make_tmpdir(void)
{
    strcpy(tmpdir, "/tmp/ps-test-dataset-XXXXXX");
    cr_assert_not_null(mkdtemp(tmpdir));
    n_paths = 0;
}

static void remove_tmpdir(void)
{
    for (int i = 0; i < n_paths; i++)
        unlink(paths[i]);
    rmdir(tmpdir);
}

TestSuite(dataset, .init = make_tmpdir, .fini = remove_tmpdir);

static void put_be32(unsigned char *p, uint32_t v)
{
    p[0] = (unsigned char)(v >> 24);
    p[1] = (unsigned char)(v >> 16);
    p[2] = (unsigned char)(v >> 8);
    p[3] = (unsigned char)v;
}

/* Writes len bytes to tmpdir/name, gzip-compressed when gz is set, and
 * returns the path (owned by this file, removed after the test). */
static const char *write_file(const char *name, int gz, const unsigned char *data, size_t len)
{
    char *path;

    cr_assert_lt(n_paths, MAX_FILES);
    path = paths[n_paths++];
    snprintf(path, sizeof(paths[0]), "%s/%s", tmpdir, name);
    if (gz) {
        gzFile f = gzopen(path, "wb");
        cr_assert_not_null(f);
        cr_assert_eq(len ? gzwrite(f, data, (unsigned)len) : 0, (int)len);
        cr_assert_eq(gzclose(f), Z_OK);
    } else {
        FILE *f = fopen(path, "wb");
        cr_assert_not_null(f);
        cr_assert_eq(fwrite(data, 1, len, f), len);
        cr_assert_eq(fclose(f), 0);
    }
    return path;
}

/* A well-formed image file of N_SAMPLES images whose pixel k of image i is
 * 40 * i + k. */
static void image_bytes(unsigned char *b)
{
    put_be32(b, 0x00000803);
    put_be32(b + 4, N_SAMPLES);
    put_be32(b + 8, ROWS);
    put_be32(b + 12, COLS);
    for (int i = 0; i < N_SAMPLES * ROWS * COLS; i++)
        b[16 + i] = (unsigned char)(40 * (i / (ROWS * COLS)) + i % (ROWS * COLS));
}

/* A well-formed label file with labels 9, 8, 7, ... */
static void label_bytes(unsigned char *b)
{
    put_be32(b, 0x00000801);
    put_be32(b + 4, N_SAMPLES);
    for (int i = 0; i < N_SAMPLES; i++)
        b[8 + i] = (unsigned char)(9 - i);
}

static void assert_good(const ps_dataset *ds)
{
    cr_assert_eq(ds->n, N_SAMPLES);
    cr_assert_eq(ds->shape.ndim, 3);
    cr_assert_eq(ds->shape.d[0], 1);
    cr_assert_eq(ds->shape.d[1], ROWS);
    cr_assert_eq(ds->shape.d[2], COLS);
    cr_assert_eq(ds->features, ROWS * COLS);
    cr_assert_eq(ds->classes, 10, "labels 9..5: 10 classes");
    cr_assert_eq(ds->is_float, 0);
    cr_assert_null(ds->values);
    for (int i = 0; i < N_SAMPLES; i++) {
        cr_assert_eq(ds->labels[i], 9 - i);
        for (int k = 0; k < ROWS * COLS; k++)
            cr_assert_eq(ds->pixels[i * ROWS * COLS + k], 40 * i + k);
    }
}

static void load_good(int img_gz, int lab_gz)
{
    unsigned char img[IMG_BYTES], lab[LAB_BYTES];
    ps_dataset ds;
    char err[256] = "junk";

    image_bytes(img);
    label_bytes(lab);
    cr_assert_eq(ps_dataset_load(&ds, write_file("img", img_gz, img, sizeof(img)),
                                 write_file("lab", lab_gz, lab, sizeof(lab)), err, sizeof(err)),
                 0, "%s", err);
    cr_assert_str_empty(err);
    assert_good(&ds);
    ps_dataset_free(&ds);
    cr_assert_null(ds.pixels);
    cr_assert_null(ds.labels);
}

Test(dataset, loads_plain)
{
    load_good(0, 0);
}

Test(dataset, loads_gzip)
{
    load_good(1, 1);
}

Test(dataset, loads_mixed_encodings)
{
    load_good(1, 0);
}

/* Loads the given bytes as the images or the labels (the other file being
 * well-formed), in the given encoding, and expects code with a single-line
 * message naming bad_path, which is the image path when which_bad is 'i'. */
static void expect_failure(char which_bad, int gz, const unsigned char *bad, size_t len, int code,
                           const char *must_mention)
{
    unsigned char img[IMG_BYTES], lab[LAB_BYTES];
    const char *img_path, *lab_path, *bad_path;
    ps_dataset ds;
    char err[512];

    image_bytes(img);
    label_bytes(lab);
    img_path = which_bad == 'i' ? write_file(gz ? "bad-img.gz" : "bad-img", gz, bad, len)
                                : write_file("img", 0, img, sizeof(img));
    lab_path = which_bad == 'l' ? write_file(gz ? "bad-lab.gz" : "bad-lab", gz, bad, len)
                                : write_file("lab", 0, lab, sizeof(lab));
    bad_path = which_bad == 'i' ? img_path : lab_path;
    cr_assert_eq(ps_dataset_load(&ds, img_path, lab_path, err, sizeof(err)), code, "gz=%d: got %s",
                 gz, err);
    cr_assert_not_null(strstr(err, bad_path), "message lacks the path: %s", err);
    cr_assert_not_null(strstr(err, must_mention), "message lacks \"%s\": %s", must_mention, err);
    cr_assert_null(strchr(err, '\n'), "message is not one line: %s", err);
    cr_assert_null(ds.pixels);
    cr_assert_null(ds.labels);
    cr_assert_eq(ds.n, 0);
}

Test(dataset, wrong_magic)
{
    unsigned char lab[LAB_BYTES];

    label_bytes(lab);
    put_be32(lab, 0x00000f01);
    for (int gz = 0; gz < 2; gz++)
        expect_failure('l', gz, lab, sizeof(lab), -PS_EFORMAT, "wrong magic 0x00000f01");
    put_be32(lab, 0x01000801);
    expect_failure('l', 0, lab, sizeof(lab), -PS_EFORMAT, "wrong magic 0x01000801");
    put_be32(lab, 0x00000805);
    expect_failure('l', 0, lab, sizeof(lab), -PS_EFORMAT, "wrong magic 0x00000805");
}

Test(dataset, truncated_header)
{
    unsigned char img[IMG_BYTES];

    image_bytes(img);
    for (int gz = 0; gz < 2; gz++)
        expect_failure('i', gz, img, 10, -PS_EFORMAT, "truncated header");
}

Test(dataset, truncated_data)
{
    unsigned char img[IMG_BYTES], lab[LAB_BYTES];

    image_bytes(img);
    label_bytes(lab);
    for (int gz = 0; gz < 2; gz++) {
        expect_failure('i', gz, img, sizeof(img) - 1, -PS_EFORMAT, "truncated");
        expect_failure('l', gz, lab, sizeof(lab) - 3, -PS_EFORMAT, "truncated");
    }
}

Test(dataset, trailing_data)
{
    unsigned char img[IMG_BYTES + 1];

    image_bytes(img);
    img[IMG_BYTES] = 0;
    for (int gz = 0; gz < 2; gz++)
        expect_failure('i', gz, img, sizeof(img), -PS_EFORMAT, "continues past");
}

Test(dataset, image_and_label_counts_differ)
{
    unsigned char lab[LAB_BYTES];

    label_bytes(lab);
    put_be32(lab + 4, N_SAMPLES - 1);
    /* Both files are named; the labels one is checked by expect_failure. */
    expect_failure('l', 0, lab, sizeof(lab) - 1, -PS_EFORMAT, "/img holds 5 samples");
}

Test(dataset, classes_are_the_largest_label_plus_one)
{
    unsigned char img[IMG_BYTES], lab[LAB_BYTES];
    ps_dataset ds;
    char err[256];

    image_bytes(img);
    label_bytes(lab);
    lab[8 + 3] = 200;
    cr_assert_eq(ps_dataset_load(&ds, write_file("img", 0, img, sizeof(img)),
                                 write_file("lab", 0, lab, sizeof(lab)), err, sizeof(err)),
                 0, "%s", err);
    cr_assert_eq(ds.classes, 201);
    cr_assert_eq(ds.labels[3], 200);
    ps_dataset_free(&ds);
}

Test(dataset, label_out_of_range)
{
    unsigned char lab[8 + 4 * N_SAMPLES];

    put_be32(lab, 0x00000c01); /* int32 labels */
    put_be32(lab + 4, N_SAMPLES);
    for (int i = 0; i < N_SAMPLES; i++)
        put_be32(lab + 8 + 4 * i, (uint32_t)i);
    put_be32(lab + 8 + 4 * 3, 256);
    for (int gz = 0; gz < 2; gz++)
        expect_failure('l', gz, lab, sizeof(lab), -PS_EFORMAT, "label 256 of sample 3");
    put_be32(lab + 8 + 4 * 3, 3);
    put_be32(lab + 8 + 4 * 2, UINT32_MAX);
    expect_failure('l', 0, lab, sizeof(lab), -PS_EFORMAT, "label -1 of sample 2 is not a class");
}

Test(dataset, empty_file)
{
    for (int gz = 0; gz < 2; gz++)
        expect_failure('i', gz, (const unsigned char *)"", 0, -PS_EFORMAT, "empty");
}

Test(dataset, truncated_gzip_stream)
{
    unsigned char img[IMG_BYTES], lab[LAB_BYTES];
    const char *img_path;
    ps_dataset ds;
    char err[512];

    image_bytes(img);
    label_bytes(lab);
    /* Cut the compressed file itself, not its content: zlib must notice the
     * missing end of the deflate stream. */
    img_path = write_file("img.gz", 1, img, sizeof(img));
    cr_assert_eq(truncate(img_path, 20), 0);
    cr_assert_eq(
        ps_dataset_load(&ds, img_path, write_file("lab", 0, lab, sizeof(lab)), err, sizeof(err)),
        -PS_EFORMAT, "%s", err);
    cr_assert_not_null(strstr(err, img_path), "%s", err);
}

Test(dataset, missing_file)
{
    unsigned char lab[LAB_BYTES];
    char img_path[128], err[512];
    ps_dataset ds;

    label_bytes(lab);
    snprintf(img_path, sizeof(img_path), "%s/no-such-file", tmpdir);
    cr_assert_eq(
        ps_dataset_load(&ds, img_path, write_file("lab", 0, lab, sizeof(lab)), err, sizeof(err)),
        -ENOENT, "%s", err);
    cr_assert_not_null(strstr(err, img_path), "%s", err);
}

Test(dataset, load_dir_prefers_gzip_then_plain)
{
    unsigned char img[IMG_BYTES], lab[LAB_BYTES];
    ps_dataset ds;
    char err[512], dir[128], want[160];

    image_bytes(img);
    label_bytes(lab);
    /* A .gz and a plain file side by side: the .gz one must win, which the
     * plain file would show by failing. */
    write_file("train-images-idx3-ubyte.gz", 1, img, sizeof(img));
    write_file("train-images-idx3-ubyte", 0, img, 3);
    write_file("train-labels-idx1-ubyte.gz", 1, lab, sizeof(lab));
    cr_assert_eq(ps_dataset_load_dir(&ds, tmpdir, 1, err, sizeof(err)), 0, "%s", err);
    assert_good(&ds);
    ps_dataset_free(&ds);

    /* Only plain files: they are used. */
    write_file("t10k-images-idx3-ubyte", 0, img, sizeof(img));
    write_file("t10k-labels-idx1-ubyte", 0, lab, sizeof(lab));
    cr_assert_eq(ps_dataset_load_dir(&ds, tmpdir, 0, err, sizeof(err)), 0, "%s", err);
    assert_good(&ds);
    ps_dataset_free(&ds);

    /* Neither: the error names the preferred .gz file. */
    snprintf(dir, sizeof(dir), "%s/empty", tmpdir);
    cr_assert_eq(mkdir(dir, 0755), 0);
    snprintf(want, sizeof(want), "%s/train-labels-idx1-ubyte.gz", dir);
    cr_assert_eq(ps_dataset_load_dir(&ds, dir, 1, err, sizeof(err)), -ENOENT, "%s", err);
    cr_assert_not_null(strstr(err, want), "%s", err);
    /* No folder at all: that is the mistake to name, not a file in it. */
    snprintf(dir, sizeof(dir), "%s/nowhere", tmpdir);
    snprintf(want, sizeof(want), "--data %s: no such folder", dir);
    cr_assert_eq(ps_dataset_load_dir(&ds, dir, 1, err, sizeof(err)), -ENOENT, "%s", err);
    cr_assert_str_eq(err, want);
}

Test(dataset, real_fashion_mnist, .timeout = 60)
{
    ps_dataset ds;
    char err[512];
    int per_class[10] = {0};
    char probe[256];

    snprintf(probe, sizeof(probe), "%s/train-labels-idx1-ubyte.gz", PS_DEFAULT_DATA_DIR);
    if (access(probe, R_OK) != 0)
        cr_skip_test("Fashion-MNIST not installed in %s", PS_DEFAULT_DATA_DIR);

    cr_assert_eq(ps_dataset_load_dir(&ds, PS_DEFAULT_DATA_DIR, 1, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(ds.n, 60000);
    cr_assert_eq(ds.shape.ndim, 3);
    cr_assert_eq(ds.shape.d[0], 1);
    cr_assert_eq(ds.shape.d[1], 28);
    cr_assert_eq(ds.shape.d[2], 28);
    cr_assert_eq(ds.classes, 10);
    /* Fashion-MNIST is balanced: 6000 training images per class. */
    for (int i = 0; i < ds.n; i++)
        per_class[ds.labels[i]]++;
    for (int c = 0; c < 10; c++)
        cr_assert_eq(per_class[c], 6000, "class %d has %d", c, per_class[c]);
    ps_dataset_free(&ds);

    cr_assert_eq(ps_dataset_load_dir(&ds, PS_DEFAULT_DATA_DIR, 0, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(ds.n, 10000);
    cr_assert_eq(ds.features, 784);
    ps_dataset_free(&ds);
}

Test(dataset, epoch_order_is_a_deterministic_permutation)
{
    enum { N = 1000 };
    static uint32_t a[N], b[N], c[N], d[N];
    static unsigned char seen[N];

    ps_dataset_epoch_order(7, 3, N, a);
    for (int i = 0; i < N; i++) {
        cr_assert_lt(a[i], N);
        cr_assert_eq(seen[a[i]], 0, "%u appears twice", a[i]);
        seen[a[i]] = 1;
    }
    ps_dataset_epoch_order(7, 3, N, b);
    cr_assert_eq(memcmp(a, b, sizeof(a)), 0, "same (seed, epoch), different order");
    ps_dataset_epoch_order(7, 4, N, c);
    cr_assert_neq(memcmp(a, c, sizeof(a)), 0, "epochs 3 and 4 share an order");
    ps_dataset_epoch_order(8, 3, N, d);
    cr_assert_neq(memcmp(a, d, sizeof(a)), 0, "seeds 7 and 8 share an order");

    /* Degenerate sizes must not touch anything beyond n. */
    a[0] = 12345;
    ps_dataset_epoch_order(7, 0, 1, a);
    cr_assert_eq(a[0], 0);
    ps_dataset_epoch_order(7, 0, 0, a);
}

Test(dataset, gather_normalises)
{
    unsigned char img[IMG_BYTES], lab[LAB_BYTES];
    const uint32_t idx[3] = {4, 0, 4};
    float x[3 * ROWS * COLS];
    uint8_t y[3];
    ps_dataset ds;
    char err[256];

    image_bytes(img);
    label_bytes(lab);
    /* Include the extremes 0 and 255 in sample 4. */
    img[16 + 4 * ROWS * COLS] = 0;
    img[16 + 4 * ROWS * COLS + 1] = 255;
    cr_assert_eq(ps_dataset_load(&ds, write_file("img", 0, img, sizeof(img)),
                                 write_file("lab", 0, lab, sizeof(lab)), err, sizeof(err)),
                 0, "%s", err);
    ps_dataset_gather(&ds, idx, 3, x, y);
    for (int b = 0; b < 3; b++) {
        cr_assert_eq(y[b], 9 - idx[b]);
        for (int k = 0; k < ROWS * COLS; k++) {
            double p = ds.pixels[idx[b] * ROWS * COLS + k];
            double want = (p / 255.0 - 0.2860) / 0.3530;
            cr_assert(fabs(x[b * ROWS * COLS + k] - want) <= 1e-6, "x[%d][%d] = %.8g, want %.8g", b,
                      k, x[b * ROWS * COLS + k], want);
        }
    }
    cr_assert(fabs(x[0] + 0.2860 / 0.3530) <= 1e-6, "pixel 0 maps to -mean/std");
    cr_assert(fabs(x[1] - (1.0 - 0.2860) / 0.3530) <= 1e-6, "pixel 255 maps to (1-mean)/std");
    ps_dataset_free(&ds);
}

/* An IDX file of the given type byte and dimensions around data. */
static const char *write_idx(const char *name, int gz, uint8_t type, const uint32_t *dims,
                             int ndims, const void *data, size_t len)
{
    unsigned char buf[4096];

    cr_assert_leq(4 + 4 * (size_t)ndims + len, sizeof(buf));
    put_be32(buf, (uint32_t)type << 8 | (uint32_t)ndims);
    for (int i = 0; i < ndims; i++)
        put_be32(buf + 4 + 4 * i, dims[i]);
    memcpy(buf + 4 + 4 * ndims, data, len);
    return write_file(name, gz, buf, 4 + 4 * (size_t)ndims + len);
}

/* A .npy file (format 1.0) as np.save writes it: the header dict padded with
 * spaces to a multiple of 64 bytes, then the data. */
static const char *write_npy(const char *name, int gz, const char *descr, const char *shape,
                             int fortran, const void *data, size_t len)
{
    unsigned char buf[4096];
    char dict[256];
    int dl = snprintf(dict, sizeof(dict), "{'descr': '%s', 'fortran_order': %s, 'shape': %s, }",
                      descr, fortran ? "True" : "False", shape);
    size_t hl = (size_t)dl + 1;

    hl += (64 - (10 + hl) % 64) % 64;
    cr_assert_leq(10 + hl + len, sizeof(buf));
    memcpy(buf, "\x93NUMPY\x01\x00", 8);
    buf[8] = (unsigned char)hl;
    buf[9] = (unsigned char)(hl >> 8);
    memset(buf + 10, ' ', hl);
    memcpy(buf + 10, dict, (size_t)dl);
    buf[10 + hl - 1] = '\n';
    memcpy(buf + 10 + hl, data, len);
    return write_file(name, gz, buf, 10 + hl + len);
}

static const uint8_t labels_u8[N_SAMPLES] = {0, 1, 2, 1, 0};

Test(dataset, idx_of_any_shape)
{
    static uint8_t px[N_SAMPLES * 12];
    uint32_t chw[4] = {N_SAMPLES, 3, 2, 2}, flat[2] = {N_SAMPLES, 12}, one[1] = {N_SAMPLES};
    uint32_t ldims[1] = {N_SAMPLES};
    const char *lab = write_idx("lab", 0, 0x08, ldims, 1, labels_u8, N_SAMPLES);
    ps_dataset ds;
    char err[256];

    for (size_t i = 0; i < sizeof(px); i++)
        px[i] = (uint8_t)i;
    cr_assert_eq(ps_dataset_load(&ds, write_idx("x4", 1, 0x08, chw, 4, px, sizeof(px)), lab, err,
                                 sizeof(err)),
                 0, "%s", err);
    cr_assert_eq(ds.shape.ndim, 3);
    cr_assert_eq(ds.shape.d[0], 3);
    cr_assert_eq(ds.shape.d[1], 2);
    cr_assert_eq(ds.shape.d[2], 2);
    cr_assert_eq(ds.features, 12);
    cr_assert_eq(ds.classes, 3);
    cr_assert_eq(ds.pixels[12 * 4 + 11], 59);
    ps_dataset_free(&ds);

    cr_assert_eq(ps_dataset_load(&ds, write_idx("x2", 0, 0x08, flat, 2, px, sizeof(px)), lab, err,
                                 sizeof(err)),
                 0, "%s", err);
    cr_assert_eq(ds.shape.ndim, 1);
    cr_assert_eq(ds.shape.d[0], 12);
    ps_dataset_free(&ds);

    cr_assert_eq(ps_dataset_load(&ds, write_idx("x1", 0, 0x08, one, 1, px, N_SAMPLES), lab, err,
                                 sizeof(err)),
                 0, "%s", err);
    cr_assert_eq(ds.shape.ndim, 1);
    cr_assert_eq(ds.features, 1);
    ps_dataset_free(&ds);

    /* A sample over 2^20 values is refused from the header alone. */
    uint32_t huge[3] = {N_SAMPLES, 1025, 1024};
    cr_assert_eq(
        ps_dataset_load(&ds, write_idx("xh", 0, 0x08, huge, 3, px, 0), lab, err, sizeof(err)),
        -PS_EFORMAT);
    cr_assert_not_null(strstr(err, "outside 1..1048576 values"), "%s", err);
}

Test(dataset, idx_float32_samples_are_used_as_given)
{
    float v[N_SAMPLES * 2];
    unsigned char be[sizeof(v)];
    uint32_t dims[2] = {N_SAMPLES, 2}, ldims[1] = {N_SAMPLES};
    const uint32_t idx[2] = {3, 0};
    float x[4];
    uint8_t y[2];
    ps_dataset ds;
    char err[256];

    for (int i = 0; i < N_SAMPLES * 2; i++) {
        uint32_t u;
        v[i] = (float)i * 1.5f - 3.0f;
        memcpy(&u, &v[i], 4);
        put_be32(be + 4 * i, u);
    }
    cr_assert_eq(ps_dataset_load(&ds, write_idx("xf", 0, 0x0D, dims, 2, be, sizeof(be)),
                                 write_idx("lab", 0, 0x08, ldims, 1, labels_u8, N_SAMPLES), err,
                                 sizeof(err)),
                 0, "%s", err);
    cr_assert_eq(ds.is_float, 1);
    cr_assert_null(ds.pixels);
    cr_assert_eq(memcmp(ds.values, v, sizeof(v)), 0);
    ps_dataset_gather(&ds, idx, 2, x, y);
    cr_assert_eq(x[0], v[6]);
    cr_assert_eq(x[1], v[7]);
    cr_assert_eq(x[2], v[0]);
    cr_assert_eq(y[0], 1);
    cr_assert_eq(y[1], 0);
    ps_dataset_free(&ds);
}

Test(dataset, npy_files)
{
    float x[N_SAMPLES * 2 * 3];
    int64_t y64[N_SAMPLES] = {4, 0, 1, 2, 3};
    int16_t y16[N_SAMPLES] = {0, 1, 0, 1, 0};
    ps_dataset ds;
    char err[256];

    for (size_t i = 0; i < sizeof(x) / sizeof(x[0]); i++)
        x[i] = (float)i / 7.0f;
    cr_assert_eq(ps_dataset_load(&ds, write_npy("x.npy", 0, "<f4", "(5, 2, 3)", 0, x, sizeof(x)),
                                 write_npy("y.npy", 0, "<i8", "(5,)", 0, y64, sizeof(y64)), err,
                                 sizeof(err)),
                 0, "%s", err);
    cr_assert_eq(ds.n, N_SAMPLES);
    cr_assert_eq(ds.shape.ndim, 3);
    cr_assert_eq(ds.shape.d[0], 1);
    cr_assert_eq(ds.shape.d[1], 2);
    cr_assert_eq(ds.shape.d[2], 3);
    cr_assert_eq(ds.classes, 5);
    cr_assert_eq(ds.is_float, 1);
    cr_assert_eq(memcmp(ds.values, x, sizeof(x)), 0);
    cr_assert_eq(ds.labels[0], 4);
    ps_dataset_free(&ds);

    /* uint8 samples, gzip-compressed, labels int16 of shape (n, 1). */
    uint8_t px[N_SAMPLES * 4] = {0, 255, 7, 9};
    cr_assert_eq(ps_dataset_load(&ds, write_npy("x.npy.gz", 1, "|u1", "(5, 4)", 0, px, sizeof(px)),
                                 write_npy("y16.npy", 0, "<i2", "(5, 1)", 0, y16, sizeof(y16)), err,
                                 sizeof(err)),
                 0, "%s", err);
    cr_assert_eq(ds.shape.ndim, 1);
    cr_assert_eq(ds.shape.d[0], 4);
    cr_assert_eq(ds.is_float, 0);
    cr_assert_eq(ds.pixels[1], 255);
    cr_assert_eq(ds.classes, 2);
    ps_dataset_free(&ds);

    /* Big-endian floats are swapped; 1-D Fortran order is the same as C. */
    unsigned char be[N_SAMPLES * 4];
    for (int i = 0; i < N_SAMPLES; i++) {
        float f = (float)i + 0.25f;
        uint32_t u;
        memcpy(&u, &f, 4);
        put_be32(be + 4 * i, u);
    }
    cr_assert_eq(ps_dataset_load(&ds, write_npy("xb.npy", 0, ">f4", "(5,)", 1, be, sizeof(be)),
                                 write_npy("y1.npy", 0, "|u1", "(5,)", 0, labels_u8, N_SAMPLES),
                                 err, sizeof(err)),
                 0, "%s", err);
    cr_assert_eq(ds.values[3], 3.25f);
    ps_dataset_free(&ds);
}

/* Loads samples (x) and labels (y) and expects code and a message that names
 * the file bad and mentions must. */
static void expect_npy_failure(const char *x, const char *y, const char *bad, int code,
                               const char *must)
{
    ps_dataset ds;
    char err[512];

    cr_assert_eq(ps_dataset_load(&ds, x, y, err, sizeof(err)), code, "got %s", err);
    cr_assert_not_null(strstr(err, bad), "message lacks the path %s: %s", bad, err);
    cr_assert_not_null(strstr(err, must), "message lacks \"%s\": %s", must, err);
    cr_assert_null(strchr(err, '\n'), "message is not one line: %s", err);
    cr_assert_null(ds.values);
    cr_assert_null(ds.labels);
}

Test(dataset, npy_malformed)
{
    float x[N_SAMPLES * 2] = {0};
    double x64[N_SAMPLES] = {0};
    float yf[N_SAMPLES] = {0};
    int32_t y32[N_SAMPLES] = {0, 1, 2, 3, 4};
    const char *good_x = write_npy("gx.npy", 0, "<f4", "(5, 2)", 0, x, sizeof(x));
    const char *good_y = write_npy("gy.npy", 0, "<i4", "(5,)", 0, y32, sizeof(y32));
    const char *p;

    p = write_npy("trunc.npy", 0, "<f4", "(5, 2)", 0, x, sizeof(x) - 4);
    expect_npy_failure(p, good_y, p, -PS_EFORMAT, "truncated");
    p = write_npy("trunc.npy.gz", 1, "<f4", "(5, 2)", 0, x, sizeof(x) - 4);
    expect_npy_failure(p, good_y, p, -PS_EFORMAT, "truncated");
    p = write_npy("f8.npy", 0, "<f8", "(5,)", 0, x64, sizeof(x64));
    expect_npy_failure(p, good_y, p, -PS_EFORMAT, "samples are <f8; they must be uint8 or float32");
    p = write_npy("fortran.npy", 0, "<f4", "(5, 2)", 1, x, sizeof(x));
    expect_npy_failure(p, good_y, p, -PS_EFORMAT, "Fortran-ordered");
    p = write_npy("yf.npy", 0, "<f4", "(5,)", 0, yf, sizeof(yf));
    expect_npy_failure(good_x, p, p, -PS_EFORMAT, "labels are <f4; they must be integers");
    p = write_npy("y2d.npy", 0, "<i4", "(1, 5)", 0, y32, sizeof(y32));
    expect_npy_failure(good_x, p, p, -PS_EFORMAT, "holds 1 labels");
    p = write_npy("y2.npy", 0, "<i4", "(5, 1, 1)", 0, y32, sizeof(y32));
    expect_npy_failure(good_x, p, p, -PS_EFORMAT, "labels must have shape (n,) or (n, 1)");
    p = write_npy("y4.npy", 0, "<i4", "(4,)", 0, y32, 16);
    expect_npy_failure(good_x, p, good_x, -PS_EFORMAT, "holds 5 samples but");
    int32_t y6[N_SAMPLES + 1] = {0};
    p = write_npy("long.npy", 0, "<i4", "(5,)", 0, y6, sizeof(y6));
    expect_npy_failure(good_x, p, p, -PS_EFORMAT, "continues past");
    y32[4] = 256;
    p = write_npy("y256.npy", 0, "<i4", "(5,)", 0, y32, sizeof(y32));
    expect_npy_failure(good_x, p, p, -PS_EFORMAT, "label 256 of sample 4");
    x[3] = NAN;
    p = write_npy("nan.npy", 0, "<f4", "(5, 2)", 0, x, sizeof(x));
    expect_npy_failure(p, good_y, p, -PS_EFORMAT, "value 1 of sample 1 is not finite");
    p = write_file("junk.npy", 0, (const unsigned char *)"\x93NUMPY\x09\x00\x10\x00", 10);
    expect_npy_failure(p, good_y, p, -PS_EFORMAT, "version 9.0 is not supported");
}

Test(dataset, load_dir_npy_and_class_names)
{
    uint8_t px[N_SAMPLES * 4] = {0};
    uint8_t y[N_SAMPLES] = {0, 1, 1, 0, 1};
    ps_dataset train, test;
    char err[512];
    FILE *f;

    write_npy("train_x.npy", 0, "|u1", "(5, 2, 2)", 0, px, sizeof(px));
    write_npy("train_y.npy", 0, "|u1", "(5,)", 0, y, sizeof(y));
    write_npy("test_x.npy", 0, "|u1", "(5, 2, 2)", 0, px, sizeof(px));
    y[1] = y[2] = y[4] = 3;
    write_npy("test_y.npy", 0, "|u1", "(5,)", 0, y, sizeof(y));
    cr_assert_eq(ps_dataset_load_dir(&train, tmpdir, 1, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(ps_dataset_load_dir(&test, tmpdir, 0, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(train.classes, 2);
    cr_assert_eq(test.classes, 4);
    cr_assert_eq(train.shape.d[1], 2);
    cr_assert_eq(ps_dataset_match(&train, &test, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(train.classes, 4, "the larger class count wins");
    ps_dataset_free(&test);
    ps_dataset_free(&train);

    /* classes.txt: five names (a blank line does not count). */
    cr_assert_lt(n_paths, MAX_FILES);
    snprintf(paths[n_paths], sizeof(paths[0]), "%s/classes.txt", tmpdir);
    f = fopen(paths[n_paths++], "w");
    cr_assert_not_null(f);
    fputs("shirt\ntrouser\n\npullover\ndress\ncoat", f);
    fclose(f);
    cr_assert_eq(ps_dataset_load_dir(&train, tmpdir, 1, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(train.classes, 5);
    ps_dataset_free(&train);
    f = fopen(paths[n_paths - 1], "w");
    fputs("shirt\ntrouser\n", f);
    fclose(f);
    cr_assert_eq(ps_dataset_load_dir(&test, tmpdir, 0, err, sizeof(err)), -PS_EFORMAT);
    cr_assert_not_null(strstr(err, "classes.txt names 2 classes but the labels go up to 3"), "%s",
                       err);
}

Test(dataset, match_refuses_different_shapes)
{
    uint8_t px[N_SAMPLES * 6] = {0};
    ps_dataset a, b;
    char err[512];

    cr_assert_eq(ps_dataset_load(&a, write_npy("a.npy", 0, "|u1", "(5, 2, 3)", 0, px, sizeof(px)),
                                 write_npy("y.npy", 0, "|u1", "(5,)", 0, labels_u8, N_SAMPLES), err,
                                 sizeof(err)),
                 0, "%s", err);
    cr_assert_eq(ps_dataset_load(&b, write_npy("b.npy", 0, "|u1", "(5, 3, 2)", 0, px, sizeof(px)),
                                 write_npy("y2.npy", 0, "|u1", "(5,)", 0, labels_u8, N_SAMPLES),
                                 err, sizeof(err)),
                 0, "%s", err);
    cr_assert_eq(ps_dataset_match(&a, &b, err, sizeof(err)), -PS_EFORMAT);
    cr_assert_not_null(strstr(err, "training samples are 1x2x3 uint8 but the test samples are "
                                   "1x3x2 uint8"),
                       "%s", err);
    ps_dataset_free(&a);
    ps_dataset_free(&b);
}
