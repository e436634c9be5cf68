/* Unit tests of the CPU kernels: the OpenBLAS linear layer against its
 * plain-loop reference over awkward sizes, ReLU, and the softmax
 * cross-entropy against a double-precision hand computation, central finite
 * differences and extreme logits. Inputs come from a fixed-seed generator so
 * every run sees the same numbers. */
#include <criterion/criterion.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"
#include "../test_rng.h"

/* Linear-layer tolerance: |got - ref| <= 1e-4 + 1e-4 * |ref|. The reference
 * accumulates in double; sgemm's float sums of up to 784 products of values
 * in [-1, 1] stay well inside this. */
#define LIN_ABS 1e-4
#define LIN_REL 1e-4

static float *random_floats(size_t n)
{
    float *p = malloc(n * sizeof(float));
    cr_assert_not_null(p);
    for (size_t i = 0; i < n; i++)
        p[i] = (float)(2.0 * rng_uniform() - 1.0);
    return p;
}

static void assert_close(const char *what, const float *got, const float *ref, size_t n, int B,
                         int in, int out)
{
    for (size_t i = 0; i < n; i++) {
        double tol = LIN_ABS + LIN_REL * fabs(ref[i]);
        cr_assert(fabs((double)got[i] - ref[i]) <= tol,
                  "%s[%zu] = %.7g, reference %.7g (B=%d in=%d out=%d)", what, i, got[i], ref[i], B,
                  in, out);
    }
}

static const int batches[] = {1, 7, 33, 64};
static const int ins[] = {1, 13, 784};
static const int outs[] = {1, 10, 257};
#define COUNT(a) (int)(sizeof(a) / sizeof((a)[0]))

Test(kernels, linear_fwd_matches_ref)
{
    rng_state = 1;
    for (int bi = 0; bi < COUNT(batches); bi++)
        for (int ii = 0; ii < COUNT(ins); ii++)
            for (int oi = 0; oi < COUNT(outs); oi++) {
                int B = batches[bi], in = ins[ii], out = outs[oi];
                float *x = random_floats((size_t)B * in), *w = random_floats((size_t)out * in);
                float *b = random_floats((size_t)out), *y = random_floats((size_t)B * out);
                float *yr = random_floats((size_t)B * out);

                /* y starts as garbage to prove the kernel overwrites it. */
                ps_k_linear_fwd(x, w, b, y, B, in, out);
                ps_k_linear_fwd_ref(x, w, b, yr, B, in, out);
                assert_close("y", y, yr, (size_t)B * out, B, in, out);
                free(x), free(w), free(b), free(y), free(yr);
            }
}

Test(kernels, linear_bwd_matches_ref)
{
    rng_state = 2;
    for (int bi = 0; bi < COUNT(batches); bi++)
        for (int ii = 0; ii < COUNT(ins); ii++)
            for (int oi = 0; oi < COUNT(outs); oi++) {
                int B = batches[bi], in = ins[ii], out = outs[oi];
                size_t nx = (size_t)B * in, nw = (size_t)out * in;
                float *x = random_floats(nx), *w = random_floats(nw);
                float *dy = random_floats((size_t)B * out);
                float *dx = random_floats(nx), *dw = random_floats(nw);
                float *db = random_floats((size_t)out), *dxr = random_floats(nx);
                float *dwr = random_floats(nw), *dbr = random_floats((size_t)out);

                ps_k_linear_bwd(x, w, dy, dx, dw, db, B, in, out);
                ps_k_linear_bwd_ref(x, w, dy, dxr, dwr, dbr, B, in, out);
                assert_close("dx", dx, dxr, nx, B, in, out);
                assert_close("dw", dw, dwr, nw, B, in, out);
                assert_close("db", db, dbr, (size_t)out, B, in, out);

                /* Without dx the weight gradients must come out the same. */
                memset(dw, 0xff, nw * sizeof(float));
                memset(db, 0xff, (size_t)out * sizeof(float));
                ps_k_linear_bwd(x, w, dy, NULL, dw, db, B, in, out);
                assert_close("dw (dx NULL)", dw, dwr, nw, B, in, out);
                assert_close("db (dx NULL)", db, dbr, (size_t)out, B, in, out);
                free(x), free(w), free(dy), free(dx), free(dw), free(db);
                free(dxr), free(dwr), free(dbr);
            }
}

Test(kernels, relu_fwd_and_bwd)
{
    float y[] = {-2.0f, -0.0f, 0.0f, 1e-30f, 0.5f, 3.0f, -1e-30f};
    const float want[] = {0.0f, 0.0f, 0.0f, 1e-30f, 0.5f, 3.0f, 0.0f};
    float dy[] = {1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f, 7.0f};
    const float dwant[] = {0.0f, 0.0f, 0.0f, 4.0f, 5.0f, 6.0f, 0.0f};

    ps_k_relu_fwd(y, 7);
    ps_k_relu_bwd(y, dy, 7);
    for (int i = 0; i < 7; i++) {
        cr_assert_eq(y[i], want[i], "y[%d] = %g, want %g", i, y[i], want[i]);
        cr_assert_eq(dy[i], dwant[i], "dy[%d] = %g, want %g", i, dy[i], dwant[i]);
    }
}

/* Double-precision mean softmax cross-entropy and its gradient, written
 * straight from the definition. */
static double xent_double(const float *logits, const uint8_t *labels, double *grad, int B, int C)
{
    double total = 0.0;

    for (int i = 0; i < B; i++) {
        const float *l = logits + (size_t)i * C;
        double max = l[0], sum = 0.0;
        for (int c = 1; c < C; c++)
            max = fmax(max, l[c]);
        for (int c = 0; c < C; c++)
            sum += exp(l[c] - max);
        total += max + log(sum) - l[labels[i]];
        for (int c = 0; c < C; c++)
            grad[(size_t)i * C + c] = (exp(l[c] - max) / sum - (c == labels[i])) / B;
    }
    return total / B;
}

Test(kernels, softmax_xent_matches_double)
{
    enum { B = 6, C = 10 };
    uint8_t labels[B];
    float *logits, dl[B * C];
    double gd[B * C], want;
    float loss;

    rng_state = 3;
    logits = random_floats(B * C);
    for (int i = 0; i < B * C; i++)
        logits[i] *= 8.0f;
    for (int i = 0; i < B; i++)
        labels[i] = (uint8_t)(rng_uniform() * C);
    want = xent_double(logits, labels, gd, B, C);
    loss = ps_k_softmax_xent(logits, labels, dl, B, C);
    /* Float exp and log: a few ulps of the loss, 1e-6 on gradient entries
     * that are at most 1/B in size. */
    cr_assert(fabs(loss - want) <= 1e-6 + 1e-6 * fabs(want), "loss %.9g, want %.9g", loss, want);
    for (int i = 0; i < B * C; i++)
        cr_assert(fabs(dl[i] - gd[i]) <= 1e-6, "dlogits[%d] = %.9g, want %.9g", i, dl[i], gd[i]);
    cr_assert_float_eq(ps_k_softmax_xent(logits, labels, NULL, B, C), loss, 0.0,
                       "the loss must not depend on whether the gradient is wanted");
    free(logits);
}

Test(kernels, softmax_xent_grad_matches_finite_differences)
{
    enum { B = 4, C = 7 };
    uint8_t labels[B] = {0, 6, 3, 3};
    float *logits, dl[B * C];
    const float h = 1e-2f;

    rng_state = 4;
    logits = random_floats(B * C);
    ps_k_softmax_xent(logits, labels, dl, B, C);
    for (int i = 0; i < B * C; i++) {
        float keep = logits[i], up, down;
        double fd;

        logits[i] = keep + h;
        up = ps_k_softmax_xent(logits, labels, NULL, B, C);
        logits[i] = keep - h;
        down = ps_k_softmax_xent(logits, labels, NULL, B, C);
        logits[i] = keep;
        fd = ((double)up - down) / (2.0 * h);
        /* Tolerance: O(h^2) truncation (~1e-5 here) plus float rounding of
         * the loss divided by 2h (~1e-5). */
        cr_assert(fabs(dl[i] - fd) <= 1e-4, "dlogits[%d] = %.7g, finite difference %.7g", i, dl[i],
                  fd);
    }
    free(logits);
}

Test(kernels, softmax_xent_huge_logits_stay_finite)
{
    const float logits[2 * 4] = {1e4f, -1e4f, 0.0f, 1e4f, -1e4f, -1e4f, -1e4f, -1e4f};
    const uint8_t labels[2] = {1, 2};
    float dl[2 * 4], loss;
    /* Row 0: log(2 e^1e4) - (-1e4) = 2e4 + log 2; row 1: four equal logits
     * give log 4. */
    double want = (2e4 + log(2.0) + log(4.0)) / 2;

    loss = ps_k_softmax_xent(logits, labels, dl, 2, 4);
    cr_assert(isfinite(loss), "loss %g", loss);
    cr_assert(fabs(loss - want) <= 1e-6 * want, "loss %.9g, want %.9g", loss, want);
    for (int i = 0; i < 8; i++)
        cr_assert(isfinite(dl[i]), "dlogits[%d] = %g", i, dl[i]);
    cr_assert(fabs(dl[0] - 0.25) <= 1e-7 && fabs(dl[1] + 0.5) <= 1e-7, "row 0: %g %g", dl[0],
              dl[1]);
    cr_assert(fabs(dl[6] + 0.375) <= 1e-7, "row 1 label: %g", dl[6]);
}

Test(kernels, count_correct_takes_first_of_ties)
{
    const float logits[4 * 3] = {
        1.0f, 3.0f,  3.0f, /* tie between 1 and 2: arg-max is 1 */
        1.0f, 3.0f,  3.0f, /* same row, label 2: wrong */
        5.0f, 5.0f,  5.0f, /* all tied: arg-max is 0 */
        0.0f, -1.0f, 2.0f,
    };
    const uint8_t labels[4] = {1, 2, 0, 2};

    cr_assert_eq(ps_k_count_correct(logits, labels, 4, 3), 3);
    cr_assert_eq(ps_k_count_correct(logits + 3, labels + 1, 1, 3), 0);
}
