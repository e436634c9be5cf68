/* The worker's compute backend: where the model's forward and backward
 * passes run. One executor (model.h) runs every model a model file
 * describes, over one of two tables of operations (backend_ops.h): "cpu"
 * (the layer library on OpenBLAS, and the reference the other is tested
 * against) and "cuda" (cuBLAS and kernels/layers_cuda.cu, weights,
 * activations and gradients kept on the GPU). --device auto picks CUDA when
 * a usable GPU is present, and the CPU otherwise.
 *
 * The key-value client moves weights and gradients between the servers and
 * host memory, so the backend hands out host buffers indexed by tensor id: the
 * client pulls into ps_backend_params() and pushes from ps_backend_grads().
 * On the CPU those are the model's own arrays; on CUDA they are pinned host
 * mirrors, uploaded by ps_backend_load_params() layer by layer (the forward
 * pass waits for each layer's upload only) and filled by train_step layer by
 * layer as the GPU produces each layer's gradients (the callback of
 * ps_backend_on_layer_grads runs for a layer as soon as its gradients are in
 * the mirrors, while the GPU goes on with the layers below). The worker
 * gathers its batches into ps_backend_batch_x()/_y(), pinned on CUDA, so
 * their upload needs no staging copy. */
#ifndef PS_BACKEND_H
#define PS_BACKEND_H

#include <stdint.h>

#include "model_desc.h"
#include "model_spec.h"

typedef enum {
    PS_DEVICE_AUTO, /* CUDA when a usable GPU is present, else the CPU */
    PS_DEVICE_CPU,
    PS_DEVICE_CUDA,
} ps_device;

typedef enum {
    PS_PRECISION_FP32, /* products in float32 (or TF32 under --tf32) */
    PS_PRECISION_BF16, /* CUDA: products on bfloat16 inputs, float32 accumulation */
} ps_precision;

typedef struct {
    ps_device device;
    int max_batch;    /* largest B of train_step, and evaluate's batch size */
    int tf32;         /* CUDA: matrix products in TF32 on tensor cores; ignored on the CPU */
    int device_index; /* CUDA: use GPU device_index % (GPUs visible), e.g. the worker's rank */
    /* CPU: BLAS threads, a setting of the whole process (0: the library's
     * default, e.g. OPENBLAS_NUM_THREADS); ignored on CUDA. */
    int threads;
    /* Dropout masks: a seed particular to this worker (model.h). */
    uint64_t dropout_seed;
    /* --precision: bf16 needs CUDA; the CPU refuses it (docs/gpu.md). */
    ps_precision precision;
    /* --clip-norm: each tensor's gradient scaled to at most this L2 norm
     * before it is handed out (0: off); on CUDA, on the GPU. */
    double clip_norm;
    /* CUDA: the gradients are rounded to bfloat16 on the GPU before they are
     * copied to the host (--compress bf16: the client would round them
     * there anyway, to the same bits); ignored on the CPU. */
    int narrow_bf16;
} ps_backend_config;

typedef struct ps_backend ps_backend;

/* "auto", "cpu" or "cuda" to a ps_device. Returns 0 or -EINVAL. */
int ps_backend_parse_device(const char *name, ps_device *out);
/* "fp32" or "bf16" to a ps_precision. Returns 0 or -EINVAL. */
int ps_backend_parse_precision(const char *name, ps_precision *out);

/* Creates the model desc describes (resolved; copied) with the tensor table
 * it resolved to (copied) on the configured device, parameters at the
 * table's initial values. Returns 0 or a negative code, having logged one
 * line that says why: -ENODEV when --device cuda finds no usable GPU (or the
 * build has no CUDA), or --precision bf16 finds none; -EINVAL for a bad
 * description or max_batch, or --precision bf16 with --device cpu; -ENOMEM,
 * -EIO for any other CUDA or cuBLAS failure. */
int ps_backend_init(ps_backend **out, const ps_model_desc *desc, const ps_model_spec *spec,
                    const ps_backend_config *cfg);
/* Frees everything the backend allocated, host and device. NULL is allowed. */
void ps_backend_free(ps_backend *b);

/* The device actually chosen: PS_DEVICE_CPU or PS_DEVICE_CUDA. */
ps_device ps_backend_device(const ps_backend *b);
/* One line for the log saying what computes, and under --device auto why;
 * owned by the backend. */
const char *ps_backend_describe(const ps_backend *b);

/* Host buffers of spec->tensors[tensor_id].numel floats, owned by the
 * backend and valid until ps_backend_free. Write the parameters into the
 * first, then call ps_backend_load_params; read the gradients from the second
 * after train_step. */
float *ps_backend_params(ps_backend *b, int tensor_id);
float *ps_backend_grads(ps_backend *b, int tensor_id);

/* Host buffers of max_batch samples and labels, owned by the backend (pinned
 * on CUDA): a batch gathered here goes to the device without a staging
 * copy. train_step and evaluate take other memory too. */
float *ps_backend_batch_x(ps_backend *b);
uint8_t *ps_backend_batch_y(ps_backend *b);

/* Makes the host parameter buffers the model's parameters (on CUDA: starts
 * their upload, first layer first, so the next forward pass can begin before
 * the last layer has arrived). The parameter buffers must not be written
 * again until the next train_step or evaluate has returned. Returns 0 or a
 * negative code. */
int ps_backend_load_params(ps_backend *b);

/* Forward and backward of training step `step` (dropout's masks depend on
 * it) on x[B, input] and labels y[B] (host memory, read only); leaves the
 * gradient of the mean loss (clipped, with clip_norm) in the grad buffers
 * and writes the mean loss and the count of correct predictions. Returns 0,
 * -EINVAL if B is outside [1, max_batch] or a label is not below the class
 * count, or a device error (after which the backend is only good for
 * ps_backend_free). */
int ps_backend_train_step(ps_backend *b, const float *x, const uint8_t *y, int B, uint64_t step,
                          float *loss, int *correct);

/* Called during ps_backend_train_step once a layer's gradients (tensors
 * first .. first + count - 1) are final in the host grad buffers, last layer
 * first, so the worker can push them while the layers below are computed. On
 * the CPU it runs as backward reaches each layer; on CUDA, as each layer's
 * download completes (the worker's thread sleeps on the GPU's event until
 * then), while the GPU computes the layers below. */
typedef void (*ps_backend_layer_cb)(void *arg, int first, int count);
/* Installs (NULL removes) the callback; arg is the caller's. */
void ps_backend_on_layer_grads(ps_backend *b, ps_backend_layer_cb cb, void *arg);

/* Forward only over n rows, in batches of max_batch; writes the mean loss and
 * the number correct. Returns 0, -EINVAL if n < 1 or a label is not below the
 * class count, or a device error. */
int ps_backend_evaluate(ps_backend *b, const float *x, const uint8_t *y, int n, float *loss,
                        int *correct);

#endif
