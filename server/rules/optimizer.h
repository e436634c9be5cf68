/* Server-side optimizers: the update rule applied to one chunk of weights.
 *
 * The learning rate is not part of the configuration: it has one home, the
 * server's schedule (lr_schedule.h, whose base rate is --lr), which gives a
 * rate per step, and every apply takes that step's rate as an argument.
 *
 * State (momentum, Adam moments, ...) is a flat float array owned by the
 * caller, sized by ps_optimizer_state_floats(), laid out per-element so a
 * chunk's state is sharded exactly like its weights. The rules follow the
 * conventions of PyTorch's torch.optim (momentum buffer v = mu*v + g, Adam with
 * bias correction, AdamW with decoupled decay), so results can be compared. */
#ifndef PS_OPTIMIZER_H
#define PS_OPTIMIZER_H

#include <stddef.h>
#include <stdint.h>

/* ps_optimizer_kind, ps_optimizer_parse and ps_optimizer_name: the job's
 * table of update rules. */
#include "job_kinds.h"

typedef struct {
    ps_optimizer_kind kind;
    float momentum;     /* SGD, Nesterov */
    float weight_decay; /* L2 added to the gradient; decoupled for AdamW */
    float beta1, beta2; /* Adam, AdamW */
    float eps;          /* Adam, AdamW, Adagrad */
} ps_optimizer_config;

/* Fills cfg with the defaults for kind (momentum 0.9; betas 0.9/0.999; eps
 * 1e-8; weight decay 0, or 1e-2 for AdamW). No rate: the schedule gives it. */
void ps_optimizer_defaults(ps_optimizer_config *cfg, ps_optimizer_kind kind);

/* Floats of state needed for n weights (0 for plain SGD without momentum). */
size_t ps_optimizer_state_floats(const ps_optimizer_config *cfg, size_t n);

/* Applies one update to w[0..n) with gradient g[0..n) (g is read only) at
 * rate lr, the step's rate from the schedule (ps_lr_schedule_at). step is
 * the 1-based count of updates applied so far including this one (Adam's
 * bias correction needs it). state is zeroed by the caller before the first
 * step. */
void ps_optimizer_apply(const ps_optimizer_config *cfg, float lr, float *w, float *state,
                        const float *g, size_t n, uint64_t step);
/* What ps_optimizer_apply_checked knows about one chunk's values between
 * calls, so that it need not read them again to prove the next update stays
 * finite. The caller owns one per chunk (weights and state together), starts
 * it zeroed (nothing known), and zeroes it again whenever anything else
 * writes that chunk's weights or state; a stale bound would let a refused
 * update be half made. */
typedef struct {
    int known;    /* 0: nothing known; the next checked update reads the values */
    double w_max; /* every |w[i]| <= w_max */
    double s_max; /* every |state[i]| <= s_max, and Adam's v and Adagrad's sums are >= 0 */
} ps_optimizer_bounds;

/* The same update, made only if it leaves every weight and state value
 * finite; otherwise w and state are left as they were, bit for bit, and
 * -ERANGE is returned. The result is that of ps_optimizer_apply bit for bit.
 * bounds (may be NULL: nothing known or kept) describes w and state as they
 * are on entry and is updated to describe them on return. The check reads
 * the gradient once more and proves the result finite from its largest
 * magnitude and the bounds (reading w and state too when the bounds are
 * unknown or too loose); only when that proof fails (absurd or non-finite
 * inputs) is the update computed twice, once into a stack copy to check it
 * exactly. See docs/performance.md for the cost. */
int ps_optimizer_apply_checked(const ps_optimizer_config *cfg, float lr, float *w, float *state,
                               const float *g, size_t n, uint64_t step,
                               ps_optimizer_bounds *bounds);

#endif
