/* bench-layers: forward + backward time per sample of the reference CNN on
 * one CPU thread, built from the layer library (kernels/layers.h):
 *
 *   1x28x28 -> conv3x3 32 pad 1 -> ReLU -> max-pool 2 -> conv3x3 64 pad 1
 *   -> ReLU -> max-pool 2 -> flatten -> dense 128 -> ReLU -> dense 10
 *   -> softmax cross-entropy
 *
 * on random inputs (the time does not depend on the values). OpenBLAS runs
 * single-threaded, as each worker does. Reports the median over rounds of
 * the time per batch and per sample, and each layer's share, so a slow layer
 * shows. Not part of ctest: the numbers depend on the machine and its load. */
#include <cblas.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "bench_util.h"
#include "flags.h"
#include "layers.h"
#include "../test_rng.h"

#define PS__MAX_ROUNDS 50
#define PS__CLASSES    10

/* Layers in order; the times array follows it. */
enum { L_CONV1, L_RELU1, L_POOL1, L_CONV2, L_RELU2, L_POOL2, L_FC1, L_RELU3, L_FC2, L_LOSS, L_N };
static const char *const ps__names[L_N] = {"conv1", "relu1", "pool1", "conv2", "relu2",
                                           "pool2", "fc1",   "relu3", "fc2",   "loss"};

typedef struct cnn {
    int B;
    ps_conv2d c1, c2;
    ps_maxpool2d p1, p2;
    ps_dense f1, f2;
    /* Activations (a*), their gradients (g*), parameters (w*, b*) and their
     * gradients; one allocation each, freed by ps__cnn_free. */
    float *x, *a1, *a2, *a3, *a4, *a5, *logits;
    float *g1, *g2, *g3, *g4, *g5, *glogits;
    float *w1, *b1, *w2, *b2, *w3, *b3, *w4, *b4;
    float *dw1, *db1, *dw2, *db2, *dw3, *db3, *dw4, *db4, *ws;
    int32_t *i1, *i2;
    uint8_t *labels;
} cnn;

static float *ps__alloc(size_t n, int *failed)
{
    float *p = malloc(n * sizeof(float));
    if (!p)
        *failed = 1;
    else
        fill_random(p, n, 0.1);
    return p;
}

static void ps__cnn_free(cnn *m)
{
    float **all[] = {&m->x,   &m->a1,  &m->a2,  &m->a3,  &m->a4,      &m->a5,  &m->logits, &m->g1,
                     &m->g2,  &m->g3,  &m->g4,  &m->g5,  &m->glogits, &m->w1,  &m->b1,     &m->w2,
                     &m->b2,  &m->w3,  &m->b3,  &m->w4,  &m->b4,      &m->dw1, &m->db1,    &m->dw2,
                     &m->db2, &m->dw3, &m->db3, &m->dw4, &m->db4,     &m->ws};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        free(*all[i]);
    free(m->i1), free(m->i2), free(m->labels);
}

static int ps__cnn_init(cnn *m, int B)
{
    ps_shape s0 = {1, 28, 28}, s1, s2, s3, s4, s5, s6;
    int failed = 0;
    size_t ws;

    memset(m, 0, sizeof(*m));
    m->B = B;
    if (ps_conv2d_init(&m->c1, s0, 32, 3, 3, 1, 1, &s1) ||
        ps_maxpool2d_init(&m->p1, s1, 2, 2, &s2) ||
        ps_conv2d_init(&m->c2, s2, 64, 3, 3, 1, 1, &s3) ||
        ps_maxpool2d_init(&m->p2, s3, 2, 2, &s4) ||
        ps_dense_init(&m->f1, ps_flatten_shape(s4), 128, &s5) ||
        ps_dense_init(&m->f2, s5, PS__CLASSES, &s6))
        return -EINVAL;
    size_t n0 = B * ps_shape_count(s0), n1 = B * ps_shape_count(s1), n2 = B * ps_shape_count(s2);
    size_t n3 = B * ps_shape_count(s3), n4 = B * ps_shape_count(s4), n5 = B * ps_shape_count(s5);
    ws = ps_conv2d_workspace(&m->c1) > ps_conv2d_workspace(&m->c2) ? ps_conv2d_workspace(&m->c1)
                                                                   : ps_conv2d_workspace(&m->c2);
    m->x = ps__alloc(n0, &failed);
    m->a1 = ps__alloc(n1, &failed), m->g1 = ps__alloc(n1, &failed);
    m->a2 = ps__alloc(n2, &failed), m->g2 = ps__alloc(n2, &failed);
    m->a3 = ps__alloc(n3, &failed), m->g3 = ps__alloc(n3, &failed);
    m->a4 = ps__alloc(n4, &failed), m->g4 = ps__alloc(n4, &failed);
    m->a5 = ps__alloc(n5, &failed), m->g5 = ps__alloc(n5, &failed);
    m->logits = ps__alloc((size_t)B * PS__CLASSES, &failed);
    m->glogits = ps__alloc((size_t)B * PS__CLASSES, &failed);
    m->w1 = ps__alloc(ps_conv2d_weight_count(&m->c1), &failed), m->b1 = ps__alloc(32, &failed);
    m->w2 = ps__alloc(ps_conv2d_weight_count(&m->c2), &failed), m->b2 = ps__alloc(64, &failed);
    m->w3 = ps__alloc((size_t)m->f1.in * m->f1.out, &failed), m->b3 = ps__alloc(128, &failed);
    m->w4 = ps__alloc((size_t)m->f2.in * m->f2.out, &failed);
    m->b4 = ps__alloc(PS__CLASSES, &failed);
    m->dw1 = ps__alloc(ps_conv2d_weight_count(&m->c1), &failed), m->db1 = ps__alloc(32, &failed);
    m->dw2 = ps__alloc(ps_conv2d_weight_count(&m->c2), &failed), m->db2 = ps__alloc(64, &failed);
    m->dw3 = ps__alloc((size_t)m->f1.in * m->f1.out, &failed), m->db3 = ps__alloc(128, &failed);
    m->dw4 = ps__alloc((size_t)m->f2.in * m->f2.out, &failed);
    m->db4 = ps__alloc(PS__CLASSES, &failed);
    m->ws = ps__alloc(ws, &failed);
    m->i1 = malloc(n2 * sizeof(int32_t)), m->i2 = malloc(n4 * sizeof(int32_t));
    m->labels = malloc((size_t)B);
    if (failed || !m->i1 || !m->i2 || !m->labels) {
        ps__cnn_free(m);
        return -ENOMEM;
    }
    for (int i = 0; i < B; i++)
        m->labels[i] = (uint8_t)(rng_next() % PS__CLASSES);
    return 0;
}

/* One forward + backward; t[layer] += seconds spent in it (both passes). */
static void ps__cnn_step(cnn *m, double *t)
{
    int B = m->B;
    size_t n1 = B * ps_shape_count((ps_shape){32, 28, 28});
    size_t n3 = B * ps_shape_count((ps_shape){64, 14, 14}), n5 = (size_t)B * 128;
    float loss;
    int correct;
    double t0 = ps_clock_now(), t1;

#define PS__LAP(layer)                                                                             \
    do {                                                                                           \
        t1 = ps_clock_now();                                                                       \
        t[layer] += t1 - t0;                                                                       \
        t0 = t1;                                                                                   \
    } while (0)
    ps_conv2d_forward(&m->c1, B, m->x, m->w1, m->b1, m->a1, m->ws);
    PS__LAP(L_CONV1);
    ps_relu_forward(n1, m->a1, m->a1);
    PS__LAP(L_RELU1);
    ps_maxpool2d_forward(&m->p1, B, m->a1, m->a2, m->i1);
    PS__LAP(L_POOL1);
    ps_conv2d_forward(&m->c2, B, m->a2, m->w2, m->b2, m->a3, m->ws);
    PS__LAP(L_CONV2);
    ps_relu_forward(n3, m->a3, m->a3);
    PS__LAP(L_RELU2);
    ps_maxpool2d_forward(&m->p2, B, m->a3, m->a4, m->i2);
    PS__LAP(L_POOL2);
    /* Flatten is a view: a4 is read as [B][3136]. */
    ps_dense_forward(&m->f1, B, m->a4, m->w3, m->b3, m->a5);
    PS__LAP(L_FC1);
    ps_relu_forward(n5, m->a5, m->a5);
    PS__LAP(L_RELU3);
    ps_dense_forward(&m->f2, B, m->a5, m->w4, m->b4, m->logits);
    PS__LAP(L_FC2);
    ps_softmax_xent(B, PS__CLASSES, m->logits, m->labels, m->glogits, &loss, &correct);
    PS__LAP(L_LOSS);
    ps_dense_backward(&m->f2, B, m->a5, m->w4, m->glogits, m->g5, m->dw4, m->db4);
    PS__LAP(L_FC2);
    ps_relu_backward(n5, m->a5, m->g5, m->g5);
    PS__LAP(L_RELU3);
    ps_dense_backward(&m->f1, B, m->a4, m->w3, m->g5, m->g4, m->dw3, m->db3);
    PS__LAP(L_FC1);
    ps_maxpool2d_backward(&m->p2, B, m->g4, m->i2, m->g3);
    PS__LAP(L_POOL2);
    ps_relu_backward(n3, m->a3, m->g3, m->g3);
    PS__LAP(L_RELU2);
    ps_conv2d_backward(&m->c2, B, m->a2, m->w2, m->g3, m->g2, m->dw2, m->db2, m->ws);
    PS__LAP(L_CONV2);
    ps_maxpool2d_backward(&m->p1, B, m->g2, m->i1, m->g1);
    PS__LAP(L_POOL1);
    ps_relu_backward(n1, m->a1, m->g1, m->g1);
    PS__LAP(L_RELU1);
    /* The first layer needs no input gradient. */
    ps_conv2d_backward(&m->c1, B, m->x, m->w1, m->g1, NULL, m->dw1, m->db1, m->ws);
    PS__LAP(L_CONV1);
#undef PS__LAP
}

int main(int argc, char **argv)
{
    int batch = 64, rounds = 5, steps = 10, rc;
    const ps_flag flags[] = {
        {"batch", PS_FLAG_INT, &batch, "N", "samples per forward + backward", 1, 4096, NULL, NULL,
         NULL},
        {"rounds", PS_FLAG_INT, &rounds, "N", "timed rounds; the median is reported", 1,
         PS__MAX_ROUNDS, NULL, NULL, NULL},
        {"steps", PS_FLAG_INT, &steps, "N", "forward + backward passes per round", 1, 10000, NULL,
         NULL, NULL},
    };
    double per_batch[PS__MAX_ROUNDS], layer[L_N] = {0}, total = 0.0;
    cnn m;

    rc = ps_flags_parse(flags, (int)(sizeof(flags) / sizeof(flags[0])), argc, argv, "bench-layers",
                        "Forward + backward time per sample of the reference CNN on one thread.");
    if (rc != 0)
        return rc > 0 ? 0 : 2;
    openblas_set_num_threads(1);
    rng_state = 1;
    if (ps__cnn_init(&m, batch) != 0) {
        fprintf(stderr, "bench-layers: out of memory\n");
        return 1;
    }
    /* One untimed pass faults the buffers in and warms OpenBLAS. */
    ps__cnn_step(&m, layer);
    memset(layer, 0, sizeof(layer));
    for (int r = 0; r < rounds; r++) {
        double t0 = ps_clock_now();
        for (int s = 0; s < steps; s++)
            ps__cnn_step(&m, layer);
        per_batch[r] = (ps_clock_now() - t0) / steps;
    }
    ps_bench_sort(per_batch, (size_t)rounds);
    double med = ps_bench_pct(per_batch, (size_t)rounds, 0.5);
    for (int l = 0; l < L_N; l++)
        total += layer[l];
    printf("bench-layers: CNN forward + backward, batch %d, 1 thread, median of %d rounds of %d\n",
           batch, rounds, steps);
    printf("  %.2f ms per batch, %.1f us per sample, %.0f samples/s\n", med * 1e3,
           med * 1e6 / batch, batch / med);
    for (int l = 0; l < L_N; l++)
        printf("  %-6s %5.1f%%  %7.2f ms per batch\n", ps__names[l], 100.0 * layer[l] / total,
               1e3 * layer[l] / ((double)rounds * steps));
    printf("{\"bench\":\"layers\",\"batch\":%d,\"ms_per_batch\":%.3f,\"us_per_sample\":%.2f}\n",
           batch, med * 1e3, med * 1e6 / batch);
    ps__cnn_free(&m);
    return 0;
}
