/* The Prometheus text format, read line by line. Grammar (exposition format
 * 0.0.4): a line is blank, a comment starting with '#', or
 *   name [ '{' key '="' value '"' { ',' key '="' value '"' } [','] '}' ] value [ timestamp ]
 * with names matching [a-zA-Z_:][a-zA-Z0-9_:]* (labels without ':'), values
 * escaped with \\ \" \n, and a Go-style float (NaN, +Inf, -Inf allowed). */
#include "prom_text.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
    const char *p, *end;
} ps__cursor;

static int ps__name_char(char c, int first, int allow_colon)
{
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || (allow_colon && c == ':'))
        return 1;
    return !first && c >= '0' && c <= '9';
}

/* Reads a name into buf; returns its length, -EINVAL if none, -E2BIG. */
static int ps__name(ps__cursor *c, char *buf, size_t cap, int allow_colon)
{
    size_t n = 0;

    while (c->p < c->end && ps__name_char(*c->p, n == 0, allow_colon)) {
        if (n + 1 >= cap)
            return -E2BIG;
        buf[n++] = *c->p++;
    }
    buf[n] = '\0';
    return n > 0 ? (int)n : -EINVAL;
}

static void ps__spaces(ps__cursor *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t'))
        c->p++;
}

static int ps__prom_label_value(ps__cursor *c, char *buf, size_t cap)
{
    size_t n = 0;

    if (c->p >= c->end || *c->p++ != '"')
        return -EINVAL;
    while (c->p < c->end && *c->p != '"') {
        char ch = *c->p++;
        if (ch == '\\') {
            if (c->p >= c->end)
                return -EINVAL;
            ch = *c->p++;
            if (ch == 'n')
                ch = '\n';
            else if (ch != '\\' && ch != '"')
                return -EINVAL;
        }
        if (n + 1 >= cap)
            return -E2BIG;
        buf[n++] = ch;
    }
    if (c->p >= c->end)
        return -EINVAL;
    c->p++;
    buf[n] = '\0';
    return 0;
}

static int ps__labels(ps__cursor *c, ps_prom_sample *out)
{
    int rc;

    c->p++; /* '{' */
    for (;;) {
        ps__spaces(c);
        if (c->p < c->end && *c->p == '}')
            break;
        if (out->n_labels == PS_PROM_MAX_LABELS)
            return -E2BIG;
        rc = ps__name(c, out->labels[out->n_labels].key, sizeof(out->labels[0].key), 0);
        if (rc < 0)
            return rc;
        ps__spaces(c);
        if (c->p >= c->end || *c->p++ != '=')
            return -EINVAL;
        ps__spaces(c);
        rc =
            ps__prom_label_value(c, out->labels[out->n_labels].value, sizeof(out->labels[0].value));
        if (rc < 0)
            return rc;
        out->n_labels++;
        ps__spaces(c);
        if (c->p < c->end && *c->p == ',') {
            c->p++;
            continue;
        }
        if (c->p >= c->end || *c->p != '}')
            return -EINVAL;
        break;
    }
    c->p++; /* '}' */
    return 0;
}

/* A whole token that strtod accepts, or one of the format's spellings of
 * infinity; strtod alone would also take hex floats and "infinity". */
static int ps__number(const char *tok, size_t n, double *out)
{
    char buf[64], *end;

    if (n == 0 || n >= sizeof(buf))
        return -EINVAL;
    memcpy(buf, tok, n);
    buf[n] = '\0';
    if (strcmp(buf, "+Inf") == 0 || strcmp(buf, "Inf") == 0) {
        *out = INFINITY;
        return 0;
    }
    if (strcmp(buf, "-Inf") == 0) {
        *out = -INFINITY;
        return 0;
    }
    if (strcmp(buf, "NaN") == 0) {
        *out = NAN;
        return 0;
    }
    for (size_t i = 0; i < n; i++)
        if (strchr("0123456789+-.eE", buf[i]) == NULL)
            return -EINVAL;
    *out = strtod(buf, &end);
    return *end == '\0' ? 0 : -EINVAL;
}

static int ps__comment(ps__cursor *c)
{
    static const char *const types[] = {"counter", "gauge", "histogram", "summary", "untyped"};
    char word[16], name[128];
    size_t n = 0;
    int rc;

    c->p++; /* '#' */
    ps__spaces(c);
    while (c->p < c->end && n + 1 < sizeof(word) && *c->p != ' ' && *c->p != '\t')
        word[n++] = *c->p++;
    word[n] = '\0';
    if (strcmp(word, "HELP") != 0 && strcmp(word, "TYPE") != 0)
        return 0; /* a free comment */
    ps__spaces(c);
    rc = ps__name(c, name, sizeof(name), 1);
    if (rc < 0)
        return rc;
    if (strcmp(word, "HELP") == 0)
        return 0;
    ps__spaces(c);
    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
        size_t tl = strlen(types[i]);
        if ((size_t)(c->end - c->p) >= tl && memcmp(c->p, types[i], tl) == 0) {
            c->p += tl;
            ps__spaces(c);
            return c->p == c->end ? 0 : -EINVAL;
        }
    }
    return -EINVAL;
}

int ps_prom_parse_line(const char *line, size_t len, ps_prom_sample *out)
{
    ps__cursor c = {line, line + len};
    const char *tok;
    double ts;
    int rc;

    ps__spaces(&c);
    if (c.p == c.end)
        return 0;
    if (*c.p == '#')
        return ps__comment(&c);
    memset(out, 0, sizeof(*out));
    rc = ps__name(&c, out->name, sizeof(out->name), 1);
    if (rc < 0)
        return rc;
    if (c.p < c.end && *c.p == '{' && (rc = ps__labels(&c, out)) < 0)
        return rc;
    if (c.p >= c.end || (*c.p != ' ' && *c.p != '\t'))
        return -EINVAL;
    ps__spaces(&c);
    tok = c.p;
    while (c.p < c.end && *c.p != ' ' && *c.p != '\t')
        c.p++;
    if (ps__number(tok, (size_t)(c.p - tok), &out->value) < 0)
        return -EINVAL;
    ps__spaces(&c);
    if (c.p == c.end)
        return 1;
    /* An optional timestamp: integer milliseconds. */
    tok = c.p;
    while (c.p < c.end && *c.p != ' ' && *c.p != '\t')
        c.p++;
    if (ps__number(tok, (size_t)(c.p - tok), &ts) < 0 || ts != floor(ts))
        return -EINVAL;
    ps__spaces(&c);
    return c.p == c.end ? 1 : -EINVAL;
}

const char *ps_prom_label(const ps_prom_sample *s, const char *key)
{
    for (int i = 0; i < s->n_labels; i++)
        if (strcmp(s->labels[i].key, key) == 0)
            return s->labels[i].value;
    return NULL;
}

int ps_prom_parse_text(const char *text, size_t len, void (*fn)(const ps_prom_sample *s, void *arg),
                       void *arg, int *bad_line)
{
    const char *p = text, *end = text + len;
    ps_prom_sample s;
    int line = 0, rc;

    while (p < end) {
        const char *nl = memchr(p, '\n', (size_t)(end - p));
        const char *stop = nl ? nl : end;
        line++;
        rc = ps_prom_parse_line(p, (size_t)(stop - p), &s);
        if (rc < 0) {
            *bad_line = line;
            return rc;
        }
        if (rc == 1 && fn != NULL)
            fn(&s, arg);
        p = nl ? nl + 1 : end;
    }
    return 0;
}
