/* Option table parsing (see flags.h). */
#include "flags.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ps_error.h"

/* origin is how the user gave the value: "--lr" or "SHARDPS_LR". */
static int ps__flag_error(const char *prog, const char *origin, const char *fmt, const char *value,
                          const ps_flag *f)
{
    fprintf(stderr, "%s: %s: ", prog, origin);
    fprintf(stderr, fmt, value);
    if (f && (f->type == PS_FLAG_INT || f->type == PS_FLAG_DOUBLE))
        fprintf(stderr, " (accepted: %g to %g)", f->min, f->max);
    else if (f && f->type == PS_FLAG_CHOICE)
        fprintf(stderr, " (accepted: %s)", f->choices);
    fprintf(stderr, "; see %s --help\n", prog);
    return -PS_EUSAGE;
}

static int ps__is_choice(const char *choices, const char *v)
{
    size_t n = strlen(v);
    const char *p = choices;

    while (n > 0 && p != NULL) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        if (len == n && strncmp(p, v, n) == 0)
            return 1;
        p = bar ? bar + 1 : NULL;
    }
    return 0;
}

static int ps__flag_set(const ps_flag *f, const char *value, const char *prog, const char *origin)
{
    char *end;
    double d;

    switch (f->type) {
    case PS_FLAG_BOOL:
        if (value == NULL || strcmp(value, "1") == 0 || strcmp(value, "true") == 0) {
            *(int *)f->dest = 1;
            return 0;
        }
        if (strcmp(value, "0") == 0 || strcmp(value, "false") == 0) {
            *(int *)f->dest = 0;
            return 0;
        }
        return ps__flag_error(prog, origin, "'%s' is not a boolean (1/0/true/false)", value, NULL);
    case PS_FLAG_STRING:
        *(const char **)f->dest = value;
        return 0;
    case PS_FLAG_CHOICE:
        if (!ps__is_choice(f->choices, value))
            return ps__flag_error(prog, origin, "'%s' is not a known value", value, f);
        *(const char **)f->dest = value;
        return 0;
    case PS_FLAG_INT:
    case PS_FLAG_DOUBLE:
        errno = 0;
        d = f->type == PS_FLAG_INT ? (double)strtoll(value, &end, 10) : strtod(value, &end);
        if (errno || end == value || *end != '\0' || !isfinite(d))
            return ps__flag_error(prog, origin,
                                  f->type == PS_FLAG_INT ? "'%s' is not an integer"
                                                         : "'%s' is not a number",
                                  value, f);
        if (d < f->min || d > f->max)
            return ps__flag_error(prog, origin, "'%s' is out of range", value, f);
        if (f->type == PS_FLAG_INT)
            *(int *)f->dest = (int)d;
        else
            *(double *)f->dest = d;
        return 0;
    }
    return -PS_EUSAGE;
}

/* "staleness" -> "SHARDPS_STALENESS", "chunk-bytes" -> "SHARDPS_CHUNK_BYTES". */
static void ps__env_name(const char *name, char *buf, size_t len)
{
    size_t i = (size_t)snprintf(buf, len, "SHARDPS_");
    for (; *name && i + 1 < len; name++)
        buf[i++] = *name == '-' ? '_' : (char)toupper((unsigned char)*name);
    buf[i] = '\0';
}

int ps_flags_parse(const ps_flag *flags, int n, int argc, char **argv, const char *prog,
                   const char *summary)
{
    char origin[96];
    int rc;

    for (int i = 0; i < n; i++) {
        const char *v;
        ps__env_name(flags[i].name, origin, sizeof(origin));
        v = getenv(origin);
        if (v && *v && (rc = ps__flag_set(&flags[i], v, prog, origin)) < 0)
            return rc;
    }
    for (int a = 1; a < argc; a++) {
        const char *arg = argv[a], *eq, *value = NULL;
        const ps_flag *f = NULL;
        size_t len;

        if (strcmp(arg, "--help") == 0 || strcmp(arg, "-h") == 0) {
            ps_flags_usage(stdout, flags, n, prog, summary);
            return 1;
        }
        if (strncmp(arg, "--", 2) != 0) {
            fprintf(stderr, "%s: unexpected argument '%s'; options start with --, see %s --help\n",
                    prog, arg, prog);
            return -PS_EUSAGE;
        }
        arg += 2;
        eq = strchr(arg, '=');
        len = eq ? (size_t)(eq - arg) : strlen(arg);
        for (int i = 0; i < n; i++)
            if (strlen(flags[i].name) == len && strncmp(flags[i].name, arg, len) == 0)
                f = &flags[i];
        if (f == NULL) {
            fprintf(stderr, "%s: unknown option '--%.*s'; see %s --help\n", prog, (int)len, arg,
                    prog);
            return -PS_EUSAGE;
        }
        if (eq)
            value = eq + 1;
        else if (f->type != PS_FLAG_BOOL) {
            if (a + 1 >= argc) {
                fprintf(stderr, "%s: --%s needs a value (%s); see %s --help\n", prog, f->name,
                        f->metavar ? f->metavar : "VALUE", prog);
                return -PS_EUSAGE;
            }
            value = argv[++a];
        }
        snprintf(origin, sizeof(origin), "--%s", f->name);
        rc = ps__flag_set(f, value, prog, origin);
        if (rc < 0)
            return rc;
    }
    return 0;
}

void ps_flags_usage(FILE *out, const ps_flag *flags, int n, const char *prog, const char *summary)
{
    fprintf(out, "Usage: %s [options]\n%s\n\nOptions (each also read from SHARDPS_<NAME>):\n", prog,
            summary);
    for (int i = 0; i < n; i++) {
        const ps_flag *f = &flags[i];
        char left[64];

        if (f->type == PS_FLAG_BOOL)
            snprintf(left, sizeof(left), "--%s", f->name);
        else
            snprintf(left, sizeof(left), "--%s %s", f->name, f->metavar ? f->metavar : "VALUE");
        fprintf(out, "  %-26s %s", left, f->help);
        switch (f->type) {
        case PS_FLAG_INT:
            fprintf(out, " [default %d]", *(int *)f->dest);
            break;
        case PS_FLAG_DOUBLE:
            fprintf(out, " [default %g]", *(double *)f->dest);
            break;
        case PS_FLAG_STRING:
        case PS_FLAG_CHOICE:
            if (*(const char **)f->dest)
                fprintf(out, " [default %s]", *(const char **)f->dest);
            break;
        case PS_FLAG_BOOL:
            break;
        }
        fputc('\n', out);
    }
    fprintf(out, "  %-26s %s\n", "--help", "show this help and exit");
}
