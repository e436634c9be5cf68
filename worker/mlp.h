/* The MLP a worker trains: parameters, gradients and activations for one
 * batch size, computed with the CPU kernels.
 *
 * Parameter and gradient buffers are indexed by the spec's tensor id, so the
 * key-value client can pull straight into ps_mlp_param() and push straight
 * from ps_mlp_grad() without any copy. */
#ifndef PS_MLP_H
#define PS_MLP_H

#include <stdint.h>

#include "model_spec.h"

typedef struct ps_mlp ps_mlp;

/* Allocates buffers for batches of up to max_batch rows; parameters start at
 * the spec's initial values. The spec is copied. Returns 0, -EINVAL or -ENOMEM. */
int ps_mlp_init(ps_mlp **out, const ps_model_spec *spec, int max_batch);
void ps_mlp_free(ps_mlp *m);

/* Buffers of spec->tensors[tensor_id].numel floats, owned by the model. */
float *ps_mlp_param(ps_mlp *m, int tensor_id);
float *ps_mlp_grad(ps_mlp *m, int tensor_id);

/* Called during ps_mlp_train_step as soon as layer l's weight and bias
 * gradients (tensors 2l and 2l+1) are final, last layer first: a worker
 * starts pushing them while the layers below are still being computed. */
typedef void (*ps_mlp_layer_cb)(void *arg, int layer);
/* Installs (NULL removes) the callback; arg is the caller's. */
void ps_mlp_on_layer_grads(ps_mlp *m, ps_mlp_layer_cb cb, void *arg);

/* Forward and backward on x[B, input] and labels y[B]; leaves the mean-loss
 * gradient in the grad buffers. Writes the mean loss and the count of correct
 * predictions. Returns 0, or -EINVAL if B is outside [1, max_batch]. */
int ps_mlp_train_step(ps_mlp *m, const float *x, const uint8_t *y, int B, float *loss,
                      int *correct);

/* Forward only over n rows, in batches of max_batch; writes the mean loss and
 * the number correct. Returns 0 or -EINVAL. */
int ps_mlp_evaluate(ps_mlp *m, const float *x, const uint8_t *y, int n, float *loss, int *correct);

#endif
