/* Tests of the CUDA kernels of kernels/cuda_kernels.cu against the functions
 * they mirror (cpu_kernels.h, common/half.h), on random inputs at sizes on
 * both sides of every block and warp boundary. Whole models on the GPU are
 * test_models_cuda.c's, the layers test_layers_cuda.c's.
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
 * - count_correct: exact. Compares and an integer count: nothing is left to
 *   rounding order.
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
 */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "cpu_kernels.h"
#include "cuda_kernels.h"
#include "cuda_test.h"
#include "half.h"

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
            float *dy = rng_floats((size_t)B * out, 1.0), *x = rng_floats((size_t)B, 1.0);
            float *w = rng_floats((size_t)out, 1.0), *dw = rng_floats((size_t)out, 1.0);
            float *ref = rng_floats((size_t)out, 1.0), *got = rng_floats((size_t)out, 1.0);
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
            float *logits = rng_floats(n, 4.0), *ref = malloc(n * sizeof(float) + 1);
            float *got = malloc(n * sizeof(float) + 1), *loss = malloc((size_t)B * sizeof(float));
            uint8_t *y = rng_labels(B, C);
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
        float *v = rng_floats((size_t)n, 1.0);
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
            float *logits = rng_floats(n, 1.0);
            uint8_t *y = rng_labels(B, C);
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

static const cuda_test tests[] = {
    {"bias_grad", test_bias_grad},     {"softmax_xent", test_softmax_xent},
    {"sum_add", test_sum_add},         {"count_correct", test_count_correct},
    {"f32_to_bf16", test_f32_to_bf16},
};

int main(int argc, char **argv)
{
    const char *only = argc > 1 ? argv[1] : NULL;
    int rc = cuda_test_need_gpu(only);

    return rc ? rc : cuda_test_run("test_cuda", tests, sizeof(tests) / sizeof(tests[0]), only);
}
