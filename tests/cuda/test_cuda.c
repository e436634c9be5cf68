/* Tests of the CUDA backend against its CPU references: each kernel of
 * kernels/cuda_kernels.cu against the cpu_kernels.h function it mirrors, on
 * random inputs at sizes on both sides of every block and warp boundary, and
 * the whole model (worker/backend_cuda.c on cuBLAS) against the CPU backend
 * (the executor of worker/model.c).
 *
 * A plain C program rather than Criterion, because it must be able to say
 * "skipped": with no usable GPU it prints why and exits 77, which ctest
 * (SKIP_RETURN_CODE 77) reports as Skipped under the test's name, never as
 * passed. `test_cuda NAME` runs one test (ctest registers each separately);
 * with no argument it runs them all. Exit 0: passed, 1: failed, 77: skipped.
 *
 * Tolerances, and why:
 * - f32_to_bf16: bit for bit against ps_f32_to_bf16_ref, NaN payloads
 *   included: both do the same integer arithmetic on the bit pattern.
 * - bias_act_fwd, relu_bwd, count_correct: exact. One float add, a compare,
 *   an integer count: nothing is left to rounding order.
 * - bias_grad: |got - ref| <= (ceil(B/16) + 5) * 2^-23 * sum_i |dy[i][o]|.
 *   The kernel adds each column in 16 strided float partial sums folded by a
 *   4-level tree, so no term passes more than ceil(B/16) + 4 roundings (plus
 *   one for rounding the double reference); that first-order bound, doubled.
 * - softmax_xent: |got - ref| <= k * 2^-22 * (|ref| + s) with k = ceil(C/32)
 *   + 16 and s = 1/B for the gradient, 1 for the row loss: the float sum of C
 *   exponentials in 32 lane partials plus a 5-level shuffle, CUDA's expf and
 *   logf (at most 2 ulp off) against glibc, with a factor 2 margin.
 * - sum_add: 1e-12 * sum |v|: it must accumulate in double, which float
 *   accumulation would miss by orders of magnitude.
 * - model, FP32: loss within 1e-5 * (1 + loss); every gradient within 1e-4 of
 *   its tensor's largest entry; correct counts equal except on rows whose top
 *   two logits are within 2e-5 (a near tie may go either way). Batches are
 *   drawn so that no hidden pre-activation lies within 2e-5 of zero (checked
 *   on the CPU in double), since cuBLAS and OpenBLAS sum in different orders
 *   and a ReLU that flips would change a gradient entry by a whole term.
 * - model, TF32: the products' inputs lose all but 10 mantissa bits
 *   (relative error up to 2^-10), which moves pre-activations by ~1e-3, so
 *   ReLUs near zero do flip and no batch can be drawn to avoid it; each flip
 *   changes one whole term of a gradient sum. So only closeness: loss within
 *   1e-2 * (1 + loss), each gradient tensor within 0.15 in relative Frobenius
 *   norm (a CPU emulation of truncation to TF32 gave up to 0.06 on these
 *   models; a wrong product would be off by about 1), correct counts within
 *   B/16 + 1. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cpu_kernels.h"
#include "cuda_kernels.h"
#include "cuda_test.h"
#include "half.h"
#include "model_desc.h"
#include "../test_rng.h"

/* Distance from zero (pre-activations) and between the top two logits that
 * FP32 rounding differences cannot cross; see the tolerances above. */
#define MARGIN 2e-5

/* A failed CUDA call ends the test it is in: what follows would only
 * report the same failure again. */
#define CUDA_OK(call)                                                                              \
    do {                                                                                           \
        cudaError_t err_ = (call);                                                                 \
        if (err_ != cudaSuccess) {                                                                 \
            failures++;                                                                            \
            fprintf(stderr, "  line %d: %s: %s\n", __LINE__, #call, cudaGetErrorString(err_));     \
            return;                                                                                \
        }                                                                                          \
    } while (0)

/* Uniform in [-scale, scale); freed by the caller. One spare byte keeps
 * malloc(0) from returning NULL; a real allocation failure aborts the
 * program, which ctest reports as a failure. */
static float *random_floats(size_t n, double scale)
{
    float *p = malloc(n * sizeof(float) + 1);
    if (p == NULL)
        abort();
    for (size_t i = 0; i < n; i++)
        p[i] = (float)((2.0 * rng_uniform() - 1.0) * scale);
    return p;
}

static uint8_t *random_labels(int n, int classes)
{
    uint8_t *y = malloc((size_t)n + 1);
    if (y == NULL)
        abort();
    for (int i = 0; i < n; i++)
        y[i] = (uint8_t)(rng_uniform() * classes);
    return y;
}

/* Device copy of n bytes of host memory (or n uninitialised bytes). */
static cudaError_t upload(void **dev, const void *host, size_t n)
{
    cudaError_t err = cudaMalloc(dev, n > 0 ? n : 1);
    if (err == cudaSuccess && host != NULL)
        err = cudaMemcpy(*dev, host, n, cudaMemcpyHostToDevice);
    return err;
}

static const int batches[] = {1, 7, 8, 9, 64, 257};
static const int widths[] = {1, 10, 31, 32, 33, 256, 1000};
#define COUNT(a) (int)(sizeof(a) / sizeof((a)[0]))

static void test_bias_act_fwd(void)
{
    rng_state = 1;
    for (int bi = 0; bi < COUNT(batches); bi++)
        for (int wi = 0; wi < COUNT(widths); wi++)
            for (int relu = 0; relu <= 1; relu++) {
                int B = batches[bi], out = widths[wi];
                size_t n = (size_t)B * out;
                float *y = random_floats(n, 1.0), *b = random_floats((size_t)out, 1.0);
                float *got = malloc(n * sizeof(float) + 1), *ref = malloc(n * sizeof(float) + 1);
                void *dy = NULL, *db = NULL;

                /* Exact cancellations: y + b = 0 must come out as the CPU's 0. */
                for (size_t i = 0; i < n; i += 5)
                    y[i] = -b[i % (size_t)out];
                for (size_t i = 0; i < n; i++)
                    ref[i] = y[i] + b[i % (size_t)out];
                if (relu)
                    ps_k_relu_fwd(ref, n);
                CUDA_OK(upload(&dy, y, n * sizeof(float)));
                CUDA_OK(upload(&db, b, (size_t)out * sizeof(float)));
                CUDA_OK(ps_cuda_bias_act_fwd(dy, db, B, out, relu, 0));
                CUDA_OK(cudaMemcpy(got, dy, n * sizeof(float), cudaMemcpyDeviceToHost));
                for (size_t i = 0; i < n; i++)
                    CHECK(memcmp(&got[i], &ref[i], sizeof(float)) == 0,
                          "B=%d out=%d relu=%d: y[%zu] = %.9g, CPU %.9g", B, out, relu, i, got[i],
                          ref[i]);
                CUDA_OK(cudaFree(dy));
                CUDA_OK(cudaFree(db));
                free(y), free(b), free(got), free(ref);
            }
}

static void test_relu_bwd(void)
{
    /* Around one block, and past the grid-stride limit of 4096 blocks. */
    static const size_t sizes[] = {1, 255, 256, 257, 4097, ((size_t)1 << 21) + 3};

    rng_state = 2;
    for (int si = 0; si < COUNT(sizes); si++) {
        size_t n = sizes[si];
        float *y = random_floats(n, 1.0), *dy = random_floats(n, 1.0);
        float *got = malloc(n * sizeof(float) + 1);
        void *d_y = NULL, *d_dy = NULL;

        ps_k_relu_fwd(y, n); /* a ReLU output: about half exact zeros */
        CUDA_OK(upload(&d_y, y, n * sizeof(float)));
        CUDA_OK(upload(&d_dy, dy, n * sizeof(float)));
        CUDA_OK(ps_cuda_relu_bwd(d_y, d_dy, n, 0));
        CUDA_OK(cudaMemcpy(got, d_dy, n * sizeof(float), cudaMemcpyDeviceToHost));
        ps_k_relu_bwd(y, dy, n);
        CHECK(memcmp(got, dy, n * sizeof(float)) == 0, "n=%zu: differs from ps_k_relu_bwd", n);
        CUDA_OK(cudaFree(d_y));
        CUDA_OK(cudaFree(d_dy));
        free(y), free(dy), free(got);
    }
}

static void test_f32_to_bf16(void)
{
    static const size_t sizes[] = {1, 255, 256, 257, 4097, ((size_t)1 << 21) + 3};
    /* Ties both ways, the overflow tie, subnormal ties, Inf and NaNs whose
     * payload would round into the exponent. */
    static const uint32_t edges[] = {0x3f808000u, 0x3f818000u, 0x7f7f8000u, 0x7f7fffffu,
                                     0x00008000u, 0x00018000u, 0x807f8000u, 0x00000001u,
                                     0x7f800000u, 0xff800000u, 0x7f800001u, 0x7fffffffu,
                                     0xff80ffffu, 0x7fc00000u, 0x80000000u, 0x00000000u};

    rng_state = 7;
    for (int si = 0; si < COUNT(sizes); si++) {
        size_t n = sizes[si];
        float *x = malloc(n * sizeof(*x) + 1);
        uint16_t *got = malloc(n * sizeof(*got) + 1), *ref = malloc(n * sizeof(*ref) + 1);
        void *d_src = NULL, *d_dst = NULL;

        if (x == NULL || got == NULL || ref == NULL)
            abort();
        for (size_t i = 0; i < n; i++) {
            uint64_t r = rng_next();
            /* Any pattern, or an exact tie with random kept bits. */
            uint32_t bits =
                r & 1 ? (uint32_t)(r >> 32) : ((uint32_t)(r >> 32) & 0xffff0000u) | 0x8000u;
            if (i < (size_t)COUNT(edges))
                bits = edges[i];
            memcpy(&x[n - 1 - i], &bits, sizeof(bits));
        }
        ps_f32_to_bf16_ref(ref, x, n);
        CUDA_OK(upload(&d_src, x, n * sizeof(*x)));
        CUDA_OK(upload(&d_dst, NULL, n * sizeof(*got)));
        CUDA_OK(ps_cuda_f32_to_bf16(d_dst, d_src, n, 0));
        CUDA_OK(cudaMemcpy(got, d_dst, n * sizeof(*got), cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < n; i++) {
            uint32_t bits;
            memcpy(&bits, &x[i], sizeof(bits));
            CHECK(got[i] == ref[i], "n=%zu: 0x%08x -> 0x%04x, CPU 0x%04x", n, bits, got[i], ref[i]);
        }
        CUDA_OK(cudaFree(d_src));
        CUDA_OK(cudaFree(d_dst));
        free(x), free(got), free(ref);
    }
}

static void test_bias_grad(void)
{
    static const int rows[] = {1, 15, 16, 17, 64, 257, 1000};

    rng_state = 3;
    for (int bi = 0; bi < COUNT(rows); bi++)
        for (int wi = 0; wi < COUNT(widths); wi++) {
            int B = rows[bi], out = widths[wi];
            float *dy = random_floats((size_t)B * out, 1.0), *x = random_floats((size_t)B, 1.0);
            float *w = random_floats((size_t)out, 1.0), *dw = random_floats((size_t)out, 1.0);
            float *ref = random_floats((size_t)out, 1.0), *got = random_floats((size_t)out, 1.0);
            void *d_dy = NULL, *d_db = NULL;

            /* The reference is the bias part of the CPU layer's backward
             * pass; a layer of one input keeps the rest cheap. */
            ps_k_linear_bwd_ref(x, w, dy, NULL, dw, ref, B, 1, out);
            CUDA_OK(upload(&d_dy, dy, (size_t)B * out * sizeof(float)));
            CUDA_OK(upload(&d_db, NULL, (size_t)out * sizeof(float)));
            CUDA_OK(ps_cuda_bias_grad(d_dy, d_db, B, out, 0));
            CUDA_OK(cudaMemcpy(got, d_db, (size_t)out * sizeof(float), cudaMemcpyDeviceToHost));
            for (int o = 0; o < out; o++) {
                double l1 = 0.0, tol;
                for (int i = 0; i < B; i++)
                    l1 += fabs(dy[(size_t)i * out + o]);
                tol = ((B + 15) / 16 + 5) * 0x1.0p-23 * l1;
                CHECK(fabs((double)got[o] - ref[o]) <= tol, "B=%d out=%d: db[%d] = %.9g, CPU %.9g",
                      B, out, o, got[o], ref[o]);
            }
            CUDA_OK(cudaFree(d_dy));
            CUDA_OK(cudaFree(d_db));
            free(dy), free(x), free(w), free(dw), free(ref), free(got);
        }
}

static void test_softmax_xent(void)
{
    static const int classes[] = {1, 2, 10, 31, 32, 33, 100, 1000};

    rng_state = 4;
    for (int bi = 0; bi < COUNT(batches); bi++)
        for (int ci = 0; ci < COUNT(classes); ci++) {
            int B = batches[bi], C = classes[ci];
            size_t n = (size_t)B * C;
            float *logits = random_floats(n, 4.0), *ref = malloc(n * sizeof(float) + 1);
            float *got = malloc(n * sizeof(float) + 1), *loss = malloc((size_t)B * sizeof(float));
            uint8_t *y = random_labels(B, C);
            void *d_logits = NULL, *d_dl = NULL, *d_loss = NULL, *d_y = NULL;
            double k = (C + 31) / 32 + 16;

            /* Row 0 extreme (the max must be subtracted first), row 1 flat. */
            for (int c = 0; c < C; c++) {
                logits[c] = c == C / 2 ? 80.0f : -80.0f;
                if (B > 1)
                    logits[C + c] = 0.5f;
            }
            ps_k_softmax_xent(logits, y, ref, B, C);
            CUDA_OK(upload(&d_logits, logits, n * sizeof(float)));
            CUDA_OK(upload(&d_y, y, (size_t)B));
            CUDA_OK(upload(&d_dl, NULL, n * sizeof(float)));
            CUDA_OK(upload(&d_loss, NULL, (size_t)B * sizeof(float)));
            CUDA_OK(ps_cuda_softmax_xent(d_logits, d_y, d_dl, d_loss, B, C, 0));
            CUDA_OK(cudaMemcpy(got, d_dl, n * sizeof(float), cudaMemcpyDeviceToHost));
            CUDA_OK(cudaMemcpy(loss, d_loss, (size_t)B * sizeof(float), cudaMemcpyDeviceToHost));
            for (size_t i = 0; i < n; i++)
                CHECK(fabs((double)got[i] - ref[i]) <= k * 0x1.0p-22 * (fabs(ref[i]) + 1.0 / B),
                      "B=%d C=%d: dlogits[%zu] = %.9g, CPU %.9g", B, C, i, got[i], ref[i]);
            for (int i = 0; i < B; i++) {
                /* One row at a time, the CPU's mean is that row's loss. */
                float want = ps_k_softmax_xent(logits + (size_t)i * C, y + i, NULL, 1, C);
                CHECK(fabs((double)loss[i] - want) <= k * 0x1.0p-22 * (fabs(want) + 1.0),
                      "B=%d C=%d: row %d loss %.9g, CPU %.9g", B, C, i, loss[i], want);
            }
            /* Without a gradient buffer the losses are the same. */
            CUDA_OK(ps_cuda_softmax_xent(d_logits, d_y, NULL, d_loss, B, C, 0));
            CUDA_OK(cudaMemcpy(got, d_loss, (size_t)B * sizeof(float), cudaMemcpyDeviceToHost));
            CHECK(memcmp(got, loss, (size_t)B * sizeof(float)) == 0,
                  "B=%d C=%d: losses depend on whether the gradient is wanted", B, C);
            CUDA_OK(cudaFree(d_logits));
            CUDA_OK(cudaFree(d_y));
            CUDA_OK(cudaFree(d_dl));
            CUDA_OK(cudaFree(d_loss));
            free(logits), free(ref), free(got), free(loss), free(y);
        }
}

static void test_sum_add(void)
{
    static const int sizes[] = {1, 255, 256, 257, 10000};

    rng_state = 5;
    for (int si = 0; si < COUNT(sizes); si++) {
        int n = sizes[si];
        float *v = random_floats((size_t)n, 1.0);
        double start = 1.5, got, want = start, l1 = start;
        void *d_v = NULL, *d_acc = NULL;

        /* Magnitudes over 12 orders, so float accumulation would show. */
        for (int i = 0; i < n; i++)
            v[i] *= (float)pow(10.0, (double)(i % 13) - 6.0);
        for (int pass = 0; pass < 2; pass++)
            for (int i = 0; i < n; i++) {
                want += v[i];
                l1 += fabs(v[i]);
            }
        CUDA_OK(upload(&d_v, v, (size_t)n * sizeof(float)));
        CUDA_OK(upload(&d_acc, &start, sizeof(double)));
        /* Twice: it adds to what is there. */
        CUDA_OK(ps_cuda_sum_add(d_v, n, d_acc, 0));
        CUDA_OK(ps_cuda_sum_add(d_v, n, d_acc, 0));
        CUDA_OK(cudaMemcpy(&got, d_acc, sizeof(double), cudaMemcpyDeviceToHost));
        CHECK(fabs(got - want) <= 1e-12 * l1, "n=%d: sum %.17g, want %.17g", n, got, want);
        CUDA_OK(cudaFree(d_v));
        CUDA_OK(cudaFree(d_acc));
        free(v);
    }
}

static void test_count_correct(void)
{
    static const int rows[] = {1, 255, 256, 257, 1000};
    static const int classes[] = {1, 2, 10, 33};

    rng_state = 6;
    for (int bi = 0; bi < COUNT(rows); bi++)
        for (int ci = 0; ci < COUNT(classes); ci++) {
            int B = rows[bi], C = classes[ci], start = 5, got, want;
            size_t n = (size_t)B * C;
            float *logits = random_floats(n, 1.0);
            uint8_t *y = random_labels(B, C);
            void *d_logits = NULL, *d_y = NULL, *d_count = NULL;

            /* Four levels only, so ties are common and "first on ties" is
             * tested. */
            for (size_t i = 0; i < n; i++)
                logits[i] = floorf((logits[i] + 1.0f) * 2.0f);
            want = start + ps_k_count_correct(logits, y, B, C);
            CUDA_OK(upload(&d_logits, logits, n * sizeof(float)));
            CUDA_OK(upload(&d_y, y, (size_t)B));
            CUDA_OK(upload(&d_count, &start, sizeof(int)));
            CUDA_OK(ps_cuda_count_correct(d_logits, d_y, B, C, d_count, 0));
            CUDA_OK(cudaMemcpy(&got, d_count, sizeof(int), cudaMemcpyDeviceToHost));
            CHECK(got == want, "B=%d C=%d: count %d, CPU %d", B, C, got, want);
            CUDA_OK(cudaFree(d_logits));
            CUDA_OK(cudaFree(d_y));
            CUDA_OK(cudaFree(d_count));
            free(logits), free(y);
        }
}

/* Runs the CPU model's forward pass in double (ps_k_linear_fwd_ref) on
 * x[B]: returns the smallest |pre-activation| of any hidden unit and counts
 * the rows whose top two logits are within MARGIN. */
static double conditioning(ps_backend *m, const ps_model_spec *s, const float *x, int B, int *ties)
{
    float *in = NULL, *out = NULL;
    double closest = INFINITY;

    for (int l = 0; l < s->n_layers; l++) {
        size_t n = (size_t)B * s->sizes[l + 1];
        out = malloc(n * sizeof(float));
        if (out == NULL)
            abort();
        ps_k_linear_fwd_ref(in ? in : x, ps_backend_params(m, 2 * l),
                            ps_backend_params(m, 2 * l + 1), out, B, s->sizes[l], s->sizes[l + 1]);
        if (l < s->n_layers - 1) {
            for (size_t i = 0; i < n; i++)
                closest = fmin(closest, fabs(out[i]));
            ps_k_relu_fwd(out, n);
        }
        free(in);
        in = out;
    }
    *ties = 0;
    for (int i = 0; i < B; i++) {
        const float *l = out + (size_t)i * s->sizes[s->n_layers];
        float first = -INFINITY, second = -INFINITY;
        for (int c = 0; c < s->sizes[s->n_layers]; c++) {
            second = l[c] > first ? first : fmaxf(second, l[c]);
            first = fmaxf(first, l[c]);
        }
        *ties += (double)first - second < MARGIN;
    }
    free(out);
    return closest;
}

/* A random batch on which no ReLU is within MARGIN of flipping. */
static void conditioned_batch(ps_backend *m, const ps_model_spec *s, float *x, uint8_t *y, int B,
                              int *ties)
{
    do {
        for (size_t i = 0; i < (size_t)B * s->sizes[0]; i++)
            x[i] = (float)(2.0 * rng_uniform() - 1.0);
        for (int i = 0; i < B; i++)
            y[i] = (uint8_t)(rng_uniform() * s->sizes[s->n_layers]);
    } while (conditioning(m, s, x, B, ties) < MARGIN);
}

/* Compares the gradients of the two models, tensor by tensor: in FP32 by
 * max |diff| against max |cpu|, in TF32 by the relative Frobenius norm. */
static void compare_grads(ps_backend *gpu, ps_backend *cpu, const ps_model_spec *s, int tf32,
                          const char *what)
{
    for (int t = 0; t < s->n_tensors; t++) {
        const float *g = ps_backend_grads(gpu, t), *r = ps_backend_grads(cpu, t);
        double max_diff = 0, max_ref = 0, sq_diff = 0, sq_ref = 0;

        for (size_t i = 0; i < s->tensors[t].numel; i++) {
            double d = (double)g[i] - r[i];
            max_diff = fmax(max_diff, fabs(d));
            max_ref = fmax(max_ref, fabs(r[i]));
            sq_diff += d * d;
            sq_ref += (double)r[i] * r[i];
        }
        if (tf32)
            CHECK(sqrt(sq_diff) <= 0.15 * sqrt(sq_ref), "%s: %s relative Frobenius error %.3g",
                  what, s->tensors[t].name, sqrt(sq_diff / fmax(sq_ref, 1e-300)));
        else
            CHECK(max_diff <= 1e-4 * max_ref, "%s: %s max error %.3g, largest entry %.3g", what,
                  s->tensors[t].name, max_diff, max_ref);
    }
}

/* The MLP of sizes resolved with seed 42. Returns 0 or a negative code. */
static int mlp_desc(const int *sizes, int n_sizes, ps_model_desc *d, ps_model_spec *s)
{
    char err[256];
    ps_act_shape in = {1, {sizes[0], 0, 0}};
    int rc = ps_model_desc_mlp(d, sizes + 1, n_sizes - 2, "test", err, sizeof(err));

    if (rc == 0)
        rc = ps_model_desc_resolve(d, &in, sizes[n_sizes - 1], 42, s, err, sizeof(err));
    if (rc < 0)
        fprintf(stderr, "%s\n", err);
    return rc;
}

/* One model shape: train_step and evaluate on the GPU against the CPU, then
 * `steps` SGD steps applied to both, comparing every step. */
static void check_model(const int *sizes, int n_sizes, int B, int max_batch, int steps, int tf32)
{
    ps_backend_config cfg = {PS_DEVICE_CUDA, max_batch, tf32, 0, 0, 0};
    ps_backend_config cpu_cfg = {PS_DEVICE_CPU, max_batch, 0, 0, 0, 0};
    ps_model_desc d;
    ps_model_spec s;
    ps_backend *gpu = NULL;
    ps_backend *cpu = NULL;
    int n_eval = 2 * max_batch + 3, ties, cg, cc;
    float *x = random_floats((size_t)n_eval * sizes[0], 1.0), lg, lc;
    uint8_t *y = random_labels(n_eval, sizes[n_sizes - 1]);
    char what[96];

    snprintf(what, sizeof(what), "%d layers, in %d, B=%d%s", n_sizes - 1, sizes[0], B,
             tf32 ? ", TF32" : "");
    if (mlp_desc(sizes, n_sizes, &d, &s) < 0 || ps_backend_init(&cpu, &d, &s, &cpu_cfg) < 0 ||
        ps_backend_init(&gpu, &d, &s, &cfg) < 0) {
        CHECK(0, "%s: could not set up the models", what);
        goto out;
    }
    CHECK(ps_backend_device(gpu) == PS_DEVICE_CUDA, "%s: not on the GPU", what);
    /* Random biases (they start at zero) make the ReLU pattern less special. */
    for (int l = 0; l < s.n_layers; l++) {
        float *b = random_floats(s.tensors[2 * l + 1].numel, 0.3);
        memcpy(ps_backend_params(cpu, 2 * l + 1), b, s.tensors[2 * l + 1].numel * sizeof(float));
        memcpy(ps_backend_params(gpu, 2 * l + 1), b, s.tensors[2 * l + 1].numel * sizeof(float));
        free(b);
    }
    for (int step = 0; step <= steps; step++) {
        CHECK(ps_backend_load_params(gpu) == 0, "%s: load_params failed", what);
        conditioned_batch(cpu, &s, x, y, B, &ties);
        CHECK(ps_backend_load_params(cpu) == 0, "%s: load_params failed", what);
        CHECK(ps_backend_train_step(gpu, x, y, B, 0, &lg, &cg) == 0, "%s: train_step failed", what);
        CHECK(ps_backend_train_step(cpu, x, y, B, 0, &lc, &cc) == 0, "%s: CPU failed", what);
        CHECK(fabs((double)lg - lc) <= (tf32 ? 1e-2 : 1e-5) * (1 + fabs(lc)),
              "%s, step %d: loss %.9g, CPU %.9g", what, step, lg, lc);
        CHECK(abs(cg - cc) <= (tf32 ? B / 16 + 1 : ties), "%s, step %d: %d correct, CPU %d", what,
              step, cg, cc);
        compare_grads(gpu, cpu, &s, tf32, what);
        /* SGD on both, each with its own gradients. */
        for (int t = 0; t < s.n_tensors; t++)
            for (size_t i = 0; i < s.tensors[t].numel; i++) {
                ps_backend_params(cpu, t)[i] -= 0.05f * ps_backend_grads(cpu, t)[i];
                ps_backend_params(gpu, t)[i] -= 0.05f * ps_backend_grads(gpu, t)[i];
            }
    }
    CHECK(ps_backend_load_params(gpu) == 0, "%s: load_params failed", what);
    for (int i = 0; i < n_eval; i++)
        y[i] = (uint8_t)(rng_uniform() * sizes[n_sizes - 1]);
    conditioning(cpu, &s, x, n_eval, &ties);
    CHECK(ps_backend_evaluate(gpu, x, y, n_eval, &lg, &cg) == 0, "%s: evaluate failed", what);
    CHECK(ps_backend_evaluate(cpu, x, y, n_eval, &lc, &cc) == 0, "%s: CPU evaluate failed", what);
    CHECK(fabs((double)lg - lc) <= (tf32 ? 1e-2 : 1e-5) * (1 + fabs(lc)),
          "%s: evaluate loss %.9g, CPU %.9g", what, lg, lc);
    CHECK(abs(cg - cc) <= (tf32 ? n_eval / 16 + 1 : ties), "%s: evaluate %d correct, CPU %d", what,
          cg, cc);
out:
    ps_backend_free(gpu);
    ps_backend_free(cpu);
    free(x), free(y);
}

static void run_models(int tf32)
{
    rng_state = tf32 ? 8 : 7;
    /* The default job; odd widths with a batch past and short of max_batch;
     * a single layer (no ReLU, no delta buffers). */
    check_model((const int[]){784, 256, 128, 10}, 4, 64, 256, 10, tf32);
    check_model((const int[]){13, 37, 33, 5}, 4, 65, 100, 3, tf32);
    check_model((const int[]){13, 37, 33, 5}, 4, 1, 100, 3, tf32);
    check_model((const int[]){7, 4}, 2, 3, 3, 3, tf32);
}

static void test_model_fp32(void)
{
    run_models(0);
}

static void test_model_tf32(void)
{
    run_models(1);
}

static const cuda_test tests[] = {
    {"bias_act_fwd", test_bias_act_fwd}, {"relu_bwd", test_relu_bwd},
    {"bias_grad", test_bias_grad},       {"softmax_xent", test_softmax_xent},
    {"sum_add", test_sum_add},           {"count_correct", test_count_correct},
    {"model_fp32", test_model_fp32},     {"model_tf32", test_model_tf32},
    {"f32_to_bf16", test_f32_to_bf16},
};

int main(int argc, char **argv)
{
    const char *only = argc > 1 ? argv[1] : NULL;
    int rc = cuda_test_need_gpu(only);

    return rc ? rc : cuda_test_run("test_cuda", tests, sizeof(tests) / sizeof(tests[0]), only);
}
