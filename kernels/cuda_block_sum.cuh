/* A block-wide sum for the CUDA kernels (cuda_kernels.cu, layers_cuda.cu):
 * every thread's value stored in shared memory, then folded pairwise in a
 * fixed tree, so the result is the same on every run (unlike atomics). */
#ifndef PS_CUDA_BLOCK_SUM_CUH
#define PS_CUDA_BLOCK_SUM_CUH

/* The sum of s over the block. Every thread of the block must call it;
 * blockDim.x must be a power of two and part must hold blockDim.x values.
 * Every thread gets the sum. */
template <typename T> static __device__ T ps__block_sum(T s, T *part)
{
    part[threadIdx.x] = s;
    __syncthreads();
    for (unsigned int h = blockDim.x / 2; h > 0; h /= 2) {
        if (threadIdx.x < h)
            part[threadIdx.x] += part[threadIdx.x + h];
        __syncthreads();
    }
    return part[0];
}

#endif
