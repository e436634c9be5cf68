/* Tests for the server optimizers. Each rule is checked against a reference
 * written here in double precision straight from the algorithm boxes of the
 * torch.optim documentation (SGD, Adam, AdamW, Adagrad), step by step over
 * varying gradients; against a few values worked out by hand; and for the
 * properties the server relies on: a run resumed from copied weights and
 * state continues exactly, and a chunk can be updated in pieces. */
#include <criterion/criterion.h>

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "optimizer.h"

/* Not a multiple of any vector width, so the scalar tail runs too. */
#define N     1003
#define STEPS 20

/* Float kernel against double reference. The weights are O(1) and rounded
 * to float every step (6e-8 relative), and the rounding error of a weight
 * that crosses zero stays the size of its earlier magnitude, so the error is
 * bounded relative to max(|w|, 1): err <= TOL * (|w| + 1). Observed worst
 * is about 6e-7 of that; a wrong formula is off by ~lr, 1e-3 or more. */
#define TOL 2e-6

static uint64_t rng_state;

static float rng_uniform(void)
{
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((double)(rng_state >> 11) * 0x1.0p-53 * 2.0 - 1.0);
}

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size);
    cr_assert_not_null(p);
    return p;
}

/* Gradients change scale and sign from step to step; some are exactly zero,
 * which exercises the moments decaying on their own. */
static void make_grad(float *g, size_t n, int step)
{
    float scale = 0.2f + 0.15f * (float)(step % 5);

    rng_state = 1000u + (uint64_t)step;
    for (size_t i = 0; i < n; i++)
        g[i] = i % 7 == 3 ? 0.0f : scale * rng_uniform();
}

static void make_weights(float *w, size_t n)
{
    rng_state = 77;
    for (size_t i = 0; i < n; i++)
        w[i] = 2.0f * rng_uniform();
}

/* One step of the torch.optim algorithm for element-wise state a, b (the
 * momentum buffer, Adam's m and v, Adagrad's sum), t counted from 1. */
static void ref_step(const ps_optimizer_config *c, double lr, double *w, double *a, double *b,
                     const float *g, size_t n, int t)
{
    double wd = c->weight_decay, mu = c->momentum;
    double b1 = c->beta1, b2 = c->beta2, eps = c->eps;

    for (size_t i = 0; i < n; i++) {
        double grad = g[i];
        switch (c->kind) {
        case PS_OPT_SGD:
        case PS_OPT_NESTEROV:
            grad += wd * w[i];
            if (mu != 0.0) {
                a[i] = t > 1 ? mu * a[i] + grad : grad;
                grad = c->kind == PS_OPT_NESTEROV ? grad + mu * a[i] : a[i];
            }
            w[i] -= lr * grad;
            break;
        case PS_OPT_ADAM:
        case PS_OPT_ADAMW:
            if (c->kind == PS_OPT_ADAMW)
                w[i] -= lr * wd * w[i];
            else
                grad += wd * w[i];
            a[i] = b1 * a[i] + (1 - b1) * grad;
            b[i] = b2 * b[i] + (1 - b2) * grad * grad;
            w[i] -= lr * (a[i] / (1 - pow(b1, t))) / (sqrt(b[i] / (1 - pow(b2, t))) + eps);
            break;
        case PS_OPT_ADAGRAD:
            grad += wd * w[i];
            a[i] += grad * grad;
            w[i] -= lr * grad / (sqrt(a[i]) + eps);
            break;
        }
    }
}

/* The rate each rule is tested at unless a test says otherwise: torch.optim's
 * defaults (0.1 for the SGD family, 1e-3 for Adam and AdamW, 0.01 for
 * Adagrad). The server takes its rate from the schedule; here it is passed
 * as the server passes it, one argument per apply. */
static float rate(ps_optimizer_kind kind)
{
    switch (kind) {
    case PS_OPT_ADAM:
    case PS_OPT_ADAMW:
        return 1e-3f;
    case PS_OPT_ADAGRAD:
        return 0.01f;
    default:
        return 0.1f;
    }
}

static ps_optimizer_config config(ps_optimizer_kind kind, float momentum, float weight_decay)
{
    ps_optimizer_config c;

    ps_optimizer_defaults(&c, kind);
    c.momentum = momentum;
    c.weight_decay = weight_decay;
    return c;
}

static void check_against_reference(ps_optimizer_config c, float lr, const char *what)
{
    float *w = xcalloc(N, sizeof(float)), *g = xcalloc(N, sizeof(float));
    float *state = xcalloc(ps_optimizer_state_floats(&c, N), sizeof(float));
    double *rw = xcalloc(N, sizeof(double)), *ra = xcalloc(N, sizeof(double));
    double *rb = xcalloc(N, sizeof(double));
    double worst = 0;

    make_weights(w, N);
    for (size_t i = 0; i < N; i++)
        rw[i] = w[i];
    for (int t = 1; t <= STEPS; t++) {
        make_grad(g, N, t);
        ps_optimizer_apply(&c, lr, w, state, g, N, (uint64_t)t);
        ref_step(&c, lr, rw, ra, rb, g, N, t);
        for (size_t i = 0; i < N; i++) {
            double err = fabs(w[i] - rw[i]);
            cr_assert_leq(err, TOL * (fabs(rw[i]) + 1), "%s: step %d w[%zu] = %.9g, reference %.9g",
                          what, t, i, w[i], rw[i]);
            worst = fmax(worst, err / (fabs(rw[i]) + 1));
        }
    }
    /* A rule that left the weights alone would match a broken reference. */
    make_weights(g, N);
    double moved = 0;
    for (size_t i = 0; i < N; i++)
        moved = fmax(moved, fabs(rw[i] - g[i]));
    cr_assert_gt(moved, 1e-3, "%s: weights barely moved (%g)", what, moved);
    cr_log_info("%s: max error / (|w| + 1) %.3g over %d steps", what, worst, STEPS);
    free(rb);
    free(ra);
    free(rw);
    free(state);
    free(g);
    free(w);
}

Test(optimizer, sgd_plain)
{
    check_against_reference(config(PS_OPT_SGD, 0.0f, 0.0f), rate(PS_OPT_SGD), "sgd");
    check_against_reference(config(PS_OPT_SGD, 0.0f, 0.05f), rate(PS_OPT_SGD), "sgd wd");
}

Test(optimizer, sgd_momentum)
{
    check_against_reference(config(PS_OPT_SGD, 0.9f, 0.0f), rate(PS_OPT_SGD), "momentum");
    check_against_reference(config(PS_OPT_SGD, 0.5f, 0.05f), rate(PS_OPT_SGD), "momentum wd");
}

Test(optimizer, nesterov)
{
    check_against_reference(config(PS_OPT_NESTEROV, 0.9f, 0.0f), rate(PS_OPT_NESTEROV), "nesterov");
    check_against_reference(config(PS_OPT_NESTEROV, 0.8f, 0.05f), rate(PS_OPT_NESTEROV),
                            "nesterov wd");
}

Test(optimizer, adam)
{
    check_against_reference(config(PS_OPT_ADAM, 0.0f, 0.0f), rate(PS_OPT_ADAM), "adam");
    check_against_reference(config(PS_OPT_ADAM, 0.0f, 0.1f), rate(PS_OPT_ADAM), "adam wd");
    ps_optimizer_config c = config(PS_OPT_ADAM, 0.0f, 0.0f);
    c.beta1 = 0.8f;
    c.beta2 = 0.95f;
    c.eps = 1e-6f;
    check_against_reference(c, 0.05f, "adam large lr");
}

Test(optimizer, adamw)
{
    check_against_reference(config(PS_OPT_ADAMW, 0.0f, 0.0f), rate(PS_OPT_ADAMW), "adamw no decay");
    check_against_reference(config(PS_OPT_ADAMW, 0.0f, 0.01f), rate(PS_OPT_ADAMW), "adamw");
    ps_optimizer_config c = config(PS_OPT_ADAMW, 0.0f, 0.5f);
    check_against_reference(c, 0.05f, "adamw strong decay");
}

Test(optimizer, adagrad)
{
    check_against_reference(config(PS_OPT_ADAGRAD, 0.0f, 0.0f), rate(PS_OPT_ADAGRAD), "adagrad");
    check_against_reference(config(PS_OPT_ADAGRAD, 0.0f, 0.05f), rate(PS_OPT_ADAGRAD),
                            "adagrad wd");
}

/* Runs the given steps on single-element arrays. */
static void run_scalar(const ps_optimizer_config *c, float lr, float *w, float *state,
                       const float *grads, int steps)
{
    for (int t = 1; t <= steps; t++)
        ps_optimizer_apply(c, lr, w, state, &grads[t - 1], 1, (uint64_t)t);
}

#define cr_assert_near(x, want, tol)                                                               \
    cr_assert_leq(fabs((double)(x) - (want)), (tol), "%s = %.9g, want %.9g", #x, (double)(x),      \
                  (double)(want))

Test(optimizer, hand_computed)
{
    ps_optimizer_config c;
    float w, s[2];

    /* Heavy ball, lr 0.1, mu 0.9: v = 1, w = 0.9; then v = 1.9, w = 0.71. */
    c = config(PS_OPT_SGD, 0.9f, 0.0f);
    w = 1.0f, s[0] = 0.0f;
    ps_optimizer_apply(&c, 0.1f, &w, s, (const float[]){1.0f}, 1, 1);
    cr_assert_near(w, 0.9, 1e-7);
    ps_optimizer_apply(&c, 0.1f, &w, s, (const float[]){1.0f}, 1, 2);
    cr_assert_near(w, 0.71, 1e-7);
    cr_assert_near(s[0], 1.9, 1e-7);

    /* Plain SGD with L2: g = 1 + 0.5 * 2 = 2, w = 2 - 0.1 * 2 = 1.8. */
    c = config(PS_OPT_SGD, 0.0f, 0.5f);
    w = 2.0f;
    ps_optimizer_apply(&c, 0.1f, &w, NULL, (const float[]){1.0f}, 1, 1);
    cr_assert_near(w, 1.8, 1e-7);

    /* Nesterov, lr 0.1, mu 0.9: v = 1, w = 1 - 0.1 * (1 + 0.9) = 0.81;
     * then v = 1.9, w = 0.81 - 0.1 * (1 + 1.71) = 0.539. */
    c = config(PS_OPT_NESTEROV, 0.9f, 0.0f);
    w = 1.0f, s[0] = 0.0f;
    run_scalar(&c, 0.1f, &w, s, (const float[]){1.0f, 1.0f}, 2);
    cr_assert_near(w, 0.539, 1e-7);

    /* Adam, lr 1e-3: bias correction makes m^ = g and v^ = g^2 while g is
     * constant, so each step moves w by lr * g / (|g| + eps) ~ lr. */
    c = config(PS_OPT_ADAM, 0.0f, 0.0f);
    w = 1.0f, s[0] = s[1] = 0.0f;
    run_scalar(&c, 1e-3f, &w, s, (const float[]){0.5f, 0.5f}, 2);
    cr_assert_near(w, 0.998, 1e-7);
    /* m = (1 - b1) g (1 + b1) = 0.095 and v = (1 - b2) g^2 (1 + b2) =
     * 0.00049975 for b1 = 0.9, b2 = 0.999, taken as the floats they are
     * stored as: 1 - 0.999f is 1.3e-5 away from 0.001. */
    cr_assert_near(s[0], (1 - (double)0.9f) * 0.5 * (1 + (double)0.9f), 1e-8);
    cr_assert_near(s[1], (1 - (double)0.999f) * 0.25 * (1 + (double)0.999f), 1e-11);

    /* eps is added after the square root: with g = 1e-8, sqrt(v^) = 1e-8
     * equals eps, so the step is lr / 2 (eps inside the root would give
     * ~1e-7 lr). */
    w = 1.0f, s[0] = s[1] = 0.0f;
    ps_optimizer_apply(&c, 1e-3f, &w, s, (const float[]){1e-8f}, 1, 1);
    cr_assert_near(w, 0.9995, 1e-7);

    /* AdamW with a zero gradient only decays: w = 1 * (1 - 0.1 * 0.1). */
    c = config(PS_OPT_ADAMW, 0.0f, 0.1f);
    w = 1.0f, s[0] = s[1] = 0.0f;
    ps_optimizer_apply(&c, 0.1f, &w, s, (const float[]){0.0f}, 1, 1);
    cr_assert_near(w, 0.99, 1e-7);

    /* Adagrad, lr 0.1: s = 4, w = 1 - 0.1 * 2 / 2 = 0.9; then s = 8,
     * w = 0.9 - 0.2 / sqrt(8) = 0.829289322. */
    c = config(PS_OPT_ADAGRAD, 0.0f, 0.0f);
    w = 1.0f, s[0] = 0.0f;
    run_scalar(&c, 0.1f, &w, s, (const float[]){2.0f, 2.0f}, 2);
    cr_assert_near(w, 0.829289322, 1e-7);
    cr_assert_near(s[0], 8.0, 0.0);

    /* Adagrad's eps is also outside the root: g = 1e-8 gives lr / 2. */
    w = 1.0f, s[0] = 0.0f;
    ps_optimizer_apply(&c, 0.1f, &w, s, (const float[]){1e-8f}, 1, 1);
    cr_assert_near(w, 0.95, 1e-7);
}

static const ps_optimizer_kind all_kinds[] = {PS_OPT_SGD, PS_OPT_NESTEROV, PS_OPT_ADAM,
                                              PS_OPT_ADAMW, PS_OPT_ADAGRAD};
#define N_KINDS (sizeof(all_kinds) / sizeof(all_kinds[0]))

Test(optimizer, resumed_from_copied_state_is_exact)
{
    for (size_t k = 0; k < N_KINDS; k++) {
        ps_optimizer_config c = config(all_kinds[k], 0.9f, 0.01f);
        float lr = rate(all_kinds[k]);
        size_t ns = ps_optimizer_state_floats(&c, N);
        float *w1 = xcalloc(N, sizeof(float)), *s1 = xcalloc(ns, sizeof(float));
        float *w2 = xcalloc(N, sizeof(float)), *s2 = xcalloc(ns, sizeof(float));
        float *w3 = xcalloc(N, sizeof(float)), *s3 = xcalloc(ns, sizeof(float));
        float *g = xcalloc(N, sizeof(float));

        make_weights(w1, N);
        memcpy(w2, w1, N * sizeof(float));
        for (int t = 1; t <= 10; t++) {
            make_grad(g, N, t);
            ps_optimizer_apply(&c, lr, w1, s1, g, N, (uint64_t)t);
            if (t <= 5)
                ps_optimizer_apply(&c, lr, w2, s2, g, N, (uint64_t)t);
            if (t == 5) {
                memcpy(w3, w2, N * sizeof(float));
                memcpy(s3, s2, ns * sizeof(float));
                memset(w2, 0xff, N * sizeof(float));
                memset(s2, 0xff, ns * sizeof(float));
            }
            if (t > 5)
                ps_optimizer_apply(&c, lr, w3, s3, g, N, (uint64_t)t);
        }
        cr_assert_eq(memcmp(w1, w3, N * sizeof(float)), 0, "%s weights",
                     ps_optimizer_name(all_kinds[k]));
        cr_assert_eq(memcmp(s1, s3, ns * sizeof(float)), 0, "%s state",
                     ps_optimizer_name(all_kinds[k]));
        free(g);
        free(s3);
        free(w3);
        free(s2);
        free(w2);
        free(s1);
        free(w1);
    }
}

/* The checked update is the update when it stays finite, bit for bit; and
 * when any weight or state value would not (a finite gradient can overflow,
 * or square to Inf in Adam's and Adagrad's state), nothing is written. */
Test(optimizer, checked_apply_commits_only_finite_results)
{
    for (size_t k = 0; k < N_KINDS; k++) {
        ps_optimizer_config c = config(all_kinds[k], 0.9f, 0.01f);
        float lr = rate(all_kinds[k]);
        size_t ns = ps_optimizer_state_floats(&c, N);
        float *w1 = xcalloc(N, sizeof(float)), *s1 = xcalloc(ns + 1, sizeof(float));
        float *w2 = xcalloc(N, sizeof(float)), *s2 = xcalloc(ns + 1, sizeof(float));
        float *g = xcalloc(N, sizeof(float));
        const char *name = ps_optimizer_name(all_kinds[k]);
        ps_optimizer_bounds b = {0}, kept;

        make_weights(w1, N);
        memcpy(w2, w1, N * sizeof(float));
        for (int t = 1; t <= 3; t++) {
            make_grad(g, N, t);
            ps_optimizer_apply(&c, lr, w1, s1, g, N, (uint64_t)t);
            cr_assert_eq(ps_optimizer_apply_checked(&c, lr, w2, s2, g, N, (uint64_t)t, &b), 0, "%s",
                         name);
        }
        cr_assert(b.known, "%s: a sane update leaves the bounds known", name);
        kept = b;
        cr_assert_eq(memcmp(w1, w2, N * sizeof(float)), 0, "%s weights", name);
        cr_assert_eq(memcmp(s1, s2, ns * sizeof(float)), 0, "%s state", name);
        /* One huge value in the last, partial block. */
        make_grad(g, N, 4);
        g[N - 1] = 3e38f;
        lr = 10.0f;
        cr_assert_eq(ps_optimizer_apply_checked(&c, lr, w2, s2, g, N, 4, &b), -ERANGE, "%s", name);
        cr_assert_eq(memcmp(w1, w2, N * sizeof(float)), 0, "%s weights changed", name);
        cr_assert_eq(memcmp(s1, s2, ns * sizeof(float)), 0, "%s state changed", name);
        cr_assert_eq(memcmp(&b, &kept, sizeof(b)), 0, "%s bounds changed", name);
        cr_assert_eq(ps_optimizer_apply_checked(&c, lr, w2, s2, g, N, 4, NULL), -ERANGE, "%s",
                     name);
        cr_assert_eq(memcmp(w1, w2, N * sizeof(float)), 0, "%s weights changed", name);
        free(g);
        free(s2);
        free(w2);
        free(s1);
        free(w1);
    }
}

/* The plain reference for the checked update: the update made on copies,
 * every value of the copies scanned, and committed only if all are finite. */
static int checked_ref(const ps_optimizer_config *c, float lr, float *w, float *s, const float *g,
                       size_t n, uint64_t step)
{
    size_t ns = ps_optimizer_state_floats(c, n);
    float *wc = xcalloc(n, sizeof(float)), *sc = xcalloc(ns, sizeof(float));
    int finite = 1;

    memcpy(wc, w, n * sizeof(float));
    memcpy(sc, s, ns * sizeof(float));
    ps_optimizer_apply(c, lr, wc, ns ? sc : NULL, g, n, step);
    for (size_t i = 0; i < n; i++)
        finite &= isfinite(wc[i]) != 0;
    for (size_t i = 0; i < ns; i++)
        finite &= isfinite(sc[i]) != 0;
    if (finite) {
        memcpy(w, wc, n * sizeof(float));
        memcpy(s, sc, ns * sizeof(float));
    }
    free(sc);
    free(wc);
    return finite ? 0 : -ERANGE;
}

/* Long enough for many blocks of every pass, and not a multiple of any. */
#define NL (64 * 300 + 37)

/* An update whose only overflow is in a late block, after hundreds of blocks
 * that are fine, is refused with nothing written: once from an absurd
 * gradient (the bounds kept from earlier steps prove nothing, so the exact
 * path runs), and once from a weight near FLT_MAX that only the weights
 * themselves show (put there from outside, so the bounds are forgotten, as
 * the shard does). */
Test(optimizer, checked_apply_refuses_late_overflow_untouched)
{
    for (size_t k = 0; k < N_KINDS; k++) {
        ps_optimizer_config c = config(all_kinds[k], 0.9f, 0.01f);
        float lr = rate(all_kinds[k]);
        size_t ns = ps_optimizer_state_floats(&c, NL), late = NL - 100;
        float *w = xcalloc(NL, sizeof(float)), *s = xcalloc(ns + 1, sizeof(float));
        float *w0 = xcalloc(NL, sizeof(float)), *s0 = xcalloc(ns + 1, sizeof(float));
        float *g = xcalloc(NL, sizeof(float));
        const char *name = ps_optimizer_name(all_kinds[k]);
        ps_optimizer_bounds b = {0}, kept;

        make_weights(w, NL);
        for (int t = 1; t <= 3; t++) {
            make_grad(g, NL, t);
            cr_assert_eq(ps_optimizer_apply_checked(&c, lr, w, s, g, NL, (uint64_t)t, &b), 0, "%s",
                         name);
        }
        memcpy(w0, w, NL * sizeof(float));
        memcpy(s0, s, ns * sizeof(float));
        kept = b;
        make_grad(g, NL, 4);
        g[late] = 3e38f;
        lr = 10.0f;
        cr_assert_eq(ps_optimizer_apply_checked(&c, lr, w, s, g, NL, 4, &b), -ERANGE, "%s", name);
        cr_assert_eq(memcmp(w, w0, NL * sizeof(float)), 0, "%s weights changed", name);
        cr_assert_eq(memcmp(s, s0, ns * sizeof(float)), 0, "%s state changed", name);
        cr_assert_eq(memcmp(&b, &kept, sizeof(b)), 0, "%s bounds changed", name);

        /* A weight at 3.3e38 in a late block: SGD and Nesterov move it by
         * lr * g past FLT_MAX; Adam's and Adagrad's steps are about lr at
         * most, so there the weight decay overflows (g + l2 * w for Adam and
         * Adagrad, w * (1 - lr * weight_decay) = 1.5 w for AdamW). */
        make_grad(g, NL, 5);
        g[late] = -1e37f;
        w[late] = 3.3e38f;
        b.known = 0;
        memcpy(w0, w, NL * sizeof(float));
        c.weight_decay = all_kinds[k] == PS_OPT_ADAMW                                    ? -0.05f
                         : all_kinds[k] == PS_OPT_ADAM || all_kinds[k] == PS_OPT_ADAGRAD ? 1e3f
                                                                                         : 0.01f;
        cr_assert_eq(ps_optimizer_apply_checked(&c, lr, w, s, g, NL, 5, &b), -ERANGE, "%s", name);
        cr_assert_eq(memcmp(w, w0, NL * sizeof(float)), 0, "%s weights changed", name);
        cr_assert_eq(memcmp(s, s0, ns * sizeof(float)), 0, "%s state changed", name);
        free(g);
        free(s0);
        free(w0);
        free(s);
        free(w);
    }
}

/* Every |w| and |state| within the bounds, and the state the rules take
 * square roots of non-negative, as the bounds promise. */
static void assert_bounds_hold(const ps_optimizer_config *c, const ps_optimizer_bounds *b,
                               const float *w, const float *s, size_t n, const char *what)
{
    size_t ns = ps_optimizer_state_floats(c, n), per = ns / n;
    int roots = c->kind == PS_OPT_ADAM || c->kind == PS_OPT_ADAMW || c->kind == PS_OPT_ADAGRAD;

    if (!b->known)
        return;
    for (size_t i = 0; i < n; i++)
        cr_assert_leq(fabs((double)w[i]), b->w_max, "%s: w[%zu]", what, i);
    for (size_t i = 0; i < ns; i++) {
        cr_assert_leq(fabs((double)s[i]), b->s_max, "%s: state[%zu]", what, i);
        if (roots && i % per == per - 1)
            cr_assert_geq(s[i], 0.0f, "%s: state[%zu]", what, i);
    }
}

/* The checked update against the plain reference, bit for bit in the result
 * and the return code, over sequences of steps that keep their bounds and
 * cross every path: sane gradients (proved from the bounds), bounds
 * forgotten (proved from the values), gradients of 1e20 to 3e38 and Inf and
 * NaN anywhere, huge weights, negative second moments from outside, and
 * coefficients outside the proof's ranges (b2 = 1 or < 0, eps = 0, huge lr). */
Test(optimizer, checked_apply_matches_reference)
{
    static const float g_scale[] = {1e-3f, 1.0f, 1e20f, 1e30f, 3e38f};
    static const float w_scale[] = {1.0f, 1e18f, 1e36f, 3.3e38f};
    const size_t n = 64 * 5 + 7;

    for (size_t k = 0; k < N_KINDS; k++) {
        ps_optimizer_config c = config(all_kinds[k], 0.9f, 0.01f);
        float lr = rate(all_kinds[k]);
        size_t ns = ps_optimizer_state_floats(&c, n);
        float *w = xcalloc(n, sizeof(float)), *s = xcalloc(ns + 1, sizeof(float));
        float *rw = xcalloc(n, sizeof(float)), *rs = xcalloc(ns + 1, sizeof(float));
        float *g = xcalloc(n, sizeof(float));
        ps_optimizer_bounds b = {0};
        int refused = 0, made = 0;

        make_weights(w, n);
        memcpy(rw, w, n * sizeof(float));
        rng_state = 4242 + k;
        for (uint64_t t = 1; t <= 400; t++) {
            ps_optimizer_config ct = c;
            float lt = lr;
            size_t at = (size_t)((rng_uniform() * 0.5f + 0.5f) * (float)(n - 1));
            int kind = (int)(t % 11), rc, want;
            char what[96];

            for (size_t i = 0; i < n; i++)
                g[i] = 0.3f * rng_uniform();
            /* Most steps sane, so the bounds stay known for long runs; the
             * coefficient cases (9) come after sane steps, on grown state. */
            if (kind == 1)
                g[at] = g_scale[t % 5] * rng_uniform();
            else if (kind == 2)
                g[at] = t % 2 ? INFINITY : NAN;
            else if (kind == 3) {
                w[at] = rw[at] = w_scale[t % 4];
                b.known = 0;
            } else if (kind == 4 && ns) {
                size_t j = (at * (ns / n) + ns / n - 1) % ns;
                s[j] = rs[j] = t % 3 ? -1.0f : (t % 2 ? 1e38f : INFINITY);
                b.known = 0;
            } else if (kind == 9 && t % 3 != 0) {
                /* 1: an infinite bias correction; -0.5: v can turn negative. */
                ct.beta2 = t % 3 == 1 ? 1.0f : -0.5f;
            } else if (kind == 9) {
                ct.eps = 0.0f;
            } else if (kind == 6)
                lt = 1e30f;
            snprintf(what, sizeof(what), "%s step %llu (case %d, at %zu)",
                     ps_optimizer_name(all_kinds[k]), (unsigned long long)t, kind, at);
            want = checked_ref(&ct, lt, rw, rs, g, n, t);
            rc = ps_optimizer_apply_checked(&ct, lt, w, s, g, n, t, &b);
            cr_assert_eq(rc, want, "%s: %d, reference %d", what, rc, want);
            cr_assert_eq(memcmp(w, rw, n * sizeof(float)), 0, "%s: weights", what);
            cr_assert_eq(memcmp(s, rs, ns * sizeof(float)), 0, "%s: state", what);
            assert_bounds_hold(&ct, &b, w, s, n, what);
            refused += rc != 0;
            made += rc == 0;
            /* A chunk made huge (from outside, or by a step of 1e30) stays
             * refused: start it again from sane values. */
            if (kind == 3 || kind == 4 || kind == 6) {
                make_weights(w, n);
                memcpy(rw, w, n * sizeof(float));
                memset(s, 0, ns * sizeof(float));
                memset(rs, 0, ns * sizeof(float));
                b.known = 0;
            }
        }
        cr_log_info("%s: %d made, %d refused", ps_optimizer_name(all_kinds[k]), made, refused);
        cr_assert_gt(refused, 20, "%s: too few refusals to test the refusing paths",
                     ps_optimizer_name(all_kinds[k]));
        cr_assert_gt(made, 200, "%s", ps_optimizer_name(all_kinds[k]));
        free(g);
        free(rs);
        free(rw);
        free(s);
        free(w);
    }
}

/* The server may split a chunk across threads: elements [a, b) with their
 * state at state + per_element * a must update exactly like the whole. */
Test(optimizer, chunk_updated_in_pieces)
{
    static const size_t cuts[] = {0, 1, 63, 64, 65, 500, N - 1, N};

    for (size_t k = 0; k < N_KINDS; k++) {
        ps_optimizer_config c = config(all_kinds[k], 0.9f, 0.01f);
        float lr = rate(all_kinds[k]);
        size_t ns = ps_optimizer_state_floats(&c, N), per = ns / N;
        float *w1 = xcalloc(N, sizeof(float)), *s1 = xcalloc(ns, sizeof(float));
        float *w2 = xcalloc(N, sizeof(float)), *s2 = xcalloc(ns, sizeof(float));
        float *g = xcalloc(N, sizeof(float));

        make_weights(w1, N);
        memcpy(w2, w1, N * sizeof(float));
        for (int t = 1; t <= 6; t++) {
            size_t cut = cuts[(size_t)t % (sizeof(cuts) / sizeof(cuts[0]))];
            make_grad(g, N, t);
            ps_optimizer_apply(&c, lr, w1, s1, g, N, (uint64_t)t);
            ps_optimizer_apply(&c, lr, w2, s2, g, cut, (uint64_t)t);
            ps_optimizer_apply(&c, lr, w2 + cut, s2 + per * cut, g + cut, N - cut, (uint64_t)t);
        }
        for (size_t i = 0; i < N; i++)
            cr_assert_leq(fabsf(w1[i] - w2[i]), 1e-6f * fabsf(w1[i]), "%s w[%zu]",
                          ps_optimizer_name(all_kinds[k]), i);
        free(g);
        free(s2);
        free(w2);
        free(s1);
        free(w1);
    }
}

Test(optimizer, plain_sgd_needs_no_state)
{
    ps_optimizer_config c = config(PS_OPT_SGD, 0.0f, 0.0f);
    float w[200], g[200];

    cr_assert_eq(ps_optimizer_state_floats(&c, 200), 0);
    for (int i = 0; i < 200; i++) {
        w[i] = 1.0f;
        g[i] = (float)i;
    }
    ps_optimizer_apply(&c, 0.1f, w, NULL, g, 200, 1);
    for (int i = 0; i < 200; i++)
        cr_assert_eq(w[i], 1.0f - 0.1f * (float)i, "w[%d]", i);
}

/* Plain SGD without weight decay runs w -= lr*g; it must equal the rule as
 * written, w -= lr*(g + 0*w), bit for bit for every finite weight, signed
 * zeros and subnormals included. */
Test(optimizer, plain_sgd_without_decay_is_the_rule)
{
    static const float vals[] = {0.0f, -0.0f, 1e-45f, -1e-45f, 1e-39f, 0.5f, -3.0f, 1e30f, -1e38f};
    enum { NV = sizeof(vals) / sizeof(vals[0]) };
    ps_optimizer_config c = config(PS_OPT_SGD, 0.0f, 0.0f);
    float w[NV * NV], want[NV * NV], g[NV * NV];

    for (int k = 0; k < 3; k++) {
        float lr = k == 0 ? 0.1f : k == 1 ? -0.25f : 0.0f;
        for (int i = 0; i < NV * NV; i++) {
            w[i] = vals[i / NV];
            g[i] = vals[i % NV];
            want[i] = w[i] - lr * (g[i] + 0.0f * w[i]);
        }
        ps_optimizer_apply(&c, lr, w, NULL, g, NV * NV, 1);
        for (int i = 0; i < NV * NV; i++)
            cr_assert_eq(memcmp(&w[i], &want[i], sizeof(float)), 0,
                         "lr %g, w %g, g %g: %a, the rule %a", lr, vals[i / NV], vals[i % NV], w[i],
                         want[i]);
    }
}

Test(optimizer, state_floats)
{
    cr_assert_eq(ps_optimizer_state_floats(&(ps_optimizer_config){.kind = PS_OPT_SGD}, 10), 0);
    cr_assert_eq(
        ps_optimizer_state_floats(&(ps_optimizer_config){.kind = PS_OPT_SGD, .momentum = 0.9f}, 10),
        10);
    cr_assert_eq(ps_optimizer_state_floats(&(ps_optimizer_config){.kind = PS_OPT_NESTEROV}, 10),
                 10);
    cr_assert_eq(ps_optimizer_state_floats(&(ps_optimizer_config){.kind = PS_OPT_ADAM}, 10), 20);
    cr_assert_eq(ps_optimizer_state_floats(&(ps_optimizer_config){.kind = PS_OPT_ADAMW}, 10), 20);
    cr_assert_eq(ps_optimizer_state_floats(&(ps_optimizer_config){.kind = PS_OPT_ADAGRAD}, 10), 10);
    cr_assert_eq(ps_optimizer_state_floats(&(ps_optimizer_config){.kind = PS_OPT_ADAM}, 0), 0);
}

Test(optimizer, defaults)
{
    ps_optimizer_config c;

    ps_optimizer_defaults(&c, PS_OPT_SGD);
    cr_assert_eq(c.kind, PS_OPT_SGD);
    cr_assert_eq(c.momentum, 0.9f);
    cr_assert_eq(c.weight_decay, 0.0f);
    ps_optimizer_defaults(&c, PS_OPT_NESTEROV);
    cr_assert_eq(c.kind, PS_OPT_NESTEROV);
    ps_optimizer_defaults(&c, PS_OPT_ADAM);
    cr_assert_eq(c.beta1, 0.9f);
    cr_assert_eq(c.beta2, 0.999f);
    cr_assert_eq(c.eps, 1e-8f);
    cr_assert_eq(c.weight_decay, 0.0f);
    ps_optimizer_defaults(&c, PS_OPT_ADAMW);
    cr_assert_eq(c.weight_decay, 1e-2f);
    ps_optimizer_defaults(&c, PS_OPT_ADAGRAD);
    cr_assert_eq(c.eps, 1e-8f);
}

Test(optimizer, parse_and_name)
{
    static const char *const bad[] = {"", "SGD", "sgd ", "adam2", "rmsprop", "ada"};
    ps_optimizer_kind kind;

    for (size_t k = 0; k < N_KINDS; k++) {
        const char *name = ps_optimizer_name(all_kinds[k]);
        cr_assert_eq(ps_optimizer_parse(name, &kind), 0, "%s", name);
        cr_assert_eq(kind, all_kinds[k]);
    }
    cr_assert_str_eq(ps_optimizer_name(PS_OPT_SGD), "sgd");
    cr_assert_str_eq(ps_optimizer_name(PS_OPT_NESTEROV), "nesterov");
    cr_assert_str_eq(ps_optimizer_name(PS_OPT_ADAM), "adam");
    cr_assert_str_eq(ps_optimizer_name(PS_OPT_ADAMW), "adamw");
    cr_assert_str_eq(ps_optimizer_name(PS_OPT_ADAGRAD), "adagrad");
    cr_assert_not_null(ps_optimizer_name((ps_optimizer_kind)99));
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        kind = PS_OPT_ADAGRAD;
        cr_assert_eq(ps_optimizer_parse(bad[i], &kind), -EINVAL, "\"%s\"", bad[i]);
        cr_assert_eq(kind, PS_OPT_ADAGRAD, "kind changed on failure");
    }
}
