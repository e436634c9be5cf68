/* The generic model executor (see model.h): the layers of a model file run
 * through a device's table of operations.
 *
 * Each layer keeps its geometry (filled by the library's *_init from the
 * description's shapes) and its output buffer. ReLU runs in place on its
 * input when that is one of ours, and flatten is a view, so neither costs an
 * activation; every other layer writes its own, because backward needs the
 * inputs of dense and conv2d layers and the outputs of ReLUs. Back-propagated
 * deltas ping-pong between two buffers sized for the widest layer: a layer
 * reads one and writes the other, or works in place (ReLU, dropout, flatten).
 * Backward stops below the first layer with parameters: nothing there needs
 * a gradient.
 *
 * Nothing here touches the numbers: every value lives in the table's memory
 * and every computation is one of its functions, so the same walk drives the
 * CPU and the GPU (tests/cuda/ops_link.sh checks at link level that the CUDA
 * side of this reaches no CPU computation). */
#include "model.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

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
} ps__model_layer;

struct ps_model {
    const ps_model_ops *ops;
    void *dev;
    ps_model_spec table;
    int n_layers, classes, max_batch;
    int first_param; /* the lowest layer with parameters (backward stops there) */
    size_t input_n;  /* values per input sample */
    ps__model_layer layers[PS_DESC_MAX_LAYERS];
    float *params[PS_MAX_MODEL_TENSORS], *grads[PS_MAX_MODEL_TENSORS];
    float *delta[2];         /* two of the widest activation of a batch */
    float *ws;               /* layer scratch, the largest any layer needs */
    float *rows;             /* the loss's per-sample workspace */
    ps_model_totals *totals; /* the loss of the pass in flight */
    int pending_B;           /* the batch ps_model_train_start queued, or 0 */
    ps_model_grads_cb on_grads;
    void *on_grads_arg;
    ps_model_params_cb on_params;
    void *on_params_arg;
};

static ps_shape ps__model_shape(const ps_act_shape *s)
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
static int ps__check_params(const ps_model *m, const ps__model_layer *L, size_t weight_n,
                            size_t bias_n)
{
    if (L->weight < 0 || L->weight + 1 >= m->table.n_tensors)
        return -EINVAL;
    if (m->table.tensors[L->weight].numel != weight_n ||
        m->table.tensors[L->weight + 1].numel != bias_n)
        return -EINVAL;
    return 0;
}

/* Fills layer l's geometry from the description. ws_n grows to the
 * workspace the layer needs for a batch of max_batch. */
static int ps__setup_layer(ps_model *m, int l, const ps_layer *d, uint64_t dropout_seed,
                           size_t *ws_n)
{
    ps__model_layer *L = &m->layers[l];
    ps_shape in = ps__model_shape(&d->in_shape), out;
    size_t ws = 0;
    int rc = 0;

    L->kind = d->kind;
    L->weight = d->weight;
    switch (d->kind) {
    case PS_LAYER_DENSE:
        rc = ps_dense_init(&L->g.dense, in, d->out_shape.d[0], &out);
        if (rc == 0)
            rc = ps__check_params(m, L, ps_dense_weight_count(&L->g.dense), (size_t)out.c);
        if (rc == 0)
            ws = m->ops->dense_workspace(m->dev, &L->g.dense, m->max_batch);
        break;
    case PS_LAYER_CONV2D:
        rc = ps_conv2d_init(&L->g.conv, in, d->out, d->kernel, d->kernel, d->stride, d->pad, &out);
        if (rc == 0)
            rc = ps__check_params(m, L, ps_conv2d_weight_count(&L->g.conv), (size_t)out.c);
        if (rc == 0)
            ws = m->ops->conv2d_workspace(m->dev, &L->g.conv, m->max_batch);
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
    if (ps_shape_count(out) != ps_shape_count(ps__model_shape(&d->out_shape)))
        return -EINVAL;
    L->in_n = ps_shape_count(in);
    L->out_n = ps_shape_count(out);
    *ws_n = ws > *ws_n ? ws : *ws_n;
    return 0;
}

static void *ps__model_alloc(ps_model *m, size_t n, size_t size)
{
    return m->ops->alloc(m->dev, n * size);
}

/* Writes the table's initial values into the parameters, one tensor at a
 * time through a host buffer. */
static int ps__init_values(ps_model *m)
{
    size_t largest = 0;
    float *host;
    int rc = 0;

    for (int t = 0; t < m->table.n_tensors; t++)
        if (m->table.tensors[t].numel > largest)
            largest = m->table.tensors[t].numel;
    host = malloc(largest * sizeof(float) + 1);
    if (host == NULL)
        return -ENOMEM;
    for (int t = 0; t < m->table.n_tensors && rc == 0; t++) {
        size_t n = m->table.tensors[t].numel;
        ps_model_spec_init_values(&m->table, t, 0, n, host);
        rc = m->ops->write(m->dev, m->params[t], host, n * sizeof(float));
    }
    free(host);
    return rc;
}

static int ps__allocate(ps_model *m, size_t ws_n)
{
    size_t batch = (size_t)m->max_batch, widest = batch * m->input_n;

    for (int l = 0; l < m->n_layers; l++) {
        ps__model_layer *L = &m->layers[l];
        size_t n = batch * L->out_n;
        int view =
            L->kind == PS_LAYER_FLATTEN || (L->kind == PS_LAYER_RELU && ps__input_is_ours(m, l));

        widest = n > widest ? n : widest;
        if (!view && (L->y = ps__model_alloc(m, n, sizeof(float))) == NULL)
            return -ENOMEM;
        if (L->kind == PS_LAYER_MAXPOOL &&
            (L->argmax = ps__model_alloc(m, n, sizeof(int32_t))) == NULL)
            return -ENOMEM;
    }
    for (int i = 0; i < 2; i++)
        if ((m->delta[i] = ps__model_alloc(m, widest, sizeof(float))) == NULL)
            return -ENOMEM;
    if (ws_n > 0 && (m->ws = ps__model_alloc(m, ws_n, sizeof(float))) == NULL)
        return -ENOMEM;
    m->rows = ps__model_alloc(m, batch, sizeof(float));
    m->totals = ps__model_alloc(m, 1, sizeof(ps_model_totals));
    if (m->rows == NULL || m->totals == NULL)
        return -ENOMEM;
    for (int t = 0; t < m->table.n_tensors; t++) {
        size_t n = m->table.tensors[t].numel;
        m->params[t] = ps__model_alloc(m, n, sizeof(float));
        m->grads[t] = ps__model_alloc(m, n, sizeof(float));
        if (m->params[t] == NULL || m->grads[t] == NULL)
            return -ENOMEM;
    }
    return ps__init_values(m);
}

int ps_model_init(ps_model **out, const ps_model_ops *ops, void *dev, const ps_model_desc *desc,
                  const ps_model_spec *table, int max_batch, uint64_t dropout_seed)
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
    m->ops = ops;
    m->dev = dev;
    rc = ps_model_spec_copy(&m->table, table);
    if (rc < 0) {
        free(m);
        return rc;
    }
    m->n_layers = desc->n_layers;
    m->classes = desc->classes;
    m->max_batch = max_batch;
    m->input_n = ps_shape_count(ps__model_shape(&desc->input));
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
        m->ops->release(m->dev, m->layers[l].y);
        m->ops->release(m->dev, m->layers[l].argmax);
    }
    for (int t = 0; t < m->table.n_tensors; t++) {
        m->ops->release(m->dev, m->params[t]);
        m->ops->release(m->dev, m->grads[t]);
    }
    m->ops->release(m->dev, m->delta[0]);
    m->ops->release(m->dev, m->delta[1]);
    m->ops->release(m->dev, m->ws);
    m->ops->release(m->dev, m->rows);
    m->ops->release(m->dev, m->totals);
    ps_model_spec_free(&m->table);
    free(m);
}

size_t ps_model_input_count(const ps_model *m)
{
    return m->input_n;
}

int ps_model_classes(const ps_model *m)
{
    return m->classes;
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

void ps_model_on_params(ps_model *m, ps_model_params_cb cb, void *arg)
{
    m->on_params = cb;
    m->on_params_arg = arg;
}

/* Runs layer l forward on its input in. */
static int ps__forward_layer(ps_model *m, int l, const float *in, int B, uint64_t step,
                             int training)
{
    const ps_model_ops *o = m->ops;
    ps__model_layer *L = &m->layers[l];
    size_t n = (size_t)B * L->out_n;
    int w = L->weight;

    if (w >= 0 && m->on_params) {
        int rc = m->on_params(m->on_params_arg, w, 2);
        if (rc < 0)
            return rc;
    }
    switch (L->kind) {
    case PS_LAYER_DENSE:
        return o->dense_forward(m->dev, &L->g.dense, B, in, m->params[w], m->params[w + 1], L->y,
                                m->ws);
    case PS_LAYER_CONV2D:
        return o->conv2d_forward(m->dev, &L->g.conv, B, in, m->params[w], m->params[w + 1], L->y,
                                 m->ws);
    case PS_LAYER_MAXPOOL:
        return o->maxpool2d_forward(m->dev, &L->g.pool, B, in, L->y, L->argmax);
    case PS_LAYER_RELU:
        /* In place unless the input is the caller's (then y is ours). */
        return o->relu_forward(m->dev, n, in, L->y ? L->y : (float *)in);
    case PS_LAYER_DROPOUT:
        return o->dropout_forward(m->dev, &L->g.drop, step, training, n, in, L->y);
    case PS_LAYER_FLATTEN:
        return 0;
    }
    return -EINVAL;
}

/* Runs every layer on x[B]; *scores is the last layer's output (inside m). */
static int ps__forward(ps_model *m, const float *x, int B, uint64_t step, int training,
                       const float **scores)
{
    for (int l = 0; l < m->n_layers; l++) {
        int rc = ps__forward_layer(m, l, ps__input(m, l, x), B, step, training);
        if (rc < 0)
            return rc;
    }
    *scores = ps__input(m, m->n_layers, x);
    return 0;
}

/* Runs layer l backward from dy; writes dx (NULL below the first layer
 * with parameters) or works in place on dy. *swap tells which. */
static int ps__backward_layer(ps_model *m, int l, const float *x, int B, uint64_t step, float *dy,
                              float *dx, int *swap)
{
    const ps_model_ops *o = m->ops;
    ps__model_layer *L = &m->layers[l];
    const float *in = ps__input(m, l, x);
    size_t n = (size_t)B * L->out_n;
    int w = L->weight;

    *swap = 0;
    switch (L->kind) {
    case PS_LAYER_DENSE:
        *swap = 1;
        return o->dense_backward(m->dev, &L->g.dense, B, in, m->params[w], dy, dx, m->grads[w],
                                 m->grads[w + 1], m->ws);
    case PS_LAYER_CONV2D:
        *swap = 1;
        return o->conv2d_backward(m->dev, &L->g.conv, B, in, m->params[w], dy, dx, m->grads[w],
                                  m->grads[w + 1], m->ws);
    case PS_LAYER_MAXPOOL:
        *swap = 1;
        return o->maxpool2d_backward(m->dev, &L->g.pool, B, dy, L->argmax, dx);
    case PS_LAYER_RELU:
        return o->relu_backward(m->dev, n, L->y ? L->y : in, dy, dy);
    case PS_LAYER_DROPOUT:
        return o->dropout_backward(m->dev, &L->g.drop, step, 1, n, dy, dy);
    case PS_LAYER_FLATTEN:
        return 0;
    }
    return -EINVAL;
}

int ps_model_train_start(ps_model *m, const float *x, const uint8_t *y, int B, uint64_t step)
{
    float *dy = m->delta[0], *dx = m->delta[1];
    const float *scores;
    int rc;

    m->pending_B = 0;
    if (B < 1 || B > m->max_batch)
        return -EINVAL;
    rc = m->ops->zero(m->dev, m->totals, sizeof(*m->totals));
    if (rc == 0)
        rc = ps__forward(m, x, B, step, 1, &scores);
    if (rc == 0)
        rc = m->ops->softmax_xent(m->dev, B, m->classes, scores, y, dy, m->rows, m->totals);
    for (int l = m->n_layers - 1; l >= m->first_param && rc == 0; l--) {
        /* The layers below the first with parameters need no gradient. */
        int swap, w = m->layers[l].weight;

        rc = ps__backward_layer(m, l, x, B, step, dy, l > m->first_param ? dx : NULL, &swap);
        if (rc == 0 && w >= 0 && m->on_grads)
            m->on_grads(m->on_grads_arg, w, 2);
        if (swap) {
            float *t = dy;
            dy = dx;
            dx = t;
        }
    }
    if (rc == 0)
        m->pending_B = B;
    return rc;
}

/* Reads the totals of the pass in flight (waiting for it). */
static int ps__read_totals(ps_model *m, ps_model_totals *t)
{
    return m->ops->read(m->dev, t, m->totals, sizeof(*t));
}

int ps_model_train_finish(ps_model *m, float *loss, int *correct)
{
    ps_model_totals t;
    int B = m->pending_B, rc;

    if (B == 0)
        return -EINVAL;
    m->pending_B = 0;
    rc = ps__read_totals(m, &t);
    if (rc < 0)
        return rc;
    *loss = (float)(t.loss_sum / B);
    *correct = t.correct;
    return 0;
}

int ps_model_train_step(ps_model *m, const float *x, const uint8_t *y, int B, uint64_t step,
                        float *loss, int *correct)
{
    int rc = ps_model_train_start(m, x, y, B, step);

    return rc < 0 ? rc : ps_model_train_finish(m, loss, correct);
}

int ps_model_evaluate(ps_model *m, const float *x, const uint8_t *y, int n, float *loss,
                      int *correct, uint8_t *pred)
{
    ps_model_totals t;
    int rc;

    if (n < 1)
        return -EINVAL;
    rc = m->ops->zero(m->dev, m->totals, sizeof(*m->totals));
    for (int start = 0; start < n && rc == 0; start += m->max_batch) {
        int B = n - start < m->max_batch ? n - start : m->max_batch;
        const float *scores;

        rc = ps__forward(m, x + (size_t)start * m->input_n, B, 0, 0, &scores);
        if (rc == 0)
            rc = m->ops->softmax_xent(m->dev, B, m->classes, scores, y + start, NULL, m->rows,
                                      m->totals);
        if (rc == 0 && pred)
            rc = m->ops->predict(m->dev, B, m->classes, scores, pred + start);
    }
    if (rc == 0)
        rc = ps__read_totals(m, &t);
    if (rc < 0)
        return rc;
    *loss = (float)(t.loss_sum / n);
    *correct = t.correct;
    return 0;
}
