/* Tests of the CUDA backend against its CPU references: each kernel of
 * kernels/cuda_kernels.cu against the function it mirrors (cpu_kernels.h,
 * common/half.h), on random inputs at sizes on both sides of every block and
 * warp boundary, and whole models (the executor of worker/model.c on the
 * CUDA table, through worker/backend_cuda.c) against the same executor on
 * the CPU table: an MLP and a CNN in FP32, TF32 and bf16, the per-layer
 * hand-over of gradients, clipping and the narrowing of --compress bf16.
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
 * - mlp_fp32: loss within 1e-5 * (1 + loss); every gradient within 1e-4 of
 *   its tensor's largest entry; correct counts equal except on rows whose
 *   top two logits are within 2e-5 (a near tie may go either way). Batches
 *   are drawn so that no hidden pre-activation lies within 2e-5 of zero
 *   (checked on the CPU in double), since cuBLAS and OpenBLAS sum in
 *   different orders and a ReLU that flips would change a gradient entry by
 *   a whole term.
 * - The other models compare all their gradients at once, by the relative
 *   Frobenius norm of the difference (|g - ref| / |ref| over every tensor):
 *   ReLUs and max-pool windows near a tie may flip, and a flip moves one
 *   term of a sum, which a per-entry bound cannot allow for but the norm of
 *   the whole gradient hardly notices; a wrong operand, layer or buffer is
 *   off by about 1. The bounds come from a CPU emulation run when they were
 *   set (the executor on the CPU table with the products' inputs rounded as
 *   the GPU rounds them: 20 seeds x 4 steps of these models, batches as
 *   here), times about three:
 *   - cnn_fp32: 1e-3. Inputs rounded to 20 bits (16 times float32's
 *     rounding) moved the CNN's gradient by at most 5.4e-6, its loss by
 *     1.4e-6 relative; loss within 1e-5 (1 + loss), counts within 1.
 *   - TF32 (10 bits kept): at most 0.036 (MLP) and 0.044 (CNN); bound 0.15.
 *     Loss within 1e-2 (1 + loss) (emulated: 1.7e-3), counts within B/16 + 1.
 *   - bf16 (round to nearest, 8 bits): at most 0.072 (MLP) and 0.12 (CNN);
 *     bound 0.35. Loss within 5e-3 (1 + loss) (emulated: 1e-3), counts within
 *     B/16 + 1.
 * - layer_handover: bit for bit: what the callback saw of a layer's
 *   gradients is what the step left there.
 * - compress_bf16: bit for bit: the gradients handed over are the bfloat16
 *   rounding (ps_f32_to_bf16_ref) of those of the same model without it.
 * - clip: as mlp_fp32, against the CPU backend clipping the same way, and
 *   every tensor's norm at most the bound (plus 1e-6 relative).
 */
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

/* A model of the tests: its file, its input and how it is run. */
typedef struct {
    const char *name, *text;
    ps_act_shape in;
    int classes, B, max_batch, steps;
    int conditioned; /* an MLP whose batches avoid near-zero pre-activations */
} model_case;

static const model_case mlp_default = {"mlp 784-256-128-10",
                                       "flatten\ndense out=256\nrelu\ndense out=128\nrelu\n"
                                       "dense out=classes\n",
                                       {1, {784, 0, 0}},
                                       10,
                                       64,
                                       256,
                                       10,
                                       1};
static const model_case mlp_odd = {"mlp 13-37-33-5",
                                   "flatten\ndense out=37\nrelu\ndense out=33\nrelu\n"
                                   "dense out=classes\n",
                                   {1, {13, 0, 0}},
                                   5,
                                   65,
                                   100,
                                   3,
                                   1};
static const model_case mlp_single = {
    "mlp 7-4", "flatten\ndense out=classes\n", {1, {7, 0, 0}}, 4, 3, 3, 3, 1};
/* Every layer kind: the emulation that set the bounds ran this one. */
static const model_case cnn = {"cnn",
                               "conv2d out=8 kernel=3 pad=1\nrelu\nmaxpool kernel=2\n"
                               "conv2d out=16 kernel=3 pad=1\nrelu\nmaxpool kernel=2\nflatten\n"
                               "dense out=32\nrelu\ndropout p=0.25\ndense out=classes\n",
                               {3, {1, 16, 16}},
                               10,
                               32,
                               48,
                               4,
                               0};

static int make_desc(const model_case *mc, ps_model_desc *d, ps_model_spec *s)
{
    char err[256];
    int rc = ps_model_desc_parse(d, mc->text, "test", err, sizeof(err));

    if (rc == 0)
        rc = ps_model_desc_resolve(d, &mc->in, mc->classes, 42, s, err, sizeof(err));
    if (rc < 0)
        fprintf(stderr, "%s: %s\n", mc->name, err);
    return rc;
}

static size_t input_count(const model_case *mc)
{
    size_t n = 1;
    for (int i = 0; i < mc->in.ndim; i++)
        n *= (size_t)mc->in.d[i];
    return n;
}

/* A batch: conditioned (see the tolerances) for an MLP in FP32, else
 * pixel-like values in [0, 1). */
static void draw_batch(const model_case *mc, ps_backend *cpu, const ps_model_spec *s, float *x,
                       uint8_t *y, int B, int conditioned, int *ties)
{
    size_t nx = (size_t)B * input_count(mc);

    do {
        for (size_t i = 0; i < nx; i++)
            x[i] = conditioned ? (float)(2.0 * rng_uniform() - 1.0) : (float)rng_uniform();
        for (int i = 0; i < B; i++)
            y[i] = (uint8_t)(rng_uniform() * mc->classes);
        *ties = 0;
    } while (conditioned && conditioning(cpu, s, x, B, ties) < MARGIN);
}

/* max |g - ref| over max |ref| per tensor (per_tensor), or the relative
 * Frobenius norm of the whole gradient's difference. */
static void compare_grads(ps_backend *gpu, ps_backend *cpu, const ps_model_spec *s, int per_tensor,
                          double tol, const char *what)
{
    double sq_diff = 0, sq_ref = 0;

    for (int t = 0; t < s->n_tensors; t++) {
        const float *g = ps_backend_grads(gpu, t), *r = ps_backend_grads(cpu, t);
        double max_diff = 0, max_ref = 0;

        for (size_t i = 0; i < s->tensors[t].numel; i++) {
            double d = (double)g[i] - r[i];
            max_diff = fmax(max_diff, fabs(d));
            max_ref = fmax(max_ref, fabs(r[i]));
            sq_diff += d * d;
            sq_ref += (double)r[i] * r[i];
        }
        if (per_tensor)
            CHECK(max_diff <= tol * max_ref, "%s: %s max error %.3g, largest entry %.3g", what,
                  s->tensors[t].name, max_diff, max_ref);
    }
    if (!per_tensor)
        CHECK(sqrt(sq_diff) <= tol * sqrt(sq_ref), "%s: relative Frobenius error %.3g (bound %.3g)",
              what, sqrt(sq_diff / fmax(sq_ref, 1e-300)), tol);
}

/* The bounds of the tolerances above for a model and a math. */
typedef struct {
    int per_tensor;
    double grad, loss;
    int count_slack; /* -1: the ties counted on the CPU */
} bounds;

static bounds bounds_for(const model_case *mc, ps_precision p, int tf32)
{
    if (p == PS_PRECISION_BF16)
        return (bounds){0, 0.35, 5e-3, mc->B / 16 + 1};
    if (tf32)
        return (bounds){0, 0.15, 1e-2, mc->B / 16 + 1};
    if (mc->conditioned)
        return (bounds){1, 1e-4, 1e-5, -1};
    return (bounds){0, 1e-3, 1e-5, 1};
}

static void setup(const model_case *mc, ps_backend_config *gcfg, ps_model_desc *d, ps_model_spec *s,
                  ps_backend **gpu, ps_backend **cpu, const char *what)
{
    ps_backend_config ccfg = {.device = PS_DEVICE_CPU,
                              .max_batch = gcfg->max_batch,
                              .clip_norm = gcfg->clip_norm,
                              .dropout_seed = gcfg->dropout_seed};

    *gpu = *cpu = NULL;
    if (make_desc(mc, d, s) < 0 || ps_backend_init(cpu, d, s, &ccfg) < 0 ||
        ps_backend_init(gpu, d, s, gcfg) < 0) {
        CHECK(0, "%s: could not set up the models", what);
        return;
    }
    CHECK(ps_backend_device(*gpu) == PS_DEVICE_CUDA, "%s: not on the GPU", what);
    /* Random biases (they start at zero) make the ReLU pattern less special. */
    for (int t = 1; t < s->n_tensors; t += 2) {
        float *b = random_floats(s->tensors[t].numel, 0.3);
        memcpy(ps_backend_params(*cpu, t), b, s->tensors[t].numel * sizeof(float));
        memcpy(ps_backend_params(*gpu, t), b, s->tensors[t].numel * sizeof(float));
        free(b);
    }
}

/* One model in one math: train_step and evaluate on the GPU against the
 * CPU, then steps of SGD applied to both, each with its own gradients,
 * comparing every step. */
static void check_model(const model_case *mc, ps_precision precision, int tf32)
{
    ps_backend_config cfg = {.device = PS_DEVICE_CUDA,
                             .max_batch = mc->max_batch,
                             .tf32 = tf32,
                             .precision = precision,
                             .dropout_seed = 99};
    bounds bd = bounds_for(mc, precision, tf32);
    int conditioned = mc->conditioned && bd.per_tensor;
    ps_model_desc d;
    ps_model_spec s;
    ps_backend *gpu, *cpu;
    int n_eval = 2 * mc->max_batch + 3, ties = 0, cg, cc;
    float *x = random_floats((size_t)n_eval * input_count(mc), 1.0), lg, lc;
    uint8_t *y = random_labels(n_eval, mc->classes);
    char what[128];

    snprintf(what, sizeof(what), "%s, B=%d, %s", mc->name, mc->B,
             precision == PS_PRECISION_BF16 ? "bf16"
             : tf32                         ? "TF32"
                                            : "FP32");
    setup(mc, &cfg, &d, &s, &gpu, &cpu, what);
    for (int step = 0; gpu && step <= mc->steps; step++) {
        CHECK(ps_backend_load_params(gpu) == 0, "%s: load_params failed", what);
        draw_batch(mc, cpu, &s, x, y, mc->B, conditioned, &ties);
        CHECK(ps_backend_train_step(gpu, x, y, mc->B, (uint64_t)step, &lg, &cg) == 0,
              "%s: train_step failed", what);
        CHECK(ps_backend_train_step(cpu, x, y, mc->B, (uint64_t)step, &lc, &cc) == 0,
              "%s: CPU failed", what);
        CHECK(fabs((double)lg - lc) <= bd.loss * (1 + fabs(lc)), "%s, step %d: loss %.9g, CPU %.9g",
              what, step, lg, lc);
        CHECK(abs(cg - cc) <= (bd.count_slack < 0 ? ties : bd.count_slack),
              "%s, step %d: %d correct, CPU %d", what, step, cg, cc);
        compare_grads(gpu, cpu, &s, bd.per_tensor, bd.grad, what);
        for (int t = 0; t < s.n_tensors; t++)
            for (size_t i = 0; i < s.tensors[t].numel; i++) {
                ps_backend_params(cpu, t)[i] -= 0.05f * ps_backend_grads(cpu, t)[i];
                ps_backend_params(gpu, t)[i] -= 0.05f * ps_backend_grads(gpu, t)[i];
            }
    }
    if (gpu) {
        CHECK(ps_backend_load_params(gpu) == 0, "%s: load_params failed", what);
        draw_batch(mc, cpu, &s, x, y, n_eval, 0, &ties);
        if (conditioned)
            conditioning(cpu, &s, x, n_eval, &ties);
        CHECK(ps_backend_evaluate(gpu, x, y, n_eval, &lg, &cg) == 0, "%s: evaluate failed", what);
        CHECK(ps_backend_evaluate(cpu, x, y, n_eval, &lc, &cc) == 0, "%s: CPU evaluate failed",
              what);
        CHECK(fabs((double)lg - lc) <= bd.loss * (1 + fabs(lc)), "%s: evaluate loss %.9g, CPU %.9g",
              what, lg, lc);
        CHECK(abs(cg - cc) <= (bd.count_slack < 0 ? ties : (n_eval / mc->B + 1) * bd.count_slack),
              "%s: evaluate %d correct, CPU %d", what, cg, cc);
    }
    ps_backend_free(gpu);
    ps_backend_free(cpu);
    free(x), free(y);
}

static void run_mlps(ps_precision p, int tf32)
{
    rng_state = 7 + tf32 + 2 * (int)p;
    /* The default job; odd widths with a batch past and short of max_batch;
     * a single layer (no ReLU, no delta buffers). */
    check_model(&mlp_default, p, tf32);
    check_model(&mlp_odd, p, tf32);
    check_model(&mlp_single, p, tf32);
}

static void test_mlp_fp32(void)
{
    run_mlps(PS_PRECISION_FP32, 0);
}

static void test_mlp_tf32(void)
{
    run_mlps(PS_PRECISION_FP32, 1);
}

static void test_mlp_bf16(void)
{
    run_mlps(PS_PRECISION_BF16, 0);
}

static void test_cnn_fp32(void)
{
    rng_state = 21;
    check_model(&cnn, PS_PRECISION_FP32, 0);
}

static void test_cnn_tf32(void)
{
    rng_state = 22;
    check_model(&cnn, PS_PRECISION_FP32, 1);
}

static void test_cnn_bf16(void)
{
    rng_state = 23;
    check_model(&cnn, PS_PRECISION_BF16, 0);
}

/* What the layer callback saw: the tensors, in order, and a copy of their
 * gradients at that moment. */
static struct {
    ps_backend *b;
    const ps_model_spec *s;
    int first[PS_MAX_TENSORS], count[PS_MAX_TENSORS], n;
    float *seen[PS_MAX_TENSORS];
} handover;

static void record_layer(void *arg, int first, int count)
{
    (void)arg;
    if (handover.n >= PS_MAX_TENSORS)
        return;
    handover.first[handover.n] = first;
    handover.count[handover.n++] = count;
    for (int t = first; t < first + count; t++) {
        size_t bytes = handover.s->tensors[t].numel * sizeof(float);
        handover.seen[t] = malloc(bytes);
        if (handover.seen[t] == NULL)
            abort();
        memcpy(handover.seen[t], ps_backend_grads(handover.b, t), bytes);
    }
}

static void test_layer_handover(void)
{
    ps_backend_config cfg = {.device = PS_DEVICE_CUDA, .max_batch = cnn.max_batch};
    ps_model_desc d;
    ps_model_spec s;
    ps_backend *gpu, *cpu;
    float *x = random_floats((size_t)cnn.B * input_count(&cnn), 1.0), loss;
    uint8_t *y = random_labels(cnn.B, cnn.classes);
    int correct, ties;

    rng_state = 24;
    setup(&cnn, &cfg, &d, &s, &gpu, &cpu, "handover");
    if (gpu) {
        memset(&handover, 0, sizeof(handover));
        handover.b = gpu, handover.s = &s;
        ps_backend_on_layer_grads(gpu, record_layer, NULL);
        draw_batch(&cnn, cpu, &s, x, y, cnn.B, 0, &ties);
        CHECK(ps_backend_train_step(gpu, x, y, cnn.B, 0, &loss, &correct) == 0, "train_step");
        /* Three layers with parameters, last first, weight then bias. */
        CHECK(handover.n == s.n_tensors / 2, "%d layers handed over, not %d", handover.n,
              s.n_tensors / 2);
        for (int k = 0; k < handover.n; k++) {
            int first = s.n_tensors - 2 * (k + 1);
            CHECK(handover.first[k] == first && handover.count[k] == 2,
                  "hand-over %d: tensors %d+%d, not %d+2", k, handover.first[k], handover.count[k],
                  first);
        }
        for (int t = 0; t < s.n_tensors; t++) {
            CHECK(handover.seen[t] != NULL, "%s never handed over", s.tensors[t].name);
            if (handover.seen[t])
                CHECK(memcmp(handover.seen[t], ps_backend_grads(gpu, t),
                             s.tensors[t].numel * sizeof(float)) == 0,
                      "%s: the callback saw other values than the step left", s.tensors[t].name);
            free(handover.seen[t]);
        }
    }
    ps_backend_free(gpu);
    ps_backend_free(cpu);
    free(x), free(y);
}

static void test_compress_bf16(void)
{
    ps_backend_config cfg = {.device = PS_DEVICE_CUDA, .max_batch = cnn.max_batch};
    ps_model_desc d;
    ps_model_spec s;
    ps_backend *wide, *narrow = NULL, *cpu;
    float *x = random_floats((size_t)cnn.B * input_count(&cnn), 1.0), lw, ln;
    uint8_t *y = random_labels(cnn.B, cnn.classes);
    int cw, cn, ties;

    rng_state = 25;
    setup(&cnn, &cfg, &d, &s, &wide, &cpu, "compress_bf16");
    cfg.narrow_bf16 = 1;
    CHECK(wide && ps_backend_init(&narrow, &d, &s, &cfg) == 0, "narrowing backend");
    if (narrow) {
        for (int t = 0; t < s.n_tensors; t++)
            memcpy(ps_backend_params(narrow, t), ps_backend_params(wide, t),
                   s.tensors[t].numel * sizeof(float));
        CHECK(ps_backend_load_params(wide) == 0 && ps_backend_load_params(narrow) == 0, "load");
        draw_batch(&cnn, cpu, &s, x, y, cnn.B, 0, &ties);
        CHECK(ps_backend_train_step(wide, x, y, cnn.B, 0, &lw, &cw) == 0, "train_step");
        CHECK(ps_backend_train_step(narrow, x, y, cnn.B, 0, &ln, &cn) == 0, "train_step, narrow");
        CHECK(lw == ln && cw == cn, "the loss depends on the narrowing of the gradients");
        for (int t = 0; t < s.n_tensors; t++) {
            size_t n = s.tensors[t].numel;
            uint16_t *h = malloc(n * sizeof(uint16_t) + 2);
            float *want = malloc(n * sizeof(float) + 4);
            if (h == NULL || want == NULL)
                abort();
            ps_f32_to_bf16_ref(h, ps_backend_grads(wide, t), n);
            ps_bf16_to_f32_ref(want, h, n);
            CHECK(memcmp(want, ps_backend_grads(narrow, t), n * sizeof(float)) == 0,
                  "%s: not the bfloat16 rounding of the float32 gradient", s.tensors[t].name);
            free(h), free(want);
        }
    }
    ps_backend_free(narrow);
    ps_backend_free(wide);
    ps_backend_free(cpu);
    free(x), free(y);
}

static void test_clip(void)
{
    ps_backend_config cfg = {
        .device = PS_DEVICE_CUDA, .max_batch = mlp_odd.max_batch, .clip_norm = 0.05};
    ps_model_desc d;
    ps_model_spec s;
    ps_backend *gpu, *cpu;
    float *x = random_floats((size_t)mlp_odd.B * input_count(&mlp_odd), 1.0), lg, lc;
    uint8_t *y = random_labels(mlp_odd.B, mlp_odd.classes);
    int cg, cc, ties;

    rng_state = 26;
    setup(&mlp_odd, &cfg, &d, &s, &gpu, &cpu, "clip");
    if (gpu) {
        CHECK(ps_backend_load_params(gpu) == 0, "load");
        draw_batch(&mlp_odd, cpu, &s, x, y, mlp_odd.B, 1, &ties);
        CHECK(ps_backend_train_step(gpu, x, y, mlp_odd.B, 0, &lg, &cg) == 0, "train_step");
        CHECK(ps_backend_train_step(cpu, x, y, mlp_odd.B, 0, &lc, &cc) == 0, "CPU train_step");
        compare_grads(gpu, cpu, &s, 1, 1e-4, "clip");
        for (int t = 0; t < s.n_tensors; t++) {
            double sq = 0;
            for (size_t i = 0; i < s.tensors[t].numel; i++)
                sq += (double)ps_backend_grads(gpu, t)[i] * ps_backend_grads(gpu, t)[i];
            CHECK(sqrt(sq) <= 0.05 * (1 + 1e-6), "%s: norm %.9g above the bound", s.tensors[t].name,
                  sqrt(sq));
        }
    }
    ps_backend_free(gpu);
    ps_backend_free(cpu);
    free(x), free(y);
}

static const cuda_test tests[] = {
    {"bias_grad", test_bias_grad},
    {"softmax_xent", test_softmax_xent},
    {"sum_add", test_sum_add},
    {"count_correct", test_count_correct},
    {"f32_to_bf16", test_f32_to_bf16},
    {"mlp_fp32", test_mlp_fp32},
    {"mlp_tf32", test_mlp_tf32},
    {"mlp_bf16", test_mlp_bf16},
    {"cnn_fp32", test_cnn_fp32},
    {"cnn_tf32", test_cnn_tf32},
    {"cnn_bf16", test_cnn_bf16},
    {"layer_handover", test_layer_handover},
    {"compress_bf16", test_compress_bf16},
    {"clip", test_clip},
};

int main(int argc, char **argv)
{
    const char *only = argc > 1 ? argv[1] : NULL;
    int rc = cuda_test_need_gpu(only);

    return rc ? rc : cuda_test_run("test_cuda", tests, sizeof(tests) / sizeof(tests[0]), only);
}
