/* CUDA kernels as plain-C launchers: the pieces of the dense layer and the
 * loss that kernels/layers_cuda.cu calls (the bias gradient, softmax
 * cross-entropy, the loss total, the correct count), the float32 → bfloat16
 * narrowing the CUDA backend applies to gradients under --compress bf16, and
 * the check that this build's kernels run on the GPU at hand. Each is the
 * twin of a CPU function (cpu_kernels.h, common/half.h) that is its
 * reference in tests/cuda/test_cuda.c. Layouts are the CPU's: row-major
 * [rows, cols] float arrays. Every pointer argument is device memory owned by
 * the caller; nothing is kept after the launch. Launchers enqueue on stream and
 * return at once with the launch status (cudaSuccess, or the error from
 * cudaGetLastError); the caller turns a failure into an error code. A size of
 * zero launches nothing. Declared extern "C" so the .cu that defines them and
 * the C code that calls them agree on the names. */
#ifndef PS_CUDA_KERNELS_H
#define PS_CUDA_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

/* cudaSuccess when this build's kernels can run on the current device;
 * otherwise the reason, e.g. cudaErrorNoKernelImageForDevice on a GPU older
 * than the architectures the build compiled for. Launches nothing. */
cudaError_t ps_cuda_check_image(void);

/* db[out] = sum over the B rows of dy[B,out] (the bias part of
 * ps_k_linear_bwd). Overwrites db; the order of the sum is fixed, so the
 * result is the same on every run. */
cudaError_t ps_cuda_bias_grad(const float *dy, float *db, int B, int out, cudaStream_t stream);

/* Softmax cross-entropy of logits[B,C] against labels[B] (each < C), per row:
 * row_loss[i] = logsumexp(logits[i]) - logits[i][labels[i]], max subtracted
 * first. When dlogits is not NULL it receives (softmax - onehot) / B, the
 * gradient of the mean loss (ps_k_softmax_xent). */
cudaError_t ps_cuda_softmax_xent(const float *logits, const uint8_t *labels, float *dlogits,
                                 float *row_loss, int B, int C, cudaStream_t stream);

/* *acc += the sum of v[0..n-1], accumulated in double in a fixed order, so
 * the mean loss is computed as the CPU computes it. */
cudaError_t ps_cuda_sum_add(const float *v, int n, double *acc, cudaStream_t stream);

/* *count += rows whose arg-max (first on ties) equals the label
 * (ps_k_count_correct). */
cudaError_t ps_cuda_count_correct(const float *logits, const uint8_t *labels, int B, int C,
                                  int *count, cudaStream_t stream);

/* dst[i] = src[i] narrowed to bfloat16, i < n, with ps_f32_to_bf16_ref's
 * rule (common/half.h) bit for bit: round to nearest even on the bit
 * pattern, subnormals kept, NaN quieted with its sign and top payload bits.
 * Not CUDA's __float2bfloat16_rn, which returns one canonical NaN. For
 * narrowing a gradient on the device before it is copied to the host. */
cudaError_t ps_cuda_f32_to_bf16(uint16_t *dst, const float *src, size_t n, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
