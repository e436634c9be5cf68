/* Option parsing for every shardps binary (see flags.h): one table per
 * program, four layers (default < cluster file < environment < argv), and the
 * cluster file's sections. The file is read with inih; this module adds what
 * inih leaves to its caller: line numbers, unknown sections and keys refused
 * by file:line, a key given twice refused, and long lists continued on
 * indented lines. */
#include "flags.h"

#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "ps_error.h"

static const char *const ps__program_sections[] = {"server", "worker"};

/* The number that word stands for in f's words ("all=0|auto=-1"); returns 1
 * when found. */
static int ps__word_value(const ps_flag *f, const char *word, double *out)
{
    size_t n = strlen(word);

    for (const char *p = f->words; p != NULL && *p;) {
        const char *eq = strchr(p, '='), *bar = strchr(p, '|');
        if (eq == NULL)
            return 0;
        if ((size_t)(eq - p) == n && strncmp(p, word, n) == 0) {
            *out = strtod(eq + 1, NULL);
            return 1;
        }
        p = bar ? bar + 1 : NULL;
    }
    return 0;
}

const char *ps_flags_value_word(const char *words, double v, char *buf, size_t len)
{
    for (const char *p = words; p != NULL && *p;) {
        const char *eq = strchr(p, '='), *bar = strchr(p, '|');
        if (eq == NULL)
            return NULL;
        if (strtod(eq + 1, NULL) == v) {
            snprintf(buf, len, "%.*s", (int)(eq - p), p);
            return buf;
        }
        p = bar ? bar + 1 : NULL;
    }
    return NULL;
}

/* The word that stands for value v in f's words, or NULL. */
static const char *ps__value_word(const ps_flag *f, double v, char *buf, size_t len)
{
    return ps_flags_value_word(f->words, v, buf, len);
}

/* " or all, auto": the words of f for a range in messages and --help. */
static const char *ps__words_text(const ps_flag *f, char *buf, size_t len)
{
    size_t used = 0;

    buf[0] = '\0';
    for (const char *p = f->words; p != NULL && *p && used < len;) {
        const char *eq = strchr(p, '='), *bar = strchr(p, '|');
        if (eq == NULL)
            break;
        used += (size_t)snprintf(buf + used, len - used, "%s%.*s", used ? ", " : " or ",
                                 (int)(eq - p), p);
        p = bar ? bar + 1 : NULL;
    }
    return buf;
}

/* origin is how the user gave the value: "--lr", "SHARDPS_LR", "c.ini:3: lr". */
static int ps__flag_error(const char *prog, const char *origin, const char *fmt, const char *value,
                          const ps_flag *f)
{
    fprintf(stderr, "%s: %s: ", prog, origin);
    fprintf(stderr, fmt, value);
    if (f && (f->type == PS_FLAG_INT || f->type == PS_FLAG_DOUBLE)) {
        char words[128];
        fprintf(stderr, " (accepted: %.15g to %.15g%s)", f->min, f->max,
                ps__words_text(f, words, sizeof(words)));
    } else if (f && f->type == PS_FLAG_CHOICE)
        fprintf(stderr, " (accepted: %s)", f->choices);
    fprintf(stderr, "; see %s --help\n", prog);
    return -PS_EUSAGE;
}

/* Whether v is one of the '|'-separated words of list (NULL: none is). */
static int ps__in_list(const char *list, const char *v)
{
    size_t n = strlen(v);
    const char *p = list;

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
    char *end, word[64];
    double d;

    switch (f->type) {
    case PS_FLAG_BOOL:
        if (value != NULL && ps__word_value(f, value, &d)) {
            *(int *)f->dest = (int)d;
            return 0;
        }
        if (value == NULL || strcmp(value, "1") == 0 || strcmp(value, "true") == 0) {
            *(int *)f->dest = 1;
            return 0;
        }
        if (strcmp(value, "0") == 0 || strcmp(value, "false") == 0) {
            *(int *)f->dest = 0;
            return 0;
        }
        return ps__flag_error(prog, origin,
                              f->words
                                  ? "'%s' is not a boolean (1/0/true/false) nor one of its words"
                                  : "'%s' is not a boolean (1/0/true/false)",
                              value, NULL);
    case PS_FLAG_STRING:
        *(const char **)f->dest = value;
        return 0;
    case PS_FLAG_CHOICE:
        if (!ps__in_list(f->choices, value))
            return ps__flag_error(prog, origin, "'%s' is not a known value", value, f);
        *(const char **)f->dest = value;
        return 0;
    case PS_FLAG_INT:
    case PS_FLAG_DOUBLE:
        if (ps__word_value(f, value, &d)) {
            if (f->type == PS_FLAG_INT)
                *(int *)f->dest = (int)d;
            else
                *(double *)f->dest = d;
            return 0;
        }
        errno = 0;
        d = f->type == PS_FLAG_INT ? (double)strtoll(value, &end, 10) : strtod(value, &end);
        if (errno || end == value || *end != '\0' || !isfinite(d))
            return ps__flag_error(prog, origin,
                                  f->type == PS_FLAG_INT ? "'%s' is not an integer"
                                                         : "'%s' is not a number",
                                  value, f);
        /* A word's number is accepted as itself too ("-1" for "auto"). */
        if ((d < f->min || d > f->max) && ps__value_word(f, d, word, sizeof(word)) == NULL)
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

static int ps__find(const ps_flags_ctx *ctx, const char *name)
{
    for (int i = 0; i < ctx->n; i++)
        if (strcmp(ctx->flags[i].name, name) == 0)
            return i;
    return -1;
}

/* Options that never come from the file: those that differ between the
 * processes sharing it, and the ones that steer the parse itself. */
static int ps__is_per_process(const ps_flags_ctx *ctx, const char *name)
{
    return ps__in_list(ctx->per_process, name) || strcmp(name, "cluster") == 0 ||
           strcmp(name, "print-config") == 0;
}

/* ---- The cluster file ---------------------------------------------------- */

typedef struct {
    char *section, *key, *value; /* key normalised: lower case, '-' for '_' */
    int line;
} ps__entry;

/* inih's state plus what it does not track: the line being parsed, whether
 * it was indented (a continuation), and the first error found. */
typedef struct {
    FILE *f;
    int line, indented;
    int error_line;
    char error[160];
    ps__entry *entries;
    int n_entries, cap_entries;
} ps__file_state;

static char *ps__file_reader(char *str, int num, void *arg)
{
    ps__file_state *st = arg;
    size_t len;

    if (st->error_line || fgets(str, num, st->f) == NULL)
        return NULL;
    st->line++;
    st->indented = str[0] == ' ' || str[0] == '\t';
    len = strlen(str);
    if (len > 0 && str[len - 1] != '\n' && !feof(st->f)) {
        /* inih would parse the rest as a line of its own: refuse instead. */
        st->error_line = st->line;
        snprintf(st->error, sizeof(st->error),
                 "line longer than %d characters; continue a long list on indented lines", num - 2);
        return NULL;
    }
    return str;
}

static int ps__file_handler(void *arg, const char *section, const char *name, const char *value)
{
    ps__file_state *st = arg;
    ps__entry *last = st->n_entries ? &st->entries[st->n_entries - 1] : NULL;
    ps__entry *e;
    char *key;

    if (st->error_line)
        return 0;
    key = strdup(name);
    if (key == NULL)
        goto nomem;
    for (char *p = key; *p; p++)
        *p = *p == '_' ? '-' : (char)tolower((unsigned char)*p);
    /* inih hands an indented line to the previous key again: join the pieces
     * of a long list with commas. An indented "key = value" is most likely
     * meant as a key of its own, which inih cannot tell, so say so. */
    if (st->indented && last && strcmp(last->key, key) == 0 &&
        strcmp(last->section, section) == 0) {
        size_t have = strlen(last->value), size = have + strlen(value) + 2;
        char *joined;

        free(key);
        if (strchr(value, '=') != NULL) {
            st->error_line = st->line;
            snprintf(st->error, sizeof(st->error),
                     "this indented line continues the value of '%s'; start each key at the "
                     "beginning of its line",
                     last->key);
            return 0;
        }
        joined = malloc(size);
        if (joined == NULL)
            goto nomem;
        snprintf(joined, size, "%s%s%s", last->value,
                 have > 0 && last->value[have - 1] != ',' ? "," : "", value);
        free(last->value);
        last->value = joined;
        return 1;
    }
    if (st->n_entries == st->cap_entries) {
        int cap = st->cap_entries ? 2 * st->cap_entries : 16;
        ps__entry *grown = realloc(st->entries, (size_t)cap * sizeof(*grown));
        if (grown == NULL) {
            free(key);
            goto nomem;
        }
        st->entries = grown;
        st->cap_entries = cap;
    }
    e = &st->entries[st->n_entries];
    e->key = key;
    e->section = strdup(section);
    e->value = strdup(value);
    e->line = st->line;
    st->n_entries++;
    if (e->section == NULL || e->value == NULL)
        goto nomem;
    return 1;
nomem:
    st->error_line = st->line;
    snprintf(st->error, sizeof(st->error), "out of memory");
    return 0;
}

static void ps__file_state_free(ps__file_state *st)
{
    for (int i = 0; i < st->n_entries; i++) {
        free(st->entries[i].section);
        free(st->entries[i].key);
        free(st->entries[i].value);
    }
    free(st->entries);
}

/* The section every process reads key from, or NULL when it is the
 * program's own. */
static const char *ps__shared_section_of(const ps_flags_ctx *ctx, const char *key)
{
    int i = ps__find(ctx, key);

    return i >= 0 ? ctx->flags[i].section : NULL;
}

/* Whether some option of the table lives in [section] for every process. */
static int ps__is_shared_section(const ps_flags_ctx *ctx, const char *section)
{
    for (int i = 0; i < ctx->n; i++)
        if (ctx->flags[i].section && strcmp(ctx->flags[i].section, section) == 0)
            return 1;
    return 0;
}

static int ps__file_error(const ps_flags_ctx *ctx, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* One line "prog: file:line: what", as every other usage error. */
static int ps__file_error(const ps_flags_ctx *ctx, int line, const char *fmt, ...)
{
    va_list ap;

    fprintf(stderr, "%s: %s:%d: ", ctx->prog, ctx->file, line);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return -PS_EUSAGE;
}

/* "servers workers mode staleness": the keys of a shared section, for errors. */
static void ps__section_keys(const ps_flag *flags, int n, const char *section, char *buf,
                             size_t len)
{
    size_t used = 0;

    buf[0] = '\0';
    for (int i = 0; i < n && used < len; i++)
        if (flags[i].section && strcmp(flags[i].section, section) == 0)
            used +=
                (size_t)snprintf(buf + used, len - used, "%s%s", used ? " " : "", flags[i].name);
}

/* Checks one entry against the sections and applies it when it is ours. */
static int ps__apply_entry(ps_flags_ctx *ctx, ps__entry *e, const ps__entry *earlier)
{
    char origin[256], known[512];
    const char *shared = ps__shared_section_of(ctx, e->key);
    int is_shared_section = ps__is_shared_section(ctx, e->section), own, i, rc;

    own = strcmp(e->section, ctx->section) == 0;
    if (!is_shared_section && !own) {
        int other = 0;
        for (size_t k = 0; k < sizeof(ps__program_sections) / sizeof(ps__program_sections[0]); k++)
            if (strcmp(ps__program_sections[k], e->section) == 0)
                other = 1;
        if (other)
            return 0; /* another program's section: it checks it */
        if (*e->section == '\0')
            return ps__file_error(ctx, e->line,
                                  "'%s' comes before any [section]; the sections are [cluster] "
                                  "[model] [optimizer] [server] [worker]",
                                  e->key);
        return ps__file_error(ctx, e->line,
                              "unknown section [%s] (key '%s'); the sections are [cluster] "
                              "[model] [optimizer] [server] [worker]",
                              e->section, e->key);
    }
    if (earlier)
        return ps__file_error(ctx, e->line, "'%s' is given twice in [%s]", e->key, e->section);
    if (shared && strcmp(shared, e->section) != 0) {
        return ps__file_error(ctx, e->line, "'%s' belongs in [%s], which every process reads",
                              e->key, shared);
    }
    i = ps__find(ctx, e->key);
    if (is_shared_section && shared == NULL && i < 0 && ps__in_list(ctx->others, e->key))
        return 0; /* another program's key: it checks it */
    if (is_shared_section && shared == NULL) {
        ps__section_keys(ctx->flags, ctx->n, e->section, known, sizeof(known));
        if (i >= 0 && !ps__is_per_process(ctx, e->key))
            return ps__file_error(ctx, e->line,
                                  "'%s' is not shared by every process; put it in [%s] (in "
                                  "[%s]: %s)",
                                  e->key, ctx->section, e->section, known);
        return ps__file_error(ctx, e->line, "unknown key '%s' in [%s] (known there: %s)", e->key,
                              e->section, known);
    }
    if (i >= 0 && ps__is_per_process(ctx, e->key)) {
        char env[96];
        ps__env_name(e->key, env, sizeof(env));
        return ps__file_error(ctx, e->line,
                              "'%s' differs between the processes sharing this file; give it "
                              "as --%s or %s instead",
                              e->key, e->key, env);
    }
    if (i < 0) {
        return ps__file_error(ctx, e->line,
                              "unknown key '%s' in [%s]; see %s --help for the options", e->key,
                              e->section, ctx->prog);
    }
    if (*e->value == '\0')
        return ps__file_error(ctx, e->line, "'%s' has no value", e->key);
    /* "a:1, b:2" is how people write lists in INI files; the programs split
     * on bare commas. */
    for (char *r = e->value, *w = e->value;; r++) {
        if ((*r == ' ' || *r == '\t') && (w > e->value && w[-1] == ','))
            continue;
        if (*r == ',')
            while (w > e->value && (w[-1] == ' ' || w[-1] == '\t'))
                w--;
        if ((*w++ = *r) == '\0')
            break;
    }
    /* The variable may point at the value: the context keeps it from now on. */
    ctx->strings[ctx->n_strings++] = e->value;
    snprintf(origin, sizeof(origin), "%s:%d: %s", ctx->file, e->line, e->key);
    rc = ps__flag_set(&ctx->flags[i], e->value, ctx->prog, origin);
    e->value = NULL;
    if (rc < 0)
        return rc;
    ctx->origin[i] = PS_FLAG_FROM_FILE;
    ctx->line[i] = e->line;
    return 0;
}

static int ps__load_file(ps_flags_ctx *ctx)
{
    ps__file_state st;
    int rc;

    memset(&st, 0, sizeof(st));
    st.f = fopen(ctx->file, "r");
    if (st.f == NULL) {
        fprintf(stderr, "%s: cannot read the cluster file %s: %s\n", ctx->prog, ctx->file,
                strerror(errno));
        return -PS_EUSAGE;
    }
    rc = ini_parse_stream(ps__file_reader, &st, ps__file_handler, &st);
    if (st.error_line) {
        rc = ps__file_error(ctx, st.error_line, "%s", st.error);
        goto out;
    }
    if (rc != 0) {
        rc = ps__file_error(ctx, rc, "expected 'key = value', '[section]' or a comment");
        goto out;
    }
    if (ferror(st.f)) {
        fprintf(stderr, "%s: cannot read the cluster file %s: %s\n", ctx->prog, ctx->file,
                strerror(EIO));
        rc = -PS_EUSAGE;
        goto out;
    }
    rc = -PS_EUSAGE;
    ctx->strings = calloc((size_t)st.n_entries + 1, sizeof(char *));
    if (ctx->strings == NULL) {
        fprintf(stderr, "%s: out of memory\n", ctx->prog);
        goto out;
    }
    rc = 0;
    for (int k = 0; k < st.n_entries && rc == 0; k++) {
        const ps__entry *earlier = NULL;
        for (int j = 0; j < k && earlier == NULL; j++)
            if (strcmp(st.entries[j].key, st.entries[k].key) == 0 &&
                strcmp(st.entries[j].section, st.entries[k].section) == 0)
                earlier = &st.entries[j];
        rc = ps__apply_entry(ctx, &st.entries[k], earlier);
    }
out:
    fclose(st.f);
    ps__file_state_free(&st);
    return rc;
}

/* ---- The layers ---------------------------------------------------------- */

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
            if (a + 1 < argc && ps__word_value(&ctx->flags[f], argv[a + 1], &d))
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
    int n_args, rc, cluster = ctx->section ? ps__find(ctx, "cluster") : -1;

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
            rc = ps__load_file(ctx);
            if (rc < 0)
                goto out;
        }
    }
    for (int i = 0; i < ctx->n; i++) {
        const char *v;
        ps__env_name(ctx->flags[i].name, origin, sizeof(origin));
        v = getenv(origin);
        if (v && *v) {
            rc = ps__flag_set(&ctx->flags[i], v, ctx->prog, origin);
            if (rc < 0)
                goto out;
            ctx->origin[i] = PS_FLAG_FROM_ENV;
        }
    }
    for (int k = 0; k < n_args; k++) {
        const ps_flag *f = &ctx->flags[args[k].flag];
        snprintf(origin, sizeof(origin), "--%s", f->name);
        rc = ps__flag_set(f, args[k].value, ctx->prog, origin);
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
    int i = ps__find(ctx, name);

    return i >= 0 && ctx->origin ? ctx->origin[i] : PS_FLAG_FROM_DEFAULT;
}

int ps_flags_set_derived(ps_flags_ctx *ctx, const char *name, const char *source)
{
    int i = ps__find(ctx, name);
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

/* The value of option f as text; buf backs numbers. */
static const char *ps__value_text(const ps_flag *f, char *buf, size_t len)
{
    switch (f->type) {
    case PS_FLAG_INT:
        if (ps__value_word(f, *(int *)f->dest, buf, len) == NULL)
            snprintf(buf, len, "%d", *(int *)f->dest);
        return buf;
    case PS_FLAG_DOUBLE:
        if (ps__value_word(f, *(double *)f->dest, buf, len) == NULL)
            snprintf(buf, len, "%.15g", *(double *)f->dest);
        return buf;
    case PS_FLAG_BOOL:
        if (ps__value_word(f, *(int *)f->dest, buf, len) != NULL)
            return buf;
        return *(int *)f->dest ? "true" : "false";
    case PS_FLAG_STRING:
    case PS_FLAG_CHOICE:
        break;
    }
    return *(const char **)f->dest ? *(const char **)f->dest : "";
}

const char *ps_flags_describe_origin(const ps_flags_ctx *ctx, const char *name, char *buf,
                                     size_t len)
{
    int i = ps__find(ctx, name);

    switch (i >= 0 && ctx->origin ? ctx->origin[i] : PS_FLAG_FROM_DEFAULT) {
    case PS_FLAG_FROM_DEFAULT:
        snprintf(buf, len, "the default");
        break;
    case PS_FLAG_FROM_FILE:
        snprintf(buf, len, "%s:%d", ctx->file, ctx->line[i]);
        break;
    case PS_FLAG_FROM_ENV:
        ps__env_name(name, buf, len);
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

void ps_flags_print_config(const ps_flags_ctx *ctx, FILE *out)
{
    fprintf(out,
            "# %s: effective settings (flag > SHARDPS_* environment > cluster file %s > "
            "default)\n",
            ctx->prog, ctx->file ? ctx->file : "(none)");
    for (int i = 0; i < ctx->n; i++) {
        const ps_flag *f = &ctx->flags[i];
        char buf[64], from[PATH_MAX + 32];

        if (strcmp(f->name, "print-config") == 0)
            continue;
        fprintf(out, "%-20s = %-24s # %s%s\n", f->name, ps__value_text(f, buf, sizeof(buf)),
                ctx->origin[i] == PS_FLAG_FROM_DERIVED ? "derived from " : "",
                ps_flags_describe_origin(ctx, f->name, from, sizeof(from)));
    }
}

int ps_flags_parse(const ps_flag *flags, int n, int argc, char **argv, const char *prog,
                   const char *summary)
{
    ps_flags_ctx ctx = {.flags = flags, .n = n, .prog = prog, .summary = summary};
    int rc = ps_flags_load(&ctx, argc, argv);

    ps_flags_release(&ctx);
    return rc;
}

void ps_flags_usage(FILE *out, const ps_flag *flags, int n, const char *prog, const char *summary)
{
    int has_file = 0;

    for (int i = 0; i < n; i++)
        has_file |= strcmp(flags[i].name, "cluster") == 0;
    fprintf(out, "Usage: %s [options]\n%s\n\nOptions (each also read from SHARDPS_<NAME>%s):\n",
            prog, summary,
            has_file ? ", and from the --cluster file; a flag wins over the environment, which "
                       "wins over the file"
                     : "; a flag wins");
    for (int i = 0; i < n; i++) {
        const ps_flag *f = &flags[i];
        char left[64], words[128], value[64];

        if (f->type == PS_FLAG_BOOL && f->words)
            snprintf(left, sizeof(left), "--%s [%.*s]", f->name, (int)strcspn(f->words, "="),
                     f->words);
        else if (f->type == PS_FLAG_BOOL)
            snprintf(left, sizeof(left), "--%s", f->name);
        else
            snprintf(left, sizeof(left), "--%s %s", f->name, f->metavar ? f->metavar : "VALUE");
        fprintf(out, "  %-26s %s", left, f->help);
        switch (f->type) {
        case PS_FLAG_INT:
        case PS_FLAG_DOUBLE:
            fprintf(out, " [%s %.15g..%.15g%s, default %s]",
                    f->type == PS_FLAG_INT ? "integer" : "number", f->min, f->max,
                    ps__words_text(f, words, sizeof(words)),
                    ps__value_text(f, value, sizeof(value)));
            break;
        case PS_FLAG_STRING:
            if (*(const char **)f->dest)
                fprintf(out, " [default %s]", *(const char **)f->dest);
            break;
        case PS_FLAG_CHOICE:
            fprintf(out, " [%s, default %s]", f->choices,
                    *(const char **)f->dest ? *(const char **)f->dest : "none");
            break;
        case PS_FLAG_BOOL:
            fprintf(out, " [switch%s, default %s]", ps__words_text(f, words, sizeof(words)),
                    ps__value_word(f, *(int *)f->dest, value, sizeof(value))
                        ? value
                        : (*(int *)f->dest ? "on" : "off"));
            break;
        }
        fputc('\n', out);
    }
    fprintf(out, "  %-26s %s\n", "--help", "show this help and exit");
    if (!has_file)
        return;
    fprintf(out, "\nCluster file (INI, shared by every server and worker of a job):\n");
    for (int i = 0; i < n; i++) {
        int first = flags[i].section != NULL;
        for (int j = 0; j < i && first; j++)
            first = flags[j].section == NULL || strcmp(flags[j].section, flags[i].section) != 0;
        if (first) {
            char keys[512];
            ps__section_keys(flags, n, flags[i].section, keys, sizeof(keys));
            fprintf(out, "  [%s] %s\n", flags[i].section, keys);
        }
    }
    fprintf(out, "  [server], [worker]: any other option of that program, by its name\n"
                 "  (\"heartbeat-timeout = 5\"); each program skips the other's section.\n");
}
