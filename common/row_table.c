/* Embedding table declarations (see row_table.h): their rules, their wire
 * form and their comparison. */
#include "row_table.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "job_kinds.h"
#include "ps_error.h"

_Static_assert((int)SHARDPS__ROW_INIT__ROW_INIT_ZEROS == (int)PS_ROW_INIT_ZEROS &&
                   (int)SHARDPS__ROW_INIT__ROW_INIT_UNIFORM == (int)PS_ROW_INIT_UNIFORM &&
                   (int)SHARDPS__ROW_INIT__ROW_INIT_NORMAL == (int)PS_ROW_INIT_NORMAL,
               "the wire's row initializers are row_init.h's");

int ps_row_table_optimizer_ok(const char *name)
{
    ps_optimizer_kind kind;

    return name[0] == '\0' || strcmp(name, PS_ROW_TABLE_ROWWISE_ADAGRAD) == 0 ||
           ps_optimizer_parse(name, &kind) == 0;
}

static int ps__name_ok(const char *name)
{
    size_t n = strnlen(name, PS_ROW_TABLE_NAME_BYTES + 1);

    if (n == 0 || n > PS_ROW_TABLE_NAME_BYTES)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (name[i] < 0x21 || name[i] > 0x7e)
            return 0;
    return 1;
}

int ps_row_table_check(const ps_row_table_spec *t, char *why, size_t why_len)
{
    char init_why[160];

    if (!ps__name_ok(t->name)) {
        snprintf(why, why_len,
                 "a row table's name is 1-%d bytes of printable ASCII other than the space",
                 PS_ROW_TABLE_NAME_BYTES);
        return -PS_EPROTO;
    }
    if (t->dim < 1 || t->dim > PS_ROW_TABLE_MAX_DIM) {
        snprintf(why, why_len, "row table %s: dim %" PRIu32 "; 1 to %d", t->name, t->dim,
                 PS_ROW_TABLE_MAX_DIM);
        return -PS_EPROTO;
    }
    if (ps_row_init_check(&t->init, init_why, sizeof(init_why)) < 0) {
        snprintf(why, why_len, "row table %s: initializer: %s", t->name, init_why);
        return -PS_EPROTO;
    }
    if (!ps_row_table_optimizer_ok(t->optimizer)) {
        snprintf(why, why_len,
                 "row table %s: optimizer \"%.24s\"; \"\" (the job's), sgd, nesterov, adam, "
                 "adamw, adagrad or rowwise-adagrad",
                 t->name, t->optimizer);
        return -PS_EPROTO;
    }
    if (t->admit_after > PS_ROW_TABLE_MAX_ADMIT) {
        snprintf(why, why_len, "row table %s: admit_after %" PRIu32 "; at most %d", t->name,
                 t->admit_after, PS_ROW_TABLE_MAX_ADMIT);
        return -PS_EPROTO;
    }
    if (t->capacity > PS_ROW_TABLE_MAX_CAP) {
        snprintf(why, why_len, "row table %s: capacity %" PRIu64 "; at most %" PRIu64, t->name,
                 t->capacity, PS_ROW_TABLE_MAX_CAP);
        return -PS_EPROTO;
    }
    return 0;
}

int ps_row_table_from_decl(const Shardps__RowTableDecl *d, uint64_t seed, ps_row_table_spec *out,
                           char *why, size_t why_len)
{
    memset(out, 0, sizeof(*out));
    /* Too long or absent names are refused by the check, which sees them
     * cut at one byte past the limit. */
    snprintf(out->name, sizeof(out->name), "%s", d->name ? d->name : "");
    if (d->name && strlen(d->name) > PS_ROW_TABLE_NAME_BYTES)
        out->name[0] = '\0';
    if (d->optimizer && strlen(d->optimizer) >= sizeof(out->optimizer)) {
        snprintf(why, why_len, "row table %s: an optimizer name of %zu bytes", out->name,
                 strlen(d->optimizer));
        return -PS_EPROTO;
    }
    snprintf(out->optimizer, sizeof(out->optimizer), "%s", d->optimizer ? d->optimizer : "");
    if ((unsigned)d->init > PS_ROW_INIT_NORMAL) {
        snprintf(why, why_len, "row table %s: unknown initializer %d", out->name, (int)d->init);
        return -PS_EPROTO;
    }
    out->dim = d->dim;
    out->init = (ps_row_init){
        (ps_row_init_kind)d->init, seed, d->init_mean, d->init_std, d->init_lo, d->init_hi};
    out->admit_after = d->admit_after;
    out->expire_after = d->expire_after;
    out->capacity = d->capacity;
    return ps_row_table_check(out, why, why_len);
}

void ps_row_table_to_decl(const ps_row_table_spec *t, Shardps__RowTableDecl *d)
{
    shardps__row_table_decl__init(d);
    /* protobuf-c's string fields are not const; packing only reads. */
    d->name = (char *)t->name;
    d->dim = t->dim;
    d->init = (Shardps__RowInit)t->init.kind;
    d->init_lo = t->init.lo;
    d->init_hi = t->init.hi;
    d->init_mean = t->init.mean;
    d->init_std = t->init.std;
    d->optimizer = (char *)t->optimizer;
    d->admit_after = t->admit_after;
    d->expire_after = t->expire_after;
    d->capacity = t->capacity;
}

/* Doubles compared by their bits, as the digest hashes them (so -0 and 0,
 * or two NaNs, are told apart as the digest tells them). */
static int ps__same(double x, double y)
{
    return memcmp(&x, &y, sizeof(x)) == 0;
}

int ps_row_table_diff(const ps_row_table_spec *a, int na, const ps_row_table_spec *b, int nb,
                      const char *a_side, const char *b_side, char *msg, size_t len)
{
    int n = na < nb ? na : nb;

    for (int i = 0; i < n; i++) {
        const ps_row_table_spec *x = &a[i], *y = &b[i];
        const ps_row_init *p = &x->init, *q = &y->init;

        if (strcmp(x->name, y->name) != 0) {
            snprintf(msg, len, "row table %d: %s %s, %s %s", i, x->name, a_side, y->name, b_side);
            return 1;
        }
        if (x->dim != y->dim) {
            snprintf(msg, len, "row table %s: dim %" PRIu32 " %s, %" PRIu32 " %s", x->name, x->dim,
                     a_side, y->dim, b_side);
            return 1;
        }
        if (p->kind != q->kind || !ps__same(p->lo, q->lo) || !ps__same(p->hi, q->hi) ||
            !ps__same(p->mean, q->mean) || !ps__same(p->std, q->std)) {
            snprintf(msg, len,
                     "row table %s: initializer %s(lo %g, hi %g, mean %g, std %g) %s, "
                     "%s(lo %g, hi %g, mean %g, std %g) %s",
                     x->name, ps_row_init_name(p->kind), p->lo, p->hi, p->mean, p->std, a_side,
                     ps_row_init_name(q->kind), q->lo, q->hi, q->mean, q->std, b_side);
            return 1;
        }
        if (strcmp(x->optimizer, y->optimizer) != 0 || x->admit_after != y->admit_after ||
            x->expire_after != y->expire_after || x->capacity != y->capacity) {
            snprintf(msg, len,
                     "row table %s: optimizer \"%s\", admit after %" PRIu32
                     ", expire after %" PRIu32 ", capacity %" PRIu64 " %s; \"%s\", %" PRIu32
                     ", %" PRIu32 ", %" PRIu64 " %s",
                     x->name, x->optimizer, x->admit_after, x->expire_after, x->capacity, a_side,
                     y->optimizer, y->admit_after, y->expire_after, y->capacity, b_side);
            return 1;
        }
    }
    if (na != nb) {
        snprintf(msg, len, "%d row tables %s, %d %s (first extra: %s)", na, a_side, nb, b_side,
                 na > nb ? a[n].name : b[n].name);
        return 1;
    }
    if (len > 0)
        msg[0] = '\0';
    return 0;
}
