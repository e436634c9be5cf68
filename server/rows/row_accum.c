/* A step's summed row pushes (see row_accum.h): an ID index (row_map) onto
 * rows of a growing array. */
#include "row_accum.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "row_map.h"
#include "row_store.h"

struct ps_row_accum {
    uint32_t dim;
    size_t count, cap;
    uint64_t *ids;
    float *sums;
    ps_row_map *map;
};

int ps_row_accum_create(ps_row_accum **out, uint32_t dim)
{
    ps_row_accum *a;
    int rc;

    *out = NULL;
    if (dim < 1 || dim > PS_ROW_MAX_DIM)
        return -EINVAL;
    if (!(a = calloc(1, sizeof(*a))))
        return -ENOMEM;
    a->dim = dim;
    if ((rc = ps_row_map_create(&a->map, 0)) < 0) {
        free(a);
        return rc;
    }
    *out = a;
    return 0;
}

void ps_row_accum_free(ps_row_accum *a)
{
    if (!a)
        return;
    ps_row_map_free(a->map);
    free(a->ids);
    free(a->sums);
    free(a);
}

/* Room for `more` new rows in the arrays and the index. */
static int ps__reserve(ps_row_accum *a, size_t more)
{
    size_t cap = a->cap ? a->cap : 64;
    int rc;

    while (cap < a->count + more)
        cap *= 2;
    if (cap > a->cap) {
        uint64_t *ids = realloc(a->ids, cap * sizeof(uint64_t));
        float *sums;
        if (ids)
            a->ids = ids;
        sums = ids ? realloc(a->sums, cap * a->dim * sizeof(float)) : NULL;
        if (!sums)
            return -ENOMEM;
        a->sums = sums;
        a->cap = cap;
    }
    if ((rc = ps_row_map_reserve(a->map, a->count + more)) < 0)
        return rc;
    return 0;
}

int ps_row_accum_add(ps_row_accum *a, const uint64_t *ids, const float *grads, size_t n)
{
    const uint32_t dim = a->dim;
    int rc;

    /* Room first, so that nothing after it can fail half-way. */
    if ((rc = ps__reserve(a, n)) < 0)
        return rc;
    for (size_t i = 0; i < n; i++) {
        uint32_t row = ps_row_map_find(a->map, ids[i]);
        float *restrict sum;
        const float *restrict g = grads + i * dim;

        if (row == PS_ROW_NO_SLOT) {
            row = (uint32_t)a->count++;
            ps_row_map_insert(a->map, ids[i], row);
            a->ids[row] = ids[i];
            memset(&a->sums[(size_t)row * dim], 0, dim * sizeof(float));
        }
        sum = &a->sums[(size_t)row * dim];
        for (uint32_t k = 0; k < dim; k++)
            sum[k] += g[k];
    }
    return 0;
}

size_t ps_row_accum_rows(const ps_row_accum *a, const uint64_t **ids, const float **sums)
{
    *ids = a->ids;
    *sums = a->sums;
    return a->count;
}

void ps_row_accum_reset(ps_row_accum *a)
{
    for (size_t r = 0; r < a->count; r++)
        ps_row_map_remove(a->map, a->ids[r]);
    a->count = 0;
}
