/* The CPU's table of operations (see backend_ops.h): the layer library of
 * kernels/layers.h on host memory, unchanged but for the device context
 * (unused: NULL) and the 0 every layer function returns. Its buffers start
 * on 64-byte boundaries, so BLAS sees cache-line aligned rows. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "backend_ops.h"

#define PS__CPU_OP_ALIGN 64

static void *ps__cpu_op_alloc(void *dev, size_t bytes)
{
    /* aligned_alloc wants a multiple of the alignment, and some size. */
    size_t size = (bytes + PS__CPU_OP_ALIGN - 1) / PS__CPU_OP_ALIGN * PS__CPU_OP_ALIGN;
    void *p = aligned_alloc(PS__CPU_OP_ALIGN, size ? size : PS__CPU_OP_ALIGN);

    (void)dev;
    if (p)
        memset(p, 0, size ? size : PS__CPU_OP_ALIGN);
    return p;
}

static void ps__cpu_op_release(void *dev, void *p)
{
    (void)dev;
    free(p);
}

static int ps__cpu_op_copy(void *dev, void *dst, const void *src, size_t bytes)
{
    (void)dev;
    memcpy(dst, src, bytes);
    return 0;
}

static int ps__cpu_op_zero(void *dev, void *p, size_t bytes)
{
    (void)dev;
    memset(p, 0, bytes);
    return 0;
}

static size_t ps__cpu_op_dense_workspace(void *dev, const ps_dense *g, int B)
{
    (void)dev, (void)g, (void)B;
    return 0;
}

static int ps__cpu_op_dense_forward(void *dev, const ps_dense *g, int B, const float *x,
                                    const float *w, const float *b, float *y, float *ws)
{
    (void)dev, (void)ws;
    ps_dense_forward(g, B, x, w, b, y);
    return 0;
}

static int ps__cpu_op_dense_backward(void *dev, const ps_dense *g, int B, const float *x,
                                     const float *w, const float *dy, float *dx, float *dw,
                                     float *db, float *ws)
{
    (void)dev, (void)ws;
    ps_dense_backward(g, B, x, w, dy, dx, dw, db);
    return 0;
}

/* One sample's scratch, whatever the batch. */
static size_t ps__cpu_op_conv2d_workspace(void *dev, const ps_conv2d *g, int B)
{
    (void)dev, (void)B;
    return ps_conv2d_workspace(g);
}

static int ps__cpu_op_conv2d_forward(void *dev, const ps_conv2d *g, int B, const float *x,
                                     const float *w, const float *b, float *y, float *ws)
{
    (void)dev;
    ps_conv2d_forward(g, B, x, w, b, y, ws);
    return 0;
}

static int ps__cpu_op_conv2d_backward(void *dev, const ps_conv2d *g, int B, const float *x,
                                      const float *w, const float *dy, float *dx, float *dw,
                                      float *db, float *ws)
{
    (void)dev;
    ps_conv2d_backward(g, B, x, w, dy, dx, dw, db, ws);
    return 0;
}

static int ps__cpu_op_maxpool2d_forward(void *dev, const ps_maxpool2d *g, int B, const float *x,
                                        float *y, int32_t *argmax)
{
    (void)dev;
    ps_maxpool2d_forward(g, B, x, y, argmax);
    return 0;
}

static int ps__cpu_op_maxpool2d_backward(void *dev, const ps_maxpool2d *g, int B, const float *dy,
                                         const int32_t *argmax, float *dx)
{
    (void)dev;
    ps_maxpool2d_backward(g, B, dy, argmax, dx);
    return 0;
}

static int ps__cpu_op_relu_forward(void *dev, size_t n, const float *x, float *y)
{
    (void)dev;
    ps_relu_forward(n, x, y);
    return 0;
}

static int ps__cpu_op_relu_backward(void *dev, size_t n, const float *y, const float *dy, float *dx)
{
    (void)dev;
    ps_relu_backward(n, y, dy, dx);
    return 0;
}

static int ps__cpu_op_dropout_forward(void *dev, const ps_dropout *g, uint64_t step, int training,
                                      size_t n, const float *x, float *y)
{
    (void)dev;
    ps_dropout_forward(g, step, training, n, x, y);
    return 0;
}

static int ps__cpu_op_dropout_backward(void *dev, const ps_dropout *g, uint64_t step, int training,
                                       size_t n, const float *dy, float *dx)
{
    (void)dev;
    ps_dropout_backward(g, step, training, n, dy, dx);
    return 0;
}

/* The library gives the batch's mean as a float; times B in double it is
 * the sum exactly, so a mean read back is the library's to the bit. */
static int ps__cpu_op_softmax_xent(void *dev, int B, int C, const float *logits,
                                   const uint8_t *labels, float *dlogits, float *rows,
                                   ps_model_totals *totals)
{
    float loss;
    int correct, rc;

    (void)dev, (void)rows;
    rc = ps_softmax_xent(B, C, logits, labels, dlogits, &loss, &correct);
    if (rc < 0)
        return rc;
    totals->loss_sum += (double)loss * B;
    totals->correct += correct;
    return 0;
}

static int ps__cpu_op_predict(void *dev, int B, int C, const float *logits, uint8_t *pred)
{
    (void)dev;
    ps_predict(B, C, logits, pred);
    return 0;
}

const ps_model_ops ps_backend_cpu_ops = {
    .alloc = ps__cpu_op_alloc,
    .release = ps__cpu_op_release,
    .write = ps__cpu_op_copy,
    .read = ps__cpu_op_copy,
    .zero = ps__cpu_op_zero,
    .dense_workspace = ps__cpu_op_dense_workspace,
    .dense_forward = ps__cpu_op_dense_forward,
    .dense_backward = ps__cpu_op_dense_backward,
    .conv2d_workspace = ps__cpu_op_conv2d_workspace,
    .conv2d_forward = ps__cpu_op_conv2d_forward,
    .conv2d_backward = ps__cpu_op_conv2d_backward,
    .maxpool2d_forward = ps__cpu_op_maxpool2d_forward,
    .maxpool2d_backward = ps__cpu_op_maxpool2d_backward,
    .relu_forward = ps__cpu_op_relu_forward,
    .relu_backward = ps__cpu_op_relu_backward,
    .dropout_forward = ps__cpu_op_dropout_forward,
    .dropout_backward = ps__cpu_op_dropout_backward,
    .softmax_xent = ps__cpu_op_softmax_xent,
    .predict = ps__cpu_op_predict,
};
