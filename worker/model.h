/* The model a worker trains, whatever its layers and wherever it computes:
 * one executor built from a resolved model description (model_desc.h) and
 * its tensor table, over a device's table of operations (ps_model_ops). It
 * walks the layers in order and calls the table's function for each one's
 * kind; it owns the parameters, their gradients, every activation, the
 * back-propagated deltas, the max-pool indices, the layers' workspace and
 * the loss totals, all allocated through the table at init for batches up
 * to max_batch, so a training step never allocates. The CPU's table
 * (backend_ops.h: the layer library on OpenBLAS) and the CUDA one (cuBLAS and
 * kernels/layers_cuda.cu) run the same executor; nothing here computes.
 *
 * Memory: every buffer the executor hands out or is handed (parameters,
 * gradients, the batch, predictions) is in the table's memory: host memory
 * for the CPU, device memory for CUDA. Parameter and gradient buffers are
 * indexed by tensor id (the table's order).
 *
 * Asynchrony: the table may only queue its work (CUDA does, on one stream).
 * ps_model_train_start returns once everything is queued; the gradient
 * callback tells, layer by layer, that a layer's gradients are queued (and,
 * on a table that computes at once, final); ps_model_train_finish waits and
 * reads the loss. ps_model_train_step is the two in a row.
 *
 * Dropout is active only in training. Its mask is a pure function of
 * (dropout seed, layer index, step, element): the caller passes a seed
 * particular to the worker and the step it computes, so masks differ between
 * layers, workers and steps and a rerun draws the same ones. */
#ifndef PS_MODEL_H
#define PS_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "layers.h"
#include "model_desc.h"
#include "model_spec.h"

/* What a batch's loss adds up to, in the table's memory. */
typedef struct {
    double loss_sum; /* the per-sample losses, summed */
    int correct;     /* samples whose first arg-max is the label */
} ps_model_totals;

/* A device's operations. Every function takes the device's context first
 * (the dev given to ps_model_init, owned by the caller, e.g. the backend),
 * works on the table's memory and returns 0 or a negative code; the layer
 * functions are the layer library's (kernels/layers.h), whose geometry
 * structs, layouts and overwrite rules they share. A workspace function gives
 * the floats of scratch its layer needs for a batch of B. */
typedef struct ps_model_ops {
    /* Zeroed memory of the device, aligned for its products; NULL when
     * there is none left. release takes NULL. */
    void *(*alloc)(void *dev, size_t bytes);
    void (*release)(void *dev, void *p);
    /* Host → device (write) and device → host (read, after the work queued
     * before it). The host side is the caller's, read or written only
     * during the call. */
    int (*write)(void *dev, void *dst, const void *src, size_t bytes);
    int (*read)(void *dev, void *dst, const void *src, size_t bytes);
    /* bytes of p set to zero, in queue order. */
    int (*zero)(void *dev, void *p, size_t bytes);

    size_t (*dense_workspace)(void *dev, const ps_dense *g, int B);
    int (*dense_forward)(void *dev, const ps_dense *g, int B, const float *x, const float *w,
                         const float *b, float *y, float *ws);
    int (*dense_backward)(void *dev, const ps_dense *g, int B, const float *x, const float *w,
                          const float *dy, float *dx, float *dw, float *db, float *ws);
    size_t (*conv2d_workspace)(void *dev, const ps_conv2d *g, int B);
    int (*conv2d_forward)(void *dev, const ps_conv2d *g, int B, const float *x, const float *w,
                          const float *b, float *y, float *ws);
    int (*conv2d_backward)(void *dev, const ps_conv2d *g, int B, const float *x, const float *w,
                           const float *dy, float *dx, float *dw, float *db, float *ws);
    int (*maxpool2d_forward)(void *dev, const ps_maxpool2d *g, int B, const float *x, float *y,
                             int32_t *argmax);
    int (*maxpool2d_backward)(void *dev, const ps_maxpool2d *g, int B, const float *dy,
                              const int32_t *argmax, float *dx);
    int (*relu_forward)(void *dev, size_t n, const float *x, float *y);
    int (*relu_backward)(void *dev, size_t n, const float *y, const float *dy, float *dx);
    int (*dropout_forward)(void *dev, const ps_dropout *g, uint64_t step, int training, size_t n,
                           const float *x, float *y);
    int (*dropout_backward)(void *dev, const ps_dropout *g, uint64_t step, int training, size_t n,
                            const float *dy, float *dx);
    /* Softmax cross-entropy of logits[B][C] against labels[B]: adds the
     * batch's summed loss and correct count to *totals and, unless dlogits is
     * NULL, writes the gradient of the batch's mean loss. rows: a workspace
     * of B floats. A label not below C is -EINVAL where the table can see it
     * (the CPU); on a device the caller checks labels on the host first
     * (ps_backend_train_step does). */
    int (*softmax_xent)(void *dev, int B, int C, const float *logits, const uint8_t *labels,
                        float *dlogits, float *rows, ps_model_totals *totals);
    /* pred[i] = the first arg-max of row i of logits[B][C]. */
    int (*predict)(void *dev, int B, int C, const float *logits, uint8_t *pred);
} ps_model_ops;

typedef struct ps_model ps_model;

/* Builds the executor for desc (resolved; copied) and table (the table desc
 * resolved to; copied) on ops (borrowed, usually static) and dev (borrowed
 * until ps_model_free), parameters at the table's initial values, gradients
 * zero. Returns 0, -EINVAL (desc not resolved, a layer the library refuses,
 * a table that does not hold the tensors the layers need, max_batch < 1),
 * -ENOMEM, or the table's error. */
int ps_model_init(ps_model **out, const ps_model_ops *ops, void *dev, const ps_model_desc *desc,
                  const ps_model_spec *table, int max_batch, uint64_t dropout_seed);
/* NULL is allowed. */
void ps_model_free(ps_model *m);

/* Floats per input sample, and the class count. */
size_t ps_model_input_count(const ps_model *m);
int ps_model_classes(const ps_model *m);

/* Buffers of table->tensors[tensor_id].numel floats in the table's memory,
 * owned by the model. */
float *ps_model_param(ps_model *m, int tensor_id);
float *ps_model_grad(ps_model *m, int tensor_id);

/* Called during ps_model_train_start once a layer's gradients are queued
 * (tensors first .. first + count - 1, its weight then its bias), last layer
 * first: on the CPU they are final, so a worker pushes them while the layers
 * below are computed; a device backend queues their download. */
typedef void (*ps_model_grads_cb)(void *arg, int first, int count);
/* Installs (NULL removes) the callback; arg is the caller's. */
void ps_model_on_grads(ps_model *m, ps_model_grads_cb cb, void *arg);

/* Called before the first use of a layer's parameters (tensors first .. first
 * + count - 1) in a forward pass, first layer first, returning 0 or a
 * negative code that ends the pass: a device backend makes its compute wait
 * for that layer's upload only, so the first layers compute while later
 * ones are still on their way. */
typedef int (*ps_model_params_cb)(void *arg, int first, int count);
void ps_model_on_params(ps_model *m, ps_model_params_cb cb, void *arg);

/* Queues forward and backward on x[B, input] (batch-major, each sample in
 * the description's input shape) and labels y[B], both in the table's
 * memory, for training step `step`: the gradient of the mean loss goes to
 * the grad buffers (overwritten, not accumulated). Returns 0, -EINVAL if B
 * is outside [1, max_batch] or a label is not below the class count (where
 * the table checks), or the table's error. */
int ps_model_train_start(ps_model *m, const float *x, const uint8_t *y, int B, uint64_t step);
/* Waits for the step ps_model_train_start queued and writes its mean loss
 * and the count of correct predictions. Returns 0 or the table's error. */
int ps_model_train_finish(ps_model *m, float *loss, int *correct);
/* The two above in a row. */
int ps_model_train_step(ps_model *m, const float *x, const uint8_t *y, int B, uint64_t step,
                        float *loss, int *correct);

/* Forward only (dropout off) over n samples of x and y (the table's memory)
 * in batches of max_batch; writes the mean loss and the number correct, and
 * when pred is not NULL each sample's predicted class (first arg-max) into
 * pred[n] (the table's memory). Returns 0, -EINVAL (n < 1, a label not below
 * the class count where the table checks) or the table's error. */
int ps_model_evaluate(ps_model *m, const float *x, const uint8_t *y, int n, float *loss,
                      int *correct, uint8_t *pred);

#endif
