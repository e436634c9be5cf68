/* Model description: the text parser, shape inference and the tensor table.
 *
 * Parsing is line by line with a table of layer kinds and the keys each one
 * takes, so a new layer kind is one row plus its shape rule. Everything the
 * text can get wrong is refused here with the line it is on, before any
 * process starts training. */
#include "model_desc.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps_error.h"

#define PS__MAX_LINE      1024
#define PS__DESC_MAX_FILE (1 << 20)
#define PS__MAX_OUT       (1 << 20)
#define PS__MAX_KERNEL    1024
#define PS__MAX_ACT       (1 << 30)
#define PS__MAX_CLASSES   256
#define PS__MAX_KEYS      4
#define PS__KEY_OUT       0x1
#define PS__KEY_KERNEL    0x2
#define PS__KEY_STRIDE    0x4
#define PS__KEY_PAD       0x8
#define PS__KEY_P         0x10

/* One row per layer kind: its name in the file, the keys it accepts and the
 * keys it requires. */
static const struct {
    const char *name;
    ps_layer_kind kind;
    unsigned keys, required;
} ps__desc_kinds[] = {
    {"dense", PS_LAYER_DENSE, PS__KEY_OUT, PS__KEY_OUT},
    {"conv2d", PS_LAYER_CONV2D, PS__KEY_OUT | PS__KEY_KERNEL | PS__KEY_STRIDE | PS__KEY_PAD,
     PS__KEY_OUT | PS__KEY_KERNEL},
    {"maxpool", PS_LAYER_MAXPOOL, PS__KEY_KERNEL | PS__KEY_STRIDE, PS__KEY_KERNEL},
    {"relu", PS_LAYER_RELU, 0, 0},
    {"dropout", PS_LAYER_DROPOUT, PS__KEY_P, PS__KEY_P},
    {"flatten", PS_LAYER_FLATTEN, 0, 0},
};

static const struct {
    const char *name;
    unsigned bit;
} ps__keys[] = {
    {"out", PS__KEY_OUT}, {"kernel", PS__KEY_KERNEL}, {"stride", PS__KEY_STRIDE},
    {"pad", PS__KEY_PAD}, {"p", PS__KEY_P},
};

static int ps__desc_fail(char *err, size_t errlen, const char *source, int line, const char *fmt,
                         ...) __attribute__((format(printf, 5, 6)));

static int ps__desc_fail(char *err, size_t errlen, const char *source, int line, const char *fmt,
                         ...)
{
    va_list ap;
    int n;

    if (errlen == 0)
        return -PS_EFORMAT;
    n = line > 0 ? snprintf(err, errlen, "%s:%d: ", source, line)
                 : snprintf(err, errlen, "%s: ", source);
    if (n >= 0 && (size_t)n < errlen) {
        va_start(ap, fmt);
        vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return -PS_EFORMAT;
}

static const char *ps__kind_name(ps_layer_kind kind)
{
    for (size_t i = 0; i < sizeof(ps__desc_kinds) / sizeof(ps__desc_kinds[0]); i++)
        if (ps__desc_kinds[i].kind == kind)
            return ps__desc_kinds[i].name;
    return "?";
}

/* Parses a whole decimal integer in [lo, hi]. */
static int ps__int(const char *v, long lo, long hi, int *out)
{
    char *end;
    long x;

    if (*v < '0' || *v > '9')
        return -1;
    errno = 0;
    x = strtol(v, &end, 10);
    if (errno || *end || x < lo || x > hi)
        return -1;
    *out = (int)x;
    return 0;
}

/* Applies one key=value to layer l, whose kind accepts the keys in allowed.
 * seen collects the keys given so far, to refuse repeats. */
static int ps__set_key(ps_layer *l, char *tok, unsigned allowed, unsigned *seen, const char *src,
                       char *err, size_t errlen)
{
    char *eq = strchr(tok, '='), *val;
    unsigned bit = 0;

    if (!eq || eq == tok || !eq[1])
        return ps__desc_fail(err, errlen, src, l->line, "expected key=value, got '%s'", tok);
    *eq = '\0';
    val = eq + 1;
    for (size_t i = 0; i < sizeof(ps__keys) / sizeof(ps__keys[0]); i++)
        if (strcmp(tok, ps__keys[i].name) == 0)
            bit = ps__keys[i].bit;
    if (!(bit & allowed))
        return ps__desc_fail(err, errlen, src, l->line, "%s takes no key '%s'",
                             ps__kind_name(l->kind), tok);
    if (*seen & bit)
        return ps__desc_fail(err, errlen, src, l->line, "key '%s' given twice", tok);
    *seen |= bit;
    switch (bit) {
    case PS__KEY_OUT:
        if (l->kind == PS_LAYER_DENSE && strcmp(val, "classes") == 0) {
            l->out = PS_DESC_CLASSES;
            return 0;
        }
        if (ps__int(val, 1, PS__MAX_OUT, &l->out) == 0)
            return 0;
        return ps__desc_fail(err, errlen, src, l->line, "out=%s: expected 1..%d%s", val,
                             PS__MAX_OUT, l->kind == PS_LAYER_DENSE ? " or 'classes'" : "");
    case PS__KEY_KERNEL:
        if (ps__int(val, 1, PS__MAX_KERNEL, &l->kernel) == 0)
            return 0;
        return ps__desc_fail(err, errlen, src, l->line, "kernel=%s: expected 1..%d", val,
                             PS__MAX_KERNEL);
    case PS__KEY_STRIDE:
        if (ps__int(val, 1, PS__MAX_KERNEL, &l->stride) == 0)
            return 0;
        return ps__desc_fail(err, errlen, src, l->line, "stride=%s: expected 1..%d", val,
                             PS__MAX_KERNEL);
    case PS__KEY_PAD:
        if (ps__int(val, 0, PS__MAX_KERNEL, &l->pad) == 0)
            return 0;
        return ps__desc_fail(err, errlen, src, l->line, "pad=%s: expected 0..%d", val,
                             PS__MAX_KERNEL);
    default: {
        char *end;
        float p;

        errno = 0;
        p = strtof(val, &end);
        if (errno || *end || end == val || !(p >= 0.0f && p < 1.0f))
            return ps__desc_fail(err, errlen, src, l->line, "p=%s: expected a number in [0, 1)",
                                 val);
        l->p = p;
        return 0;
    }
    }
}

/* Parses one line (comment already cut, NUL-terminated, writable). Sets
 * *empty for a line with no layer. */
static int ps__parse_line(ps_layer *l, char *line, int lineno, int *empty, const char *src,
                          char *err, size_t errlen)
{
    static const char *const ws = " \t\r\v\f";
    char *save = NULL, *tok = strtok_r(line, ws, &save);
    unsigned seen = 0, keys = 0, required = 0;
    int found = 0, rc;

    *empty = tok == NULL;
    if (!tok)
        return 0;
    memset(l, 0, sizeof(*l));
    l->line = lineno;
    l->weight = -1;
    for (size_t i = 0; i < sizeof(ps__desc_kinds) / sizeof(ps__desc_kinds[0]); i++)
        if (strcmp(tok, ps__desc_kinds[i].name) == 0) {
            l->kind = ps__desc_kinds[i].kind;
            keys = ps__desc_kinds[i].keys;
            required = ps__desc_kinds[i].required;
            found = 1;
        }
    if (!found)
        return ps__desc_fail(err, errlen, src, lineno,
                             "unknown layer '%s' (known: dense, conv2d, maxpool, relu, dropout, "
                             "flatten)",
                             tok);
    while ((tok = strtok_r(NULL, ws, &save)) != NULL) {
        rc = ps__set_key(l, tok, keys, &seen, src, err, errlen);
        if (rc)
            return rc;
    }
    for (size_t i = 0; i < sizeof(ps__keys) / sizeof(ps__keys[0]); i++)
        if ((required & ps__keys[i].bit) && !(seen & ps__keys[i].bit))
            return ps__desc_fail(err, errlen, src, lineno, "%s needs %s=", ps__kind_name(l->kind),
                                 ps__keys[i].name);
    /* Defaults: a conv slides by 1, a pool tiles its input. */
    if (!(seen & PS__KEY_STRIDE))
        l->stride = l->kind == PS_LAYER_MAXPOOL ? l->kernel : 1;
    return 0;
}

int ps_model_desc_parse(ps_model_desc *desc, const char *text, const char *source, char *err,
                        size_t errlen)
{
    char line[PS__MAX_LINE];
    const char *p = text;
    int lineno = 0;

    memset(desc, 0, sizeof(*desc));
    if (errlen)
        err[0] = '\0';
    snprintf(desc->source, sizeof(desc->source), "%s", source);
    while (*p) {
        const char *nl = strchr(p, '\n');
        size_t len = nl ? (size_t)(nl - p) : strlen(p);
        char *hash;
        int empty, rc;

        lineno++;
        if (len >= sizeof(line))
            return ps__desc_fail(err, errlen, desc->source, lineno, "line longer than %d bytes",
                                 PS__MAX_LINE - 1);
        memcpy(line, p, len);
        line[len] = '\0';
        hash = strchr(line, '#');
        if (hash)
            *hash = '\0';
        p += len + (nl != NULL);
        if (desc->n_layers == PS_DESC_MAX_LAYERS) {
            ps_layer spare;
            rc = ps__parse_line(&spare, line, lineno, &empty, desc->source, err, errlen);
            if (rc)
                return rc;
            if (empty)
                continue;
            return ps__desc_fail(err, errlen, desc->source, lineno, "more than %d layers",
                                 PS_DESC_MAX_LAYERS);
        }
        rc = ps__parse_line(&desc->layers[desc->n_layers], line, lineno, &empty, desc->source, err,
                            errlen);
        if (rc)
            return rc;
        desc->n_layers += !empty;
    }
    if (desc->n_layers == 0)
        return ps__desc_fail(err, errlen, desc->source, 0, "no layers");
    return 0;
}

int ps_model_desc_mlp(ps_model_desc *desc, const int *hidden, int n_hidden, const char *source,
                      char *err, size_t errlen)
{
    /* "dense out=1048576\nrelu\n" is 23 bytes; a larger size is refused by
     * the parser all the same. */
    char text[16 + PS_MAX_LAYERS * 32];
    size_t len = (size_t)snprintf(text, sizeof(text), "flatten\n");

    if (n_hidden < 0 || n_hidden > PS_MAX_LAYERS - 1)
        return ps__desc_fail(err, errlen, source, 0, "%d hidden layers (at most %d)", n_hidden,
                             PS_MAX_LAYERS - 1);
    for (int i = 0; i < n_hidden; i++)
        len += (size_t)snprintf(text + len, sizeof(text) - len, "dense out=%d\nrelu\n",
                                hidden[i] > 0 && hidden[i] <= PS__MAX_OUT ? hidden[i] : 0);
    snprintf(text + len, sizeof(text) - len, "dense out=classes\n");
    return ps_model_desc_parse(desc, text, source, err, errlen);
}

int ps_model_desc_load(ps_model_desc *desc, const char *path, char *err, size_t errlen)
{
    FILE *f = fopen(path, "rb");
    char *text = NULL;
    size_t got;
    int rc;

    memset(desc, 0, sizeof(*desc));
    if (!f) {
        rc = -errno;
        ps__desc_fail(err, errlen, path, 0, "cannot open: %s", strerror(-rc));
        return rc;
    }
    rc = -ENOMEM;
    text = malloc(PS__DESC_MAX_FILE + 1);
    if (!text) {
        ps__desc_fail(err, errlen, path, 0, "out of memory");
        goto fail;
    }
    got = fread(text, 1, PS__DESC_MAX_FILE + 1, f);
    if (ferror(f)) {
        rc = -EIO;
        ps__desc_fail(err, errlen, path, 0, "read failed");
        goto fail;
    }
    if (got > PS__DESC_MAX_FILE) {
        rc = ps__desc_fail(err, errlen, path, 0, "larger than %d bytes", PS__DESC_MAX_FILE);
        goto fail;
    }
    text[got] = '\0';
    if (memchr(text, '\0', got)) {
        rc = ps__desc_fail(err, errlen, path, 0, "not a text file (NUL byte)");
        goto fail;
    }
    rc = ps_model_desc_parse(desc, text, path, err, errlen);
fail:
    free(text);
    fclose(f);
    return rc;
}

const char *ps_act_shape_str(const ps_act_shape *s, char *out, size_t len)
{
    if (s->ndim == 3)
        snprintf(out, len, "%dx%dx%d", s->d[0], s->d[1], s->d[2]);
    else
        snprintf(out, len, "%d", s->d[0]);
    return out;
}

/* Values per sample, or PS__MAX_ACT + 1 for anything larger: dimensions
 * may each be up to 2^31-1 (a model file's input), so a product taken whole
 * would overflow even a long long. */
static long long ps__numel(const ps_act_shape *s)
{
    long long n = 1;

    for (int i = 0; i < (s->ndim == 3 ? 3 : 1); i++) {
        n *= s->d[i];
        if (n > PS__MAX_ACT)
            return PS__MAX_ACT + 1LL;
    }
    return n;
}

/* The output side of a window of size k with stride and pad over n inputs,
 * or 0 when the window does not fit. */
static int ps__window(int n, int k, int stride, int pad)
{
    long long span = (long long)n + 2LL * pad - k;

    return span < 0 ? 0 : (int)(span / stride + 1);
}

/* Infers l's output shape from its input; 0 or a message. */
static int ps__infer(ps_layer *l, int classes, const char *src, char *err, size_t errlen)
{
    const ps_act_shape *in = &l->in_shape;
    ps_act_shape *out = &l->out_shape;
    const char *kind = ps__kind_name(l->kind);
    char buf[48];

    *out = *in;
    switch (l->kind) {
    case PS_LAYER_DENSE:
        if (in->ndim != 1)
            return ps__desc_fail(err, errlen, src, l->line,
                                 "dense needs flat input but gets %s; put flatten before it",
                                 ps_act_shape_str(in, buf, sizeof(buf)));
        out->d[0] = l->out == PS_DESC_CLASSES ? classes : l->out;
        return 0;
    case PS_LAYER_CONV2D:
    case PS_LAYER_MAXPOOL: {
        int pad = l->kind == PS_LAYER_CONV2D ? l->pad : 0;

        if (in->ndim != 3)
            return ps__desc_fail(err, errlen, src, l->line,
                                 "%s needs channels x height x width input but gets %d flat values",
                                 kind, in->d[0]);
        out->d[1] = ps__window(in->d[1], l->kernel, l->stride, pad);
        out->d[2] = ps__window(in->d[2], l->kernel, l->stride, pad);
        if (out->d[1] < 1 || out->d[2] < 1)
            return ps__desc_fail(err, errlen, src, l->line,
                                 "%s kernel %d (pad %d) does not fit its %s input", kind, l->kernel,
                                 pad, ps_act_shape_str(in, buf, sizeof(buf)));
        if (l->kind == PS_LAYER_CONV2D)
            out->d[0] = l->out;
        break;
    }
    case PS_LAYER_FLATTEN:
        out->ndim = 1;
        out->d[0] = (int)ps__numel(in);
        out->d[1] = out->d[2] = 0;
        break;
    default:
        break;
    }
    if (ps__numel(out) > PS__MAX_ACT)
        return ps__desc_fail(err, errlen, src, l->line, "%s output %s exceeds %d values per sample",
                             kind, ps_act_shape_str(out, buf, sizeof(buf)), PS__MAX_ACT);
    return 0;
}

/* Adds layer l's weight and bias to the table, named prefix<number>. */
static int ps__add_params(ps_layer *l, int last, int number, ps_model_spec *table, const char *src,
                          char *err, size_t errlen)
{
    const char *prefix = l->kind == PS_LAYER_CONV2D ? "conv" : "fc";
    int in = l->in_shape.d[0], out = l->out_shape.d[0], k = l->kernel, rc;
    int wshape[4] = {out, in, k, k}, ndim = l->kind == PS_LAYER_CONV2D ? 4 : 2;
    long long fan_in = l->kind == PS_LAYER_CONV2D ? (long long)in * k * k : in;
    long long fan_out = l->kind == PS_LAYER_CONV2D ? (long long)out * k * k : out;
    char name[32];

    if (fan_in > PS__MAX_ACT || fan_out > PS__MAX_ACT)
        return ps__desc_fail(err, errlen, src, l->line, "%s has too many weights",
                             ps__kind_name(l->kind));
    l->weight = table->n_tensors;
    snprintf(name, sizeof(name), "%s%d.weight", prefix, number);
    /* A description's table is the C worker's (PS_MAX_MODEL_TENSORS), far
     * below what a job's may hold. */
    rc = table->n_tensors + 2 > PS_MAX_MODEL_TENSORS
             ? -E2BIG
             : ps_model_spec_add_tensor(table, name, ndim, wshape,
                                        last ? PS_INIT_XAVIER_UNIFORM : PS_INIT_HE_UNIFORM,
                                        (int)fan_in, (int)fan_out);
    if (rc == 0) {
        snprintf(name, sizeof(name), "%s%d.bias", prefix, number);
        rc =
            ps_model_spec_add_tensor(table, name, 1, &out, PS_INIT_ZERO, (int)fan_in, (int)fan_out);
    }
    if (rc == -E2BIG)
        return ps__desc_fail(err, errlen, src, l->line,
                             "%s weights exceed 2^31 values, or the model has more than %d layers "
                             "with weights",
                             ps__kind_name(l->kind), PS_MAX_LAYERS);
    return rc ? ps__desc_fail(err, errlen, src, l->line, "cannot add its tensors") : 0;
}

/* Fills the table's MLP view when the layers are [flatten] dense (relu dense)*. */
static void ps__mlp_view(const ps_model_desc *d, ps_model_spec *table)
{
    int first = d->layers[0].kind == PS_LAYER_FLATTEN, n = 0;

    if (d->input.ndim != 1 && !first)
        return;
    for (int i = first; i < d->n_layers; i++) {
        ps_layer_kind want = (i - first) % 2 == 0 ? PS_LAYER_DENSE : PS_LAYER_RELU;
        if (d->layers[i].kind != want)
            return;
    }
    if ((d->n_layers - first) % 2 == 0)
        return;
    table->sizes[n++] = d->layers[first].in_shape.d[0];
    for (int i = first; i < d->n_layers; i += 2)
        table->sizes[n++] = d->layers[i].out_shape.d[0];
    table->n_layers = n - 1;
}

int ps_model_desc_resolve(ps_model_desc *desc, const ps_act_shape *input, int classes,
                          uint64_t seed, ps_model_spec *table, char *err, size_t errlen)
{
    const char *src = desc->source;
    ps_act_shape cur;
    int last_dense = -1, n_conv = 0, n_fc = 0, rc;

    memset(table, 0, sizeof(*table));
    table->seed = seed;
    desc->resolved = 0;
    if (errlen)
        err[0] = '\0';
    if (!input || (input->ndim != 1 && input->ndim != 3))
        return ps__desc_fail(err, errlen, src, 0,
                             "the data's sample shape must be flat or C x H x W");
    for (int i = 0; i < input->ndim; i++)
        if (input->d[i] < 1)
            return ps__desc_fail(err, errlen, src, 0,
                                 "the data's sample shape has an empty dimension");
    if (ps__numel(input) > PS__MAX_ACT)
        return ps__desc_fail(err, errlen, src, 0, "the data's samples exceed %d values",
                             PS__MAX_ACT);
    if (classes < 2 || classes > PS__MAX_CLASSES)
        return ps__desc_fail(err, errlen, src, 0, "the data has %d classes; 2..%d are supported",
                             classes, PS__MAX_CLASSES);
    if (desc->n_layers < 1)
        return ps__desc_fail(err, errlen, src, 0, "no layers");

    cur = *input;
    for (int i = 0; i < desc->n_layers; i++) {
        ps_layer *l = &desc->layers[i];

        l->in_shape = cur;
        l->weight = -1;
        rc = ps__infer(l, classes, src, err, errlen);
        if (rc)
            return rc;
        cur = l->out_shape;
        if (l->kind == PS_LAYER_DENSE)
            last_dense = i;
    }
    if (last_dense != desc->n_layers - 1)
        return ps__desc_fail(err, errlen, src, desc->layers[desc->n_layers - 1].line,
                             "the model must end with a dense layer producing the class scores "
                             "(dense out=classes)");
    if (cur.d[0] != classes)
        return ps__desc_fail(err, errlen, src, desc->layers[last_dense].line,
                             "the last dense layer produces %d scores but the data has %d classes; "
                             "use out=classes",
                             cur.d[0], classes);
    for (int i = 0; i < desc->n_layers; i++) {
        ps_layer *l = &desc->layers[i];

        if (l->kind != PS_LAYER_DENSE && l->kind != PS_LAYER_CONV2D)
            continue;
        rc = ps__add_params(l, i == last_dense, l->kind == PS_LAYER_CONV2D ? ++n_conv : ++n_fc,
                            table, src, err, errlen);
        if (rc) {
            ps_model_spec_free(table);
            return rc;
        }
    }
    desc->input = *input;
    desc->classes = classes;
    desc->resolved = 1;
    ps__mlp_view(desc, table);
    return 0;
}

size_t ps_model_desc_format(const ps_model_desc *desc, char *out, size_t len)
{
    size_t n = 0;

    for (int i = 0; i < desc->n_layers; i++) {
        const ps_layer *l = &desc->layers[i];
        char *dst = n < len ? out + n : NULL;
        size_t room = n < len ? len - n : 0;
        int w;

        switch (l->kind) {
        case PS_LAYER_DENSE:
            if (l->out == PS_DESC_CLASSES)
                w = snprintf(dst, room, "dense out=classes\n");
            else
                w = snprintf(dst, room, "dense out=%d\n", l->out);
            break;
        case PS_LAYER_CONV2D:
            w = snprintf(dst, room, "conv2d out=%d kernel=%d stride=%d pad=%d\n", l->out, l->kernel,
                         l->stride, l->pad);
            break;
        case PS_LAYER_MAXPOOL:
            w = snprintf(dst, room, "maxpool kernel=%d stride=%d\n", l->kernel, l->stride);
            break;
        case PS_LAYER_DROPOUT:
            /* %.9g round-trips every float exactly. */
            w = snprintf(dst, room, "dropout p=%.9g\n", (double)l->p);
            break;
        default:
            w = snprintf(dst, room, "%s\n", ps__kind_name(l->kind));
            break;
        }
        n += w > 0 ? (size_t)w : 0;
    }
    return n;
}
