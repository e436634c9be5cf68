/* What the implementations of the compute backend share with backend.c, and
 * nothing else includes: the common head of every backend object and its
 * table of operations. Each implementation allocates a struct that begins
 * with a ps_backend, fills in the head (operations, device, sizes,
 * description and the host buffers), and frees the whole struct in its free
 * operation. */
#ifndef PS_BACKEND_IMPL_H
#define PS_BACKEND_IMPL_H

#include <stddef.h>

#include "backend.h"

typedef struct {
    void (*free)(ps_backend *b);
    int (*load_params)(ps_backend *b);
    int (*train_step)(ps_backend *b, const float *x, const uint8_t *y, int B, uint64_t step,
                      float *loss, int *correct);
    int (*evaluate)(ps_backend *b, const float *x, const uint8_t *y, int n, float *loss,
                    int *correct);
} ps__backend_ops;

struct ps_backend {
    const ps__backend_ops *ops;
    ps_device device;
    int max_batch, classes;
    size_t input_n; /* floats per sample */
    char describe[256];
    /* Host buffers indexed by tensor id, and the batch's, owned by the
     * implementation. */
    float *params[PS_MAX_MODEL_TENSORS];
    float *grads[PS_MAX_MODEL_TENSORS];
    float *batch_x;
    uint8_t *batch_y;
    ps_backend_layer_cb on_layer; /* see ps_backend_on_layer_grads */
    void *on_layer_arg;
};

/* The CPU backend: ps_model on the CPU's table. Returns 0, -EINVAL or
 * -ENOMEM. */
int ps__backend_cpu_init(ps_backend **out, const ps_model_desc *desc, const ps_model_spec *spec,
                         const ps_backend_config *cfg);

/* The CUDA backend. Returns -ENODEV, with the reason in why (always
 * NUL-terminated) and nothing logged, when there is no usable GPU or the
 * build has no CUDA; any other failure is logged and returned as for
 * ps_backend_init. One function with two bodies, of which CMake links
 * exactly one: backend_cuda.c where it found the CUDA toolkit,
 * backend_nocuda.c (which only says why not) elsewhere. */
int ps__backend_cuda_init(ps_backend **out, const ps_model_desc *desc, const ps_model_spec *spec,
                          const ps_backend_config *cfg, char *why, size_t why_len);

#endif
