/* Apply queue (see apply_queue.h): per-chunk FIFOs over libuv's thread pool
 * (uv_queue_work), plus a list of unfinished jobs in submission order whose
 * head says how far the prefix of finished jobs reaches. */
#include "apply_queue.h"

#include <errno.h>
#include <stdlib.h>

typedef struct {
    ps_apply_job *head, *tail; /* unfinished jobs of this chunk; head may be running */
    int running;
} ps__chunk_fifo;

struct ps_apply_queue {
    uv_loop_t *loop;
    ps__chunk_fifo *chunks;
    int n_chunks;
    ps_apply_job *oldest, *newest; /* every unfinished job, by seq */
    uint64_t next_seq;
    uint64_t hold;
    int running;
    void (*settled)(void *arg);
    void *arg;
};

int ps_apply_queue_init(ps_apply_queue **out, uv_loop_t *loop, int n_chunks,
                        void (*settled)(void *arg), void *arg)
{
    ps_apply_queue *q = calloc(1, sizeof(*q));

    if (q == NULL)
        goto fail;
    q->chunks = calloc((size_t)n_chunks + 1, sizeof(*q->chunks));
    if (q->chunks == NULL)
        goto fail;
    q->loop = loop;
    q->n_chunks = n_chunks;
    q->next_seq = 1;
    q->hold = UINT64_MAX;
    q->settled = settled;
    q->arg = arg;
    *out = q;
    return 0;
fail:
    free(q);
    return -ENOMEM;
}

void ps_apply_queue_close(ps_apply_queue *q)
{
    if (q == NULL)
        return;
    free(q->chunks);
    free(q);
}

static void ps__job_run(uv_work_t *req)
{
    ps_apply_job *j = req->data;

    j->run(j);
}

static void ps__job_after(uv_work_t *req, int status);

/* Starts the chunk's oldest job if nothing runs on the chunk and the hold
 * allows it. */
static void ps__start(ps_apply_queue *q, int chunk)
{
    ps__chunk_fifo *f = &q->chunks[chunk];
    ps_apply_job *j = f->head;

    if (j == NULL || f->running || j->seq >= q->hold)
        return;
    j->req.data = j;
    /* uv_queue_work only fails for a missing work callback. */
    if (uv_queue_work(q->loop, &j->req, ps__job_run, ps__job_after) == 0) {
        f->running = 1;
        q->running++;
    }
}

static void ps__job_after(uv_work_t *req, int status)
{
    ps_apply_job *j = req->data;
    ps_apply_queue *q = j->q;
    ps__chunk_fifo *f = &q->chunks[j->chunk];

    (void)status; /* UV_ECANCELED is impossible: jobs are never cancelled */
    f->head = j->next_in_chunk;
    if (f->head == NULL)
        f->tail = NULL;
    f->running = 0;
    q->running--;
    if (j->prev)
        j->prev->next = j->next;
    else
        q->oldest = j->next;
    if (j->next)
        j->next->prev = j->prev;
    else
        q->newest = j->prev;
    j->done(j);
    ps__start(q, (int)(f - q->chunks));
    q->settled(q->arg);
}

int ps_apply_queue_submit(ps_apply_queue *q, int chunk, ps_apply_job *j, int run_here)
{
    ps__chunk_fifo *f;

    if (chunk < 0 || chunk >= q->n_chunks)
        return UV_EINVAL;
    f = &q->chunks[chunk];
    j->q = q;
    j->chunk = chunk;
    j->seq = q->next_seq++;
    if (run_here && f->head == NULL && q->hold == UINT64_MAX) {
        j->run(j);
        j->done(j);
        return 0;
    }
    j->next_in_chunk = NULL;
    if (f->tail)
        f->tail->next_in_chunk = j;
    else
        f->head = j;
    f->tail = j;
    j->next = NULL;
    j->prev = q->newest;
    if (q->newest)
        q->newest->next = j;
    else
        q->oldest = j;
    q->newest = j;
    ps__start(q, chunk);
    return 0;
}

uint64_t ps_apply_queue_next_seq(const ps_apply_queue *q)
{
    return q->next_seq;
}

int ps_apply_queue_settled_before(const ps_apply_queue *q, uint64_t seq)
{
    return q->running == 0 && (q->oldest == NULL || q->oldest->seq >= seq);
}

void ps_apply_queue_hold_from(ps_apply_queue *q, uint64_t seq)
{
    uint64_t old = q->hold;

    q->hold = seq;
    if (seq <= old)
        return;
    for (int c = 0; c < q->n_chunks; c++)
        ps__start(q, c);
}

int ps_apply_queue_idle(const ps_apply_queue *q)
{
    return q->oldest == NULL;
}
