/* The launch shape every element-wise and per-row kernel of cuda_kernels.cu
 * and layers_cuda.cu uses: one block size, and a grid capped so that
 * grid-stride loops cover whatever is left. One copy, so both files launch
 * alike. */
#ifndef PS_CUDA_GRID_CUH
#define PS_CUDA_GRID_CUH

#include <stddef.h>

/* Threads per block of the element-wise and per-row kernels. */
#define PS_CUDA_THREADS 256
/* Enough blocks to fill any current GPU; grid-stride loops cover the rest. */
#define PS_CUDA_MAX_BLOCKS 4096

/* Blocks for a grid-stride loop over n elements. */
static inline unsigned int ps__cuda_grid_blocks(size_t n)
{
    size_t b = (n + PS_CUDA_THREADS - 1) / PS_CUDA_THREADS;
    return b > PS_CUDA_MAX_BLOCKS ? PS_CUDA_MAX_BLOCKS : (unsigned int)b;
}

#endif
