/* Tests for model descriptions: models/mlp.model yields exactly the tensor
 * table of today's MLP (names, shapes, order, fingerprint, initial values bit
 * for bit), models/cnn.model yields the expected shapes, the canonical text
 * parses back to the same layers, and every mistake is refused with the file
 * and line. */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "model_desc.h"
#include "ps_error.h"

static const ps_act_shape mnist = {3, {1, 28, 28}};

static void load_resolve(const char *file, const ps_act_shape *in, int classes, uint64_t seed,
                         ps_model_desc *d, ps_model_spec *t)
{
    char path[512], err[256];

    snprintf(path, sizeof(path), "%s/models/%s", PS_SOURCE_DIR, file);
    cr_assert_eq(ps_model_desc_load(d, path, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(ps_model_desc_resolve(d, in, classes, seed, t, err, sizeof(err)), 0, "%s", err);
}

Test(model_desc, mlp_file_equals_model_spec_table)
{
    static const int sizes[] = {784, 256, 128, 10};
    ps_model_desc d;
    ps_model_spec want, got;

    cr_assert_eq(ps_model_spec_init_mlp(&want, sizes, 4, 7), 0);
    load_resolve("mlp.model", &mnist, 10, 7, &d, &got);
    cr_assert_eq(got.n_tensors, want.n_tensors);
    cr_assert_eq(got.total_numel, want.total_numel);
    cr_assert_eq(got.n_layers, want.n_layers);
    for (int i = 0; i <= want.n_layers; i++)
        cr_assert_eq(got.sizes[i], want.sizes[i]);
    for (int i = 0; i < want.n_tensors; i++) {
        const ps_tensor_spec *a = &got.tensors[i], *b = &want.tensors[i];
        float *va = malloc(a->numel * sizeof(float)), *vb = malloc(b->numel * sizeof(float));

        cr_assert_str_eq(a->name, b->name);
        cr_assert_eq(a->ndim, b->ndim, "%s", a->name);
        for (int k = 0; k < a->ndim; k++)
            cr_assert_eq(a->shape[k], b->shape[k], "%s dim %d", a->name, k);
        cr_assert_eq(a->rows, b->rows);
        cr_assert_eq(a->cols, b->cols);
        cr_assert_eq(a->numel, b->numel);
        cr_assert_eq(a->init, b->init, "%s", a->name);
        cr_assert_eq(a->fan_in, b->fan_in);
        cr_assert_eq(a->fan_out, b->fan_out);
        cr_assert(va && vb);
        ps_model_spec_init_values(&got, i, 0, a->numel, va);
        ps_model_spec_init_values(&want, i, 0, b->numel, vb);
        cr_assert_eq(memcmp(va, vb, a->numel * sizeof(float)), 0, "%s values differ", a->name);
        free(vb);
        free(va);
    }
    cr_assert_eq(ps_model_spec_fingerprint(&got), ps_model_spec_fingerprint(&want));
    /* A flat input of 784 features gives the same table. */
    ps_act_shape flat = {1, {784, 0, 0}};
    ps_model_spec again;
    load_resolve("mlp.model", &flat, 10, 7, &d, &again);
    cr_assert_eq(ps_model_spec_fingerprint(&again), ps_model_spec_fingerprint(&want));
    ps_model_spec_free(&again);
    ps_model_spec_free(&got);
    ps_model_spec_free(&want);
}

Test(model_desc, cnn_file_shapes)
{
    static const struct {
        const char *name;
        int ndim, shape[4];
        ps_init_kind init;
        int fan_in, fan_out;
    } want[] = {
        {"conv1.weight", 4, {32, 1, 3, 3}, PS_INIT_HE_UNIFORM, 9, 288},
        {"conv1.bias", 1, {32}, PS_INIT_ZERO, 9, 288},
        {"conv2.weight", 4, {64, 32, 3, 3}, PS_INIT_HE_UNIFORM, 288, 576},
        {"conv2.bias", 1, {64}, PS_INIT_ZERO, 288, 576},
        {"fc1.weight", 2, {128, 3136}, PS_INIT_HE_UNIFORM, 3136, 128},
        {"fc1.bias", 1, {128}, PS_INIT_ZERO, 3136, 128},
        {"fc2.weight", 2, {10, 128}, PS_INIT_XAVIER_UNIFORM, 128, 10},
        {"fc2.bias", 1, {10}, PS_INIT_ZERO, 128, 10},
    };
    static const int out_c[] = {32, 32, 32, 64, 64, 64}, out_hw[] = {28, 28, 14, 14, 14, 7};
    ps_model_desc d;
    ps_model_spec t;
    ps_model_spec mlp;

    load_resolve("cnn.model", &mnist, 10, 1, &d, &t);
    cr_assert_eq(d.n_layers, 11);
    cr_assert_eq(t.n_tensors, 8);
    cr_assert_eq(t.n_layers, 0, "a CNN has no MLP view");
    for (int i = 0; i < 8; i++) {
        cr_assert_str_eq(t.tensors[i].name, want[i].name);
        cr_assert_eq(t.tensors[i].ndim, want[i].ndim);
        for (int k = 0; k < want[i].ndim; k++)
            cr_assert_eq(t.tensors[i].shape[k], want[i].shape[k], "%s", want[i].name);
        cr_assert_eq(t.tensors[i].init, want[i].init, "%s", want[i].name);
        cr_assert_eq(t.tensors[i].fan_in, want[i].fan_in, "%s", want[i].name);
        cr_assert_eq(t.tensors[i].fan_out, want[i].fan_out, "%s", want[i].name);
    }
    cr_assert_eq(t.tensors[0].rows, 32);
    cr_assert_eq(t.tensors[0].cols, 9);
    for (int i = 0; i < 6; i++) {
        cr_assert_eq(d.layers[i].out_shape.ndim, 3);
        cr_assert_eq(d.layers[i].out_shape.d[0], out_c[i], "layer %d", i);
        cr_assert_eq(d.layers[i].out_shape.d[1], out_hw[i], "layer %d", i);
        cr_assert_eq(d.layers[i].out_shape.d[2], out_hw[i], "layer %d", i);
    }
    cr_assert_eq(d.layers[6].out_shape.ndim, 1);
    cr_assert_eq(d.layers[6].out_shape.d[0], 3136);
    cr_assert_eq(d.layers[0].weight, 0);
    cr_assert_eq(d.layers[1].weight, -1);
    cr_assert_eq(d.layers[10].weight, 6);
    cr_assert_float_eq(d.layers[9].p, 0.25f, 0);
    cr_assert_eq(d.classes, 10);
    cr_assert(d.resolved);

    /* The fingerprint tells the models, seeds and class counts apart. */
    ps_model_desc d2;
    ps_model_spec t2;
    load_resolve("mlp.model", &mnist, 10, 1, &d2, &mlp);
    cr_assert_neq(ps_model_spec_fingerprint(&t), ps_model_spec_fingerprint(&mlp));
    load_resolve("cnn.model", &mnist, 10, 2, &d2, &t2);
    cr_assert_neq(ps_model_spec_fingerprint(&t), ps_model_spec_fingerprint(&t2));
    ps_model_spec_free(&t2);
    load_resolve("cnn.model", &mnist, 11, 1, &d2, &t2);
    cr_assert_neq(ps_model_spec_fingerprint(&t), ps_model_spec_fingerprint(&t2));
    ps_model_spec_free(&t2);
    load_resolve("cnn.model", &mnist, 10, 1, &d2, &t2);
    cr_assert_eq(ps_model_spec_fingerprint(&t), ps_model_spec_fingerprint(&t2));
    ps_model_spec_free(&t2);
    ps_model_spec_free(&mlp);
    ps_model_spec_free(&t);
}

Test(model_desc, defaults_comments_and_format_round_trip)
{
    const char *text = "  # a comment line\n"
                       "\n"
                       "conv2d kernel=5 out=8   # stride 1, pad 0\n"
                       "maxpool kernel=3\t\n"
                       "dropout p=0.1\r\n"
                       "flatten\n"
                       "dense out=classes";
    ps_model_desc d, back;
    char err[256], buf[1024];
    size_t need;

    cr_assert_eq(ps_model_desc_parse(&d, text, "inline", err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(d.n_layers, 5);
    cr_assert_eq(d.layers[0].kind, PS_LAYER_CONV2D);
    cr_assert_eq(d.layers[0].line, 3);
    cr_assert_eq(d.layers[0].stride, 1);
    cr_assert_eq(d.layers[0].pad, 0);
    cr_assert_eq(d.layers[1].stride, 3, "a pool's stride defaults to its kernel");
    cr_assert_eq(d.layers[4].out, PS_DESC_CLASSES);

    need = ps_model_desc_format(&d, NULL, 0);
    cr_assert_lt(need, sizeof(buf));
    cr_assert_eq(ps_model_desc_format(&d, buf, sizeof(buf)), need);
    cr_assert_str_eq(buf, "conv2d out=8 kernel=5 stride=1 pad=0\n"
                          "maxpool kernel=3 stride=3\n"
                          "dropout p=0.100000001\n"
                          "flatten\n"
                          "dense out=classes\n");
    cr_assert_eq(ps_model_desc_parse(&back, buf, "formatted", err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(back.n_layers, d.n_layers);
    for (int i = 0; i < d.n_layers; i++) {
        cr_assert_eq(back.layers[i].kind, d.layers[i].kind);
        cr_assert_eq(back.layers[i].out, d.layers[i].out);
        cr_assert_eq(back.layers[i].kernel, d.layers[i].kernel);
        cr_assert_eq(back.layers[i].stride, d.layers[i].stride);
        cr_assert_eq(back.layers[i].pad, d.layers[i].pad);
        cr_assert_eq(back.layers[i].p, d.layers[i].p);
    }
    /* A short buffer gets a truncated, terminated prefix and the full length. */
    cr_assert_eq(ps_model_desc_format(&d, buf, 10), need);
    cr_assert_eq(strlen(buf), 9);
}

/* Text that ps_model_desc_parse refuses, and what the message must say. */
static const struct {
    const char *text, *msg;
} parse_bad[] = {
    {"dense out=10\nconv3d out=3\n", "t.model:2: unknown layer 'conv3d'"},
    {"dense size=10\n", "t.model:1: dense takes no key 'size'"},
    {"relu p=0.5\n", "t.model:1: relu takes no key 'p'"},
    {"dense out=10 out=12\n", "t.model:1: key 'out' given twice"},
    {"dense\n", "t.model:1: dense needs out="},
    {"conv2d out=4\n", "t.model:1: conv2d needs kernel="},
    {"maxpool stride=2\n", "t.model:1: maxpool needs kernel="},
    {"dropout\n", "t.model:1: dropout needs p="},
    {"dense out=0\n", "t.model:1: out=0: expected 1..1048576 or 'classes'"},
    {"dense out=-3\n", "out=-3"},
    {"dense out=12x\n", "out=12x"},
    {"dense out=1048577\n", "out=1048577"},
    {"dense out=\n", "expected key=value, got 'out='"},
    {"dense 10\n", "expected key=value, got '10'"},
    {"dense =10\n", "expected key=value"},
    {"conv2d out=classes kernel=3\n", "out=classes: expected 1..1048576"},
    {"conv2d out=4 kernel=0\n", "kernel=0: expected 1..1024"},
    {"conv2d out=4 kernel=3 stride=0\n", "stride=0"},
    {"conv2d out=4 kernel=3 pad=-1\n", "pad=-1: expected 0..1024"},
    {"dropout p=1\n", "p=1: expected a number in [0, 1)"},
    {"dropout p=-0.1\n", "p=-0.1"},
    {"dropout p=nan\n", "p=nan"},
    {"dropout p=0.5x\n", "p=0.5x"},
    {"# nothing\n\n", "t.model: no layers"},
    {"", "t.model: no layers"},
};

Test(model_desc, parse_refusals_name_file_and_line)
{
    for (size_t i = 0; i < sizeof(parse_bad) / sizeof(parse_bad[0]); i++) {
        ps_model_desc d;
        char err[256];

        cr_assert_eq(ps_model_desc_parse(&d, parse_bad[i].text, "t.model", err, sizeof(err)),
                     -PS_EFORMAT, "accepted: %s", parse_bad[i].text);
        cr_assert_not_null(strstr(err, parse_bad[i].msg), "text %s: got \"%s\", want \"%s\"",
                           parse_bad[i].text, err, parse_bad[i].msg);
    }
}

Test(model_desc, too_many_layers_and_long_lines)
{
    size_t n = (PS_DESC_MAX_LAYERS + 1) * 5 + 1;
    char *text = calloc(1, n > 2048 ? n : 2048), err[256];
    ps_model_desc d;

    cr_assert_not_null(text);
    for (int i = 0; i < PS_DESC_MAX_LAYERS; i++)
        strcat(text, "relu\n");
    strcat(text, "# still fine\n\n");
    cr_assert_eq(ps_model_desc_parse(&d, text, "t", err, sizeof(err)), 0, "%s", err);
    strcat(text, "relu\n");
    cr_assert_eq(ps_model_desc_parse(&d, text, "t", err, sizeof(err)), -PS_EFORMAT);
    cr_assert_not_null(strstr(err, "t:67: more than 64 layers"), "%s", err);

    memset(text, 'x', 1500);
    text[1500] = '\0';
    cr_assert_eq(ps_model_desc_parse(&d, text, "t", err, sizeof(err)), -PS_EFORMAT);
    cr_assert_not_null(strstr(err, "t:1: line longer than 1023 bytes"), "%s", err);
    free(text);
}

/* Models that parse but do not fit the data (1x28x28, 10 classes). */
static const struct {
    const char *text, *msg;
} resolve_bad[] = {
    {"dense out=10\n", "t.model:1: dense needs flat input but gets 1x28x28; put flatten"},
    {"flatten\nconv2d out=4 kernel=3\ndense out=10\n",
     "t.model:2: conv2d needs channels x height x width input but gets 784 flat values"},
    {"conv2d out=4 kernel=29\nflatten\ndense out=10\n",
     "t.model:1: conv2d kernel 29 (pad 0) does not fit its 1x28x28 input"},
    {"conv2d out=4 kernel=31 pad=1\nflatten\ndense out=10\n", "kernel 31 (pad 1) does not fit"},
    {"maxpool kernel=2\nmaxpool kernel=2\nmaxpool kernel=2\nmaxpool kernel=2\nmaxpool "
     "kernel=2\nflatten\ndense out=10\n",
     "t.model:5: maxpool kernel 2 (pad 0) does not fit its 1x1x1 input"},
    {"flatten\ndense out=10\nrelu\n",
     "t.model:3: the model must end with a dense layer producing the class scores"},
    {"flatten\ndense out=12\n",
     "t.model:2: the last dense layer produces 12 scores but the data has 10 classes"},
    {"conv2d out=1048576 kernel=1 pad=10\nflatten\ndense out=10\n",
     "t.model:1: conv2d output 1048576x48x48 exceeds"},
};

Test(model_desc, resolve_refusals_name_file_and_line)
{
    for (size_t i = 0; i < sizeof(resolve_bad) / sizeof(resolve_bad[0]); i++) {
        ps_model_desc d;
        ps_model_spec t;
        char err[256];

        cr_assert_eq(ps_model_desc_parse(&d, resolve_bad[i].text, "t.model", err, sizeof(err)), 0,
                     "%s", err);
        cr_assert_eq(ps_model_desc_resolve(&d, &mnist, 10, 1, &t, err, sizeof(err)), -PS_EFORMAT,
                     "accepted: %s", resolve_bad[i].text);
        cr_assert_not_null(strstr(err, resolve_bad[i].msg), "text %s: got \"%s\", want \"%s\"",
                           resolve_bad[i].text, err, resolve_bad[i].msg);
        cr_assert_not(d.resolved);
    }
}

Test(model_desc, resolve_refuses_bad_data_and_too_many_weighted_layers)
{
    ps_model_desc d;
    ps_model_spec t;
    ps_act_shape two_d = {2, {28, 28, 0}}, empty = {3, {1, 0, 28}};
    char err[256], text[2048] = "flatten\n";

    cr_assert_eq(ps_model_desc_parse(&d, "flatten\ndense out=classes\n", "t", err, sizeof(err)), 0);
    cr_assert_eq(ps_model_desc_resolve(&d, &mnist, 1, 1, &t, err, sizeof(err)), -PS_EFORMAT);
    cr_assert_not_null(strstr(err, "t: the data has 1 classes; 2..256 are supported"), "%s", err);
    cr_assert_eq(ps_model_desc_resolve(&d, &mnist, 257, 1, &t, err, sizeof(err)), -PS_EFORMAT);
    cr_assert_eq(ps_model_desc_resolve(&d, &two_d, 10, 1, &t, err, sizeof(err)), -PS_EFORMAT);
    cr_assert_eq(ps_model_desc_resolve(&d, &empty, 10, 1, &t, err, sizeof(err)), -PS_EFORMAT);
    cr_assert_eq(ps_model_desc_resolve(&d, &mnist, 256, 1, &t, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(t.tensors[0].shape[0], 256);
    ps_model_spec_free(&t);

    for (int i = 0; i < PS_MAX_LAYERS; i++)
        strcat(text, "dense out=4\n");
    strcat(text, "dense out=classes\n");
    cr_assert_eq(ps_model_desc_parse(&d, text, "t", err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(ps_model_desc_resolve(&d, &mnist, 4, 1, &t, err, sizeof(err)), -PS_EFORMAT);
    cr_assert_not_null(strstr(err, "t:18: dense weights exceed 2^31 values, or the model has more "
                                   "than 16 layers with weights"),
                       "%s", err);
}

Test(model_desc, load_errors_name_the_file)
{
    ps_model_desc d;
    char err[256];

    char path[] = "/tmp/test_model_desc.XXXXXX";
    int fd = mkstemp(path);

    cr_assert_eq(ps_model_desc_load(&d, "/nonexistent/x.model", err, sizeof(err)), -ENOENT);
    cr_assert_not_null(strstr(err, "/nonexistent/x.model: cannot open"), "%s", err);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, "relu\0dense out=3\n", 17), 17);
    close(fd);
    cr_assert_eq(ps_model_desc_load(&d, path, err, sizeof(err)), -PS_EFORMAT);
    cr_assert_not_null(strstr(err, ": not a text file (NUL byte)"), "%s", err);
    cr_assert_not_null(strstr(err, path), "%s", err);
    unlink(path);
}
