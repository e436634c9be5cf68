/* The CUDA compute backend: the executor (model.c) on the CUDA table of
 * operations (backend_cuda_ops.c), every model a model file describes, with
 * its weights, activations and gradients in GPU memory; around it, what
 * moves values between the GPU and the host buffers the key-value client
 * uses, and when.
 *
 * Two streams. "compute" runs the model (cuBLAS and our kernels, queued by
 * the executor through the table). "copy" uploads the parameters tensor by
 * tensor from their pinned host mirrors, recording an event after each, and
 * the executor's per-layer hook before a layer's forward makes compute wait
 * for that layer's event only: the first layers compute while later ones are
 * still being copied, in the order the pull brought them (the table's order,
 * which is the forward order). In backward, the executor's per-layer hook,
 * called as each layer's backward is queued, queues behind it on compute the
 * clipping (--clip-norm) and, under --compress bf16, the narrowing of the
 * layer's gradients, records an event, and has copy bring them to their
 * pinned mirrors after that event, recording a second event ("home"). Once
 * the whole step is queued, the worker's thread waits for the layers' home
 * events in order, sleeping (blocking-sync events; the device is set to
 * cudaDeviceScheduleBlockingSync) rather than spinning, and hands each layer
 * to the worker's callback as soon as it is home, while the GPU computes the
 * layers below. The batch is uploaded from a pinned buffer on compute, so
 * the copy is a DMA that needs no staging.
 *
 * Every CUDA and cuBLAS status is checked, logged with what was being done,
 * and returned as -ENOMEM (allocation) or -EIO (anything else); after one
 * the backend is only good for freeing. */
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_impl.h"
#include "backend_ops.h"
#include "cuda_kernels.h"
#include "half.h"
#include "layers_cuda.h"
#include "model.h"
#include "ps_log.h"

/* Sub-buffers of the pinned arena start on 256-byte boundaries, as a fresh
 * allocation would. */
#define PS__CUDA_ALIGN 256

typedef struct {
    ps_backend base; /* first, so a ps_backend * is a ps__cuda *; its buffers are pinned */
    ps_model_spec spec;
    ps_model *model; /* owned; its buffers are device memory */
    ps_cuda_ctx cx;  /* the table's device context: cuBLAS, compute, math */
    cudaStream_t copy;
    float clip_norm;
    int narrow;
    /* Per tensor: its upload is done (recorded on copy). */
    cudaEvent_t param_ready[PS_MAX_MODEL_TENSORS];
    /* Per layer, in the order backward reaches them: its gradients are
     * final on the device (compute), and in the host mirrors (copy). */
    cudaEvent_t grad_ready[PS_MAX_MODEL_TENSORS], grad_home[PS_MAX_MODEL_TENSORS];
    int home_first[PS_MAX_MODEL_TENSORS], home_count[PS_MAX_MODEL_TENSORS], n_home;
    int queue_rc;     /* the first failure of the gradient hook this step */
    char *host_arena; /* pinned: the mirrors, the batch, the 16-bit gradients */
    uint16_t *h_half[PS_MAX_MODEL_TENSORS], *d_half[PS_MAX_MODEL_TENSORS];
    double *d_clip_part;
    float *d_x;
    uint8_t *d_y;
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

static size_t ps__round(size_t bytes)
{
    return (bytes + PS__CUDA_ALIGN - 1) / PS__CUDA_ALIGN * PS__CUDA_ALIGN;
}

/* The pinned arena: every tensor's parameter and gradient mirrors (and
 * 16-bit gradients when narrowing), then the batch. With a NULL base it
 * only measures, so the same code sizes the arena and then carves it. */
static size_t ps__layout_host(ps__cuda *c, char *base)
{
    size_t used = 0, batch = (size_t)c->base.max_batch;

#define PS__TAKE(bytes) (used += ps__round(bytes), base ? base + used - ps__round(bytes) : NULL)
    for (int t = 0; t < c->spec.n_tensors; t++) {
        size_t n = c->spec.tensors[t].numel;
        c->base.params[t] = (float *)PS__TAKE(n * sizeof(float));
        c->base.grads[t] = (float *)PS__TAKE(n * sizeof(float));
        c->h_half[t] = c->narrow ? (uint16_t *)PS__TAKE(n * sizeof(uint16_t)) : NULL;
    }
    c->base.batch_x = (float *)PS__TAKE(batch * c->base.input_n * sizeof(float));
    c->base.batch_y = (uint8_t *)PS__TAKE(batch);
#undef PS__TAKE
    return used;
}

static void ps__cuda_free(ps_backend *b)
{
    ps__cuda *c = (ps__cuda *)b;
    const ps_model_ops *o = &ps_backend_cuda_ops;

    /* Failures are logged and otherwise ignored: there is nothing left to do
     * with the device. cudaFree waits for work still queued. */
    ps_model_free(c->model);
    for (int t = 0; t < PS_MAX_MODEL_TENSORS; t++) {
        cudaEvent_t *ev[] = {&c->param_ready[t], &c->grad_ready[t], &c->grad_home[t]};
        for (int i = 0; i < 3; i++)
            if (*ev[i])
                ps__cuda_check(cudaEventDestroy(*ev[i]), "destroying an event");
        o->release(&c->cx, c->d_half[t]);
    }
    o->release(&c->cx, c->d_clip_part);
    o->release(&c->cx, c->d_x);
    o->release(&c->cx, c->d_y);
    if (c->cx.blas)
        ps__blas_check(cublasDestroy(c->cx.blas), "destroying the cuBLAS handle");
    if (c->cx.stream)
        ps__cuda_check(cudaStreamDestroy(c->cx.stream), "destroying a stream");
    if (c->copy)
        ps__cuda_check(cudaStreamDestroy(c->copy), "destroying a stream");
    if (c->host_arena)
        ps__cuda_check(cudaFreeHost(c->host_arena), "freeing pinned host memory");
    ps_model_spec_free(&c->spec);
    free(c);
}

static int ps__cuda_load_params(ps_backend *b)
{
    ps__cuda *c = (ps__cuda *)b;
    int rc = 0;

    for (int t = 0; t < c->spec.n_tensors && rc == 0; t++) {
        rc = ps__cuda_check(cudaMemcpyAsync(ps_model_param(c->model, t), b->params[t],
                                            c->spec.tensors[t].numel * sizeof(float),
                                            cudaMemcpyHostToDevice, c->copy),
                            "uploading parameters");
        if (rc == 0)
            rc = ps__cuda_check(cudaEventRecord(c->param_ready[t], c->copy),
                                "recording an upload event");
    }
    return rc;
}

/* The executor's hook before a layer's forward: compute waits for the
 * upload of the layer's last tensor (the copies run in order). */
static int ps__params_needed(void *arg, int first, int count)
{
    ps__cuda *c = arg;

    return ps__cuda_check(cudaStreamWaitEvent(c->cx.stream, c->param_ready[first + count - 1], 0),
                          "waiting for the parameters");
}

/* The executor's hook once a layer's backward is queued: clip, narrow, and
 * start the copy home, all without holding compute up. */
static void ps__grads_queued(void *arg, int first, int count)
{
    ps__cuda *c = arg;
    int k = c->n_home, rc = c->queue_rc;

    for (int t = first; t < first + count && rc == 0; t++) {
        size_t n = c->spec.tensors[t].numel;
        float *g = ps_model_grad(c->model, t);
        if (c->clip_norm > 0 &&
            (rc = ps_cuda_clip_norm(&c->cx, n, g, c->clip_norm, c->d_clip_part)) < 0)
            ps_error("CUDA failed while clipping gradients");
        if (rc == 0 && c->narrow)
            rc = ps__cuda_check(ps_cuda_f32_to_bf16(c->d_half[t], g, n, c->cx.stream),
                                "narrowing gradients to bfloat16");
    }
    if (rc == 0)
        rc = ps__cuda_check(cudaEventRecord(c->grad_ready[k], c->cx.stream),
                            "recording a gradient event");
    if (rc == 0)
        rc = ps__cuda_check(cudaStreamWaitEvent(c->copy, c->grad_ready[k], 0),
                            "ordering a gradient copy");
    for (int t = first; t < first + count && rc == 0; t++) {
        size_t n = c->spec.tensors[t].numel;
        rc = c->narrow
                 ? ps__cuda_check(cudaMemcpyAsync(c->h_half[t], c->d_half[t], n * sizeof(uint16_t),
                                                  cudaMemcpyDeviceToHost, c->copy),
                                  "copying gradients to the host")
                 : ps__cuda_check(cudaMemcpyAsync(c->base.grads[t], ps_model_grad(c->model, t),
                                                  n * sizeof(float), cudaMemcpyDeviceToHost,
                                                  c->copy),
                                  "copying gradients to the host");
    }
    if (rc == 0)
        rc =
            ps__cuda_check(cudaEventRecord(c->grad_home[k], c->copy), "recording a gradient event");
    c->home_first[k] = first;
    c->home_count[k] = count;
    c->n_home++;
    c->queue_rc = rc;
}

/* Waits for each layer's gradients in the order backward produced them and
 * hands them on as each arrives. Under narrowing the bfloat16 values are
 * widened into the float32 mirrors (exactly: the client's narrowing gives
 * the same bits back). */
static int ps__hand_over(ps__cuda *c)
{
    int rc = 0;

    for (int k = 0; k < c->n_home && rc == 0; k++) {
        rc = ps__cuda_check(cudaEventSynchronize(c->grad_home[k]), "copying gradients to the host");
        for (int t = c->home_first[k];
             t < c->home_first[k] + c->home_count[k] && rc == 0 && c->narrow; t++)
            ps_bf16_to_f32(c->base.grads[t], c->h_half[t], c->spec.tensors[t].numel);
        if (rc == 0 && c->base.on_layer)
            c->base.on_layer(c->base.on_layer_arg, c->home_first[k], c->home_count[k]);
    }
    return rc;
}

/* Queues the upload of B samples and labels on compute, from the pinned
 * batch buffers (copying the caller's into them first when they are not
 * those). The previous step has finished, so the buffers are free. */
static int ps__put_batch(ps__cuda *c, const float *x, const uint8_t *y, int B)
{
    size_t xb = (size_t)B * c->base.input_n * sizeof(float);
    int rc;

    if (x != c->base.batch_x)
        memcpy(c->base.batch_x, x, xb);
    if (y != c->base.batch_y)
        memcpy(c->base.batch_y, y, (size_t)B);
    rc = ps__cuda_check(
        cudaMemcpyAsync(c->d_x, c->base.batch_x, xb, cudaMemcpyHostToDevice, c->cx.stream),
        "copying a batch to the GPU");
    if (rc == 0)
        rc = ps__cuda_check(cudaMemcpyAsync(c->d_y, c->base.batch_y, (size_t)B,
                                            cudaMemcpyHostToDevice, c->cx.stream),
                            "copying labels to the GPU");
    return rc;
}

static int ps__cuda_train_step(ps_backend *b, const float *x, const uint8_t *y, int B,
                               uint64_t step, float *loss, int *correct)
{
    ps__cuda *c = (ps__cuda *)b;
    int rc;

    c->n_home = 0;
    c->queue_rc = 0;
    rc = ps__put_batch(c, x, y, B);
    if (rc == 0)
        rc = ps_model_train_start(c->model, c->d_x, c->d_y, B, step);
    if (rc == 0)
        rc = c->queue_rc;
    if (rc == 0)
        rc = ps__hand_over(c);
    if (rc == 0)
        rc = ps_model_train_finish(c->model, loss, correct);
    return rc;
}

/* Batch by batch from the caller's (pageable) memory: the runtime stages
 * each copy, so x and y may be any host memory. */
static int ps__cuda_evaluate(ps_backend *b, const float *x, const uint8_t *y, int n, float *loss,
                             int *correct)
{
    ps__cuda *c = (ps__cuda *)b;
    double total = 0.0;
    int right = 0, rc = 0;

    for (int start = 0; start < n && rc == 0; start += b->max_batch) {
        int B = n - start < b->max_batch ? n - start : b->max_batch, k;
        size_t xb = (size_t)B * b->input_n * sizeof(float);
        float l;

        rc = ps__cuda_check(cudaMemcpyAsync(c->d_x, x + (size_t)start * b->input_n, xb,
                                            cudaMemcpyHostToDevice, c->cx.stream),
                            "copying test samples to the GPU");
        if (rc == 0)
            rc = ps__cuda_check(
                cudaMemcpyAsync(c->d_y, y + start, (size_t)B, cudaMemcpyHostToDevice, c->cx.stream),
                "copying test labels to the GPU");
        if (rc == 0)
            rc = ps_model_evaluate(c->model, c->d_x, c->d_y, B, &l, &k, NULL);
        if (rc < 0)
            break;
        /* As the CPU weighs its batches: each mean times its size. */
        total += (double)l * B;
        right += k;
    }
    if (rc < 0)
        return rc;
    *loss = (float)(total / n);
    *correct = right;
    return 0;
}

static const ps__backend_ops ps__cuda_ops = {
    .free = ps__cuda_free,
    .load_params = ps__cuda_load_params,
    .train_step = ps__cuda_train_step,
    .evaluate = ps__cuda_evaluate,
};

/* Picks GPU device_index % count, asks for blocking synchronisation (a
 * waiting host thread sleeps instead of spinning on a core the worker's
 * network code wants) and checks that this build's kernels run on it.
 * Returns 0, or -ENODEV with the reason in why. */
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
        err = cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync);
    if (err == cudaSuccess)
        err = ps_cuda_check_image();
    if (err != cudaSuccess) {
        snprintf(why, why_len, "GPU %d is not usable (%s)", *dev, cudaGetErrorString(err));
        return -ENODEV;
    }
    return 0;
}

/* The copy stream, events, the pinned arena and the backend's own device
 * buffers (the batch, 16-bit gradients, the clipping partial sums). */
static int ps__setup(ps__cuda *c)
{
    const ps_model_ops *o = &ps_backend_cuda_ops;
    size_t host_bytes, batch = (size_t)c->base.max_batch;
    int rc;

    /* Non-blocking, as compute is: nothing here may wait on the legacy
     * default stream, nor it on us. */
    rc = ps__cuda_check(cudaStreamCreateWithFlags(&c->copy, cudaStreamNonBlocking),
                        "creating a stream");
    for (int t = 0; t < c->spec.n_tensors && rc == 0; t++) {
        unsigned int quiet = cudaEventDisableTiming;
        rc = ps__cuda_check(cudaEventCreateWithFlags(&c->param_ready[t], quiet),
                            "creating an event");
        if (rc == 0)
            rc = ps__cuda_check(cudaEventCreateWithFlags(&c->grad_ready[t], quiet),
                                "creating an event");
        if (rc == 0)
            rc = ps__cuda_check(
                cudaEventCreateWithFlags(&c->grad_home[t], quiet | cudaEventBlockingSync),
                "creating an event");
    }
    if (rc < 0)
        return rc;
    host_bytes = ps__layout_host(c, NULL);
    rc = ps__cuda_check(cudaMallocHost((void **)&c->host_arena, host_bytes),
                        "allocating pinned host memory");
    if (rc < 0)
        return rc;
    ps__layout_host(c, c->host_arena);
    c->d_x = o->alloc(&c->cx, batch * c->base.input_n * sizeof(float));
    c->d_y = o->alloc(&c->cx, batch);
    if (c->d_x == NULL || c->d_y == NULL)
        return -ENOMEM;
    if (c->clip_norm > 0 &&
        (c->d_clip_part = o->alloc(&c->cx, PS_CUDA_CLIP_PARTS * sizeof(double))) == NULL)
        return -ENOMEM;
    for (int t = 0; t < c->spec.n_tensors && c->narrow; t++)
        if ((c->d_half[t] = o->alloc(&c->cx, c->spec.tensors[t].numel * sizeof(uint16_t))) == NULL)
            return -ENOMEM;
    return 0;
}

static const char *ps__math_name(ps_cuda_math m)
{
    return m == PS_CUDA_BF16   ? "bf16 products, float32 accumulation"
           : m == PS_CUDA_TF32 ? "TF32"
                               : "FP32";
}

int ps__backend_cuda_init(ps_backend **out, const ps_model_desc *desc, const ps_model_spec *spec,
                          const ps_backend_config *cfg, char *why, size_t why_len)
{
    struct cudaDeviceProp prop;
    ps__cuda *c = NULL;
    int devno, count, rc;

    /* The GPU first: without one, --device auto goes on to the CPU, which
     * judges the arguments itself. */
    *out = NULL;
    rc = ps__pick_gpu(cfg, &devno, &count, why, why_len);
    if (rc < 0)
        return rc;
    if (cfg->max_batch < 1)
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
    if (ps_model_spec_copy(&c->spec, spec) < 0) {
        free(c);
        return -ENOMEM;
    }
    c->clip_norm = (float)cfg->clip_norm;
    c->narrow = cfg->narrow_bf16;
    c->cx.math = cfg->precision == PS_PRECISION_BF16 ? PS_CUDA_BF16
                 : cfg->tf32                         ? PS_CUDA_TF32
                                                     : PS_CUDA_FP32;
    /* The model first (it checks the description), then what surrounds it.
     * Non-blocking streams: nothing here may wait on the legacy default
     * stream, nor it on us. */
    rc = ps__cuda_check(cudaStreamCreateWithFlags(&c->cx.stream, cudaStreamNonBlocking),
                        "creating a stream");
    if (rc == 0)
        rc = ps__blas_check(cublasCreate(&c->cx.blas), "creating a cuBLAS handle");
    if (rc == 0)
        rc = ps__blas_check(cublasSetStream(c->cx.blas, c->cx.stream), "setting the cuBLAS stream");
    if (rc == 0)
        rc = ps_model_init(&c->model, &ps_backend_cuda_ops, &c->cx, desc, spec, cfg->max_batch,
                           cfg->dropout_seed);
    if (rc < 0)
        goto fail;
    c->base.classes = ps_model_classes(c->model);
    c->base.input_n = ps_model_input_count(c->model);
    ps_model_on_params(c->model, ps__params_needed, c);
    ps_model_on_grads(c->model, ps__grads_queued, c);
    rc = ps__setup(c);
    if (rc < 0)
        goto fail;
    /* The host mirrors start where the model does. */
    for (int t = 0; t < spec->n_tensors; t++)
        ps_model_spec_init_values(spec, t, 0, spec->tensors[t].numel, c->base.params[t]);
    rc = ps__cuda_load_params(&c->base);
    if (rc < 0)
        goto fail;
    snprintf(c->base.describe, sizeof(c->base.describe),
             "cuda: %.100s (GPU %d of %d, sm_%d%d, %.0f GiB), cuBLAS %s%s%s", prop.name, devno,
             count, prop.major, prop.minor, (double)prop.totalGlobalMem / (1 << 30),
             ps__math_name(c->cx.math),
             cfg->tf32 && c->cx.math == PS_CUDA_BF16 ? " (--tf32 ignored)" : "",
             c->narrow ? ", gradients narrowed to bf16 on the GPU" : "");
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
