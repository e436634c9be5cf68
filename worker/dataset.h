/* The user's data: samples and integer labels, from IDX files (the MNIST
 * format, plain or gzip) or NumPy .npy files, of any sample shape.
 *
 * Loading validates every header against the file's actual size and the
 * samples against the labels, and reports problems as one line that names the
 * file and says what is wrong, for the user to read as is. docs/data.md says
 * how to export a data set from Python. */
#ifndef PS_DATASET_H
#define PS_DATASET_H

#include <stddef.h>
#include <stdint.h>

#include "model_desc.h"

/* Labels are kept as uint8, as the training kernels take them. */
#define PS_DATASET_MAX_CLASSES 256

typedef struct {
    int n; /* samples */
    /* One sample's shape: a file's dimensions after the first become flat
     * features (none or one), 1 x H x W (two) or C x H x W (three). */
    ps_act_shape shape;
    int features; /* values per sample, the product of shape */
    /* Labels are 0..classes-1: the largest label + 1, or the number of names
     * in the directory's classes.txt when it has one (named_classes). */
    int classes;
    int named_classes;
    /* Float32 samples are used as given (values); uint8 ones (pixels) are
     * normalised when gathered. Exactly one of the two is set. */
    int is_float;
    uint8_t *pixels; /* n * features, row-major, owned by the dataset */
    float *values;   /* n * features, row-major, owned by the dataset */
    uint8_t *labels; /* n, owned by the dataset */
} ps_dataset;

/* Loads samples from samples_path and labels from labels_path. Each is an IDX
 * file (samples: uint8 or float32, one to four dimensions, the first counting
 * samples; labels: one dimension, any IDX integer type) or a .npy file
 * (samples: uint8 '|u1' or float32 '<f4'/'>f4', C order, first axis = samples;
 * labels: any integer dtype, shape (n,) or (n, 1)), either gzip-compressed or
 * not; the format is told by content. Returns 0, or a negative code with a
 * one-line message naming the file in err (always NUL-terminated):
 * -ENOENT/-EACCES (cannot open), -PS_EFORMAT (wrong magic, truncated, extra
 * bytes, another dtype, Fortran order, a label outside 0..255, a non-finite
 * float sample, sample counts that differ, a sample over 2^20 values),
 * -ENOMEM. */
int ps_dataset_load(ps_dataset *ds, const char *samples_path, const char *labels_path, char *err,
                    size_t errlen);

/* Loads the training (train != 0) or test split from dir: the IDX files
 * train-images-idx3-ubyte[.gz] and train-labels-idx1-ubyte[.gz] (t10k-... for
 * the test split), preferring the .gz names, or else train_x.npy and
 * train_y.npy (test_x.npy, test_y.npy). With a dir/classes.txt (one class name
 * per non-empty line) the class count is its number of names, and a label
 * beyond it is refused. Same errors as ps_dataset_load. */
int ps_dataset_load_dir(ps_dataset *ds, const char *dir, int train, char *err, size_t errlen);

/* Checks that the test split matches the training split (same sample shape
 * and type) and gives both the larger class count. Returns 0 or -PS_EFORMAT
 * with a message. */
int ps_dataset_match(ps_dataset *train, ps_dataset *test, char *err, size_t errlen);

void ps_dataset_free(ps_dataset *ds);

/* Writes a permutation of [0, n) for the given epoch: Fisher-Yates driven by
 * a generator seeded from (seed, epoch), identical in every process. */
void ps_dataset_epoch_order(uint64_t seed, int epoch, int n, uint32_t *perm);

/* Gathers samples idx[0..B) into x[B, features] and labels into y[B]: float32
 * samples as they are, uint8 ones normalised ((p/255 - mean) / std with
 * Fashion-MNIST's mean 0.2860 and std 0.3530). */
void ps_dataset_gather(const ps_dataset *ds, const uint32_t *idx, int B, float *x, uint8_t *y);

#endif
