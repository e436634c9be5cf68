/* The libshardps entries not exported yet (shardps_internal.h): tensors
 * declared with the caller's own initial values, which rank 0 sends once,
 * and the buffers rank 0 writes every step. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ps_error.h"
#include "shardps_handle.h"
#include "shardps_internal.h"

int ps__values_connect(shardps *h)
{
    const void **v;

    /* One entry per tensor, whichever way each was declared. */
    if (h->values && h->n_values < h->cfg.spec.n_tensors) {
        v = realloc(h->values, (size_t)h->cfg.spec.n_tensors * sizeof(*v));
        if (v == NULL)
            return ps__err(h, -ENOMEM, "out of memory");
        memset(v + h->n_values, 0, (size_t)(h->cfg.spec.n_tensors - h->n_values) * sizeof(*v));
        h->values = v;
        h->n_values = h->cfg.spec.n_tensors;
    }
    h->cfg.values = h->values;
    return 0;
}

int ps_shardps_declare_values(shardps *h, const char *name, int ndim, const int64_t *shape,
                              int kind, const float *values)
{
    int dims[PS_MAX_DIMS], rc, n;
    ps_tensor_decl d = {name, ndim, dims, PS_INIT_VALUES, 1, 1, (ps_tensor_kind)kind, PS_DTYPE_F32};
    const void **v;

    if (h == NULL)
        return -EINVAL;
    if (h->kv)
        return ps__err(h, -EBUSY, "shardps_declare_values: already connected");
    if (name == NULL || shape == NULL || values == NULL || ndim < 1 || ndim > PS_MAX_DIMS)
        return ps__err(h, -EINVAL,
                       "shardps_declare_values: need a name, 1 to %d dimensions and the values",
                       PS_MAX_DIMS);
    if (kind < PS_KIND_PARAMETER || kind > PS_KIND_FROZEN)
        return ps__err(h, -EINVAL, "shardps_declare_values %s: no tensor kind %d", name, kind);
    for (int k = 0; k < ndim; k++) {
        if (shape[k] < 1 || shape[k] > INT32_MAX)
            return ps__err(h, -EINVAL, "shardps_declare_values %s: dimension %d is %lld", name, k,
                           (long long)shape[k]);
        dims[k] = (int)shape[k];
    }
    n = h->cfg.spec.n_tensors + 1;
    v = realloc(h->values, (size_t)n * sizeof(*v));
    if (v == NULL)
        return ps__err(h, -ENOMEM, "out of memory");
    memset(v + h->n_values, 0, (size_t)(n - h->n_values) * sizeof(*v));
    h->values = v;
    h->n_values = n;
    rc = ps_model_spec_add(&h->cfg.spec, &d);
    if (rc < 0)
        return ps__err(h, rc, "shardps_declare_values %s: %s", name,
                       rc == -E2BIG ? "the table is full or the tensor exceeds 2^31 elements"
                                    : "a bad name (1..255 bytes of printable ASCII but the space)");
    h->values[n - 1] = values;
    h->declared = 1;
    return 0;
}

int ps_shardps_write_buffers(shardps *h, const void *const *values, int n_values)
{
    int rc = ps__ready(h, "ps_shardps_write_buffers");

    if (rc < 0)
        return rc;
    if (values == NULL || n_values != h->cfg.spec.n_tensors)
        return ps__err(h, -EINVAL, "ps_shardps_write_buffers: need %d entries, got %d",
                       h->cfg.spec.n_tensors, values == NULL ? 0 : n_values);
    for (int t = 0; t < n_values; t++)
        if (values[t] && h->cfg.spec.tensors[t].kind != PS_KIND_BUFFER)
            return ps__err(h, -EINVAL, "ps_shardps_write_buffers: %s is a %s, not a buffer",
                           h->cfg.spec.tensors[t].name,
                           ps_tensor_kind_name(h->cfg.spec.tensors[t].kind));
    if (h->cfg.rank != 0)
        return ps__err(h, -EINVAL, "ps_shardps_write_buffers: only rank 0 writes the buffers");
    rc = ps_kv_client_write_buffers(h->kv, values);
    return rc < 0 ? ps__kv_err(h, rc, "ps_shardps_write_buffers") : 0;
}
