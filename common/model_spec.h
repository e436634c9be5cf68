/* The model every process agrees on: an ordered list of named float32 tensors
 * (the tensor table).
 *
 * Servers and workers each build the table from the same description (a model
 * file through model_desc, or the MLP's layer sizes) and seed, and must arrive
 * at the same tensors, shapes and fingerprint; the
 * fingerprint travels in the handshake so a mismatched peer is refused. Initial
 * values are a pure function of (seed, tensor, element index), so they do not
 * depend on how tensors are cut into chunks or how many servers hold them. */
#ifndef PS_MODEL_SPEC_H
#define PS_MODEL_SPEC_H

#include <stddef.h>
#include <stdint.h>

#define PS_MAX_LAYERS  16
#define PS_MAX_TENSORS (2 * PS_MAX_LAYERS)
#define PS_MAX_DIMS    4

typedef enum {
    PS_INIT_ZERO,
    /* Uniform(-b, b) with b = sqrt(6 / fan_in): He initialisation for ReLU layers. */
    PS_INIT_HE_UNIFORM,
    /* Uniform(-b, b) with b = sqrt(6 / (fan_in + fan_out)): Xavier, for the output layer. */
    PS_INIT_XAVIER_UNIFORM,
} ps_init_kind;

typedef struct {
    char name[32]; /* "fc1.weight", "conv1.bias", ... */
    /* The tensor's shape, row-major: a dense weight [out, in], a conv2d weight
     * [out, in, kh, kw], a bias [out]. */
    int ndim;
    int shape[PS_MAX_DIMS];
    /* The same tensor seen as a matrix: rows = shape[0], cols = the product of
     * the other dimensions (1 for a bias). */
    int rows, cols;
    size_t numel;
    ps_init_kind init;
    int fan_in, fan_out;
} ps_tensor_spec;

/* A plain value type: callers read the fields, nothing inside needs freeing. */
typedef struct {
    /* The MLP view: when the model is a chain of dense layers with ReLU
     * between them, its linear layers and their sizes (input, hidden...,
     * classes); 0 layers for any other model. */
    int n_layers;
    int sizes[PS_MAX_LAYERS + 1];
    uint64_t seed;
    int n_tensors; /* weight then bias for each layer that has parameters */
    ps_tensor_spec tensors[PS_MAX_TENSORS];
    size_t total_numel;
} ps_model_spec;

/* Builds an MLP spec from sizes[0..n_sizes-1] (input, hidden..., classes).
 * Returns 0, or -EINVAL if n_sizes < 2, > PS_MAX_LAYERS + 1, or a size is < 1
 * or > 1<<20. */
int ps_model_spec_init_mlp(ps_model_spec *spec, const int *sizes, int n_sizes, uint64_t seed);

/* Appends a tensor to the table: shape[0..ndim) (each >= 1, ndim 1..PS_MAX_DIMS),
 * its init kind and the fans its bound is computed from. Returns 0, -EINVAL
 * for a bad name (empty or too long), shape or fan, or -E2BIG when the table
 * is full (PS_MAX_TENSORS) or the tensor exceeds 2^31 elements. The table's
 * seed and MLP view are left as they are. */
int ps_model_spec_add_tensor(ps_model_spec *spec, const char *name, int ndim, const int *shape,
                             ps_init_kind init, int fan_in, int fan_out);

/* Parses "256,128" into hidden sizes. Returns the count (>= 0) or -EINVAL for
 * anything but a comma-separated list of positive integers; "" is 0 layers. */
int ps_model_spec_parse_sizes(const char *text, int *sizes, int max_sizes);

/* Stable 64-bit digest (FNV-1a) of the table (count, then each tensor's name,
 * shape, init kind, fan-in and fan-out) and the seed: everything the initial
 * values depend on, so equal fingerprints mean equal initial weights. */
uint64_t ps_model_spec_fingerprint(const ps_model_spec *spec);

/* Writes the initial values of elements [offset, offset + n) of tensor
 * tensor_id into out (caller-owned, n floats). Deterministic in (seed, tensor
 * id, element index) alone. */
void ps_model_spec_init_values(const ps_model_spec *spec, int tensor_id, size_t offset, size_t n,
                               float *out);

#endif
