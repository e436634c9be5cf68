/* The devices' tables of operations that the model executor (model.h) runs
 * on: one per place a model can compute. Each is data, a struct of function
 * pointers, so the executor is the same code on every device and a test can
 * look at what each table holds (tests/unit/test_backend.c) and what its
 * object files call (tests/cuda/ops_link.sh).
 *
 * - ps_backend_cpu_ops (backend_cpu_ops.c): the layer library on host memory,
 *   OpenBLAS for the products; its device context is NULL. The backend's
 *   "cpu", shardps-eval, and the reference every other table is tested
 *   against.
 * - ps_backend_cuda_ops (backend_cuda_ops.c, only in a build with CUDA):
 *   kernels/layers_cuda.h on device memory; its device context is a
 *   ps_cuda_ctx (the cuBLAS handle, the stream and the precision of the
 *   products), owned by the CUDA backend. */
#ifndef PS_BACKEND_OPS_H
#define PS_BACKEND_OPS_H

#include "model.h"

extern const ps_model_ops ps_backend_cpu_ops;
extern const ps_model_ops ps_backend_cuda_ops;

#endif
