/* The generic model executor (see model.h) on the CPU layer library.
 *
 * Each layer keeps its geometry (filled by the library's *_init from the
 * description's shapes) and its output buffer. ReLU runs in place on its
 * input when that is one of ours, and flatten is a view, so neither costs an
 * activation; every other layer writes its own, because backward needs the
 * inputs of dense and conv2d layers and the outputs of ReLUs. Back-propagated
 * deltas ping-pong between two buffers sized for the widest layer: a layer
 * reads one and writes the other, or works in place (ReLU, dropout, flatten).
 * Backward stops below the first layer with parameters: nothing there needs
 * a gradient. */
#include "model.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "layers.h"

/* Buffers start on 64-byte boundaries so BLAS sees cache-line aligned rows. */
#define PS__ALIGN 64

typedef struct {
    ps_layer_kind kind;
    union {
        ps_dense dense;
        ps_conv2d conv;
        ps_maxpool2d pool;
        ps_dropout drop;
    } g;
    size_t in_n, out_n; /* values per sample in and out */
    int weight;         /* tensor id of the weight (bias: weight + 1), or -1 */
    /* The output: own buffer, or NULL when the layer writes over (ReLU) or
     * merely renames (flatten) its input. */
    float *y;
    int32_t *argmax; /* max-pool: the window winners, kept for backward */
} ps__layer;

struct ps_model {
    ps_model_spec table;
    int n_layers, classes, max_batch;
    int first_param; /* the lowest layer with parameters (backward stops there) */
    size_t input_n;  /* values per input sample */
    ps__layer layers[PS_DESC_MAX_LAYERS];
    float *params[PS_MAX_TENSORS], *grads[PS_MAX_TENSORS];
    float *delta[2]; /* two of the widest activation of a batch */
    float *ws;       /* conv2d scratch, the largest any layer needs */
    ps_model_grads_cb on_grads;
    void *on_grads_arg;
};

static float *ps__alloc(size_t floats)
{
    size_t bytes = (floats * sizeof(float) + PS__ALIGN - 1) / PS__ALIGN * PS__ALIGN;

    /* aligned_alloc wants a multiple of the alignment, and some size. */
    return aligned_alloc(PS__ALIGN, bytes ? bytes : PS__ALIGN);
}

static ps_shape ps__shape(const ps_act_shape *s)
{
    return s->ndim == 1 ? (ps_shape){s->d[0], 1, 1} : (ps_shape){s->d[0], s->d[1], s->d[2]};
}

/* Layer l's input for this pass: the previous layer's output, which may be a
 * view of the one before, down to the caller's batch. */
static const float *ps__input(const ps_model *m, int l, const float *x)
{
    while (--l >= 0)
        if (m->layers[l].y)
            return m->layers[l].y;
    return x;
}

/* Does layer l read its input from a buffer of ours (so ReLU may overwrite
 * it), rather than from the caller's batch? */
static int ps__input_is_ours(const ps_model *m, int l)
{
    while (--l >= 0)
        if (m->layers[l].y)
            return 1;
    return 0;
}

/* The tensors the table gives layer l must be the layer's weight and bias. */
static int ps__check_params(const ps_model *m, const ps__layer *L, size_t weight_n, size_t bias_n)
{
    if (L->weight < 0 || L->weight + 1 >= m->table.n_tensors)
        return -EINVAL;
    if (m->table.tensors[L->weight].numel != weight_n ||
        m->table.tensors[L->weight + 1].numel != bias_n)
        return -EINVAL;
    return 0;
}

/* Fills layer l's geometry from the description. ws_n grows to the
 * workspace the layer needs. */
static int ps__setup_layer(ps_model *m, int l, const ps_layer *d, uint64_t dropout_seed,
                           size_t *ws_n)
{
    ps__layer *L = &m->layers[l];
    ps_shape in = ps__shape(&d->in_shape), out;
    int rc = 0;

    L->kind = d->kind;
    L->weight = d->weight;
    switch (d->kind) {
    case PS_LAYER_DENSE:
        rc = ps_dense_init(&L->g.dense, in, d->out_shape.d[0], &out);
        if (rc == 0)
            rc = ps__check_params(m, L, ps_dense_weight_count(&L->g.dense), (size_t)out.c);
        break;
    case PS_LAYER_CONV2D:
        rc = ps_conv2d_init(&L->g.conv, in, d->out, d->kernel, d->kernel, d->stride, d->pad, &out);
        if (rc == 0)
            rc = ps__check_params(m, L, ps_conv2d_weight_count(&L->g.conv), (size_t)out.c);
        if (rc == 0 && ps_conv2d_workspace(&L->g.conv) > *ws_n)
            *ws_n = ps_conv2d_workspace(&L->g.conv);
        break;
    case PS_LAYER_MAXPOOL:
        rc = ps_maxpool2d_init(&L->g.pool, in, d->kernel, d->stride, &out);
        break;
    case PS_LAYER_DROPOUT:
        /* Golden-ratio steps give each layer its own stream of masks. */
        rc = ps_dropout_init(&L->g.drop, d->p,
                             dropout_seed + (uint64_t)(l + 1) * 0x9E3779B97F4A7C15ull);
        out = in;
        break;
    case PS_LAYER_FLATTEN:
        out = ps_flatten_shape(in);
        break;
    case PS_LAYER_RELU:
        out = in;
        break;
    default:
        return -EINVAL;
    }
    if (rc < 0)
        return rc;
    /* The library and the description must agree on the shape. */
    if (ps_shape_count(out) != ps_shape_count(ps__shape(&d->out_shape)))
        return -EINVAL;
    L->in_n = ps_shape_count(in);
    L->out_n = ps_shape_count(out);
    return 0;
}

static int ps__allocate(ps_model *m, size_t ws_n)
{
    size_t batch = (size_t)m->max_batch, widest = batch * m->input_n;

    for (int l = 0; l < m->n_layers; l++) {
        ps__layer *L = &m->layers[l];
        size_t n = batch * L->out_n;
        int view =
            L->kind == PS_LAYER_FLATTEN || (L->kind == PS_LAYER_RELU && ps__input_is_ours(m, l));

        widest = n > widest ? n : widest;
        if (!view && (L->y = ps__alloc(n)) == NULL)
            return -ENOMEM;
        if (L->kind == PS_LAYER_MAXPOOL &&
            (L->argmax = aligned_alloc(PS__ALIGN, (n * sizeof(int32_t) + PS__ALIGN - 1) /
                                                      PS__ALIGN * PS__ALIGN)) == NULL)
            return -ENOMEM;
    }
    for (int i = 0; i < 2; i++)
        if ((m->delta[i] = ps__alloc(widest)) == NULL)
            return -ENOMEM;
    if (ws_n > 0 && (m->ws = ps__alloc(ws_n)) == NULL)
        return -ENOMEM;
    for (int t = 0; t < m->table.n_tensors; t++) {
        size_t n = m->table.tensors[t].numel;
        m->params[t] = ps__alloc(n);
        m->grads[t] = ps__alloc(n);
        if (m->params[t] == NULL || m->grads[t] == NULL)
            return -ENOMEM;
        ps_model_spec_init_values(&m->table, t, 0, n, m->params[t]);
        memset(m->grads[t], 0, n * sizeof(float));
    }
    return 0;
}

int ps_model_init(ps_model **out, const ps_model_desc *desc, const ps_model_spec *table,
                  int max_batch, uint64_t dropout_seed)
{
    ps_model *m;
    size_t ws_n = 0;
    int rc;

    *out = NULL;
    if (!desc->resolved || desc->n_layers < 1 || max_batch < 1)
        return -EINVAL;
    m = calloc(1, sizeof(*m));
    if (m == NULL)
        return -ENOMEM;
    m->table = *table;
    m->n_layers = desc->n_layers;
    m->classes = desc->classes;
    m->max_batch = max_batch;
    m->input_n = ps_shape_count(ps__shape(&desc->input));
    m->first_param = -1;
    for (int l = 0; l < m->n_layers; l++) {
        rc = ps__setup_layer(m, l, &desc->layers[l], dropout_seed, &ws_n);
        if (rc < 0)
            goto fail;
        if (m->first_param < 0 && m->layers[l].weight >= 0)
            m->first_param = l;
    }
    /* The loss reads the last layer's output as the class scores. */
    rc = -EINVAL;
    if (m->first_param < 0 || m->layers[m->n_layers - 1].out_n != (size_t)m->classes)
        goto fail;
    rc = ps__allocate(m, ws_n);
    if (rc < 0)
        goto fail;
    *out = m;
    return 0;

fail:
    ps_model_free(m);
    return rc;
}

void ps_model_free(ps_model *m)
{
    if (m == NULL)
        return;
    for (int l = 0; l < m->n_layers; l++) {
        free(m->layers[l].y);
        free(m->layers[l].argmax);
    }
    for (int t = 0; t < m->table.n_tensors; t++) {
        free(m->params[t]);
        free(m->grads[t]);
    }
    free(m->delta[0]);
    free(m->delta[1]);
    free(m->ws);
    free(m);
}

float *ps_model_param(ps_model *m, int tensor_id)
{
    return m->params[tensor_id];
}

float *ps_model_grad(ps_model *m, int tensor_id)
{
    return m->grads[tensor_id];
}

void ps_model_on_grads(ps_model *m, ps_model_grads_cb cb, void *arg)
{
    m->on_grads = cb;
    m->on_grads_arg = arg;
}

/* Runs every layer on x[B]; returns the class scores (inside m). */
static const float *ps__forward(ps_model *m, const float *x, int B, uint64_t step, int training)
{
    for (int l = 0; l < m->n_layers; l++) {
        ps__layer *L = &m->layers[l];
        const float *in = ps__input(m, l, x);
        size_t n = (size_t)B * L->out_n;
        int w = L->weight;

        switch (L->kind) {
        case PS_LAYER_DENSE:
            ps_dense_forward(&L->g.dense, B, in, m->params[w], m->params[w + 1], L->y);
            break;
        case PS_LAYER_CONV2D:
            ps_conv2d_forward(&L->g.conv, B, in, m->params[w], m->params[w + 1], L->y, m->ws);
            break;
        case PS_LAYER_MAXPOOL:
            ps_maxpool2d_forward(&L->g.pool, B, in, L->y, L->argmax);
            break;
        case PS_LAYER_RELU:
            /* In place unless the input is the caller's (then y is ours). */
            ps_relu_forward(n, in, L->y ? L->y : (float *)in);
            break;
        case PS_LAYER_DROPOUT:
            ps_dropout_forward(&L->g.drop, step, training, n, in, L->y);
            break;
        case PS_LAYER_FLATTEN:
            break;
        }
    }
    return ps__input(m, m->n_layers, x);
}

int ps_model_train_step(ps_model *m, const float *x, const uint8_t *y, int B, uint64_t step,
                        float *loss, int *correct)
{
    float *dy = m->delta[0], *dx = m->delta[1];
    const float *scores;
    int rc;

    if (B < 1 || B > m->max_batch)
        return -EINVAL;
    scores = ps__forward(m, x, B, step, 1);
    rc = ps_softmax_xent(B, m->classes, scores, y, dy, loss, correct);
    if (rc < 0)
        return rc;
    for (int l = m->n_layers - 1; l >= m->first_param; l--) {
        ps__layer *L = &m->layers[l];
        const float *in = ps__input(m, l, x);
        /* The layers below the first with parameters need no gradient. */
        float *next = l > m->first_param ? dx : NULL;
        size_t n = (size_t)B * L->out_n;
        int w = L->weight, swap = 0;

        switch (L->kind) {
        case PS_LAYER_DENSE:
            ps_dense_backward(&L->g.dense, B, in, m->params[w], dy, next, m->grads[w],
                              m->grads[w + 1]);
            swap = 1;
            break;
        case PS_LAYER_CONV2D:
            ps_conv2d_backward(&L->g.conv, B, in, m->params[w], dy, next, m->grads[w],
                               m->grads[w + 1], m->ws);
            swap = 1;
            break;
        case PS_LAYER_MAXPOOL:
            ps_maxpool2d_backward(&L->g.pool, B, dy, L->argmax, dx);
            swap = 1;
            break;
        case PS_LAYER_RELU:
            ps_relu_backward(n, L->y ? L->y : in, dy, dy);
            break;
        case PS_LAYER_DROPOUT:
            ps_dropout_backward(&L->g.drop, step, 1, n, dy, dy);
            break;
        case PS_LAYER_FLATTEN:
            break;
        }
        if (w >= 0 && m->on_grads)
            m->on_grads(m->on_grads_arg, w, 2);
        if (swap) {
            float *t = dy;
            dy = dx;
            dx = t;
        }
    }
    return 0;
}

/* The first arg-max of each row of scores[B][C], as the loss counts it. */
static void ps__predict(const float *scores, int B, int C, uint8_t *pred)
{
    for (int i = 0; i < B; i++) {
        const float *s = scores + (size_t)i * C;
        int best = 0;
        for (int c = 1; c < C; c++)
            if (s[c] > s[best])
                best = c;
        pred[i] = (uint8_t)best;
    }
}

int ps_model_evaluate(ps_model *m, const float *x, const uint8_t *y, int n, float *loss,
                      int *correct, uint8_t *pred)
{
    double total = 0.0;
    int right = 0;

    if (n < 1)
        return -EINVAL;
    for (int start = 0; start < n; start += m->max_batch) {
        int B = n - start < m->max_batch ? n - start : m->max_batch, c, rc;
        const float *scores = ps__forward(m, x + (size_t)start * m->input_n, B, 0, 0);
        float l;

        rc = ps_softmax_xent(B, m->classes, scores, y + start, NULL, &l, &c);
        if (rc < 0)
            return rc;
        /* Weight each batch's mean by its size so a short last batch counts
         * for exactly its samples. */
        total += (double)l * B;
        right += c;
        if (pred)
            ps__predict(scores, B, m->classes, pred + start);
    }
    *loss = (float)(total / n);
    *correct = right;
    return 0;
}
