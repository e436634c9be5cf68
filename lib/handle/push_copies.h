/* push_copies: the gradient copies that shardps_push_copy sends from, so
 * that a caller's gradient is free the moment the push returns (a training
 * loop that zeroes its gradients while they travel). One buffer per tensor,
 * made at the tensor's first copied push and kept for the handle's life: a
 * tensor is pushed at most once between two waits, and its chunks are sent
 * from the copy until the wait. After a wait that failed, the sends may
 * still read the copies, so none is written again before the connections
 * that held them are gone (a reconnect). */
#ifndef PS_PUSH_COPIES_H
#define PS_PUSH_COPIES_H

#include <stddef.h>

typedef struct {
    float **bufs; /* owned: n_tensors entries, each NULL or its tensor's numel floats */
    int n_tensors;
    int sent;   /* a copy was pushed since the last wait that succeeded */
    int unsafe; /* a wait failed with copies in flight */
} ps_push_copies;

/* Copies grad (numel floats, only read during the call) into tensor's
 * buffer (of n_tensors, which must not change between calls); *out is the
 * copy, owned by pc, to send from until the wait. Returns 0, -ENOMEM, or
 * -EBUSY when a failed wait may still be sending the copies. */
int ps_push_copies_take(ps_push_copies *pc, int n_tensors, int tensor, const float *grad,
                        size_t numel, const float **out);
/* The outcome of a wait on the pushes: rc < 0 with copies in flight keeps
 * them from being written again until ps_push_copies_reset. */
void ps_push_copies_waited(ps_push_copies *pc, int rc);
/* The sends that held the copies are gone (a reconnect): they may be
 * written again. */
void ps_push_copies_reset(ps_push_copies *pc);
/* Frees the buffers, after the client that sent from them is closed. */
void ps_push_copies_free(ps_push_copies *pc);

#endif
