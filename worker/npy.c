/* NumPy .npy header parser (see npy.h). The header is a Python literal, so
 * this is a small recursive-descent reader for exactly the subset np.save
 * writes: a dict of string keys whose values are strings, booleans or tuples
 * of integers. */
#include "npy.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ps_error.h"

#define PS__MAX_HEADER (1u << 20)

static const uint8_t ps__npy_magic[6] = {0x93, 'N', 'U', 'M', 'P', 'Y'};

static int ps__why(char *why, size_t whylen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int ps__why(char *why, size_t whylen, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(why, whylen, fmt, ap);
    va_end(ap);
    return -PS_EFORMAT;
}

int ps_npy_header_size(const uint8_t *pre, size_t len, size_t *total, char *why, size_t whylen)
{
    uint32_t hlen;
    size_t fixed;

    if (len < 10 || memcmp(pre, ps__npy_magic, sizeof(ps__npy_magic)) != 0)
        return ps__why(why, whylen, "not a .npy file (no \\x93NUMPY magic)");
    if (pre[6] == 1) {
        hlen = (uint32_t)pre[8] | (uint32_t)pre[9] << 8;
        fixed = 10;
    } else if (pre[6] == 2 || pre[6] == 3) {
        if (len < 12)
            return ps__why(why, whylen, "truncated .npy preamble");
        hlen = (uint32_t)pre[8] | (uint32_t)pre[9] << 8 | (uint32_t)pre[10] << 16 |
               (uint32_t)pre[11] << 24;
        fixed = 12;
    } else {
        return ps__why(why, whylen, ".npy format version %u.%u is not supported (1 to 3 are)",
                       pre[6], pre[7]);
    }
    if (hlen > PS__MAX_HEADER)
        return ps__why(why, whylen, ".npy header of %u bytes is over 1 MiB", hlen);
    *total = fixed + hlen;
    return 0;
}

typedef struct {
    const char *p, *end;
} ps__cur;

static void ps__ws(ps__cur *c)
{
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r'))
        c->p++;
}

/* Consumes ch after optional white space; 0 if it is there. */
static int ps__eat(ps__cur *c, char ch)
{
    ps__ws(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return 0;
    }
    return -1;
}

/* A quoted string without escapes into out. */
static int ps__string(ps__cur *c, char *out, size_t outlen)
{
    char q;
    size_t n = 0;

    ps__ws(c);
    if (c->p >= c->end || (*c->p != '\'' && *c->p != '"'))
        return -1;
    q = *c->p++;
    while (c->p < c->end && *c->p != q) {
        if (*c->p == '\\' || n + 1 >= outlen)
            return -1;
        out[n++] = *c->p++;
    }
    if (c->p >= c->end)
        return -1;
    c->p++;
    out[n] = '\0';
    return 0;
}

static int ps__npy_word(ps__cur *c, const char *w)
{
    size_t n = strlen(w);

    ps__ws(c);
    if ((size_t)(c->end - c->p) < n || memcmp(c->p, w, n) != 0)
        return -1;
    c->p += n;
    return 0;
}

/* A tuple of non-negative integers: (), (5,), (5, 3), (5, 3,). */
static int ps__npy_shape(ps__cur *c, ps_npy_header *h, char *why, size_t whylen)
{
    if (ps__eat(c, '('))
        return ps__why(why, whylen, "'shape' is not a tuple");
    h->ndim = 0;
    for (;;) {
        uint64_t v = 0;
        int digits = 0;

        if (ps__eat(c, ')') == 0)
            return 0;
        ps__ws(c);
        while (c->p < c->end && *c->p >= '0' && *c->p <= '9') {
            if (v > (UINT64_MAX - 9) / 10)
                return ps__why(why, whylen, "a dimension in 'shape' is too large");
            v = v * 10 + (uint64_t)(*c->p++ - '0');
            digits++;
        }
        if (!digits)
            return ps__why(why, whylen, "'shape' holds something other than integers");
        if (h->ndim == PS_NPY_MAX_DIMS)
            return ps__why(why, whylen, "more than %d dimensions", PS_NPY_MAX_DIMS);
        h->shape[h->ndim++] = v;
        if (ps__eat(c, ',') != 0) {
            if (ps__eat(c, ')') == 0)
                return 0;
            return ps__why(why, whylen, "malformed 'shape' tuple");
        }
    }
}

/* '<f4', '|u1', ... → kind, size, byte order. */
static int ps__descr(ps_npy_header *h, const char *d, char *why, size_t whylen)
{
    char order = d[0];

    snprintf(h->descr, sizeof(h->descr), "%s", d);
    if ((order != '<' && order != '>' && order != '|' && order != '=') || !d[1] || !d[2] || d[3] ||
        (d[2] != '1' && d[2] != '2' && d[2] != '4' && d[2] != '8') ||
        (d[1] != 'u' && d[1] != 'i' && d[1] != 'f'))
        return ps__why(why, whylen,
                       "dtype '%s' is not a plain integer or float (structured, string, object, "
                       "bool and complex arrays are not data)",
                       d);
    h->kind = d[1];
    h->elem_size = d[2] - '0';
    /* '=' is native order, which np.save never writes but is unambiguous here
     * only on the writer's machine; treat it as unknown. */
    if (order == '=')
        return ps__why(why, whylen, "dtype '%s' has native byte order; save with an explicit one",
                       d);
    h->big_endian = order == '>' && h->elem_size > 1;
    if (h->kind == 'f' && h->elem_size < 4)
        return ps__why(why, whylen, "dtype '%s' (float16) is not supported", d);
    return 0;
}

int ps_npy_parse_header(const uint8_t *buf, size_t len, ps_npy_header *h, char *why, size_t whylen)
{
    ps__cur c;
    size_t total;
    int seen_descr = 0, seen_fortran = 0, seen_shape = 0, rc;

    memset(h, 0, sizeof(*h));
    rc = ps_npy_header_size(buf, len, &total, why, whylen);
    if (rc)
        return rc;
    if (len < total)
        return ps__why(why, whylen, "truncated .npy header");
    h->data_off = total;
    c.p = (const char *)buf + (buf[6] == 1 ? 10 : 12);
    c.end = (const char *)buf + total;
    if (ps__eat(&c, '{'))
        return ps__why(why, whylen, "the .npy header is not a dict");
    for (;;) {
        char key[32], val[16];

        if (ps__eat(&c, '}') == 0)
            break;
        if (ps__string(&c, key, sizeof(key)) || ps__eat(&c, ':'))
            return ps__why(why, whylen, "malformed .npy header dict");
        if (strcmp(key, "descr") == 0 && !seen_descr++) {
            if (ps__string(&c, val, sizeof(val)))
                return ps__why(why, whylen,
                               "'descr' is not a simple dtype string (a structured array?)");
            rc = ps__descr(h, val, why, whylen);
        } else if (strcmp(key, "fortran_order") == 0 && !seen_fortran++) {
            if (ps__npy_word(&c, "True") == 0)
                h->fortran_order = 1;
            else if (ps__npy_word(&c, "False") != 0)
                return ps__why(why, whylen, "'fortran_order' is not True or False");
        } else if (strcmp(key, "shape") == 0 && !seen_shape++) {
            rc = ps__npy_shape(&c, h, why, whylen);
        } else {
            return ps__why(why, whylen, "unexpected or repeated key '%s' in the .npy header", key);
        }
        if (rc)
            return rc;
        if (ps__eat(&c, ',') != 0) {
            if (ps__eat(&c, '}') == 0)
                break;
            return ps__why(why, whylen, "malformed .npy header dict");
        }
    }
    if (!seen_descr || !seen_fortran || !seen_shape)
        return ps__why(why, whylen, "the .npy header lacks '%s'",
                       !seen_descr     ? "descr"
                       : !seen_fortran ? "fortran_order"
                                       : "shape");
    h->count = 1;
    for (int i = 0; i < h->ndim; i++) {
        if (h->shape[i] && h->count > SIZE_MAX / 8 / h->shape[i])
            return ps__why(why, whylen, "the array's element count overflows");
        h->count *= (size_t)h->shape[i];
    }
    return 0;
}
