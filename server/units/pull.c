/* A pull waiting to be answered (see pull.h). */
#include "pull.h"

#include <stdlib.h>

ps_pull *ps_pull_new(ps_peer *p, uint64_t request_id, uint64_t clock, int table, size_t n,
                     int *locals, uint64_t *ids)
{
    ps_pull *q = calloc(1, sizeof(*q));

    if (q == NULL) {
        free(locals);
        free(ids);
        return NULL;
    }
    q->peer = p;
    q->request_id = request_id;
    q->clock = clock;
    q->table = table;
    q->n = n;
    q->locals = locals;
    q->ids = ids;
    q->snapshot = p->state == PS_PEER_EVALUATOR;
    return q;
}

void ps_pull_free(ps_pull *q)
{
    if (q == NULL)
        return;
    free(q->locals);
    free(q->ids);
    free(q);
}
