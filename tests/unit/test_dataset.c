/* Unit tests of the IDX loader and the epoch order. Small IDX files, plain
 * and gzip, are written into a fresh temporary directory per test; every
 * malformed case must come back with its exact error code and a one-line
 * message that names the offending file. The real Fashion-MNIST is loaded
 * too where the machine has it. */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
    cr_assert_eq(ds->rows, ROWS);
    cr_assert_eq(ds->cols, COLS);
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
    put_be32(lab, 0x00000803);
    for (int gz = 0; gz < 2; gz++)
        expect_failure('l', gz, lab, sizeof(lab), -PS_EFORMAT, "wrong magic 0x00000803");
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
    expect_failure('l', 0, lab, sizeof(lab) - 1, -PS_EFORMAT, "/img holds 5 images");
}

Test(dataset, label_out_of_range)
{
    unsigned char lab[LAB_BYTES];

    label_bytes(lab);
    lab[8 + 3] = 10;
    for (int gz = 0; gz < 2; gz++)
        expect_failure('l', gz, lab, sizeof(lab), -PS_EFORMAT, "label 10 of sample 3");
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
    snprintf(dir, sizeof(dir), "%s/nowhere", tmpdir);
    snprintf(want, sizeof(want), "%s/train-labels-idx1-ubyte.gz", dir);
    cr_assert_eq(ps_dataset_load_dir(&ds, dir, 1, err, sizeof(err)), -ENOENT, "%s", err);
    cr_assert_not_null(strstr(err, want), "%s", err);
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
    cr_assert_eq(ds.rows, 28);
    cr_assert_eq(ds.cols, 28);
    /* Fashion-MNIST is balanced: 6000 training images per class. */
    for (int i = 0; i < ds.n; i++)
        per_class[ds.labels[i]]++;
    for (int c = 0; c < 10; c++)
        cr_assert_eq(per_class[c], 6000, "class %d has %d", c, per_class[c]);
    ps_dataset_free(&ds);

    cr_assert_eq(ps_dataset_load_dir(&ds, PS_DEFAULT_DATA_DIR, 0, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(ds.n, 10000);
    cr_assert_eq(ds.rows, 28);
    cr_assert_eq(ds.cols, 28);
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
