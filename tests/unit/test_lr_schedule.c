/* Learning-rate schedules against values computed by hand. Tolerance 1e-12
 * relative: the formulas are evaluated in double. */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>

#include "lr_schedule.h"

#define NEAR(a, b) cr_assert(fabs((a) - (b)) <= 1e-12 * (1 + fabs(b)), "%.17g != %.17g", a, b)

Test(lr_schedule, constant_is_constant)
{
    ps_lr_schedule s = {.kind = PS_LR_CONSTANT, .base_lr = 0.1};
    NEAR(ps_lr_schedule_at(&s, 0), 0.1);
    NEAR(ps_lr_schedule_at(&s, 1000000), 0.1);
}

Test(lr_schedule, linear_warmup_then_constant)
{
    ps_lr_schedule s = {.kind = PS_LR_CONSTANT, .base_lr = 0.4, .warmup_steps = 4};
    NEAR(ps_lr_schedule_at(&s, 0), 0.1);
    NEAR(ps_lr_schedule_at(&s, 1), 0.2);
    NEAR(ps_lr_schedule_at(&s, 3), 0.4);
    NEAR(ps_lr_schedule_at(&s, 4), 0.4);
}

Test(lr_schedule, step_decay)
{
    ps_lr_schedule s = {.kind = PS_LR_STEP, .base_lr = 1, .step_size = 10, .gamma = 0.5};
    NEAR(ps_lr_schedule_at(&s, 9), 1.0);
    NEAR(ps_lr_schedule_at(&s, 10), 0.5);
    NEAR(ps_lr_schedule_at(&s, 29), 0.25);
    NEAR(ps_lr_schedule_at(&s, 30), 0.125);
}

Test(lr_schedule, cosine_with_warmup)
{
    ps_lr_schedule s = {
        .kind = PS_LR_COSINE, .base_lr = 1, .warmup_steps = 10, .total_steps = 110, .min_lr = 0};
    NEAR(ps_lr_schedule_at(&s, 9), 1.0);
    NEAR(ps_lr_schedule_at(&s, 10), 1.0);
    /* Halfway through the 100 decay steps: cos(pi/2) = 0 -> half the rate. */
    NEAR(ps_lr_schedule_at(&s, 60), 0.5);
    /* A quarter through: 0.5 * (1 + cos(pi/4)). */
    NEAR(ps_lr_schedule_at(&s, 35), 0.5 * (1 + sqrt(0.5)));
    NEAR(ps_lr_schedule_at(&s, 110), 0.0);
    NEAR(ps_lr_schedule_at(&s, 500), 0.0);
}

Test(lr_schedule, cosine_floor_and_unknown_total)
{
    ps_lr_schedule s = {.kind = PS_LR_COSINE, .base_lr = 1, .total_steps = 100, .min_lr = 0.1};
    NEAR(ps_lr_schedule_at(&s, 50), 0.55);
    NEAR(ps_lr_schedule_at(&s, 100), 0.1);
    s.total_steps = 0;
    NEAR(ps_lr_schedule_at(&s, 50), 1.0);
}

Test(lr_schedule, names_round_trip)
{
    ps_lr_kind k;
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(ps_lr_schedule_parse(ps_lr_schedule_name((ps_lr_kind)i), &k), 0);
        cr_assert_eq(k, (ps_lr_kind)i);
    }
    cr_assert_eq(ps_lr_schedule_parse("exponential", &k), -EINVAL);
}
