/* The tensor table: building it (the MLP's directly, any other model's
 * through model_desc), its fingerprint, and the deterministic initial values
 * that servers use to fill their chunks. */
#include "model_spec.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PS_MAX_LAYER_SIZE (1 << 20)

int ps_model_spec_init_mlp(ps_model_spec *spec, const int *sizes, int n_sizes, uint64_t seed)
{
    memset(spec, 0, sizeof(*spec));
    if (n_sizes < 2 || n_sizes > PS_MAX_LAYERS + 1)
        return -EINVAL;
    for (int i = 0; i < n_sizes; i++)
        if (sizes[i] < 1 || sizes[i] > PS_MAX_LAYER_SIZE)
            return -EINVAL;

    spec->n_layers = n_sizes - 1;
    memcpy(spec->sizes, sizes, sizeof(int) * (size_t)n_sizes);
    spec->seed = seed;
    for (int l = 0; l < spec->n_layers; l++) {
        int in = sizes[l], out = sizes[l + 1];
        int last = l == spec->n_layers - 1;
        int wshape[2] = {out, in};
        char name[32];
        int rc;

        snprintf(name, sizeof(name), "fc%d.weight", l + 1);
        rc = ps_model_spec_add_tensor(spec, name, 2, wshape,
                                      last ? PS_INIT_XAVIER_UNIFORM : PS_INIT_HE_UNIFORM, in, out);
        if (rc == 0) {
            snprintf(name, sizeof(name), "fc%d.bias", l + 1);
            rc = ps_model_spec_add_tensor(spec, name, 1, &out, PS_INIT_ZERO, in, out);
        }
        if (rc < 0)
            return rc;
    }
    return 0;
}

int ps_model_spec_add_tensor(ps_model_spec *spec, const char *name, int ndim, const int *shape,
                             ps_init_kind init, int fan_in, int fan_out)
{
    ps_tensor_spec *t;
    size_t numel = 1, len = strlen(name);

    if (len == 0 || len >= sizeof(t->name) || ndim < 1 || ndim > PS_MAX_DIMS || fan_in < 1 ||
        fan_out < 1)
        return -EINVAL;
    if (spec->n_tensors >= PS_MAX_TENSORS)
        return -E2BIG;
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 1)
            return -EINVAL;
        /* Each factor is below 2^31, so checking after every step keeps the
         * product from wrapping. */
        numel *= (size_t)shape[d];
        if (numel > (size_t)INT32_MAX)
            return -E2BIG;
    }
    t = &spec->tensors[spec->n_tensors++];
    memset(t, 0, sizeof(*t));
    memcpy(t->name, name, len + 1);
    t->ndim = ndim;
    memcpy(t->shape, shape, sizeof(int) * (size_t)ndim);
    t->rows = shape[0];
    t->cols = (int)(numel / (size_t)shape[0]);
    t->numel = numel;
    t->init = init;
    t->fan_in = fan_in;
    t->fan_out = fan_out;
    spec->total_numel += numel;
    return 0;
}

int ps_model_spec_parse_sizes(const char *text, int *sizes, int max_sizes)
{
    int n = 0;
    const char *p = text;

    if (*p == '\0')
        return 0;
    for (;;) {
        char *end;
        long v;

        if (*p < '0' || *p > '9')
            return -EINVAL;
        errno = 0;
        v = strtol(p, &end, 10);
        if (errno || v < 1 || v > PS_MAX_LAYER_SIZE || n == max_sizes)
            return -EINVAL;
        sizes[n++] = (int)v;
        if (*end == '\0')
            return n;
        if (*end != ',')
            return -EINVAL;
        p = end + 1;
    }
}

static uint64_t ps__fnv1a(uint64_t h, const void *data, size_t len)
{
    const unsigned char *p = data;
    for (size_t i = 0; i < len; i++) {
        h ^= p[i];
        h *= 0x100000001b3ULL;
    }
    return h;
}

static uint64_t ps__fnv_u64(uint64_t h, uint64_t v)
{
    unsigned char b[8];

    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(v >> (8 * i));
    return ps__fnv1a(h, b, sizeof(b));
}

uint64_t ps_model_spec_fingerprint(const ps_model_spec *spec)
{
    uint64_t h = 0xcbf29ce484222325ULL;

    /* Fixed-width little-endian values and length-prefixed names, not the
     * struct, so padding and host layout never leak into the digest and no
     * two different tables hash the same bytes. */
    h = ps__fnv_u64(h, (uint64_t)spec->n_tensors);
    for (int i = 0; i < spec->n_tensors; i++) {
        const ps_tensor_spec *t = &spec->tensors[i];
        size_t len = strnlen(t->name, sizeof(t->name));

        h = ps__fnv_u64(h, len);
        h = ps__fnv1a(h, t->name, len);
        h = ps__fnv_u64(h, (uint64_t)t->ndim);
        for (int d = 0; d < t->ndim && d < PS_MAX_DIMS; d++)
            h = ps__fnv_u64(h, (uint64_t)t->shape[d]);
        h = ps__fnv_u64(h, (uint64_t)t->init);
        h = ps__fnv_u64(h, (uint64_t)t->fan_in);
        h = ps__fnv_u64(h, (uint64_t)t->fan_out);
    }
    return ps__fnv_u64(h, spec->seed);
}

/* SplitMix64 finaliser: a counter-based generator, so element i's value is
 * computed directly without generating elements 0..i-1. */
static uint64_t ps__mix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void ps_model_spec_init_values(const ps_model_spec *spec, int tensor_id, size_t offset, size_t n,
                               float *out)
{
    const ps_tensor_spec *t = &spec->tensors[tensor_id];
    uint64_t base = ps__mix64(spec->seed ^ ps__mix64((uint64_t)tensor_id + 1));
    double bound;

    switch (t->init) {
    case PS_INIT_HE_UNIFORM:
        bound = sqrt(6.0 / t->fan_in);
        break;
    case PS_INIT_XAVIER_UNIFORM:
        /* In double: each fan may be up to 2^31-1, their sum is not an int. */
        bound = sqrt(6.0 / ((double)t->fan_in + (double)t->fan_out));
        break;
    default:
        memset(out, 0, n * sizeof(float));
        return;
    }
    for (size_t i = 0; i < n; i++) {
        /* Top 53 bits -> uniform double in [0, 1). */
        double u = (double)(ps__mix64(base + offset + i) >> 11) * 0x1.0p-53;
        out[i] = (float)((2.0 * u - 1.0) * bound);
    }
}
