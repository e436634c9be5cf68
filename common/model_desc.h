/* A model description: the layers of a network, read from a small text file,
 * and what follows from them once the data's shape is known.
 *
 * The file has one layer per line; `#` starts a comment, blank lines are
 * ignored, and a layer is its kind followed by key=value settings:
 *
 *     conv2d out=32 kernel=3 stride=1 pad=1   # stride 1 and pad 0 by default
 *     relu
 *     maxpool kernel=2 stride=2               # stride = kernel by default
 *     dropout p=0.25
 *     flatten
 *     dense out=128
 *     dense out=classes                       # the data's class count
 *
 * Parsing checks the text alone (kinds, keys, values); resolving it against an
 * input shape and a class count infers every layer's output shape and builds
 * the tensor table (model_spec) that servers and workers share: conv and dense
 * layers are numbered separately (conv1, conv2, fc1, ...) and each contributes
 * NAME.weight then NAME.bias. Every refusal is one line naming the source and
 * line. docs/model.md documents the format for users. */
#ifndef PS_MODEL_DESC_H
#define PS_MODEL_DESC_H

#include <stddef.h>
#include <stdint.h>

#include "model_spec.h"

#define PS_DESC_MAX_LAYERS 64
/* `dense out=classes`: the output size is the data's class count. */
#define PS_DESC_CLASSES (-1)

typedef enum {
    PS_LAYER_DENSE,
    PS_LAYER_CONV2D,
    PS_LAYER_MAXPOOL,
    PS_LAYER_RELU,
    PS_LAYER_DROPOUT,
    PS_LAYER_FLATTEN,
} ps_layer_kind;

/* The shape of the values between layers, for one sample: ndim 1 is a flat
 * vector of d[0] features, ndim 3 is channels d[0], height d[1], width d[2]. */
typedef struct {
    int ndim;
    int d[3];
} ps_act_shape;

typedef struct {
    ps_layer_kind kind;
    int line; /* line in the source, for messages */
    /* dense: output features (or PS_DESC_CLASSES); conv2d: output channels. */
    int out;
    int kernel, stride, pad; /* conv2d and maxpool; square kernels */
    float p;                 /* dropout: probability of dropping a value */
    /* Filled by ps_model_desc_resolve: */
    ps_act_shape in_shape, out_shape;
    int weight; /* index of the layer's weight in the table (its bias is weight + 1); -1 if none */
} ps_layer;

/* A plain value type: nothing inside needs freeing, copies are independent. */
typedef struct {
    char source[128]; /* file name, or what the caller named the text */
    int n_layers;
    ps_layer layers[PS_DESC_MAX_LAYERS];
    /* Set by ps_model_desc_resolve: */
    int resolved;
    ps_act_shape input;
    int classes;
} ps_model_desc;

/* Parses text (NUL-terminated) into desc; source names it in messages. Returns
 * 0, or -PS_EFORMAT with "source:line: what is wrong" in err (always
 * NUL-terminated when errlen > 0): an unknown layer kind or key, a key given
 * twice or missing, a value that is not a number or out of range (out 1..2^20,
 * kernel 1..1024, stride 1..1024, pad 0..1024, p in [0, 1)), no layers, more
 * than PS_DESC_MAX_LAYERS, or a line over 1023 bytes. */
int ps_model_desc_parse(ps_model_desc *desc, const char *text, const char *source, char *err,
                        size_t errlen);

/* Reads the file at path (at most 1 MiB) and parses it, naming path in
 * messages. Also returns -errno when it cannot be read. */
int ps_model_desc_load(ps_model_desc *desc, const char *path, char *err, size_t errlen);

/* The MLP of hidden[0..n_hidden) as a description: flatten, then dense out=h
 * and relu for each hidden size, then dense out=classes; "256,128" is
 * models/mlp.model. source names it in messages. Returns 0, or -PS_EFORMAT
 * with a message (a size out of range, too many layers). */
int ps_model_desc_mlp(ps_model_desc *desc, const int *hidden, int n_hidden, const char *source,
                      char *err, size_t errlen);

/* Infers each layer's shapes from input (ndim 1 or 3, each dimension >= 1) and
 * classes (2..256, the most the data path's uint8 labels hold), and writes the
 * tensor table with the given seed into *table. Weights of every layer but the
 * last dense one are He-initialised, the last is Xavier (it feeds the
 * softmax), biases are zero; fans are in·k·k and out·k·k for a conv2d. The
 * table's MLP view is filled when the model is dense layers with a ReLU
 * between each two (an optional flatten first). Returns 0, or -PS_EFORMAT
 * with "source:line: ..." in err when a layer does not fit its input (conv2d
 * or maxpool on flat input, dense on a C,H,W input without flatten, a kernel
 * larger than the padded input, a shape beyond 2^30 values), the model does
 * not end with a dense layer producing `classes` outputs, or it has more than
 * PS_MAX_LAYERS layers with weights. */
int ps_model_desc_resolve(ps_model_desc *desc, const ps_act_shape *input, int classes,
                          uint64_t seed, ps_model_spec *table, char *err, size_t errlen);

/* Writes the description as canonical text (every setting spelled out, no
 * comments), which parses back to the same layers. Returns the length it
 * needs, like snprintf; out may be NULL when len is 0. */
size_t ps_model_desc_format(const ps_model_desc *desc, char *out, size_t len);

/* Formats a shape as "1x28x28" or "784" into out; returns out. */
const char *ps_act_shape_str(const ps_act_shape *s, char *out, size_t len);

#endif
