/* Tests of the layer library's CUDA versions (kernels/layers_cuda.h) against
 * their CPU twins (kernels/layers.h), on the shapes the CPU tests use: odd
 * sizes, stride 2 and 3, padding 1 and 2, batch 1 and more, plus the
 * reference CNN's layers at batch 64.
 *
 * A plain C program like test_cuda.c, for the same reason: with no usable
 * GPU it says why and exits 77, which ctest reports as Skipped under each
 * test's name. `test_layers_cuda NAME` runs one test; no argument runs all.
 * Exit 0: passed, 1: failed, 77: skipped.
 *
 * Tolerances, and why:
 * - maxpool (values and indices), relu, dropout, flatten: bit for bit. The
 *   same comparisons, the same single multiply, the same mask function, and
 *   max-pool backward adds in the CPU's order.
 * - conv2d, dense (outputs and every gradient), FP32: |gpu - cpu| <= 2 (t + 2)
 *   2^-23 A, where A is the CPU reference run on the inputs' absolute values
 *   (the magnitude of the terms behind each output) and t the number of
 *   terms: each side is within (t + 2) 2^-23 A of the exact sum, whatever
 *   order cuBLAS, OpenBLAS or the batch sums use (tests/unit/test_layers.c
 *   holds the CPU to the same bound).
 * - the same layers with the products in bf16 or TF32, against the float32
 *   CPU: (2u + u^2) A + 2 (t + 2) 2^-23 (1 + u)^2 A. Each of a product's two
 *   inputs is rounded once to the narrow format, x(1 + d) with |d| <= u, so
 *   each term x w of a sum moves by at most (2u + u^2) |x w|; the product of
 *   two bf16 (8-bit) or TF32 (11-bit) significands is exact in float32, and
 *   the float32 accumulation of those terms adds the FP32 bound above, on
 *   terms up to (1 + u)^2 larger. bf16 rounds to nearest (u = 2^-8, half its
 *   8-bit significand's last place); for TF32 cuBLAS does not say how the
 *   tensor cores shorten float32, so u = 2^-10 covers truncation of 10 kept
 *   bits. The bias and its gradient are float32 in every mode (u = 0). A
 *   product computed in float32 would pass too (that is the bound's point:
 *   the narrow formats may cost this much, no more); a wrong operand, stride
 *   or transpose is off by about A.
 * - softmax cross-entropy: dlogits within (ceil(C/32) + 16) 2^-22
 *   (|cpu| + 1/B), the bound test_cuda.c states for the kernel this calls;
 *   the summed loss within 1e-5 (1 + |loss|); the correct count exact (the
 *   same comparisons on the same logits). */
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cuda_test.h"
#include "layers.h"
#include "layers_cuda.h"
#include "../test_rng.h"

static ps_cuda_ctx ctx;

/* A failed CUDA call (or layer call, 0 or a negative code) ends the test. */
#define OK(call)                                                                                   \
    do {                                                                                           \
        long rc_ = (long)(call);                                                                   \
        if (rc_ != 0) {                                                                            \
            failures++;                                                                            \
            fprintf(stderr, "  line %d: %s: %ld\n", __LINE__, #call, rc_);                         \
            return;                                                                                \
        }                                                                                          \
    } while (0)

/* A device buffer of n bytes, with host's bytes when host is not NULL;
 * NULL on failure (the caller's OK on the pointer test ends the test). */
static void *dev(const void *src, size_t n)
{
    void *d = NULL;
    if (cudaMalloc(&d, n ? n : 1) != cudaSuccess)
        return NULL;
    if (src && cudaMemcpy(d, src, n, cudaMemcpyHostToDevice) != cudaSuccess) {
        cudaFree(d);
        return NULL;
    }
    return d;
}

static int download(void *dst, const void *d, size_t n)
{
    return cudaStreamSynchronize(ctx.stream) != cudaSuccess ||
           cudaMemcpy(dst, d, n, cudaMemcpyDeviceToHost) != cudaSuccess;
}

/* The rounding unit of the products' inputs under the context's math. */
static double unit(void)
{
    return ctx.math == PS_CUDA_BF16 ? 0x1p-8 : ctx.math == PS_CUDA_TF32 ? 0x1p-10 : 0.0;
}

/* gpu within the bound stated above of cpu, for outputs of `terms` terms of
 * magnitude mag, with inputs rounded by u. */
static void within_u(const char *what, const float *gpu, const float *cpu, const float *mag,
                     size_t n, double terms, double u)
{
    for (size_t i = 0; i < n; i++) {
        double tol =
            ((2 * u + u * u) + 2 * (terms + 2) * 0x1p-23 * (1 + u) * (1 + u)) * mag[i] + 1e-37;
        CHECK(fabs((double)gpu[i] - cpu[i]) <= tol, "%s[%zu]: gpu %.9g, cpu %.9g (tol %.3g)", what,
              i, gpu[i], cpu[i], tol);
    }
}

/* An output of the context's products. */
static void within(const char *what, const float *gpu, const float *cpu, const float *mag, size_t n,
                   double terms)
{
    within_u(what, gpu, cpu, mag, n, terms, unit());
}

static void exact(const char *what, const void *gpu, const void *cpu, size_t bytes)
{
    CHECK(memcmp(gpu, cpu, bytes) == 0, "%s differs from the CPU's bits", what);
}

/* ---- conv2d ------------------------------------------------------------------ */

static const int conv_cases[][9] = {
    /* in_c, h, w, out_c, k_h, k_w, stride, pad, B */
    {1, 5, 5, 1, 3, 3, 1, 0, 1},     {3, 7, 9, 4, 3, 3, 2, 1, 2},      {2, 8, 6, 5, 3, 3, 1, 1, 3},
    {3, 11, 10, 2, 5, 3, 2, 2, 1},   {4, 6, 7, 3, 1, 1, 1, 0, 2},      {2, 5, 4, 3, 4, 2, 3, 1, 2},
    {1, 28, 28, 32, 3, 3, 1, 1, 64}, {32, 14, 14, 64, 3, 3, 1, 1, 16},
};

static void conv_case(const int *c)
{
    ps_conv2d g;
    ps_shape out;
    OK(ps_conv2d_init(&g, (ps_shape){c[0], c[1], c[2]}, c[3], c[4], c[5], c[6], c[7], &out));
    int B = c[8], K = g.in.c * g.k_h * g.k_w, P = g.out_h * g.out_w;
    size_t nx = B * ps_shape_count(g.in), ny = B * ps_shape_count(out);
    size_t nw = ps_conv2d_weight_count(&g), nb = (size_t)g.out_c;
    float *x = rng_floats(nx, 1.0), *w = rng_floats(nw, 1.0), *b = rng_floats(nb, 1.0),
          *dy = rng_floats(ny, 1.0);
    float *xa = abs_copy(x, nx), *wa = abs_copy(w, nw), *ba = abs_copy(b, nb);
    float *dya = abs_copy(dy, ny);
    float *y = rng_floats(ny, 1.0), *ya = rng_floats(ny, 1.0), *yg = rng_floats(ny, 1.0),
          *ws = rng_floats(ps_conv2d_workspace(&g), 1.0);
    float *dx = rng_floats(nx, 1.0), *dw = rng_floats(nw, 1.0), *db = rng_floats(nb, 1.0),
          *dxa = rng_floats(nx, 1.0), *dwa = rng_floats(nw, 1.0);
    float *dba = rng_floats(nb, 1.0), *dxg = rng_floats(nx, 1.0), *dwg = rng_floats(nw, 1.0),
          *dbg = rng_floats(nb, 1.0);
    float *d_x = dev(x, nx * 4), *d_w = dev(w, nw * 4), *d_b = dev(b, nb * 4);
    float *d_dy = dev(dy, ny * 4), *d_y = dev(NULL, ny * 4), *d_dx = dev(NULL, nx * 4);
    float *d_dw = dev(NULL, nw * 4), *d_db = dev(NULL, nb * 4);
    float *d_ws = dev(NULL, ps_cuda_conv2d_workspace(&ctx, &g, B) * 4);

    OK(!(d_x && d_w && d_b && d_dy && d_y && d_dx && d_dw && d_db && d_ws));
    ps_conv2d_forward(&g, B, x, w, b, y, ws);
    ps_conv2d_forward_ref(&g, B, xa, wa, ba, ya);
    OK(ps_cuda_conv2d_forward(&ctx, &g, B, d_x, d_w, d_b, d_y, d_ws));
    OK(download(yg, d_y, ny * 4));
    within("conv y", yg, y, ya, ny, K + 1);

    ps_conv2d_backward(&g, B, x, w, dy, dx, dw, db, ws);
    ps_conv2d_backward_ref(&g, B, xa, wa, dya, dxa, dwa, dba);
    OK(ps_cuda_conv2d_backward(&ctx, &g, B, d_x, d_w, d_dy, d_dx, d_dw, d_db, d_ws));
    OK(download(dxg, d_dx, nx * 4) || download(dwg, d_dw, nw * 4) || download(dbg, d_db, nb * 4));
    within("conv dx", dxg, dx, dxa, nx, (double)g.out_c * g.k_h * g.k_w);
    within("conv dw", dwg, dw, dwa, nw, (double)B * P);
    within_u("conv db", dbg, db, dba, nb, (double)B * P, 0.0);

    void *all[] = {x,  w,  b,  dy, xa,  wa,  ba,  dya, y,   ya, yg,
                   ws, dx, dw, db, dxa, dwa, dba, dxg, dwg, dbg};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        free(all[i]);
    void *dall[] = {d_x, d_w, d_b, d_dy, d_y, d_dx, d_dw, d_db, d_ws};
    for (size_t i = 0; i < sizeof(dall) / sizeof(dall[0]); i++)
        cudaFree(dall[i]);
}

static void conv_cases_in(ps_cuda_math math)
{
    ctx.math = math;
    rng_state = 101;
    for (size_t i = 0; i < sizeof(conv_cases) / sizeof(conv_cases[0]); i++)
        conv_case(conv_cases[i]);
    ctx.math = PS_CUDA_FP32;
}

static void test_conv2d(void)
{
    conv_cases_in(PS_CUDA_FP32);
}

static void test_conv2d_tf32(void)
{
    conv_cases_in(PS_CUDA_TF32);
}

static void test_conv2d_bf16(void)
{
    conv_cases_in(PS_CUDA_BF16);
}

/* ---- dense ---------------------------------------------------------------------- */

static void dense_case(int B, int in, int outn)
{
    ps_dense g;
    ps_shape out;
    OK(ps_dense_init(&g, (ps_shape){in, 1, 1}, outn, &out));
    size_t nx = (size_t)B * in, ny = (size_t)B * outn, nw = (size_t)in * outn;
    float *x = rng_floats(nx, 1.0), *w = rng_floats(nw, 1.0), *b = rng_floats(outn, 1.0),
          *dy = rng_floats(ny, 1.0);
    float *xa = abs_copy(x, nx), *wa = abs_copy(w, nw), *ba = abs_copy(b, outn);
    float *dya = abs_copy(dy, ny), *y = rng_floats(ny, 1.0), *ya = rng_floats(ny, 1.0),
          *yg = rng_floats(ny, 1.0);
    float *dx = rng_floats(nx, 1.0), *dw = rng_floats(nw, 1.0), *db = rng_floats(outn, 1.0),
          *dxa = rng_floats(nx, 1.0), *dwa = rng_floats(nw, 1.0);
    float *dba = rng_floats(outn, 1.0), *dxg = rng_floats(nx, 1.0), *dwg = rng_floats(nw, 1.0),
          *dbg = rng_floats(outn, 1.0);
    float *d_x = dev(x, nx * 4), *d_w = dev(w, nw * 4), *d_b = dev(b, outn * 4);
    float *d_dy = dev(dy, ny * 4), *d_y = dev(NULL, ny * 4), *d_dx = dev(NULL, nx * 4);
    float *d_dw = dev(NULL, nw * 4), *d_db = dev(NULL, outn * 4);
    float *d_ws = dev(NULL, ps_cuda_dense_workspace(&ctx, &g, B) * 4);

    OK(!(d_x && d_w && d_b && d_dy && d_y && d_dx && d_dw && d_db && d_ws));
    ps_dense_forward(&g, B, x, w, b, y);
    ps_dense_forward_ref(&g, B, xa, wa, ba, ya);
    OK(ps_cuda_dense_forward(&ctx, &g, B, d_x, d_w, d_b, d_y, d_ws));
    OK(download(yg, d_y, ny * 4));
    within("dense y", yg, y, ya, ny, in + 1);
    ps_dense_backward(&g, B, x, w, dy, dx, dw, db);
    ps_dense_backward_ref(&g, B, xa, wa, dya, dxa, dwa, dba);
    OK(ps_cuda_dense_backward(&ctx, &g, B, d_x, d_w, d_dy, d_dx, d_dw, d_db, d_ws));
    OK(download(dxg, d_dx, nx * 4) || download(dwg, d_dw, nw * 4) || download(dbg, d_db, outn * 4));
    within("dense dx", dxg, dx, dxa, nx, outn);
    within("dense dw", dwg, dw, dwa, nw, B);
    /* The bias-gradient kernel sums 16 strided partials and a 4-level tree. */
    within_u("dense db", dbg, db, dba, outn, B + 4, 0.0);

    void *all[] = {x,  w,  b,  dy, xa,  wa,  ba,  dya, y,   ya,
                   yg, dx, dw, db, dxa, dwa, dba, dxg, dwg, dbg};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
        free(all[i]);
    void *dall[] = {d_x, d_w, d_b, d_dy, d_y, d_dx, d_dw, d_db, d_ws};
    for (size_t i = 0; i < sizeof(dall) / sizeof(dall[0]); i++)
        cudaFree(dall[i]);
}

static void dense_cases_in(ps_cuda_math math)
{
    ctx.math = math;
    rng_state = 102;
    dense_case(1, 1, 1);
    dense_case(7, 13, 10);
    dense_case(64, 3136, 128);
    dense_case(33, 128, 10);
    dense_case(64, 2048, 512);
    ctx.math = PS_CUDA_FP32;
}

static void test_dense(void)
{
    dense_cases_in(PS_CUDA_FP32);
}

static void test_dense_tf32(void)
{
    dense_cases_in(PS_CUDA_TF32);
}

static void test_dense_bf16(void)
{
    dense_cases_in(PS_CUDA_BF16);
}

/* ---- max-pool ------------------------------------------------------------------- */

static void pool_case(int c, int h, int w, int k, int stride, int B)
{
    ps_maxpool2d g;
    ps_shape out;
    OK(ps_maxpool2d_init(&g, (ps_shape){c, h, w}, k, stride, &out));
    size_t nx = B * ps_shape_count(g.in), ny = B * ps_shape_count(out);
    float *x = rng_floats(nx, 1.0), *y = rng_floats(ny, 1.0), *yg = rng_floats(ny, 1.0),
          *dy = rng_floats(ny, 1.0), *dx = rng_floats(nx, 1.0);
    float *dxg = rng_floats(nx, 1.0);
    int32_t *idx = malloc(ny * 4 + 1), *idxg = malloc(ny * 4 + 1);
    float *d_x = dev(x, nx * 4), *d_y = dev(NULL, ny * 4), *d_dy = dev(dy, ny * 4);
    float *d_dx = dev(NULL, nx * 4);
    int32_t *d_idx = dev(NULL, ny * 4);

    OK(!(idx && idxg && d_x && d_y && d_dy && d_dx && d_idx));
    /* Some ties, so first-on-ties is exercised. */
    for (size_t i = 0; i < nx; i += 3)
        x[i] = 0.5f;
    ps_maxpool2d_forward(&g, B, x, y, idx);
    ps_maxpool2d_backward(&g, B, dy, idx, dx);
    OK(ps_cuda_maxpool2d_forward(&ctx, &g, B, d_x, d_y, d_idx));
    OK(ps_cuda_maxpool2d_backward(&ctx, &g, B, d_dy, d_idx, d_dx));
    OK(download(yg, d_y, ny * 4) || download(idxg, d_idx, ny * 4) || download(dxg, d_dx, nx * 4));
    exact("pool y", yg, y, ny * 4);
    exact("pool argmax", idxg, idx, ny * 4);
    exact("pool dx", dxg, dx, nx * 4);
    free(x), free(y), free(yg), free(dy), free(dx), free(dxg), free(idx), free(idxg);
    cudaFree(d_x), cudaFree(d_y), cudaFree(d_dy), cudaFree(d_dx), cudaFree(d_idx);
}

static void test_maxpool2d(void)
{
    rng_state = 103;
    pool_case(1, 4, 4, 2, 2, 1);
    pool_case(3, 7, 5, 2, 2, 2);
    pool_case(2, 9, 8, 3, 2, 3);
    pool_case(2, 6, 7, 3, 1, 1);
    pool_case(32, 28, 28, 2, 2, 64);
}

/* ---- element-wise ----------------------------------------------------------------- */

static void test_relu(void)
{
    enum { N = 100003 };
    float *x = rng_floats(N, 1.0), *y = rng_floats(N, 1.0), *yg = rng_floats(N, 1.0),
          *dy = rng_floats(N, 1.0), *dx = rng_floats(N, 1.0), *dxg = rng_floats(N, 1.0);
    float *d_x = dev(NULL, N * 4), *d_y = dev(NULL, N * 4), *d_dy = dev(dy, N * 4);

    rng_state = 104;
    OK(!(d_x && d_y && d_dy));
    x[0] = -0.0f, x[1] = NAN, x[2] = 0.0f;
    OK(cudaMemcpy(d_x, x, N * 4, cudaMemcpyHostToDevice));
    ps_relu_forward(N, x, y);
    ps_relu_backward(N, y, dy, dx);
    OK(ps_cuda_relu_forward(&ctx, N, d_x, d_y));
    /* In place, as an executor runs it. */
    OK(ps_cuda_relu_backward(&ctx, N, d_y, d_dy, d_dy));
    OK(download(yg, d_y, N * 4) || download(dxg, d_dy, N * 4));
    exact("relu y", yg, y, N * 4);
    exact("relu dx", dxg, dx, N * 4);
    free(x), free(y), free(yg), free(dy), free(dx), free(dxg);
    cudaFree(d_x), cudaFree(d_y), cudaFree(d_dy);
}

static void test_dropout(void)
{
    enum { N = 1000003 };
    static const float rates[] = {0.0f, 0.1f, 0.5f, 0.77f};
    float *x = rng_floats(N, 1.0), *y = rng_floats(N, 1.0), *yg = rng_floats(N, 1.0);
    float *d_x = dev(x, N * 4), *d_y = dev(NULL, N * 4);

    rng_state = 105;
    OK(!(d_x && d_y));
    for (int r = 0; r < 4; r++)
        for (uint64_t step = 0; step < 3; step++) {
            ps_dropout g;
            OK(ps_dropout_init(&g, rates[r], 0x5eed + (uint64_t)r));
            for (int training = 0; training <= 1; training++) {
                ps_dropout_forward(&g, step, training, N, x, y);
                OK(ps_cuda_dropout_forward(&ctx, &g, step, training, N, d_x, d_y));
                OK(download(yg, d_y, N * 4));
                exact("dropout y", yg, y, N * 4);
                ps_dropout_backward(&g, step, training, N, x, y);
                OK(ps_cuda_dropout_backward(&ctx, &g, step, training, N, d_x, d_y));
                OK(download(yg, d_y, N * 4));
                exact("dropout dx", yg, y, N * 4);
            }
        }
    free(x), free(y), free(yg);
    cudaFree(d_x), cudaFree(d_y);
}

static void test_flatten(void)
{
    enum { N = 3137 };
    float *x = rng_floats(N, 1.0), *yg = rng_floats(N, 1.0);
    float *d_x = dev(x, N * 4), *d_y = dev(NULL, N * 4);

    rng_state = 106;
    OK(!(d_x && d_y));
    OK(ps_cuda_flatten_forward(&ctx, N, d_x, d_y));
    OK(ps_cuda_flatten_backward(&ctx, N, d_y, d_y));
    OK(download(yg, d_y, N * 4));
    exact("flatten", yg, x, N * 4);
    free(x), free(yg);
    cudaFree(d_x), cudaFree(d_y);
}

/* ---- softmax cross-entropy ----------------------------------------------------------- */

static void xent_case(int B, int C)
{
    size_t n = (size_t)B * C;
    float *logits = rng_floats(n, 1.0), *d = rng_floats(n, 1.0), *dg = rng_floats(n, 1.0), loss;
    uint8_t *labels = malloc((size_t)B + 1);
    int correct, correct_g = 0;
    double loss_g = 0.0;
    float *d_l = dev(NULL, n * 4), *d_d = dev(NULL, n * 4), *d_rows = dev(NULL, (size_t)B * 4);
    uint8_t *d_lab = dev(NULL, (size_t)B);
    double *d_sum = dev(&loss_g, sizeof(double));
    int *d_cor = dev(&correct_g, sizeof(int));

    OK(!(labels && d_l && d_d && d_rows && d_lab && d_sum && d_cor));
    fill_random(logits, n, 4.0);
    for (int i = 0; i < B; i++)
        labels[i] = (uint8_t)(rng_next() % (unsigned)C);
    OK(cudaMemcpy(d_l, logits, n * 4, cudaMemcpyHostToDevice));
    OK(cudaMemcpy(d_lab, labels, (size_t)B, cudaMemcpyHostToDevice));
    OK(ps_softmax_xent(B, C, logits, labels, d, &loss, &correct));
    OK(ps_cuda_softmax_xent_batch(&ctx, B, C, d_l, d_lab, d_d, d_rows, d_sum, d_cor));
    OK(download(dg, d_d, n * 4) || download(&loss_g, d_sum, sizeof(double)) ||
       download(&correct_g, d_cor, sizeof(int)));
    double k = (C + 31) / 32 + 16;
    for (size_t i = 0; i < n; i++)
        CHECK(fabs((double)dg[i] - d[i]) <= k * 0x1p-22 * (fabs(d[i]) + 1.0 / B),
              "dlogits[%zu]: gpu %.9g cpu %.9g", i, dg[i], d[i]);
    CHECK(fabs(loss_g / B - loss) <= 1e-5 * (1 + fabs(loss)), "loss: gpu %.9g cpu %.9g", loss_g / B,
          loss);
    CHECK(correct_g == correct, "correct: gpu %d cpu %d", correct_g, correct);
    free(logits), free(d), free(dg), free(labels);
    cudaFree(d_l), cudaFree(d_d), cudaFree(d_rows), cudaFree(d_lab), cudaFree(d_sum);
    cudaFree(d_cor);
}

static void test_softmax_xent(void)
{
    rng_state = 107;
    xent_case(1, 2);
    xent_case(7, 10);
    xent_case(64, 10);
    xent_case(33, 100);
}

/* ---- predictions and clipping ----------------------------------------------- */

static void test_predict(void)
{
    static const int shapes[][2] = {{1, 1}, {7, 10}, {257, 3}, {1000, 33}};

    rng_state = 108;
    for (int s = 0; s < 4; s++) {
        int B = shapes[s][0], C = shapes[s][1];
        size_t n = (size_t)B * C;
        float *l = rng_floats(n, 1.0);
        uint8_t *want = malloc((size_t)B + 1), *got = malloc((size_t)B + 1);
        float *d_l = dev(NULL, n * 4);
        uint8_t *d_p = dev(NULL, (size_t)B);

        OK(!(want && got && d_l && d_p));
        /* Four levels only, so ties are common and "first on ties" is tested. */
        for (size_t i = 0; i < n; i++)
            l[i] = floorf((l[i] + 1.0f) * 2.0f);
        OK(cudaMemcpy(d_l, l, n * 4, cudaMemcpyHostToDevice));
        ps_predict(B, C, l, want);
        OK(ps_cuda_predict(&ctx, B, C, d_l, d_p));
        OK(download(got, d_p, (size_t)B));
        exact("predictions", got, want, (size_t)B);
        free(l), free(want), free(got);
        cudaFree(d_l), cudaFree(d_p);
    }
}

/* Clipping: the norm is summed in double in another order than the CPU's,
 * which moves it by about 1e-16 relative; the scale, rounded to float once,
 * comes out the same unless that moves it across a rounding boundary, when
 * it differs by one float ulp. So each element is within 2^-23 |cpu| of the
 * CPU's (and equal almost always); under the bound nothing may change. */
static void test_clip_norm(void)
{
    static const size_t sizes[] = {1, 255, 256 * 256 + 1, ((size_t)1 << 22) + 3};
    double *d_part = dev(NULL, PS_CUDA_CLIP_PARTS * sizeof(double));

    rng_state = 109;
    OK(!d_part);
    for (int s = 0; s < 4; s++)
        for (int under = 0; under <= 1; under++) {
            size_t n = sizes[s];
            float *g = rng_floats(n, 1.0), *got = rng_floats(n, 1.0), *keep = malloc(n * 4 + 1);
            float *d_g = dev(g, n * 4);
            double sq = 0;

            OK(!(keep && d_g));
            memcpy(keep, g, n * 4);
            for (size_t i = 0; i < n; i++)
                sq += (double)g[i] * g[i];
            /* Half the norm bites; twice the norm leaves g as it is. */
            float max = (float)(under ? 2 * sqrt(sq) : sqrt(sq) / 2);
            ps_clip_norm(n, g, max);
            OK(ps_cuda_clip_norm(&ctx, n, d_g, max, d_part));
            OK(download(got, d_g, n * 4));
            if (under)
                exact("clip under the bound", got, keep, n * 4);
            for (size_t i = 0; i < n; i++)
                CHECK(fabs((double)got[i] - g[i]) <= 0x1p-23 * fabs(g[i]),
                      "n=%zu: g[%zu] = %.9g, CPU %.9g", n, i, got[i], g[i]);
            free(g), free(got), free(keep);
            cudaFree(d_g);
        }
    cudaFree(d_part);
}

static const cuda_test tests[] = {
    {"conv2d", test_conv2d},
    {"conv2d_tf32", test_conv2d_tf32},
    {"conv2d_bf16", test_conv2d_bf16},
    {"dense", test_dense},
    {"dense_tf32", test_dense_tf32},
    {"dense_bf16", test_dense_bf16},
    {"predict", test_predict},
    {"clip_norm", test_clip_norm},
    {"maxpool2d", test_maxpool2d},
    {"relu", test_relu},
    {"dropout", test_dropout},
    {"flatten", test_flatten},
    {"softmax_xent", test_softmax_xent},
};

int main(int argc, char **argv)
{
    const char *only = argc > 1 ? argv[1] : NULL;
    int rc = cuda_test_need_gpu(only);

    if (rc)
        return rc;
    if (cudaStreamCreate(&ctx.stream) != cudaSuccess || cublasCreate(&ctx.blas) != 0 ||
        cublasSetStream(ctx.blas, ctx.stream) != 0) {
        fprintf(stderr, "test_layers_cuda: cannot create a stream and a cuBLAS handle\n");
        return 1;
    }
    rc = cuda_test_run("test_layers_cuda", tests, sizeof(tests) / sizeof(tests[0]), only);
    cublasDestroy(ctx.blas);
    cudaStreamDestroy(ctx.stream);
    return rc;
}
