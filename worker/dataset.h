/* Fashion-MNIST (or any MNIST-format) data: IDX files, plain or gzip.
 *
 * Loading validates every header against the file's actual size and the
 * images against the labels, and reports problems as one line that names the
 * file and says what is wrong, for the user to read as is. */
#ifndef PS_DATASET_H
#define PS_DATASET_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int n;           /* samples */
    int rows, cols;  /* image shape; features = rows * cols */
    uint8_t *pixels; /* n * rows * cols, row-major, owned by the dataset */
    uint8_t *labels; /* n, owned by the dataset */
} ps_dataset;

/* Loads an images IDX file (magic 0x00000803) and a labels IDX file (magic
 * 0x00000801); either may be gzip-compressed (detected by content). Returns 0,
 * or a negative code with a one-line message in err (always NUL-terminated):
 * -ENOENT/-EACCES (cannot open), -PS_EFORMAT (wrong magic, truncated, counts
 * that disagree, labels >= 10 classes), -ENOMEM. */
int ps_dataset_load(ps_dataset *ds, const char *images_path, const char *labels_path, char *err,
                    size_t errlen);

/* Loads the training (train != 0: train-images-idx3-ubyte[.gz]) or test
 * (t10k-...) split from dir, preferring the .gz name. Same errors. */
int ps_dataset_load_dir(ps_dataset *ds, const char *dir, int train, char *err, size_t errlen);

void ps_dataset_free(ps_dataset *ds);

/* Writes a permutation of [0, n) for the given epoch: Fisher-Yates driven by
 * a generator seeded from (seed, epoch), identical in every process. */
void ps_dataset_epoch_order(uint64_t seed, int epoch, int n, uint32_t *perm);

/* Gathers samples idx[0..B) into x[B, features] as normalised floats
 * ((p/255 - mean) / std with Fashion-MNIST's mean 0.2860 and std 0.3530) and
 * labels into y[B]. */
void ps_dataset_gather(const ps_dataset *ds, const uint32_t *idx, int B, float *x, uint8_t *y);

#endif
