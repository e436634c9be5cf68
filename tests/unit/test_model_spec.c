/* Tests for the model spec: parsing of --hidden style size lists, the MLP's
 * tensor list, the fingerprint peers compare in the handshake, and initial
 * values, which must not depend on how a tensor is cut into chunks. */
#include <criterion/criterion.h>

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model_spec.h"

static const int default_sizes[] = {784, 256, 128, 10};

static ps_model_spec make_spec(const int *sizes, int n, uint64_t seed)
{
    ps_model_spec spec;
    cr_assert_eq(ps_model_spec_init_mlp(&spec, sizes, n, seed), 0);
    return spec;
}

static float *alloc_floats(size_t n)
{
    float *p = malloc(n * sizeof(float));
    cr_assert_not_null(p);
    return p;
}

Test(model_spec, parse_sizes_good)
{
    int sizes[4] = {0};

    cr_assert_eq(ps_model_spec_parse_sizes("256,128", sizes, 4), 2);
    cr_assert_eq(sizes[0], 256);
    cr_assert_eq(sizes[1], 128);
    cr_assert_eq(ps_model_spec_parse_sizes("", sizes, 4), 0);
    cr_assert_eq(ps_model_spec_parse_sizes("7", sizes, 4), 1);
    cr_assert_eq(sizes[0], 7);
    cr_assert_eq(ps_model_spec_parse_sizes("1,2,3,1048576", sizes, 4), 4);
    cr_assert_eq(sizes[3], 1 << 20);
    cr_assert_eq(ps_model_spec_parse_sizes("007", sizes, 4), 1);
    cr_assert_eq(sizes[0], 7);
}

Test(model_spec, parse_sizes_bad)
{
    static const char *const bad[] = {
        "0",   "1,,2", "a",    "-3",      "12x",
        ",1",  "1,",   " 1",   "1 ",      "+3",
        "1.5", "1;2",  "0x10", "1048577", "99999999999999999999",
        "1,0", ",",    "1,-2",
    };
    int sizes[4];

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        cr_assert_eq(ps_model_spec_parse_sizes(bad[i], sizes, 4), -EINVAL, "\"%s\"", bad[i]);
    /* More sizes than the caller has room for. */
    cr_assert_eq(ps_model_spec_parse_sizes("1,2,3", sizes, 2), -EINVAL);
    cr_assert_eq(ps_model_spec_parse_sizes("1", sizes, 0), -EINVAL);
}

Test(model_spec, init_mlp_shapes)
{
    ps_model_spec spec = make_spec(default_sizes, 4, 1);
    static const struct {
        const char *name;
        int rows, cols;
        ps_init_kind init;
    } want[] = {
        {"fc1.weight", 256, 784, PS_INIT_HE_UNIFORM},    {"fc1.bias", 256, 1, PS_INIT_ZERO},
        {"fc2.weight", 128, 256, PS_INIT_HE_UNIFORM},    {"fc2.bias", 128, 1, PS_INIT_ZERO},
        {"fc3.weight", 10, 128, PS_INIT_XAVIER_UNIFORM}, {"fc3.bias", 10, 1, PS_INIT_ZERO},
    };
    size_t total = 0;

    cr_assert_eq(spec.n_layers, 3);
    cr_assert_eq(spec.n_tensors, 6);
    cr_assert_eq(spec.seed, 1);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(spec.sizes[i], default_sizes[i]);
    for (int t = 0; t < 6; t++) {
        const ps_tensor_spec *ts = &spec.tensors[t];
        cr_assert_str_eq(ts->name, want[t].name);
        cr_assert_eq(ts->rows, want[t].rows, "%s", ts->name);
        cr_assert_eq(ts->cols, want[t].cols, "%s", ts->name);
        cr_assert_eq(ts->numel, (size_t)want[t].rows * (size_t)want[t].cols, "%s", ts->name);
        cr_assert_eq(ts->init, want[t].init, "%s", ts->name);
        cr_assert_eq(ts->fan_in, default_sizes[t / 2], "%s", ts->name);
        cr_assert_eq(ts->fan_out, default_sizes[t / 2 + 1], "%s", ts->name);
        total += ts->numel;
    }
    cr_assert_eq(spec.total_numel, total);
    cr_assert_eq(spec.total_numel, 784 * 256 + 256 + 256 * 128 + 128 + 128 * 10 + 10);
}

Test(model_spec, init_mlp_single_layer_is_xavier)
{
    static const int sizes[] = {5, 3};
    ps_model_spec spec = make_spec(sizes, 2, 0);

    cr_assert_eq(spec.n_tensors, 2);
    cr_assert_eq(spec.tensors[0].init, PS_INIT_XAVIER_UNIFORM);
    cr_assert_eq(spec.total_numel, 5 * 3 + 3);
}

Test(model_spec, init_mlp_bad)
{
    int sizes[PS_MAX_LAYERS + 2];
    ps_model_spec spec;

    for (int i = 0; i < PS_MAX_LAYERS + 2; i++)
        sizes[i] = 4;
    cr_assert_eq(ps_model_spec_init_mlp(&spec, sizes, 1, 0), -EINVAL);
    cr_assert_eq(ps_model_spec_init_mlp(&spec, sizes, 0, 0), -EINVAL);
    cr_assert_eq(ps_model_spec_init_mlp(&spec, sizes, PS_MAX_LAYERS + 2, 0), -EINVAL);
    cr_assert_eq(ps_model_spec_init_mlp(&spec, sizes, PS_MAX_LAYERS + 1, 0), 0);
    cr_assert_eq(spec.n_tensors, PS_MAX_MODEL_TENSORS);
    ps_model_spec_free(&spec);
    sizes[1] = 0;
    cr_assert_eq(ps_model_spec_init_mlp(&spec, sizes, 3, 0), -EINVAL);
    sizes[1] = -5;
    cr_assert_eq(ps_model_spec_init_mlp(&spec, sizes, 3, 0), -EINVAL);
    sizes[1] = (1 << 20) + 1;
    cr_assert_eq(ps_model_spec_init_mlp(&spec, sizes, 3, 0), -EINVAL);
}

static uint64_t fingerprint_of(const int *sizes, int n, uint64_t seed)
{
    ps_model_spec spec = make_spec(sizes, n, seed);
    return ps_model_spec_fingerprint(&spec);
}

Test(model_spec, fingerprint)
{
    static const int other_sizes[] = {784, 256, 64, 10};
    static const int shorter[] = {784, 256, 128};
    uint64_t fa = fingerprint_of(default_sizes, 4, 7);

    cr_assert_eq(fa, fingerprint_of(default_sizes, 4, 7));
    cr_assert_neq(fa, fingerprint_of(default_sizes, 4, 8));
    cr_assert_neq(fa, fingerprint_of(default_sizes, 4, 7ull << 56));
    cr_assert_neq(fa, fingerprint_of(other_sizes, 4, 7));
    cr_assert_neq(fa, fingerprint_of(shorter, 3, 7));
}

Test(model_spec, init_values_independent_of_chunking)
{
    ps_model_spec spec = make_spec(default_sizes, 4, 3);
    static const size_t pieces[] = {1, 7, 64, 1000, 4096};

    for (int t = 0; t < spec.n_tensors; t++) {
        size_t numel = spec.tensors[t].numel;
        float *full = alloc_floats(numel), *part = alloc_floats(numel);

        ps_model_spec_init_values(&spec, t, 0, numel, full);
        for (size_t k = 0; k < sizeof(pieces) / sizeof(pieces[0]); k++) {
            for (size_t off = 0; off < numel; off += pieces[k]) {
                size_t n = numel - off < pieces[k] ? numel - off : pieces[k];
                ps_model_spec_init_values(&spec, t, off, n, part + off);
            }
            cr_assert_eq(memcmp(full, part, numel * sizeof(float)), 0, "tensor %d pieces %zu", t,
                         pieces[k]);
        }
        free(part);
        free(full);
    }
}

Test(model_spec, init_values_depend_on_seed_and_tensor)
{
    /* fc1.weight and fc2.weight share fan_in and so their bound: any
     * difference between them comes from the tensor id. */
    static const int sizes[] = {64, 64, 64};
    ps_model_spec a = make_spec(sizes, 3, 1), b = make_spec(sizes, 3, 2);
    float x[256], y[256], z[256];
    int same_seed = 0, same_tensor = 0;

    ps_model_spec_init_values(&a, 0, 0, 256, x);
    ps_model_spec_init_values(&b, 0, 0, 256, y);
    ps_model_spec_init_values(&a, 2, 0, 256, z);
    for (int i = 0; i < 256; i++) {
        same_seed += x[i] == y[i];
        same_tensor += x[i] == z[i];
    }
    cr_assert_lt(same_seed, 4);
    cr_assert_lt(same_tensor, 4);
}

Test(model_spec, bias_is_zero)
{
    ps_model_spec spec = make_spec(default_sizes, 4, 11);

    for (int t = 1; t < spec.n_tensors; t += 2) {
        size_t numel = spec.tensors[t].numel;
        float *v = alloc_floats(numel);

        memset(v, 0x7f, numel * sizeof(float));
        ps_model_spec_init_values(&spec, t, 0, numel, v);
        for (size_t i = 0; i < numel; i++)
            cr_assert_eq(v[i], 0.0f, "%s[%zu]", spec.tensors[t].name, i);
        free(v);
    }
}

Test(model_spec, weights_uniform_within_bound)
{
    ps_model_spec spec = make_spec(default_sizes, 4, 5);

    for (int t = 0; t < spec.n_tensors; t += 2) {
        const ps_tensor_spec *ts = &spec.tensors[t];
        double bound = ts->init == PS_INIT_HE_UNIFORM ? sqrt(6.0 / ts->fan_in)
                                                      : sqrt(6.0 / (ts->fan_in + ts->fan_out));
        float *v = alloc_floats(ts->numel);
        double sum = 0, sumsq = 0, lo = 0, hi = 0;

        ps_model_spec_init_values(&spec, t, 0, ts->numel, v);
        for (size_t i = 0; i < ts->numel; i++) {
            cr_assert_leq(fabs(v[i]), (float)bound, "%s[%zu] = %g", ts->name, i, v[i]);
            sum += v[i];
            sumsq += (double)v[i] * v[i];
            lo = v[i] < lo ? v[i] : lo;
            hi = v[i] > hi ? v[i] : hi;
        }
        /* Uniform(-b, b): mean 0 with standard error b / sqrt(3 n), variance
         * b^2 / 3. Five standard errors, and 10% on the variance, which
         * fc3.weight's 1280 samples meet comfortably. */
        double n = (double)ts->numel, mean = sum / n, var = sumsq / n - mean * mean;
        cr_assert_leq(fabs(mean), 5 * bound / sqrt(3 * n), "%s mean %g", ts->name, mean);
        cr_assert_leq(fabs(var / (bound * bound / 3) - 1), 0.1, "%s var %g", ts->name, var);
        cr_assert_lt(lo, -0.95 * bound, "%s min %g", ts->name, lo);
        cr_assert_gt(hi, 0.95 * bound, "%s max %g", ts->name, hi);
        free(v);
    }
}

Test(model_spec, add_tensor_shapes_and_limits)
{
    ps_model_spec spec;
    int conv[4] = {32, 3, 5, 5}, big[2] = {1 << 16, 1 << 15}, bad[2] = {4, 0};

    memset(&spec, 0, sizeof(spec));
    cr_assert_eq(
        ps_model_spec_add_tensor(&spec, "conv1.weight", 4, conv, PS_INIT_HE_UNIFORM, 75, 800), 0);
    cr_assert_eq(spec.tensors[0].ndim, 4);
    cr_assert_eq(spec.tensors[0].shape[3], 5);
    cr_assert_eq(spec.tensors[0].rows, 32);
    cr_assert_eq(spec.tensors[0].cols, 75);
    cr_assert_eq(spec.tensors[0].numel, 2400);
    cr_assert_eq(spec.total_numel, 2400);
    cr_assert_eq(ps_model_spec_add_tensor(&spec, "x", 2, big, PS_INIT_ZERO, 1, 1), -E2BIG);
    cr_assert_eq(ps_model_spec_add_tensor(&spec, "x", 2, bad, PS_INIT_ZERO, 1, 1), -EINVAL);
    cr_assert_eq(ps_model_spec_add_tensor(&spec, "", 1, conv, PS_INIT_ZERO, 1, 1), -EINVAL);
    cr_assert_eq(ps_model_spec_add_tensor(&spec, "x", 5, conv, PS_INIT_ZERO, 1, 1), -EINVAL);
    cr_assert_eq(ps_model_spec_add_tensor(&spec, "x", 1, conv, PS_INIT_ZERO, 0, 1), -EINVAL);
    {
        char name[PS_MAX_NAME_BYTES + 2];
        memset(name, 'n', sizeof(name) - 1);
        name[sizeof(name) - 1] = '\0';
        cr_assert_eq(ps_model_spec_add_tensor(&spec, name, 1, conv, PS_INIT_ZERO, 1, 1), -EINVAL,
                     "256 bytes");
        name[PS_MAX_NAME_BYTES] = '\0';
        cr_assert_eq(ps_model_spec_add_tensor(&spec, name, 1, conv, PS_INIT_ZERO, 1, 1), 0,
                     "255 bytes");
        cr_assert_eq(ps_model_spec_add_tensor(&spec, "a b", 1, conv, PS_INIT_ZERO, 1, 1), -EINVAL);
    }
    cr_assert_eq(spec.n_tensors, 2, "a refused tensor is not added");
    while (spec.n_tensors < PS_MAX_TENSORS)
        cr_assert_eq(ps_model_spec_add_tensor(&spec, "b", 1, conv, PS_INIT_ZERO, 1, 1), 0);
    cr_assert_eq(ps_model_spec_add_tensor(&spec, "b", 1, conv, PS_INIT_ZERO, 1, 1), -E2BIG);
    cr_assert_eq(ps_model_spec_duplicate(&spec), 3, "the second b");
    ps_model_spec_free(&spec);
}

/* The digest covers what a tensor is (kind, dtype), not only its shape: a
 * buffer and a parameter of the same shape are different tables. */
Test(model_spec, digest_covers_kind_and_dtype)
{
    int shape[1] = {4};
    ps_tensor_decl d = {"bn.running_mean", 1,           shape, PS_INIT_ZERO, 1, 1,
                        PS_KIND_PARAMETER, PS_DTYPE_F32};
    ps_model_spec a = {0}, b = {0}, c = {0};
    uint8_t da[PS_TABLE_DIGEST_BYTES], db[PS_TABLE_DIGEST_BYTES], dc[PS_TABLE_DIGEST_BYTES];

    cr_assert_eq(ps_model_spec_add(&a, &d), 0);
    d.kind = PS_KIND_BUFFER;
    cr_assert_eq(ps_model_spec_add(&b, &d), 0);
    d.dtype = PS_DTYPE_I64;
    cr_assert_eq(ps_model_spec_add(&c, &d), 0);
    cr_assert_eq(c.total_words, 8, "int64 values are two words each");
    ps_model_spec_digest(&a, da);
    ps_model_spec_digest(&b, db);
    ps_model_spec_digest(&c, dc);
    cr_assert_neq(memcmp(da, db, sizeof(da)), 0);
    cr_assert_neq(memcmp(db, dc, sizeof(db)), 0);
    /* A parameter is float32: the optimizer updates floats. */
    d.kind = PS_KIND_PARAMETER;
    cr_assert_eq(ps_model_spec_add(&a, &d), -EINVAL);
    ps_model_spec_free(&a);
    ps_model_spec_free(&b);
    ps_model_spec_free(&c);
}

Test(model_spec, mlp_tensors_have_shapes)
{
    ps_model_spec spec = make_spec(default_sizes, 4, 1);

    cr_assert_eq(spec.tensors[0].ndim, 2);
    cr_assert_eq(spec.tensors[0].shape[0], 256);
    cr_assert_eq(spec.tensors[0].shape[1], 784);
    cr_assert_eq(spec.tensors[1].ndim, 1);
    cr_assert_eq(spec.tensors[1].shape[0], 256);
}

/* Issue 22, cause 2: each fan may be anything up to 2^31-1 (the tensor table
 * accepts that from a HELLO or a checkpoint), so their sum must not be taken
 * in int: UBSan stopped the server, a Release build drew NaN weights. */
Test(model_spec, xavier_bound_with_the_largest_fans)
{
    ps_model_spec spec;
    int shape[1] = {64};
    float v[64];
    double bound = sqrt(6.0 / (2.0 * INT32_MAX));

    memset(&spec, 0, sizeof(spec));
    cr_assert_eq(ps_model_spec_add_tensor(&spec, "w", 1, shape, PS_INIT_XAVIER_UNIFORM, INT32_MAX,
                                          INT32_MAX),
                 0);
    ps_model_spec_init_values(&spec, 0, 0, 64, v);
    for (int i = 0; i < 64; i++) {
        cr_assert(isfinite(v[i]), "w[%d] = %g", i, v[i]);
        cr_assert_leq(fabs(v[i]), (float)bound, "w[%d] = %g", i, v[i]);
    }
}
