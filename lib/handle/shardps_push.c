/* libshardps (include/shardps.h), a step's pushes: the caller's gradient
 * (shardps_push), a copy the handle owns (shardps_push_copy, 1.3) or a
 * tensor no forward used (shardps_push_unused, 1.5), each checked against
 * the table before anything is sent. The handle is shardps_handle.h's. */
#include <errno.h>
#include <stddef.h>

#include "shardps_handle.h"

/* How a push carries its tensor's step: the caller's gradient (borrowed
 * until wait), the handle's copy of it, or no gradient (the tensor unused). */
typedef enum { PS__PUSH_BORROWED, PS__PUSH_COPY, PS__PUSH_UNUSED } ps__push_how;

/* shardps_push, shardps_push_copy and shardps_push_unused: the checks, then
 * the push. */
static int ps__push(shardps *h, int tensor, const float *grad, size_t numel, const char *fn,
                    ps__push_how how)
{
    int rc = ps_shardps_may_write(h, fn);

    if (rc < 0)
        return rc;
    if (tensor < 0 || tensor >= h->cfg.spec.n_tensors)
        return ps_shardps_err(h, -EINVAL, "%s: no tensor %d (the table has %d)", fn, tensor,
                              h->cfg.spec.n_tensors);
    if (how != PS__PUSH_UNUSED && (grad == NULL || numel != h->cfg.spec.tensors[tensor].numel))
        return ps_shardps_err(h, -EINVAL, "%s: %s holds %zu floats, got %zu%s", fn,
                              h->cfg.spec.tensors[tensor].name, h->cfg.spec.tensors[tensor].numel,
                              numel, grad == NULL ? " (NULL)" : "");
    if (h->cfg.spec.tensors[tensor].kind != PS_KIND_PARAMETER)
        return ps_shardps_err(h, -EPERM, "%s: %s is a %s tensor: %s", fn,
                              h->cfg.spec.tensors[tensor].name,
                              ps_tensor_kind_name(h->cfg.spec.tensors[tensor].kind),
                              h->cfg.spec.tensors[tensor].kind == PS_KIND_FROZEN
                                  ? "frozen tensors are never pushed"
                                  : "buffers are written by rank 0, never pushed");
    if (h->pushed[tensor])
        return ps_shardps_err(h, -EBUSY, "%s: %s was already pushed this step (wait first)", fn,
                              h->cfg.spec.tensors[tensor].name);
    if (how == PS__PUSH_COPY && (rc = ps_push_copies_take(&h->copies, h->cfg.spec.n_tensors, tensor,
                                                          grad, numel, &grad)) < 0)
        return ps_shardps_err(h, rc, "%s: %s", fn,
                              rc == -EBUSY
                                  ? "the last wait failed and its sends may still read the "
                                    "copies: shardps_reconnect first"
                                  : "out of memory for the gradient's copy");
    h->pushed[tensor] = 1;
    h->started = 1;
    rc = how == PS__PUSH_UNUSED ? ps_kv_client_push_unused(h->kv, tensor)
                                : ps_kv_client_push_tensor(h->kv, tensor, grad);
    return rc < 0 ? ps_shardps_kv_err(h, rc, fn) : 0;
}

int shardps_push(shardps *h, int tensor, const float *grad, size_t numel)
{
    return ps__push(h, tensor, grad, numel, "shardps_push", PS__PUSH_BORROWED);
}

int shardps_push_copy(shardps *h, int tensor, const float *grad, size_t numel)
{
    return ps__push(h, tensor, grad, numel, "shardps_push_copy", PS__PUSH_COPY);
}

int shardps_push_unused(shardps *h, int tensor)
{
    return ps__push(h, tensor, NULL, 0, "shardps_push_unused", PS__PUSH_UNUSED);
}
