/* libshardps (include/shardps.h), a model's own values: tensors declared
 * with the caller's initial values, of any kind and dtype, and the buffers
 * rank 0 writes every step. The handle is shardps_handle.h's. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "shardps_handle.h"

_Static_assert(SHARDPS_KIND_PARAMETER == PS_KIND_PARAMETER &&
                   SHARDPS_KIND_BUFFER == PS_KIND_BUFFER && SHARDPS_KIND_FROZEN == PS_KIND_FROZEN,
               "the public tensor kinds are model_spec.h's");
_Static_assert(SHARDPS_DTYPE_FLOAT32 == PS_DTYPE_F32 && SHARDPS_DTYPE_INT64 == PS_DTYPE_I64,
               "the public dtypes are model_spec.h's");

/* Bytes of one element of dtype. */
static size_t ps__elem_bytes(ps_tensor_dtype dtype)
{
    return dtype == PS_DTYPE_I64 ? 8 : 4;
}

/* The checks of shardps_declare_values before anything is added: 0 or
 * -EINVAL with the sentence. dims gets the shape. */
static int ps__values_check_decl(shardps *h, const char *name, int ndim, const int64_t *shape,
                                 int kind, int dtype, const void *values, size_t nbytes, int *dims)
{
    const char *fn = "shardps_declare_values";
    size_t numel = 1;

    if (name == NULL || shape == NULL || values == NULL || ndim < 1 || ndim > PS_MAX_DIMS)
        return ps_shardps_err(h, -EINVAL, "%s: need a name, 1 to %d dimensions and the values", fn,
                              PS_MAX_DIMS);
    if (kind < SHARDPS_KIND_PARAMETER || kind > SHARDPS_KIND_FROZEN)
        return ps_shardps_err(h, -EINVAL, "%s %s: no tensor kind %d", fn, name, kind);
    if (dtype != SHARDPS_DTYPE_FLOAT32 && dtype != SHARDPS_DTYPE_INT64)
        return ps_shardps_err(h, -EINVAL, "%s %s: no dtype %d", fn, name, dtype);
    if (dtype == SHARDPS_DTYPE_INT64 && kind == SHARDPS_KIND_PARAMETER)
        return ps_shardps_err(h, -EINVAL,
                              "%s %s: a parameter is float32 (the optimizer updates floats); "
                              "int64 is for buffers and frozen tensors",
                              fn, name);
    for (int k = 0; k < ndim; k++) {
        if (shape[k] < 1 || shape[k] > INT32_MAX)
            return ps_shardps_err(h, -EINVAL, "%s %s: dimension %d is %lld", fn, name, k,
                                  (long long)shape[k]);
        dims[k] = (int)shape[k];
        /* Bounded: a tensor over 2^31 elements is refused by the table. */
        numel = numel > ((size_t)1 << 40) ? numel : numel * (size_t)shape[k];
    }
    if (nbytes != numel * ps__elem_bytes((ps_tensor_dtype)dtype))
        return ps_shardps_err(h, -EINVAL,
                              "%s %s: the values hold %zu bytes; %zu %s elements take %zu", fn,
                              name, nbytes, numel, ps_tensor_dtype_name((ps_tensor_dtype)dtype),
                              numel * ps__elem_bytes((ps_tensor_dtype)dtype));
    return 0;
}

int shardps_declare_values(shardps *h, const char *name, int ndim, const int64_t *shape, int kind,
                           int dtype, const void *values, size_t nbytes)
{
    int dims[PS_MAX_DIMS], rc, n;
    ps_tensor_decl d = {
        name, ndim, dims, PS_INIT_VALUES, 1, 1, (ps_tensor_kind)kind, (ps_tensor_dtype)dtype};
    const void **v;

    if ((rc = ps_shardps_may_declare(h, "shardps_declare_values")) < 0)
        return rc;
    rc = ps__values_check_decl(h, name, ndim, shape, kind, dtype, values, nbytes, dims);
    if (rc < 0)
        return rc;
    n = h->cfg.spec.n_tensors + 1;
    v = realloc(h->values, (size_t)n * sizeof(*v));
    if (v == NULL)
        return ps_shardps_err(h, -ENOMEM, "out of memory");
    memset(v + h->n_values, 0, (size_t)(n - h->n_values) * sizeof(*v));
    h->values = v;
    h->n_values = n;
    rc = ps_model_spec_add(&h->cfg.spec, &d);
    if (rc < 0)
        return ps_shardps_err(
            h, rc, "shardps_declare_values %s: %s", name,
            rc == -E2BIG ? "the table is full (4096 tensors) or the tensor exceeds 2^31 elements"
                         : "a bad name (1..255 bytes of printable ASCII but the space)");
    h->values[n - 1] = values;
    h->declared = 1;
    return 0;
}

int shardps_tensor_kind(const shardps *h, int i, int *kind, int *dtype)
{
    if (h == NULL || i < 0 || i >= h->cfg.spec.n_tensors)
        return -EINVAL;
    if (kind)
        *kind = (int)h->cfg.spec.tensors[i].kind;
    if (dtype)
        *dtype = (int)h->cfg.spec.tensors[i].dtype;
    return 0;
}

int shardps_write_buffers(shardps *h, const void *const *values, const size_t *nbytes, int n_values)
{
    const char *fn = "shardps_write_buffers";
    int rc = ps_shardps_may_write(h, fn);

    if (rc < 0)
        return rc;
    if (values == NULL || nbytes == NULL || n_values != h->cfg.spec.n_tensors)
        return ps_shardps_err(h, -EINVAL, "%s: need %d entries and their sizes, got %d", fn,
                              h->cfg.spec.n_tensors, values == NULL ? 0 : n_values);
    if (h->cfg.rank != 0)
        return ps_shardps_err(h, -EINVAL, "%s: only rank 0 writes the buffers (this is rank %d)",
                              fn, h->cfg.rank);
    for (int t = 0; t < n_values; t++) {
        const ps_tensor_spec *s = &h->cfg.spec.tensors[t];
        if (values[t] == NULL)
            continue;
        if (s->kind != PS_KIND_BUFFER)
            return ps_shardps_err(h, -EINVAL, "%s: %s is a %s, not a buffer", fn, s->name,
                                  ps_tensor_kind_name(s->kind));
        if (nbytes[t] != s->numel * ps__elem_bytes(s->dtype))
            return ps_shardps_err(h, -EINVAL, "%s: the values of %s hold %zu bytes; it takes %zu",
                                  fn, s->name, nbytes[t], s->numel * ps__elem_bytes(s->dtype));
    }
    rc = ps_kv_client_write_buffers(h->kv, values);
    return rc < 0 ? ps_shardps_kv_err(h, rc, fn) : 0;
}
