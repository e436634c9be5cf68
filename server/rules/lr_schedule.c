/* Learning-rate schedules (see lr_schedule.h). */
#include "lr_schedule.h"

#include <math.h>

double ps_lr_schedule_at(const ps_lr_schedule *s, uint64_t step)
{
    uint64_t after;
    double frac;

    if (step < s->warmup_steps)
        return s->base_lr * (double)(step + 1) / (double)s->warmup_steps;
    after = step - s->warmup_steps;
    switch (s->kind) {
    case PS_LR_STEP:
        return s->step_size ? s->base_lr * pow(s->gamma, (double)(after / s->step_size))
                            : s->base_lr;
    case PS_LR_COSINE:
        if (s->total_steps <= s->warmup_steps)
            return s->total_steps ? s->min_lr : s->base_lr;
        frac = (double)after / (double)(s->total_steps - s->warmup_steps);
        if (frac > 1)
            frac = 1;
        return s->min_lr + (s->base_lr - s->min_lr) * 0.5 * (1 + cos(M_PI * frac));
    case PS_LR_CONSTANT:
        break;
    }
    return s->base_lr;
}
