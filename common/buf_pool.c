/* Buffer pool (see buf_pool.h). Single-threaded: every get and put of one
 * pool happens on its owner's loop thread. */
#include "buf_pool.h"

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

/* Sits in front of every buffer; its size keeps the data 64-byte aligned. */
typedef struct ps__buf_head {
    _Alignas(64) struct ps__buf_head *next; /* in the idle list */
    ps_buf_pool *pool;
    size_t cap;
} ps__buf_head;

struct ps_buf_pool {
    ps__buf_head *idle; /* smallest first */
    size_t idle_bytes, max_idle_bytes;
    size_t out;         /* buffers handed out and not yet put back */
    size_t allocations; /* new buffers made by get */
    int closed;
};

int ps_buf_pool_init(ps_buf_pool **out, size_t max_idle_bytes)
{
    ps_buf_pool *p = calloc(1, sizeof(*p));

    if (p == NULL)
        return -ENOMEM;
    p->max_idle_bytes = max_idle_bytes;
    *out = p;
    return 0;
}

void *ps_buf_pool_get(ps_buf_pool *p, size_t size)
{
    ps__buf_head **link = &p->idle, *h;

    while (*link && (*link)->cap < size)
        link = &(*link)->next;
    h = *link;
    if (h) {
        *link = h->next;
        p->idle_bytes -= h->cap;
    } else {
        if (size > SIZE_MAX - sizeof(*h))
            return NULL;
        h = aligned_alloc(_Alignof(ps__buf_head), (sizeof(*h) + size + _Alignof(ps__buf_head) - 1) &
                                                      ~(_Alignof(ps__buf_head) - 1));
        if (h == NULL)
            return NULL;
        h->pool = p;
        h->cap = size;
        p->allocations++;
    }
    h->next = NULL;
    p->out++;
    return h + 1;
}

static void ps__pool_free_idle(ps_buf_pool *p)
{
    while (p->idle && p->idle_bytes > p->max_idle_bytes) {
        ps__buf_head *h = p->idle;
        p->idle = h->next;
        p->idle_bytes -= h->cap;
        free(h);
    }
}

void ps_buf_pool_put(void *buf)
{
    ps__buf_head *h, **link;
    ps_buf_pool *p;

    if (buf == NULL)
        return;
    h = (ps__buf_head *)buf - 1;
    p = h->pool;
    p->out--;
    link = &p->idle;
    while (*link && (*link)->cap < h->cap)
        link = &(*link)->next;
    h->next = *link;
    *link = h;
    p->idle_bytes += h->cap;
    ps__pool_free_idle(p);
    if (p->closed && p->out == 0)
        free(p);
}

size_t ps_buf_pool_allocations(const ps_buf_pool *p)
{
    return p->allocations;
}

void ps_buf_pool_close(ps_buf_pool *p)
{
    if (p == NULL)
        return;
    p->closed = 1;
    p->max_idle_bytes = 0;
    ps__pool_free_idle(p);
    if (p->out == 0)
        free(p);
}
