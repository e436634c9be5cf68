/* The model a worker trains, whatever its layers: a generic executor built
 * from a resolved model description (model_desc.h) and its tensor table. It
 * walks the layers in order and calls the layer library (kernels/layers.h)
 * for each one's kind; it owns the parameters, their gradients, every
 * activation, the back-propagated deltas, the max-pool indices and the
 * convolution workspace, all allocated at init for batches up to max_batch,
 * so a training step never allocates.
 *
 * Parameter and gradient buffers are indexed by tensor id (the table's
 * order), so the key-value client pulls straight into ps_model_param() and
 * pushes straight from ps_model_grad().
 *
 * Dropout is active only in train_step. Its mask is a pure function of
 * (dropout seed, layer index, step, element): the caller passes a seed
 * particular to the worker and the step it computes, so masks differ between
 * layers, workers and steps and a rerun draws the same ones. */
#ifndef PS_MODEL_H
#define PS_MODEL_H

#include <stdint.h>

#include "model_desc.h"
#include "model_spec.h"

typedef struct ps_model ps_model;

/* Builds the executor for desc (resolved; copied) and table (the table desc
 * resolved to; copied), parameters at the table's initial values. Returns 0,
 * -EINVAL (desc not resolved, a layer the library refuses, a table that does
 * not hold the tensors the layers need, max_batch < 1) or -ENOMEM. */
int ps_model_init(ps_model **out, const ps_model_desc *desc, const ps_model_spec *table,
                  int max_batch, uint64_t dropout_seed);
/* NULL is allowed. */
void ps_model_free(ps_model *m);

/* Buffers of table->tensors[tensor_id].numel floats, owned by the model. */
float *ps_model_param(ps_model *m, int tensor_id);
float *ps_model_grad(ps_model *m, int tensor_id);

/* Called during ps_model_train_step the moment a layer's gradients are final
 * (tensors first .. first + count - 1, its weight then its bias), last layer
 * first: a worker pushes them while the layers below are still computed. */
typedef void (*ps_model_grads_cb)(void *arg, int first, int count);
/* Installs (NULL removes) the callback; arg is the caller's. */
void ps_model_on_grads(ps_model *m, ps_model_grads_cb cb, void *arg);

/* Forward and backward on x[B, input] (batch-major, each sample in the
 * description's input shape) and labels y[B] for training step `step`;
 * leaves the gradient of the mean loss in the grad buffers (overwritten, not
 * accumulated) and writes the mean loss and the count of correct predictions.
 * Returns 0, or -EINVAL if B is outside [1, max_batch] or a label is not
 * below the class count. */
int ps_model_train_step(ps_model *m, const float *x, const uint8_t *y, int B, uint64_t step,
                        float *loss, int *correct);

/* Forward only (dropout off) over n samples in batches of max_batch; writes
 * the mean loss and the number correct, and when pred is not NULL each
 * sample's predicted class (first arg-max) into pred[n]. Returns 0 or
 * -EINVAL (n < 1, a label not below the class count). */
int ps_model_evaluate(ps_model *m, const float *x, const uint8_t *y, int n, float *loss,
                      int *correct, uint8_t *pred);

#endif
