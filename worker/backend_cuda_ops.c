/* The CUDA table of operations (see backend_ops.h): kernels/layers_cuda.h on
 * device memory, behind the same struct as the CPU's. The device context is
 * the CUDA backend's ps_cuda_ctx: its cuBLAS handle and compute stream, on
 * which every operation here is queued in order, and the products' math
 * (FP32, TF32 or bf16).
 *
 * Nothing here computes on the host: tests/cuda/ops_link.sh checks that this
 * object and every CUDA object it leads to call no function of the CPU layer
 * library or BLAS. Allocation and the two copies are the only calls that
 * wait (cudaMalloc and cudaFree synchronise the device; read waits for the
 * stream), and they happen at init and once a step. Every CUDA status is
 * checked; a failure is -ENOMEM (allocation) or -EIO, logged here with what
 * was being done. */
#include <cuda_runtime_api.h>
#include <errno.h>

#include "backend_ops.h"
#include "layers_cuda.h"
#include "ps_log.h"

static int ps__cuda_op_check(cudaError_t err, const char *what)
{
    if (err == cudaSuccess)
        return 0;
    ps_error("CUDA failed while %s: %s (%s)", what, cudaGetErrorString(err), cudaGetErrorName(err));
    return err == cudaErrorMemoryAllocation ? -ENOMEM : -EIO;
}

/* A layer function's code, with the layer named when it failed. */
static int ps__cuda_op_layer(int rc, const char *what)
{
    if (rc < 0)
        ps_error("CUDA failed while %s: %s", what, rc == -ENOMEM ? "out of memory" : "I/O error");
    return rc;
}

static void *ps__cuda_op_alloc(void *dev, size_t bytes)
{
    const ps_cuda_ctx *cx = dev;
    void *p = NULL;

    if (ps__cuda_op_check(cudaMalloc(&p, bytes ? bytes : 1), "allocating GPU memory") < 0)
        return NULL;
    /* Zeroed before anything queued on the stream can read it. */
    if (ps__cuda_op_check(cudaMemsetAsync(p, 0, bytes, cx->stream), "clearing GPU memory") < 0) {
        cudaFree(p);
        return NULL;
    }
    return p;
}

static void ps__cuda_op_release(void *dev, void *p)
{
    (void)dev;
    if (p)
        ps__cuda_op_check(cudaFree(p), "freeing GPU memory");
}

/* Ordered on the stream after what was queued, and complete on return. */
static int ps__cuda_op_write(void *dev, void *dst, const void *src, size_t bytes)
{
    const ps_cuda_ctx *cx = dev;
    int rc = ps__cuda_op_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, cx->stream),
                               "copying to the GPU");
    return rc ? rc : ps__cuda_op_check(cudaStreamSynchronize(cx->stream), "copying to the GPU");
}

static int ps__cuda_op_read(void *dev, void *dst, const void *src, size_t bytes)
{
    const ps_cuda_ctx *cx = dev;
    int rc = ps__cuda_op_check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, cx->stream),
                               "copying from the GPU");
    /* Asynchronous errors of anything queued before surface here. */
    return rc ? rc : ps__cuda_op_check(cudaStreamSynchronize(cx->stream), "running the step");
}

static int ps__cuda_op_zero(void *dev, void *p, size_t bytes)
{
    const ps_cuda_ctx *cx = dev;
    return ps__cuda_op_check(cudaMemsetAsync(p, 0, bytes, cx->stream), "clearing GPU memory");
}

static size_t ps__cuda_op_dense_workspace(void *dev, const ps_dense *g, int B)
{
    return ps_cuda_dense_workspace(dev, g, B);
}

static int ps__cuda_op_dense_forward(void *dev, const ps_dense *g, int B, const float *x,
                                     const float *w, const float *b, float *y, float *ws)
{
    return ps__cuda_op_layer(ps_cuda_dense_forward(dev, g, B, x, w, b, y, ws),
                             "running a dense layer");
}

static int ps__cuda_op_dense_backward(void *dev, const ps_dense *g, int B, const float *x,
                                      const float *w, const float *dy, float *dx, float *dw,
                                      float *db, float *ws)
{
    return ps__cuda_op_layer(ps_cuda_dense_backward(dev, g, B, x, w, dy, dx, dw, db, ws),
                             "running a dense layer backward");
}

static size_t ps__cuda_op_conv2d_workspace(void *dev, const ps_conv2d *g, int B)
{
    return ps_cuda_conv2d_workspace(dev, g, B);
}

static int ps__cuda_op_conv2d_forward(void *dev, const ps_conv2d *g, int B, const float *x,
                                      const float *w, const float *b, float *y, float *ws)
{
    return ps__cuda_op_layer(ps_cuda_conv2d_forward(dev, g, B, x, w, b, y, ws),
                             "running a convolution");
}

static int ps__cuda_op_conv2d_backward(void *dev, const ps_conv2d *g, int B, const float *x,
                                       const float *w, const float *dy, float *dx, float *dw,
                                       float *db, float *ws)
{
    return ps__cuda_op_layer(ps_cuda_conv2d_backward(dev, g, B, x, w, dy, dx, dw, db, ws),
                             "running a convolution backward");
}

static int ps__cuda_op_maxpool2d_forward(void *dev, const ps_maxpool2d *g, int B, const float *x,
                                         float *y, int32_t *argmax)
{
    return ps__cuda_op_layer(ps_cuda_maxpool2d_forward(dev, g, B, x, y, argmax),
                             "running a max-pool");
}

static int ps__cuda_op_maxpool2d_backward(void *dev, const ps_maxpool2d *g, int B, const float *dy,
                                          const int32_t *argmax, float *dx)
{
    return ps__cuda_op_layer(ps_cuda_maxpool2d_backward(dev, g, B, dy, argmax, dx),
                             "running a max-pool backward");
}

static int ps__cuda_op_relu_forward(void *dev, size_t n, const float *x, float *y)
{
    return ps__cuda_op_layer(ps_cuda_relu_forward(dev, n, x, y), "running a ReLU");
}

static int ps__cuda_op_relu_backward(void *dev, size_t n, const float *y, const float *dy,
                                     float *dx)
{
    return ps__cuda_op_layer(ps_cuda_relu_backward(dev, n, y, dy, dx), "running a ReLU backward");
}

static int ps__cuda_op_dropout_forward(void *dev, const ps_dropout *g, uint64_t step, int training,
                                       size_t n, const float *x, float *y)
{
    return ps__cuda_op_layer(ps_cuda_dropout_forward(dev, g, step, training, n, x, y),
                             "running dropout");
}

static int ps__cuda_op_dropout_backward(void *dev, const ps_dropout *g, uint64_t step, int training,
                                        size_t n, const float *dy, float *dx)
{
    return ps__cuda_op_layer(ps_cuda_dropout_backward(dev, g, step, training, n, dy, dx),
                             "running dropout backward");
}

static int ps__cuda_op_softmax_xent(void *dev, int B, int C, const float *logits,
                                    const uint8_t *labels, float *dlogits, float *rows,
                                    ps_model_totals *totals)
{
    return ps__cuda_op_layer(ps_cuda_softmax_xent_batch(dev, B, C, logits, labels, dlogits, rows,
                                                        &totals->loss_sum, &totals->correct),
                             "computing the loss");
}

static int ps__cuda_op_predict(void *dev, int B, int C, const float *logits, uint8_t *pred)
{
    return ps__cuda_op_layer(ps_cuda_predict(dev, B, C, logits, pred), "computing predictions");
}

const ps_model_ops ps_backend_cuda_ops = {
    .alloc = ps__cuda_op_alloc,
    .release = ps__cuda_op_release,
    .write = ps__cuda_op_write,
    .read = ps__cuda_op_read,
    .zero = ps__cuda_op_zero,
    .dense_workspace = ps__cuda_op_dense_workspace,
    .dense_forward = ps__cuda_op_dense_forward,
    .dense_backward = ps__cuda_op_dense_backward,
    .conv2d_workspace = ps__cuda_op_conv2d_workspace,
    .conv2d_forward = ps__cuda_op_conv2d_forward,
    .conv2d_backward = ps__cuda_op_conv2d_backward,
    .maxpool2d_forward = ps__cuda_op_maxpool2d_forward,
    .maxpool2d_backward = ps__cuda_op_maxpool2d_backward,
    .relu_forward = ps__cuda_op_relu_forward,
    .relu_backward = ps__cuda_op_relu_backward,
    .dropout_forward = ps__cuda_op_dropout_forward,
    .dropout_backward = ps__cuda_op_dropout_backward,
    .softmax_xent = ps__cuda_op_softmax_xent,
    .predict = ps__cuda_op_predict,
};
