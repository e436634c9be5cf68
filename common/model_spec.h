/* The model every process agrees on: an ordered list of named tensors (the
 * tensor table), allocated to its size: up to PS_MAX_TENSORS tensors with
 * names of up to PS_MAX_NAME_BYTES bytes, so that real models (PyTorch's
 * dotted names, thousands of tensors) fit.
 *
 * Each tensor has a kind (a parameter the optimizer updates, a buffer only
 * its writer sets, a frozen parameter nobody changes), a dtype (float32, or
 * int64 for buffers such as a batch norm's counter, carried exactly) and a
 * way to get its initial values: drawn by the servers from the seed (a pure
 * function of seed, tensor and element, so they do not depend on how
 * tensors are cut into chunks or how many servers hold them), or sent by
 * the worker that declares the table. Every process computes the same
 * digest of the table (ps_model_spec_digest), which the handshake compares.
 *
 * Values travel and are stored as 4-byte words: a float32 value is one, an
 * int64 value two (its little-endian bytes, never converted), so the
 * partition, the servers' chunks and checkpoints need not know dtypes. */
#ifndef PS_MODEL_SPEC_H
#define PS_MODEL_SPEC_H

#include <stddef.h>
#include <stdint.h>

#include "row_table.h"

#define PS_MAX_LAYERS 16
/* A model description's table (the C worker's: a weight and a bias per
 * layer); a job's table may be far larger. */
#define PS_MAX_MODEL_TENSORS (2 * PS_MAX_LAYERS)
/* A job's table at most. */
#define PS_MAX_TENSORS    4096
#define PS_MAX_NAME_BYTES 255
#define PS_MAX_DIMS       4
/* Bytes of ps_model_spec_digest. */
#define PS_TABLE_DIGEST_BYTES 32

typedef enum {
    PS_INIT_ZERO,
    /* Uniform(-b, b) with b = sqrt(6 / fan_in): He initialisation for ReLU layers. */
    PS_INIT_HE_UNIFORM,
    /* Uniform(-b, b) with b = sqrt(6 / (fan_in + fan_out)): Xavier, for the output layer. */
    PS_INIT_XAVIER_UNIFORM,
    /* The worker that declares the table sends them (a model's own values,
     * pretrained weights); the servers draw nothing. */
    PS_INIT_VALUES,
} ps_init_kind;

typedef enum {
    PS_KIND_PARAMETER, /* pushed gradients update it through the optimizer */
    PS_KIND_BUFFER,    /* written by rank 0 alone, bypassing the optimizer (running statistics) */
    PS_KIND_FROZEN,    /* pulled, never changed (requires_grad=False) */
} ps_tensor_kind;

typedef enum {
    PS_DTYPE_F32,
    PS_DTYPE_I64, /* buffers and frozen tensors only; never seen by the optimizer */
} ps_tensor_dtype;

typedef struct {
    char name[PS_MAX_NAME_BYTES + 1]; /* "fc1.weight", "layer1.0.bn1.running_mean", ... */
    /* The tensor's shape, row-major: a dense weight [out, in], a conv2d weight
     * [out, in, kh, kw], a bias [out]. */
    int ndim;
    int shape[PS_MAX_DIMS];
    /* The same tensor seen as a matrix: rows = shape[0], cols = the product of
     * the other dimensions (1 for a bias). */
    int rows, cols;
    size_t numel; /* elements */
    size_t words; /* 4-byte words its values take: numel, or 2 numel for int64 */
    ps_init_kind init;
    int fan_in, fan_out;
    ps_tensor_kind kind;
    ps_tensor_dtype dtype;
} ps_tensor_spec;

/* The table. Zeroed, it is empty; it owns its tensors: free it with
 * ps_model_spec_free, copy it with ps_model_spec_copy (a struct assignment
 * would share them). */
typedef struct {
    /* The MLP view: when the model is a chain of dense layers with ReLU
     * between them, its linear layers and their sizes (input, hidden...,
     * classes); 0 layers for any other model. */
    int n_layers;
    int sizes[PS_MAX_LAYERS + 1];
    uint64_t seed;
    int n_tensors;
    int cap;                 /* room in tensors */
    ps_tensor_spec *tensors; /* owned; NULL while empty */
    size_t total_numel;      /* elements of all tensors */
    size_t total_words;      /* 4-byte words of all their values */
    /* The job's embedding tables (row table id = position; row_table.h),
     * owned; NULL while none. */
    int n_row_tables;
    ps_row_table_spec *row_tables;
} ps_model_spec;

/* One tensor to add (ps_model_spec_add); everything is copied. */
typedef struct {
    const char *name;
    int ndim;
    const int *shape;
    ps_init_kind init;
    int fan_in, fan_out; /* >= 1; only the seeded kinds read them */
    ps_tensor_kind kind;
    ps_tensor_dtype dtype;
} ps_tensor_decl;

/* Builds an MLP spec from sizes[0..n_sizes-1] (input, hidden..., classes),
 * overwriting spec (free what it held first). Returns 0, or -EINVAL if
 * n_sizes < 2, > PS_MAX_LAYERS + 1, or a size is < 1 or > 1<<20, or
 * -ENOMEM; spec is empty after a failure. */
int ps_model_spec_init_mlp(ps_model_spec *spec, const int *sizes, int n_sizes, uint64_t seed);

/* Appends a tensor to the table. Returns 0, -EINVAL for a bad name
 * (ps_model_spec_name_ok), shape (ndim 1..PS_MAX_DIMS, each >= 1), fan,
 * kind, dtype or a combination that cannot be (int64 is for buffers and
 * frozen tensors, with zeros or declared values: the seeded kinds draw
 * floats, and the optimizer updates floats), -E2BIG when the table holds
 * PS_MAX_TENSORS or the tensor exceeds 2^31 elements, or -ENOMEM. Names
 * are not compared here (ps_model_spec_duplicate). The table's seed and MLP
 * view are left as they are; a refused tensor is not added. */
int ps_model_spec_add(ps_model_spec *spec, const ps_tensor_decl *d);
/* ps_model_spec_add for a float32 parameter drawn by the servers. */
int ps_model_spec_add_tensor(ps_model_spec *spec, const char *name, int ndim, const int *shape,
                             ps_init_kind init, int fan_in, int fan_out);

/* Appends an embedding table (copied) once it passes ps_row_table_check
 * and its name is not another row table's. Returns 0, -EINVAL (the reason
 * in why, which may be NULL), -E2BIG past PS_MAX_ROW_TABLES, or -ENOMEM. */
int ps_model_spec_add_row_table(ps_model_spec *spec, const ps_row_table_spec *t, char *why,
                                size_t why_len);

/* Frees what spec holds and leaves it empty (its seed and MLP view too).
 * NULL and an empty spec are allowed. */
void ps_model_spec_free(ps_model_spec *spec);
/* Makes dst an owned copy of src, overwriting dst (free what it held
 * first). Returns 0 or -ENOMEM (dst empty). */
int ps_model_spec_copy(ps_model_spec *dst, const ps_model_spec *src);

/* Whether name is 1..PS_MAX_NAME_BYTES bytes of printable ASCII other than
 * the space (0x21-0x7e): PyTorch's dotted names and more, nothing that could
 * break a log line. */
int ps_model_spec_name_ok(const char *name);
/* The index of a tensor whose name an earlier one has too, or -1 when all
 * are unique (sorted, so large tables are not compared pair by pair).
 * -ENOMEM when the sort has no memory. */
int ps_model_spec_duplicate(const ps_model_spec *spec);

/* Parses "256,128" into hidden sizes. Returns the count (>= 0) or -EINVAL for
 * anything but a comma-separated list of positive integers; "" is 0 layers. */
int ps_model_spec_parse_sizes(const char *text, int *sizes, int max_sizes);

/* BLAKE2b-256 over a canonical encoding of the table (every fixed-width
 * value little-endian, names length-prefixed: the count, then each tensor's
 * name, shape, kind, dtype, init kind and fans, then the seed): everything
 * the tensors and their seeded values depend on, so equal digests mean the
 * same table; then, when it has any, the row tables, each field in order,
 * doubles by their bits). What a HELLO carries instead of the table. */
void ps_model_spec_digest(const ps_model_spec *spec, uint8_t out[PS_TABLE_DIGEST_BYTES]);
/* The digest's first 8 bytes as a little-endian number: for checkpoint
 * headers and log lines. */
uint64_t ps_model_spec_fingerprint(const ps_model_spec *spec);

/* Writes the initial words [offset, offset + n) of tensor tensor_id into out
 * (caller-owned, n words) as the servers draw them: deterministic in (seed,
 * tensor id, element index) alone. Zeros for PS_INIT_ZERO and for
 * PS_INIT_VALUES, whose values come from the declarer. */
void ps_model_spec_init_values(const ps_model_spec *spec, int tensor_id, size_t offset, size_t n,
                               float *out);

/* "parameter", "buffer", "frozen"; "float32", "int64"; "zero", ...,
 * "values": for messages. */
const char *ps_tensor_kind_name(ps_tensor_kind k);
const char *ps_tensor_dtype_name(ps_tensor_dtype d);
const char *ps_init_kind_name(ps_init_kind k);

#endif
