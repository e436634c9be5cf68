/* One option table entry's value (see flag_table.h): the words that stand
 * for numbers, bounds, and the one-line error that names the option, the
 * problem and the accepted range. Every layer of flags.c and the cluster
 * file (flags_file.c) set values through ps_flag_set. */
#include "flag_table.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps_error.h"

/* The number that word stands for in f's words ("all=0|auto=-1"); returns 1
 * when found. */
int ps_flag_word_value(const ps_flag *f, const char *word, double *out)
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

/* " or all, auto": the words of f for a range in messages and --help. */
const char *ps_flag_words_text(const ps_flag *f, char *buf, size_t len)
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

/* Writes "origin: <fmt with value> (accepted: ...)" into err; origin is how
 * the user gave the value: "--lr", "SHARDPS_LR", "c.ini:3: lr". */
static int ps__flag_error(char *err, size_t len, const char *origin, const char *fmt,
                          const char *value, const ps_flag *f)
{
    char what[256], words[128];

    snprintf(what, sizeof(what), fmt, value);
    if (f && (f->type == PS_FLAG_INT || f->type == PS_FLAG_DOUBLE))
        snprintf(err, len, "%s: %s (accepted: %.15g to %.15g%s)", origin, what, f->min, f->max,
                 ps_flag_words_text(f, words, sizeof(words)));
    else if (f && f->type == PS_FLAG_CHOICE)
        snprintf(err, len, "%s: %s (accepted: %s)", origin, what, f->choices);
    else
        snprintf(err, len, "%s: %s", origin, what);
    return -PS_EUSAGE;
}

/* Whether v is one of the '|'-separated words of list (NULL: none is). */
int ps_flag_in_list(const char *list, const char *v)
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

int ps_flag_check_set(const ps_flag *f, const char *value, const char *origin, char *err,
                      size_t len)
{
    char *end, word[64];
    double d;

    switch (f->type) {
    case PS_FLAG_BOOL:
        if (value != NULL && ps_flag_word_value(f, value, &d)) {
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
        return ps__flag_error(err, len, origin,
                              f->words
                                  ? "'%s' is not a boolean (1/0/true/false) nor one of its words"
                                  : "'%s' is not a boolean (1/0/true/false)",
                              value, NULL);
    case PS_FLAG_STRING:
        *(const char **)f->dest = value;
        return 0;
    case PS_FLAG_CHOICE:
        if (!ps_flag_in_list(f->choices, value))
            return ps__flag_error(err, len, origin, "'%s' is not a known value", value, f);
        *(const char **)f->dest = value;
        return 0;
    case PS_FLAG_INT:
    case PS_FLAG_DOUBLE:
        if (ps_flag_word_value(f, value, &d)) {
            if (f->type == PS_FLAG_INT)
                *(int *)f->dest = (int)d;
            else
                *(double *)f->dest = d;
            return 0;
        }
        errno = 0;
        d = f->type == PS_FLAG_INT ? (double)strtoll(value, &end, 10) : strtod(value, &end);
        if (errno || end == value || *end != '\0' || !isfinite(d))
            return ps__flag_error(err, len, origin,
                                  f->type == PS_FLAG_INT ? "'%s' is not an integer"
                                                         : "'%s' is not a number",
                                  value, f);
        /* A word's number is accepted as itself too ("-1" for "auto"). */
        if ((d < f->min || d > f->max) &&
            ps_flags_value_word(f->words, d, word, sizeof(word)) == NULL)
            return ps__flag_error(err, len, origin, "'%s' is out of range", value, f);
        if (f->type == PS_FLAG_INT)
            *(int *)f->dest = (int)d;
        else
            *(double *)f->dest = d;
        return 0;
    }
    return -PS_EUSAGE;
}

int ps_flag_set(const ps_flag *f, const char *value, const char *prog, const char *origin)
{
    char err[512];
    int rc = ps_flag_check_set(f, value, origin, err, sizeof(err));

    if (rc < 0)
        fprintf(stderr, "%s: %s; see %s --help\n", prog, err, prog);
    return rc;
}

/* "staleness" -> "SHARDPS_STALENESS", "chunk-bytes" -> "SHARDPS_CHUNK_BYTES". */
void ps_flag_env_name(const char *name, char *buf, size_t len)
{
    size_t i = (size_t)snprintf(buf, len, "SHARDPS_");
    for (; *name && i + 1 < len; name++)
        buf[i++] = *name == '-' ? '_' : (char)toupper((unsigned char)*name);
    buf[i] = '\0';
}

int ps_flag_find(const ps_flag *flags, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(flags[i].name, name) == 0)
            return i;
    return -ENOENT;
}

/* "servers workers mode staleness": the keys of a shared section, for errors. */
void ps_flag_section_keys(const ps_flag *flags, int n, const char *section, char *buf, size_t len)
{
    size_t used = 0;

    buf[0] = '\0';
    for (int i = 0; i < n && used < len; i++)
        if (flags[i].section && strcmp(flags[i].section, section) == 0)
            used +=
                (size_t)snprintf(buf + used, len - used, "%s%s", used ? " " : "", flags[i].name);
}

/* The value of option f as text; buf backs numbers. */
const char *ps_flag_value_text(const ps_flag *f, char *buf, size_t len)
{
    switch (f->type) {
    case PS_FLAG_INT:
        if (ps_flags_value_word(f->words, *(int *)f->dest, buf, len) == NULL)
            snprintf(buf, len, "%d", *(int *)f->dest);
        return buf;
    case PS_FLAG_DOUBLE:
        if (ps_flags_value_word(f->words, *(double *)f->dest, buf, len) == NULL)
            snprintf(buf, len, "%.15g", *(double *)f->dest);
        return buf;
    case PS_FLAG_BOOL:
        if (ps_flags_value_word(f->words, *(int *)f->dest, buf, len) != NULL)
            return buf;
        return *(int *)f->dest ? "true" : "false";
    case PS_FLAG_STRING:
    case PS_FLAG_CHOICE:
        break;
    }
    return *(const char **)f->dest ? *(const char **)f->dest : "";
}
