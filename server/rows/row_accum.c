/* A step's summed row pushes (see row_accum.h): an ID index (row_map) onto
 * rows of a growing array, and a stamp per row saying which push last
 * named it, which finds an ID named twice in one push. */
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
    uint32_t *stamp; /* the push that last named row i; 0 is never a push */
    uint32_t push;
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
    free(a->stamp);
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
        uint32_t *stamp;
        if (ids)
            a->ids = ids;
        sums = ids ? realloc(a->sums, cap * a->dim * sizeof(float)) : NULL;
        if (sums)
            a->sums = sums;
        stamp = sums ? realloc(a->stamp, cap * sizeof(uint32_t)) : NULL;
        if (!stamp)
            return -ENOMEM;
        a->stamp = stamp;
        a->cap = cap;
    }
    if ((rc = ps_row_map_reserve(a->map, a->count + more)) < 0)
        return rc;
    return 0;
}

/* Takes back what a refused push added: the rows from `first` on, and the
 * stamps it set on the rows before. */
static void ps__undo(ps_row_accum *a, const uint64_t *ids, size_t upto, size_t first)
{
    for (size_t i = 0; i < upto; i++) {
        uint32_t row = ps_row_map_find(a->map, ids[i]);
        if (row < first)
            a->stamp[row] = 0;
    }
    for (size_t r = first; r < a->count; r++)
        ps_row_map_remove(a->map, a->ids[r]);
    a->count = first;
}

int ps_row_accum_add(ps_row_accum *a, const uint64_t *ids, const float *grads, size_t n)
{
    const uint32_t dim = a->dim;
    size_t first = a->count;
    int rc;

    if ((rc = ps__reserve(a, n)) < 0)
        return rc;
    if (++a->push == 0) {
        /* Push numbers wrapped: forget every stamp. */
        memset(a->stamp, 0, a->cap * sizeof(uint32_t));
        a->push = 1;
    }
    /* First every ID gets its row (new rows zeroed), so that a duplicate is
     * found before any sum changes. */
    for (size_t i = 0; i < n; i++) {
        uint32_t row = ps_row_map_find(a->map, ids[i]);
        if (row == PS_ROW_NO_SLOT) {
            row = (uint32_t)a->count++;
            ps_row_map_insert(a->map, ids[i], row);
            a->ids[row] = ids[i];
            memset(&a->sums[(size_t)row * dim], 0, dim * sizeof(float));
        } else if (a->stamp[row] == a->push) {
            ps__undo(a, ids, i, first);
            return -EINVAL;
        }
        a->stamp[row] = a->push;
    }
    for (size_t i = 0; i < n; i++) {
        float *restrict sum = &a->sums[(size_t)ps_row_map_find(a->map, ids[i]) * dim];
        const float *restrict g = grads + i * dim;
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
