/* The CUDA compute backend: the MLP with its weights, activations and
 * gradients in GPU memory, the matrix products on cuBLAS and the rest on the
 * kernels of kernels/cuda_kernels.cu.
 *
 * The key-value client still needs host memory, so the parameters and
 * gradients also live in pinned host mirrors (base.params / base.grads).
 * Two streams let copies overlap compute: "copy" uploads the parameters layer
 * by layer and records an event per layer that the forward pass waits on, so
 * layer 0 computes while the later layers are still in flight; during the
 * backward pass each layer's gradient is copied back on "copy" as soon as
 * "compute" has produced it, while "compute" goes on with the layer below.
 * Every CUDA and cuBLAS status is checked, logged with what was being done,
 * and returned as -ENOMEM (allocation) or -EIO (anything else).
 *
 * cuBLAS is column-major and our matrices are row-major, which is the same
 * memory read as the transpose: a row-major X[r,c] is a column-major X^T[c,r]
 * with leading dimension c. Each product below is written out in those terms. */
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_impl.h"
#include "cuda_kernels.h"
#include "ps_log.h"

/* Sub-buffers start on 256-byte boundaries, the alignment of a fresh
 * cudaMalloc, so every cuBLAS operand is as aligned as its own allocation. */
#define PS__ALIGN 256

/* What a step or an evaluation reports back, summed on the device. */
typedef struct {
    double loss_sum;
    int correct;
} ps__stats;

typedef struct {
    ps_backend base; /* first, so a ps_backend * is a ps__cuda *; its buffers are pinned */
    ps_model_spec spec;
    int tf32;
    cudaStream_t compute, copy;
    cublasHandle_t blas;
    /* Per layer: its parameters are on the device / its gradients are ready. */
    cudaEvent_t param_ready[PS_MAX_LAYERS], grad_ready[PS_MAX_LAYERS];
    /* One device allocation and one pinned host allocation, carved up below. */
    char *dev_arena, *host_arena;
    float *d_params[PS_MAX_TENSORS], *d_grads[PS_MAX_TENSORS];
    float *d_act[PS_MAX_LAYERS]; /* output of layer l, after its ReLU except the logits */
    float *d_delta[2];           /* back-propagated deltas: layer l reads one, writes the other */
    float *d_x, *d_row_loss;
    uint8_t *d_y;
    ps__stats *d_stats, *h_stats;
} ps__cuda;

static int ps__cuda_check(cudaError_t err, const char *what)
{
    if (err == cudaSuccess)
        return 0;
    ps_error("CUDA failed while %s: %s (%s)", what, cudaGetErrorString(err), cudaGetErrorName(err));
    return err == cudaErrorMemoryAllocation ? -ENOMEM : -EIO;
}

static int ps__blas_check(cublasStatus_t st, const char *what)
{
    if (st == CUBLAS_STATUS_SUCCESS)
        return 0;
    ps_error("cuBLAS failed while %s: %s", what, cublasGetStatusString(st));
    return st == CUBLAS_STATUS_ALLOC_FAILED ? -ENOMEM : -EIO;
}

/* A bump allocator over one arena. With a NULL base it hands out NULLs and
 * only measures, so the same layout code sizes the arena and then carves it. */
typedef struct {
    char *base;
    size_t used;
} ps__arena;

static void *ps__take(ps__arena *a, size_t bytes)
{
    void *p = a->base ? a->base + a->used : NULL;

    a->used += (bytes + PS__ALIGN - 1) / PS__ALIGN * PS__ALIGN;
    return p;
}

static void ps__layout(ps__cuda *c, ps__arena *dev, ps__arena *host)
{
    const ps_model_spec *s = &c->spec;
    size_t batch = (size_t)c->base.max_batch, widest = 0;

    for (int t = 0; t < s->n_tensors; t++) {
        size_t bytes = s->tensors[t].numel * sizeof(float);
        c->d_params[t] = ps__take(dev, bytes);
        c->d_grads[t] = ps__take(dev, bytes);
        c->base.params[t] = ps__take(host, bytes);
        c->base.grads[t] = ps__take(host, bytes);
    }
    for (int l = 0; l < s->n_layers; l++) {
        size_t w = (size_t)s->sizes[l + 1];
        c->d_act[l] = ps__take(dev, batch * w * sizeof(float));
        widest = w > widest ? w : widest;
    }
    c->d_delta[0] = ps__take(dev, batch * widest * sizeof(float));
    c->d_delta[1] = ps__take(dev, batch * widest * sizeof(float));
    c->d_x = ps__take(dev, batch * (size_t)s->sizes[0] * sizeof(float));
    c->d_y = ps__take(dev, batch);
    c->d_row_loss = ps__take(dev, batch * sizeof(float));
    c->d_stats = ps__take(dev, sizeof(ps__stats));
    c->h_stats = ps__take(host, sizeof(ps__stats));
}

/* C[m,n] = op(A)[m,k] op(B)[k,n], all column-major, on the compute stream;
 * FP32 (cublasSgemm), or TF32 tensor-core math (cublasGemmEx) under --tf32. */
static int ps__gemm(ps__cuda *c, cublasOperation_t ta, cublasOperation_t tb, int m, int n, int k,
                    const float *A, int lda, const float *B, int ldb, float *C, int ldc)
{
    const float one = 1.0f, zero = 0.0f;

    if (c->tf32)
        return ps__blas_check(cublasGemmEx(c->blas, ta, tb, m, n, k, &one, A, CUDA_R_32F, lda, B,
                                           CUDA_R_32F, ldb, &zero, C, CUDA_R_32F, ldc,
                                           CUBLAS_COMPUTE_32F_FAST_TF32, CUBLAS_GEMM_DEFAULT),
                              "multiplying matrices (cublasGemmEx, TF32)");
    return ps__blas_check(
        cublasSgemm(c->blas, ta, tb, m, n, k, &one, A, lda, B, ldb, &zero, C, ldc),
        "multiplying matrices (cublasSgemm)");
}

static void ps__cuda_free(ps_backend *b)
{
    ps__cuda *c = (ps__cuda *)b;

    /* Failures are logged and otherwise ignored: there is nothing left to do
     * with the device. cudaFree waits for work still queued. */
    for (int l = 0; l < PS_MAX_LAYERS; l++) {
        if (c->param_ready[l])
            ps__cuda_check(cudaEventDestroy(c->param_ready[l]), "destroying an event");
        if (c->grad_ready[l])
            ps__cuda_check(cudaEventDestroy(c->grad_ready[l]), "destroying an event");
    }
    if (c->blas)
        ps__blas_check(cublasDestroy(c->blas), "destroying the cuBLAS handle");
    if (c->compute)
        ps__cuda_check(cudaStreamDestroy(c->compute), "destroying a stream");
    if (c->copy)
        ps__cuda_check(cudaStreamDestroy(c->copy), "destroying a stream");
    if (c->dev_arena)
        ps__cuda_check(cudaFree(c->dev_arena), "freeing device memory");
    if (c->host_arena)
        ps__cuda_check(cudaFreeHost(c->host_arena), "freeing pinned host memory");
    free(c);
}

static int ps__cuda_load_params(ps_backend *b)
{
    ps__cuda *c = (ps__cuda *)b;
    int rc = 0;

    for (int l = 0; l < c->spec.n_layers && rc == 0; l++) {
        for (int t = 2 * l; t <= 2 * l + 1 && rc == 0; t++)
            rc = ps__cuda_check(cudaMemcpyAsync(c->d_params[t], b->params[t],
                                                c->spec.tensors[t].numel * sizeof(float),
                                                cudaMemcpyHostToDevice, c->copy),
                                "uploading parameters");
        if (rc == 0)
            rc = ps__cuda_check(cudaEventRecord(c->param_ready[l], c->copy),
                                "recording an upload event");
    }
    return rc;
}

/* Starts copying layer l's gradients to the host mirrors once compute has
 * produced them, without holding compute up. */
static int ps__download_grads(ps__cuda *c, int l)
{
    int rc =
        ps__cuda_check(cudaEventRecord(c->grad_ready[l], c->compute), "recording a gradient event");

    if (rc == 0)
        rc = ps__cuda_check(cudaStreamWaitEvent(c->copy, c->grad_ready[l], 0),
                            "ordering a gradient copy");
    for (int t = 2 * l; t <= 2 * l + 1 && rc == 0; t++)
        rc = ps__cuda_check(cudaMemcpyAsync(c->base.grads[t], c->d_grads[t],
                                            c->spec.tensors[t].numel * sizeof(float),
                                            cudaMemcpyDeviceToHost, c->copy),
                            "copying gradients to the host");
    return rc;
}

/* Copies a batch from (pageable) host memory to d_x and d_y. The copy
 * returns once the runtime has staged the bytes, so x and y are free again. */
static int ps__put_batch(ps__cuda *c, const float *x, const uint8_t *y, int B)
{
    int rc = ps__cuda_check(cudaMemcpyAsync(c->d_x, x,
                                            (size_t)B * (size_t)c->spec.sizes[0] * sizeof(float),
                                            cudaMemcpyHostToDevice, c->compute),
                            "copying a batch to the GPU");
    if (rc == 0)
        rc = ps__cuda_check(
            cudaMemcpyAsync(c->d_y, y, (size_t)B, cudaMemcpyHostToDevice, c->compute),
            "copying labels to the GPU");
    return rc;
}

/* Runs the layers on d_x[B, input]; *logits points at the last activation. */
static int ps__forward(ps__cuda *c, int B, const float **logits)
{
    const int *sz = c->spec.sizes;
    int L = c->spec.n_layers, rc = 0;
    const float *in = c->d_x;

    for (int l = 0; l < L && rc == 0; l++) {
        rc = ps__cuda_check(cudaStreamWaitEvent(c->compute, c->param_ready[l], 0),
                            "waiting for the parameters");
        /* act[B,out] = in[B,in] w[out,in]^T, read column-major:
         * act^T[out,B] = (w^T[in,out])^T in^T[in,B], so A = w transposed
         * (lda = in), B = in as is (ldb = in), C = act (ldc = out). */
        if (rc == 0)
            rc = ps__gemm(c, CUBLAS_OP_T, CUBLAS_OP_N, sz[l + 1], B, sz[l], c->d_params[2 * l],
                          sz[l], in, sz[l], c->d_act[l], sz[l + 1]);
        if (rc == 0)
            rc = ps__cuda_check(ps_cuda_bias_act_fwd(c->d_act[l], c->d_params[2 * l + 1], B,
                                                     sz[l + 1], l < L - 1, c->compute),
                                "launching bias_act_fwd");
        in = c->d_act[l];
    }
    *logits = in;
    return rc;
}

/* Adds the batch's loss and correct count to d_stats; writes the gradient of
 * the mean loss into dlogits unless it is NULL. */
static int ps__score(ps__cuda *c, const float *logits, float *dlogits, int B)
{
    int C = c->spec.sizes[c->spec.n_layers];
    int rc = ps__cuda_check(
        ps_cuda_softmax_xent(logits, c->d_y, dlogits, c->d_row_loss, B, C, c->compute),
        "launching softmax_xent");
    if (rc == 0)
        rc = ps__cuda_check(ps_cuda_sum_add(c->d_row_loss, B, &c->d_stats->loss_sum, c->compute),
                            "launching sum_add");
    if (rc == 0)
        rc = ps__cuda_check(
            ps_cuda_count_correct(logits, c->d_y, B, C, &c->d_stats->correct, c->compute),
            "launching count_correct");
    return rc;
}

/* Brings d_stats to the host and waits for both streams; asynchronous
 * errors of anything queued before surface here. */
static int ps__finish(ps__cuda *c)
{
    int rc = ps__cuda_check(cudaMemcpyAsync(c->h_stats, c->d_stats, sizeof(ps__stats),
                                            cudaMemcpyDeviceToHost, c->compute),
                            "copying the loss to the host");
    if (rc == 0)
        rc = ps__cuda_check(cudaStreamSynchronize(c->compute), "running the step");
    if (rc == 0)
        rc = ps__cuda_check(cudaStreamSynchronize(c->copy), "copying to and from the GPU");
    return rc;
}

/* The MLP has no dropout, so the step changes nothing. */
static int ps__cuda_train_step(ps_backend *b, const float *x, const uint8_t *y, int B,
                               uint64_t step, float *loss, int *correct)
{
    ps__cuda *c = (ps__cuda *)b;
    const int *sz = c->spec.sizes;
    int L = c->spec.n_layers, rc;
    float *dy = c->d_delta[0], *dx = c->d_delta[1];
    const float *logits;

    (void)step;
    rc = ps__put_batch(c, x, y, B);
    if (rc == 0)
        rc = ps__forward(c, B, &logits);
    if (rc == 0)
        rc = ps__cuda_check(cudaMemsetAsync(c->d_stats, 0, sizeof(ps__stats), c->compute),
                            "clearing the loss total");
    if (rc == 0)
        rc = ps__score(c, logits, dy, B);
    for (int l = L - 1; l >= 0 && rc == 0; l--) {
        const float *in = l > 0 ? c->d_act[l - 1] : c->d_x;
        float *next = dx;

        /* dw[out,in] = dy^T[out,B] in[B,in], read column-major:
         * dw^T[in,out] = in^T[in,B] (dy^T[out,B])^T, so A = in as is
         * (lda = in), B = dy transposed (ldb = out), C = dw (ldc = in). */
        rc = ps__gemm(c, CUBLAS_OP_N, CUBLAS_OP_T, sz[l], sz[l + 1], B, in, sz[l], dy, sz[l + 1],
                      c->d_grads[2 * l], sz[l]);
        if (rc == 0)
            rc = ps__cuda_check(
                ps_cuda_bias_grad(dy, c->d_grads[2 * l + 1], B, sz[l + 1], c->compute),
                "launching bias_grad");
        if (rc == 0)
            rc = ps__download_grads(c, l);
        if (rc < 0 || l == 0)
            break;
        /* dx[B,in] = dy[B,out] w[out,in], read column-major:
         * dx^T[in,B] = w^T[in,out] dy^T[out,B], so A = w as is (lda = in),
         * B = dy as is (ldb = out), C = next (ldc = in). */
        rc = ps__gemm(c, CUBLAS_OP_N, CUBLAS_OP_N, sz[l], B, sz[l + 1], c->d_params[2 * l], sz[l],
                      dy, sz[l + 1], next, sz[l]);
        if (rc == 0)
            rc = ps__cuda_check(
                ps_cuda_relu_bwd(c->d_act[l - 1], next, (size_t)B * (size_t)sz[l], c->compute),
                "launching relu_bwd");
        /* The delta just written feeds the layer below; dy's buffer is free. */
        dx = dy;
        dy = next;
    }
    if (rc == 0)
        rc = ps__finish(c);
    if (rc < 0)
        return rc;
    for (int l = L - 1; l >= 0 && b->on_layer; l--)
        b->on_layer(b->on_layer_arg, 2 * l, 2);
    *loss = (float)(c->h_stats->loss_sum / B);
    *correct = c->h_stats->correct;
    return 0;
}

static int ps__cuda_evaluate(ps_backend *b, const float *x, const uint8_t *y, int n, float *loss,
                             int *correct)
{
    ps__cuda *c = (ps__cuda *)b;
    int input = c->spec.sizes[0], max_batch = c->base.max_batch, rc;

    rc = ps__cuda_check(cudaMemsetAsync(c->d_stats, 0, sizeof(ps__stats), c->compute),
                        "clearing the loss total");
    for (int start = 0; start < n && rc == 0; start += max_batch) {
        int B = n - start < max_batch ? n - start : max_batch;
        const float *logits;

        rc = ps__put_batch(c, x + (size_t)start * (size_t)input, y + start, B);
        if (rc == 0)
            rc = ps__forward(c, B, &logits);
        if (rc == 0)
            rc = ps__score(c, logits, NULL, B);
    }
    if (rc == 0)
        rc = ps__finish(c);
    if (rc < 0)
        return rc;
    *loss = (float)(c->h_stats->loss_sum / n);
    *correct = c->h_stats->correct;
    return 0;
}

static const ps__backend_ops ps__cuda_ops = {
    .free = ps__cuda_free,
    .load_params = ps__cuda_load_params,
    .train_step = ps__cuda_train_step,
    .evaluate = ps__cuda_evaluate,
};

/* Picks GPU device_index % count and checks that this build's kernels run
 * on it. Returns 0, or -ENODEV with the reason in why. */
static int ps__pick_gpu(const ps_backend_config *cfg, int *dev, int *count, char *why,
                        size_t why_len)
{
    cudaError_t err = cudaGetDeviceCount(count);

    if (err != cudaSuccess) {
        snprintf(why, why_len, "no usable GPU (cudaGetDeviceCount: %s)", cudaGetErrorString(err));
        return -ENODEV;
    }
    if (*count < 1) {
        snprintf(why, why_len, "no GPU is visible (cudaGetDeviceCount found none)");
        return -ENODEV;
    }
    *dev = (cfg->device_index < 0 ? 0 : cfg->device_index) % *count;
    err = cudaSetDevice(*dev);
    if (err == cudaSuccess)
        err = ps_cuda_check_image();
    if (err != cudaSuccess) {
        snprintf(why, why_len, "GPU %d is not usable (%s)", *dev, cudaGetErrorString(err));
        return -ENODEV;
    }
    return 0;
}

int ps__backend_cuda_init(ps_backend **out, const ps_model_spec *spec, const ps_backend_config *cfg,
                          char *why, size_t why_len)
{
    struct cudaDeviceProp prop;
    ps__arena dev = {NULL, 0}, host = {NULL, 0};
    ps__cuda *c = NULL;
    int L = spec->n_layers, devno, count, rc;

    /* The GPU first: without one, --device auto goes on to the CPU, which
     * judges the arguments itself. */
    *out = NULL;
    rc = ps__pick_gpu(cfg, &devno, &count, why, why_len);
    if (rc < 0)
        return rc;
    /* This backend runs the table's MLP view only (dense layers with ReLU
     * between them); any other model computes on the CPU. */
    if (L < 1) {
        snprintf(why, why_len, "the CUDA backend runs only dense layers with ReLU between them");
        return -ENODEV;
    }
    if (L > PS_MAX_LAYERS || spec->n_tensors != 2 * L || cfg->max_batch < 1)
        return -EINVAL;
    for (int l = 0; l <= L; l++)
        if (spec->sizes[l] < 1)
            return -EINVAL;
    rc = ps__cuda_check(cudaGetDeviceProperties(&prop, devno), "reading the GPU's properties");
    if (rc < 0)
        return rc;
    c = calloc(1, sizeof(*c));
    if (c == NULL)
        return -ENOMEM;
    c->base.ops = &ps__cuda_ops;
    c->base.device = PS_DEVICE_CUDA;
    c->base.max_batch = cfg->max_batch;
    c->spec = *spec;
    c->tf32 = cfg->tf32;
    /* Non-blocking streams: nothing here may wait on the legacy default
     * stream, nor it on us. */
    rc = ps__cuda_check(cudaStreamCreateWithFlags(&c->compute, cudaStreamNonBlocking),
                        "creating a stream");
    if (rc == 0)
        rc = ps__cuda_check(cudaStreamCreateWithFlags(&c->copy, cudaStreamNonBlocking),
                            "creating a stream");
    if (rc == 0)
        rc = ps__blas_check(cublasCreate(&c->blas), "creating a cuBLAS handle");
    if (rc == 0)
        rc = ps__blas_check(cublasSetStream(c->blas, c->compute), "setting the cuBLAS stream");
    for (int l = 0; l < L && rc == 0; l++) {
        rc = ps__cuda_check(cudaEventCreateWithFlags(&c->param_ready[l], cudaEventDisableTiming),
                            "creating an event");
        if (rc == 0)
            rc = ps__cuda_check(cudaEventCreateWithFlags(&c->grad_ready[l], cudaEventDisableTiming),
                                "creating an event");
    }
    if (rc < 0)
        goto fail;
    ps__layout(c, &dev, &host);
    rc = ps__cuda_check(cudaMalloc((void **)&c->dev_arena, dev.used), "allocating GPU memory");
    if (rc == 0)
        rc = ps__cuda_check(cudaMallocHost((void **)&c->host_arena, host.used),
                            "allocating pinned host memory");
    if (rc < 0)
        goto fail;
    dev = (ps__arena){c->dev_arena, 0};
    host = (ps__arena){c->host_arena, 0};
    ps__layout(c, &dev, &host);
    for (int t = 0; t < spec->n_tensors; t++) {
        ps_model_spec_init_values(spec, t, 0, spec->tensors[t].numel, c->base.params[t]);
        memset(c->base.grads[t], 0, spec->tensors[t].numel * sizeof(float));
    }
    rc = ps__cuda_load_params(&c->base);
    if (rc < 0)
        goto fail;
    snprintf(c->base.describe, sizeof(c->base.describe),
             "cuda: %.100s (GPU %d of %d, sm_%d%d, %.0f GiB), cuBLAS %s", prop.name, devno, count,
             prop.major, prop.minor, (double)prop.totalGlobalMem / (1 << 30),
             c->tf32 ? "TF32" : "FP32");
    *out = &c->base;
    return 0;

fail:
    ps__cuda_free(&c->base);
    return rc;
}

#ifdef __SANITIZE_ADDRESS__
/* AddressSanitizer protects a "shadow gap" of the address space that the
 * CUDA driver maps memory into, so a sanitizer build that talks to a GPU
 * must leave it open. ASan reads this hook at start-up; ASAN_OPTIONS still
 * overrides it. */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
    return "protect_shadow_gap=0";
}
#endif
