/* Unit tests of the generic model executor (worker/model.h): a small CNN
 * (conv2d, ReLU, max-pool, flatten, dense, ReLU, dropout, dense) against the
 * same layers composed by hand from the library's plain-loop references,
 * gradients against central finite differences of the loss through the
 * whole model, the MLP model against the dense fast path composed by hand
 * (bit for bit: the default job must not change), the gradient callback's
 * order and tensor ids, dropout only in training and repeatable per step,
 * argument checks, and that every computation goes through the table of
 * operations the model is given (a counting table around the CPU's: the
 * same numbers, and each layer kind's functions called as often as the
 * model has such layers). */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend_ops.h"
#include "layers.h"
#include "model.h"
#include "../test_rng.h"

/* 2x8x8 -> conv 3x3 (pad 1) 3 -> ReLU -> max-pool 2 -> 3x4x4 -> flatten 48
 * -> dense 10 -> ReLU -> dropout -> dense 4. */
static const char *const cnn_text = "conv2d out=3 kernel=3 pad=1\n"
                                    "relu\n"
                                    "maxpool kernel=2\n"
                                    "flatten\n"
                                    "dense out=10\n"
                                    "relu\n"
                                    "dropout p=0.3\n"
                                    "dense out=classes\n";
enum { C_IN = 2, HW = 8, CLASSES = 4, MAX_B = 8, IN_N = C_IN * HW * HW };

static void build(const char *text, ps_act_shape in, int classes, ps_model_desc *d,
                  ps_model_spec *t)
{
    char err[256];

    cr_assert_eq(ps_model_desc_parse(d, text, "test", err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(ps_model_desc_resolve(d, &in, classes, 7, t, err, sizeof(err)), 0, "%s", err);
}

static ps_model *make_cnn(ps_model_desc *d, ps_model_spec *t, const char *text)
{
    ps_model *m;

    build(text, (ps_act_shape){3, {C_IN, HW, HW}}, CLASSES, d, t);
    cr_assert_eq(ps_model_init(&m, &ps_backend_cpu_ops, NULL, d, t, MAX_B, 11), 0);
    /* Larger biases than the zero init, so ReLUs and the pool see both signs. */
    for (int i = 1; i < t->n_tensors; i += 2)
        fill_random(ps_model_param(m, i), t->tensors[i].numel, 0.3);
    return m;
}

static void random_batch(float *x, uint8_t *y, int B)
{
    fill_random(x, (size_t)B * IN_N, 1.0);
    for (int i = 0; i < B; i++)
        y[i] = (uint8_t)(rng_next() % CLASSES);
}

static void assert_close(const float *got, const float *want, size_t n, double tol,
                         const char *what)
{
    for (size_t i = 0; i < n; i++)
        cr_assert(fabs((double)got[i] - want[i]) <= tol * (1.0 + fabs((double)want[i])),
                  "%s[%zu]: %.9g, want %.9g", what, i, got[i], want[i]);
}

Test(model, cnn_matches_the_reference_layers_composed_by_hand)
{
    ps_model_desc d;
    ps_model_spec t;
    ps_model *m;
    ps_conv2d conv;
    ps_maxpool2d pool;
    ps_dense fc1, fc2;
    ps_dropout drop;
    ps_shape s1, s2, s3, s4;
    const int B = 5;
    const uint64_t step = 42;
    float x[MAX_B * IN_N], a1[B * 192], a2[B * 48], a3[B * 10], a4[B * 10], logits[B * CLASSES];
    float d4[B * 10], d3[B * 10], d2[B * 48], d1[B * 192];
    float gw[4][480], gb[4][10], loss, want_loss;
    uint8_t y[MAX_B];
    int correct, want_correct;

    rng_state = 3;
    m = make_cnn(&d, &t, cnn_text);
    random_batch(x, y, B);
    cr_assert_eq(ps_model_train_step(m, x, y, B, step, &loss, &correct), 0);

    /* The same model from the references. The dropout layer is the 7th
     * (index 6) and its seed is the executor's rule for it. */
    cr_assert_eq(ps_conv2d_init(&conv, (ps_shape){C_IN, HW, HW}, 3, 3, 3, 1, 1, &s1), 0);
    cr_assert_eq(ps_maxpool2d_init(&pool, s1, 2, 2, &s2), 0);
    cr_assert_eq(ps_dense_init(&fc1, ps_flatten_shape(s2), 10, &s3), 0);
    cr_assert_eq(ps_dense_init(&fc2, s3, CLASSES, &s4), 0);
    cr_assert_eq(ps_dropout_init(&drop, 0.3f, 11 + 7 * 0x9E3779B97F4A7C15ull), 0);
    ps_conv2d_forward_ref(&conv, B, x, ps_model_param(m, 0), ps_model_param(m, 1), a1);
    ps_relu_forward((size_t)B * 192, a1, a1);
    ps_maxpool2d_forward_ref(&pool, B, a1, a2);
    ps_dense_forward_ref(&fc1, B, a2, ps_model_param(m, 2), ps_model_param(m, 3), a3);
    ps_relu_forward((size_t)B * 10, a3, a3);
    ps_dropout_forward(&drop, step, 1, (size_t)B * 10, a3, a4);
    ps_dense_forward_ref(&fc2, B, a4, ps_model_param(m, 4), ps_model_param(m, 5), logits);
    cr_assert_eq(ps_softmax_xent(B, CLASSES, logits, y, d4, &want_loss, &want_correct), 0);
    cr_assert_float_eq(loss, want_loss, 1e-5 * (1 + fabsf(want_loss)));
    cr_assert_eq(correct, want_correct);

    ps_dense_backward_ref(&fc2, B, a4, ps_model_param(m, 4), d4, d3, gw[3], gb[3]);
    ps_dropout_backward(&drop, step, 1, (size_t)B * 10, d3, d3);
    ps_relu_backward((size_t)B * 10, a3, d3, d3);
    ps_dense_backward_ref(&fc1, B, a2, ps_model_param(m, 2), d3, d2, gw[2], gb[2]);
    ps_maxpool2d_backward_ref(&pool, B, a1, d2, d1);
    ps_relu_backward((size_t)B * 192, a1, d1, d1);
    ps_conv2d_backward_ref(&conv, B, x, ps_model_param(m, 0), d1, NULL, gw[1], gb[1]);
    /* Single-precision GEMMs against double-accumulated references. */
    assert_close(ps_model_grad(m, 4), gw[3], t.tensors[4].numel, 1e-4, "fc2.weight");
    assert_close(ps_model_grad(m, 5), gb[3], t.tensors[5].numel, 1e-4, "fc2.bias");
    assert_close(ps_model_grad(m, 2), gw[2], t.tensors[2].numel, 1e-4, "fc1.weight");
    assert_close(ps_model_grad(m, 3), gb[2], t.tensors[3].numel, 1e-4, "fc1.bias");
    assert_close(ps_model_grad(m, 0), gw[1], t.tensors[0].numel, 1e-4, "conv1.weight");
    assert_close(ps_model_grad(m, 1), gb[1], t.tensors[1].numel, 1e-4, "conv1.bias");
    ps_model_free(m);
}

/* The mean loss of the batch with dropout off, as evaluate computes it. */
static double eval_loss(ps_model *m, const float *x, const uint8_t *y, int B)
{
    float loss;
    int correct;

    cr_assert_eq(ps_model_evaluate(m, x, y, B, &loss, &correct, NULL), 0);
    return loss;
}

Test(model, cnn_gradients_match_finite_differences)
{
    /* No dropout: finite differences need the same function on every call. */
    const char *text = "conv2d out=3 kernel=3 pad=1\nrelu\nmaxpool kernel=2\nflatten\n"
                       "dense out=classes\n";
    const double eps = 1e-3;
    ps_model_desc d;
    ps_model_spec t;
    ps_model *m;
    float x[MAX_B * IN_N], loss;
    uint8_t y[MAX_B];
    int correct, checked = 0;

    rng_state = 5;
    m = make_cnn(&d, &t, text);
    random_batch(x, y, 6);
    cr_assert_eq(ps_model_train_step(m, x, y, 6, 0, &loss, &correct), 0);
    for (int i = 0; i < t.n_tensors; i++) {
        size_t n = t.tensors[i].numel;
        float *p = ps_model_param(m, i), g[512];

        cr_assert(n <= 512);
        memcpy(g, ps_model_grad(m, i), n * sizeof(float));
        /* Every 7th element (all of a bias): enough to catch a wrong index
         * or a missing term, in well under a second. */
        for (size_t k = 0; k < n; k += (n > 16 ? 7 : 1)) {
            float keep = p[k];
            double up, down, fd;
            p[k] = keep + (float)eps;
            up = eval_loss(m, x, y, 6);
            p[k] = keep - (float)eps;
            down = eval_loss(m, x, y, 6);
            p[k] = keep;
            fd = (up - down) / (2 * eps);
            /* Float losses near 1.4 round at ~1e-7, which the difference
             * magnifies to ~1e-4; a max-pool tie flipped by eps would be
             * far larger. */
            cr_assert(fabs(fd - g[k]) <= 5e-4 + 2e-2 * fabs(fd), "%s[%zu]: backward %.6g, fd %.6g",
                      t.tensors[i].name, k, g[k], fd);
            checked++;
        }
    }
    cr_assert_gt(checked, 20);
    ps_model_free(m);
}

Test(model, mlp_is_the_dense_fast_path_bit_for_bit)
{
    const char *text = "flatten\ndense out=6\nrelu\ndense out=classes\n";
    ps_model_desc d;
    ps_model_spec t;
    ps_model *m;
    ps_dense l1, l2;
    ps_shape s;
    enum { B = 7, IN = 13 };
    float x[B * IN], h[B * 6], logits[B * 3], dl[B * 3], dh[B * 6], gw[2][80], gb[2][6];
    float loss, want_loss;
    uint8_t y[B];
    int correct, want_correct;

    rng_state = 9;
    build(text, (ps_act_shape){1, {IN, 0, 0}}, 3, &d, &t);
    cr_assert_eq(t.n_layers, 2, "the MLP view is filled");
    cr_assert_eq(ps_model_init(&m, &ps_backend_cpu_ops, NULL, &d, &t, 16, 0), 0);
    fill_random(x, B * IN, 1.0);
    for (int i = 0; i < B; i++)
        y[i] = (uint8_t)(rng_next() % 3);
    cr_assert_eq(ps_model_train_step(m, x, y, B, 0, &loss, &correct), 0);

    cr_assert_eq(ps_dense_init(&l1, (ps_shape){IN, 1, 1}, 6, &s), 0);
    cr_assert_eq(ps_dense_init(&l2, s, 3, &s), 0);
    ps_dense_forward(&l1, B, x, ps_model_param(m, 0), ps_model_param(m, 1), h);
    ps_relu_forward(B * 6, h, h);
    ps_dense_forward(&l2, B, h, ps_model_param(m, 2), ps_model_param(m, 3), logits);
    cr_assert_eq(ps_softmax_xent(B, 3, logits, y, dl, &want_loss, &want_correct), 0);
    ps_dense_backward(&l2, B, h, ps_model_param(m, 2), dl, dh, gw[1], gb[1]);
    ps_relu_backward(B * 6, h, dh, dh);
    ps_dense_backward(&l1, B, x, ps_model_param(m, 0), dh, NULL, gw[0], gb[0]);
    cr_assert_eq(loss, want_loss);
    cr_assert_eq(correct, want_correct);
    cr_assert_eq(memcmp(ps_model_grad(m, 0), gw[0], 6 * IN * sizeof(float)), 0);
    cr_assert_eq(memcmp(ps_model_grad(m, 1), gb[0], 6 * sizeof(float)), 0);
    cr_assert_eq(memcmp(ps_model_grad(m, 2), gw[1], 18 * sizeof(float)), 0);
    cr_assert_eq(memcmp(ps_model_grad(m, 3), gb[1], 3 * sizeof(float)), 0);
    ps_model_free(m);
}

typedef struct {
    int first[8], count[8], n;
} calls;

static void record(void *arg, int first, int count)
{
    calls *c = arg;

    cr_assert_lt(c->n, 8);
    c->first[c->n] = first;
    c->count[c->n++] = count;
}

Test(model, reports_each_layer_last_first_by_tensor_id)
{
    ps_model_desc d;
    ps_model_spec t;
    ps_model *m;
    float x[MAX_B * IN_N], loss;
    uint8_t y[MAX_B];
    int correct;
    calls c = {{0}, {0}, 0};

    rng_state = 4;
    m = make_cnn(&d, &t, cnn_text);
    ps_model_on_grads(m, record, &c);
    random_batch(x, y, 3);
    cr_assert_eq(ps_model_train_step(m, x, y, 3, 0, &loss, &correct), 0);
    cr_assert_eq(c.n, 3);
    cr_assert_eq(c.first[0], 4);
    cr_assert_eq(c.first[1], 2);
    cr_assert_eq(c.first[2], 0);
    for (int i = 0; i < 3; i++)
        cr_assert_eq(c.count[i], 2);
    ps_model_free(m);
}

Test(model, dropout_only_in_training_and_repeatable_per_step)
{
    ps_model_desc d;
    ps_model_spec t;
    ps_model *m;
    float x[MAX_B * IN_N], l1, l2, l3, e1, e2, g[480];
    uint8_t y[MAX_B], pred[MAX_B];
    int c;

    rng_state = 6;
    m = make_cnn(&d, &t, cnn_text);
    random_batch(x, y, MAX_B);
    cr_assert_eq(ps_model_train_step(m, x, y, MAX_B, 1, &l1, &c), 0);
    memcpy(g, ps_model_grad(m, 2), sizeof(g));
    cr_assert_eq(ps_model_train_step(m, x, y, MAX_B, 2, &l2, &c), 0);
    cr_assert_neq(l1, l2, "another step draws another mask");
    cr_assert_eq(ps_model_train_step(m, x, y, MAX_B, 1, &l3, &c), 0);
    cr_assert_eq(l1, l3, "the same step draws the same mask");
    cr_assert_eq(memcmp(g, ps_model_grad(m, 2), sizeof(g)), 0, "overwritten, not accumulated");
    cr_assert_eq(ps_model_evaluate(m, x, y, MAX_B, &e1, &c, pred), 0);
    cr_assert_eq(ps_model_evaluate(m, x, y, 3, &e2, &c, NULL), 0);
    cr_assert_neq(e1, l1, "evaluation runs without dropout");
    for (int i = 0; i < MAX_B; i++)
        cr_assert_lt(pred[i], CLASSES);
    ps_model_free(m);
}

Test(model, evaluate_in_batches_agrees_with_one_pass)
{
    const char *text = "conv2d out=3 kernel=3 pad=1\nrelu\nmaxpool kernel=2\nflatten\n"
                       "dense out=classes\n";
    ps_model_desc d;
    ps_model_spec t;
    ps_model *m, *big;
    enum { N = 19 };
    float x[N * IN_N], a, b;
    uint8_t y[N], pa[N], pb[N];
    int ca, cb;

    rng_state = 8;
    build(text, (ps_act_shape){3, {C_IN, HW, HW}}, CLASSES, &d, &t);
    cr_assert_eq(ps_model_init(&m, &ps_backend_cpu_ops, NULL, &d, &t, 4, 0), 0);
    cr_assert_eq(ps_model_init(&big, &ps_backend_cpu_ops, NULL, &d, &t, N, 0), 0);
    random_batch(x, y, N);
    /* 19 samples in batches of 4 (the last of 3) against one batch of 19. */
    cr_assert_eq(ps_model_evaluate(m, x, y, N, &a, &ca, pa), 0);
    cr_assert_eq(ps_model_evaluate(big, x, y, N, &b, &cb, pb), 0);
    cr_assert_float_eq(a, b, 1e-6);
    cr_assert_eq(ca, cb);
    cr_assert_eq(memcmp(pa, pb, N), 0);
    ps_model_free(m);
    ps_model_free(big);
}

Test(model, params_start_at_the_tables_values_and_bad_arguments_are_refused)
{
    ps_model_desc d, unresolved;
    ps_model_spec t;
    ps_model *m = NULL;
    float x[MAX_B * IN_N] = {0}, loss, want[480];
    uint8_t y[MAX_B] = {0};
    char err[128];
    int c;

    build(cnn_text, (ps_act_shape){3, {C_IN, HW, HW}}, CLASSES, &d, &t);
    cr_assert_eq(ps_model_init(&m, &ps_backend_cpu_ops, NULL, &d, &t, MAX_B, 0), 0);
    for (int i = 0; i < t.n_tensors; i++) {
        ps_model_spec_init_values(&t, i, 0, t.tensors[i].numel, want);
        cr_assert_eq(memcmp(ps_model_param(m, i), want, t.tensors[i].numel * sizeof(float)), 0);
    }
    cr_assert_eq(ps_model_train_step(m, x, y, 0, 0, &loss, &c), -EINVAL);
    cr_assert_eq(ps_model_train_step(m, x, y, MAX_B + 1, 0, &loss, &c), -EINVAL);
    y[1] = CLASSES;
    cr_assert_eq(ps_model_train_step(m, x, y, 2, 0, &loss, &c), -EINVAL, "label >= classes");
    cr_assert_eq(ps_model_evaluate(m, x, y, 0, &loss, &c, NULL), -EINVAL);
    /* A finish needs a start, and reads its step once. */
    cr_assert_eq(ps_model_train_finish(m, &loss, &c), -EINVAL);
    y[1] = 0;
    cr_assert_eq(ps_model_train_start(m, x, y, 2, 0), 0);
    cr_assert_eq(ps_model_train_finish(m, &loss, &c), 0);
    cr_assert_eq(ps_model_train_finish(m, &loss, &c), -EINVAL);
    ps_model_free(m);
    ps_model_free(NULL);

    cr_assert_eq(ps_model_desc_parse(&unresolved, cnn_text, "t", err, sizeof(err)), 0);
    cr_assert_eq(ps_model_init(&m, &ps_backend_cpu_ops, NULL, &unresolved, &t, MAX_B, 0), -EINVAL);
    cr_assert_null(m);
    cr_assert_eq(ps_model_init(&m, &ps_backend_cpu_ops, NULL, &d, &t, 0, 0), -EINVAL);
    t.tensors[2].numel--; /* a table that is not this model's */
    cr_assert_eq(ps_model_init(&m, &ps_backend_cpu_ops, NULL, &d, &t, MAX_B, 0), -EINVAL);
    cr_assert_null(m);
}

/* ---- the executor computes only through its table ------------------------ */

/* How often each entry of the CPU table was called through the counting
 * table below. */
enum {
    N_ALLOC,
    N_WRITE,
    N_READ,
    N_ZERO,
    N_DENSE_F,
    N_DENSE_B,
    N_CONV_F,
    N_CONV_B,
    N_POOL_F,
    N_POOL_B,
    N_RELU_F,
    N_RELU_B,
    N_DROP_F,
    N_DROP_B,
    N_XENT,
    N_PREDICT,
    N_KINDS
};
static int counts[N_KINDS];
static const ps_model_ops *cpu = &ps_backend_cpu_ops;

static void *c_alloc(void *d, size_t n)
{
    counts[N_ALLOC]++;
    return cpu->alloc(d, n);
}
static int c_write(void *d, void *dst, const void *src, size_t n)
{
    counts[N_WRITE]++;
    return cpu->write(d, dst, src, n);
}
static int c_read(void *d, void *dst, const void *src, size_t n)
{
    counts[N_READ]++;
    return cpu->read(d, dst, src, n);
}
static int c_zero(void *d, void *p, size_t n)
{
    counts[N_ZERO]++;
    return cpu->zero(d, p, n);
}
static int c_dense_f(void *d, const ps_dense *g, int B, const float *x, const float *w,
                     const float *b, float *y, float *ws)
{
    counts[N_DENSE_F]++;
    return cpu->dense_forward(d, g, B, x, w, b, y, ws);
}
static int c_dense_b(void *d, const ps_dense *g, int B, const float *x, const float *w,
                     const float *dy, float *dx, float *dw, float *db, float *ws)
{
    counts[N_DENSE_B]++;
    return cpu->dense_backward(d, g, B, x, w, dy, dx, dw, db, ws);
}
static int c_conv_f(void *d, const ps_conv2d *g, int B, const float *x, const float *w,
                    const float *b, float *y, float *ws)
{
    counts[N_CONV_F]++;
    return cpu->conv2d_forward(d, g, B, x, w, b, y, ws);
}
static int c_conv_b(void *d, const ps_conv2d *g, int B, const float *x, const float *w,
                    const float *dy, float *dx, float *dw, float *db, float *ws)
{
    counts[N_CONV_B]++;
    return cpu->conv2d_backward(d, g, B, x, w, dy, dx, dw, db, ws);
}
static int c_pool_f(void *d, const ps_maxpool2d *g, int B, const float *x, float *y, int32_t *a)
{
    counts[N_POOL_F]++;
    return cpu->maxpool2d_forward(d, g, B, x, y, a);
}
static int c_pool_b(void *d, const ps_maxpool2d *g, int B, const float *dy, const int32_t *a,
                    float *dx)
{
    counts[N_POOL_B]++;
    return cpu->maxpool2d_backward(d, g, B, dy, a, dx);
}
static int c_relu_f(void *d, size_t n, const float *x, float *y)
{
    counts[N_RELU_F]++;
    return cpu->relu_forward(d, n, x, y);
}
static int c_relu_b(void *d, size_t n, const float *y, const float *dy, float *dx)
{
    counts[N_RELU_B]++;
    return cpu->relu_backward(d, n, y, dy, dx);
}
static int c_drop_f(void *d, const ps_dropout *g, uint64_t s, int t, size_t n, const float *x,
                    float *y)
{
    counts[N_DROP_F]++;
    return cpu->dropout_forward(d, g, s, t, n, x, y);
}
static int c_drop_b(void *d, const ps_dropout *g, uint64_t s, int t, size_t n, const float *dy,
                    float *dx)
{
    counts[N_DROP_B]++;
    return cpu->dropout_backward(d, g, s, t, n, dy, dx);
}
static int c_xent(void *d, int B, int C, const float *l, const uint8_t *y, float *dl, float *rows,
                  ps_model_totals *t)
{
    counts[N_XENT]++;
    return cpu->softmax_xent(d, B, C, l, y, dl, rows, t);
}
static int c_predict(void *d, int B, int C, const float *l, uint8_t *p)
{
    counts[N_PREDICT]++;
    return cpu->predict(d, B, C, l, p);
}

Test(model, computes_only_through_its_table)
{
    ps_model_ops counting = ps_backend_cpu_ops;
    ps_model_desc d;
    ps_model_spec t;
    ps_model *ref, *m;
    float x[MAX_B * IN_N], lr, lm;
    uint8_t y[MAX_B], pr[MAX_B], pm[MAX_B];
    int cr, cm;

    counting.alloc = c_alloc, counting.write = c_write, counting.read = c_read;
    counting.zero = c_zero, counting.dense_forward = c_dense_f;
    counting.dense_backward = c_dense_b, counting.conv2d_forward = c_conv_f;
    counting.conv2d_backward = c_conv_b, counting.maxpool2d_forward = c_pool_f;
    counting.maxpool2d_backward = c_pool_b, counting.relu_forward = c_relu_f;
    counting.relu_backward = c_relu_b, counting.dropout_forward = c_drop_f;
    counting.dropout_backward = c_drop_b, counting.softmax_xent = c_xent;
    counting.predict = c_predict;
    rng_state = 12;
    ref = make_cnn(&d, &t, cnn_text);
    cr_assert_eq(ps_model_init(&m, &counting, NULL, &d, &t, MAX_B, 11), 0);
    cr_assert_gt(counts[N_ALLOC], 2 * t.n_tensors, "every buffer from the table");
    cr_assert_eq(counts[N_WRITE], t.n_tensors, "initial values written through the table");
    for (int i = 0; i < t.n_tensors; i++)
        memcpy(ps_model_param(m, i), ps_model_param(ref, i), t.tensors[i].numel * sizeof(float));
    random_batch(x, y, MAX_B);

    memset(counts, 0, sizeof(counts));
    cr_assert_eq(ps_model_train_step(ref, x, y, MAX_B, 3, &lr, &cr), 0);
    cr_assert_eq(ps_model_train_step(m, x, y, MAX_B, 3, &lm, &cm), 0);
    cr_assert_eq(lr, lm);
    cr_assert_eq(cr, cm);
    for (int i = 0; i < t.n_tensors; i++)
        cr_assert_eq(
            memcmp(ps_model_grad(m, i), ps_model_grad(ref, i), t.tensors[i].numel * sizeof(float)),
            0, "gradient of %s", t.tensors[i].name);
    /* cnn_text: one conv2d, one max-pool, two dense, two ReLUs, one
     * dropout, the loss, and the totals cleared and read once. */
    cr_assert_eq(counts[N_CONV_F], 1);
    cr_assert_eq(counts[N_CONV_B], 1);
    cr_assert_eq(counts[N_POOL_F], 1);
    cr_assert_eq(counts[N_POOL_B], 1);
    cr_assert_eq(counts[N_DENSE_F], 2);
    cr_assert_eq(counts[N_DENSE_B], 2);
    cr_assert_eq(counts[N_RELU_F], 2);
    cr_assert_eq(counts[N_RELU_B], 2);
    cr_assert_eq(counts[N_DROP_F], 1);
    cr_assert_eq(counts[N_DROP_B], 1);
    cr_assert_eq(counts[N_XENT], 1);
    cr_assert_eq(counts[N_ZERO], 1);
    cr_assert_eq(counts[N_READ], 1);
    cr_assert_eq(counts[N_ALLOC], 0, "a step allocates nothing");

    memset(counts, 0, sizeof(counts));
    cr_assert_eq(ps_model_evaluate(ref, x, y, MAX_B, &lr, &cr, pr), 0);
    cr_assert_eq(ps_model_evaluate(m, x, y, MAX_B, &lm, &cm, pm), 0);
    cr_assert_eq(lr, lm);
    cr_assert_eq(memcmp(pr, pm, MAX_B), 0);
    cr_assert_eq(counts[N_PREDICT], 1);
    cr_assert_eq(counts[N_CONV_B] + counts[N_DENSE_B], 0, "evaluation runs no backward");
    ps_model_free(m);
    ps_model_free(ref);
}
