/* Learning-rate schedules applied by the servers: constant, step decay and
 * cosine, each optionally after a linear warm-up.
 *
 * The step is the global step being applied (in sync mode the number of steps
 * applied before this one; in async and ssp the pushing worker's step), so
 * every server of a job computes the same rate for the same step. */
#ifndef PS_LR_SCHEDULE_H
#define PS_LR_SCHEDULE_H

#include <stdint.h>

/* ps_lr_kind, ps_lr_schedule_parse and ps_lr_schedule_name: the job's table
 * of schedules. */
#include "job_kinds.h"

/* A plain value: every field is the caller's to set. */
typedef struct {
    ps_lr_kind kind;
    double base_lr;
    uint64_t warmup_steps; /* lr ramps linearly from base/warmup to base */
    uint64_t total_steps;  /* cosine: where the rate reaches min_lr; 0 = unknown */
    uint64_t step_size;    /* step: multiply by gamma every step_size steps */
    double gamma;
    double min_lr;
} ps_lr_schedule;

/* The rate for 0-based step. A cosine schedule whose total_steps is still 0
 * holds base_lr; past total_steps it holds min_lr. */
double ps_lr_schedule_at(const ps_lr_schedule *s, uint64_t step);

#endif
