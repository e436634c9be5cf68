/* The compute backend's front door (see backend.h): turns --device into an
 * implementation, falls back from CUDA to the CPU only where --device auto
 * allows it (and --precision does), checks a batch's size and labels on the
 * host before any device sees them, and forwards every call through the
 * implementation's table. The implementations themselves are backend_cpu.c
 * and backend_cuda.c (or backend_nocuda.c in a build without the CUDA
 * toolkit). */
#include "backend.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "backend_impl.h"
#include "ps_log.h"

int ps_backend_parse_device(const char *name, ps_device *out)
{
    static const struct {
        const char *name;
        ps_device device;
    } names[] = {{"auto", PS_DEVICE_AUTO}, {"cpu", PS_DEVICE_CPU}, {"cuda", PS_DEVICE_CUDA}};

    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (strcmp(name, names[i].name) == 0) {
            *out = names[i].device;
            return 0;
        }
    return -EINVAL;
}

int ps_backend_parse_precision(const char *name, ps_precision *out)
{
    if (strcmp(name, "fp32") == 0)
        *out = PS_PRECISION_FP32;
    else if (strcmp(name, "bf16") == 0)
        *out = PS_PRECISION_BF16;
    else
        return -EINVAL;
    return 0;
}

static void ps__backend_append(char *buf, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Appends to the NUL-terminated text in buf[size], truncating if need be. */
static void ps__backend_append(char *buf, size_t size, const char *fmt, ...)
{
    size_t len = strlen(buf);
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(buf + len, size - len, fmt, ap);
    va_end(ap);
}

int ps_backend_init(ps_backend **out, const ps_model_desc *desc, const ps_model_spec *spec,
                    const ps_backend_config *cfg)
{
    int bf16 = cfg->precision == PS_PRECISION_BF16;
    char why[200] = "";
    int rc;

    *out = NULL;
    if (bf16 && cfg->device == PS_DEVICE_CPU) {
        ps_error("--precision bf16 needs --device cuda: the CPU computes in float32");
        return -EINVAL;
    }
    if (cfg->device != PS_DEVICE_CPU) {
        rc = ps__backend_cuda_init(out, desc, spec, cfg, why, sizeof(why));
        if (rc == 0)
            return 0;
        if (rc != -ENODEV) {
            ps_error("cannot set up the model on the GPU: %s", strerror(-rc));
            return rc;
        }
        if (cfg->device == PS_DEVICE_CUDA || bf16) {
            ps_error("%s: %s; use --device cpu%s", bf16 ? "--precision bf16" : "--device cuda", why,
                     bf16 ? " with --precision fp32" : " or auto");
            return rc;
        }
    }
    rc = ps__backend_cpu_init(out, desc, spec, cfg);
    if (rc < 0) {
        ps_error("cannot set up the model on the CPU: %s", strerror(-rc));
        return rc;
    }
    /* Say why auto did not pick the GPU, so a missing driver is not a
     * silent slowdown, and that --tf32 changes nothing here. */
    if (cfg->tf32)
        ps__backend_append((*out)->describe, sizeof((*out)->describe), ", --tf32 ignored");
    if (cfg->device == PS_DEVICE_AUTO)
        ps__backend_append((*out)->describe, sizeof((*out)->describe), " (--device auto: %s)", why);
    return 0;
}

void ps_backend_free(ps_backend *b)
{
    if (b)
        b->ops->free(b);
}

ps_device ps_backend_device(const ps_backend *b)
{
    return b->device;
}

const char *ps_backend_describe(const ps_backend *b)
{
    return b->describe;
}

float *ps_backend_params(ps_backend *b, int tensor_id)
{
    return b->params[tensor_id];
}

float *ps_backend_grads(ps_backend *b, int tensor_id)
{
    return b->grads[tensor_id];
}

float *ps_backend_batch_x(ps_backend *b)
{
    return b->batch_x;
}

uint8_t *ps_backend_batch_y(ps_backend *b)
{
    return b->batch_y;
}

/* Labels reach a device unchecked, so they are checked here, on the host. */
static int ps__labels_ok(const ps_backend *b, const uint8_t *y, int n)
{
    for (int i = 0; i < n; i++)
        if (y[i] >= b->classes)
            return 0;
    return 1;
}

int ps_backend_load_params(ps_backend *b)
{
    return b->ops->load_params(b);
}

int ps_backend_train_step(ps_backend *b, const float *x, const uint8_t *y, int B, uint64_t step,
                          float *loss, int *correct)
{
    if (B < 1 || B > b->max_batch || !ps__labels_ok(b, y, B))
        return -EINVAL;
    return b->ops->train_step(b, x, y, B, step, loss, correct);
}

void ps_backend_on_layer_grads(ps_backend *b, ps_backend_layer_cb cb, void *arg)
{
    b->on_layer = cb;
    b->on_layer_arg = arg;
}

int ps_backend_evaluate(ps_backend *b, const float *x, const uint8_t *y, int n, float *loss,
                        int *correct)
{
    if (n < 1 || !ps__labels_ok(b, y, n))
        return -EINVAL;
    return b->ops->evaluate(b, x, y, n, loss, correct);
}
