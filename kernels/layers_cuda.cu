/* The layer library's CUDA versions and their kernels (see layers_cuda.h).
 *
 * Convolution unrolls the whole batch at once (im2col, one thread per
 * matrix entry) and multiplies with strided-batched cuBLAS calls, the weights
 * shared by every sample (stride 0): one launch per product, whatever B is.
 * The weight gradient is one product per sample into the workspace, summed
 * over the batch by a kernel in sample order, rather than atomics whose order
 * would change from run to run. Input gradients (col2im, max-pool backward)
 * are gathers, one thread per input element reading every output that used
 * it, again for a fixed order; the order is the one in which the CPU's
 * scatters add, which makes max-pool backward bit-identical to the CPU's.
 *
 * Index arithmetic is in size_t where it spans the batch, int within one
 * sample (ps_conv2d_init keeps a sample's sizes inside int). */
#include <errno.h>

#include "cuda_block_sum.cuh"
#include "cuda_kernels.h"
#include "dropout_mask.h"
#include "layers_cuda.h"

#define PS__THREADS    256
#define PS__MAX_BLOCKS 4096

static unsigned int ps__blocks(size_t n)
{
    size_t b = (n + PS__THREADS - 1) / PS__THREADS;
    return b > PS__MAX_BLOCKS ? PS__MAX_BLOCKS : (unsigned int)b;
}

#define PS__GRID_STRIDE(i, n)                                                                      \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n);                        \
         i += (size_t)gridDim.x * blockDim.x)

static int ps__cu(cudaError_t err)
{
    if (err == cudaSuccess)
        return 0;
    return err == cudaErrorMemoryAllocation ? -ENOMEM : -EIO;
}

static int ps__blas(cublasStatus_t st)
{
    if (st == CUBLAS_STATUS_SUCCESS)
        return 0;
    return st == CUBLAS_STATUS_ALLOC_FAILED ? -ENOMEM : -EIO;
}

/* Row-major C[M][N] = op(A) op(B) + beta C over `batch` strided triples.
 * cuBLAS is column-major, where a row-major matrix reads as its transpose,
 * so this asks it for C^T = op(B)^T op(A)^T: the operands swap, the
 * transpose flags stay with their operands. */
static int ps__gemm(const ps_cuda_ctx *cx, int ta, int tb, int M, int N, int K, const float *A,
                    int lda, long long sA, const float *B, int ldb, long long sB, float beta,
                    float *C, int ldc, long long sC, int batch)
{
    const float one = 1.0f;

    if (M == 0 || N == 0 || batch == 0)
        return 0;
    return ps__blas(cublasSgemmStridedBatched(cx->blas, tb ? CUBLAS_OP_T : CUBLAS_OP_N,
                                              ta ? CUBLAS_OP_T : CUBLAS_OP_N, N, M, K, &one, B, ldb,
                                              sB, A, lda, sA, &beta, C, ldc, sC, batch));
}

/* ---- kernels ---------------------------------------------------------------- */

/* col[n][(c*k_h + i)*k_w + j][oy*out_w + ox] = x[n][c][oy*s - pad + i][ox*s - pad + j]. */
static __global__ void ps__im2col(ps_conv2d g, size_t total, const float *x, float *col)
{
    int P = g.out_h * g.out_w, K = g.in.c * g.k_h * g.k_w;

    PS__GRID_STRIDE(t, total)
    {
        int p = (int)(t % (size_t)P), k = (int)((t / (size_t)P) % (size_t)K);
        size_t n = t / ((size_t)P * (size_t)K);
        int j = k % g.k_w, i = (k / g.k_w) % g.k_h, c = k / (g.k_w * g.k_h);
        int iy = p / g.out_w * g.stride - g.pad + i, ix = p % g.out_w * g.stride - g.pad + j;
        float v = 0.0f;
        if (iy >= 0 && iy < g.in.h && ix >= 0 && ix < g.in.w)
            v = x[((n * g.in.c + (size_t)c) * g.in.h + (size_t)iy) * g.in.w + (size_t)ix];
        col[t] = v;
    }
}

/* dx[n][c][iy][ix] = the sum, over kernel rows i then columns j (the CPU's
 * col2im order), of the col entries that read it. */
static __global__ void ps__col2im(ps_conv2d g, size_t total, const float *col, float *dx)
{
    int P = g.out_h * g.out_w, K = g.in.c * g.k_h * g.k_w;

    PS__GRID_STRIDE(t, total)
    {
        int ix = (int)(t % (size_t)g.in.w), iy = (int)((t / (size_t)g.in.w) % (size_t)g.in.h);
        size_t nc = t / ((size_t)g.in.w * g.in.h);
        int c = (int)(nc % (size_t)g.in.c);
        const float *cn = col + nc / (size_t)g.in.c * (size_t)K * (size_t)P;
        float s = 0.0f;
        for (int i = 0; i < g.k_h; i++) {
            int ty = iy + g.pad - i;
            if (ty < 0 || ty % g.stride || ty / g.stride >= g.out_h)
                continue;
            for (int j = 0; j < g.k_w; j++) {
                int tx = ix + g.pad - j;
                if (tx < 0 || tx % g.stride || tx / g.stride >= g.out_w)
                    continue;
                s += cn[(size_t)((c * g.k_h + i) * g.k_w + j) * P +
                        (size_t)(ty / g.stride * g.out_w + tx / g.stride)];
            }
        }
        dx[t] = s;
    }
}

/* y[n][o][p] += b[o]. */
static __global__ void ps__channel_bias(float *y, const float *b, size_t total, int P, int C)
{
    PS__GRID_STRIDE(t, total)
    y[t] += b[(t / (size_t)P) % (size_t)C];
}

/* db[o] = sum over n, p of dy[n][o][p]: one block per channel, each thread a
 * strided partial sum, then a tree in shared memory, all in a fixed order. */
static __global__ void ps__channel_bias_grad(const float *dy, float *db, int B, int P, int C)
{
    __shared__ float part[PS__THREADS];
    int o = (int)blockIdx.x;
    size_t m_total = (size_t)B * (size_t)P;
    float s = 0.0f;

    for (size_t m = threadIdx.x; m < m_total; m += PS__THREADS)
        s += dy[((m / (size_t)P) * (size_t)C + (size_t)o) * (size_t)P + m % (size_t)P];
    s = ps__block_sum(s, part);
    if (threadIdx.x == 0)
        db[o] = s;
}

/* out[i] = sum over n < B of part[n][i], in sample order. */
static __global__ void ps__sum_batch(const float *part, float *out, size_t len, int B)
{
    PS__GRID_STRIDE(i, len)
    {
        float s = 0.0f;
        for (int n = 0; n < B; n++)
            s += part[(size_t)n * len + i];
        out[i] = s;
    }
}

/* The CPU's scan: the first element of the window, replaced only by a
 * strictly greater one. */
static __global__ void ps__maxpool_fwd(ps_maxpool2d g, size_t total, const float *x, float *y,
                                       int32_t *argmax)
{
    PS__GRID_STRIDE(t, total)
    {
        int ox = (int)(t % (size_t)g.out_w), oy = (int)((t / (size_t)g.out_w) % (size_t)g.out_h);
        const float *xp = x + t / ((size_t)g.out_w * g.out_h) * (size_t)g.in.h * (size_t)g.in.w;
        int first = oy * g.stride * g.in.w + ox * g.stride, best = first;
        for (int i = 0; i < g.k; i++)
            for (int j = 0; j < g.k; j++) {
                int at = first + i * g.in.w + j;
                if (xp[at] > xp[best])
                    best = at;
            }
        y[t] = xp[best];
        argmax[t] = best;
    }
}

/* dx[plane][at] = the dy of every window `at` won, in output order. */
static __global__ void ps__maxpool_bwd(ps_maxpool2d g, size_t total, const float *dy,
                                       const int32_t *argmax, float *dx)
{
    PS__GRID_STRIDE(t, total)
    {
        int ix = (int)(t % (size_t)g.in.w), iy = (int)((t / (size_t)g.in.w) % (size_t)g.in.h);
        size_t base = t / ((size_t)g.in.w * g.in.h) * (size_t)g.out_h * (size_t)g.out_w;
        int at = iy * g.in.w + ix;
        /* Windows oy cover iy when oy*stride <= iy < oy*stride + k. */
        int oy_lo = iy - g.k + 1 <= 0 ? 0 : (iy - g.k + g.stride) / g.stride;
        int ox_lo = ix - g.k + 1 <= 0 ? 0 : (ix - g.k + g.stride) / g.stride;
        int oy_hi = min(iy / g.stride, g.out_h - 1), ox_hi = min(ix / g.stride, g.out_w - 1);
        float s = 0.0f;
        for (int oy = oy_lo; oy <= oy_hi; oy++)
            for (int ox = ox_lo; ox <= ox_hi; ox++) {
                size_t o = base + (size_t)(oy * g.out_w + ox);
                if (argmax[o] == at)
                    s += dy[o];
            }
        dx[t] = s;
    }
}

static __global__ void ps__relu_fwd(size_t n, const float *x, float *y)
{
    PS__GRID_STRIDE(i, n)
    y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

static __global__ void ps__relu_bwd(size_t n, const float *y, const float *dy, float *dx)
{
    PS__GRID_STRIDE(i, n)
    dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

static __global__ void ps__dropout(size_t n, uint64_t key, uint32_t threshold, float scale,
                                   const float *x, float *y)
{
    PS__GRID_STRIDE(i, n)
    y[i] = ps_dropout_keep(key, i, threshold) ? __fmul_rn(x[i], scale) : 0.0f;
}

/* ---- launchers ------------------------------------------------------------------ */

extern "C" int ps_cuda_dense_forward(const ps_cuda_ctx *cx, const ps_dense *g, int B,
                                     const float *x, const float *w, const float *b, float *y)
{
    int rc = ps__gemm(cx, 0, 1, B, g->out, g->in, x, g->in, 0, w, g->in, 0, 0.0f, y, g->out, 0, 1);
    return rc ? rc : ps__cu(ps_cuda_bias_act_fwd(y, b, B, g->out, 0, cx->stream));
}

extern "C" int ps_cuda_dense_backward(const ps_cuda_ctx *cx, const ps_dense *g, int B,
                                      const float *x, const float *w, const float *dy, float *dx,
                                      float *dw, float *db)
{
    int rc;

    /* dw[out][in] = dy^T x, overwritten (beta 0), also when B is 0. */
    if (B == 0)
        rc = ps__cu(cudaMemsetAsync(dw, 0, sizeof(float) * (size_t)g->out * g->in, cx->stream));
    else
        rc =
            ps__gemm(cx, 1, 0, g->out, g->in, B, dy, g->out, 0, x, g->in, 0, 0.0f, dw, g->in, 0, 1);
    if (rc == 0)
        rc = ps__cu(B == 0 ? cudaMemsetAsync(db, 0, sizeof(float) * (size_t)g->out, cx->stream)
                           : ps_cuda_bias_grad(dy, db, B, g->out, cx->stream));
    if (rc == 0 && dx)
        rc =
            ps__gemm(cx, 0, 0, B, g->in, g->out, dy, g->out, 0, w, g->in, 0, 0.0f, dx, g->in, 0, 1);
    return rc;
}

extern "C" size_t ps_cuda_conv2d_workspace(const ps_conv2d *g, int B)
{
    size_t K = (size_t)g->in.c * g->k_h * g->k_w;
    return (size_t)B * (K * g->out_h * g->out_w + K * g->out_c);
}

extern "C" int ps_cuda_conv2d_forward(const ps_cuda_ctx *cx, const ps_conv2d *g, int B,
                                      const float *x, const float *w, const float *b, float *y,
                                      float *ws)
{
    int K = g->in.c * g->k_h * g->k_w, P = g->out_h * g->out_w, rc;
    size_t n_col = (size_t)B * K * P, n_y = (size_t)B * g->out_c * P;

    if (B == 0)
        return 0;
    ps__im2col<<<ps__blocks(n_col), PS__THREADS, 0, cx->stream>>>(*g, n_col, x, ws);
    if ((rc = ps__cu(cudaGetLastError())) != 0)
        return rc;
    /* y_n[out_c][P] = W[out_c][K] col_n[K][P] for every n; W is shared. */
    rc = ps__gemm(cx, 0, 0, g->out_c, P, K, w, K, 0, ws, P, (long long)K * P, 0.0f, y, P,
                  (long long)g->out_c * P, B);
    if (rc)
        return rc;
    ps__channel_bias<<<ps__blocks(n_y), PS__THREADS, 0, cx->stream>>>(y, b, n_y, P, g->out_c);
    return ps__cu(cudaGetLastError());
}

extern "C" int ps_cuda_conv2d_backward(const ps_cuda_ctx *cx, const ps_conv2d *g, int B,
                                       const float *x, const float *w, const float *dy, float *dx,
                                       float *dw, float *db, float *ws)
{
    int K = g->in.c * g->k_h * g->k_w, P = g->out_h * g->out_w, rc;
    size_t n_col = (size_t)B * K * P, n_w = (size_t)g->out_c * K;
    size_t n_x = (size_t)B * ps_shape_count(g->in);
    float *part = ws + n_col;

    if (B == 0) {
        rc = ps__cu(cudaMemsetAsync(dw, 0, sizeof(float) * n_w, cx->stream));
        return rc ? rc : ps__cu(cudaMemsetAsync(db, 0, sizeof(float) * g->out_c, cx->stream));
    }
    ps__channel_bias_grad<<<(unsigned int)g->out_c, PS__THREADS, 0, cx->stream>>>(dy, db, B, P,
                                                                                  g->out_c);
    ps__im2col<<<ps__blocks(n_col), PS__THREADS, 0, cx->stream>>>(*g, n_col, x, ws);
    if ((rc = ps__cu(cudaGetLastError())) != 0)
        return rc;
    /* part_n[out_c][K] = dy_n[out_c][P] col_n^T, then summed in sample order. */
    rc = ps__gemm(cx, 0, 1, g->out_c, K, P, dy, P, (long long)g->out_c * P, ws, P, (long long)K * P,
                  0.0f, part, K, (long long)n_w, B);
    if (rc)
        return rc;
    ps__sum_batch<<<ps__blocks(n_w), PS__THREADS, 0, cx->stream>>>(part, dw, n_w, B);
    if ((rc = ps__cu(cudaGetLastError())) != 0 || !dx)
        return rc;
    /* dcol_n[K][P] = W^T dy_n, into the windows' space, then gathered into dx. */
    rc = ps__gemm(cx, 1, 0, K, P, g->out_c, w, K, 0, dy, P, (long long)g->out_c * P, 0.0f, ws, P,
                  (long long)K * P, B);
    if (rc)
        return rc;
    ps__col2im<<<ps__blocks(n_x), PS__THREADS, 0, cx->stream>>>(*g, n_x, ws, dx);
    return ps__cu(cudaGetLastError());
}

extern "C" int ps_cuda_maxpool2d_forward(const ps_cuda_ctx *cx, const ps_maxpool2d *g, int B,
                                         const float *x, float *y, int32_t *argmax)
{
    size_t n = (size_t)B * g->in.c * g->out_h * g->out_w;

    if (n == 0)
        return 0;
    ps__maxpool_fwd<<<ps__blocks(n), PS__THREADS, 0, cx->stream>>>(*g, n, x, y, argmax);
    return ps__cu(cudaGetLastError());
}

extern "C" int ps_cuda_maxpool2d_backward(const ps_cuda_ctx *cx, const ps_maxpool2d *g, int B,
                                          const float *dy, const int32_t *argmax, float *dx)
{
    size_t n = (size_t)B * ps_shape_count(g->in);

    if (n == 0)
        return 0;
    ps__maxpool_bwd<<<ps__blocks(n), PS__THREADS, 0, cx->stream>>>(*g, n, dy, argmax, dx);
    return ps__cu(cudaGetLastError());
}

extern "C" int ps_cuda_relu_forward(const ps_cuda_ctx *cx, size_t n, const float *x, float *y)
{
    if (n == 0)
        return 0;
    ps__relu_fwd<<<ps__blocks(n), PS__THREADS, 0, cx->stream>>>(n, x, y);
    return ps__cu(cudaGetLastError());
}

extern "C" int ps_cuda_relu_backward(const ps_cuda_ctx *cx, size_t n, const float *y,
                                     const float *dy, float *dx)
{
    if (n == 0)
        return 0;
    ps__relu_bwd<<<ps__blocks(n), PS__THREADS, 0, cx->stream>>>(n, y, dy, dx);
    return ps__cu(cudaGetLastError());
}

extern "C" int ps_cuda_flatten_forward(const ps_cuda_ctx *cx, size_t n, const float *x, float *y)
{
    if (n == 0 || x == y)
        return 0;
    return ps__cu(cudaMemcpyAsync(y, x, sizeof(float) * n, cudaMemcpyDeviceToDevice, cx->stream));
}

extern "C" int ps_cuda_flatten_backward(const ps_cuda_ctx *cx, size_t n, const float *dy, float *dx)
{
    return ps_cuda_flatten_forward(cx, n, dy, dx);
}

/* Forward and backward are the same map (see layers.c). */
static int ps__dropout_apply(const ps_cuda_ctx *cx, const ps_dropout *g, uint64_t step,
                             int training, size_t n, const float *x, float *y)
{
    if (!training)
        return ps_cuda_flatten_forward(cx, n, x, y);
    if (n == 0)
        return 0;
    ps__dropout<<<ps__blocks(n), PS__THREADS, 0, cx->stream>>>(n, ps_dropout_key(g->seed, step),
                                                               g->keep_threshold, g->scale, x, y);
    return ps__cu(cudaGetLastError());
}

extern "C" int ps_cuda_dropout_forward(const ps_cuda_ctx *cx, const ps_dropout *g, uint64_t step,
                                       int training, size_t n, const float *x, float *y)
{
    return ps__dropout_apply(cx, g, step, training, n, x, y);
}

extern "C" int ps_cuda_dropout_backward(const ps_cuda_ctx *cx, const ps_dropout *g, uint64_t step,
                                        int training, size_t n, const float *dy, float *dx)
{
    return ps__dropout_apply(cx, g, step, training, n, dy, dx);
}

extern "C" int ps_cuda_softmax_xent_batch(const ps_cuda_ctx *cx, int B, int C, const float *logits,
                                          const uint8_t *labels, float *dlogits, float *row_loss,
                                          double *loss_sum, int *correct)
{
    int rc = ps__cu(ps_cuda_softmax_xent(logits, labels, dlogits, row_loss, B, C, cx->stream));
    if (rc == 0)
        rc = ps__cu(ps_cuda_sum_add(row_loss, B, loss_sum, cx->stream));
    if (rc == 0)
        rc = ps__cu(ps_cuda_count_correct(logits, labels, B, C, correct, cx->stream));
    return rc;
}
