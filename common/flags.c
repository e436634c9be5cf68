/* Option parsing for every shardps binary (see flags.h): one table per
 * program and four layers, default < cluster file < environment < argv,
 * applied in that order so that each wins over the ones before it. Values
 * are checked by ps_flag_set (flag_table.h), the file is read by
 * flags_file.c, --help is printed by flags_usage.c; this file scans argv,
 * applies the layers and keeps where each value came from. */
#include "flags.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flag_table.h"
#include "flags_file.h"
#include "flags_usage.h"
#include "ps_error.h"

typedef struct {
    int flag;
    const char *value;
} ps__arg;

/* Splits argv into (option, value) pairs without applying them, so the
 * cluster file it names can be read first and still lose to every flag. */
static int ps__scan_argv(const ps_flags_ctx *ctx, int argc, char **argv, ps__arg *out, int *n_out)
{
    *n_out = 0;
    for (int a = 1; a < argc; a++) {
        const char *arg = argv[a], *eq;
        int f = -1;
        size_t len;

        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            ps_flags_usage(stdout, ctx->flags, ctx->n, ctx->prog, ctx->summary);
            return 1;
        }
        if (strncmp(arg, "--", 2) != 0) {
            fprintf(stderr, "%s: unexpected argument '%s'; options start with --, see %s --help\n",
                    ctx->prog, arg, ctx->prog);
            return -PS_EUSAGE;
        }
        arg += 2;
        eq = strchr(arg, '=');
        len = eq ? (size_t)(eq - arg) : strlen(arg);
        for (int i = 0; i < ctx->n; i++)
            if (strlen(ctx->flags[i].name) == len && strncmp(ctx->flags[i].name, arg, len) == 0)
                f = i;
        if (f < 0) {
            fprintf(stderr, "%s: unknown option '--%.*s'; see %s --help\n", ctx->prog, (int)len,
                    arg, ctx->prog);
            return -PS_EUSAGE;
        }
        out[*n_out].flag = f;
        out[*n_out].value = NULL;
        if (eq)
            out[*n_out].value = eq + 1;
        else if (ctx->flags[f].type == PS_FLAG_BOOL) {
            double d;
            /* "--restore auto": a switch takes one of its words as a value. */
            if (a + 1 < argc && ps_flag_word_value(&ctx->flags[f], argv[a + 1], &d))
                out[*n_out].value = argv[++a];
        } else {
            if (a + 1 >= argc) {
                fprintf(stderr, "%s: --%s needs a value (%s); see %s --help\n", ctx->prog,
                        ctx->flags[f].name, ctx->flags[f].metavar ? ctx->flags[f].metavar : "VALUE",
                        ctx->prog);
                return -PS_EUSAGE;
            }
            out[*n_out].value = argv[++a];
        }
        (*n_out)++;
    }
    return 0;
}

int ps_flags_load(ps_flags_ctx *ctx, int argc, char **argv)
{
    ps__arg *args = NULL;
    char origin[96];
    int n_args, rc, cluster = ctx->section ? ps_flag_find(ctx->flags, ctx->n, "cluster") : -1;

    ctx->file = NULL;
    ctx->strings = NULL;
    ctx->n_strings = 0;
    ctx->origin = calloc((size_t)ctx->n + 1, sizeof(*ctx->origin));
    ctx->line = calloc((size_t)ctx->n + 1, sizeof(*ctx->line));
    ctx->notes = calloc((size_t)ctx->n + 1, sizeof(*ctx->notes));
    args = calloc((size_t)argc + 1, sizeof(*args));
    if (ctx->origin == NULL || ctx->line == NULL || ctx->notes == NULL || args == NULL) {
        fprintf(stderr, "%s: out of memory\n", ctx->prog);
        rc = -PS_EUSAGE;
        goto out;
    }
    rc = ps__scan_argv(ctx, argc, argv, args, &n_args);
    if (rc != 0)
        goto out;
    if (cluster >= 0 && ctx->flags[cluster].type == PS_FLAG_STRING) {
        const char *path = *(const char **)ctx->flags[cluster].dest, *env;
        env = getenv("SHARDPS_CLUSTER");
        if (env && *env)
            path = env;
        for (int k = 0; k < n_args; k++)
            if (args[k].flag == cluster)
                path = args[k].value;
        if (path && *path) {
            ctx->file = path;
            rc = ps_flags_file_load(ctx);
            if (rc < 0)
                goto out;
        }
    }
    for (int i = 0; i < ctx->n; i++) {
        const char *v;
        ps_flag_env_name(ctx->flags[i].name, origin, sizeof(origin));
        v = getenv(origin);
        if (v && *v) {
            rc = ps_flag_set(&ctx->flags[i], v, ctx->prog, origin);
            if (rc < 0)
                goto out;
            ctx->origin[i] = PS_FLAG_FROM_ENV;
        }
    }
    for (int k = 0; k < n_args; k++) {
        const ps_flag *f = &ctx->flags[args[k].flag];
        snprintf(origin, sizeof(origin), "--%s", f->name);
        rc = ps_flag_set(f, args[k].value, ctx->prog, origin);
        if (rc < 0)
            goto out;
        ctx->origin[args[k].flag] = PS_FLAG_FROM_ARGV;
    }
out:
    free(args);
    return rc;
}

void ps_flags_release(ps_flags_ctx *ctx)
{
    for (int i = 0; i < ctx->n_strings; i++)
        free(ctx->strings[i]);
    for (int i = 0; ctx->notes && i < ctx->n; i++)
        free(ctx->notes[i]);
    free(ctx->strings);
    free(ctx->notes);
    free(ctx->line);
    free(ctx->origin);
    ctx->strings = ctx->notes = NULL;
    ctx->line = NULL;
    ctx->origin = NULL;
    ctx->n_strings = 0;
}

ps_flag_origin ps_flags_origin(const ps_flags_ctx *ctx, const char *name)
{
    int i = ps_flag_find(ctx->flags, ctx->n, name);

    return i >= 0 && ctx->origin ? ctx->origin[i] : PS_FLAG_FROM_DEFAULT;
}

int ps_flags_set_derived(ps_flags_ctx *ctx, const char *name, const char *source)
{
    int i = ps_flag_find(ctx->flags, ctx->n, name);
    char *copy;

    if (i < 0)
        return -ENOENT;
    copy = strdup(source);
    if (copy == NULL)
        return -ENOMEM;
    free(ctx->notes[i]);
    ctx->notes[i] = copy;
    ctx->origin[i] = PS_FLAG_FROM_DERIVED;
    return 0;
}

const char *ps_flags_describe_origin(const ps_flags_ctx *ctx, const char *name, char *buf,
                                     size_t len)
{
    int i = ps_flag_find(ctx->flags, ctx->n, name);

    switch (i >= 0 && ctx->origin ? ctx->origin[i] : PS_FLAG_FROM_DEFAULT) {
    case PS_FLAG_FROM_DEFAULT:
        snprintf(buf, len, "the default");
        break;
    case PS_FLAG_FROM_FILE:
        snprintf(buf, len, "%s:%d", ctx->file, ctx->line[i]);
        break;
    case PS_FLAG_FROM_ENV:
        ps_flag_env_name(name, buf, len);
        break;
    case PS_FLAG_FROM_ARGV:
        snprintf(buf, len, "the command line");
        break;
    case PS_FLAG_FROM_DERIVED:
        snprintf(buf, len, "%s", ctx->notes[i] ? ctx->notes[i] : "other settings");
        break;
    }
    return buf;
}

int ps_flags_parse(const ps_flag *flags, int n, int argc, char **argv, const char *prog,
                   const char *summary)
{
    ps_flags_ctx ctx = {.flags = flags, .n = n, .prog = prog, .summary = summary};
    int rc = ps_flags_load(&ctx, argc, argv);

    ps_flags_release(&ctx);
    return rc;
}
