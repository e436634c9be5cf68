/* One table's rows on one server (see row_store.h): records in slabs, an
 * ID index, the batch apply with its policies, and the walk and insert a
 * checkpoint uses.
 *
 * A slot numbers a record: slab slot >> slab_shift, record slot & mask.
 * Slots are handed out in order; a freed slot (eviction) goes on a LIFO
 * list threaded through the records themselves (last_step = PS__FREE, the
 * next free slot in updates) and is reused first, so the slot space stays
 * dense and a walk in slot order skips few holes. */
#include "row_store.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "ps_error.h"
#include "row_map.h"

#define PS__FREE       UINT32_MAX
#define PS__SLAB_BYTES ((size_t)4 << 20)
#define PS__MAX_SLOTS  ((size_t)UINT32_MAX - 1)

typedef struct {
    uint64_t id;
    uint32_t last_step; /* PS__FREE: a free record */
    uint32_t updates;   /* a free record: the next free slot */
} ps__header;

/* A candidate for eviction under capacity, ordered by (last, id). */
typedef struct {
    uint64_t id;
    uint32_t last;
} ps__victim;

struct ps_row_store {
    ps_row_store_config cfg;
    size_t state_floats;
    size_t rec_bytes; /* header + values + state, a multiple of 16 */
    int slab_shift;
    uint32_t slab_mask;
    size_t slab_bytes;
    uint8_t **slabs;
    size_t n_slabs, cap_slabs;
    size_t n_slots; /* slots handed out so far */
    uint32_t free_head;
    ps_row_map *map;
    ps_row_admit *admit;
    ps_row_counters counters;
    float *row;  /* a new row being made: values then state */
    float *grad; /* a scaled gradient */
    /* Eviction candidates, oldest first from next_victim. */
    ps__victim *victims;
    size_t n_victims, next_victim, cap_victims;
    size_t sweep_cursor;
};

/* ---- records -------------------------------------------------------------- */

static ps__header *ps__rec(const ps_row_store *st, size_t slot)
{
    return (ps__header *)(st->slabs[slot >> st->slab_shift] +
                          (slot & st->slab_mask) * st->rec_bytes);
}

static float *ps__values(ps__header *h)
{
    return (float *)(h + 1);
}

static float *ps__state(const ps_row_store *st, ps__header *h)
{
    return (float *)(h + 1) + st->cfg.dim;
}

/* Whether a row updated last at `last` reads as new at step. */
static int ps__expired(const ps_row_store *st, uint32_t last, uint64_t step)
{
    return st->cfg.expire_after && step >= (uint64_t)last + st->cfg.expire_after;
}

/* Slabs until at least `slots` slots exist. Returns 0 or -ENOMEM. */
static int ps__reserve_slots(ps_row_store *st, size_t slots)
{
    if (slots > PS__MAX_SLOTS)
        return -ENOMEM;
    while (st->n_slabs << st->slab_shift < slots) {
        void *slab;
        if (st->n_slabs == st->cap_slabs) {
            size_t cap = st->cap_slabs ? 2 * st->cap_slabs : 16;
            uint8_t **s = realloc(st->slabs, cap * sizeof(*s));
            if (!s)
                return -ENOMEM;
            st->slabs = s;
            st->cap_slabs = cap;
        }
        /* Straight from the kernel: pages are resident only once written,
         * and munmap gives them back exactly. */
        slab =
            mmap(NULL, st->slab_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (slab == MAP_FAILED)
            return -ENOMEM;
        st->slabs[st->n_slabs++] = slab;
        st->counters.bytes += st->slab_bytes;
    }
    return 0;
}

/* Free slots plus room not yet handed out, in the slabs that exist. */
static size_t ps__room(const ps_row_store *st)
{
    return (st->n_slabs << st->slab_shift) - st->n_slots + (st->n_slots - st->counters.stored);
}

/* Makes sure `more` rows can be stored without an allocation failing. */
static int ps__reserve_rows(ps_row_store *st, size_t more)
{
    size_t stored = st->counters.stored;
    int rc;

    /* Free slots are reused first: the slots in use plus `more` must exist. */
    if (more > ps__room(st) && (rc = ps__reserve_slots(st, stored + more)) < 0)
        return rc;
    return ps_row_map_reserve(st->map, stored + more);
}

/* Removes the row in slot (its ID is h->id) and frees the slot. */
static void ps__remove(ps_row_store *st, uint32_t slot, ps__header *h)
{
    ps_row_map_remove(st->map, h->id);
    h->last_step = PS__FREE;
    h->updates = st->free_head;
    st->free_head = slot;
    st->counters.stored--;
    st->counters.evicted++;
}

/* ---- capacity: the oldest rows ------------------------------------------- */

static int ps__victim_cmp(const void *a, const void *b)
{
    const ps__victim *x = a, *y = b;
    if (x->last != y->last)
        return x->last < y->last ? -1 : 1;
    return (x->id > y->id) - (x->id < y->id);
}

/* How many candidates one look at the store collects: a sixteenth of the
 * capacity, so a full scan is paid for by that many evictions. */
static size_t ps__victim_batch(const ps_row_store *st)
{
    size_t k = (size_t)(st->cfg.capacity / 16);
    return k ? k : 1;
}

#define PS__WINDOW 4096

/* Collects the ps__victim_batch oldest rows by (last, id), sorted: a
 * histogram of last steps over a window from the oldest finds the step
 * that the batch reaches; the rows up to it are collected, the array kept
 * to the batch's best by sorting and truncating whenever it fills. Rows
 * whose step is PS__WINDOW or more past the oldest are left for a later
 * look when fewer rows than a batch are older. */
static void ps__find_victims(ps_row_store *st)
{
    size_t want = ps__victim_batch(st), hist[PS__WINDOW] = {0}, cum = 0;
    uint32_t oldest = PS__FREE, cut = PS__WINDOW - 1;

    st->n_victims = st->next_victim = 0;
    for (size_t s = 0; s < st->n_slots; s++) {
        ps__header *h = ps__rec(st, s);
        if (h->last_step != PS__FREE && h->last_step < oldest)
            oldest = h->last_step;
    }
    for (size_t s = 0; s < st->n_slots; s++) {
        ps__header *h = ps__rec(st, s);
        if (h->last_step != PS__FREE && h->last_step - oldest < PS__WINDOW)
            hist[h->last_step - oldest]++;
    }
    for (uint32_t k = 0; k < PS__WINDOW; k++)
        if ((cum += hist[k]) >= want) {
            cut = k;
            break;
        }
    for (size_t s = 0; s < st->n_slots; s++) {
        ps__header *h = ps__rec(st, s);
        if (h->last_step == PS__FREE || h->last_step - oldest > cut)
            continue;
        if (st->n_victims == st->cap_victims) {
            qsort(st->victims, st->n_victims, sizeof(ps__victim), ps__victim_cmp);
            st->n_victims = want;
        }
        st->victims[st->n_victims++] = (ps__victim){.id = h->id, .last = h->last_step};
    }
    qsort(st->victims, st->n_victims, sizeof(ps__victim), ps__victim_cmp);
    if (st->n_victims > want)
        st->n_victims = want;
}

/* Evicts the least recently updated row (the store holds at least one). */
static void ps__evict_oldest(ps_row_store *st)
{
    for (;;) {
        while (st->next_victim < st->n_victims) {
            ps__victim v = st->victims[st->next_victim++];
            uint32_t slot = ps_row_map_find(st->map, v.id);
            ps__header *h;
            if (slot == PS_ROW_NO_SLOT)
                continue;
            h = ps__rec(st, slot);
            /* Updated since the look: no longer among the oldest. */
            if (h->last_step != v.last)
                continue;
            ps__remove(st, slot, h);
            return;
        }
        ps__find_victims(st);
    }
}

/* A slot for a new row, evicting first when the store is at capacity; the
 * caller reserved room. */
static uint32_t ps__take_slot(ps_row_store *st)
{
    uint32_t slot;

    /* A while: a restore may have left more rows than the capacity. */
    while (st->cfg.capacity && st->counters.stored >= st->cfg.capacity)
        ps__evict_oldest(st);
    if (st->free_head != PS_ROW_NO_SLOT) {
        slot = st->free_head;
        st->free_head = ps__rec(st, slot)->updates;
    } else {
        slot = (uint32_t)st->n_slots++;
    }
    st->counters.stored++;
    return slot;
}

/* Writes a new row (values then state from src) into a fresh slot and
 * indexes it; the caller reserved room. */
static void ps__store(ps_row_store *st, uint64_t id, uint32_t last, uint32_t updates,
                      const float *values, const float *state)
{
    uint32_t slot = ps__take_slot(st);
    ps__header *h = ps__rec(st, slot);

    *h = (ps__header){.id = id, .last_step = last, .updates = updates};
    memcpy(ps__values(h), values, st->cfg.dim * sizeof(float));
    memcpy(ps__state(st, h), state, st->state_floats * sizeof(float));
    ps_row_map_insert(st->map, id, slot);
}

/* ---- lifecycle ------------------------------------------------------------ */

int ps_row_store_check(const ps_row_store_config *cfg, char *why, size_t why_len)
{
    int rc;

    if (cfg->dim < 1 || cfg->dim > PS_ROW_MAX_DIM)
        return ps_err_printf(why, why_len, -EINVAL, "table %u: dimension %u is not in 1..%d",
                             cfg->table_id, cfg->dim, PS_ROW_MAX_DIM);
    if (cfg->expect_rows > ((uint64_t)1 << 31) || cfg->capacity > PS_ROW_MAX_CAPACITY)
        return ps_err_printf(why, why_len, -EINVAL,
                             "table %u: expected rows %llu (at most 2^31) or capacity %llu (at "
                             "most 2^32 - 2) too large",
                             cfg->table_id, (unsigned long long)cfg->expect_rows,
                             (unsigned long long)cfg->capacity);
    if ((rc = ps_row_init_check(&cfg->init, why, why_len)) < 0)
        return rc;
    if ((rc = ps_row_opt_check(&cfg->opt, why, why_len)) < 0)
        return rc;
    if (cfg->admit_after > 1) {
        if (cfg->admit_after > PS_ROW_MAX_ADMIT)
            return ps_err_printf(why, why_len, -EINVAL,
                                 "table %u: admission after %u pushes, at most %u", cfg->table_id,
                                 cfg->admit_after, UINT16_MAX);
        /* The sketch's own rules, without allocating it. */
        if (cfg->sketch_depth < 1 || cfg->sketch_depth > PS_ROW_ADMIT_MAX_DEPTH ||
            cfg->sketch_width < 64 || cfg->sketch_width > PS_ROW_ADMIT_MAX_WIDTH ||
            (cfg->sketch_width & (cfg->sketch_width - 1)) != 0)
            return ps_err_printf(why, why_len, -EINVAL,
                                 "table %u: admission sketch of depth %u (1..%d) and width %u "
                                 "(a power of two, 64..%u)",
                                 cfg->table_id, cfg->sketch_depth, PS_ROW_ADMIT_MAX_DEPTH,
                                 cfg->sketch_width, PS_ROW_ADMIT_MAX_WIDTH);
    }
    return 0;
}

int ps_row_store_create(ps_row_store **out, const ps_row_store_config *cfg, char *why,
                        size_t why_len)
{
    ps_row_store *st;
    size_t rows_per_slab = 1;
    int rc;

    *out = NULL;
    if ((rc = ps_row_store_check(cfg, why, why_len)) < 0)
        return rc;
    if (!(st = calloc(1, sizeof(*st))))
        return -ENOMEM;
    st->cfg = *cfg;
    st->free_head = PS_ROW_NO_SLOT;
    st->state_floats = ps_row_opt_state_floats(&cfg->opt, cfg->dim);
    st->rec_bytes =
        (sizeof(ps__header) + (cfg->dim + st->state_floats) * sizeof(float) + 15) & ~(size_t)15;
    while (2 * rows_per_slab * st->rec_bytes <= PS__SLAB_BYTES)
        rows_per_slab *= 2;
    while (((size_t)1 << st->slab_shift) < rows_per_slab)
        st->slab_shift++;
    st->slab_mask = (uint32_t)(rows_per_slab - 1);
    st->slab_bytes = rows_per_slab * st->rec_bytes;
    st->row = malloc((cfg->dim + st->state_floats) * sizeof(float));
    st->grad = malloc(cfg->dim * sizeof(float));
    if (!st->row || !st->grad)
        goto nomem;
    if ((rc = ps_row_map_create(&st->map, cfg->expect_rows)) < 0)
        goto fail;
    if (cfg->admit_after > 1 &&
        (rc = ps_row_admit_create(&st->admit, cfg->admit_after, cfg->sketch_depth,
                                  cfg->sketch_width, cfg->sketch_seed)) < 0)
        goto fail;
    if (cfg->capacity) {
        st->cap_victims = 2 * ps__victim_batch(st) + 64;
        if (!(st->victims = malloc(st->cap_victims * sizeof(ps__victim))))
            goto nomem;
    }
    *out = st;
    return 0;
nomem:
    rc = -ENOMEM;
fail:
    ps_row_store_free(st);
    return rc;
}

void ps_row_store_free(ps_row_store *st)
{
    if (!st)
        return;
    for (size_t i = 0; i < st->n_slabs; i++)
        munmap(st->slabs[i], st->slab_bytes);
    free(st->slabs);
    ps_row_map_free(st->map);
    ps_row_admit_free(st->admit);
    free(st->row);
    free(st->grad);
    free(st->victims);
    free(st);
}

size_t ps_row_store_state_floats(const ps_row_store *st)
{
    return st->state_floats;
}

/* ---- reads ---------------------------------------------------------------- */

/* How far ahead the batch loops look: far enough that a bucket's and a
 * record's cache misses are in flight while the rows before are worked on. */
#define PS__AHEAD 16
/* How much of a record the look-ahead asks for: its first two cache lines.
 * The rest of a row streams in behind them once it is read; asking for all
 * of it (13 lines of an Adam row at D = 64), 16 rows ahead, filled the
 * core's miss buffers and stalled the loop on the prefetches themselves. */
#define PS__PREFETCH_BYTES 128

/* The batch loops' look-ahead, at row i: the index bucket of ID i + 2A is
 * asked for, and the record of ID i + A (its bucket asked for A rows ago)
 * is found and its first PS__PREFETCH_BYTES asked for. Returns that slot
 * (PS_ROW_NO_SLOT when none): a gather keeps it for when it gets there; an
 * apply finds the ID again then (a cached bucket), because it may evict or
 * move rows in between. */
static uint32_t ps__look_ahead(const ps_row_store *st, const uint64_t *ids, size_t n, size_t i)
{
    uint32_t slot = PS_ROW_NO_SLOT;

    if (i + 2 * PS__AHEAD < n)
        ps_row_map_prefetch(st->map, ids[i + 2 * PS__AHEAD]);
    if (i + PS__AHEAD < n &&
        (slot = ps_row_map_find(st->map, ids[i + PS__AHEAD])) != PS_ROW_NO_SLOT) {
        const char *p = (const char *)ps__rec(st, slot);
        for (size_t off = 0; off < PS__PREFETCH_BYTES; off += 64)
            __builtin_prefetch(p + off);
    }
    return slot;
}

/* The first rows' buckets, before a batch loop starts looking ahead. */
static void ps__look_first(const ps_row_store *st, const uint64_t *ids, size_t n)
{
    for (size_t i = 0; i < n && i < 2 * PS__AHEAD; i++)
        ps_row_map_prefetch(st->map, ids[i]);
}

int ps_row_store_gather(const ps_row_store *st, const uint64_t *ids, size_t n, uint64_t step,
                        float *out, size_t *found)
{
    const uint32_t dim = st->cfg.dim;
    uint32_t ahead[PS__AHEAD]; /* the slots of IDs i .. i + A - 1 */
    size_t hits = 0;

    if (step > PS_ROW_MAX_STEP)
        return -ERANGE;
    ps__look_first(st, ids, n);
    for (size_t i = 0; i < n && i < PS__AHEAD; i++)
        ahead[i] = ps_row_map_find(st->map, ids[i]);
    for (size_t i = 0; i < n; i++) {
        uint32_t slot = ahead[i % PS__AHEAD];
        ahead[i % PS__AHEAD] = ps__look_ahead(st, ids, n, i);
        if (slot != PS_ROW_NO_SLOT) {
            ps__header *h = ps__rec(st, slot);
            if (!ps__expired(st, h->last_step, step)) {
                memcpy(out + i * dim, ps__values(h), dim * sizeof(float));
                hits++;
                continue;
            }
        }
        ps_row_init_values(&st->cfg.init, st->cfg.table_id, ids[i], 0, dim, out + i * dim);
    }
    if (found)
        *found = hits;
    return 0;
}

/* ---- apply ---------------------------------------------------------------- */

static int ps__all_finite(const float *g, size_t n)
{
    uint32_t bad = 0;

    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &g[i], sizeof(u));
        bad |= (u & 0x7f800000u) == 0x7f800000u;
    }
    return !bad;
}

/* A row that is not stored (or has expired): counted for admission, made
 * from its initial values and zero state, updated, and stored if the
 * update is finite. */
static void ps__apply_new(ps_row_store *st, uint64_t id, const float *g, uint32_t step, float lr,
                          ps_row_apply_result *res)
{
    const uint32_t dim = st->cfg.dim;
    float *values = st->row, *state = st->row + dim;

    /* A non-finite push counts toward nothing. */
    if (!ps__all_finite(g, dim)) {
        res->refused++;
        return;
    }
    if (st->admit && !ps_row_admit_push(st->admit, id)) {
        res->filtered++;
        return;
    }
    ps_row_init_values(&st->cfg.init, st->cfg.table_id, id, 0, dim, values);
    memset(state, 0, st->state_floats * sizeof(float));
    if (ps_row_opt_apply(&st->cfg.opt, lr, values, state, g, dim, 1) < 0) {
        res->refused++;
        return;
    }
    ps__store(st, id, step, 1, values, state);
    st->counters.admitted += st->admit != NULL;
    res->created++;
    res->applied++;
}

int ps_row_store_apply(ps_row_store *st, const uint64_t *ids, const float *grads, size_t n,
                       uint64_t step, float lr, float scale, ps_row_apply_result *res)
{
    const uint32_t dim = st->cfg.dim;
    ps_row_apply_result r = {0};
    uint64_t evicted_before = st->counters.evicted;
    int rc;

    if (res)
        *res = r;
    if (step > PS_ROW_MAX_STEP)
        return -ERANGE;
    if (!isfinite(scale))
        return -EINVAL;
    /* Every ID could be new: room for all of them, so that nothing after
     * this point can fail half-way through the batch. */
    if ((rc = ps__reserve_rows(st, n)) < 0)
        return rc;
    ps__look_first(st, ids, n);
    for (size_t i = 0; i < n; i++) {
        const float *g = grads + i * dim;
        uint32_t slot;
        ps__header *h;

        ps__look_ahead(st, ids, n, i);
        if (scale != 1.0f) {
            for (uint32_t k = 0; k < dim; k++)
                st->grad[k] = g[k] * scale;
            g = st->grad;
        }
        slot = ps_row_map_find(st->map, ids[i]);
        if (slot == PS_ROW_NO_SLOT) {
            ps__apply_new(st, ids[i], g, (uint32_t)step, lr, &r);
            continue;
        }
        h = ps__rec(st, slot);
        if (ps__expired(st, h->last_step, step)) {
            ps__remove(st, slot, h);
            st->counters.expired++;
            ps__apply_new(st, ids[i], g, (uint32_t)step, lr, &r);
            continue;
        }
        if (ps_row_opt_apply(&st->cfg.opt, lr, ps__values(h), ps__state(st, h), g, dim,
                             (uint64_t)h->updates + 1) < 0) {
            r.refused++;
            continue;
        }
        h->updates += h->updates < UINT32_MAX;
        if (step > h->last_step)
            h->last_step = (uint32_t)step;
        r.applied++;
    }
    r.evicted = (size_t)(st->counters.evicted - evicted_before);
    st->counters.created += r.created;
    st->counters.filtered += r.filtered;
    st->counters.refused += r.refused;
    if (res)
        *res = r;
    return 0;
}

long ps_row_store_sweep(ps_row_store *st, uint64_t step, size_t max_slots)
{
    long removed = 0;

    if (step > PS_ROW_MAX_STEP)
        return -ERANGE;
    if (!st->cfg.expire_after || st->n_slots == 0)
        return 0;
    if (max_slots > st->n_slots)
        max_slots = st->n_slots;
    for (size_t k = 0; k < max_slots; k++) {
        uint32_t slot = (uint32_t)(st->sweep_cursor++ % st->n_slots);
        ps__header *h = ps__rec(st, slot);
        if (h->last_step != PS__FREE && ps__expired(st, h->last_step, step)) {
            ps__remove(st, slot, h);
            st->counters.expired++;
            removed++;
        }
    }
    st->sweep_cursor %= st->n_slots;
    return removed;
}

void ps_row_store_counters(const ps_row_store *st, ps_row_counters *out)
{
    *out = st->counters;
    out->bytes += sizeof(*st) + ps_row_map_bytes(st->map) +
                  (st->admit ? ps_row_admit_bytes(st->admit) : 0) +
                  (2 * st->cfg.dim + st->state_floats) * sizeof(float) +
                  st->cap_victims * sizeof(ps__victim) + st->cap_slabs * sizeof(uint8_t *);
}

/* ---- checkpoints ---------------------------------------------------------- */

void ps_row_store_add_counters(ps_row_store *st, const ps_row_counters *c)
{
    st->counters.created += c->created;
    st->counters.admitted += c->admitted;
    st->counters.filtered += c->filtered;
    st->counters.evicted += c->evicted;
    st->counters.expired += c->expired;
    st->counters.refused += c->refused;
}

int ps_row_store_visit(const ps_row_store *st, uint64_t step, uint64_t *cursor, size_t max_rows,
                       ps_row_visit_fn fn, void *arg)
{
    size_t done = 0;

    for (; *cursor < st->n_slots; ++*cursor) {
        ps__header *h = ps__rec(st, (size_t)*cursor);
        ps_row_view v;
        int rc;
        if (h->last_step == PS__FREE || ps__expired(st, h->last_step, step))
            continue;
        if (done == max_rows)
            return 1;
        v = (ps_row_view){.id = h->id,
                          .last_step = h->last_step,
                          .updates = h->updates,
                          .values = ps__values(h),
                          .state = ps__state(st, h),
                          .record = h};
        if ((rc = fn(arg, &v)) < 0)
            return rc;
        done++;
    }
    return 0;
}

int ps_row_store_insert(ps_row_store *st, const ps_row_view *row)
{
    int rc;

    if (row->last_step > PS_ROW_MAX_STEP || !ps__all_finite(row->values, st->cfg.dim) ||
        !ps__all_finite(row->state, st->state_floats))
        return -ERANGE;
    if (ps_row_map_find(st->map, row->id) != PS_ROW_NO_SLOT)
        return -EEXIST;
    if ((rc = ps__reserve_rows(st, 1)) < 0)
        return rc;
    /* A restored row may be older than every candidate found so far. */
    st->n_victims = st->next_victim = 0;
    ps__store(st, row->id, row->last_step, row->updates, row->values, row->state);
    return 0;
}

const ps_row_admit *ps_row_store_admission(const ps_row_store *st)
{
    return st->admit;
}

int ps_row_store_set_admission(ps_row_store *st, ps_row_admit *sketch)
{
    if (!st->admit || ps_row_admit_threshold(sketch) != st->cfg.admit_after)
        return -PS_EMISMATCH;
    ps_row_admit_free(st->admit);
    st->admit = sketch;
    return 0;
}
