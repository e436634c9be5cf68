/* The tensor table: building it (the MLP's directly, any other model's
 * through model_desc, a job's tensor by tensor), its digest, and the
 * deterministic initial values that servers use to fill their chunks. */
#include "model_spec.h"

#include <errno.h>
#include <math.h>
#include <sodium.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define PS_MAX_LAYER_SIZE (1 << 20)

void ps_model_spec_free(ps_model_spec *spec)
{
    if (spec == NULL)
        return;
    free(spec->tensors);
    free(spec->row_tables);
    memset(spec, 0, sizeof(*spec));
}

int ps_model_spec_copy(ps_model_spec *dst, const ps_model_spec *src)
{
    *dst = *src;
    dst->tensors = NULL;
    dst->cap = 0;
    dst->row_tables = NULL;
    if (src->n_row_tables > 0) {
        size_t bytes = (size_t)src->n_row_tables * sizeof(*dst->row_tables);
        if ((dst->row_tables = malloc(bytes)) == NULL)
            goto fail;
        memcpy(dst->row_tables, src->row_tables, bytes);
    }
    if (src->n_tensors == 0)
        return 0;
    dst->tensors = malloc((size_t)src->n_tensors * sizeof(*dst->tensors));
    if (dst->tensors == NULL)
        goto fail;
    memcpy(dst->tensors, src->tensors, (size_t)src->n_tensors * sizeof(*dst->tensors));
    dst->cap = src->n_tensors;
    return 0;
fail:
    free(dst->row_tables);
    memset(dst, 0, sizeof(*dst));
    return -ENOMEM;
}

int ps_model_spec_init_mlp(ps_model_spec *spec, const int *sizes, int n_sizes, uint64_t seed)
{
    memset(spec, 0, sizeof(*spec));
    if (n_sizes < 2 || n_sizes > PS_MAX_LAYERS + 1)
        return -EINVAL;
    for (int i = 0; i < n_sizes; i++)
        if (sizes[i] < 1 || sizes[i] > PS_MAX_LAYER_SIZE)
            return -EINVAL;

    spec->n_layers = n_sizes - 1;
    memcpy(spec->sizes, sizes, sizeof(int) * (size_t)n_sizes);
    spec->seed = seed;
    for (int l = 0; l < spec->n_layers; l++) {
        int in = sizes[l], out = sizes[l + 1];
        int last = l == spec->n_layers - 1;
        int wshape[2] = {out, in};
        char name[32];
        int rc;

        snprintf(name, sizeof(name), "fc%d.weight", l + 1);
        rc = ps_model_spec_add_tensor(spec, name, 2, wshape,
                                      last ? PS_INIT_XAVIER_UNIFORM : PS_INIT_HE_UNIFORM, in, out);
        if (rc == 0) {
            snprintf(name, sizeof(name), "fc%d.bias", l + 1);
            rc = ps_model_spec_add_tensor(spec, name, 1, &out, PS_INIT_ZERO, in, out);
        }
        if (rc < 0) {
            ps_model_spec_free(spec);
            return rc;
        }
    }
    return 0;
}

int ps_model_spec_name_ok(const char *name)
{
    size_t n = name ? strnlen(name, PS_MAX_NAME_BYTES + 1) : 0;

    if (n == 0 || n > PS_MAX_NAME_BYTES)
        return 0;
    for (size_t i = 0; i < n; i++)
        if (name[i] < 0x21 || name[i] > 0x7e)
            return 0;
    return 1;
}

/* The combinations of kind, dtype and init a table may hold. */
static int ps__decl_ok(const ps_tensor_decl *d)
{
    if ((unsigned)d->kind > PS_KIND_FROZEN || (unsigned)d->dtype > PS_DTYPE_I64 ||
        (unsigned)d->init > PS_INIT_VALUES)
        return 0;
    return d->dtype == PS_DTYPE_F32 ||
           (d->kind != PS_KIND_PARAMETER && (d->init == PS_INIT_ZERO || d->init == PS_INIT_VALUES));
}

/* Room for one more tensor: the array doubles, so a table of n tensors is
 * built in O(n). */
static int ps__spec_grow(ps_model_spec *spec)
{
    ps_tensor_spec *grown;
    int cap;

    if (spec->n_tensors < spec->cap)
        return 0;
    cap = spec->cap ? 2 * spec->cap : 8;
    if (cap > PS_MAX_TENSORS)
        cap = PS_MAX_TENSORS;
    grown = realloc(spec->tensors, (size_t)cap * sizeof(*grown));
    if (grown == NULL)
        return -ENOMEM;
    spec->tensors = grown;
    spec->cap = cap;
    return 0;
}

int ps_model_spec_add(ps_model_spec *spec, const ps_tensor_decl *d)
{
    ps_tensor_spec *t;
    size_t numel = 1;
    int rc;

    if (!ps_model_spec_name_ok(d->name) || d->ndim < 1 || d->ndim > PS_MAX_DIMS || d->fan_in < 1 ||
        d->fan_out < 1 || !ps__decl_ok(d))
        return -EINVAL;
    if (spec->n_tensors >= PS_MAX_TENSORS)
        return -E2BIG;
    for (int k = 0; k < d->ndim; k++) {
        if (d->shape[k] < 1)
            return -EINVAL;
        /* Each factor is below 2^31, so checking after every step keeps the
         * product from wrapping. */
        numel *= (size_t)d->shape[k];
        if (numel > (size_t)INT32_MAX)
            return -E2BIG;
    }
    rc = ps__spec_grow(spec);
    if (rc < 0)
        return rc;
    t = &spec->tensors[spec->n_tensors++];
    memset(t, 0, sizeof(*t));
    memcpy(t->name, d->name, strlen(d->name) + 1);
    t->ndim = d->ndim;
    memcpy(t->shape, d->shape, sizeof(int) * (size_t)d->ndim);
    t->rows = d->shape[0];
    t->cols = (int)(numel / (size_t)d->shape[0]);
    t->numel = numel;
    t->words = d->dtype == PS_DTYPE_I64 ? 2 * numel : numel;
    t->init = d->init;
    t->fan_in = d->fan_in;
    t->fan_out = d->fan_out;
    t->kind = d->kind;
    t->dtype = d->dtype;
    spec->total_numel += numel;
    spec->total_words += t->words;
    return 0;
}

int ps_model_spec_add_tensor(ps_model_spec *spec, const char *name, int ndim, const int *shape,
                             ps_init_kind init, int fan_in, int fan_out)
{
    ps_tensor_decl d = {name, ndim, shape, init, fan_in, fan_out, PS_KIND_PARAMETER, PS_DTYPE_F32};

    return ps_model_spec_add(spec, &d);
}

int ps_model_spec_parse_sizes(const char *text, int *sizes, int max_sizes)
{
    int n = 0;
    const char *p = text;

    if (*p == '\0')
        return 0;
    for (;;) {
        char *end;
        long v;

        if (*p < '0' || *p > '9')
            return -EINVAL;
        errno = 0;
        v = strtol(p, &end, 10);
        if (errno || v < 1 || v > PS_MAX_LAYER_SIZE || n == max_sizes)
            return -EINVAL;
        sizes[n++] = (int)v;
        if (*end == '\0')
            return n;
        if (*end != ',')
            return -EINVAL;
        p = end + 1;
    }
}

/* Tensors by name, equal names by position (they sit in one array). */
static int ps__cmp_name(const void *a, const void *b)
{
    const ps_tensor_spec *x = *(const ps_tensor_spec *const *)a;
    const ps_tensor_spec *y = *(const ps_tensor_spec *const *)b;
    int c = strcmp(x->name, y->name);

    return c ? c : (x > y) - (x < y);
}

int ps_model_spec_duplicate(const ps_model_spec *spec)
{
    const ps_tensor_spec **order;
    int dup = -1;

    if (spec->n_tensors < 2)
        return -1;
    order = malloc((size_t)spec->n_tensors * sizeof(*order));
    if (order == NULL)
        return -ENOMEM;
    for (int i = 0; i < spec->n_tensors; i++)
        order[i] = &spec->tensors[i];
    qsort(order, (size_t)spec->n_tensors, sizeof(*order), ps__cmp_name);
    /* Equal names sort by position, so the later one of a pair is named,
     * and of several pairs the first such. */
    for (int i = 1; i < spec->n_tensors; i++)
        if (strcmp(order[i]->name, order[i - 1]->name) == 0) {
            int at = (int)(order[i] - spec->tensors);
            if (dup < 0 || at < dup)
                dup = at;
        }
    free(order);
    return dup;
}

_Static_assert(PS_ROW_TABLE_NAME_BYTES == PS_MAX_NAME_BYTES,
               "a row table's name is as long as a tensor's");

int ps_model_spec_add_row_table(ps_model_spec *spec, const ps_row_table_spec *t, char *why,
                                size_t why_len)
{
    char buf[256];
    ps_row_table_spec *grown;

    if (why == NULL) {
        why = buf;
        why_len = sizeof(buf);
    }
    if (spec->n_row_tables >= PS_MAX_ROW_TABLES) {
        snprintf(why, why_len, "%d row tables; at most %d", spec->n_row_tables + 1,
                 PS_MAX_ROW_TABLES);
        return -E2BIG;
    }
    if (ps_row_table_check(t, why, why_len) < 0)
        return -EINVAL;
    for (int i = 0; i < spec->n_row_tables; i++)
        if (strcmp(spec->row_tables[i].name, t->name) == 0) {
            snprintf(why, why_len, "row table %s is declared twice", t->name);
            return -EINVAL;
        }
    grown = realloc(spec->row_tables, (size_t)(spec->n_row_tables + 1) * sizeof(*grown));
    if (grown == NULL)
        return -ENOMEM;
    spec->row_tables = grown;
    grown[spec->n_row_tables++] = *t;
    return 0;
}

static void ps__put_u64(crypto_generichash_state *st, uint64_t v)
{
    unsigned char b[8];

    for (int i = 0; i < 8; i++)
        b[i] = (unsigned char)(v >> (8 * i));
    crypto_generichash_update(st, b, sizeof(b));
}

void ps_model_spec_digest(const ps_model_spec *spec, uint8_t out[PS_TABLE_DIGEST_BYTES])
{
    static const char domain[] = "shardps tensor table 1";
    crypto_generichash_state st;

    /* Fixed-width little-endian values and length-prefixed names, not the
     * struct or its protobuf encoding, so neither padding, host layout nor
     * an encoder's choices leak into the digest, and no two different
     * tables hash the same bytes. */
    crypto_generichash_init(&st, NULL, 0, PS_TABLE_DIGEST_BYTES);
    crypto_generichash_update(&st, (const unsigned char *)domain, sizeof(domain));
    ps__put_u64(&st, (uint64_t)spec->n_tensors);
    for (int i = 0; i < spec->n_tensors; i++) {
        const ps_tensor_spec *t = &spec->tensors[i];
        size_t len = strnlen(t->name, sizeof(t->name));

        ps__put_u64(&st, len);
        crypto_generichash_update(&st, (const unsigned char *)t->name, len);
        ps__put_u64(&st, (uint64_t)t->ndim);
        for (int d = 0; d < t->ndim && d < PS_MAX_DIMS; d++)
            ps__put_u64(&st, (uint64_t)t->shape[d]);
        ps__put_u64(&st, (uint64_t)t->kind);
        ps__put_u64(&st, (uint64_t)t->dtype);
        ps__put_u64(&st, (uint64_t)t->init);
        ps__put_u64(&st, (uint64_t)t->fan_in);
        ps__put_u64(&st, (uint64_t)t->fan_out);
    }
    ps__put_u64(&st, spec->seed);
    /* Nothing added for a table without rows, so its digest is what it was
     * before row tables existed. */
    if (spec->n_row_tables > 0)
        ps__put_u64(&st, (uint64_t)spec->n_row_tables);
    for (int i = 0; i < spec->n_row_tables; i++) {
        const ps_row_table_spec *r = &spec->row_tables[i];
        const double dv[4] = {r->init.lo, r->init.hi, r->init.mean, r->init.std};
        size_t len = strnlen(r->name, sizeof(r->name)), olen = strnlen(r->optimizer, 24);

        ps__put_u64(&st, len);
        crypto_generichash_update(&st, (const unsigned char *)r->name, len);
        ps__put_u64(&st, r->dim);
        ps__put_u64(&st, (uint64_t)r->init.kind);
        for (int k = 0; k < 4; k++) {
            uint64_t bits;
            memcpy(&bits, &dv[k], sizeof(bits));
            ps__put_u64(&st, bits);
        }
        ps__put_u64(&st, olen);
        crypto_generichash_update(&st, (const unsigned char *)r->optimizer, olen);
        ps__put_u64(&st, r->admit_after);
        ps__put_u64(&st, r->expire_after);
        ps__put_u64(&st, r->capacity);
    }
    crypto_generichash_final(&st, out, PS_TABLE_DIGEST_BYTES);
}

uint64_t ps_model_spec_fingerprint(const ps_model_spec *spec)
{
    uint8_t d[PS_TABLE_DIGEST_BYTES];
    uint64_t v = 0;

    ps_model_spec_digest(spec, d);
    for (int i = 7; i >= 0; i--)
        v = v << 8 | d[i];
    return v;
}

/* SplitMix64 finaliser: a counter-based generator, so element i's value is
 * computed directly without generating elements 0..i-1. */
static uint64_t ps__mix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void ps_model_spec_init_values(const ps_model_spec *spec, int tensor_id, size_t offset, size_t n,
                               float *out)
{
    const ps_tensor_spec *t = &spec->tensors[tensor_id];
    uint64_t base = ps__mix64(spec->seed ^ ps__mix64((uint64_t)tensor_id + 1));
    double bound;

    switch (t->init) {
    case PS_INIT_HE_UNIFORM:
        bound = sqrt(6.0 / t->fan_in);
        break;
    case PS_INIT_XAVIER_UNIFORM:
        /* In double: each fan may be up to 2^31-1, their sum is not an int. */
        bound = sqrt(6.0 / ((double)t->fan_in + (double)t->fan_out));
        break;
    case PS_INIT_ZERO:
    case PS_INIT_VALUES:
    default:
        /* All-zero words are 0.0f and int64 0 alike. */
        memset(out, 0, n * sizeof(float));
        return;
    }
    for (size_t i = 0; i < n; i++) {
        /* Top 53 bits -> uniform double in [0, 1). */
        double u = (double)(ps__mix64(base + offset + i) >> 11) * 0x1.0p-53;
        out[i] = (float)((2.0 * u - 1.0) * bound);
    }
}

const char *ps_tensor_kind_name(ps_tensor_kind k)
{
    static const char *const names[] = {"parameter", "buffer", "frozen"};

    return (unsigned)k < 3 ? names[k] : "?";
}

const char *ps_tensor_dtype_name(ps_tensor_dtype d)
{
    static const char *const names[] = {"float32", "int64"};

    return (unsigned)d < 2 ? names[d] : "?";
}

const char *ps_init_kind_name(ps_init_kind k)
{
    static const char *const names[] = {"zero", "he_uniform", "xavier_uniform", "values"};

    return (unsigned)k < 4 ? names[k] : "?";
}
