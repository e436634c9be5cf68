/* The worker -> launcher report lines (see report.h): one table of fields
 * per kind drives both the writer and the parser. */
#include "report.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "ps_error.h"

typedef enum { PS__INT, PS__U64, PS__NUM, PS__BOOL } ps__type;

typedef struct {
    const char *name;
    ps__type type;
    size_t off; /* in ps_report */
} ps__field;

#define PS__F(kind, type_struct, member, type)                                                     \
    {                                                                                              \
#member, type, offsetof(ps_report, u.kind) + offsetof(type_struct, member)                 \
    }

static const ps__field ps__start_fields[] = {
    PS__F(start, ps_report_start, step, PS__U64),
    PS__F(start, ps_report_start, steps, PS__U64),
    PS__F(start, ps_report_start, steps_per_epoch, PS__INT),
};

static const ps__field ps__progress_fields[] = {
    PS__F(progress, ps_report_progress, epoch, PS__INT),
    PS__F(progress, ps_report_progress, step, PS__U64),
    PS__F(progress, ps_report_progress, steps, PS__U64),
    PS__F(progress, ps_report_progress, loss, PS__NUM),
    PS__F(progress, ps_report_progress, samples_per_second, PS__NUM),
    PS__F(progress, ps_report_progress, staleness_mean, PS__NUM),
    PS__F(progress, ps_report_progress, staleness_max, PS__U64),
    PS__F(progress, ps_report_progress, dropped, PS__U64),
    PS__F(progress, ps_report_progress, rejected, PS__U64),
};

static const ps__field ps__step_fields[] = {
    PS__F(step, ps_report_step, step, PS__U64),
};

static const ps__field ps__eval_fields[] = {
    PS__F(eval, ps_report_eval, epoch, PS__INT),
    PS__F(eval, ps_report_eval, step, PS__U64),
    PS__F(eval, ps_report_eval, test_accuracy, PS__NUM),
    PS__F(eval, ps_report_eval, test_loss, PS__NUM),
    PS__F(eval, ps_report_eval, epoch_end, PS__BOOL),
};

static const ps__field ps__done_fields[] = {
    PS__F(done, ps_report_done, steps, PS__U64),
    PS__F(done, ps_report_done, samples, PS__NUM),
    PS__F(done, ps_report_done, seconds, PS__NUM),
    PS__F(done, ps_report_done, test_accuracy, PS__NUM),
    PS__F(done, ps_report_done, dropped, PS__U64),
    PS__F(done, ps_report_done, rejected, PS__U64),
    PS__F(done, ps_report_done, bytes_pushed, PS__U64),
    PS__F(done, ps_report_done, bytes_pulled, PS__U64),
};

static const ps__field ps__rank_field = {"rank", PS__INT, offsetof(ps_report, rank)};

#define PS__REPORT_N(a) (sizeof(a) / sizeof((a)[0]))

/* Indexed by ps_report_kind. */
static const struct {
    const char *event;
    const ps__field *fields;
    size_t n;
} ps__report_kinds[] = {
    {"start", ps__start_fields, PS__REPORT_N(ps__start_fields)},
    {"progress", ps__progress_fields, PS__REPORT_N(ps__progress_fields)},
    {"step", ps__step_fields, PS__REPORT_N(ps__step_fields)},
    {"eval", ps__eval_fields, PS__REPORT_N(ps__eval_fields)},
    {"done", ps__done_fields, PS__REPORT_N(ps__done_fields)},
};

/* Appends to buf[len] at *pos; keeps counting past the end so the caller
 * can tell the line did not fit. */
static void ps__put(char *buf, size_t len, size_t *pos, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void ps__put(char *buf, size_t len, size_t *pos, const char *fmt, ...)
{
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(*pos < len ? buf + *pos : NULL, *pos < len ? len - *pos : 0, fmt, ap);
    va_end(ap);
    if (n > 0)
        *pos += (size_t)n;
}

static void ps__put_field(char *buf, size_t len, size_t *pos, const ps_report *r,
                          const ps__field *f)
{
    const char *p = (const char *)r + f->off;
    double v;

    ps__put(buf, len, pos, ",\"%s\":", f->name);
    switch (f->type) {
    case PS__INT:
        ps__put(buf, len, pos, "%d", *(const int *)(const void *)p);
        break;
    case PS__U64:
        ps__put(buf, len, pos, "%" PRIu64, *(const uint64_t *)(const void *)p);
        break;
    case PS__BOOL:
        ps__put(buf, len, pos, "%s", *(const int *)(const void *)p ? "true" : "false");
        break;
    case PS__NUM:
        /* %.17g reads back as the same double; JSON has no NaN or Inf. */
        v = *(const double *)(const void *)p;
        if (isfinite(v))
            ps__put(buf, len, pos, "%.17g", v);
        else
            ps__put(buf, len, pos, "null");
        break;
    }
}

int ps_report_format(const ps_report *r, char *buf, size_t len)
{
    size_t pos = 0;

    if ((unsigned)r->kind >= PS__REPORT_N(ps__report_kinds))
        return -EINVAL;
    ps__put(buf, len, &pos, "{\"event\":\"%s\"", ps__report_kinds[r->kind].event);
    ps__put_field(buf, len, &pos, r, &ps__rank_field);
    for (size_t i = 0; i < ps__report_kinds[r->kind].n; i++)
        ps__put_field(buf, len, &pos, r, &ps__report_kinds[r->kind].fields[i]);
    ps__put(buf, len, &pos, "}\n");
    return pos < len ? (int)pos : -ENOSPC;
}

int ps_report_write(int fd, const ps_report *r)
{
    char line[PS_REPORT_MAX_LINE];
    int n = ps_report_format(r, line, sizeof(line));
    ssize_t w;

    if (n < 0)
        return n;
    /* The launcher's pipe is a socket pair: a launcher gone must give
     * EPIPE, not a SIGPIPE that kills a program which never ignored it. */
    w = send(fd, line, (size_t)n, MSG_NOSIGNAL);
    if (w < 0 && errno == ENOTSOCK)
        w = write(fd, line, (size_t)n);
    if (w < 0)
        return -errno;
    return w == n ? 0 : -EIO;
}

/* One "key":value pair of the line, pointing into it. */
typedef struct {
    const char *key, *val;
    size_t key_len, val_len;
    int is_string;
} ps__pair;

#define PS__MAX_PAIRS 16

/* Splits a flat object into pairs. Keys are [a-z_]+; a value is a string of
 * [a-z_] (for "event"), or the characters of a number, true, false or null,
 * checked when it is converted. */
static int ps__report_split(const char *line, ps__pair *pairs, int *n_pairs, char *err,
                            size_t errlen)
{
    const char *p = line;
    int n = 0;

    if (*p++ != '{')
        return ps_err_printf(err, errlen, -EINVAL, "not a JSON object");
    for (;;) {
        ps__pair *pr = &pairs[n];
        if (n == PS__MAX_PAIRS)
            return ps_err_printf(err, errlen, -EINVAL, "more than %d keys", PS__MAX_PAIRS);
        if (*p++ != '"')
            return ps_err_printf(err, errlen, -EINVAL, "expected a key at offset %td",
                                 p - 1 - line);
        pr->key = p;
        while ((*p >= 'a' && *p <= 'z') || *p == '_')
            p++;
        pr->key_len = (size_t)(p - pr->key);
        if (pr->key_len == 0 || *p++ != '"' || *p++ != ':')
            return ps_err_printf(err, errlen, -EINVAL, "malformed key at offset %td",
                                 pr->key - 1 - line);
        pr->is_string = *p == '"';
        if (pr->is_string)
            p++;
        pr->val = p;
        if (pr->is_string)
            while ((*p >= 'a' && *p <= 'z') || *p == '_')
                p++;
        else
            while (*p != '\0' && *p != ',' && *p != '}' && *p != '"')
                p++;
        pr->val_len = (size_t)(p - pr->val);
        if (pr->is_string && *p++ != '"')
            return ps_err_printf(err, errlen, -EINVAL, "malformed string value of \"%.*s\"",
                                 (int)pr->key_len, pr->key);
        if (pr->val_len == 0)
            return ps_err_printf(err, errlen, -EINVAL, "empty value of \"%.*s\"", (int)pr->key_len,
                                 pr->key);
        n++;
        if (*p == ',') {
            p++;
            continue;
        }
        if (*p++ != '}')
            return ps_err_printf(err, errlen, -EINVAL, "expected ',' or '}' at offset %td",
                                 p - 1 - line);
        break;
    }
    if (*p != '\0')
        return ps_err_printf(err, errlen, -EINVAL, "text after the object at offset %td", p - line);
    *n_pairs = n;
    return 0;
}

static int ps__is_key(const ps__pair *pr, const char *name)
{
    return pr->key_len == strlen(name) && memcmp(pr->key, name, pr->key_len) == 0;
}

/* A JSON number's characters only: no nan, inf, hex or spaces for strtod to
 * accept. */
static int ps__number_chars(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (strchr("0123456789+-.eE", s[i]) == NULL)
            return 0;
    return 1;
}

static int ps__convert(const ps__pair *pr, const ps__field *f, ps_report *r, char *err,
                       size_t errlen)
{
    char text[64], *end;
    char *p = (char *)r + f->off;

    if (pr->is_string || pr->val_len >= sizeof(text))
        return ps_err_printf(err, errlen, -EINVAL, "\"%s\" is not a number", f->name);
    memcpy(text, pr->val, pr->val_len);
    text[pr->val_len] = '\0';
    if (f->type == PS__NUM && strcmp(text, "null") == 0) {
        *(double *)(void *)p = NAN;
        return 0;
    }
    if (f->type == PS__BOOL) {
        if (strcmp(text, "true") != 0 && strcmp(text, "false") != 0)
            return ps_err_printf(err, errlen, -EINVAL, "\"%s\" is not true or false: %s", f->name,
                                 text);
        *(int *)(void *)p = text[0] == 't';
        return 0;
    }
    if (!ps__number_chars(text, pr->val_len))
        return ps_err_printf(err, errlen, -EINVAL, "\"%s\" is not a number: %s", f->name, text);
    errno = 0;
    switch (f->type) {
    case PS__INT: {
        long long v = strtoll(text, &end, 10);
        if (*end != '\0' || errno != 0 || v < INT_MIN || v > INT_MAX)
            return ps_err_printf(err, errlen, -EINVAL, "\"%s\" is not an integer in range: %s",
                                 f->name, text);
        *(int *)(void *)p = (int)v;
        break;
    }
    case PS__U64: {
        unsigned long long v = strtoull(text, &end, 10);
        if (text[0] < '0' || text[0] > '9' || *end != '\0' || errno != 0)
            return ps_err_printf(err, errlen, -EINVAL,
                                 "\"%s\" is not an unsigned 64-bit integer: %s", f->name, text);
        *(uint64_t *)(void *)p = (uint64_t)v;
        break;
    }
    case PS__BOOL: /* converted above */
        break;
    case PS__NUM: {
        double v = strtod(text, &end);
        if (*end != '\0' || errno == ERANGE)
            return ps_err_printf(err, errlen, -EINVAL, "\"%s\" is not a finite number: %s", f->name,
                                 text);
        *(double *)(void *)p = v;
        break;
    }
    }
    return 0;
}

int ps_report_parse(const char *line, ps_report *out, char *err, size_t errlen)
{
    ps__pair pairs[PS__MAX_PAIRS];
    int seen[PS__MAX_PAIRS] = {0}; /* [0]: rank; [1 + i]: field i */
    int n = 0, rc, kind = -1;      /* n = 0: GCC -O2 cannot see ps__report_split set it */

    if (errlen > 0)
        err[0] = '\0';
    if (strlen(line) >= PS_REPORT_MAX_LINE)
        return ps_err_printf(err, errlen, -EINVAL, "longer than %d bytes", PS_REPORT_MAX_LINE - 1);
    rc = ps__report_split(line, pairs, &n, err, errlen);
    if (rc < 0)
        return rc;
    for (int i = 0; i < n; i++) {
        if (!ps__is_key(&pairs[i], "event"))
            continue;
        if (kind >= 0)
            return ps_err_printf(err, errlen, -EINVAL, "\"event\" given twice");
        for (size_t k = 0; k < PS__REPORT_N(ps__report_kinds); k++)
            if (pairs[i].is_string && pairs[i].val_len == strlen(ps__report_kinds[k].event) &&
                memcmp(pairs[i].val, ps__report_kinds[k].event, pairs[i].val_len) == 0)
                kind = (int)k;
        if (kind < 0)
            return ps_err_printf(err, errlen, -EINVAL, "unknown event \"%.*s\"",
                                 (int)pairs[i].val_len, pairs[i].val);
    }
    if (kind < 0)
        return ps_err_printf(err, errlen, -EINVAL, "no \"event\"");
    memset(out, 0, sizeof(*out));
    out->kind = (ps_report_kind)kind;
    for (int i = 0; i < n; i++) {
        const ps__field *f = NULL;
        int slot = -1;
        if (ps__is_key(&pairs[i], "event"))
            continue;
        if (ps__is_key(&pairs[i], "rank")) {
            f = &ps__rank_field;
            slot = 0;
        }
        for (size_t j = 0; f == NULL && j < ps__report_kinds[kind].n; j++)
            if (ps__is_key(&pairs[i], ps__report_kinds[kind].fields[j].name)) {
                f = &ps__report_kinds[kind].fields[j];
                slot = 1 + (int)j;
            }
        if (f == NULL)
            return ps_err_printf(err, errlen, -EINVAL, "unknown key \"%.*s\" in a %s report",
                                 (int)pairs[i].key_len, pairs[i].key, ps__report_kinds[kind].event);
        if (seen[slot]++)
            return ps_err_printf(err, errlen, -EINVAL, "\"%s\" given twice", f->name);
        rc = ps__convert(&pairs[i], f, out, err, errlen);
        if (rc < 0)
            return rc;
    }
    if (!seen[0])
        return ps_err_printf(err, errlen, -EINVAL, "no \"rank\" in a %s report",
                             ps__report_kinds[kind].event);
    for (size_t j = 0; j < ps__report_kinds[kind].n; j++)
        if (!seen[1 + j])
            return ps_err_printf(err, errlen, -EINVAL, "no \"%s\" in a %s report",
                                 ps__report_kinds[kind].fields[j].name,
                                 ps__report_kinds[kind].event);
    return 0;
}
