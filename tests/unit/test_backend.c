/* Unit tests of the compute-backend interface (worker/backend.h) that need no
 * GPU: the CPU backend is ps_model seen through the interface (identical
 * results, bit for bit, and the host buffers are the model's), its clipping
 * and batch buffers, argument checks (labels included), --precision bf16
 * refused without a GPU, device selection (--device names, --device auto
 * falling back to the CPU with a reason, --device cuda agreeing with auto
 * about whether a GPU is usable), and, in a build with CUDA, the CUDA table
 * of operations as data: complete, and sharing no entry with the CPU's. The
 * CUDA backend's numbers are tested in tests/cuda against these, and what
 * its objects call in tests/cuda/ops_link.sh. */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <string.h>

#include "backend.h"
#include "backend_ops.h"
#include "layers.h"
#include "model.h"
#include "../test_rng.h"

enum { MAX_BATCH = 16, N_EVAL = 40 };
static ps_model_desc desc;

/* A 13-37-33-5 MLP: its table has the MLP view the CUDA backend runs. */
static void make_spec(ps_model_spec *spec)
{
    const char *text = "flatten\ndense out=37\nrelu\ndense out=33\nrelu\ndense out=classes\n";
    ps_act_shape in = {1, {13, 0, 0}};
    char err[128];

    cr_assert_eq(ps_model_desc_parse(&desc, text, "test", err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(ps_model_desc_resolve(&desc, &in, 5, 3, spec, err, sizeof(err)), 0, "%s", err);
}

static ps_backend *make_backend(ps_device device, const ps_model_spec *spec)
{
    ps_backend_config cfg = {.device = device, .max_batch = MAX_BATCH};
    ps_backend *b = NULL;

    cr_assert_eq(ps_backend_init(&b, &desc, spec, &cfg), 0);
    cr_assert_not_null(b);
    return b;
}

Test(backend, parses_device_names)
{
    ps_device d;

    cr_assert_eq(ps_backend_parse_device("auto", &d), 0);
    cr_assert_eq(d, PS_DEVICE_AUTO);
    cr_assert_eq(ps_backend_parse_device("cpu", &d), 0);
    cr_assert_eq(d, PS_DEVICE_CPU);
    cr_assert_eq(ps_backend_parse_device("cuda", &d), 0);
    cr_assert_eq(d, PS_DEVICE_CUDA);
    cr_assert_eq(ps_backend_parse_device("gpu", &d), -EINVAL);
    cr_assert_eq(ps_backend_parse_device("CUDA", &d), -EINVAL);
    cr_assert_eq(ps_backend_parse_device("", &d), -EINVAL);
}

Test(backend, cpu_is_ps_model_bit_for_bit)
{
    ps_model_spec spec;
    ps_backend *b;
    ps_model *m;
    float x[N_EVAL * 13], lb, lm;
    uint8_t y[N_EVAL];
    int cb, cm;

    rng_state = 1;
    make_spec(&spec);
    b = make_backend(PS_DEVICE_CPU, &spec);
    cr_assert_eq(ps_backend_device(b), PS_DEVICE_CPU);
    cr_assert(strncmp(ps_backend_describe(b), "cpu: ", 5) == 0, "%s", ps_backend_describe(b));
    cr_assert_eq(ps_model_init(&m, &ps_backend_cpu_ops, NULL, &desc, &spec, MAX_BATCH, 0), 0);
    /* Both start at the spec's values; then new parameters go in through
     * the host buffers, as the key-value client writes them. */
    for (int t = 0; t < spec.n_tensors; t++) {
        size_t n = spec.tensors[t].numel;
        cr_assert_eq(memcmp(ps_backend_params(b, t), ps_model_param(m, t), n * sizeof(float)), 0);
        fill_random(ps_model_param(m, t), n, 0.5);
        memcpy(ps_backend_params(b, t), ps_model_param(m, t), n * sizeof(float));
    }
    cr_assert_eq(ps_backend_load_params(b), 0);
    fill_random(x, sizeof(x) / sizeof(x[0]), 1.0);
    for (int i = 0; i < N_EVAL; i++)
        y[i] = (uint8_t)(rng_uniform() * 5);

    for (int B = 1; B <= MAX_BATCH; B += 5) {
        cr_assert_eq(ps_backend_train_step(b, x, y, B, 0, &lb, &cb), 0);
        cr_assert_eq(ps_model_train_step(m, x, y, B, 0, &lm, &cm), 0);
        cr_assert_eq(lb, lm, "B=%d: loss %.9g through the backend, %.9g from ps_model", B, lb, lm);
        cr_assert_eq(cb, cm);
        for (int t = 0; t < spec.n_tensors; t++)
            cr_assert_eq(memcmp(ps_backend_grads(b, t), ps_model_grad(m, t),
                                spec.tensors[t].numel * sizeof(float)),
                         0, "B=%d: gradient of %s differs", B, spec.tensors[t].name);
    }
    /* 40 rows: batches of 16, 16 and 8. */
    cr_assert_eq(ps_backend_evaluate(b, x, y, N_EVAL, &lb, &cb), 0);
    cr_assert_eq(ps_model_evaluate(m, x, y, N_EVAL, &lm, &cm, NULL), 0);
    cr_assert_eq(lb, lm);
    cr_assert_eq(cb, cm);
    ps_model_free(m);
    ps_backend_free(b);
}

Test(backend, refuses_bad_sizes)
{
    ps_backend_config cfg = {.device = PS_DEVICE_CPU, .max_batch = 0};
    ps_model_spec spec;
    /* Any non-NULL value, to see a failed init clear it. */
    ps_backend *b = (ps_backend *)&cfg;
    float x[13 * (MAX_BATCH + 1)] = {0}, loss;
    uint8_t y[MAX_BATCH + 1] = {0};
    int correct;

    make_spec(&spec);
    cr_assert_eq(ps_backend_init(&b, &desc, &spec, &cfg), -EINVAL, "max_batch 0 must be refused");
    cr_assert_null(b);
    cfg.device = PS_DEVICE_AUTO;
    cr_assert_eq(ps_backend_init(&b, &desc, &spec, &cfg), -EINVAL, "also under --device auto");
    cr_assert_null(b);

    b = make_backend(PS_DEVICE_CPU, &spec);
    cr_assert_eq(ps_backend_train_step(b, x, y, 0, 0, &loss, &correct), -EINVAL);
    cr_assert_eq(ps_backend_train_step(b, x, y, MAX_BATCH + 1, 0, &loss, &correct), -EINVAL);
    cr_assert_eq(ps_backend_evaluate(b, x, y, 0, &loss, &correct), -EINVAL);
    /* Labels are checked on the host, before any device sees them. */
    y[3] = 5;
    cr_assert_eq(ps_backend_train_step(b, x, y, 4, 0, &loss, &correct), -EINVAL);
    cr_assert_eq(ps_backend_evaluate(b, x, y, 4, &loss, &correct), -EINVAL);
    cr_assert_eq(ps_backend_train_step(b, x, y, 3, 0, &loss, &correct), 0, "the rows before");
    ps_backend_free(b);
    ps_backend_free(NULL);
}

Test(backend, cuda_agrees_with_auto)
{
    ps_backend_config cfg = {.device = PS_DEVICE_CUDA, .max_batch = MAX_BATCH};
    ps_model_spec spec;
    /* b starts non-NULL, to see a refused init clear it. */
    ps_backend *autob, *b = (ps_backend *)&cfg;
    int rc;

    make_spec(&spec);
    autob = make_backend(PS_DEVICE_AUTO, &spec);
    rc = ps_backend_init(&b, &desc, &spec, &cfg);
    if (ps_backend_device(autob) == PS_DEVICE_CPU) {
        /* No usable GPU (or no CUDA in this build): auto says why, and
         * --device cuda is refused without a model. */
        cr_assert(strstr(ps_backend_describe(autob), "(--device auto: ") != NULL, "%s",
                  ps_backend_describe(autob));
        cr_assert_eq(rc, -ENODEV);
        cr_assert_null(b);
    } else {
        cr_assert_eq(rc, 0);
        cr_assert_eq(ps_backend_device(b), PS_DEVICE_CUDA);
        cr_assert(strncmp(ps_backend_describe(b), "cuda: ", 6) == 0, "%s", ps_backend_describe(b));
        ps_backend_free(b);
    }
    ps_backend_free(autob);
}

Test(backend, parses_precisions)
{
    ps_precision p;

    cr_assert_eq(ps_backend_parse_precision("fp32", &p), 0);
    cr_assert_eq(p, PS_PRECISION_FP32);
    cr_assert_eq(ps_backend_parse_precision("bf16", &p), 0);
    cr_assert_eq(p, PS_PRECISION_BF16);
    cr_assert_eq(ps_backend_parse_precision("fp16", &p), -EINVAL);
    cr_assert_eq(ps_backend_parse_precision("", &p), -EINVAL);
}

Test(backend, bf16_precision_needs_a_gpu)
{
    ps_backend_config cfg = {.device = PS_DEVICE_CPU, .max_batch = MAX_BATCH};
    ps_model_spec spec;
    ps_backend *b = (ps_backend *)&cfg, *autob;

    make_spec(&spec);
    cfg.precision = PS_PRECISION_BF16;
    cr_assert_eq(ps_backend_init(&b, &desc, &spec, &cfg), -EINVAL, "--device cpu");
    cr_assert_null(b);
    /* auto falls back to the CPU only where fp32 is asked for. */
    autob = make_backend(PS_DEVICE_AUTO, &spec);
    cfg.device = PS_DEVICE_AUTO;
    if (ps_backend_device(autob) == PS_DEVICE_CPU) {
        cr_assert_eq(ps_backend_init(&b, &desc, &spec, &cfg), -ENODEV, "--device auto, no GPU");
        cr_assert_null(b);
    }
    ps_backend_free(autob);
}

/* The layer callback's view: each tensor's norm when its layer is handed
 * over. */
static double seen_norm[PS_MAX_TENSORS];
static ps_backend *seen_backend;
static const ps_model_spec *seen_spec;

static void record_norms(void *arg, int first, int count)
{
    (void)arg;
    for (int t = first; t < first + count; t++) {
        double sq = 0;
        for (size_t i = 0; i < seen_spec->tensors[t].numel; i++)
            sq +=
                (double)ps_backend_grads(seen_backend, t)[i] * ps_backend_grads(seen_backend, t)[i];
        seen_norm[t] = sqrt(sq);
    }
}

Test(backend, cpu_clips_each_tensor_before_handing_it_over)
{
    ps_backend_config cfg = {.device = PS_DEVICE_CPU, .max_batch = MAX_BATCH};
    ps_model_spec spec;
    ps_backend *b;
    ps_model *m;
    float x[MAX_BATCH * 13], lb, lm;
    uint8_t y[MAX_BATCH];
    int cb, cm, clipped = 0;

    rng_state = 2;
    make_spec(&spec);
    cfg.clip_norm = 0.05;
    cr_assert_eq(ps_backend_init(&b, &desc, &spec, &cfg), 0);
    cr_assert_eq(ps_model_init(&m, &ps_backend_cpu_ops, NULL, &desc, &spec, MAX_BATCH, 0), 0);
    fill_random(x, sizeof(x) / sizeof(x[0]), 1.0);
    for (int i = 0; i < MAX_BATCH; i++)
        y[i] = (uint8_t)(rng_uniform() * 5);
    seen_backend = b, seen_spec = &spec;
    ps_backend_on_layer_grads(b, record_norms, NULL);
    cr_assert_eq(ps_backend_train_step(b, x, y, MAX_BATCH, 0, &lb, &cb), 0);
    cr_assert_eq(ps_model_train_step(m, x, y, MAX_BATCH, 0, &lm, &cm), 0);
    for (int t = 0; t < spec.n_tensors; t++) {
        size_t n = spec.tensors[t].numel;
        float *want = ps_model_grad(m, t);
        double before = 0;
        for (size_t i = 0; i < n; i++)
            before += (double)want[i] * want[i];
        clipped += sqrt(before) > 0.05;
        ps_clip_norm(n, want, 0.05f);
        cr_assert_eq(memcmp(ps_backend_grads(b, t), want, n * sizeof(float)), 0,
                     "%s: not ps_clip_norm of the unclipped gradient", spec.tensors[t].name);
        cr_assert_leq(seen_norm[t], 0.05 * (1 + 1e-6), "%s handed over unclipped",
                      spec.tensors[t].name);
    }
    cr_assert_gt(clipped, 1, "the bound must bite on some tensors");
    ps_model_free(m);
    ps_backend_free(b);
}

Test(backend, batch_buffers_hold_max_batch)
{
    ps_model_spec spec;
    ps_backend *b;
    float x[MAX_BATCH * 13], l1, l2;
    uint8_t y[MAX_BATCH];
    int c1, c2;

    rng_state = 3;
    make_spec(&spec);
    b = make_backend(PS_DEVICE_CPU, &spec);
    cr_assert_not_null(ps_backend_batch_x(b));
    cr_assert_not_null(ps_backend_batch_y(b));
    fill_random(x, sizeof(x) / sizeof(x[0]), 1.0);
    for (int i = 0; i < MAX_BATCH; i++)
        y[i] = (uint8_t)(rng_uniform() * 5);
    /* The whole of both is writable (ASan would see an overrun). */
    memcpy(ps_backend_batch_x(b), x, sizeof(x));
    memcpy(ps_backend_batch_y(b), y, sizeof(y));
    cr_assert_eq(ps_backend_train_step(b, x, y, MAX_BATCH, 0, &l1, &c1), 0);
    cr_assert_eq(ps_backend_train_step(b, ps_backend_batch_x(b), ps_backend_batch_y(b), MAX_BATCH,
                                       0, &l2, &c2),
                 0);
    cr_assert_eq(l1, l2);
    cr_assert_eq(c1, c2);
    ps_backend_free(b);
}

/* A table's entries as an array of pointers (every entry is one). */
#define N_OPS (sizeof(ps_model_ops) / sizeof(void (*)(void)))
static void entries(const ps_model_ops *o, void (*out[N_OPS])(void))
{
    memcpy(out, o, sizeof(*o));
}

#ifdef PS_HAVE_CUDA
Test(backend, cuda_table_is_complete_and_shares_nothing_with_the_cpu)
{
    void (*cuda[N_OPS])(void), (*cpu[N_OPS])(void);

    entries(&ps_backend_cuda_ops, cuda);
    entries(&ps_backend_cpu_ops, cpu);
    for (size_t i = 0; i < N_OPS; i++) {
        cr_assert_not_null(cuda[i], "CUDA entry %zu missing: a layer kind would not run", i);
        for (size_t j = 0; j < N_OPS; j++)
            cr_assert_neq(cuda[i], cpu[j], "CUDA entry %zu is the CPU's entry %zu", i, j);
    }
}
#endif

Test(backend, cpu_table_is_complete)
{
    void (*cpu[N_OPS])(void);

    _Static_assert(sizeof(ps_model_ops) % sizeof(void (*)(void)) == 0, "only pointers");
    entries(&ps_backend_cpu_ops, cpu);
    for (size_t i = 0; i < N_OPS; i++)
        cr_assert_not_null(cpu[i], "CPU entry %zu missing", i);
}
