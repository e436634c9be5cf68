/* Unit tests of the layer library (kernels/layers.h): each fast path against
 * its plain-loop reference on fixed awkward shapes and on random ones (odd
 * sizes, stride 2 and 3, padding 1 and 2, batch 1 and more), each backward
 * against central finite differences of the reference forward, for inputs
 * and parameters, and the geometry rules. Inputs come from a fixed-seed
 * generator, so every run sees the same numbers.
 *
 * Tolerances, and why:
 * - fast vs reference: |got - ref| <= (t + 2) * 2^-23 * A, where A is the
 *   same reference run on the absolute values of its inputs (the sum of the
 *   magnitudes of the terms behind each output) and t is how many terms
 *   that output sums. Any order of float summation of t terms stays inside
 *   t * 2^-24 * A; the rest covers the double reference's final rounding. A
 *   wrong index or a missing term is off by about A / t, far outside.
 * - finite differences: the loss is L = sum_i r_i y_i (r fixed random), so
 *   dL/dy = r. Dense, conv and dropout are linear in each input and
 *   parameter, and max-pool and ReLU are linear between kinks that the
 *   inputs keep clear of (distinct values 0.1 apart, |x| >= 0.05, steps of
 *   0.01), so a central difference is exact but for rounding: with step h
 *   the rounding of L (at most 2^-24 sum |r_i y_i|, ~1e-5 here) over 2h
 *   stays below 1e-4 for h = 0.25 and 1e-3 for h = 0.01. Checked at
 *   |fd - g| <= 2e-3 * (1 + |g|). The loss is smooth: step 1e-3, its float
 *   rounding (~2e-7) over 2e-3 gives 1e-4, checked at 5e-4. */
#include <criterion/criterion.h>
#include <errno.h>
#include <float.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "layers.h"
#include "../test_rng.h"

#define FD_TOL         2e-3
#define FD_STEP_LINEAR 0.25f
#define FD_STEP_KINK   0.01f

/* Uniform in [-1, 1). */
static float *floats(size_t n)
{
    return rng_floats(n, 1.0);
}

static void assert_within(const char *what, const float *got, const float *ref, const float *mag,
                          size_t n, double terms)
{
    for (size_t i = 0; i < n; i++) {
        double tol = (terms + 2) * 0x1p-23 * mag[i] + FLT_MIN;
        cr_assert(fabs((double)got[i] - ref[i]) <= tol, "%s[%zu] = %.9g, reference %.9g (tol %.3g)",
                  what, i, got[i], ref[i], tol);
    }
}

/* sum_i r_i y_i in double. */
static double project(const float *r, const float *y, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += (double)r[i] * y[i];
    return s;
}

/* The loss L(p) = project(r, forward(p)) of some layer, for finite differences. */
typedef double (*loss_fn)(void *ctx);

/* Central differences of L along up to max_checks entries of p (all when
 * fewer), each against the analytic gradient g. */
static void check_fd(const char *what, loss_fn L, void *ctx, float *p, const float *g, size_t n,
                     float h, double tol)
{
    size_t stride = n > 64 ? n / 64 : 1;
    for (size_t i = 0; i < n; i += stride) {
        float keep = p[i];
        p[i] = keep + h;
        double up = L(ctx);
        p[i] = keep - h;
        double down = L(ctx);
        p[i] = keep;
        /* The step actually taken, after rounding keep +- h to float. */
        double fd = (up - down) / ((double)(keep + h) - (double)(keep - h));
        cr_assert(fabs(fd - g[i]) <= tol * (1.0 + fabs(g[i])), "%s[%zu]: analytic %.7g, fd %.7g",
                  what, i, g[i], fd);
    }
}

/* ---- conv2d ----------------------------------------------------------------- */

typedef struct conv_case {
    int in_c, h, w, out_c, k_h, k_w, stride, pad, B;
} conv_case;

static const conv_case conv_fixed[] = {
    {1, 5, 5, 1, 3, 3, 1, 0, 1},   {3, 7, 9, 4, 3, 3, 2, 1, 2},    {2, 8, 6, 5, 3, 3, 1, 1, 3},
    {3, 11, 10, 2, 5, 3, 2, 2, 1}, {4, 6, 7, 3, 1, 1, 1, 0, 2},    {2, 5, 4, 3, 4, 2, 3, 1, 2},
    {1, 28, 28, 8, 3, 3, 1, 1, 2}, {8, 14, 14, 16, 3, 3, 1, 1, 1}, {2, 3, 3, 2, 5, 5, 1, 1, 2},
};

static conv_case conv_random(void)
{
    conv_case c;
    c.in_c = 1 + (int)(rng_next() % 4);
    c.h = 3 + (int)(rng_next() % 10);
    c.w = 3 + (int)(rng_next() % 10);
    c.out_c = 1 + (int)(rng_next() % 5);
    c.pad = (int)(rng_next() % 3);
    c.k_h = 1 + (int)(rng_next() % (unsigned)(c.h + 2 * c.pad < 5 ? c.h + 2 * c.pad : 5));
    c.k_w = 1 + (int)(rng_next() % (unsigned)(c.w + 2 * c.pad < 5 ? c.w + 2 * c.pad : 5));
    c.stride = 1 + (int)(rng_next() % 3);
    c.B = 1 + (int)(rng_next() % 3);
    return c;
}

typedef struct conv_run {
    ps_conv2d g;
    int B;
    size_t nx, ny, nw;
    float *x, *w, *b, *y, *r;
} conv_run;

static void conv_setup(conv_run *t, conv_case c)
{
    ps_shape out;
    cr_assert_eq(ps_conv2d_init(&t->g, (ps_shape){c.in_c, c.h, c.w}, c.out_c, c.k_h, c.k_w,
                                c.stride, c.pad, &out),
                 0);
    t->B = c.B;
    t->nx = (size_t)c.B * ps_shape_count(t->g.in);
    t->ny = (size_t)c.B * ps_shape_count(out);
    t->nw = ps_conv2d_weight_count(&t->g);
    t->x = floats(t->nx), t->w = floats(t->nw), t->b = floats((size_t)c.out_c);
    t->y = floats(t->ny), t->r = floats(t->ny);
}

static void conv_free(conv_run *t)
{
    free(t->x), free(t->w), free(t->b), free(t->y), free(t->r);
}

static double conv_loss(void *ctx)
{
    conv_run *t = ctx;
    ps_conv2d_forward_ref(&t->g, t->B, t->x, t->w, t->b, t->y);
    return project(t->r, t->y, t->ny);
}

static void conv_check(conv_case c)
{
    conv_run t;
    conv_setup(&t, c);
    const ps_conv2d *g = &t.g;
    int K = g->in.c * g->k_h * g->k_w, P = g->out_h * g->out_w;
    float *ws = floats(ps_conv2d_workspace(g)), *yr = floats(t.ny), *ya = floats(t.ny);
    float *xa = abs_copy(t.x, t.nx), *wa = abs_copy(t.w, t.nw), *ba = abs_copy(t.b, g->out_c);
    float *ra = abs_copy(t.r, t.ny);
    float *dx = floats(t.nx), *dw = floats(t.nw), *db = floats(g->out_c);
    float *dxr = floats(t.nx), *dwr = floats(t.nw), *dbr = floats(g->out_c);
    float *dxa = floats(t.nx), *dwa = floats(t.nw), *dba = floats(g->out_c);

    cr_log_info("conv in %dx%dx%d out_c %d k %dx%d stride %d pad %d B %d", c.in_c, c.h, c.w,
                c.out_c, c.k_h, c.k_w, c.stride, c.pad, c.B);
    ps_conv2d_forward(g, t.B, t.x, t.w, t.b, t.y, ws);
    ps_conv2d_forward_ref(g, t.B, t.x, t.w, t.b, yr);
    ps_conv2d_forward_ref(g, t.B, xa, wa, ba, ya);
    assert_within("conv y", t.y, yr, ya, t.ny, K + 1);

    ps_conv2d_backward(g, t.B, t.x, t.w, t.r, dx, dw, db, ws);
    ps_conv2d_backward_ref(g, t.B, t.x, t.w, t.r, dxr, dwr, dbr);
    ps_conv2d_backward_ref(g, t.B, xa, wa, ra, dxa, dwa, dba);
    assert_within("conv dx", dx, dxr, dxa, t.nx, (double)g->out_c * g->k_h * g->k_w);
    assert_within("conv dw", dw, dwr, dwa, t.nw, (double)t.B * P);
    assert_within("conv db", db, dbr, dba, g->out_c, (double)t.B * P);

    check_fd("conv dx", conv_loss, &t, t.x, dx, t.nx, FD_STEP_LINEAR, FD_TOL);
    check_fd("conv dw", conv_loss, &t, t.w, dw, t.nw, FD_STEP_LINEAR, FD_TOL);
    check_fd("conv db", conv_loss, &t, t.b, db, g->out_c, FD_STEP_LINEAR, FD_TOL);

    /* Without dx the parameter gradients are the same. */
    ps_conv2d_backward(g, t.B, t.x, t.w, t.r, NULL, dwr, dbr, ws);
    cr_assert_arr_eq(dwr, dw, t.nw * sizeof(float));
    cr_assert_arr_eq(dbr, db, (size_t)g->out_c * sizeof(float));

    free(ws), free(yr), free(ya), free(xa), free(wa), free(ba), free(ra);
    free(dx), free(dw), free(db), free(dxr), free(dwr), free(dbr), free(dxa), free(dwa), free(dba);
    conv_free(&t);
}

Test(layers, conv2d_fixed_shapes)
{
    rng_state = 11;
    for (size_t i = 0; i < sizeof(conv_fixed) / sizeof(conv_fixed[0]); i++)
        conv_check(conv_fixed[i]);
}

Test(layers, conv2d_random_shapes)
{
    rng_state = 12;
    for (int i = 0; i < 30; i++)
        conv_check(conv_random());
}

Test(layers, conv2d_geometry)
{
    ps_conv2d g;
    ps_shape out;

    cr_assert_eq(ps_conv2d_init(&g, (ps_shape){1, 28, 28}, 32, 3, 3, 1, 1, &out), 0);
    cr_assert(out.c == 32 && out.h == 28 && out.w == 28);
    cr_assert_eq(ps_conv2d_weight_count(&g), 32 * 9);
    cr_assert_eq(ps_conv2d_workspace(&g), 9 * 28 * 28);
    cr_assert_eq(ps_conv2d_init(&g, (ps_shape){3, 7, 8}, 4, 3, 3, 2, 1, &out), 0);
    cr_assert(out.c == 4 && out.h == 4 && out.w == 4);
    cr_assert_eq(ps_conv2d_init(&g, (ps_shape){3, 7, 8}, 4, 3, 2, 3, 0, &out), 0);
    cr_assert(out.h == 2 && out.w == 3);
    cr_assert_eq(ps_conv2d_init(&g, (ps_shape){1, 2, 2}, 1, 3, 3, 1, 0, &out), -EINVAL);
    cr_assert_eq(ps_conv2d_init(&g, (ps_shape){1, 2, 2}, 1, 3, 3, 1, 1, &out), 0);
    cr_assert_eq(ps_conv2d_init(&g, (ps_shape){0, 2, 2}, 1, 1, 1, 1, 0, &out), -EINVAL);
    cr_assert_eq(ps_conv2d_init(&g, (ps_shape){1, 4, 4}, 1, 1, 1, 0, 0, &out), -EINVAL);
    cr_assert_eq(ps_conv2d_init(&g, (ps_shape){1, 4, 4}, 1, 1, 1, 1, -1, &out), -EINVAL);
    cr_assert_eq(ps_conv2d_init(&g, (ps_shape){1, 4, 4}, 0, 1, 1, 1, 0, &out), -EINVAL);
    cr_assert_eq(ps_conv2d_init(&g, (ps_shape){1 << 16, 1 << 8, 1 << 8}, 1, 1, 1, 1, 0, &out),
                 -EINVAL);
}

/* ---- dense ---------------------------------------------------------------------- */

typedef struct dense_run {
    ps_dense g;
    int B;
    float *x, *w, *b, *y, *r;
} dense_run;

static double dense_loss(void *ctx)
{
    dense_run *t = ctx;
    ps_dense_forward_ref(&t->g, t->B, t->x, t->w, t->b, t->y);
    return project(t->r, t->y, (size_t)t->B * t->g.out);
}

Test(layers, dense_matches_ref_and_fd)
{
    static const int shapes[][4] = {{1, 1, 1, 1}, {2, 3, 3, 5}, {7, 2, 2, 10}, {3, 13, 1, 4}};
    rng_state = 21;
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++) {
        dense_run t;
        ps_shape out;
        /* The input is a {c, h, w} activation, read as c*h*w features. */
        cr_assert_eq(
            ps_dense_init(&t.g, (ps_shape){shapes[s][1], shapes[s][2], 1}, shapes[s][3], &out), 0);
        cr_assert(out.c == shapes[s][3] && out.h == 1 && out.w == 1);
        cr_assert_eq(ps_dense_weight_count(&t.g),
                     (size_t)shapes[s][1] * shapes[s][2] * shapes[s][3]);
        t.B = shapes[s][0];
        size_t nx = (size_t)t.B * t.g.in, ny = (size_t)t.B * t.g.out,
               nw = ps_dense_weight_count(&t.g);
        t.x = floats(nx), t.w = floats(nw), t.b = floats(t.g.out), t.y = floats(ny);
        t.r = floats(ny);
        float *yr = floats(ny), *ya = floats(ny), *xa = abs_copy(t.x, nx), *wa = abs_copy(t.w, nw);
        float *ba = abs_copy(t.b, t.g.out), *ra = abs_copy(t.r, ny);
        float *dx = floats(nx), *dw = floats(nw), *db = floats(t.g.out);
        float *dxr = floats(nx), *dwr = floats(nw), *dbr = floats(t.g.out);
        float *dxa = floats(nx), *dwa = floats(nw), *dba = floats(t.g.out);

        ps_dense_forward(&t.g, t.B, t.x, t.w, t.b, t.y);
        ps_dense_forward_ref(&t.g, t.B, t.x, t.w, t.b, yr);
        ps_dense_forward_ref(&t.g, t.B, xa, wa, ba, ya);
        assert_within("dense y", t.y, yr, ya, ny, t.g.in + 1);
        ps_dense_backward(&t.g, t.B, t.x, t.w, t.r, dx, dw, db);
        ps_dense_backward_ref(&t.g, t.B, t.x, t.w, t.r, dxr, dwr, dbr);
        ps_dense_backward_ref(&t.g, t.B, xa, wa, ra, dxa, dwa, dba);
        assert_within("dense dx", dx, dxr, dxa, nx, t.g.out);
        assert_within("dense dw", dw, dwr, dwa, nw, t.B);
        assert_within("dense db", db, dbr, dba, t.g.out, t.B);
        check_fd("dense dx", dense_loss, &t, t.x, dx, nx, FD_STEP_LINEAR, FD_TOL);
        check_fd("dense dw", dense_loss, &t, t.w, dw, nw, FD_STEP_LINEAR, FD_TOL);
        check_fd("dense db", dense_loss, &t, t.b, db, t.g.out, FD_STEP_LINEAR, FD_TOL);

        free(yr), free(ya), free(xa), free(wa), free(ba), free(ra), free(dx), free(dw), free(db);
        free(dxr), free(dwr), free(dbr), free(dxa), free(dwa), free(dba);
        free(t.x), free(t.w), free(t.b), free(t.y), free(t.r);
    }
    ps_dense g;
    ps_shape out;
    cr_assert_eq(ps_dense_init(&g, (ps_shape){0, 1, 1}, 3, &out), -EINVAL);
    cr_assert_eq(ps_dense_init(&g, (ps_shape){3, 1, 1}, 0, &out), -EINVAL);
}

/* ---- max-pool -------------------------------------------------------------------- */

typedef struct pool_run {
    ps_maxpool2d g;
    int B;
    size_t nx, ny;
    float *x, *y, *r;
    int32_t *idx;
} pool_run;

static double pool_loss(void *ctx)
{
    pool_run *t = ctx;
    ps_maxpool2d_forward_ref(&t->g, t->B, t->x, t->y);
    return project(t->r, t->y, t->ny);
}

/* Distinct values 0.1 apart in a random order, so no window has a tie and
 * a step of 0.01 cannot change any window's winner. */
static void distinct_values(float *x, size_t n)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)(0.1 * ((double)i - (double)n / 2));
    for (size_t i = n; i > 1; i--) {
        size_t j = rng_next() % i;
        float v = x[i - 1];
        x[i - 1] = x[j], x[j] = v;
    }
}

static void pool_check(int c, int h, int w, int k, int stride, int B)
{
    pool_run t;
    ps_shape out;

    cr_log_info("pool %dx%dx%d k %d stride %d B %d", c, h, w, k, stride, B);
    cr_assert_eq(ps_maxpool2d_init(&t.g, (ps_shape){c, h, w}, k, stride, &out), 0);
    t.B = B;
    t.nx = (size_t)B * ps_shape_count(t.g.in), t.ny = (size_t)B * ps_shape_count(out);
    t.x = floats(t.nx), t.y = floats(t.ny), t.r = floats(t.ny);
    t.idx = malloc(t.ny * sizeof(int32_t));
    float *yr = floats(t.ny), *dx = floats(t.nx), *dxr = floats(t.nx), *dxa = floats(t.nx);
    float *ra = abs_copy(t.r, t.ny);

    distinct_values(t.x, t.nx);
    ps_maxpool2d_forward(&t.g, B, t.x, t.y, t.idx);
    ps_maxpool2d_forward_ref(&t.g, B, t.x, yr);
    cr_assert_arr_eq(t.y, yr, t.ny * sizeof(float));
    ps_maxpool2d_backward(&t.g, B, t.r, t.idx, dx);
    ps_maxpool2d_backward_ref(&t.g, B, t.x, t.r, dxr);
    ps_maxpool2d_backward_ref(&t.g, B, t.x, ra, dxa);
    /* Overlapping windows (stride < k) sum up to ceil(k/stride)^2 terms. */
    int per = (k + stride - 1) / stride;
    assert_within("pool dx", dx, dxr, dxa, t.nx, per * per);
    check_fd("pool dx", pool_loss, &t, t.x, dx, t.nx, FD_STEP_KINK, FD_TOL);

    /* Ties go to the window's first element, in both versions. */
    for (size_t i = 0; i < t.nx; i++)
        t.x[i] = (float)(i % 3);
    ps_maxpool2d_forward(&t.g, B, t.x, t.y, t.idx);
    ps_maxpool2d_backward(&t.g, B, t.r, t.idx, dx);
    ps_maxpool2d_backward_ref(&t.g, B, t.x, t.r, dxr);
    ps_maxpool2d_backward_ref(&t.g, B, t.x, ra, dxa);
    assert_within("pool dx (ties)", dx, dxr, dxa, t.nx, per * per);

    free(yr), free(dx), free(dxr), free(dxa), free(ra);
    free(t.x), free(t.y), free(t.r), free(t.idx);
}

Test(layers, maxpool2d)
{
    rng_state = 31;
    pool_check(1, 4, 4, 2, 2, 1);
    pool_check(3, 7, 5, 2, 2, 2);
    pool_check(2, 9, 8, 3, 2, 3);
    pool_check(2, 6, 7, 3, 1, 1);
    pool_check(1, 5, 5, 5, 1, 2);
    pool_check(4, 28, 28, 2, 2, 2);
    for (int i = 0; i < 10; i++) {
        int h = 2 + (int)(rng_next() % 10), w = 2 + (int)(rng_next() % 10);
        int mn = h < w ? h : w;
        pool_check(1 + (int)(rng_next() % 3), h, w, 1 + (int)(rng_next() % (unsigned)mn),
                   1 + (int)(rng_next() % 3), 1 + (int)(rng_next() % 3));
    }
    ps_maxpool2d g;
    ps_shape out;
    cr_assert_eq(ps_maxpool2d_init(&g, (ps_shape){1, 3, 3}, 4, 1, &out), -EINVAL);
    cr_assert_eq(ps_maxpool2d_init(&g, (ps_shape){1, 3, 3}, 2, 0, &out), -EINVAL);
    cr_assert_eq(ps_maxpool2d_init(&g, (ps_shape){2, 28, 28}, 2, 2, &out), 0);
    cr_assert(out.c == 2 && out.h == 14 && out.w == 14);
}

/* ---- ReLU, dropout, flatten ----------------------------------------------------- */

typedef struct act_run {
    size_t n;
    float *x, *y, *r;
    const ps_dropout *drop;
} act_run;

static double relu_loss(void *ctx)
{
    act_run *t = ctx;
    ps_relu_forward(t->n, t->x, t->y);
    return project(t->r, t->y, t->n);
}

Test(layers, relu)
{
    enum { N = 301 };
    act_run t = {N, floats(N), floats(N), floats(N), NULL};
    float *dx = floats(N);

    rng_state = 41;
    /* Keep every input at least 0.05 from the kink. */
    for (size_t i = 0; i < N; i++)
        t.x[i] = t.x[i] < 0 ? t.x[i] - 0.05f : t.x[i] + 0.05f;
    ps_relu_forward(N, t.x, t.y);
    for (size_t i = 0; i < N; i++)
        cr_assert_eq(t.y[i], t.x[i] > 0 ? t.x[i] : 0.0f);
    ps_relu_backward(N, t.y, t.r, dx);
    check_fd("relu dx", relu_loss, &t, t.x, dx, N, FD_STEP_KINK, FD_TOL);
    /* In place, and NaN / -0 give 0 like the MLP's kernels. */
    float v[4] = {-0.0f, NAN, 2.0f, -1.0f}, d[4] = {1, 1, 1, 1};
    ps_relu_forward(4, v, v);
    cr_assert(v[0] == 0.0f && !signbit(v[0]) && v[1] == 0.0f && v[2] == 2.0f && v[3] == 0.0f);
    ps_relu_backward(4, v, d, d);
    cr_assert(d[0] == 0.0f && d[1] == 0.0f && d[2] == 1.0f && d[3] == 0.0f);
    free(t.x), free(t.y), free(t.r), free(dx);
}

static double dropout_loss(void *ctx)
{
    act_run *t = ctx;
    ps_dropout_forward(t->drop, 7, 1, t->n, t->x, t->y);
    return project(t->r, t->y, t->n);
}

Test(layers, dropout)
{
    enum { N = 200000 };
    ps_dropout g;
    float *x = floats(N), *y = floats(N), *y2 = floats(N), *dx = floats(N);

    rng_state = 51;
    cr_assert_eq(ps_dropout_init(&g, 1.0f, 1), -EINVAL);
    cr_assert_eq(ps_dropout_init(&g, -0.1f, 1), -EINVAL);
    cr_assert_eq(ps_dropout_init(&g, NAN, 1), -EINVAL);

    /* Rate 0 and evaluation are the identity. */
    cr_assert_eq(ps_dropout_init(&g, 0.0f, 9), 0);
    ps_dropout_forward(&g, 3, 1, N, x, y);
    cr_assert_arr_eq(x, y, sizeof(float) * N);
    cr_assert_eq(ps_dropout_init(&g, 0.5f, 9), 0);
    ps_dropout_forward(&g, 3, 0, N, x, y);
    cr_assert_arr_eq(x, y, sizeof(float) * N);

    /* Inverted dropout: kept elements scaled by exactly 1 / (1 - rate); the
     * kept fraction within 5 standard deviations of 1 - rate. */
    cr_assert_eq(ps_dropout_init(&g, 0.3f, 9), 0);
    ps_dropout_forward(&g, 3, 1, N, x, y);
    size_t kept = 0;
    for (size_t i = 0; i < N; i++)
        if (y[i] != 0.0f) {
            kept++;
            cr_assert_eq(y[i], x[i] * g.scale);
        }
    double sd = sqrt(N * 0.3 * 0.7);
    cr_assert(fabs((double)kept - 0.7 * N) < 5 * sd, "kept %zu of %d", kept, N);
    cr_assert_eq(g.scale, (float)(1.0 / 0.7));

    /* The same (seed, step) gives the same mask; another step or seed does not. */
    ps_dropout_forward(&g, 3, 1, N, x, y2);
    cr_assert_arr_eq(y, y2, sizeof(float) * N);
    ps_dropout_forward(&g, 4, 1, N, x, y2);
    size_t same = 0;
    for (size_t i = 0; i < N; i++)
        same += (y[i] != 0.0f) == (y2[i] != 0.0f);
    /* Independent masks agree on 0.7^2 + 0.3^2 = 58% of elements. */
    cr_assert(fabs((double)same / N - 0.58) < 0.01, "steps 3 and 4 agree on %zu", same);
    ps_dropout g2 = g;
    g2.seed = 10;
    ps_dropout_forward(&g2, 3, 1, N, x, y2);
    same = 0;
    for (size_t i = 0; i < N; i++)
        same += (y[i] != 0.0f) == (y2[i] != 0.0f);
    cr_assert(fabs((double)same / N - 0.58) < 0.01, "seeds 9 and 10 agree on %zu", same);

    /* Backward applies the forward's mask; in place works; the gradient
     * matches finite differences. */
    memcpy(dx, x, sizeof(float) * N);
    ps_dropout_backward(&g, 3, 1, N, dx, dx);
    cr_assert_arr_eq(dx, y, sizeof(float) * N);
    enum { M = 257 };
    act_run t = {M, floats(M), floats(M), floats(M), &g};
    ps_dropout_backward(&g, 7, 1, M, t.r, dx);
    check_fd("dropout dx", dropout_loss, &t, t.x, dx, M, FD_STEP_LINEAR, FD_TOL);
    free(t.x), free(t.y), free(t.r);
    free(x), free(y), free(y2), free(dx);
}

Test(layers, flatten)
{
    ps_shape s = ps_flatten_shape((ps_shape){64, 7, 7});
    cr_assert(s.c == 3136 && s.h == 1 && s.w == 1);
    float a[5] = {1, 2, 3, 4, 5}, b[5] = {0};
    ps_flatten_forward(5, a, b);
    cr_assert_arr_eq(a, b, sizeof(a));
    ps_flatten_backward(5, a, a);
    cr_assert_eq(a[4], 5.0f);
}

/* ---- softmax cross-entropy --------------------------------------------------------- */

typedef struct xent_run {
    int B, C;
    float *logits;
    uint8_t *labels;
} xent_run;

static double xent_loss(void *ctx)
{
    xent_run *t = ctx;
    float loss;
    cr_assert_eq(ps_softmax_xent(t->B, t->C, t->logits, t->labels, NULL, &loss, NULL), 0);
    return loss;
}

Test(layers, softmax_xent)
{
    enum { B = 5, C = 7 };
    uint8_t labels[B];
    float *logits = floats(B * C), *d = floats(B * C), loss;
    xent_run t = {B, C, logits, labels};
    int correct, want = 0;
    double want_loss = 0.0;

    rng_state = 61;
    fill_random(logits, B * C, 3.0);
    for (int i = 0; i < B; i++)
        labels[i] = (uint8_t)(rng_next() % C);
    /* Make one row certainly right, so the count is not trivially zero. */
    logits[labels[0]] = 20.0f;
    for (int i = 0; i < B; i++) {
        double m = -INFINITY, s = 0.0;
        int best = 0;
        for (int c = 0; c < C; c++) {
            m = fmax(m, logits[i * C + c]);
            best = logits[i * C + c] > logits[i * C + best] ? c : best;
        }
        for (int c = 0; c < C; c++)
            s += exp(logits[i * C + c] - m);
        want_loss += (log(s) + m - logits[i * C + labels[i]]) / B;
        want += best == labels[i];
    }
    cr_assert_eq(ps_softmax_xent(B, C, logits, labels, d, &loss, &correct), 0);
    cr_assert(fabs(loss - want_loss) <= 1e-6 * (1 + want_loss), "loss %g, want %g", loss,
              want_loss);
    cr_assert_eq(correct, want);
    cr_assert_geq(correct, 1);
    check_fd("xent dlogits", xent_loss, &t, logits, d, B * C, 1e-3f, 5e-4);

    labels[2] = C;
    cr_assert_eq(ps_softmax_xent(B, C, logits, labels, d, &loss, &correct), -EINVAL);
    free(logits), free(d);
}
