/* The CPU compute backend: the executor (model.c) on the CPU's table of
 * operations (backend_cpu_ops.c), whose parameter and gradient arrays are
 * themselves the host buffers the key-value client pulls into and pushes
 * from, so nothing is copied and loading parameters is a no-op. Being the
 * executor on the reference table, it is by construction the computation
 * the executor's own tests check, and the reference the CUDA backend is
 * compared with. */
#include <cblas.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend_impl.h"
#include "backend_ops.h"
#include "layers.h"
#include "model.h"

typedef struct {
    ps_backend base; /* first, so a ps_backend * is a ps__cpu * */
    ps_model *model; /* owned */
    ps_model_spec spec;
    float clip_norm;
} ps__cpu;

static void ps__cpu_free(ps_backend *b)
{
    ps__cpu *c = (ps__cpu *)b;

    ps_model_free(c->model);
    ps_model_spec_free(&c->spec);
    free(c->base.batch_x);
    free(c->base.batch_y);
    free(c);
}

static int ps__cpu_load_params(ps_backend *b)
{
    (void)b;
    return 0;
}

/* ps_model's per-layer callback: the layer's gradients are final, so they
 * are clipped here and handed on to whoever the backend's callback is. */
static void ps__cpu_grads_done(void *arg, int first, int count)
{
    ps__cpu *c = arg;

    for (int t = first; t < first + count && c->clip_norm > 0; t++)
        ps_clip_norm(c->spec.tensors[t].numel, c->base.grads[t], c->clip_norm);
    if (c->base.on_layer)
        c->base.on_layer(c->base.on_layer_arg, first, count);
}

static int ps__cpu_train_step(ps_backend *b, const float *x, const uint8_t *y, int B, uint64_t step,
                              float *loss, int *correct)
{
    return ps_model_train_step(((ps__cpu *)b)->model, x, y, B, step, loss, correct);
}

static int ps__cpu_evaluate(ps_backend *b, const float *x, const uint8_t *y, int n, float *loss,
                            int *correct)
{
    return ps_model_evaluate(((ps__cpu *)b)->model, x, y, n, loss, correct, NULL);
}

static const ps__backend_ops ps__cpu_ops = {
    .free = ps__cpu_free,
    .load_params = ps__cpu_load_params,
    .train_step = ps__cpu_train_step,
    .evaluate = ps__cpu_evaluate,
};

int ps__backend_cpu_init(ps_backend **out, const ps_model_desc *desc, const ps_model_spec *spec,
                         const ps_backend_config *cfg)
{
    ps__cpu *c = calloc(1, sizeof(*c));
    int rc, threads;

    *out = NULL;
    if (c == NULL)
        return -ENOMEM;
    c->base.ops = &ps__cpu_ops;
    rc = ps_model_init(&c->model, &ps_backend_cpu_ops, NULL, desc, spec, cfg->max_batch,
                       cfg->dropout_seed);
    if (rc < 0)
        goto fail;
    ps_model_on_grads(c->model, ps__cpu_grads_done, c);
    rc = ps_model_spec_copy(&c->spec, spec);
    if (rc < 0)
        goto fail;
    c->clip_norm = (float)cfg->clip_norm;
    c->base.device = PS_DEVICE_CPU;
    c->base.max_batch = cfg->max_batch;
    for (int t = 0; t < spec->n_tensors; t++) {
        c->base.params[t] = ps_model_param(c->model, t);
        c->base.grads[t] = ps_model_grad(c->model, t);
    }
    c->base.classes = ps_model_classes(c->model);
    c->base.input_n = ps_model_input_count(c->model);
    rc = -ENOMEM;
    c->base.batch_x = malloc((size_t)cfg->max_batch * c->base.input_n * sizeof(float));
    c->base.batch_y = malloc((size_t)cfg->max_batch);
    if (c->base.batch_x == NULL || c->base.batch_y == NULL)
        goto fail;
    if (cfg->threads > 0)
        openblas_set_num_threads(cfg->threads);
    threads = openblas_get_num_threads();
    snprintf(c->base.describe, sizeof(c->base.describe), "cpu: OpenBLAS, %d thread%s, FP32",
             threads, threads == 1 ? "" : "s");
    *out = &c->base;
    return 0;

fail:
    ps__cpu_free(&c->base);
    return rc;
}
