/* The job's settings that name one of a few kinds: the consistency mode,
 * the servers' update rule and the learning-rate schedule. Each is an enum
 * generated with its names from one X-macro table (as ps_error.h's codes
 * are), so a kind is one line: the job-option table offers these names as
 * its choices (job_options.c), the check and the servers' configuration
 * parse the option's text into the enum once (job_check.c,
 * server/main/server_config.c), and logs, the Welcome and the metrics print the
 * name back from the same table. */
#ifndef PS_JOB_KINDS_H
#define PS_JOB_KINDS_H

/* sync is BSP (staleness 0), async lets a worker run any number of clocks
 * ahead, ssp at most --staleness. */
#define PS_MODE_MAP(X)                                                                             \
    X(PS_MODE_SYNC, "sync")                                                                        \
    X(PS_MODE_ASYNC, "async")                                                                      \
    X(PS_MODE_SSP, "ssp")

/* sgd is plain SGD with --momentum 0 and heavy-ball otherwise; nesterov is
 * SGD with Nesterov momentum (the rules: server/rules/optimizer.h). */
#define PS_OPTIMIZER_MAP(X)                                                                        \
    X(PS_OPT_SGD, "sgd")                                                                           \
    X(PS_OPT_NESTEROV, "nesterov")                                                                 \
    X(PS_OPT_ADAM, "adam")                                                                         \
    X(PS_OPT_ADAMW, "adamw")                                                                       \
    X(PS_OPT_ADAGRAD, "adagrad")

/* The shapes of the rate over steps (server/rules/lr_schedule.h). */
#define PS_LR_SCHEDULE_MAP(X)                                                                      \
    X(PS_LR_CONSTANT, "constant")                                                                  \
    X(PS_LR_STEP, "step")                                                                          \
    X(PS_LR_COSINE, "cosine")

#define PS__JOB_KIND_ENUM(kind, name) kind,
typedef enum { PS_MODE_MAP(PS__JOB_KIND_ENUM) } ps_mode;
typedef enum { PS_OPTIMIZER_MAP(PS__JOB_KIND_ENUM) } ps_optimizer_kind;
typedef enum { PS_LR_SCHEDULE_MAP(PS__JOB_KIND_ENUM) } ps_lr_kind;
#undef PS__JOB_KIND_ENUM

/* A table's names as an option's choices ("sync|async|ssp", flag_table.h):
 * each name behind a '|', and the first '|' skipped, which leaves a
 * constant that a static option table can hold. */
#define PS__JOB_KIND_CHOICE(kind, name) "|" name
#define PS_JOB_KIND_CHOICES(map)        (&(map(PS__JOB_KIND_CHOICE))[1])

/* Each parse takes exactly one of its table's names and returns 0, or
 * -EINVAL for any other text; each name gives the table's name, or
 * "unknown" for a value outside the enum. */
int ps_mode_parse(const char *name, ps_mode *mode);
const char *ps_mode_name(ps_mode mode);
int ps_optimizer_parse(const char *name, ps_optimizer_kind *kind);
const char *ps_optimizer_name(ps_optimizer_kind kind);
int ps_lr_schedule_parse(const char *name, ps_lr_kind *kind);
const char *ps_lr_schedule_name(ps_lr_kind kind);

#endif
