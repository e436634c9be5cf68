/* The optimizer update of one embedding row: the dense rules of
 * server/rules/optimizer.c applied to a row's D weights and its own state, plus
 * row-wise Adagrad.
 *
 * A row's state exists only once the row is stored (server/rows/row_store keeps
 * it beside the weights, zero at creation) and is laid out as optimizer.c
 * lays out a chunk's: momentum one float per weight, Adagrad's sums one,
 * Adam's m and v interleaved, two. Row-wise Adagrad keeps one accumulator
 * per row: it adds the mean of the row's squared gradient and divides the
 * whole row's step by its root, as FBGEMM's and TorchRec's row-wise
 * Adagrad do, for a D-th of the state.
 *
 * Sparse updates are lazy, as in TensorFlow's LazyAdam and PyTorch's
 * SparseAdam: a row that is not pushed in a step is not updated at all (no
 * momentum carried forward, no weight decay), and Adam's bias correction
 * counts the row's own updates (row_step), not the global step. The rate
 * is the caller's: the table's schedule (server/rules/lr_schedule) at the step
 * being applied, as for dense chunks.
 *
 * Every update is checked: when a weight or state value would become Inf
 * or NaN (a non-finite gradient, or an overflow), the row and its state are
 * left exactly as they were and -ERANGE is returned, as
 * ps_optimizer_apply_checked does for a chunk. */
#ifndef PS_ROW_OPTIMIZER_H
#define PS_ROW_OPTIMIZER_H

#include <stddef.h>
#include <stdint.h>

#include "optimizer.h"

/* A plain value. */
typedef struct {
    /* kind, momentum, weight_decay, beta1, beta2, eps as for dense tensors
     * (the rate is each apply's, from the table's schedule). */
    ps_optimizer_config opt;
    int rowwise; /* with PS_OPT_ADAGRAD: one accumulator per row */
} ps_row_opt_config;

/* Fills cfg from a name: the dense optimizers' ("sgd", "nesterov", "adam",
 * "adamw", "adagrad", with their defaults) or "rowwise-adagrad". Returns 0
 * or -EINVAL. */
int ps_row_opt_parse(const char *name, ps_row_opt_config *cfg);
const char *ps_row_opt_name(const ps_row_opt_config *cfg);

/* The rules: rowwise only with Adagrad; momentum in [0, 1); betas in
 * [0, 1); eps > 0 and finite; weight decay finite and >= 0. Returns 0, or
 * -EINVAL with the reason in why. */
int ps_row_opt_check(const ps_row_opt_config *cfg, char *why, size_t why_len);

/* Floats of state one row of dim weights keeps (0 for plain SGD). */
size_t ps_row_opt_state_floats(const ps_row_opt_config *cfg, uint32_t dim);

/* Whether the rule reads row_step (Adam's bias correction). */
int ps_row_opt_counts_steps(const ps_row_opt_config *cfg);

/* One update of w[0..dim) and its state with gradient g[0..dim) at rate lr;
 * row_step is the row's update count including this one (from 1). Returns 0,
 * or -ERANGE with w and state unchanged when a value would not be finite. */
int ps_row_opt_apply(const ps_row_opt_config *cfg, float lr, float *w, float *state, const float *g,
                     uint32_t dim, uint64_t row_step);

#endif
