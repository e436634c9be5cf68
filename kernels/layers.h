/* The layer library on the CPU: what a generic model executor calls.
 *
 * Each layer kind has a geometry struct, filled and checked by its *_init
 * (which also yields the per-sample output shape), and forward / backward
 * functions over a batch of B samples stored batch-major and contiguous: an
 * activation is [B][c][h][w] (NCHW), a dense one [B][features], which is the
 * same memory as shape {features, 1, 1}. So flatten moves no data.
 *
 * The fast paths (OpenBLAS GEMMs for dense and conv) each have a plain-loop
 * *_ref twin that the tests hold them to; element-wise layers (ReLU, dropout,
 * flatten) and the loss are single plain loops that are their own reference.
 * kernels/layers_cuda.h has the same functions on device pointers, tested
 * against these.
 *
 * Memory: every pointer is the caller's, read or written only during the
 * call; nothing is kept or allocated. A layer that needs scratch space says
 * how many floats in *_workspace(); ws must hold that many. Backward
 * functions OVERWRITE the parameter gradients (dw, db) with this batch's
 * gradient and overwrite dx; dx may be NULL for the first layer. ReLU and
 * dropout may run in place (y == x, dx == dy). */
#ifndef PS_LAYERS_H
#define PS_LAYERS_H

#include <stddef.h>
#include <stdint.h>

/* layers_cuda.cu (C++) shares these declarations. */
#ifdef __cplusplus
extern "C" {
#endif

/* The shape of one sample's activation; a vector of n features is {n, 1, 1}. */
typedef struct ps_shape {
    int c, h, w;
} ps_shape;

/* Elements in one sample of shape s. */
size_t ps_shape_count(ps_shape s);

/* ---- dense: y[B,out] = x[B,in] w[out,in]^T + b[out] ---------------------- */
typedef struct ps_dense {
    int in, out;
} ps_dense;

/* Takes any input shape (it is read as ps_shape_count(in) features).
 * 0, or -EINVAL on a non-positive size or one that overflows int. */
int ps_dense_init(ps_dense *g, ps_shape in, int out, ps_shape *out_shape);
/* The weight is [out][in], the bias [out]. */
size_t ps_dense_weight_count(const ps_dense *g);
void ps_dense_forward(const ps_dense *g, int B, const float *x, const float *w, const float *b,
                      float *y);
void ps_dense_backward(const ps_dense *g, int B, const float *x, const float *w, const float *dy,
                       float *dx, float *dw, float *db);
void ps_dense_forward_ref(const ps_dense *g, int B, const float *x, const float *w, const float *b,
                          float *y);
void ps_dense_backward_ref(const ps_dense *g, int B, const float *x, const float *w,
                           const float *dy, float *dx, float *dw, float *db);

/* ---- conv2d: NCHW, weight [out_c][in_c][k_h][k_w], bias [out_c] -------- */
typedef struct ps_conv2d {
    ps_shape in;
    int out_c, k_h, k_w, stride, pad;
    /* Derived by ps_conv2d_init. */
    int out_h, out_w;
} ps_conv2d;

/* Zero padding of pad on all four sides, the same stride both ways; an
 * output pixel exists for every window that starts inside the padded input:
 * out = (in + 2 pad - k) / stride + 1. 0, or -EINVAL when a size is not
 * positive, pad is negative, the kernel does not fit the padded input, or a
 * size overflows int. */
int ps_conv2d_init(ps_conv2d *g, ps_shape in, int out_c, int k_h, int k_w, int stride, int pad,
                   ps_shape *out_shape);
size_t ps_conv2d_weight_count(const ps_conv2d *g);
/* Floats of scratch the CPU forward and backward need (one sample's im2col
 * matrix and its gradient); independent of B. */
size_t ps_conv2d_workspace(const ps_conv2d *g);
void ps_conv2d_forward(const ps_conv2d *g, int B, const float *x, const float *w, const float *b,
                       float *y, float *ws);
void ps_conv2d_backward(const ps_conv2d *g, int B, const float *x, const float *w, const float *dy,
                        float *dx, float *dw, float *db, float *ws);
void ps_conv2d_forward_ref(const ps_conv2d *g, int B, const float *x, const float *w,
                           const float *b, float *y);
void ps_conv2d_backward_ref(const ps_conv2d *g, int B, const float *x, const float *w,
                            const float *dy, float *dx, float *dw, float *db);

/* ---- max-pool 2-D: no padding, windows k x k every stride ------------- */
typedef struct ps_maxpool2d {
    ps_shape in;
    int k, stride;
    int out_h, out_w;
} ps_maxpool2d;

/* out = (in - k) / stride + 1. 0, or -EINVAL when a size is not positive or
 * the window is larger than the input. */
int ps_maxpool2d_init(ps_maxpool2d *g, ps_shape in, int k, int stride, ps_shape *out_shape);
/* argmax[B][c][out_h][out_w] (one int32_t per output element, kept by the
 * executor from forward to backward) receives, for each output, the index
 * within its input plane (h * in_w + w) of the window's first maximum;
 * backward needs only these, not x. The scan starts at the window's first
 * element and moves only to a strictly greater one, so a NaN elsewhere never
 * wins (a NaN first element stays). */
void ps_maxpool2d_forward(const ps_maxpool2d *g, int B, const float *x, float *y, int32_t *argmax);
void ps_maxpool2d_backward(const ps_maxpool2d *g, int B, const float *dy, const int32_t *argmax,
                           float *dx);
/* The references find each window's maximum again from x instead of
 * trusting indices, so they check the indices too. */
void ps_maxpool2d_forward_ref(const ps_maxpool2d *g, int B, const float *x, float *y);
void ps_maxpool2d_backward_ref(const ps_maxpool2d *g, int B, const float *x, const float *dy,
                               float *dx);

/* ---- ReLU over n = B * ps_shape_count elements ---------------------------- */
void ps_relu_forward(size_t n, const float *x, float *y);
/* dx = dy where the output y was positive, else 0 (NaN and -0 give 0). */
void ps_relu_backward(size_t n, const float *y, const float *dy, float *dx);

/* ---- dropout (inverted): y = keep ? x / (1 - rate) : 0 ----------------- */
typedef struct ps_dropout {
    /* Keep an element when its 24-bit hash is below keep_threshold. */
    uint32_t keep_threshold;
    float scale;
    uint64_t seed;
} ps_dropout;

/* rate in [0, 1). The mask of element i (its index in the whole batch
 * tensor) at step is a pure function of (seed, step, i) (ps_dropout_keep),
 * so the CPU and the GPU draw the same mask and backward recomputes it
 * rather than storing it. Callers pick seed per layer and per worker so that
 * masks differ between them. 0, or -EINVAL. */
int ps_dropout_init(ps_dropout *g, float rate, uint64_t seed);
/* training == 0 (evaluation): y = x, dx = dy. */
void ps_dropout_forward(const ps_dropout *g, uint64_t step, int training, size_t n, const float *x,
                        float *y);
void ps_dropout_backward(const ps_dropout *g, uint64_t step, int training, size_t n,
                         const float *dy, float *dx);

/* ---- flatten: {c, h, w} -> {c * h * w, 1, 1} ------------------------------ */
/* The memory is the same, so an executor can alias x and y; forward and
 * backward copy only when given two buffers. */
ps_shape ps_flatten_shape(ps_shape in);
void ps_flatten_forward(size_t n, const float *x, float *y);
void ps_flatten_backward(size_t n, const float *dy, float *dx);

/* ---- softmax cross-entropy over logits[B][C], labels[B] < C ---------------- */
/* *loss = mean over the batch; dlogits (may be NULL) = its gradient,
 * (softmax - onehot) / B; *correct (may be NULL) = rows whose first arg-max
 * is the label. 0, or -EINVAL when a label is not below C. */
int ps_softmax_xent(int B, int C, const float *logits, const uint8_t *labels, float *dlogits,
                    float *loss, int *correct);
/* pred[i] = the first arg-max of row i of logits[B][C] (the class the loss
 * counts as predicted). */
void ps_predict(int B, int C, const float *logits, uint8_t *pred);

/* ---- gradient clipping ---------------------------------------------------- */
/* Scales g[n] to an L2 norm of at most max_norm (> 0): the sum of squares in
 * double; above max_norm^2, every element times max_norm / norm rounded to
 * float once. A worker clips each tensor's gradient (--clip-norm). */
void ps_clip_norm(size_t n, float *g, float max_norm);

#ifdef __cplusplus
}
#endif

#endif
