/* Per-row optimizer updates (see row_optimizer.h): the dense rules through
 * ps_optimizer_apply_checked, and row-wise Adagrad, which has no dense
 * counterpart, here. */
#include "row_optimizer.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#include "ps_error.h"
#include "row_table.h"

int ps_row_opt_parse(const char *name, ps_row_opt_config *cfg)
{
    ps_optimizer_kind kind;
    int rowwise = strcmp(name, PS_ROW_TABLE_ROWWISE_ADAGRAD) == 0;

    if (rowwise)
        kind = PS_OPT_ADAGRAD;
    else if (ps_optimizer_parse(name, &kind) < 0)
        return -EINVAL;
    memset(cfg, 0, sizeof(*cfg));
    ps_optimizer_defaults(&cfg->opt, kind);
    cfg->rowwise = rowwise;
    return 0;
}

const char *ps_row_opt_name(const ps_row_opt_config *cfg)
{
    return cfg->rowwise ? PS_ROW_TABLE_ROWWISE_ADAGRAD : ps_optimizer_name(cfg->opt.kind);
}

int ps_row_opt_check(const ps_row_opt_config *cfg, char *why, size_t why_len)
{
    const ps_optimizer_config *o = &cfg->opt;

    if (strcmp(ps_optimizer_name(o->kind), "unknown") == 0)
        return ps_err_printf(why, why_len, -EINVAL, "unknown optimizer kind %d", (int)o->kind);
    if (cfg->rowwise && o->kind != PS_OPT_ADAGRAD)
        return ps_err_printf(why, why_len, -EINVAL, "row-wise accumulators are Adagrad's only");
    if (!(o->momentum >= 0.0f && o->momentum < 1.0f))
        return ps_err_printf(why, why_len, -EINVAL, "momentum %g is not in [0, 1)", o->momentum);
    if (!(o->beta1 >= 0.0f && o->beta1 < 1.0f && o->beta2 >= 0.0f && o->beta2 < 1.0f))
        return ps_err_printf(why, why_len, -EINVAL, "betas %g, %g are not in [0, 1)", o->beta1,
                             o->beta2);
    if (!(o->eps > 0.0f && isfinite(o->eps)))
        return ps_err_printf(why, why_len, -EINVAL, "eps %g is not a positive number", o->eps);
    if (!(o->weight_decay >= 0.0f && isfinite(o->weight_decay)))
        return ps_err_printf(why, why_len, -EINVAL, "weight decay %g is not a number >= 0",
                             o->weight_decay);
    return 0;
}

size_t ps_row_opt_state_floats(const ps_row_opt_config *cfg, uint32_t dim)
{
    return cfg->rowwise ? 1 : ps_optimizer_state_floats(&cfg->opt, dim);
}

int ps_row_opt_counts_steps(const ps_row_opt_config *cfg)
{
    return cfg->opt.kind == PS_OPT_ADAM || cfg->opt.kind == PS_OPT_ADAMW;
}

/* Row-wise Adagrad: with gi = g[i] + wd * w[i], acc += mean(gi^2) (summed in
 * double), then w[i] -= lr * gi / (sqrt(acc) + eps). Checked in a first
 * pass that writes nothing. */
static int ps__rowwise_adagrad(const ps_optimizer_config *o, float lr, float *w, float *acc,
                               const float *g, uint32_t dim)
{
    const float wd = o->weight_decay;
    double sum = 0.0;
    float a, rate;

    for (uint32_t i = 0; i < dim; i++) {
        float gi = g[i] + wd * w[i];
        sum += (double)gi * gi;
    }
    a = *acc + (float)(sum / dim);
    rate = lr / (sqrtf(a) + o->eps);
    /* A negative accumulator (only from outside: a corrupt restore) has no
     * root; NaN fails every comparison. */
    if (!(isfinite(a) && a >= 0.0f && isfinite(rate)))
        return -ERANGE;
    for (uint32_t i = 0; i < dim; i++)
        if (!isfinite(w[i] - rate * (g[i] + wd * w[i])))
            return -ERANGE;
    for (uint32_t i = 0; i < dim; i++)
        w[i] -= rate * (g[i] + wd * w[i]);
    *acc = a;
    return 0;
}

int ps_row_opt_apply(const ps_row_opt_config *cfg, float lr, float *w, float *state, const float *g,
                     uint32_t dim, uint64_t row_step)
{
    if (cfg->rowwise)
        return ps__rowwise_adagrad(&cfg->opt, lr, w, state, g, dim);
    return ps_optimizer_apply_checked(&cfg->opt, lr, w, state, g, dim, row_step, NULL);
}
