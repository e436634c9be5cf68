/* Tests for the apply queue (server/dense/apply_queue.c) on a real libuv loop and
 * thread pool: jobs on one chunk never overlap and run in submission order,
 * chunks run independently, a hold keeps later jobs from starting, and
 * "settled before N" is true exactly when every earlier job has finished and
 * nothing runs. */
#include <criterion/criterion.h>

#include <semaphore.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <uv.h>

#include "apply_queue.h"

#define JOBS 64

typedef struct {
    ps_apply_job job;
    int chunk, index;
    sem_t *gate; /* when set, run waits on it */
} test_job;

static struct {
    atomic_int in_chunk[2]; /* jobs of the chunk running right now */
    atomic_int overlap;     /* times a chunk had two at once */
    int order[2][JOBS];     /* written only by the chunk's current job */
    atomic_int ran[2];
    int done;
    int settled_calls;
} t;

static void job_run(ps_apply_job *j)
{
    test_job *tj = (test_job *)j;

    if (atomic_fetch_add(&t.in_chunk[tj->chunk], 1) != 0)
        atomic_fetch_add(&t.overlap, 1);
    if (tj->gate)
        sem_wait(tj->gate);
    t.order[tj->chunk][atomic_fetch_add(&t.ran[tj->chunk], 1)] = tj->index;
    atomic_fetch_sub(&t.in_chunk[tj->chunk], 1);
}

static void job_done(ps_apply_job *j)
{
    t.done++;
    free(j);
}

static void on_settled(void *arg)
{
    (void)arg;
    t.settled_calls++;
}

static void submit_job(ps_apply_queue *q, int chunk, int index, sem_t *gate, int run_here)
{
    test_job *j = calloc(1, sizeof(*j));

    cr_assert_not_null(j);
    j->job.run = job_run;
    j->job.done = job_done;
    j->chunk = chunk;
    j->index = index;
    j->gate = gate;
    cr_assert_eq(ps_apply_queue_submit(q, chunk, &j->job, run_here), 0);
}

static void submit(ps_apply_queue *q, int chunk, int index, sem_t *gate)
{
    submit_job(q, chunk, index, gate, 0);
}

static ps_apply_queue *setup(uv_loop_t *loop)
{
    ps_apply_queue *q = NULL;

    memset(&t, 0, sizeof(t));
    cr_assert_eq(uv_loop_init(loop), 0);
    cr_assert_eq(ps_apply_queue_init(&q, loop, 2, on_settled, NULL), 0);
    return q;
}

static void teardown(uv_loop_t *loop, ps_apply_queue *q)
{
    uv_run(loop, UV_RUN_DEFAULT);
    cr_assert(ps_apply_queue_idle(q));
    ps_apply_queue_close(q);
    cr_assert_eq(uv_loop_close(loop), 0);
}

Test(apply_queue, one_chunk_runs_in_order_and_never_overlaps, .timeout = 30)
{
    uv_loop_t loop;
    ps_apply_queue *q = setup(&loop);

    for (int i = 0; i < JOBS; i++) {
        submit(q, 0, i, NULL);
        submit(q, 1, i, NULL);
    }
    cr_assert_not(ps_apply_queue_idle(q));
    uv_run(&loop, UV_RUN_DEFAULT);
    cr_assert_eq(t.done, 2 * JOBS);
    cr_assert_eq(t.settled_calls, 2 * JOBS);
    cr_assert_eq(atomic_load(&t.overlap), 0, "two jobs of one chunk ran at once");
    for (int c = 0; c < 2; c++)
        for (int i = 0; i < JOBS; i++)
            cr_assert_eq(t.order[c][i], i, "chunk %d ran job %d as number %d", c, t.order[c][i], i);
    teardown(&loop, q);
}

Test(apply_queue, hold_keeps_later_jobs_from_starting, .timeout = 30)
{
    uv_loop_t loop;
    ps_apply_queue *q = setup(&loop);
    uint64_t cut;

    submit(q, 0, 0, NULL);
    submit(q, 1, 0, NULL);
    cut = ps_apply_queue_next_seq(q);
    ps_apply_queue_hold_from(q, cut);
    submit(q, 0, 1, NULL);
    submit(q, 1, 1, NULL);
    cr_assert_not(ps_apply_queue_settled_before(q, cut));
    while (!ps_apply_queue_settled_before(q, cut))
        uv_run(&loop, UV_RUN_ONCE);
    cr_assert_eq(atomic_load(&t.ran[0]) + atomic_load(&t.ran[1]), 2, "a held job ran");
    cr_assert_not(ps_apply_queue_idle(q));
    cr_assert_not(ps_apply_queue_settled_before(q, cut + 1), "a held job counts as unfinished");
    ps_apply_queue_hold_from(q, UINT64_MAX);
    teardown(&loop, q);
    cr_assert_eq(t.done, 4);
}

Test(apply_queue, a_running_job_is_never_settled, .timeout = 30)
{
    uv_loop_t loop;
    ps_apply_queue *q = setup(&loop);
    sem_t gate;
    uint64_t before;

    cr_assert_eq(sem_init(&gate, 0, 0), 0);
    before = ps_apply_queue_next_seq(q);
    cr_assert(ps_apply_queue_settled_before(q, before), "an empty queue is settled");
    submit(q, 1, 0, &gate);
    /* The job is numbered after `before`, but while it runs the chunks'
     * memory is in use: nothing may read it as settled. */
    cr_assert_not(ps_apply_queue_settled_before(q, before));
    uv_run(&loop, UV_RUN_NOWAIT);
    cr_assert_not(ps_apply_queue_settled_before(q, before));
    sem_post(&gate);
    uv_run(&loop, UV_RUN_DEFAULT);
    cr_assert(ps_apply_queue_settled_before(q, ps_apply_queue_next_seq(q)));
    teardown(&loop, q);
    sem_destroy(&gate);
}

Test(apply_queue, run_here_only_when_nothing_is_ahead_or_held, .timeout = 30)
{
    uv_loop_t loop;
    ps_apply_queue *q = setup(&loop);
    sem_t gate;

    cr_assert_eq(sem_init(&gate, 0, 0), 0);
    /* An idle chunk: run and done before submit returns, no settled call. */
    submit_job(q, 0, 0, NULL, 1);
    cr_assert_eq(t.done, 1);
    cr_assert_eq(t.settled_calls, 0);
    cr_assert(ps_apply_queue_idle(q));
    /* Behind a running job of the same chunk it must wait its turn. */
    submit(q, 1, 0, &gate);
    submit_job(q, 1, 1, NULL, 1);
    cr_assert_eq(t.done, 1, "jumped the chunk's queue");
    /* Another chunk is free, but a hold says later jobs wait. */
    ps_apply_queue_hold_from(q, ps_apply_queue_next_seq(q));
    submit_job(q, 0, 1, NULL, 1);
    cr_assert_eq(t.done, 1, "ran past a hold");
    sem_post(&gate);
    while (t.done < 3)
        uv_run(&loop, UV_RUN_ONCE);
    cr_assert_eq(atomic_load(&t.ran[0]), 1, "the held job ran");
    ps_apply_queue_hold_from(q, UINT64_MAX);
    uv_run(&loop, UV_RUN_DEFAULT);
    cr_assert_eq(t.done, 4);
    cr_assert_eq(t.order[1][0], 0);
    cr_assert_eq(t.order[1][1], 1);
    teardown(&loop, q);
    sem_destroy(&gate);
}
