/* Tests for the row store: reads create nothing; an apply makes a row from
 * its initializer and updates it as the optimizer does on its own; scaled
 * gradients; whole-batch refusals before anything changes (a bad scale or
 * step; an ID named twice is the wire's to refuse, test_row_wire.c) and per-row refusals of
 * non-finite updates; admission after N pushes and its sketch saved and restored; expiry exact at
 * its step and swept; capacity evicting by (last step, ID) against a plain simulation; a
 * checkpoint's walk and re-insert giving a store that visits and trains on bit for bit the same; a
 * random workload against a plain per-row reference. */
#include <criterion/criterion.h>

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../test_rng.h"
#include "ps_error.h"
#include "row_store.h"

static ps_row_store_config config(const char *opt, uint32_t dim)
{
    ps_row_store_config c = {
        .table_id = 3,
        .dim = dim,
        .init = {.kind = PS_ROW_INIT_UNIFORM, .seed = 17, .lo = -0.1, .hi = 0.1},
    };
    cr_assert_eq(ps_row_opt_parse(opt, &c.opt), 0);
    return c;
}

static ps_row_store *create(const ps_row_store_config *c)
{
    ps_row_store *st;
    char why[200];

    cr_assert_eq(ps_row_store_create(&st, c, why, sizeof(why)), 0, "%s", why);
    return st;
}

static ps_row_counters counters(const ps_row_store *st)
{
    ps_row_counters c;
    ps_row_store_counters(st, &c);
    return c;
}

Test(row_store, configuration_rules)
{
    ps_row_store_config c = config("adam", 8);
    ps_row_store *st;
    char why[200];

    cr_assert_eq(ps_row_store_check(&c, why, sizeof(why)), 0);
    c.dim = 0;
    cr_assert_eq(ps_row_store_create(&st, &c, why, sizeof(why)), -EINVAL);
    cr_assert_null(st);
    cr_assert(strstr(why, "dimension"), "%s", why);
    c = config("adam", 8);
    c.admit_after = 3;
    c.sketch_depth = 4;
    c.sketch_width = 1000;
    cr_assert_eq(ps_row_store_check(&c, why, sizeof(why)), -EINVAL);
    cr_assert(strstr(why, "sketch"), "%s", why);
    c.sketch_width = 1024;
    cr_assert_eq(ps_row_store_check(&c, why, sizeof(why)), 0);
    c.admit_after = 70000;
    cr_assert_eq(ps_row_store_check(&c, why, sizeof(why)), -EINVAL);
    c = config("adam", 8);
    c.init.hi = -1.0;
    cr_assert_eq(ps_row_store_check(&c, why, sizeof(why)), -EINVAL);
    c = config("adam", 8);
    c.opt.rowwise = 1;
    cr_assert_eq(ps_row_store_check(&c, why, sizeof(why)), -EINVAL);
    c = config("adam", 8);
    c.expect_rows = (1ULL << 31) + 1;
    cr_assert_eq(ps_row_store_check(&c, why, sizeof(why)), -EINVAL);
    c = config("adam", 8);
    c.capacity = UINT32_MAX;
    cr_assert_eq(ps_row_store_check(&c, why, sizeof(why)), -EINVAL);
    cr_assert(strstr(why, "capacity"), "%s", why);
    ps_row_store_free(NULL);
}

Test(row_store, reads_create_nothing)
{
    ps_row_store_config c = config("sgd", 6);
    ps_row_store *st = create(&c);
    uint64_t ids[3] = {0, 42, UINT64_MAX};
    float out[18], want[6];
    size_t found = 99;

    cr_assert_eq(ps_row_store_gather(st, ids, 3, 7, out, &found), 0);
    cr_assert_eq(found, 0);
    for (int i = 0; i < 3; i++) {
        ps_row_init_values(&c.init, c.table_id, ids[i], 0, 6, want);
        cr_assert_eq(memcmp(&out[i * 6], want, sizeof(want)), 0);
    }
    cr_assert_eq(counters(st).stored, 0);
    cr_assert_eq(counters(st).created, 0);
    cr_assert_eq(ps_row_store_gather(st, ids, 0, 7, out, NULL), 0);
    cr_assert_eq(ps_row_store_gather(st, ids, 1, (uint64_t)PS_ROW_MAX_STEP + 1, out, NULL),
                 -ERANGE);
    ps_row_store_free(st);
}

/* The value a row takes after updates g[0..k) (each dim floats) from its
 * initial values, through the optimizer alone. */
static void expected_row(const ps_row_store_config *c, uint64_t id, const float *g, int k, float lr,
                         float *w)
{
    float state[3 * 64] = {0};

    ps_row_init_values(&c->init, c->table_id, id, 0, c->dim, w);
    for (int j = 0; j < k; j++)
        cr_assert_eq(
            ps_row_opt_apply(&c->opt, lr, w, state, g + j * c->dim, c->dim, (uint64_t)j + 1), 0);
}

Test(row_store, apply_creates_then_updates)
{
    const char *names[] = {"sgd", "adagrad", "rowwise-adagrad", "adam"};

    for (int k = 0; k < 4; k++) {
        ps_row_store_config c = config(names[k], 8);
        ps_row_store *st = create(&c);
        uint64_t ids[2] = {1000, 7};
        float g[2][16], out[16], want[8];
        ps_row_apply_result r;

        rng_state = 3;
        fill_random(&g[0][0], 32, 1.0);
        /* ids[0] gets g[0][0..8) then g[1][0..8); ids[1] gets g[0][8..) then g[1][8..). */
        cr_assert_eq(ps_row_store_apply(st, ids, g[0], 2, 5, 0.05f, 1.0f, &r), 0);
        cr_assert_eq(r.created, 2);
        cr_assert_eq(r.applied, 2);
        cr_assert_eq(ps_row_store_apply(st, ids, g[1], 2, 6, 0.05f, 1.0f, &r), 0);
        cr_assert_eq(r.created, 0);
        cr_assert_eq(r.applied, 2);
        cr_assert_eq(ps_row_store_gather(st, ids, 2, 6, out, NULL), 0);
        for (int i = 0; i < 2; i++) {
            float gi[16];
            memcpy(gi, &g[0][i * 8], 8 * sizeof(float));
            memcpy(gi + 8, &g[1][i * 8], 8 * sizeof(float));
            expected_row(&c, ids[i], gi, 2, 0.05f, want);
            cr_assert_eq(memcmp(&out[i * 8], want, sizeof(want)), 0, "%s row %d", names[k], i);
        }
        cr_assert_eq(counters(st).stored, 2);
        cr_assert_eq(counters(st).created, 2);
        ps_row_store_free(st);
    }
}

/* Batches of new rows that do not fill whole slabs (4,096 records of dim
 * 64 with Adagrad each): every batch's room is reserved before its first
 * row is written, however much of the last slab earlier batches left. */
Test(row_store, batches_that_leave_slabs_part_full)
{
    ps_row_store_config c = config("adagrad", 64);
    ps_row_store *st = create(&c);
    static uint64_t ids[3000];
    static float g[3000 * 64], out[64];
    ps_row_apply_result r;

    for (int i = 0; i < 3000 * 64; i++)
        g[i] = 1e-3f;
    for (uint64_t b = 0; b < 4; b++) {
        for (uint64_t i = 0; i < 3000; i++)
            ids[i] = b * 3000 + i + 1;
        cr_assert_eq(ps_row_store_apply(st, ids, g, 3000, b, 0.01f, 1.0f, &r), 0);
        cr_assert_eq(r.created, 3000);
    }
    cr_assert_eq(counters(st).stored, 12000);
    cr_assert_eq(ps_row_store_gather(st, ids + 2999, 1, 4, out, NULL), 0);
    cr_assert(out[0] > -1 && out[0] < 1);
    ps_row_store_free(st);
}

/* scale multiplies the gradient before the update: the same bits as
 * pushing the multiplied gradient (1/W in sync mode). */
Test(row_store, scaled_gradients)
{
    ps_row_store_config c = config("adam", 16);
    ps_row_store *a = create(&c), *b = create(&c);
    uint64_t ids[5] = {1, 2, 3, 4, 5};
    float g[80], gs[80], oa[80], ob[80];

    rng_state = 8;
    fill_random(g, 80, 2.0);
    for (int i = 0; i < 80; i++)
        gs[i] = g[i] * (1.0f / 3.0f);
    cr_assert_eq(ps_row_store_apply(a, ids, g, 5, 1, 0.01f, 1.0f / 3.0f, NULL), 0);
    cr_assert_eq(ps_row_store_apply(b, ids, gs, 5, 1, 0.01f, 1.0f, NULL), 0);
    cr_assert_eq(ps_row_store_gather(a, ids, 5, 1, oa, NULL), 0);
    cr_assert_eq(ps_row_store_gather(b, ids, 5, 1, ob, NULL), 0);
    cr_assert_eq(memcmp(oa, ob, sizeof(oa)), 0);
    ps_row_store_free(a);
    ps_row_store_free(b);
}

Test(row_store, whole_batch_refusals_change_nothing)
{
    ps_row_store_config c = config("sgd", 4);
    ps_row_store *st = create(&c);
    uint64_t ok[2] = {1, 2};
    float g[12] = {0.5f};

    cr_assert_eq(ps_row_store_apply(st, ok, g, 2, 1, 0.1f, NAN, NULL), -EINVAL);
    cr_assert_eq(ps_row_store_apply(st, ok, g, 2, 1, 0.1f, INFINITY, NULL), -EINVAL);
    cr_assert_eq(ps_row_store_apply(st, ok, g, 2, (uint64_t)PS_ROW_MAX_STEP + 1, 0.1f, 1.0f, NULL),
                 -ERANGE);
    cr_assert_eq(counters(st).stored, 0);
    /* Many IDs with only high bits set are stored each on its own row (a
     * batch naming one twice is the wire's to refuse: test_row_wire.c). */
    {
        uint64_t many[2000];
        float *gm = calloc(2000 * 4, sizeof(float));
        for (int i = 0; i < 2000; i++)
            many[i] = (uint64_t)i << 44;
        cr_assert_eq(ps_row_store_apply(st, many, gm, 2000, 1, 0.1f, 1.0f, NULL), 0);
        cr_assert_eq(counters(st).stored, 2000);
        free(gm);
    }
    ps_row_store_free(st);
}

Test(row_store, non_finite_rows_refused_one_by_one)
{
    ps_row_store_config c = config("adagrad", 4);
    ps_row_store *st = create(&c);
    uint64_t ids[4] = {10, 11, 12, 13};
    float g[16], before[16], after[16], init[4];
    ps_row_apply_result r;

    for (int i = 0; i < 16; i++)
        g[i] = 0.01f * (float)(i + 1);
    cr_assert_eq(ps_row_store_apply(st, ids, g, 3, 1, 0.1f, 1.0f, NULL), 0); /* 10, 11, 12 */
    cr_assert_eq(ps_row_store_gather(st, ids, 4, 1, before, NULL), 0);
    g[1 * 4 + 2] = NAN;      /* stored row 11 */
    g[3 * 4 + 0] = INFINITY; /* new row 13 */
    cr_assert_eq(ps_row_store_apply(st, ids, g, 4, 2, 0.1f, 1.0f, &r), 0);
    cr_assert_eq(r.applied, 2);
    cr_assert_eq(r.refused, 2);
    cr_assert_eq(r.created, 0);
    cr_assert_eq(ps_row_store_gather(st, ids, 4, 2, after, NULL), 0);
    cr_assert_eq(memcmp(&before[4], &after[4], 4 * sizeof(float)), 0);
    cr_assert_neq(memcmp(&before[0], &after[0], 4 * sizeof(float)), 0);
    ps_row_init_values(&c.init, c.table_id, 13, 0, 4, init);
    cr_assert_eq(memcmp(&after[12], init, sizeof(init)), 0);
    cr_assert_eq(counters(st).stored, 3);
    cr_assert_eq(counters(st).refused, 2);
    ps_row_store_free(st);
}

Test(row_store, admission_after_n_pushes)
{
    ps_row_store_config c = config("sgd", 4);
    ps_row_store *st, *copy;
    uint64_t id = 5;
    float g1[4] = {1, 1, 1, 1}, g3[4] = {0.5f, -0.5f, 0.25f, 2.0f}, out[4], want[4];
    ps_row_apply_result r;
    ps_row_admit *sketch;
    uint8_t buf[28 + 4 * 1024 * 2];
    char why[200];

    c.admit_after = 3;
    c.sketch_depth = 4;
    c.sketch_width = 1024;
    st = create(&c);
    copy = create(&c);
    for (int push = 0; push < 2; push++) {
        cr_assert_eq(ps_row_store_apply(st, &id, g1, 1, (uint64_t)push, 0.1f, 1.0f, &r), 0);
        cr_assert_eq(r.filtered, 1);
        cr_assert_eq(r.applied, 0);
        cr_assert_eq(ps_row_store_gather(st, &id, 1, 2, out, NULL), 0);
        ps_row_init_values(&c.init, c.table_id, id, 0, 4, want);
        cr_assert_eq(memcmp(out, want, sizeof(out)), 0);
    }
    cr_assert_eq(counters(st).stored, 0);
    /* The sketch carries the two pushes over to another store. */
    cr_assert_eq(ps_row_admit_save(ps_row_store_admission(st), buf, sizeof(buf)),
                 (long)sizeof(buf));
    cr_assert_eq(ps_row_admit_load(&sketch, buf, sizeof(buf), why, sizeof(why)), 0);
    cr_assert_eq(ps_row_store_set_admission(copy, sketch), 0);
    /* The third push is stored: only its own gradient applied. */
    cr_assert_eq(ps_row_store_apply(st, &id, g3, 1, 2, 0.1f, 1.0f, &r), 0);
    cr_assert_eq(r.created, 1);
    cr_assert_eq(ps_row_store_apply(copy, &id, g3, 1, 2, 0.1f, 1.0f, NULL), 0);
    expected_row(&c, id, g3, 1, 0.1f, want);
    cr_assert_eq(ps_row_store_gather(st, &id, 1, 2, out, NULL), 0);
    cr_assert_eq(memcmp(out, want, sizeof(out)), 0);
    cr_assert_eq(ps_row_store_gather(copy, &id, 1, 2, out, NULL), 0);
    cr_assert_eq(memcmp(out, want, sizeof(out)), 0);
    cr_assert_eq(counters(st).filtered, 2);
    cr_assert_eq(counters(st).created, 1);
    cr_assert_eq(counters(st).admitted, 1);
    /* A sketch of another threshold, or a store without admission, refuses. */
    cr_assert_eq(ps_row_admit_create(&sketch, 4, 4, 1024, 0), 0);
    cr_assert_eq(ps_row_store_set_admission(st, sketch), -PS_EMISMATCH);
    ps_row_admit_free(sketch);
    ps_row_store_free(st);
    ps_row_store_free(copy);
    c.admit_after = 0;
    st = create(&c);
    cr_assert_null(ps_row_store_admission(st));
    ps_row_store_free(st);
}

Test(row_store, expiry_exact_at_its_step)
{
    ps_row_store_config c = config("sgd", 4);
    ps_row_store *st;
    uint64_t ids[2] = {1, 2}, cursor = 0;
    float g[8] = {1, 2, 3, 4, 5, 6, 7, 8}, out[4], init[4], want[4];
    ps_row_apply_result r;

    c.expire_after = 5;
    st = create(&c);
    cr_assert_eq(ps_row_store_apply(st, ids, g, 2, 10, 0.1f, 1.0f, NULL), 0);
    ps_row_init_values(&c.init, c.table_id, 1, 0, 4, init);
    expected_row(&c, 1, g, 1, 0.1f, want);
    cr_assert_eq(ps_row_store_gather(st, ids, 1, 14, out, NULL), 0);
    cr_assert_eq(memcmp(out, want, sizeof(out)), 0);
    cr_assert_eq(ps_row_store_gather(st, ids, 1, 15, out, NULL), 0);
    cr_assert_eq(memcmp(out, init, sizeof(out)), 0);
    /* Still in memory, but a checkpoint at step 15 does not hold it. */
    cr_assert_eq(counters(st).stored, 2);
    cr_assert_eq(ps_row_store_visit(st, 15, &cursor, 10, NULL, NULL), 0);
    /* Pushed again, it starts afresh from its initial values. */
    cr_assert_eq(ps_row_store_apply(st, ids, g + 4, 1, 15, 0.1f, 1.0f, &r), 0);
    cr_assert_eq(r.created, 1);
    cr_assert_eq(r.evicted, 1);
    expected_row(&c, 1, g + 4, 1, 0.1f, want);
    cr_assert_eq(ps_row_store_gather(st, ids, 1, 15, out, NULL), 0);
    cr_assert_eq(memcmp(out, want, sizeof(out)), 0);
    /* Row 2 expires at 15 and is swept. */
    cr_assert_eq(ps_row_store_sweep(st, 14, 100), 0);
    cr_assert_eq(ps_row_store_sweep(st, 15, 100), 1);
    cr_assert_eq(counters(st).stored, 1);
    cr_assert_eq(counters(st).expired, 2);
    cr_assert_eq(counters(st).evicted, 2);
    cr_assert_eq(ps_row_store_sweep(st, (uint64_t)PS_ROW_MAX_STEP + 1, 1), -ERANGE);
    ps_row_store_free(st);
}

/* A plain simulation of capacity: each new row evicts, when the store is
 * full, the row with the least (last step, ID). */
typedef struct {
    int present;
    uint32_t last;
} sim_row;

static void sim_apply(sim_row *sim, int universe, const uint64_t *ids, int n, uint32_t step,
                      int capacity, int *count)
{
    for (int i = 0; i < n; i++) {
        sim_row *s = &sim[ids[i]];
        if (s->present) {
            s->last = step;
            continue;
        }
        if (*count == capacity) {
            int victim = -1;
            for (int k = 0; k < universe; k++)
                if (sim[k].present && (victim < 0 || sim[k].last < sim[victim].last))
                    victim = k;
            sim[victim].present = 0;
            (*count)--;
        }
        *s = (sim_row){.present = 1, .last = step};
        (*count)++;
    }
}

Test(row_store, capacity_evicts_least_recently_updated)
{
    enum { U = 400, CAP = 160, BATCH = 40, STEPS = 60 };
    ps_row_store_config c = config("sgd", 4);
    ps_row_store *st;
    sim_row sim[U] = {{0}};
    uint64_t ids[BATCH];
    float g[BATCH * 4] = {0}, out[4];
    int count = 0;

    c.capacity = CAP;
    st = create(&c);
    rng_state = 77;
    for (int step = 0; step < STEPS; step++) {
        /* A batch of distinct IDs, skewed toward low ones so some stay hot. */
        for (int i = 0; i < BATCH; i++) {
            uint64_t id;
            int again;
            do {
                id = (uint64_t)(rng_uniform() * rng_uniform() * U);
                again = 0;
                for (int j = 0; j < i; j++)
                    again |= ids[j] == id;
            } while (again);
            ids[i] = id;
        }
        cr_assert_eq(ps_row_store_apply(st, ids, g, BATCH, (uint64_t)step, 0.1f, 1.0f, NULL), 0);
        sim_apply(sim, U, ids, BATCH, (uint32_t)step, CAP, &count);
        cr_assert_leq(counters(st).stored, CAP);
    }
    for (uint64_t id = 0; id < U; id++) {
        size_t found;
        cr_assert_eq(ps_row_store_gather(st, &id, 1, STEPS, out, &found), 0);
        cr_assert_eq((int)found, sim[id].present, "id %llu", (unsigned long long)id);
    }
    cr_assert_eq((int)counters(st).stored, count);
    cr_assert_gt(counters(st).evicted, 0);
    ps_row_store_free(st);
}

/* ---- checkpoints ---------------------------------------------------------- */

typedef struct {
    size_t n, cap, dim, sf;
    uint64_t *id;
    uint32_t *last, *updates;
    float *values, *state;
} rows_copy;

static int collect(void *arg, const ps_row_view *v)
{
    rows_copy *rc = arg;
    if (rc->n == rc->cap)
        return -ENOSPC;
    rc->id[rc->n] = v->id;
    rc->last[rc->n] = v->last_step;
    rc->updates[rc->n] = v->updates;
    memcpy(&rc->values[rc->n * rc->dim], v->values, rc->dim * sizeof(float));
    memcpy(&rc->state[rc->n * rc->sf], v->state, rc->sf * sizeof(float));
    rc->n++;
    return 0;
}

static rows_copy walk(const ps_row_store *st, uint64_t step, size_t dim)
{
    rows_copy rc = {.cap = 4096, .dim = dim, .sf = ps_row_store_state_floats(st)};
    uint64_t cursor = 0;
    int more;

    rc.id = malloc(rc.cap * sizeof(uint64_t));
    rc.last = malloc(rc.cap * sizeof(uint32_t));
    rc.updates = malloc(rc.cap * sizeof(uint32_t));
    rc.values = malloc(rc.cap * dim * sizeof(float));
    rc.state = malloc(rc.cap * rc.sf * sizeof(float) + 1);
    /* A few rows at a time, as a writer streams them. */
    while ((more = ps_row_store_visit(st, step, &cursor, 7, collect, &rc)) == 1)
        ;
    cr_assert_eq(more, 0);
    return rc;
}

static void rows_free(rows_copy *rc)
{
    free(rc->id);
    free(rc->last);
    free(rc->updates);
    free(rc->values);
    free(rc->state);
}

/* Sorts a copy's rows by ID (selection of indices, then a permuted copy). */
static const rows_copy *sort_cmp_base;

static int cmp_by_id(const void *x, const void *y)
{
    uint64_t a = sort_cmp_base->id[*(const size_t *)x], b = sort_cmp_base->id[*(const size_t *)y];
    return (a > b) - (a < b);
}

static rows_copy sorted(const rows_copy *rc)
{
    rows_copy out = *rc;
    size_t *order = malloc(rc->n * sizeof(size_t) + 1);

    for (size_t i = 0; i < rc->n; i++)
        order[i] = i;
    sort_cmp_base = rc;
    qsort(order, rc->n, sizeof(size_t), cmp_by_id);
    out.id = malloc(rc->cap * sizeof(uint64_t));
    out.last = malloc(rc->cap * sizeof(uint32_t));
    out.updates = malloc(rc->cap * sizeof(uint32_t));
    out.values = malloc(rc->cap * rc->dim * sizeof(float));
    out.state = malloc(rc->cap * rc->sf * sizeof(float) + 1);
    for (size_t i = 0; i < rc->n; i++) {
        size_t k = order[i];
        out.id[i] = rc->id[k];
        out.last[i] = rc->last[k];
        out.updates[i] = rc->updates[k];
        memcpy(&out.values[i * rc->dim], &rc->values[k * rc->dim], rc->dim * sizeof(float));
        memcpy(&out.state[i * rc->sf], &rc->state[k * rc->sf], rc->sf * sizeof(float));
    }
    free(order);
    return out;
}

static void same_rows(const rows_copy *a, const rows_copy *b)
{
    cr_assert_eq(a->n, b->n);
    cr_assert_eq(memcmp(a->id, b->id, a->n * sizeof(uint64_t)), 0);
    cr_assert_eq(memcmp(a->last, b->last, a->n * sizeof(uint32_t)), 0);
    cr_assert_eq(memcmp(a->updates, b->updates, a->n * sizeof(uint32_t)), 0);
    cr_assert_eq(memcmp(a->values, b->values, a->n * a->dim * sizeof(float)), 0);
    cr_assert_eq(memcmp(a->state, b->state, a->n * a->sf * sizeof(float)), 0);
}

/* Applies STEPS random batches of IDs from a universe of 600 to st from
 * step first on; the same seed gives the same batches. */
static void train(ps_row_store *st, uint32_t dim, uint64_t seed, int first, int steps)
{
    uint64_t ids[64];
    float *g = malloc(64 * dim * sizeof(float));

    rng_state = seed;
    for (int s = first; s < first + steps; s++) {
        int n = 0;
        for (uint64_t id = rng_next() % 10; id < 600 && n < 64; id += 1 + rng_next() % 20)
            ids[n++] = id * 0x100000001ULL;
        fill_random(g, (size_t)n * dim, 0.5);
        cr_assert_eq(ps_row_store_apply(st, ids, g, (size_t)n, (uint64_t)s, 0.01f, 0.5f, NULL), 0);
    }
    free(g);
}

Test(row_store, walk_and_insert_round_trip)
{
    ps_row_store_config c = config("adam", 5);
    ps_row_store *a, *b;
    rows_copy ra, rb, ra2, rb2;
    ps_row_view v;

    c.expire_after = 8;
    a = create(&c);
    b = create(&c);
    train(a, 5, 1, 0, 20);
    /* Some rows expired by step 20 and are left out; the store still holds
     * them until swept. */
    ra = walk(a, 20, 5);
    cr_assert_gt(ra.n, 100);
    cr_assert_lt(ra.n, counters(a).stored);
    for (size_t i = 0; i < ra.n; i++) {
        v = (ps_row_view){.id = ra.id[i],
                          .last_step = ra.last[i],
                          .updates = ra.updates[i],
                          .values = &ra.values[i * 5],
                          .state = &ra.state[i * ra.sf]};
        cr_assert_eq(ps_row_store_insert(b, &v), 0);
    }
    rb = walk(b, 20, 5);
    same_rows(&ra, &rb);
    cr_assert_eq(counters(b).created, 0);
    /* Trained on alike, they hold the same rows bit for bit (in another
     * slot order: the original reuses the slots of its expired rows). */
    train(a, 5, 2, 20, 10);
    train(b, 5, 2, 20, 10);
    {
        rows_copy wa = walk(a, 30, 5), wb = walk(b, 30, 5);
        ra2 = sorted(&wa);
        rb2 = sorted(&wb);
        rows_free(&wa);
        rows_free(&wb);
    }
    same_rows(&ra2, &rb2);
    /* Insert's refusals. */
    v = (ps_row_view){.id = ra.id[0], .values = &ra.values[0], .state = &ra.state[0]};
    cr_assert_eq(ps_row_store_insert(b, &v), -EEXIST);
    v.id = 1ULL << 63;
    v.last_step = PS_ROW_MAX_STEP + 1u;
    cr_assert_eq(ps_row_store_insert(b, &v), -ERANGE);
    v.last_step = 0;
    ra.values[2] = NAN;
    cr_assert_eq(ps_row_store_insert(b, &v), -ERANGE);
    rows_free(&ra);
    rows_free(&rb);
    rows_free(&ra2);
    rows_free(&rb2);
    ps_row_store_free(a);
    ps_row_store_free(b);
}

static int refuse_third(void *arg, const ps_row_view *v)
{
    int *seen = arg;
    (void)v;
    return ++*seen == 3 ? -ECANCELED : 0;
}

Test(row_store, walk_stops_on_error)
{
    ps_row_store_config c = config("sgd", 2);
    ps_row_store *st = create(&c);
    uint64_t ids[5] = {1, 2, 3, 4, 5}, cursor = 0;
    float g[10] = {0};
    int seen = 0;

    cr_assert_eq(ps_row_store_apply(st, ids, g, 5, 0, 0.1f, 1.0f, NULL), 0);
    cr_assert_eq(ps_row_store_visit(st, 0, &cursor, 100, refuse_third, &seen), -ECANCELED);
    cr_assert_eq(cursor, 2);
    ps_row_store_free(st);
}

/* A random workload on a store that grows from nothing, against a plain
 * per-row reference (an array over the universe, each row made from its
 * initializer at its first push and updated by the optimizer). */
Test(row_store, random_workload_against_plain_reference, .timeout = 60)
{
    enum { U = 3000, D = 8, STEPS = 40, MAXB = 512 };
    const char *names[] = {"sgd", "rowwise-adagrad", "adamw"};

    for (int k = 0; k < 3; k++) {
        ps_row_store_config c = config(names[k], D);
        ps_row_store *st = create(&c);
        float *w = calloc(U * D, sizeof(float)), *s = calloc(U * 2 * D + 1, sizeof(float));
        uint32_t *upd = calloc(U, sizeof(uint32_t));
        uint64_t *ids = malloc(MAXB * sizeof(uint64_t));
        float *g = malloc(MAXB * D * sizeof(float)), *out = malloc(U * D * sizeof(float));
        uint64_t *all = malloc(U * sizeof(uint64_t));
        size_t sf = ps_row_store_state_floats(st);

        rng_state = 1234 + (uint64_t)k;
        for (int step = 0; step < STEPS; step++) {
            int n = 0;
            float lr = 0.01f * (1.0f + (float)(step % 3));
            for (int u = (int)(rng_next() % 7); u < U && n < MAXB; u += 1 + (int)(rng_next() % 11))
                ids[n++] = (uint64_t)u;
            /* In random order. */
            for (int i = n - 1; i > 0; i--) {
                int j = (int)(rng_next() % (uint64_t)(i + 1));
                uint64_t t = ids[i];
                ids[i] = ids[j];
                ids[j] = t;
            }
            fill_random(g, (size_t)n * D, 1.0);
            cr_assert_eq(ps_row_store_apply(st, ids, g, (size_t)n, (uint64_t)step, lr, 0.5f, NULL),
                         0);
            for (int i = 0; i < n; i++) {
                uint64_t u = ids[i];
                float gs[D];
                for (int e = 0; e < D; e++)
                    gs[e] = g[i * D + e] * 0.5f;
                if (upd[u] == 0)
                    ps_row_init_values(&c.init, c.table_id, u, 0, D, &w[u * D]);
                cr_assert_eq(ps_row_opt_apply(&c.opt, lr, &w[u * D], &s[u * sf], gs, D, ++upd[u]),
                             0);
            }
        }
        for (uint64_t u = 0; u < U; u++) {
            all[u] = u;
            if (upd[u] == 0)
                ps_row_init_values(&c.init, c.table_id, u, 0, D, &w[u * D]);
        }
        cr_assert_eq(ps_row_store_gather(st, all, U, STEPS, out, NULL), 0);
        cr_assert_eq(memcmp(out, w, U * D * sizeof(float)), 0, "%s", names[k]);
        free(w);
        free(s);
        free(upd);
        free(ids);
        free(g);
        free(out);
        free(all);
        ps_row_store_free(st);
    }
}
