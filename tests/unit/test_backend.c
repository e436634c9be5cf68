/* Unit tests of the compute-backend interface (worker/backend.h) that need no
 * GPU: the CPU backend is ps_model seen through the interface (identical
 * results, bit for bit, and the host buffers are the model's), argument
 * checks, and device selection: --device names, --device auto falling back
 * to the CPU with a reason, and --device cuda agreeing with auto about
 * whether a GPU is usable (refused with -ENODEV where auto fell back). The
 * CUDA backend's numbers are tested in tests/cuda against these. */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "backend.h"
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
    ps_backend_config cfg = {device, MAX_BATCH, 0, 0, 0, 0};
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
    cr_assert_eq(ps_model_init(&m, &desc, &spec, MAX_BATCH, 0), 0);
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
    ps_backend_config cfg = {PS_DEVICE_CPU, 0, 0, 0, 0, 0};
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
    ps_backend_free(b);
    ps_backend_free(NULL);
}

Test(backend, cuda_agrees_with_auto)
{
    ps_backend_config cfg = {PS_DEVICE_CUDA, MAX_BATCH, 0, 0, 0, 0};
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
