/* Tests for the per-row optimizers. Each rule runs on a small table whose
 * rows are touched at random steps, with the rate from a warm-up + cosine
 * schedule, against a reference written here in double straight from the
 * algorithms (torch.optim's for SGD, momentum, Nesterov, Adagrad, Adam and
 * AdamW; FBGEMM's for row-wise Adagrad), each row with its own state and
 * its own update count: rows not touched stay exactly as they were, and
 * Adam's bias correction counts the row's updates (a reference on the
 * global step is off by far more than the tolerance). Non-finite updates
 * leave the row and its state unchanged bit for bit. */
#include <criterion/criterion.h>
#include <criterion/parameterized.h>

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "../test_rng.h"
#include "lr_schedule.h"
#include "row_optimizer.h"

#define ROWS  40
#define DIM   33
#define STEPS 30
/* As in test_optimizer.c: float rounding of O(1) weights over a few dozen
 * updates stays below 2e-6 of max(|w|, 1); a wrong rule, step count or
 * rate is off by 1e-4 or more. */
#define TOL 2e-6

typedef struct {
    double w[DIM], a[DIM], b[DIM], acc;
    int t;
} ref_row;

static void ref_update(const ps_row_opt_config *c, double lr, ref_row *r, const float *g)
{
    const ps_optimizer_config *o = &c->opt;
    double wd = o->weight_decay, mu = o->momentum, b1 = o->beta1, b2 = o->beta2, eps = o->eps;
    double gi[DIM], mean = 0.0;

    r->t++;
    for (int i = 0; i < DIM; i++)
        gi[i] = g[i] + (o->kind == PS_OPT_ADAMW ? 0.0 : wd * r->w[i]);
    if (c->rowwise) {
        for (int i = 0; i < DIM; i++)
            mean += gi[i] * gi[i] / DIM;
        r->acc += mean;
        for (int i = 0; i < DIM; i++)
            r->w[i] -= lr * gi[i] / (sqrt(r->acc) + eps);
        return;
    }
    for (int i = 0; i < DIM; i++) {
        switch (o->kind) {
        case PS_OPT_SGD:
            if (mu == 0.0) {
                r->w[i] -= lr * gi[i];
                break;
            }
            r->a[i] = mu * r->a[i] + gi[i];
            r->w[i] -= lr * r->a[i];
            break;
        case PS_OPT_NESTEROV:
            r->a[i] = mu * r->a[i] + gi[i];
            r->w[i] -= lr * (gi[i] + mu * r->a[i]);
            break;
        case PS_OPT_ADAGRAD:
            r->a[i] += gi[i] * gi[i];
            r->w[i] -= lr * gi[i] / (sqrt(r->a[i]) + eps);
            break;
        case PS_OPT_ADAMW:
            r->w[i] *= 1.0 - lr * wd;
            /* fall through */
        case PS_OPT_ADAM: {
            double mhat, vhat;
            r->a[i] = b1 * r->a[i] + (1 - b1) * gi[i];
            r->b[i] = b2 * r->b[i] + (1 - b2) * gi[i] * gi[i];
            mhat = r->a[i] / (1 - pow(b1, r->t));
            vhat = r->b[i] / (1 - pow(b2, r->t));
            r->w[i] -= lr * mhat / (sqrt(vhat) + eps);
            break;
        }
        }
    }
}

/* The base rate each rule is tested at: torch.optim's defaults (0.1 for the
 * SGD family, 1e-3 for Adam and AdamW, 0.01 for Adagrad, row-wise too). */
static float base_rate(const ps_row_opt_config *c)
{
    switch (c->opt.kind) {
    case PS_OPT_ADAM:
    case PS_OPT_ADAMW:
        return 1e-3f;
    case PS_OPT_ADAGRAD:
        return 0.01f;
    default:
        return 0.1f;
    }
}

static void run_against_reference(const char *name, float momentum, float weight_decay)
{
    ps_row_opt_config c;
    ps_lr_schedule sched;
    size_t sf;
    float *w = malloc(ROWS * DIM * sizeof(float)), g[DIM];
    float *state;
    uint64_t *steps = calloc(ROWS, sizeof(uint64_t));
    ref_row *ref = calloc(ROWS, sizeof(ref_row));
    char why[200];

    cr_assert_eq(ps_row_opt_parse(name, &c), 0, "%s", name);
    c.opt.momentum = momentum;
    c.opt.weight_decay = weight_decay;
    cr_assert_eq(ps_row_opt_check(&c, why, sizeof(why)), 0, "%s", why);
    cr_assert_str_eq(ps_row_opt_name(&c), name);
    sched = (ps_lr_schedule){.kind = PS_LR_COSINE,
                             .base_lr = base_rate(&c),
                             .warmup_steps = 5,
                             .total_steps = STEPS,
                             .min_lr = base_rate(&c) * 0.1};
    sf = ps_row_opt_state_floats(&c, DIM);
    state = calloc(ROWS * sf + 1, sizeof(float));
    cr_assert(w && steps && ref && state);
    rng_state = 31;
    for (int r = 0; r < ROWS; r++)
        for (int i = 0; i < DIM; i++)
            ref[r].w[i] = w[r * DIM + i] = (float)(2.0 * rng_uniform() - 1.0);
    for (int step = 0; step < STEPS; step++) {
        float lr = (float)ps_lr_schedule_at(&sched, (uint64_t)step);
        for (int r = 0; r < ROWS; r++) {
            /* Rows r % 4 == 3 are never touched; the others half the time. */
            int touched = r % 4 != 3 && rng_next() % 2;
            double scale = 0.2 + 0.15 * (step % 5);
            if (!touched)
                continue;
            for (int i = 0; i < DIM; i++)
                g[i] = i % 7 == 3 ? 0.0f : (float)(scale * (2.0 * rng_uniform() - 1.0));
            cr_assert_eq(ps_row_opt_apply(&c, lr, &w[r * DIM], &state[r * sf], g, DIM, ++steps[r]),
                         0);
            ref_update(&c, lr, &ref[r], g);
        }
    }
    for (int r = 0; r < ROWS; r++)
        for (int i = 0; i < DIM; i++) {
            double x = w[r * DIM + i], y = ref[r].w[i];
            cr_assert_leq(fabs(x - y), TOL * (fabs(y) + 1), "%s row %d [%d]: %.9g against %.9g",
                          name, r, i, x, y);
        }
    /* Untouched rows kept their initial values exactly. */
    rng_state = 31;
    for (int r = 0; r < ROWS; r++)
        for (int i = 0; i < DIM; i++) {
            float w0 = (float)(2.0 * rng_uniform() - 1.0);
            if (r % 4 == 3)
                cr_assert_eq(w[r * DIM + i], w0);
        }
    free(w);
    free(state);
    free(steps);
    free(ref);
}

/* Every rule, with and without weight decay, momentum where it has one.
 * The name is held, not pointed to: each case runs in a process of its own
 * that gets a copy of the struct. */
typedef struct {
    char name[24];
    float momentum, weight_decay;
} rule_case;

ParameterizedTestParameters(row_optimizer, against_reference)
{
    static rule_case cases[] = {
        {"sgd", 0.0f, 0.0f},
        {"sgd", 0.0f, 0.01f},
        {"sgd", 0.9f, 0.0f},
        {"nesterov", 0.9f, 0.001f},
        {"adagrad", 0.0f, 0.0f},
        {"adagrad", 0.0f, 0.01f},
        {"rowwise-adagrad", 0.0f, 0.0f},
        {"rowwise-adagrad", 0.0f, 0.01f},
        {"adam", 0.0f, 0.0f},
        {"adam", 0.0f, 0.01f},
        {"adamw", 0.0f, 0.01f},
    };
    return cr_make_param_array(rule_case, cases, sizeof(cases) / sizeof(cases[0]));
}

ParameterizedTest(rule_case *c, row_optimizer, against_reference)
{
    run_against_reference(c->name, c->momentum, c->weight_decay);
}

/* State floats per row of 64 and whether the rule counts the row's steps.
 * "sgd" has the dense default momentum of 0.9, so a buffer; without
 * momentum, none. */
Test(row_optimizer, state_layout)
{
    static const struct {
        const char *name;
        size_t floats;
        int counts;
    } want[] = {{"sgd", 64, 0},   {"nesterov", 64, 0},       {"adagrad", 64, 0},
                {"adam", 128, 1}, {"rowwise-adagrad", 1, 0}, {"adamw", 128, 1}};

    for (size_t k = 0; k < sizeof(want) / sizeof(want[0]); k++) {
        ps_row_opt_config c;
        cr_assert_eq(ps_row_opt_parse(want[k].name, &c), 0);
        cr_assert_eq(ps_row_opt_state_floats(&c, 64), want[k].floats, "%s", want[k].name);
        cr_assert_eq(ps_row_opt_counts_steps(&c), want[k].counts, "%s", want[k].name);
        if (k == 0) {
            c.opt.momentum = 0.0f;
            cr_assert_eq(ps_row_opt_state_floats(&c, 64), 0);
        }
    }
}

/* One bad gradient value per rule (NaN, Inf, or finite but overflowing the
 * state): -ERANGE, weights and state unchanged to the bit. */
Test(row_optimizer, non_finite_refused)
{
    const char *names[] = {"sgd", "nesterov", "adagrad", "rowwise-adagrad", "adam", "adamw"};
    const float bad[] = {NAN, INFINITY, -INFINITY, 3e38f};

    for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++)
        for (size_t b = 0; b < sizeof(bad) / sizeof(bad[0]); b++) {
            ps_row_opt_config c;
            float w[DIM], s[2 * DIM], g[DIM], w0[DIM], s0[2 * DIM];
            int rc;
            cr_assert_eq(ps_row_opt_parse(names[k], &c), 0);
            for (int i = 0; i < DIM; i++) {
                w[i] = 0.5f - 0.01f * (float)i;
                g[i] = 0.1f;
                s[2 * i] = s[2 * i + 1] = 0.25f;
            }
            g[DIM / 2] = bad[b];
            memcpy(w0, w, sizeof(w));
            memcpy(s0, s, sizeof(s));
            /* The SGD family at a rate that turns a step of 3e38 into an
             * overflow; the others overflow squaring it into their state. */
            rc = ps_row_opt_apply(&c, k < 2 ? 10.0f : base_rate(&c), w, s, g, DIM, 3);
            cr_assert_eq(rc, -ERANGE, "%s with %g", names[k], bad[b]);
            cr_assert_eq(memcmp(w, w0, sizeof(w)), 0, "%s with %g", names[k], bad[b]);
            cr_assert_eq(memcmp(s, s0, sizeof(s)), 0, "%s with %g", names[k], bad[b]);
        }
}

Test(row_optimizer, rules)
{
    ps_row_opt_config c;
    char why[200];

    cr_assert_eq(ps_row_opt_parse("lamb", &c), -EINVAL);
    cr_assert_eq(ps_row_opt_parse("adam", &c), 0);
    c.rowwise = 1;
    cr_assert_eq(ps_row_opt_check(&c, why, sizeof(why)), -EINVAL);
    cr_assert(strstr(why, "Adagrad"), "%s", why);
    cr_assert_eq(ps_row_opt_parse("adam", &c), 0);
    c.opt.beta2 = 1.0f;
    cr_assert_eq(ps_row_opt_check(&c, why, sizeof(why)), -EINVAL);
    cr_assert_eq(ps_row_opt_parse("adagrad", &c), 0);
    c.opt.eps = 0.0f;
    cr_assert_eq(ps_row_opt_check(&c, why, sizeof(why)), -EINVAL);
    cr_assert_eq(ps_row_opt_parse("sgd", &c), 0);
    c.opt.momentum = -0.5f;
    cr_assert_eq(ps_row_opt_check(&c, why, sizeof(why)), -EINVAL);
    cr_assert_eq(ps_row_opt_parse("sgd", &c), 0);
    c.opt.weight_decay = NAN;
    cr_assert_eq(ps_row_opt_check(&c, why, sizeof(why)), -EINVAL);
    c.opt.weight_decay = 0.0f;
    c.opt.kind = (ps_optimizer_kind)42;
    cr_assert_eq(ps_row_opt_check(&c, why, sizeof(why)), -EINVAL);
}
