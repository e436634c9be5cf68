/* The admission sketch: count-min with conservative update (see
 * row_admit.h). */
#include "row_admit.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "mix64.h"
#include "ps_error.h"
#include "le_bytes.h"

#define PS__MAGIC   "PSAD"
#define PS__VERSION 1u
/* magic, version, threshold, depth, width (u32 each), seed (u64) */
#define PS__HEADER 28u
#define PS__SAT    UINT16_MAX

struct ps_row_admit {
    uint32_t threshold, depth, width;
    uint64_t seed;
    uint64_t row_seed[PS_ROW_ADMIT_MAX_DEPTH];
    uint16_t *count; /* depth rows of width counters */
};

static int ps__params_ok(uint32_t threshold, uint32_t depth, uint32_t width)
{
    return threshold >= 1 && threshold <= PS__SAT && depth >= 1 &&
           depth <= PS_ROW_ADMIT_MAX_DEPTH && width >= 64 && width <= PS_ROW_ADMIT_MAX_WIDTH &&
           (width & (width - 1)) == 0;
}

int ps_row_admit_create(ps_row_admit **out, uint32_t threshold, uint32_t depth, uint32_t width,
                        uint64_t seed)
{
    ps_row_admit *a;

    *out = NULL;
    if (!ps__params_ok(threshold, depth, width))
        return -EINVAL;
    a = calloc(1, sizeof(*a));
    if (!a)
        return -ENOMEM;
    a->count = calloc((size_t)depth * width, sizeof(uint16_t));
    if (!a->count) {
        free(a);
        return -ENOMEM;
    }
    a->threshold = threshold;
    a->depth = depth;
    a->width = width;
    a->seed = seed;
    /* Each row's hash is mix64 keyed by its own word derived from the seed:
     * independent rows, and independent of placement's and the index's
     * hashes of the same ID. */
    for (uint32_t r = 0; r < depth; r++)
        a->row_seed[r] = ps_mix64(ps_mix64(seed) + r + 1);
    *out = a;
    return 0;
}

void ps_row_admit_free(ps_row_admit *a)
{
    if (!a)
        return;
    free(a->count);
    free(a);
}

static uint16_t *ps__counter(const ps_row_admit *a, uint32_t r, uint64_t id)
{
    return &a->count[(size_t)r * a->width + (ps_mix64(id ^ a->row_seed[r]) & (a->width - 1))];
}

uint32_t ps_row_admit_estimate(const ps_row_admit *a, uint64_t id)
{
    uint32_t min = PS__SAT;

    for (uint32_t r = 0; r < a->depth; r++) {
        uint16_t c = *ps__counter(a, r, id);
        min = c < min ? c : min;
    }
    return min;
}

int ps_row_admit_push(ps_row_admit *a, uint64_t id)
{
    uint32_t est = ps_row_admit_estimate(a, id);

    /* Conservative update: only the counters at the minimum rise; the
     * others already count at least this ID's pushes. */
    if (est < PS__SAT) {
        for (uint32_t r = 0; r < a->depth; r++) {
            uint16_t *c = ps__counter(a, r, id);
            if (*c == est)
                *c = (uint16_t)(est + 1);
        }
        est++;
    }
    return est >= a->threshold;
}

uint32_t ps_row_admit_threshold(const ps_row_admit *a)
{
    return a->threshold;
}

size_t ps_row_admit_bytes(const ps_row_admit *a)
{
    return sizeof(*a) + (size_t)a->depth * a->width * sizeof(uint16_t);
}

size_t ps_row_admit_saved_size(const ps_row_admit *a)
{
    return PS__HEADER + (size_t)a->depth * a->width * 2;
}

long ps_row_admit_save(const ps_row_admit *a, void *buf, size_t len)
{
    size_t need = ps_row_admit_saved_size(a), n = (size_t)a->depth * a->width;
    uint8_t *p = buf;

    if (len < need)
        return -ENOSPC;
    memcpy(p, PS__MAGIC, 4);
    ps_le_put32(p + 4, PS__VERSION);
    ps_le_put32(p + 8, a->threshold);
    ps_le_put32(p + 12, a->depth);
    ps_le_put32(p + 16, a->width);
    ps_le_put32(p + 20, (uint32_t)a->seed);
    ps_le_put32(p + 24, (uint32_t)(a->seed >> 32));
    p += PS__HEADER;
    for (size_t i = 0; i < n; i++) {
        p[2 * i] = (uint8_t)a->count[i];
        p[2 * i + 1] = (uint8_t)(a->count[i] >> 8);
    }
    return (long)need;
}

int ps_row_admit_load(ps_row_admit **out, const void *buf, size_t len, char *why, size_t why_len)
{
    const uint8_t *p = buf;
    uint32_t threshold, depth, width;
    uint64_t seed;
    ps_row_admit *a;
    size_t n;
    int rc;

    *out = NULL;
    if (len < PS__HEADER || memcmp(p, PS__MAGIC, 4) != 0)
        return ps_err_printf(why, why_len, -PS_EFORMAT, "admission sketch: no PSAD header");
    if (ps_le_get32(p + 4) != PS__VERSION)
        return ps_err_printf(why, why_len, -PS_EFORMAT, "admission sketch: version %u, not %u",
                             ps_le_get32(p + 4), PS__VERSION);
    threshold = ps_le_get32(p + 8);
    depth = ps_le_get32(p + 12);
    width = ps_le_get32(p + 16);
    seed = (uint64_t)ps_le_get32(p + 20) | (uint64_t)ps_le_get32(p + 24) << 32;
    if (!ps__params_ok(threshold, depth, width))
        return ps_err_printf(why, why_len, -PS_EFORMAT,
                             "admission sketch: threshold %u, depth %u, width %u out of range",
                             threshold, depth, width);
    n = (size_t)depth * width;
    if (len != PS__HEADER + 2 * n)
        return ps_err_printf(why, why_len, -PS_EFORMAT,
                             "admission sketch: %zu bytes, %zu expected for depth %u width %u", len,
                             PS__HEADER + 2 * n, depth, width);
    if ((rc = ps_row_admit_create(&a, threshold, depth, width, seed)) < 0)
        return rc;
    p += PS__HEADER;
    for (size_t i = 0; i < n; i++)
        a->count[i] = (uint16_t)(p[2 * i] | p[2 * i + 1] << 8);
    *out = a;
    return 0;
}

int ps_row_admit_merge(ps_row_admit *dst, const ps_row_admit *src)
{
    size_t n = (size_t)dst->depth * dst->width;

    if (dst->depth != src->depth || dst->width != src->width || dst->seed != src->seed)
        return -PS_EMISMATCH;
    for (size_t i = 0; i < n; i++) {
        uint32_t sum = (uint32_t)dst->count[i] + src->count[i];
        dst->count[i] = (uint16_t)(sum < PS__SAT ? sum : PS__SAT);
    }
    return 0;
}
