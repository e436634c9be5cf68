/* The layer library on an NVIDIA GPU: the functions of layers.h with device
 * pointers, GEMMs on cuBLAS, everything else in kernels of layers_cuda.cu.
 * Geometry is the CPU's: the same structs, filled by the same *_init
 * functions, and the same layouts, so an executor switches device by
 * switching function tables (worker/backend_cuda_ops.c is the CUDA table).
 * tests/cuda/test_layers_cuda.c holds each function to its CPU twin.
 *
 * Context: the caller owns the cuBLAS handle and the stream and binds them
 * (cublasSetStream) before the first call; all work is enqueued on that
 * stream and the functions return without waiting. Every pointer argument
 * except the geometry is device memory owned by the caller; nothing is kept.
 * Workspaces are device memory of the size *_workspace says (in floats, for
 * the context's math), which for the GPU depends on the batch (the whole
 * batch is unrolled at once) and, under bf16, holds the operands' bfloat16
 * copies.
 *
 * Math of the matrix products (the context's `math`):
 * - PS_CUDA_FP32: cublasSgemmStridedBatched, float32 throughout.
 * - PS_CUDA_TF32: cublasGemmStridedBatchedEx, float32 operands read as TF32
 *   by the tensor cores (CUBLAS_COMPUTE_32F_FAST_TF32), float32 results.
 * - PS_CUDA_BF16: each operand narrowed to bfloat16 in the workspace (round
 *   to nearest even), then cublasGemmStridedBatchedEx with CUDA_R_16BF
 *   inputs, float32 output and CUBLAS_COMPUTE_32F accumulation. The
 *   parameters stay float32 (so do the servers' master weights); only the
 *   products' inputs are rounded, each time they are used.
 * Everything else (bias, pooling, activations, the loss) is float32 in all
 * three.
 *
 * Returns 0, -ENOMEM when cuBLAS could not allocate, or -EIO for any other
 * launch or cuBLAS failure (sticky device errors show up at the next call or
 * synchronisation, as always with CUDA).
 *
 * Determinism: no atomics in any sum of floats; every sum runs in a fixed
 * order, so a run repeats bit for bit. Max-pool, ReLU, dropout, flatten and
 * the predictions give exactly the CPU's bits; the GEMM layers, their bias
 * gradients and the loss agree with the CPU to rounding. */
#ifndef PS_LAYERS_CUDA_H
#define PS_LAYERS_CUDA_H

#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include "layers.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { PS_CUDA_FP32, PS_CUDA_TF32, PS_CUDA_BF16 } ps_cuda_math;

typedef struct ps_cuda_ctx {
    cublasHandle_t blas;
    cudaStream_t stream;
    ps_cuda_math math;
} ps_cuda_ctx;

/* Floats of workspace for a batch of B: none but under bf16, where it holds
 * the narrowed operands (x, w and dy). */
size_t ps_cuda_dense_workspace(const ps_cuda_ctx *cx, const ps_dense *g, int B);
int ps_cuda_dense_forward(const ps_cuda_ctx *cx, const ps_dense *g, int B, const float *x,
                          const float *w, const float *b, float *y, float *ws);
/* dx may be NULL. Overwrites dw, db, dx. */
int ps_cuda_dense_backward(const ps_cuda_ctx *cx, const ps_dense *g, int B, const float *x,
                           const float *w, const float *dy, float *dx, float *dw, float *db,
                           float *ws);

/* Floats of workspace for a batch of B: the batch's im2col matrices, then
 * space for each sample's weight gradient (summed in a fixed order), then
 * under bf16 the narrowed operands. */
size_t ps_cuda_conv2d_workspace(const ps_cuda_ctx *cx, const ps_conv2d *g, int B);
int ps_cuda_conv2d_forward(const ps_cuda_ctx *cx, const ps_conv2d *g, int B, const float *x,
                           const float *w, const float *b, float *y, float *ws);
int ps_cuda_conv2d_backward(const ps_cuda_ctx *cx, const ps_conv2d *g, int B, const float *x,
                            const float *w, const float *dy, float *dx, float *dw, float *db,
                            float *ws);

/* The same argmax indices as the CPU; dx gathers its window winners in
 * output order, as the CPU's scatter adds them, so the bits agree. */
int ps_cuda_maxpool2d_forward(const ps_cuda_ctx *cx, const ps_maxpool2d *g, int B, const float *x,
                              float *y, int32_t *argmax);
int ps_cuda_maxpool2d_backward(const ps_cuda_ctx *cx, const ps_maxpool2d *g, int B, const float *dy,
                               const int32_t *argmax, float *dx);

int ps_cuda_relu_forward(const ps_cuda_ctx *cx, size_t n, const float *x, float *y);
int ps_cuda_relu_backward(const ps_cuda_ctx *cx, size_t n, const float *y, const float *dy,
                          float *dx);

/* The CPU's mask (dropout_mask.h) for the same (seed, step, element). */
int ps_cuda_dropout_forward(const ps_cuda_ctx *cx, const ps_dropout *g, uint64_t step, int training,
                            size_t n, const float *x, float *y);
int ps_cuda_dropout_backward(const ps_cuda_ctx *cx, const ps_dropout *g, uint64_t step,
                             int training, size_t n, const float *dy, float *dx);

/* Copies only when x and y differ (see ps_flatten_forward). */
int ps_cuda_flatten_forward(const ps_cuda_ctx *cx, size_t n, const float *x, float *y);
int ps_cuda_flatten_backward(const ps_cuda_ctx *cx, size_t n, const float *dy, float *dx);

/* Softmax cross-entropy of logits[B][C] against labels[B], which the caller
 * has checked are below C (on the host, where the batch is built): dlogits
 * (may be NULL) = (softmax - onehot) / B; *loss_sum += the batch's summed
 * (not mean) loss in double and *correct += its correct rows, both device
 * counters so that an executor can gather many steps before reading them.
 * row_loss is a workspace of B floats. */
int ps_cuda_softmax_xent_batch(const ps_cuda_ctx *cx, int B, int C, const float *logits,
                               const uint8_t *labels, float *dlogits, float *row_loss,
                               double *loss_sum, int *correct);

/* pred[i] = the first arg-max of row i (ps_predict), bit for bit. */
int ps_cuda_predict(const ps_cuda_ctx *cx, int B, int C, const float *logits, uint8_t *pred);

/* ps_clip_norm on the device: the sum of squares in double, in a fixed order
 * (PS_CUDA_CLIP_PARTS partial sums, then their sum), and the same scale
 * rounded to float once. part: a workspace of PS_CUDA_CLIP_PARTS doubles. */
#define PS_CUDA_CLIP_PARTS 256
int ps_cuda_clip_norm(const ps_cuda_ctx *cx, size_t n, float *g, float max_norm, double *part);

#ifdef __cplusplus
}
#endif

#endif
