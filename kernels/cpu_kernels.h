/* Compute kernels of the MLP on the CPU.
 *
 * These are the CPU backend and, at the same time, the reference every other
 * backend is tested against. The linear layer has two versions: the one the
 * backend runs (OpenBLAS cblas_sgemm) and a plain-loop *_ref version that the
 * tests use to check it. All pointers are caller-owned; nothing is kept. */
#ifndef PS_CPU_KERNELS_H
#define PS_CPU_KERNELS_H

#include <stddef.h>
#include <stdint.h>

/* y[B,out] = x[B,in] * w[out,in]^T + b[out]. */
void ps_k_linear_fwd(const float *x, const float *w, const float *b, float *y, int B, int in,
                     int out);
void ps_k_linear_fwd_ref(const float *x, const float *w, const float *b, float *y, int B, int in,
                         int out);

/* Given dy[B,out]: dw[out,in] = dy^T x, db[out] = sum over rows of dy,
 * dx[B,in] = dy w (skipped when dx is NULL). Overwrites dw, db, dx. */
void ps_k_linear_bwd(const float *x, const float *w, const float *dy, float *dx, float *dw,
                     float *db, int B, int in, int out);
void ps_k_linear_bwd_ref(const float *x, const float *w, const float *dy, float *dx, float *dw,
                         float *db, int B, int in, int out);

/* In place: y = max(y, 0). */
void ps_k_relu_fwd(float *y, size_t n);
/* In place: dy = 0 where the ReLU output y was 0. */
void ps_k_relu_bwd(const float *y, float *dy, size_t n);

/* Mean softmax cross-entropy of logits[B,C] against labels[B] (each < C).
 * When dlogits is not NULL it receives d(mean loss)/d(logits) =
 * (softmax - onehot) / B. Numerically stable (max subtracted). */
float ps_k_softmax_xent(const float *logits, const uint8_t *labels, float *dlogits, int B, int C);

/* Rows whose arg-max (first on ties) equals the label. */
int ps_k_count_correct(const float *logits, const uint8_t *labels, int B, int C);

#endif
