/* The gradient copies of shardps_push_copy (push_copies.h). */
#include "push_copies.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int ps_push_copies_take(ps_push_copies *pc, int n_tensors, int tensor, const float *grad,
                        size_t numel, const float **out)
{
    if (pc->unsafe)
        return -EBUSY;
    if (pc->bufs == NULL) {
        if ((pc->bufs = calloc((size_t)n_tensors, sizeof(*pc->bufs))) == NULL)
            return -ENOMEM;
        pc->n_tensors = n_tensors;
    }
    if (pc->bufs[tensor] == NULL && (pc->bufs[tensor] = malloc(numel * sizeof(float))) == NULL)
        return -ENOMEM;
    memcpy(pc->bufs[tensor], grad, numel * sizeof(float));
    pc->sent = 1;
    *out = pc->bufs[tensor];
    return 0;
}

void ps_push_copies_waited(ps_push_copies *pc, int rc)
{
    if (rc < 0)
        pc->unsafe |= pc->sent;
    else
        pc->sent = 0;
}

void ps_push_copies_reset(ps_push_copies *pc)
{
    pc->sent = pc->unsafe = 0;
}

void ps_push_copies_free(ps_push_copies *pc)
{
    for (int t = 0; pc->bufs && t < pc->n_tensors; t++)
        free(pc->bufs[t]);
    free(pc->bufs);
    memset(pc, 0, sizeof(*pc));
}
