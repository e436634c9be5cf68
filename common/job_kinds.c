/* The names of the job's kinds, from their tables (see job_kinds.h). */
#include "job_kinds.h"

#include <errno.h>
#include <string.h>

#define PS__JOB_KIND_NAME(kind, name) [kind] = name,
static const char *const ps__job_modes[] = {PS_MODE_MAP(PS__JOB_KIND_NAME)};
static const char *const ps__job_optimizers[] = {PS_OPTIMIZER_MAP(PS__JOB_KIND_NAME)};
static const char *const ps__job_schedules[] = {PS_LR_SCHEDULE_MAP(PS__JOB_KIND_NAME)};
#undef PS__JOB_KIND_NAME

/* The index of name in names[0..n), or -EINVAL. */
static int ps__job_kind_find(const char *const *names, int n, const char *name)
{
    for (int k = 0; k < n; k++)
        if (strcmp(name, names[k]) == 0)
            return k;
    return -EINVAL;
}

/* Defines the pair of functions of one kind, `int parse(const char *,
 * type *)` and `const char *name_of(type)`, over its table of names, so
 * the three kinds share one body rather than three copies of it. */
#define PS__JOB_KIND_FUNCTIONS(type, parse, name_of, names)                                        \
    int parse(const char *name, type *out)                                                         \
    {                                                                                              \
        int k = ps__job_kind_find(names, (int)(sizeof(names) / sizeof(names[0])), name);           \
                                                                                                   \
        if (k < 0)                                                                                 \
            return k;                                                                              \
        *out = (type)k;                                                                            \
        return 0;                                                                                  \
    }                                                                                              \
    const char *name_of(type v)                                                                    \
    {                                                                                              \
        return (unsigned)v < sizeof(names) / sizeof(names[0]) ? names[v] : "unknown";              \
    }

PS__JOB_KIND_FUNCTIONS(ps_mode, ps_mode_parse, ps_mode_name, ps__job_modes)
PS__JOB_KIND_FUNCTIONS(ps_optimizer_kind, ps_optimizer_parse, ps_optimizer_name, ps__job_optimizers)
PS__JOB_KIND_FUNCTIONS(ps_lr_kind, ps_lr_schedule_parse, ps_lr_schedule_name, ps__job_schedules)
