/* CUDA kernels shared by the layer library's GPU half and the CUDA backend,
 * and their launchers (see cuda_kernels.h).
 *
 * Each kernel mirrors a CPU function of cpu_kernels.c closely enough that
 * tests/cuda can hold them to tight tolerances: same comparisons (so NaN and
 * -0 go the same way through the arg-max), same formula for the
 * softmax gradient, and every reduction in a fixed order so a run repeats
 * bit for bit. Sizes here are small (a batch of 64 to 256 rows, layers of at
 * most a few thousand units), so the kernels aim at being obviously right and
 * at touching memory once, not at peak bandwidth; cuBLAS does the heavy work. */
#include "cuda_kernels.h"

#include "cuda_block_sum.cuh"
#include "cuda_grid.cuh"

/* The bias gradient: 32 columns per block (one warp reads 32 neighbouring
 * floats of a row), 16 rows summed at once, then folded in shared memory. */
#define PS__BG_COLS 32
#define PS__BG_ROWS 16
#define PS__WARP    32

static __global__ void ps__bias_grad(const float *dy, float *db, int B, int out)
{
    __shared__ float part[PS__BG_ROWS][PS__BG_COLS];
    int o = (int)(blockIdx.x * PS__BG_COLS + threadIdx.x);
    float s = 0.0f;

    if (o < out)
        for (int i = (int)threadIdx.y; i < B; i += PS__BG_ROWS)
            s += dy[(size_t)i * (size_t)out + (size_t)o];
    part[threadIdx.y][threadIdx.x] = s;
    __syncthreads();
    for (int h = PS__BG_ROWS / 2; h > 0; h /= 2) {
        if ((int)threadIdx.y < h)
            part[threadIdx.y][threadIdx.x] += part[threadIdx.y + h][threadIdx.x];
        __syncthreads();
    }
    if (threadIdx.y == 0 && o < out)
        db[o] = part[0][threadIdx.x];
}

/* One warp per row: the lanes stride over the classes, then combine their
 * maxima and sums with butterfly shuffles so every lane ends with the row's
 * values. */
static __global__ void ps__kernels_softmax_xent(const float *logits, const uint8_t *labels,
                                                float *dlogits, float *row_loss, int B, int C)
{
    int row = (int)((blockIdx.x * blockDim.x + threadIdx.x) / PS__WARP);
    int lane = (int)(threadIdx.x % PS__WARP);
    const float *l;
    float max, sum = 0.0f;
    int label;

    /* All 32 lanes of a warp share one row, so a warp leaves here whole and
     * the full-mask shuffles below always see every lane. */
    if (row >= B)
        return;
    l = logits + (size_t)row * (size_t)C;
    label = labels[row];
    max = l[0];
    for (int c = lane; c < C; c += PS__WARP)
        max = fmaxf(max, l[c]);
    for (int off = PS__WARP / 2; off > 0; off /= 2)
        max = fmaxf(max, __shfl_xor_sync(0xffffffffu, max, off));
    for (int c = lane; c < C; c += PS__WARP)
        sum += expf(l[c] - max);
    for (int off = PS__WARP / 2; off > 0; off /= 2)
        sum += __shfl_xor_sync(0xffffffffu, sum, off);
    if (lane == 0)
        row_loss[row] = logf(sum) - (l[label] - max);
    if (dlogits != NULL) {
        float *d = dlogits + (size_t)row * (size_t)C;
        float scale = 1.0f / (sum * (float)B);
        /* Multiply, then subtract, each rounded as on the CPU: a fused
         * multiply-add would round differently. */
        for (int c = lane; c < C; c += PS__WARP) {
            float v = __fmul_rn(expf(l[c] - max), scale);
            d[c] = c == label ? v - 1.0f / (float)B : v;
        }
    }
}

static __global__ void ps__sum_add(const float *v, int n, double *acc)
{
    __shared__ double part[PS_CUDA_THREADS];
    double s = 0.0;

    for (int i = (int)threadIdx.x; i < n; i += PS_CUDA_THREADS)
        s += v[i];
    s = ps__block_sum(s, part);
    /* A single block, and kernels on a stream run in order: a plain add is
     * race-free and keeps the total deterministic. */
    if (threadIdx.x == 0)
        *acc += s;
}

static __global__ void ps__count_correct(const float *logits, const uint8_t *labels, int B, int C,
                                         int *count)
{
    int row = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    int hit = 0, block_hits;

    if (row < B) {
        const float *l = logits + (size_t)row * (size_t)C;
        int best = 0;
        for (int c = 1; c < C; c++)
            if (l[c] > l[best])
                best = c;
        hit = best == labels[row];
    }
    /* Every thread reaches the barrier, including those past the last row. */
    block_hits = __syncthreads_count(hit);
    if (threadIdx.x == 0 && block_hits > 0)
        atomicAdd(count, block_hits);
}

extern "C" cudaError_t ps_cuda_check_image(void)
{
    struct cudaFuncAttributes attr;

    /* Any kernel will do: they are all compiled for the same architectures. */
    return cudaFuncGetAttributes(&attr, ps__sum_add);
}

/* The integer arithmetic of the CPU reference (common/half.c): adding
 * 0x7fff, plus one when the kept part is odd, carries into the kept bits
 * exactly when rounding to nearest even goes up. */
static __global__ void ps__f32_to_bf16(uint16_t *dst, const float *src, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)gridDim.x * blockDim.x) {
        unsigned int x = __float_as_uint(src[i]);
        dst[i] = (x & 0x7fffffffu) > 0x7f800000u
                     ? (uint16_t)((x >> 16) | 0x0040u)
                     : (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
    }
}

extern "C" cudaError_t ps_cuda_bias_grad(const float *dy, float *db, int B, int out,
                                         cudaStream_t stream)
{
    dim3 block(PS__BG_COLS, PS__BG_ROWS);
    unsigned int grid = (unsigned int)((out + PS__BG_COLS - 1) / PS__BG_COLS);

    if (B < 1 || out < 1)
        return cudaSuccess;
    ps__bias_grad<<<grid, block, 0, stream>>>(dy, db, B, out);
    return cudaGetLastError();
}

extern "C" cudaError_t ps_cuda_softmax_xent(const float *logits, const uint8_t *labels,
                                            float *dlogits, float *row_loss, int B, int C,
                                            cudaStream_t stream)
{
    const int rows_per_block = PS_CUDA_THREADS / PS__WARP;
    unsigned int grid = (unsigned int)((B + rows_per_block - 1) / rows_per_block);

    if (B < 1 || C < 1)
        return cudaSuccess;
    ps__kernels_softmax_xent<<<grid, PS_CUDA_THREADS, 0, stream>>>(logits, labels, dlogits,
                                                                   row_loss, B, C);
    return cudaGetLastError();
}

extern "C" cudaError_t ps_cuda_sum_add(const float *v, int n, double *acc, cudaStream_t stream)
{
    if (n < 1)
        return cudaSuccess;
    ps__sum_add<<<1, PS_CUDA_THREADS, 0, stream>>>(v, n, acc);
    return cudaGetLastError();
}

extern "C" cudaError_t ps_cuda_count_correct(const float *logits, const uint8_t *labels, int B,
                                             int C, int *count, cudaStream_t stream)
{
    unsigned int grid = (unsigned int)((B + PS_CUDA_THREADS - 1) / PS_CUDA_THREADS);

    if (B < 1 || C < 1)
        return cudaSuccess;
    ps__count_correct<<<grid, PS_CUDA_THREADS, 0, stream>>>(logits, labels, B, C, count);
    return cudaGetLastError();
}

extern "C" cudaError_t ps_cuda_f32_to_bf16(uint16_t *dst, const float *src, size_t n,
                                           cudaStream_t stream)
{
    if (n == 0)
        return cudaSuccess;
    ps__f32_to_bf16<<<ps__cuda_grid_blocks(n), PS_CUDA_THREADS, 0, stream>>>(dst, src, n);
    return cudaGetLastError();
}
