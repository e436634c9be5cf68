/* The worker's MLP on the CPU kernels: linear layers with ReLU between them
 * and softmax cross-entropy on the logits. Every buffer the training step
 * touches (parameters, gradients, activations, back-propagated deltas) is
 * carved out of one allocation made at init, so the hot loop never calls
 * malloc. */
#include "mlp.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"

/* Sub-buffers start on 64-byte boundaries so BLAS sees cache-line aligned
 * rows no matter the layer sizes. */
#define PS__ALIGN_FLOATS 16

struct ps_mlp {
    ps_model_spec spec;
    int max_batch;
    float *params[PS_MAX_TENSORS];
    float *grads[PS_MAX_TENSORS];
    ps_mlp_layer_cb on_layer;
    void *on_layer_arg;
    /* act[l] is the output of layer l (after its ReLU, except the logits). */
    float *act[PS_MAX_LAYERS];
    /* Two deltas suffice: layer l reads one and writes the other. */
    float *delta[2];
    float *arena;
};

static size_t ps__padded(size_t n)
{
    return (n + PS__ALIGN_FLOATS - 1) / PS__ALIGN_FLOATS * PS__ALIGN_FLOATS;
}

static float *ps__carve(float **cursor, size_t n)
{
    float *p = *cursor;
    *cursor += ps__padded(n);
    return p;
}

int ps_mlp_init(ps_mlp **out, const ps_model_spec *spec, int max_batch)
{
    ps_mlp *m = NULL;
    size_t total = 0, widest = 0, batch = (size_t)max_batch;
    float *cursor;
    int L = spec->n_layers;

    *out = NULL;
    if (L < 1 || L > PS_MAX_LAYERS || spec->n_tensors != 2 * L || max_batch < 1)
        return -EINVAL;
    for (int l = 0; l <= L; l++)
        if (spec->sizes[l] < 1)
            return -EINVAL;
    /* Sizes are bounded by the spec (at most 1 << 20 each, 16 layers) and the
     * batch by INT_MAX, so none of these size_t products can overflow. */
    for (int t = 0; t < spec->n_tensors; t++)
        total += 2 * ps__padded(spec->tensors[t].numel);
    for (int l = 1; l <= L; l++) {
        size_t w = (size_t)spec->sizes[l];
        total += ps__padded(batch * w);
        widest = w > widest ? w : widest;
    }
    total += 2 * ps__padded(batch * widest);

    m = calloc(1, sizeof(*m));
    if (!m)
        goto fail;
    /* total is a sum of padded counts, a multiple of the alignment as C11's
     * aligned_alloc requires. */
    m->arena = aligned_alloc(PS__ALIGN_FLOATS * sizeof(float), total * sizeof(float));
    if (!m->arena)
        goto fail;
    m->spec = *spec;
    m->max_batch = max_batch;
    cursor = m->arena;
    for (int t = 0; t < spec->n_tensors; t++) {
        size_t n = spec->tensors[t].numel;
        m->params[t] = ps__carve(&cursor, n);
        m->grads[t] = ps__carve(&cursor, n);
        ps_model_spec_init_values(spec, t, 0, n, m->params[t]);
        memset(m->grads[t], 0, n * sizeof(float));
    }
    for (int l = 0; l < L; l++)
        m->act[l] = ps__carve(&cursor, batch * (size_t)spec->sizes[l + 1]);
    m->delta[0] = ps__carve(&cursor, batch * widest);
    m->delta[1] = ps__carve(&cursor, batch * widest);
    *out = m;
    return 0;

fail:
    ps_mlp_free(m);
    return -ENOMEM;
}

void ps_mlp_free(ps_mlp *m)
{
    if (!m)
        return;
    free(m->arena);
    free(m);
}

float *ps_mlp_param(ps_mlp *m, int tensor_id)
{
    return m->params[tensor_id];
}

float *ps_mlp_grad(ps_mlp *m, int tensor_id)
{
    return m->grads[tensor_id];
}

/* Runs the layers on x[B, input] and returns the logits (inside m). */
static const float *ps__forward(ps_mlp *m, const float *x, int B)
{
    const int *sz = m->spec.sizes;
    int L = m->spec.n_layers;
    const float *in = x;

    for (int l = 0; l < L; l++) {
        ps_k_linear_fwd(in, m->params[2 * l], m->params[2 * l + 1], m->act[l], B, sz[l], sz[l + 1]);
        if (l < L - 1)
            ps_k_relu_fwd(m->act[l], (size_t)B * (size_t)sz[l + 1]);
        in = m->act[l];
    }
    return in;
}

void ps_mlp_on_layer_grads(ps_mlp *m, ps_mlp_layer_cb cb, void *arg)
{
    m->on_layer = cb;
    m->on_layer_arg = arg;
}

int ps_mlp_train_step(ps_mlp *m, const float *x, const uint8_t *y, int B, float *loss, int *correct)
{
    const int *sz = m->spec.sizes;
    int L = m->spec.n_layers;
    const float *logits;
    float *dy = m->delta[0], *dx = m->delta[1];

    if (B < 1 || B > m->max_batch)
        return -EINVAL;
    logits = ps__forward(m, x, B);
    *loss = ps_k_softmax_xent(logits, y, dy, B, sz[L]);
    *correct = ps_k_count_correct(logits, y, B, sz[L]);
    for (int l = L - 1; l >= 0; l--) {
        const float *in = l > 0 ? m->act[l - 1] : x;
        float *next = l > 0 ? dx : NULL;

        ps_k_linear_bwd(in, m->params[2 * l], dy, next, m->grads[2 * l], m->grads[2 * l + 1], B,
                        sz[l], sz[l + 1]);
        if (m->on_layer)
            m->on_layer(m->on_layer_arg, l);
        if (l > 0) {
            ps_k_relu_bwd(m->act[l - 1], next, (size_t)B * (size_t)sz[l]);
            dx = dy;
            dy = next;
        }
    }
    return 0;
}

int ps_mlp_evaluate(ps_mlp *m, const float *x, const uint8_t *y, int n, float *loss, int *correct)
{
    int input = m->spec.sizes[0], classes = m->spec.sizes[m->spec.n_layers];
    double total = 0.0;
    int right = 0;

    if (n < 1)
        return -EINVAL;
    for (int start = 0; start < n; start += m->max_batch) {
        int B = n - start < m->max_batch ? n - start : m->max_batch;
        const float *logits = ps__forward(m, x + (size_t)start * input, B);

        /* Weight each batch's mean by its size so a short last batch counts
         * for exactly its rows. */
        total += (double)ps_k_softmax_xent(logits, y + start, NULL, B, classes) * B;
        right += ps_k_count_correct(logits, y + start, B, classes);
    }
    *loss = (float)(total / n);
    *correct = right;
    return 0;
}
