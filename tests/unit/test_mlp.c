/* Unit tests of the worker's MLP: back-propagated gradients against central
 * finite differences of an independent double-precision forward pass, the
 * agreement of evaluate with train_step, the initial parameters, and the
 * argument checks. Tiny networks keep the finite differences exact enough to
 * hold the float gradients to a tight tolerance. */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "mlp.h"
#include "../test_rng.h"

static void random_batch(float *x, uint8_t *y, int n, int input, int classes)
{
    fill_random(x, (size_t)n * input, 1.0);
    for (int i = 0; i < n; i++)
        y[i] = (uint8_t)(rng_uniform() * classes);
}

static ps_mlp *make_mlp(ps_model_spec *spec, const int *sizes, int n_sizes, int max_batch)
{
    ps_mlp *m;

    cr_assert_eq(ps_model_spec_init_mlp(spec, sizes, n_sizes, 42), 0);
    cr_assert_eq(ps_mlp_init(&m, spec, max_batch), 0);
    /* Biases start at zero; random ones make their gradients and the ReLU
     * pattern less special. */
    for (int l = 0; l < spec->n_layers; l++)
        fill_random(ps_mlp_param(m, 2 * l + 1), spec->tensors[2 * l + 1].numel, 0.3);
    return m;
}

/* The mean loss over n rows computed in double from the model's current
 * parameters, sharing no code with the kernels. Layers are at most 64 wide. */
static double loss_double(ps_mlp *m, const ps_model_spec *spec, const float *x, const uint8_t *y,
                          int n)
{
    double total = 0.0;

    for (int r = 0; r < n; r++) {
        double a[64] = {0}, z[64];
        int width = spec->sizes[0];

        for (int k = 0; k < width; k++)
            a[k] = x[(size_t)r * width + k];
        for (int l = 0; l < spec->n_layers; l++) {
            const float *w = ps_mlp_param(m, 2 * l), *b = ps_mlp_param(m, 2 * l + 1);
            int out = spec->sizes[l + 1];
            for (int o = 0; o < out; o++) {
                z[o] = b[o];
                for (int k = 0; k < width; k++)
                    z[o] += (double)w[o * width + k] * a[k];
            }
            for (int o = 0; o < out; o++)
                a[o] = l < spec->n_layers - 1 ? fmax(z[o], 0.0) : z[o];
            width = out;
        }
        double max = a[0], sum = 0.0;
        for (int c = 1; c < width; c++)
            max = fmax(max, a[c]);
        for (int c = 0; c < width; c++)
            sum += exp(a[c] - max);
        total += max + log(sum) - a[y[r]];
    }
    return total / n;
}

/* Checks every gradient entry of every tensor against a central difference
 * of loss_double. In double, h = 1e-5 leaves truncation and rounding errors
 * near 1e-10, so the tolerance |grad - fd| <= 1e-5 + 1e-3 * |fd| only has to
 * absorb the float arithmetic of the training step. */
static void gradient_check(const int *sizes, int n_sizes, int B, int max_batch, uint64_t seed)
{
    ps_model_spec spec;
    ps_mlp *m;
    float x[8 * 16], loss;
    uint8_t y[8];
    int correct;
    const double h = 1e-5;
    double want;

    rng_state = seed;
    m = make_mlp(&spec, sizes, n_sizes, max_batch);
    random_batch(x, y, B, sizes[0], sizes[n_sizes - 1]);
    cr_assert_eq(ps_mlp_train_step(m, x, y, B, &loss, &correct), 0);
    want = loss_double(m, &spec, x, y, B);
    cr_assert(fabs(loss - want) <= 1e-6, "loss %.7g, double %.7g", loss, want);
    for (int t = 0; t < spec.n_tensors; t++) {
        float *p = ps_mlp_param(m, t);
        const float *g = ps_mlp_grad(m, t);
        for (size_t i = 0; i < spec.tensors[t].numel; i++) {
            /* The perturbed values are rounded to float, so divide by the
             * step actually taken rather than the nominal 2h. */
            float keep = p[i], hi = (float)(keep + h), lo = (float)(keep - h);
            double up, down, fd;

            p[i] = hi;
            up = loss_double(m, &spec, x, y, B);
            p[i] = lo;
            down = loss_double(m, &spec, x, y, B);
            p[i] = keep;
            fd = (up - down) / ((double)hi - lo);
            cr_assert(fabs(g[i] - fd) <= 1e-5 + 1e-3 * fabs(fd),
                      "%s[%zu]: backprop %.7g, finite difference %.7g", spec.tensors[t].name, i,
                      g[i], fd);
        }
    }
    ps_mlp_free(m);
}

Test(mlp, gradients_match_finite_differences_5_4_3)
{
    gradient_check((const int[]){5, 4, 3}, 3, 3, 3, 1);
}

Test(mlp, gradients_match_finite_differences_deeper_short_batch)
{
    /* Two hidden layers exercise both delta buffers; B < max_batch checks
     * that strides follow B rather than the capacity. */
    gradient_check((const int[]){6, 5, 4, 3}, 4, 5, 8, 2);
}

Test(mlp, gradients_match_finite_differences_no_hidden_layer)
{
    gradient_check((const int[]){7, 4}, 2, 2, 2, 3);
}

Test(mlp, gradients_are_overwritten_not_accumulated)
{
    ps_model_spec spec;
    ps_mlp *m;
    float x[4 * 5], first[4 * 5], loss;
    uint8_t y[4];
    int correct;

    rng_state = 4;
    m = make_mlp(&spec, (const int[]){5, 4, 3}, 3, 4);
    random_batch(x, y, 4, 5, 3);
    cr_assert_eq(ps_mlp_train_step(m, x, y, 4, &loss, &correct), 0);
    memcpy(first, ps_mlp_grad(m, 0), sizeof(first));
    cr_assert_eq(ps_mlp_train_step(m, x, y, 4, &loss, &correct), 0);
    cr_assert_eq(memcmp(first, ps_mlp_grad(m, 0), sizeof(first)), 0);
    ps_mlp_free(m);
}

Test(mlp, evaluate_agrees_with_train_step)
{
    enum { N = 10, IN = 5, C = 3 };
    ps_model_spec spec;
    ps_mlp *m;
    float x[N * IN], step_loss, eval_loss;
    uint8_t y[N];
    int step_correct, eval_correct, sum_correct = 0;
    double want;

    rng_state = 5;
    m = make_mlp(&spec, (const int[]){IN, 4, C}, 3, 4);
    random_batch(x, y, N, IN, C);

    /* One batch: the same forward pass, so the results are identical. */
    cr_assert_eq(ps_mlp_train_step(m, x, y, 4, &step_loss, &step_correct), 0);
    cr_assert_eq(ps_mlp_evaluate(m, x, y, 4, &eval_loss, &eval_correct), 0);
    cr_assert_eq(eval_loss, step_loss);
    cr_assert_eq(eval_correct, step_correct);

    /* Ten rows in batches of 4, 4 and 2: the mean must weight the short
     * batch by its size. */
    for (int start = 0; start < N; start += 4) {
        int B = N - start < 4 ? N - start : 4;
        cr_assert_eq(ps_mlp_train_step(m, x + start * IN, y + start, B, &step_loss, &step_correct),
                     0);
        sum_correct += step_correct;
    }
    want = loss_double(m, &spec, x, y, N);
    cr_assert_eq(ps_mlp_evaluate(m, x, y, N, &eval_loss, &eval_correct), 0);
    cr_assert(fabs(eval_loss - want) <= 1e-6, "evaluate %.7g, double %.7g", eval_loss, want);
    cr_assert_eq(eval_correct, sum_correct);
    ps_mlp_free(m);
}

Test(mlp, params_start_at_spec_init_values)
{
    ps_model_spec spec;
    ps_mlp *m;

    cr_assert_eq(ps_model_spec_init_mlp(&spec, (const int[]){784, 256, 128, 10}, 4, 7), 0);
    cr_assert_eq(ps_mlp_init(&m, &spec, 64), 0);
    for (int t = 0; t < spec.n_tensors; t++) {
        size_t n = spec.tensors[t].numel;
        float *want = malloc(n * sizeof(float));

        cr_assert_not_null(want);
        ps_model_spec_init_values(&spec, t, 0, n, want);
        cr_assert_eq(memcmp(ps_mlp_param(m, t), want, n * sizeof(float)), 0, "tensor %s",
                     spec.tensors[t].name);
        free(want);
    }
    ps_mlp_free(m);
}

Test(mlp, rejects_out_of_range_sizes)
{
    ps_model_spec spec, empty;
    ps_mlp *m;
    float x[5 * 5] = {0}, loss = -1.0f;
    uint8_t y[5] = {0};
    int correct = -1;

    cr_assert_eq(ps_model_spec_init_mlp(&spec, (const int[]){5, 4, 3}, 3, 1), 0);
    cr_assert_eq(ps_mlp_init(&m, &spec, 0), -EINVAL);
    cr_assert_null(m);
    memset(&empty, 0, sizeof(empty));
    cr_assert_eq(ps_mlp_init(&m, &empty, 4), -EINVAL);
    cr_assert_null(m);

    cr_assert_eq(ps_mlp_init(&m, &spec, 4), 0);
    cr_assert_eq(ps_mlp_train_step(m, x, y, 0, &loss, &correct), -EINVAL);
    cr_assert_eq(ps_mlp_train_step(m, x, y, 5, &loss, &correct), -EINVAL);
    cr_assert_eq(ps_mlp_train_step(m, x, y, -1, &loss, &correct), -EINVAL);
    cr_assert_eq(ps_mlp_evaluate(m, x, y, 0, &loss, &correct), -EINVAL);
    cr_assert(loss == -1.0f && correct == -1, "outputs untouched on -EINVAL");
    cr_assert_eq(ps_mlp_train_step(m, x, y, 4, &loss, &correct), 0);
    cr_assert_eq(ps_mlp_evaluate(m, x, y, 5, &loss, &correct), 0);
    ps_mlp_free(m);
}
