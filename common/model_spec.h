/* The model every process agrees on: an ordered list of named float32 tensors.
 *
 * Servers and workers each build the spec from the same flags (layer sizes and
 * seed) and must arrive at the same tensors, shapes and fingerprint; the
 * fingerprint travels in the handshake so a mismatched peer is refused. Initial
 * values are a pure function of (seed, tensor, element index), so they do not
 * depend on how tensors are cut into chunks or how many servers hold them. */
#ifndef PS_MODEL_SPEC_H
#define PS_MODEL_SPEC_H

#include <stddef.h>
#include <stdint.h>

#define PS_MAX_LAYERS  16
#define PS_MAX_TENSORS (2 * PS_MAX_LAYERS)

typedef enum {
    PS_INIT_ZERO,
    /* Uniform(-b, b) with b = sqrt(6 / fan_in): He initialisation for ReLU layers. */
    PS_INIT_HE_UNIFORM,
    /* Uniform(-b, b) with b = sqrt(6 / (fan_in + fan_out)): Xavier, for the output layer. */
    PS_INIT_XAVIER_UNIFORM,
} ps_init_kind;

typedef struct {
    char name[32];  /* "fc1.weight", "fc1.bias", ... */
    int rows, cols; /* weight: [out, in] row-major; bias: [out, 1] */
    size_t numel;
    ps_init_kind init;
    int fan_in, fan_out;
} ps_tensor_spec;

/* A plain value type: callers read the fields, nothing inside needs freeing. */
typedef struct {
    int n_layers;                 /* linear layers */
    int sizes[PS_MAX_LAYERS + 1]; /* n_layers + 1 entries: input, hidden..., classes */
    uint64_t seed;
    int n_tensors; /* 2 * n_layers: weight then bias per layer */
    ps_tensor_spec tensors[PS_MAX_TENSORS];
    size_t total_numel;
} ps_model_spec;

/* Builds an MLP spec from sizes[0..n_sizes-1] (input, hidden..., classes).
 * Returns 0, or -EINVAL if n_sizes < 2, > PS_MAX_LAYERS + 1, or a size is < 1
 * or > 1<<20. */
int ps_model_spec_init_mlp(ps_model_spec *spec, const int *sizes, int n_sizes, uint64_t seed);

/* Parses "256,128" into hidden sizes. Returns the count (>= 0) or -EINVAL for
 * anything but a comma-separated list of positive integers; "" is 0 layers. */
int ps_model_spec_parse_sizes(const char *text, int *sizes, int max_sizes);

/* Stable 64-bit digest of the layer sizes and seed (FNV-1a). */
uint64_t ps_model_spec_fingerprint(const ps_model_spec *spec);

/* Writes the initial values of elements [offset, offset + n) of tensor
 * tensor_id into out (caller-owned, n floats). Deterministic in (seed, tensor
 * id, element index) alone. */
void ps_model_spec_init_values(const ps_model_spec *spec, int tensor_id, size_t offset, size_t n,
                               float *out);

#endif
