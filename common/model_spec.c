/* MLP model spec: tensor list, fingerprint and the deterministic initial
 * values that servers use to fill their chunks. */
#include "model_spec.h"

#include <errno.h>
#include <math.h>
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
        ps_tensor_spec *w = &spec->tensors[2 * l];
        ps_tensor_spec *b = &spec->tensors[2 * l + 1];

        snprintf(w->name, sizeof(w->name), "fc%d.weight", l + 1);
        w->rows = out;
        w->cols = in;
        w->numel = (size_t)out * (size_t)in;
        w->init = last ? PS_INIT_XAVIER_UNIFORM : PS_INIT_HE_UNIFORM;
        w->fan_in = in;
        w->fan_out = out;

        snprintf(b->name, sizeof(b->name), "fc%d.bias", l + 1);
        b->rows = out;
        b->cols = 1;
        b->numel = (size_t)out;
        b->init = PS_INIT_ZERO;
        b->fan_in = in;
        b->fan_out = out;

        spec->total_numel += w->numel + b->numel;
    }
    spec->n_tensors = 2 * spec->n_layers;
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

uint64_t ps_model_spec_fingerprint(const ps_model_spec *spec)
{
    uint64_t h = 0xcbf29ce484222325ULL;
    /* Hash fixed-width little-endian values, not the struct, so padding and
     * host layout never leak into the digest. */
    for (int i = 0; i <= spec->n_layers; i++) {
        uint32_t v = (uint32_t)spec->sizes[i];
        unsigned char b[4] = {v & 0xff, (v >> 8) & 0xff, (v >> 16) & 0xff, v >> 24};
        h = ps__fnv1a(h, b, 4);
    }
    for (int i = 0; i < 8; i++) {
        unsigned char b = (unsigned char)(spec->seed >> (8 * i));
        h = ps__fnv1a(h, &b, 1);
    }
    return h;
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
        bound = sqrt(6.0 / (t->fan_in + t->fan_out));
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
