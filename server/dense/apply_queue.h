/* Optimizer work off the event loop.
 *
 * The server's loop hands each accumulate or apply of one chunk to libuv's
 * thread pool as a job and goes back to reading and writing; a large push,
 * one frame per chunk, is therefore applied chunk by chunk while the next
 * chunk is still arriving. The queue keeps the two promises the server's
 * consistency rules need:
 *  - jobs on one chunk run one at a time, in the order they were submitted
 *    (different chunks run in parallel);
 *  - every job gets a sequence number, and the owner can ask whether all
 *    jobs before a number have finished with none running, and hold back
 *    jobs from a number on: that is how a pull reply or a checkpoint sees
 *    exactly the updates submitted before it, never half of one.
 *
 * Lifecycle: ps_apply_queue_init -> submit ... (done callbacks on the loop)
 * -> ps_apply_queue_close once ps_apply_queue_idle (the loop keeps running
 * while jobs are out, since each is an active libuv request). Everything but
 * a job's run function happens on the loop thread. */
#ifndef PS_APPLY_QUEUE_H
#define PS_APPLY_QUEUE_H

#include <stdint.h>
#include <uv.h>

typedef struct ps_apply_queue ps_apply_queue;
typedef struct ps_apply_job ps_apply_job;

/* A job: the caller allocates it (usually inside a bigger struct of its
 * own), fills in run and done, and submits it; the queue owns it until it
 * calls done, which must free it. */
struct ps_apply_job {
    void (*run)(ps_apply_job *j);  /* on a pool thread: the arithmetic only */
    void (*done)(ps_apply_job *j); /* on the loop thread, after run */
    /* The queue's, not to be touched by the caller. */
    uv_work_t req;
    ps_apply_queue *q;
    ps_apply_job *next_in_chunk, *prev, *next;
    uint64_t seq;
    int chunk;
};

/* settled runs on the loop after every job's done callback: the moment to
 * answer pulls that were waiting for the queue. Returns 0 or -ENOMEM. */
int ps_apply_queue_init(ps_apply_queue **out, uv_loop_t *loop, int n_chunks,
                        void (*settled)(void *arg), void *arg);
/* NULL is allowed. Jobs still out would be freed by the pool later, so the
 * owner closes the queue only when it is idle. */
void ps_apply_queue_close(ps_apply_queue *q);

/* Queues j for chunk (0 <= chunk < n_chunks) behind the chunk's earlier jobs
 * and starts it when it may. With run_here set, a job that could start at
 * once (nothing queued or running on its chunk, nothing held) runs on the
 * calling thread instead, run and done before this returns, and settled is
 * not called for it: for small updates a trip through the pool costs more
 * than the arithmetic. Returns 0 or a libuv error (j is then not queued and
 * done will not be called). */
int ps_apply_queue_submit(ps_apply_queue *q, int chunk, ps_apply_job *j, int run_here);

/* The number the next submitted job will get. */
uint64_t ps_apply_queue_next_seq(const ps_apply_queue *q);
/* True when every job numbered below seq has finished and no job at all is
 * running: the chunks' memory may be read as "everything before seq". */
int ps_apply_queue_settled_before(const ps_apply_queue *q, uint64_t seq);
/* Jobs numbered seq or later do not start until the hold moves past them
 * (UINT64_MAX: hold nothing). Lowering it never stops a running job. */
void ps_apply_queue_hold_from(ps_apply_queue *q, uint64_t seq);
/* No job queued or running. */
int ps_apply_queue_idle(const ps_apply_queue *q);

#endif
