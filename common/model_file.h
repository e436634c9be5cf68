/* Saved models: trained weights together with the description they belong
 * to, in one versioned, checksummed file that a later run (or another
 * program) can load without the job's flags.
 *
 * Layout, every integer little-endian (docs/model.md has the same table):
 *
 *     magic "SHPSMODL" (8) · format version u32 (1) · flags u32 (0)
 *     model text length u32 · model text (canonical, ps_model_desc_format)
 *     input ndim u32 (1 or 3) · input dims u32 × 3 (unused ones 0)
 *     classes u32 · seed u64 · tensor count u32
 *     per tensor: name length u32 · name · ndim u32 · dims u32 × ndim
 *     float count u64 · the tensors' values, float32, in table order
 *     CRC32C u32 of every byte before it
 *
 * Reading checks the magic and version before it reads further (a large
 * file of something else costs 12 bytes), then the size and CRC before it
 * looks at anything else, then rebuilds the table from the text, input shape, classes
 * and seed and insists that it names and shapes the same tensors the file
 * lists, so a file can never be loaded into a model it was not written for. */
#ifndef PS_MODEL_FILE_H
#define PS_MODEL_FILE_H

#include <stddef.h>

#include "model_desc.h"
#include "model_spec.h"

#define PS_MODEL_FILE_VERSION 1

/* A model read back from a file. */
typedef struct {
    ps_model_desc desc;  /* resolved against the stored input shape and classes */
    ps_model_spec table; /* its tensor table, with the stored seed */
    float *data;         /* table.total_numel floats, owned; freed by ps_saved_model_free */
    float *tensor[PS_MAX_MODEL_TENSORS]; /* tensor i's values: pointers into data */
} ps_saved_model;

/* Writes desc (resolved) with the values of every tensor of table
 * (tensors[i] holds table->tensors[i].numel floats; borrowed for the call) to
 * path atomically: a temporary file beside it, fsync, rename, fsync of the
 * directory. Returns 0; -EINVAL when desc is not resolved or table is not the
 * table desc resolves to (compared by fingerprint); -errno from the file
 * system; a one-line message in err in every failure. */
int ps_model_file_write(const char *path, const ps_model_desc *desc, const ps_model_spec *table,
                        const float *const *tensors, char *err, size_t errlen);

/* Reads path into *out (zeroed first; free with ps_saved_model_free, also
 * after a failure). Returns 0, or with "path: reason" in err: -errno (cannot
 * open or read), -PS_EFORMAT (too short or too long for what it declares,
 * wrong magic, nonzero flags, a bad model text, tensors that differ from what
 * the text makes), -PS_EVERSION (another format version), -PS_ECRC (checksum
 * mismatch), -ENOMEM. */
int ps_model_file_read(const char *path, ps_saved_model *out, char *err, size_t errlen);

void ps_saved_model_free(ps_saved_model *m);

#endif
