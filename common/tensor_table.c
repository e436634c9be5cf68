/* The tensor table as a TensorTable message (see tensor_table.h). A table
 * that arrives from a peer or a file is checked field by field before
 * ps_model_spec_add sees it, so every refusal names the tensor and the rule
 * it broke. */
#include "tensor_table.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pb_strings.h"
#include "ps_error.h"

static const ps_init_kind ps__init_of[] = {
    [SHARDPS__TENSOR_INIT__INIT_ZERO] = PS_INIT_ZERO,
    [SHARDPS__TENSOR_INIT__INIT_HE_UNIFORM] = PS_INIT_HE_UNIFORM,
    [SHARDPS__TENSOR_INIT__INIT_XAVIER_UNIFORM] = PS_INIT_XAVIER_UNIFORM,
    [SHARDPS__TENSOR_INIT__INIT_VALUES] = PS_INIT_VALUES,
};

_Static_assert((int)SHARDPS__TENSOR_KIND__TENSOR_PARAMETER == (int)PS_KIND_PARAMETER &&
                   (int)SHARDPS__TENSOR_KIND__TENSOR_BUFFER == (int)PS_KIND_BUFFER &&
                   (int)SHARDPS__TENSOR_KIND__TENSOR_FROZEN == (int)PS_KIND_FROZEN &&
                   (int)SHARDPS__TENSOR_DTYPE__TENSOR_F32 == (int)PS_DTYPE_F32 &&
                   (int)SHARDPS__TENSOR_DTYPE__TENSOR_I64 == (int)PS_DTYPE_I64,
               "the wire's kinds and dtypes are model_spec.h's");

static Shardps__TensorInit ps__wire_init(ps_init_kind k)
{
    switch (k) {
    case PS_INIT_HE_UNIFORM:
        return SHARDPS__TENSOR_INIT__INIT_HE_UNIFORM;
    case PS_INIT_XAVIER_UNIFORM:
        return SHARDPS__TENSOR_INIT__INIT_XAVIER_UNIFORM;
    case PS_INIT_VALUES:
        return SHARDPS__TENSOR_INIT__INIT_VALUES;
    case PS_INIT_ZERO:
        break;
    }
    return SHARDPS__TENSOR_INIT__INIT_ZERO;
}

void ps_tensor_table_wire_free(ps_tensor_table_wire *w)
{
    free(w->decls);
    free(w->decl_ptrs);
    free(w->dims);
    free(w->rows);
    free(w->row_ptrs);
    memset(w, 0, sizeof(*w));
}

int ps_tensor_table_to_wire(const ps_model_spec *spec, ps_tensor_table_wire *w)
{
    size_t n = (size_t)spec->n_tensors;

    memset(w, 0, sizeof(*w));
    shardps__tensor_table__init(&w->msg);
    w->decls = calloc(n + 1, sizeof(*w->decls));
    w->decl_ptrs = calloc(n + 1, sizeof(*w->decl_ptrs));
    w->dims = calloc((n + 1) * PS_MAX_DIMS, sizeof(*w->dims));
    w->rows = calloc((size_t)spec->n_row_tables + 1, sizeof(*w->rows));
    w->row_ptrs = calloc((size_t)spec->n_row_tables + 1, sizeof(*w->row_ptrs));
    if (w->decls == NULL || w->decl_ptrs == NULL || w->dims == NULL || w->rows == NULL ||
        w->row_ptrs == NULL) {
        ps_tensor_table_wire_free(w);
        shardps__tensor_table__init(&w->msg);
        return -ENOMEM;
    }
    w->msg.seed = spec->seed;
    w->msg.n_tensors = n;
    w->msg.tensors = w->decl_ptrs;
    for (size_t i = 0; i < n; i++) {
        const ps_tensor_spec *t = &spec->tensors[i];
        Shardps__TensorDecl *d = &w->decls[i];
        uint32_t *dims = w->dims + i * PS_MAX_DIMS;

        shardps__tensor_decl__init(d);
        /* protobuf-c's message fields are not const; packing only reads. */
        d->name = (char *)t->name;
        for (int k = 0; k < t->ndim; k++)
            dims[k] = (uint32_t)t->shape[k];
        d->n_dims = (size_t)t->ndim;
        d->dims = dims;
        d->init = ps__wire_init(t->init);
        d->fan_in = (uint32_t)t->fan_in;
        d->fan_out = (uint32_t)t->fan_out;
        d->kind = (Shardps__TensorKind)t->kind;
        d->dtype = (Shardps__TensorDType)t->dtype;
        w->decl_ptrs[i] = d;
    }
    for (int i = 0; i < spec->n_row_tables; i++) {
        ps_row_table_to_decl(&spec->row_tables[i], &w->rows[i]);
        w->row_ptrs[i] = &w->rows[i];
    }
    w->msg.n_row_tables = (size_t)spec->n_row_tables;
    w->msg.row_tables = w->row_ptrs;
    return 0;
}

int ps_tensor_table_pack(const ps_model_spec *spec, uint8_t **out, size_t *len)
{
    ps_tensor_table_wire w;
    int rc = ps_tensor_table_to_wire(spec, &w);

    *out = NULL;
    if (rc < 0)
        return rc;
    *len = shardps__tensor_table__get_packed_size(&w.msg);
    if (*len > PS_TABLE_MAX_BYTES)
        rc = -E2BIG;
    else if ((*out = malloc(*len ? *len : 1)) == NULL)
        rc = -ENOMEM;
    else
        shardps__tensor_table__pack(&w.msg, *out);
    ps_tensor_table_wire_free(&w);
    return rc;
}

/* One declaration against the rules, before ps_model_spec_add sees it, so
 * every refusal names the tensor and the rule it broke. Fills *d (shape
 * into shape). */
static int ps__tensor_table_check_decl(const Shardps__TensorDecl *in, size_t i, int *shape,
                                       ps_tensor_decl *d, char *why, size_t why_len)
{
    if (!ps_model_spec_name_ok(in->name)) {
        char shown[44];
        size_t n = in->name ? strlen(in->name) : 0, k;

        /* Named as far as it can be shown safely. */
        for (k = 0; k < n && k < 40; k++)
            shown[k] = in->name[k] > 0x20 && in->name[k] < 0x7f ? in->name[k] : '?';
        snprintf(shown + k, sizeof(shown) - k, "%s", n > 40 ? "..." : "");
        snprintf(why, why_len,
                 "tensor %zu (\"%s\", %zu bytes): a name is 1-%d bytes of printable ASCII other "
                 "than the space",
                 i, shown, n, PS_MAX_NAME_BYTES);
        return -PS_EPROTO;
    }
    if (in->n_dims < 1 || in->n_dims > PS_MAX_DIMS) {
        snprintf(why, why_len, "tensor %s: %zu dimensions; 1 to %d", in->name, in->n_dims,
                 PS_MAX_DIMS);
        return -PS_EPROTO;
    }
    for (size_t k = 0; k < in->n_dims; k++) {
        if (in->dims[k] < 1 || in->dims[k] > INT32_MAX) {
            snprintf(why, why_len, "tensor %s: dimension %zu is %" PRIu32, in->name, k,
                     in->dims[k]);
            return -PS_EPROTO;
        }
        shape[k] = (int)in->dims[k];
    }
    if ((unsigned)in->init >= sizeof(ps__init_of) / sizeof(ps__init_of[0])) {
        snprintf(why, why_len, "tensor %s: unknown init kind %d", in->name, (int)in->init);
        return -PS_EPROTO;
    }
    if (in->fan_in < 1 || in->fan_in > INT32_MAX || in->fan_out < 1 || in->fan_out > INT32_MAX) {
        snprintf(why, why_len, "tensor %s: fans %" PRIu32 " and %" PRIu32 "; each 1 to 2^31-1",
                 in->name, in->fan_in, in->fan_out);
        return -PS_EPROTO;
    }
    *d = (ps_tensor_decl){in->name,
                          (int)in->n_dims,
                          shape,
                          ps__init_of[in->init],
                          (int)in->fan_in,
                          (int)in->fan_out,
                          (ps_tensor_kind)in->kind,
                          (ps_tensor_dtype)in->dtype};
    if ((unsigned)in->kind > PS_KIND_FROZEN || (unsigned)in->dtype > PS_DTYPE_I64) {
        snprintf(why, why_len, "tensor %s: unknown kind %d or dtype %d", in->name, (int)in->kind,
                 (int)in->dtype);
        return -PS_EPROTO;
    }
    return 0;
}

int ps_tensor_table_from_wire(const Shardps__TensorTable *t, size_t max_bytes, ps_model_spec *spec,
                              char *why, size_t why_len)
{
    int rc = -PS_EPROTO, dup;

    memset(spec, 0, sizeof(*spec));
    if (t == NULL || t->n_tensors == 0) {
        snprintf(why, why_len, "no tensor table (declare at least one tensor)");
        return -PS_EPROTO;
    }
    if (t->n_tensors > PS_MAX_TENSORS) {
        snprintf(why, why_len, "%zu tensors; at most %d", t->n_tensors, PS_MAX_TENSORS);
        return -E2BIG;
    }
    spec->seed = t->seed;
    for (size_t i = 0; i < t->n_tensors; i++) {
        const Shardps__TensorDecl *in = t->tensors[i];
        int shape[PS_MAX_DIMS];
        ps_tensor_decl d;

        rc = ps__tensor_table_check_decl(in, i, shape, &d, why, why_len);
        if (rc < 0)
            goto fail;
        rc = ps_model_spec_add(spec, &d);
        if (rc == -E2BIG)
            snprintf(why, why_len, "tensor %s: 2^31 elements or more", in->name);
        else if (rc == -EINVAL) {
            snprintf(why, why_len,
                     "tensor %s: a %s %s cannot be initialised as %s (int64 is for buffers and "
                     "frozen tensors, zeros or declared values)",
                     in->name, ps_tensor_dtype_name(d.dtype), ps_tensor_kind_name(d.kind),
                     ps_init_kind_name(d.init));
            rc = -PS_EPROTO;
        } else if (rc < 0)
            snprintf(why, why_len, "out of memory");
        if (rc < 0)
            goto fail;
        if (max_bytes > 0 && spec->total_words > max_bytes / sizeof(float)) {
            snprintf(why, why_len,
                     "the tensors up to %s hold %zu bytes, over this server's limit of %zu "
                     "(--max-model-bytes)",
                     in->name, spec->total_words * sizeof(float), max_bytes);
            rc = -E2BIG;
            goto fail;
        }
    }
    {
        int params = 0;
        for (int i = 0; i < spec->n_tensors; i++)
            params += spec->tensors[i].kind == PS_KIND_PARAMETER;
        if (params == 0) {
            snprintf(why, why_len,
                     "none of the %d tensors is a parameter (only buffers and frozen tensors): "
                     "a job trains at least one",
                     spec->n_tensors);
            rc = -PS_EPROTO;
            goto fail;
        }
    }
    dup = ps_model_spec_duplicate(spec);
    if (dup == -ENOMEM) {
        snprintf(why, why_len, "out of memory");
        rc = -ENOMEM;
        goto fail;
    }
    if (dup >= 0) {
        snprintf(why, why_len, "tensor %s is declared twice", spec->tensors[dup].name);
        rc = -PS_EPROTO;
        goto fail;
    }
    if (t->n_row_tables > PS_MAX_ROW_TABLES) {
        snprintf(why, why_len, "%zu row tables; at most %d", t->n_row_tables, PS_MAX_ROW_TABLES);
        rc = -E2BIG;
        goto fail;
    }
    for (size_t i = 0; i < t->n_row_tables; i++) {
        ps_row_table_spec r;

        rc = ps_row_table_from_decl(t->row_tables[i], t->seed, &r, why, why_len);
        if (rc == 0 && (rc = ps_model_spec_add_row_table(spec, &r, why, why_len)) == -EINVAL)
            rc = -PS_EPROTO;
        if (rc < 0)
            goto fail;
    }
    return 0;
fail:
    ps_model_spec_free(spec);
    return rc;
}

Shardps__TensorTable *ps_tensor_table_unpack(const uint8_t *buf, size_t len, char *why,
                                             size_t why_len)
{
    Shardps__TensorTable *t;

    if (len > PS_TABLE_MAX_BYTES) {
        snprintf(why, why_len, "the tensor table is %zu bytes, over the limit of %zu", len,
                 PS_TABLE_MAX_BYTES);
        return NULL;
    }
    if (ps_pb_strings_check(&shardps__tensor_table__descriptor, buf, len, why, why_len) < 0)
        return NULL;
    t = shardps__tensor_table__unpack(NULL, len, buf);
    if (t == NULL)
        snprintf(why, why_len, "the tensor table does not decode");
    return t;
}

int ps_tensor_table_decode(const uint8_t *buf, size_t len, size_t max_bytes, ps_model_spec *spec,
                           char *why, size_t why_len)
{
    Shardps__TensorTable *t = ps_tensor_table_unpack(buf, len, why, why_len);
    int rc;

    memset(spec, 0, sizeof(*spec));
    if (t == NULL)
        return -PS_EPROTO;
    rc = ps_tensor_table_from_wire(t, max_bytes, spec, why, why_len);
    shardps__tensor_table__free_unpacked(t, NULL);
    return rc;
}

const char *ps_tensor_table_shape_text(const ps_tensor_spec *t, char *buf, size_t len)
{
    size_t off = 0;

    buf[0] = '\0';
    for (int k = 0; k < t->ndim && off < len; k++)
        off += (size_t)snprintf(buf + off, len - off, "%s%d", k ? "x" : "", t->shape[k]);
    return buf;
}

int ps_tensor_table_diff(const ps_model_spec *a, const ps_model_spec *b, const char *a_side,
                         const char *b_side, char *msg, size_t len)
{
    int n = a->n_tensors < b->n_tensors ? a->n_tensors : b->n_tensors;
    char sa[64], sb[64];

    for (int i = 0; i < n; i++) {
        const ps_tensor_spec *x = &a->tensors[i], *y = &b->tensors[i];
        if (strcmp(x->name, y->name) != 0) {
            snprintf(msg, len, "tensor %d: %s %s, %s %s", i, x->name, a_side, y->name, b_side);
            return 1;
        }
        ps_tensor_table_shape_text(x, sa, sizeof(sa));
        ps_tensor_table_shape_text(y, sb, sizeof(sb));
        if (strcmp(sa, sb) != 0) {
            snprintf(msg, len, "tensor %s: %s %s, %s %s", x->name, sa, a_side, sb, b_side);
            return 1;
        }
        if (x->kind != y->kind || x->dtype != y->dtype) {
            snprintf(msg, len, "tensor %s: %s %s %s, %s %s %s", x->name,
                     ps_tensor_dtype_name(x->dtype), ps_tensor_kind_name(x->kind), a_side,
                     ps_tensor_dtype_name(y->dtype), ps_tensor_kind_name(y->kind), b_side);
            return 1;
        }
        if (x->init != y->init || x->fan_in != y->fan_in || x->fan_out != y->fan_out) {
            snprintf(msg, len, "tensor %s: init %s (fans %d, %d) %s, %s (fans %d, %d) %s", x->name,
                     ps_init_kind_name(x->init), x->fan_in, x->fan_out, a_side,
                     ps_init_kind_name(y->init), y->fan_in, y->fan_out, b_side);
            return 1;
        }
    }
    if (a->n_tensors != b->n_tensors) {
        const ps_model_spec *more = a->n_tensors > b->n_tensors ? a : b;
        snprintf(msg, len, "%d tensors %s, %d %s (first extra: %s)", a->n_tensors, a_side,
                 b->n_tensors, b_side, more->tensors[n].name);
        return 1;
    }
    if (a->seed != b->seed) {
        snprintf(msg, len, "seed %" PRIu64 " %s, %" PRIu64 " %s", a->seed, a_side, b->seed, b_side);
        return 1;
    }
    if (ps_row_table_diff(a->row_tables, a->n_row_tables, b->row_tables, b->n_row_tables, a_side,
                          b_side, msg, len))
        return 1;
    if (len > 0)
        msg[0] = '\0';
    return 0;
}
