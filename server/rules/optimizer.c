/* The server's hot loop: one optimizer update over a chunk of weights.
 *
 * Each kind is mapped once per call onto one of four element-wise rules
 * (plain SGD, momentum, Adam, Adagrad) with its scalars precomputed in
 * double, so the loops themselves are branch-free float arithmetic the
 * compiler can vectorise. State is interleaved per element (Adam keeps m, v
 * of element i at state[2i], state[2i + 1]), so elements [a, b) of a chunk
 * use state[k*a, k*b) and a chunk can be split across threads anywhere. */
#include "optimizer.h"

#include <errno.h>
#include <math.h>
#include <string.h>

/* Elements per inner loop. A constant trip count lets GCC's -O2 "very cheap"
 * vectoriser take the loop (it refuses loops needing a scalar epilogue); a
 * multiple of 16 suits SSE, AVX and AVX-512 alike. */
#define PS__BLOCK 64

typedef enum { PS__PLAIN, PS__MOMENTUM, PS__ADAM, PS__ADAGRAD } ps__rule;

typedef struct {
    ps__rule rule;
    float lr;  /* the step's rate, as the caller passed it */
    float l2;  /* weight decay folded into the gradient */
    int no_l2; /* l2 is +0: plain SGD may skip it (see ps__span) */
    /* Momentum: v = mu*v + g, then w -= lr*(g_coef*g + v_coef*v), which is
     * heavy-ball with (0, 1) and Nesterov with (1, mu). */
    float mu, g_coef, v_coef;
    /* Adam: w *= decay (AdamW's decoupled decay; 1 for Adam), then
     * w -= step_size * m / (sqrt(v) * inv_sqrt_bc2 + eps). */
    float decay, b1, b2, step_size, inv_sqrt_bc2;
    float eps;
} ps__coef;

void ps_optimizer_defaults(ps_optimizer_config *cfg, ps_optimizer_kind kind)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->kind = kind;
    cfg->momentum = 0.9f;
    cfg->beta1 = 0.9f;
    cfg->beta2 = 0.999f;
    cfg->eps = 1e-8f;
    /* AdamW without decay is Adam; torch.optim.AdamW defaults to 1e-2. */
    if (kind == PS_OPT_ADAMW)
        cfg->weight_decay = 1e-2f;
}

static ps__rule ps__rule_of(const ps_optimizer_config *cfg)
{
    switch (cfg->kind) {
    case PS_OPT_SGD:
        return cfg->momentum != 0.0f ? PS__MOMENTUM : PS__PLAIN;
    case PS_OPT_NESTEROV:
        return PS__MOMENTUM;
    case PS_OPT_ADAM:
    case PS_OPT_ADAMW:
        return PS__ADAM;
    case PS_OPT_ADAGRAD:
        return PS__ADAGRAD;
    }
    return PS__PLAIN;
}

/* State floats per weight. */
static size_t ps__stride(ps__rule rule)
{
    return rule == PS__ADAM ? 2 : rule == PS__PLAIN ? 0 : 1;
}

size_t ps_optimizer_state_floats(const ps_optimizer_config *cfg, size_t n)
{
    return ps__stride(ps__rule_of(cfg)) * n;
}

/* Updates elements [0, n) of one block. */
static inline __attribute__((always_inline)) void
ps__span(const ps__coef *c, float *restrict w, float *restrict s, const float *restrict g, size_t n)
{
    const float lr = c->lr, l2 = c->l2, eps = c->eps;

    switch (c->rule) {
    case PS__PLAIN:
        /* Without weight decay, half the arithmetic, which is what bounds
         * this rule on chunks in cache. Bit for bit the same for finite w:
         * g + (+0)*w differs from g only as +0 for -0 (when w >= +0), and
         * w - lr*(+-0) is then the same w. */
        if (c->no_l2)
            for (size_t i = 0; i < n; i++)
                w[i] -= lr * g[i];
        else
            for (size_t i = 0; i < n; i++)
                w[i] -= lr * (g[i] + l2 * w[i]);
        break;
    case PS__MOMENTUM: {
        const float mu = c->mu, gc = c->g_coef, vc = c->v_coef;
        for (size_t i = 0; i < n; i++) {
            float gi = g[i] + l2 * w[i];
            float v = mu * s[i] + gi;
            s[i] = v;
            w[i] -= lr * (gc * gi + vc * v);
        }
        break;
    }
    case PS__ADAM: {
        const float decay = c->decay, b1 = c->b1, b2 = c->b2, step_size = c->step_size,
                    inv_sqrt_bc2 = c->inv_sqrt_bc2;
        for (size_t i = 0; i < n; i++) {
            float wi = w[i] * decay;
            float gi = g[i] + l2 * wi;
            float m = b1 * s[2 * i] + (1.0f - b1) * gi;
            float v = b2 * s[2 * i + 1] + (1.0f - b2) * gi * gi;
            s[2 * i] = m;
            s[2 * i + 1] = v;
            w[i] = wi - step_size * m / (sqrtf(v) * inv_sqrt_bc2 + eps);
        }
        break;
    }
    case PS__ADAGRAD:
        for (size_t i = 0; i < n; i++) {
            float gi = g[i] + l2 * w[i];
            float sum = s[i] + gi * gi;
            s[i] = sum;
            w[i] -= lr * gi / (sqrtf(sum) + eps);
        }
        break;
    }
}

/* Two copies, one picked at load time by the CPU it runs on (an ifunc): the
 * build targets baseline x86-64 (SSE2, 4 floats per vector), where Adam's
 * sqrt and divide and momentum's extra multiplies make the rules
 * compute-bound on chunks that sit in cache. bench-apply on this project's
 * 2-core AMD EPYC, 1 MiB in cache: Adam 0.70-0.96 -> 0.42-0.44 ns/weight (0.38
 * -> 0.63 of a plain streaming loop), momentum 0.34-0.39 -> 0.19-0.20; at
 * 64 MiB (memory-bound) no change. An AVX-512 copy was faster still in cache
 * but 30% slower than SSE2 at 64 MiB for plain SGD, so it is not offered.
 * Results are bit-identical between copies: every operation is element-wise
 * and exactly rounded, and ISO C mode (-std=c11) contracts nothing into fused
 * multiply-adds. See docs/performance.md. */
/* Not under ThreadSanitizer: the ifunc resolver runs before TSan has started
 * and the process dies at load time. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define PS__CLONES __attribute__((target_clones("avx2", "default")))
#else
#define PS__CLONES
#endif

/* The prepared form of one update: cfg's rule at the step's rate lr, with
 * step's bias corrections. */
static void ps__coef_init(const ps_optimizer_config *cfg, float lr, uint64_t step, ps__coef *c)
{
    *c = (ps__coef){
        .rule = ps__rule_of(cfg),
        .lr = lr,
        .l2 = cfg->weight_decay,
        .no_l2 = cfg->weight_decay == 0.0f && !signbit(cfg->weight_decay),
        .mu = cfg->momentum,
        .g_coef = cfg->kind == PS_OPT_NESTEROV ? 1.0f : 0.0f,
        .v_coef = cfg->kind == PS_OPT_NESTEROV ? cfg->momentum : 1.0f,
        .decay = 1.0f,
        .b1 = cfg->beta1,
        .b2 = cfg->beta2,
        .eps = cfg->eps,
    };
    if (c->rule == PS__ADAM) {
        /* step counts from 1; 0 would divide by a zero bias correction. */
        double t = step ? (double)step : 1.0;
        c->step_size = (float)(lr / (1.0 - pow(cfg->beta1, t)));
        c->inv_sqrt_bc2 = (float)(1.0 / sqrt(1.0 - pow(cfg->beta2, t)));
        if (cfg->kind == PS_OPT_ADAMW) {
            c->decay = (float)(1.0 - (double)lr * cfg->weight_decay);
            c->l2 = 0.0f;
        }
    }
}

static inline __attribute__((always_inline)) void ps__apply(const ps__coef *c, float *w,
                                                            float *state, const float *g, size_t n)
{
    size_t stride = ps__stride(c->rule);

    for (; n >= PS__BLOCK; n -= PS__BLOCK, w += PS__BLOCK, g += PS__BLOCK) {
        ps__span(c, w, state, g, PS__BLOCK);
        /* Plain SGD may be given no state at all. */
        if (stride)
            state += stride * PS__BLOCK;
    }
    ps__span(c, w, state, g, n);
}

/* 1 when some x[i] is Inf or NaN (all exponent bits set). */
static inline __attribute__((always_inline)) int ps__optimizer_any_nonfinite(const float *x,
                                                                             size_t n)
{
    uint32_t bad = 0;

    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof(u));
        bad |= (u & 0x7f800000u) == 0x7f800000u;
    }
    return (int)bad;
}

/* Lanes of the running maximum in ps__max_abs: two AVX2 vectors, so the
 * loop is two independent integer maxima per 16 floats with no reduction
 * until the end. */
#define PS__LANES 16

/* The largest magnitude among x[0..n), or +Inf when some x[i] is Inf or
 * NaN. On the bits: for finite floats the order of |x| is the order of the
 * integers x & 0x7fffffff, and Inf and NaN sort above every finite value, so
 * this is one integer max the compiler vectorises (a float max is not, for
 * NaN's sake). This pass over the gradient is the whole cost of the finite
 * check on the fast path, so it keeps PS__LANES maxima apart and reduces
 * them once. */
static inline __attribute__((always_inline)) double ps__max_abs(const float *x, size_t n)
{
    uint32_t lane[PS__LANES] = {0}, m = 0;
    size_t i = 0;
    float f;

    for (; i + PS__LANES <= n; i += PS__LANES)
        for (size_t j = 0; j < PS__LANES; j++) {
            uint32_t u;
            memcpy(&u, &x[i + j], sizeof(u));
            u &= 0x7fffffffu;
            lane[j] = u > lane[j] ? u : lane[j];
        }
    for (; i < n; i++) {
        uint32_t u;
        memcpy(&u, &x[i], sizeof(u));
        u &= 0x7fffffffu;
        m = u > m ? u : m;
    }
    for (size_t j = 0; j < PS__LANES; j++)
        m = lane[j] > m ? lane[j] : m;
    if (m >= 0x7f800000u)
        return INFINITY;
    memcpy(&f, &m, sizeof(f));
    return f;
}

/* 1 when the state the rule takes a square root of (Adam's v, Adagrad's
 * sums) holds no negative value; such state only comes from outside (a
 * checkpoint), as the rules themselves keep it >= 0. Read only when nothing
 * is known about the chunk. */
static int ps__roots_nonnegative(const ps__coef *c, const float *state, size_t n)
{
    size_t stride = ps__stride(c->rule);
    uint32_t bad = 0;

    if (c->rule != PS__ADAM && c->rule != PS__ADAGRAD)
        return 1;
    for (size_t i = 0; i < n; i++) {
        uint32_t u;
        memcpy(&u, &state[stride * i + stride - 1], sizeof(u));
        bad |= u > 0x80000000u; /* sign set and not -0 */
    }
    return !bad;
}

/* max(a, b), NaN when either is (fmax would drop the NaN). */
static double ps__max_nan(double a, double b)
{
    return a > b || a != a ? a : b;
}

/* Bounds every value the update computes, intermediate or written, from
 * W >= |w[i]|, S >= |state[i]| (Adam's v and Adagrad's sums >= 0) and
 * G >= |g[i]|, in double. Returns 1 when all of them are far below FLT_MAX
 * (so neither the rounding of the bound nor that of the float arithmetic can
 * cross it) and then sets *out_w, *out_s to bounds of the written weights and
 * state; 0 when nothing is proved (huge or non-finite inputs, or
 * coefficients outside the ranges the argument needs). Every bound is
 * monotone in W, S, G, and NaN anywhere makes it fail. */
static int ps__prove_finite(const ps__coef *c, double W, double S, double G, double *out_w,
                            double *out_s)
{
    const double limit = 1e37;
    /* Each float operation rounds up by at most 2^-24 relative (plus half a
     * subnormal step, absolute), and no value passes through more than 8 of
     * them: 2^-20 relative and the smallest normal float absolute cover that
     * and the rounding of the double bound itself. */
    const double round_up = 1.0 + 0x1p-20, tiny = 0x1p-126;
    double lr = fabs((double)c->lr), wi = W * fabs((double)c->decay);
    double gi = G + fabs((double)c->l2) * wi, peak = 0.0, ow = 0.0, os = 0.0;

    switch (c->rule) {
    case PS__PLAIN:
        ow = W + lr * gi;
        break;
    case PS__MOMENTUM:
        os = fabs((double)c->mu) * S + gi;
        /* The step before lr scales it, which may be the larger. */
        peak = fabs((double)c->g_coef) * gi + fabs((double)c->v_coef) * os;
        ow = W + lr * peak;
        break;
    case PS__ADAM: {
        /* v = b2*v + (1-b2)*g*g stays >= 0 only for b2 in [0, 1], and the
         * denominator sqrt(v)*inv_sqrt_bc2 + eps is then >= eps > 0. */
        double one_b1 = fabs((double)(1.0f - c->b1)), one_b2 = (double)(1.0f - c->b2);
        double m = fabs((double)c->b1) * S + one_b1 * gi;
        double v = (double)c->b2 * S + one_b2 * gi * gi;
        if (!(c->eps > 0.0f && c->b2 >= 0.0f && c->b2 < 1.0f && c->inv_sqrt_bc2 >= 0.0f))
            return 0;
        os = ps__max_nan(m, v);
        peak = ps__max_nan(fabs((double)c->step_size) * m, sqrt(v) * c->inv_sqrt_bc2 + c->eps);
        ow = wi + fabs((double)c->step_size) * m / c->eps;
        break;
    }
    case PS__ADAGRAD:
        if (!(c->eps > 0.0f))
            return 0;
        os = S + gi * gi;
        peak = ps__max_nan(lr * gi, sqrt(os) + c->eps);
        ow = W + lr * gi / c->eps;
        break;
    }
    peak = ps__max_nan(ps__max_nan(peak, wi), ps__max_nan(gi, ps__max_nan(ow, os)));
    if (!(peak < limit))
        return 0;
    *out_w = ow * round_up + tiny;
    *out_s = os * round_up + tiny;
    return 1;
}

/* Whether the update would leave every weight and state value finite: each
 * block computed into a copy on the stack, nothing written. */
static inline __attribute__((always_inline)) int
ps__stays_finite(const ps__coef *c, const float *w, const float *state, const float *g, size_t n)
{
    float wb[PS__BLOCK], sb[2 * PS__BLOCK];
    size_t stride = ps__stride(c->rule);

    for (size_t off = 0; off < n; off += PS__BLOCK) {
        size_t m = n - off < PS__BLOCK ? n - off : PS__BLOCK;
        memcpy(wb, w + off, m * sizeof(float));
        if (stride)
            memcpy(sb, state + stride * off, stride * m * sizeof(float));
        ps__span(c, wb, sb, g + off, m);
        if (ps__optimizer_any_nonfinite(wb, m) || ps__optimizer_any_nonfinite(sb, stride * m))
            return 0;
    }
    return 1;
}

PS__CLONES void ps_optimizer_apply(const ps_optimizer_config *cfg, float lr, float *w, float *state,
                                   const float *g, size_t n, uint64_t step)
{
    ps__coef c;

    ps__coef_init(cfg, lr, step, &c);
    ps__apply(&c, w, state, g, n);
}

/* An update cannot be undone once written (the arithmetic does not run
 * backwards exactly), so it is proved finite before the first write, in
 * three tiers: from the gradient's largest magnitude and what bounds knows
 * of the chunk (one read-only pass over g, the usual case); from the largest
 * magnitudes of the weights and state read again (nothing known, or the
 * known bounds too loose); or exactly, computed into a stack copy. */
PS__CLONES int ps_optimizer_apply_checked(const ps_optimizer_config *cfg, float lr, float *w,
                                          float *state, const float *g, size_t n, uint64_t step,
                                          ps_optimizer_bounds *bounds)
{
    size_t stride;
    double G, ow, os;
    ps__coef c;

    ps__coef_init(cfg, lr, step, &c);
    stride = ps__stride(c.rule);
    G = ps__max_abs(g, n);
    if (!(bounds && bounds->known &&
          ps__prove_finite(&c, bounds->w_max, bounds->s_max, G, &ow, &os))) {
        double W = ps__max_abs(w, n), S = stride ? ps__max_abs(state, stride * n) : 0.0;
        if (!ps__roots_nonnegative(&c, state, n) || !ps__prove_finite(&c, W, S, G, &ow, &os)) {
            if (!ps__stays_finite(&c, w, state, g, n))
                return -ERANGE;
            ps__apply(&c, w, state, g, n);
            /* Made, but nothing proved about the result. */
            if (bounds)
                bounds->known = 0;
            return 0;
        }
    }
    ps__apply(&c, w, state, g, n);
    if (bounds)
        *bounds = (ps_optimizer_bounds){.known = 1, .w_max = ow, .s_max = os};
    return 0;
}
