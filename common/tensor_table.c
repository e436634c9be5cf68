/* The tensor table as a TensorTable message (see tensor_table.h). A table
 * that arrives from a peer or a file is checked field by field before
 * ps_model_spec_add_tensor sees it, so every refusal names the tensor and the
 * rule it broke. */
#include "tensor_table.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "pb_strings.h"
#include "ps_error.h"

static const ps_init_kind ps__init_of[] = {
    [SHARDPS__TENSOR_INIT__INIT_ZERO] = PS_INIT_ZERO,
    [SHARDPS__TENSOR_INIT__INIT_HE_UNIFORM] = PS_INIT_HE_UNIFORM,
    [SHARDPS__TENSOR_INIT__INIT_XAVIER_UNIFORM] = PS_INIT_XAVIER_UNIFORM,
};

static const char *const ps__init_name[] = {
    [PS_INIT_ZERO] = "zero",
    [PS_INIT_HE_UNIFORM] = "he_uniform",
    [PS_INIT_XAVIER_UNIFORM] = "xavier_uniform",
};

static Shardps__TensorInit ps__wire_init(ps_init_kind k)
{
    switch (k) {
    case PS_INIT_HE_UNIFORM:
        return SHARDPS__TENSOR_INIT__INIT_HE_UNIFORM;
    case PS_INIT_XAVIER_UNIFORM:
        return SHARDPS__TENSOR_INIT__INIT_XAVIER_UNIFORM;
    case PS_INIT_ZERO:
        break;
    }
    return SHARDPS__TENSOR_INIT__INIT_ZERO;
}

void ps_tensor_table_to_wire(const ps_model_spec *spec, ps_tensor_table_wire *w)
{
    shardps__tensor_table__init(&w->msg);
    w->msg.seed = spec->seed;
    w->msg.n_tensors = (size_t)spec->n_tensors;
    w->msg.tensors = w->decl_ptrs;
    for (int i = 0; i < spec->n_tensors; i++) {
        const ps_tensor_spec *t = &spec->tensors[i];
        Shardps__TensorDecl *d = &w->decls[i];
        shardps__tensor_decl__init(d);
        /* protobuf-c's message fields are not const; packing only reads. */
        d->name = (char *)t->name;
        for (int k = 0; k < t->ndim; k++)
            w->dims[i][k] = (uint32_t)t->shape[k];
        d->n_dims = (size_t)t->ndim;
        d->dims = w->dims[i];
        d->init = ps__wire_init(t->init);
        d->fan_in = (uint32_t)t->fan_in;
        d->fan_out = (uint32_t)t->fan_out;
        w->decl_ptrs[i] = d;
    }
}

static int ps__name_ok(const char *name)
{
    size_t n = name ? strnlen(name, sizeof(((ps_tensor_spec *)0)->name)) : 0;

    if (n == 0 || n >= sizeof(((ps_tensor_spec *)0)->name))
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '.' || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

int ps_tensor_table_from_wire(const Shardps__TensorTable *t, size_t max_bytes, ps_model_spec *spec,
                              char *why, size_t why_len)
{
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
        const Shardps__TensorDecl *d = t->tensors[i];
        int shape[PS_MAX_DIMS];
        int rc;

        if (!ps__name_ok(d->name)) {
            snprintf(why, why_len,
                     "tensor %zu: a name is 1-31 characters of letters, digits, '.', '_', '-'", i);
            return -PS_EPROTO;
        }
        for (int k = 0; k < spec->n_tensors; k++)
            if (strcmp(spec->tensors[k].name, d->name) == 0) {
                snprintf(why, why_len, "tensor %s is declared twice", d->name);
                return -PS_EPROTO;
            }
        if (d->n_dims < 1 || d->n_dims > PS_MAX_DIMS) {
            snprintf(why, why_len, "tensor %s: %zu dimensions; 1 to %d", d->name, d->n_dims,
                     PS_MAX_DIMS);
            return -PS_EPROTO;
        }
        for (size_t k = 0; k < d->n_dims; k++) {
            if (d->dims[k] < 1 || d->dims[k] > INT32_MAX) {
                snprintf(why, why_len, "tensor %s: dimension %zu is %" PRIu32, d->name, k,
                         d->dims[k]);
                return -PS_EPROTO;
            }
            shape[k] = (int)d->dims[k];
        }
        if ((unsigned)d->init >= sizeof(ps__init_of) / sizeof(ps__init_of[0])) {
            snprintf(why, why_len, "tensor %s: unknown init kind %d", d->name, (int)d->init);
            return -PS_EPROTO;
        }
        if (d->fan_in < 1 || d->fan_in > INT32_MAX || d->fan_out < 1 || d->fan_out > INT32_MAX) {
            snprintf(why, why_len, "tensor %s: fans %" PRIu32 " and %" PRIu32 "; each 1 to 2^31-1",
                     d->name, d->fan_in, d->fan_out);
            return -PS_EPROTO;
        }
        rc = ps_model_spec_add_tensor(spec, d->name, (int)d->n_dims, shape, ps__init_of[d->init],
                                      (int)d->fan_in, (int)d->fan_out);
        if (rc < 0) {
            snprintf(why, why_len, "tensor %s: 2^31 elements or more", d->name);
            return -E2BIG;
        }
        if (max_bytes > 0 && spec->total_numel > max_bytes / sizeof(float)) {
            snprintf(why, why_len,
                     "the tensors up to %s hold %zu bytes, over this server's limit of %zu "
                     "(--max-model-bytes)",
                     d->name, spec->total_numel * sizeof(float), max_bytes);
            return -E2BIG;
        }
    }
    return 0;
}

Shardps__TensorTable *ps_tensor_table_unpack(const uint8_t *buf, size_t len, char *why,
                                             size_t why_len)
{
    Shardps__TensorTable *t;

    if (ps_pb_strings_check(&shardps__tensor_table__descriptor, buf, len, why, why_len) < 0)
        return NULL;
    t = shardps__tensor_table__unpack(NULL, len, buf);
    if (t == NULL)
        snprintf(why, why_len, "the tensor table does not decode");
    return t;
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
        if (x->init != y->init || x->fan_in != y->fan_in || x->fan_out != y->fan_out) {
            snprintf(msg, len, "tensor %s: init %s (fans %d, %d) %s, %s (fans %d, %d) %s", x->name,
                     ps__init_name[x->init], x->fan_in, x->fan_out, a_side, ps__init_name[y->init],
                     y->fan_in, y->fan_out, b_side);
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
    if (len > 0)
        msg[0] = '\0';
    return 0;
}
