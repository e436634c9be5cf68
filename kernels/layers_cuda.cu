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
 * Under bf16 every product first narrows its two operands into the
 * workspace, behind the float32 part of it, each operand starting on a
 * 256-byte boundary as cuBLAS's tensor-core paths like; an operand shared by
 * the batch (stride 0: the weights) is narrowed once per product.
 *
 * Index arithmetic is in size_t where it spans the batch, int within one
 * sample (ps_conv2d_init keeps a sample's sizes inside int). */
#include <cuda_bf16.h>
#include <errno.h>

#include "cuda_block_sum.cuh"
#include "cuda_grid.cuh"
#include "cuda_kernels.h"
#include "dropout_mask.h"
#include "layers_cuda.h"

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

/* bfloat16 values per 256 bytes: operands in the workspace start on such a
 * boundary. */
#define PS__BF16_ALIGN 128

static size_t ps__round_up(size_t n, size_t to)
{
    return (n + to - 1) / to * to;
}

/* Floats of workspace that bfloat16 copies of operands of a and b values
 * take (each rounded up to the alignment), or 0 unless the math is bf16. */
static size_t ps__bf16_floats(const ps_cuda_ctx *cx, size_t a, size_t b)
{
    if (cx->math != PS_CUDA_BF16)
        return 0;
    return (ps__round_up(a, PS__BF16_ALIGN) + ps__round_up(b, PS__BF16_ALIGN)) / 2;
}

static __global__ void ps__to_bf16(size_t n, const float *x, __nv_bfloat16 *y);

/* A float32 operand of `batch` matrices of rows x cols, `stride` apart (0:
 * one matrix for all), narrowed into *at; *at moves past it. */
static const __nv_bfloat16 *ps__layers_cuda_narrow(const ps_cuda_ctx *cx, const float *src,
                                                   int rows, int cols, long long stride, int batch,
                                                   __nv_bfloat16 **at)
{
    size_t n = stride ? (size_t)stride * (size_t)(batch - 1) + (size_t)rows * (size_t)cols
                      : (size_t)rows * (size_t)cols;
    __nv_bfloat16 *dst = *at;

    ps__to_bf16<<<ps__cuda_grid_blocks(n), PS_CUDA_THREADS, 0, cx->stream>>>(n, src, dst);
    *at += ps__round_up(n, PS__BF16_ALIGN);
    return dst;
}

/* Row-major C[M][N] = op(A) op(B) + beta C over `batch` strided triples, in
 * the context's math; op(A) is M x K and op(B) K x N. bf16 (the narrowed
 * operands) goes to ws, which may be NULL otherwise. cuBLAS is column-major,
 * where a row-major matrix reads as its transpose, so this asks it for C^T =
 * op(B)^T op(A)^T: the operands swap, the transpose flags stay with their
 * operands. */
static int ps__gemm(const ps_cuda_ctx *cx, int ta, int tb, int M, int N, int K, const float *A,
                    int lda, long long sA, const float *B, int ldb, long long sB, float beta,
                    float *C, int ldc, long long sC, int batch, float *ws)
{
    const float one = 1.0f;
    cublasOperation_t opa = ta ? CUBLAS_OP_T : CUBLAS_OP_N, opb = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
    __nv_bfloat16 *at = (__nv_bfloat16 *)ws;
    const void *a = A, *b = B;
    cudaDataType_t type = CUDA_R_32F;
    cublasComputeType_t compute = CUBLAS_COMPUTE_32F_FAST_TF32;

    if (M == 0 || N == 0 || batch == 0)
        return 0;
    switch (cx->math) {
    case PS_CUDA_FP32:
        return ps__blas(cublasSgemmStridedBatched(cx->blas, opb, opa, N, M, K, &one, B, ldb, sB, A,
                                                  lda, sA, &beta, C, ldc, sC, batch));
    case PS_CUDA_TF32:
        break;
    case PS_CUDA_BF16:
        /* op(A) is M x K, so A holds M*K values however it is transposed. */
        a = ps__layers_cuda_narrow(cx, A, M, K, sA, batch, &at);
        b = ps__layers_cuda_narrow(cx, B, K, N, sB, batch, &at);
        if (cudaGetLastError() != cudaSuccess)
            return -EIO;
        type = CUDA_R_16BF;
        compute = CUBLAS_COMPUTE_32F;
        break;
    }
    return ps__blas(cublasGemmStridedBatchedEx(cx->blas, opb, opa, N, M, K, &one, b, type, ldb, sB,
                                               a, type, lda, sA, &beta, C, CUDA_R_32F, ldc, sC,
                                               batch, compute, CUBLAS_GEMM_DEFAULT));
}

/* ---- kernels ---------------------------------------------------------------- */

/* col[n][(c*k_h + i)*k_w + j][oy*out_w + ox] = x[n][c][oy*s - pad + i][ox*s - pad + j]. */
static __global__ void ps__layers_cuda_im2col(ps_conv2d g, size_t total, const float *x, float *col)
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
static __global__ void ps__layers_cuda_col2im(ps_conv2d g, size_t total, const float *col,
                                              float *dx)
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
    __shared__ float part[PS_CUDA_THREADS];
    int o = (int)blockIdx.x;
    size_t m_total = (size_t)B * (size_t)P;
    float s = 0.0f;

    for (size_t m = threadIdx.x; m < m_total; m += PS_CUDA_THREADS)
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

/* Round to nearest even; NaN stays NaN (its payload does not matter in a
 * product). */
static __global__ void ps__to_bf16(size_t n, const float *x, __nv_bfloat16 *y)
{
    PS__GRID_STRIDE(i, n)
    y[i] = __float2bfloat16_rn(x[i]);
}

/* The CPU's scan: the first class, replaced only by a strictly greater one. */
static __global__ void ps__layers_cuda_predict(int B, int C, const float *logits, uint8_t *pred)
{
    PS__GRID_STRIDE(i, (size_t)B)
    {
        const float *l = logits + i * (size_t)C;
        int best = 0;
        for (int c = 1; c < C; c++)
            if (l[c] > l[best])
                best = c;
        pred[i] = (uint8_t)best;
    }
}

/* part[blockIdx.x] = the sum of g[i]^2 over the i this block strides over,
 * in double, in a fixed order. */
static __global__ void ps__sumsq_parts(size_t n, const float *g, double *part)
{
    __shared__ double s[PS_CUDA_THREADS];
    double v = 0.0;

    for (size_t i = blockIdx.x * (size_t)PS_CUDA_THREADS + threadIdx.x; i < n;
         i += (size_t)PS_CUDA_CLIP_PARTS * PS_CUDA_THREADS)
        v += (double)g[i] * (double)g[i];
    v = ps__block_sum(v, s);
    if (threadIdx.x == 0)
        part[blockIdx.x] = v;
}

/* One thread per part: the parts are summed by one block-wide sum. */
static_assert(PS_CUDA_CLIP_PARTS == PS_CUDA_THREADS, "a clipping block sums every part at once");

/* Every block sums the parts in the same order (so all see the same norm),
 * then scales its share of g when the norm is above max_norm. */
static __global__ void ps__clip_scale(size_t n, float *g, float max_norm, const double *part)
{
    __shared__ double s[PS_CUDA_THREADS];
    double sq = ps__block_sum(part[threadIdx.x], s);
    float scale;

    if (!(sq > (double)max_norm * max_norm))
        return;
    scale = (float)(max_norm / sqrt(sq));
    PS__GRID_STRIDE(i, n)
    g[i] = __fmul_rn(g[i], scale);
}

/* ---- launchers ------------------------------------------------------------------ */

extern "C" size_t ps_cuda_dense_workspace(const ps_cuda_ctx *cx, const ps_dense *g, int B)
{
    /* The three products narrow (x, w), (dy, x) and (dy, w): room for x and
     * w, or dy and w, whichever pair is larger. */
    size_t x = (size_t)B * g->in, w = (size_t)g->out * g->in, dy = (size_t)B * g->out;
    return ps__bf16_floats(cx, x > dy ? x : dy, w > x ? w : x);
}

extern "C" int ps_cuda_dense_forward(const ps_cuda_ctx *cx, const ps_dense *g, int B,
                                     const float *x, const float *w, const float *b, float *y,
                                     float *ws)
{
    size_t n = (size_t)B * g->out;
    int rc =
        ps__gemm(cx, 0, 1, B, g->out, g->in, x, g->in, 0, w, g->in, 0, 0.0f, y, g->out, 0, 1, ws);

    if (rc || n == 0)
        return rc;
    ps__channel_bias<<<ps__cuda_grid_blocks(n), PS_CUDA_THREADS, 0, cx->stream>>>(y, b, n, 1,
                                                                                  g->out);
    return ps__cu(cudaGetLastError());
}

extern "C" int ps_cuda_dense_backward(const ps_cuda_ctx *cx, const ps_dense *g, int B,
                                      const float *x, const float *w, const float *dy, float *dx,
                                      float *dw, float *db, float *ws)
{
    int rc;

    /* dw[out][in] = dy^T x, overwritten (beta 0), also when B is 0. */
    if (B == 0)
        rc = ps__cu(cudaMemsetAsync(dw, 0, sizeof(float) * (size_t)g->out * g->in, cx->stream));
    else
        rc = ps__gemm(cx, 1, 0, g->out, g->in, B, dy, g->out, 0, x, g->in, 0, 0.0f, dw, g->in, 0, 1,
                      ws);
    if (rc == 0)
        rc = ps__cu(B == 0 ? cudaMemsetAsync(db, 0, sizeof(float) * (size_t)g->out, cx->stream)
                           : ps_cuda_bias_grad(dy, db, B, g->out, cx->stream));
    if (rc == 0 && dx)
        rc = ps__gemm(cx, 0, 0, B, g->in, g->out, dy, g->out, 0, w, g->in, 0, 0.0f, dx, g->in, 0, 1,
                      ws);
    return rc;
}

/* Floats of the float32 part of a convolution's workspace: the batch's
 * windows, then the per-sample weight gradients; the bf16 operands follow. */
static size_t ps__conv_floats(const ps_conv2d *g, int B)
{
    size_t K = (size_t)g->in.c * g->k_h * g->k_w;
    return (size_t)B * (K * g->out_h * g->out_w + K * g->out_c);
}

extern "C" size_t ps_cuda_conv2d_workspace(const ps_cuda_ctx *cx, const ps_conv2d *g, int B)
{
    /* The products narrow (w, col), (dy, col) and (w, dy): room for the
     * larger of w and dy, then the larger of col and dy. */
    size_t K = (size_t)g->in.c * g->k_h * g->k_w, P = (size_t)g->out_h * g->out_w;
    size_t w = (size_t)g->out_c * K, col = (size_t)B * K * P, dy = (size_t)B * g->out_c * P;
    size_t base = ps__round_up(ps__conv_floats(g, B), PS__BF16_ALIGN / 2);

    return base + ps__bf16_floats(cx, w > dy ? w : dy, col > dy ? col : dy);
}

/* Where the bf16 operands of a convolution's products go. */
static float *ps__conv_bf16(const ps_conv2d *g, int B, float *ws)
{
    return ws + ps__round_up(ps__conv_floats(g, B), PS__BF16_ALIGN / 2);
}

extern "C" int ps_cuda_conv2d_forward(const ps_cuda_ctx *cx, const ps_conv2d *g, int B,
                                      const float *x, const float *w, const float *b, float *y,
                                      float *ws)
{
    int K = g->in.c * g->k_h * g->k_w, P = g->out_h * g->out_w, rc;
    size_t n_col = (size_t)B * K * P, n_y = (size_t)B * g->out_c * P;

    if (B == 0)
        return 0;
    ps__layers_cuda_im2col<<<ps__cuda_grid_blocks(n_col), PS_CUDA_THREADS, 0, cx->stream>>>(
        *g, n_col, x, ws);
    if ((rc = ps__cu(cudaGetLastError())) != 0)
        return rc;
    /* y_n[out_c][P] = W[out_c][K] col_n[K][P] for every n; W is shared. */
    rc = ps__gemm(cx, 0, 0, g->out_c, P, K, w, K, 0, ws, P, (long long)K * P, 0.0f, y, P,
                  (long long)g->out_c * P, B, ps__conv_bf16(g, B, ws));
    if (rc)
        return rc;
    ps__channel_bias<<<ps__cuda_grid_blocks(n_y), PS_CUDA_THREADS, 0, cx->stream>>>(y, b, n_y, P,
                                                                                    g->out_c);
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
    ps__channel_bias_grad<<<(unsigned int)g->out_c, PS_CUDA_THREADS, 0, cx->stream>>>(dy, db, B, P,
                                                                                      g->out_c);
    ps__layers_cuda_im2col<<<ps__cuda_grid_blocks(n_col), PS_CUDA_THREADS, 0, cx->stream>>>(
        *g, n_col, x, ws);
    if ((rc = ps__cu(cudaGetLastError())) != 0)
        return rc;
    /* part_n[out_c][K] = dy_n[out_c][P] col_n^T, then summed in sample order. */
    rc = ps__gemm(cx, 0, 1, g->out_c, K, P, dy, P, (long long)g->out_c * P, ws, P, (long long)K * P,
                  0.0f, part, K, (long long)n_w, B, ps__conv_bf16(g, B, ws));
    if (rc)
        return rc;
    ps__sum_batch<<<ps__cuda_grid_blocks(n_w), PS_CUDA_THREADS, 0, cx->stream>>>(part, dw, n_w, B);
    if ((rc = ps__cu(cudaGetLastError())) != 0 || !dx)
        return rc;
    /* dcol_n[K][P] = W^T dy_n, into the windows' space, then gathered into dx. */
    rc = ps__gemm(cx, 1, 0, K, P, g->out_c, w, K, 0, dy, P, (long long)g->out_c * P, 0.0f, ws, P,
                  (long long)K * P, B, ps__conv_bf16(g, B, ws));
    if (rc)
        return rc;
    ps__layers_cuda_col2im<<<ps__cuda_grid_blocks(n_x), PS_CUDA_THREADS, 0, cx->stream>>>(*g, n_x,
                                                                                          ws, dx);
    return ps__cu(cudaGetLastError());
}

extern "C" int ps_cuda_maxpool2d_forward(const ps_cuda_ctx *cx, const ps_maxpool2d *g, int B,
                                         const float *x, float *y, int32_t *argmax)
{
    size_t n = (size_t)B * g->in.c * g->out_h * g->out_w;

    if (n == 0)
        return 0;
    ps__maxpool_fwd<<<ps__cuda_grid_blocks(n), PS_CUDA_THREADS, 0, cx->stream>>>(*g, n, x, y,
                                                                                 argmax);
    return ps__cu(cudaGetLastError());
}

extern "C" int ps_cuda_maxpool2d_backward(const ps_cuda_ctx *cx, const ps_maxpool2d *g, int B,
                                          const float *dy, const int32_t *argmax, float *dx)
{
    size_t n = (size_t)B * ps_shape_count(g->in);

    if (n == 0)
        return 0;
    ps__maxpool_bwd<<<ps__cuda_grid_blocks(n), PS_CUDA_THREADS, 0, cx->stream>>>(*g, n, dy, argmax,
                                                                                 dx);
    return ps__cu(cudaGetLastError());
}

extern "C" int ps_cuda_relu_forward(const ps_cuda_ctx *cx, size_t n, const float *x, float *y)
{
    if (n == 0)
        return 0;
    ps__relu_fwd<<<ps__cuda_grid_blocks(n), PS_CUDA_THREADS, 0, cx->stream>>>(n, x, y);
    return ps__cu(cudaGetLastError());
}

extern "C" int ps_cuda_relu_backward(const ps_cuda_ctx *cx, size_t n, const float *y,
                                     const float *dy, float *dx)
{
    if (n == 0)
        return 0;
    ps__relu_bwd<<<ps__cuda_grid_blocks(n), PS_CUDA_THREADS, 0, cx->stream>>>(n, y, dy, dx);
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
static int ps__layers_cuda_dropout_apply(const ps_cuda_ctx *cx, const ps_dropout *g, uint64_t step,
                                         int training, size_t n, const float *x, float *y)
{
    if (!training)
        return ps_cuda_flatten_forward(cx, n, x, y);
    if (n == 0)
        return 0;
    ps__dropout<<<ps__cuda_grid_blocks(n), PS_CUDA_THREADS, 0, cx->stream>>>(
        n, ps_dropout_key(g->seed, step), g->keep_threshold, g->scale, x, y);
    return ps__cu(cudaGetLastError());
}

extern "C" int ps_cuda_dropout_forward(const ps_cuda_ctx *cx, const ps_dropout *g, uint64_t step,
                                       int training, size_t n, const float *x, float *y)
{
    return ps__layers_cuda_dropout_apply(cx, g, step, training, n, x, y);
}

extern "C" int ps_cuda_dropout_backward(const ps_cuda_ctx *cx, const ps_dropout *g, uint64_t step,
                                        int training, size_t n, const float *dy, float *dx)
{
    return ps__layers_cuda_dropout_apply(cx, g, step, training, n, dy, dx);
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

extern "C" int ps_cuda_predict(const ps_cuda_ctx *cx, int B, int C, const float *logits,
                               uint8_t *pred)
{
    if (B < 1)
        return 0;
    ps__layers_cuda_predict<<<ps__cuda_grid_blocks((size_t)B), PS_CUDA_THREADS, 0, cx->stream>>>(
        B, C, logits, pred);
    return ps__cu(cudaGetLastError());
}

extern "C" int ps_cuda_clip_norm(const ps_cuda_ctx *cx, size_t n, float *g, float max_norm,
                                 double *part)
{
    if (n == 0)
        return 0;
    ps__sumsq_parts<<<PS_CUDA_CLIP_PARTS, PS_CUDA_THREADS, 0, cx->stream>>>(n, g, part);
    ps__clip_scale<<<ps__cuda_grid_blocks(n), PS_CUDA_THREADS, 0, cx->stream>>>(n, g, max_norm,
                                                                                part);
    return ps__cu(cudaGetLastError());
}
