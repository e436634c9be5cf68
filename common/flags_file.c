/* The cluster file (see flags_file.h): inih reads the lines, this module
 * keeps them with their line numbers, joins continued lists, and checks
 * every entry against the sections and the table before any is applied
 * through ps_flag_set. */
#include "flags_file.h"

#include <ctype.h>
#include <errno.h>
#include <ini.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "flag_table.h"
#include "ps_error.h"

/* The programs that read a section of their own: each skips the other's,
 * so one file serves the whole job. */
static const char *const ps__program_sections[] = {"server", "worker"};

/* Options that never come from the file: those that differ between the
 * processes sharing it, and the ones that steer the parse itself. */
static int ps__is_per_process(const ps_flags_ctx *ctx, const char *name)
{
    return ps_flag_in_list(ctx->per_process, name) || strcmp(name, "cluster") == 0 ||
           strcmp(name, "print-config") == 0;
}

typedef struct {
    char *section, *key, *value; /* key normalised: lower case, '-' for '_' */
    int line;
} ps__file_entry;

/* inih's state plus what it does not track: the line being parsed, whether
 * it was indented (a continuation), and the first error found. */
typedef struct {
    FILE *f;
    int line, indented;
    int error_line;
    char error[160];
    ps__file_entry *entries;
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
    ps__file_entry *last = st->n_entries ? &st->entries[st->n_entries - 1] : NULL;
    ps__file_entry *e;
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
        ps__file_entry *grown = realloc(st->entries, (size_t)cap * sizeof(*grown));
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
    int i = ps_flag_find(ctx->flags, ctx->n, key);

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

/* Checks one entry against the sections and applies it when it is ours. */
static int ps__apply_entry(ps_flags_ctx *ctx, ps__file_entry *e, const ps__file_entry *earlier)
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
    i = ps_flag_find(ctx->flags, ctx->n, e->key);
    if (is_shared_section && shared == NULL && i < 0 && ps_flag_in_list(ctx->others, e->key))
        return 0; /* another program's key: it checks it */
    if (is_shared_section && shared == NULL) {
        ps_flag_section_keys(ctx->flags, ctx->n, e->section, known, sizeof(known));
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
        ps_flag_env_name(e->key, env, sizeof(env));
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
    rc = ps_flag_set(&ctx->flags[i], e->value, ctx->prog, origin);
    e->value = NULL;
    if (rc < 0)
        return rc;
    ctx->origin[i] = PS_FLAG_FROM_FILE;
    ctx->line[i] = e->line;
    return 0;
}

int ps_flags_file_load(ps_flags_ctx *ctx)
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
        const ps__file_entry *earlier = NULL;
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
