/* A pull as its handler judged it, waiting to be answered: the reply is
 * built from the weights (or rows) as they are when the consistency rules
 * and the apply queue allow it (front/held.h). One type for both kinds of
 * unit: a pull of dense chunks names their local indices, a pull of a row
 * table its IDs. */
#ifndef PS_PULL_H
#define PS_PULL_H

#include <stddef.h>
#include <stdint.h>

#include "peer.h"

typedef struct ps_pull ps_pull;

struct ps_pull {
    ps_pull *next;
    ps_peer *peer; /* borrowed: the pull is dropped before its peer is freed */
    uint64_t request_id;
    uint64_t clock;
    uint64_t since; /* loop time (ms) it was held */
    uint64_t told;  /* loop time (ms) its worker was last told why it waits; 0: never */
    int table;      /* the row table pulled, or -1: dense chunks */
    size_t n;       /* chunks or IDs */
    int *locals;    /* dense: local chunk indices, in the order requested (owned) */
    uint64_t *ids;  /* rows: the IDs (owned) */
    /* Dense: 0 until the clock rule allows an answer; then the apply
     * queue's number at that moment: the reply waits for every update
     * submitted before. */
    uint64_t seq;
    /* An evaluator's: no clock rule holds it, only the start (the weights
     * are filled then). lo, hi: the lowest and highest of its chunks' steps
     * applied (their `newest`), taken when it is numbered, which is when the
     * updates it will see are fixed. */
    int snapshot;
    uint64_t lo, hi;
};

/* A pull of p for request_id at clock, taking over locals or ids (one of
 * them; owned from now on). NULL when out of memory (they are then freed). */
ps_pull *ps_pull_new(ps_peer *p, uint64_t request_id, uint64_t clock, int table, size_t n,
                     int *locals, uint64_t *ids);
void ps_pull_free(ps_pull *q);

#endif
