/* A set of 64-bit IDs with values (see id_set.h). */
#include "id_set.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "mix64.h"

/* Replaces the arrays with empty ones of cap slots. Returns 0, or -ENOMEM
 * (the set is then unchanged). */
static int ps__realloc(ps_id_set *s, size_t cap)
{
    uint64_t *ids = malloc(cap * sizeof(*ids));
    uint32_t *vals = malloc(cap * sizeof(*vals));
    uint32_t *gen = calloc(cap, sizeof(*gen));

    if (ids == NULL || vals == NULL || gen == NULL) {
        free(ids);
        free(vals);
        free(gen);
        return -ENOMEM;
    }
    ps_id_set_free(s);
    *s = (ps_id_set){.ids = ids, .vals = vals, .gen = gen, .cap = cap};
    return 0;
}

int ps_id_set_reset(ps_id_set *s, size_t n)
{
    size_t cap = 64;
    int rc = 0;

    while (cap < 2 * n)
        cap *= 2;
    if (cap > s->cap) {
        rc = ps__realloc(s, cap);
    } else if (s->cap > PS_ID_SET_KEEP_SLOTS && cap <= s->cap / 8) {
        /* Far too large this time: after enough such resets in a row, give
         * the memory back. A failed shrink keeps the larger set. */
        if (s->small++ == 0 || cap > s->small_peak)
            s->small_peak = cap;
        if (s->small >= PS_ID_SET_SHRINK_AFTER)
            ps__realloc(s, s->small_peak);
    } else {
        s->small = 0;
    }
    /* A new generation empties the set; at wrap-around clear it for real. */
    if (++s->cur == 0) {
        if (s->cap)
            memset(s->gen, 0, s->cap * sizeof(*s->gen));
        s->cur = 1;
    }
    return rc;
}

int64_t ps_id_set_put(ps_id_set *s, uint64_t id, uint32_t v)
{
    size_t mask = s->cap - 1, k = (size_t)ps_mix64(id) & mask;

    for (; s->gen[k] == s->cur; k = (k + 1) & mask)
        if (s->ids[k] == id)
            return s->vals[k];
    s->gen[k] = s->cur;
    s->ids[k] = id;
    s->vals[k] = v;
    return -1;
}

void ps_id_set_free(ps_id_set *s)
{
    free(s->ids);
    free(s->vals);
    free(s->gen);
    memset(s, 0, sizeof(*s));
}
