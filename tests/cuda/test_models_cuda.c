/* Whole models on the GPU: the executor of worker/model.c on the CUDA table
 * of operations, through the CUDA backend (worker/backend_cuda.c), against
 * the same executor on the CPU table through the CPU backend: MLPs and a CNN
 * of every layer kind in FP32, TF32 and bf16, each over several SGD steps and
 * an evaluation; the per-layer hand-over of gradients; the narrowing of
 * --compress bf16; and clipping.
 *
 * A plain C program like test_cuda.c, for the same reason: with no usable
 * GPU it says why and exits 77, which ctest reports as Skipped under each
 * test's name. `test_models_cuda NAME` runs one test; no argument runs all.
 * Exit 0: passed, 1: failed, 77: skipped.
 *
 * Tolerances, and why:
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
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cpu_kernels.h"
/* backend_cuda.c, linked here, sets ASan up for CUDA. */
#define PS_CUDA_TEST_LINKS_BACKEND
#include "cuda_test.h"
#include "half.h"
#include "model_desc.h"

/* Distance from zero (pre-activations) and between the top two logits that
 * FP32 rounding differences cannot cross; see the tolerances above. */
#define MARGIN 2e-5

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
        float *b = rng_floats(s->tensors[t].numel, 0.3);
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
    float *x = rng_floats((size_t)n_eval * input_count(mc), 1.0), lg, lc;
    uint8_t *y = rng_labels(n_eval, mc->classes);
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
    float *x = rng_floats((size_t)cnn.B * input_count(&cnn), 1.0), loss;
    uint8_t *y = rng_labels(cnn.B, cnn.classes);
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
    float *x = rng_floats((size_t)cnn.B * input_count(&cnn), 1.0), lw, ln;
    uint8_t *y = rng_labels(cnn.B, cnn.classes);
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
    float *x = rng_floats((size_t)mlp_odd.B * input_count(&mlp_odd), 1.0), lg, lc;
    uint8_t *y = rng_labels(mlp_odd.B, mlp_odd.classes);
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

    return rc ? rc
              : cuda_test_run("test_models_cuda", tests, sizeof(tests) / sizeof(tests[0]), only);
}
