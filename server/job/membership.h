/* Who is in the job on this server: the live worker of each rank, the ranks
 * that have joined, finished or been lost, where a worker joining with
 * nobody live resumes, and when the job is over. Also the job's rate: the
 * schedule's span is fixed when the job starts, from the plans of the
 * ranks there.
 *
 * Training begins once all `world` ranks are present (a rank that left
 * before counts as never having said hello), so every run sees the same
 * sequence of barriers whatever the start-up order. A started rank that
 * leaves unfinished may rejoin; after --rejoin-timeout it is lost, and the
 * job ends without it. Only the front changes this state, through these
 * functions, after a handler's verdict; everything here runs on the loop
 * thread. */
#ifndef PS_MEMBERSHIP_H
#define PS_MEMBERSHIP_H

#include <stdint.h>

#include "kv_config.h"
#include "peer.h"

typedef struct {
    const ps_kv_server_config *cfg; /* borrowed from the server */
    ps_peer **workers;              /* by rank; NULL while not live (borrowed) */
    uint64_t *live_clocks;          /* scratch for ps_job_min_live_clock */
    int live;
    int started; /* every rank has joined once */
    int joined;  /* ranks that have joined at least once */
    int n_lost;
    uint8_t *has_joined;     /* by rank: joined (training starts when all have) */
    uint8_t *finished;       /* by rank: said goodbye */
    uint8_t *lost;           /* by rank: left unfinished and did not rejoin in time */
    uint64_t *left_at;       /* by rank: loop time (ms) it left unfinished; 0: it did not */
    uint64_t resume_clock;   /* where a worker joining with nobody live starts */
    uint64_t restored_clock; /* the clock of the checkpoint restored (0: none) */
    /* The rate schedule's span: configured, restored, or fixed at the start
     * from the plans of the ranks there. */
    uint64_t total_steps;
    uint32_t rejoin_timeout_ms; /* cfg's, or its default */
    uint64_t clock_lead;        /* cfg's max_clock_lead, or its default */
} ps_job;

/* cfg is borrowed and must outlive j. Returns 0 or -ENOMEM. */
int ps_job_init(ps_job *j, const ps_kv_server_config *cfg);
void ps_job_free(ps_job *j);

/* p, whose HELLO passed every check, becomes its rank's live worker (a
 * rank counted as lost is back). */
void ps_job_admit(ps_job *j, ps_peer *p);
/* p, admitted and welcomed, counts as joined (before the start) or as live
 * again (after). */
void ps_job_joined(ps_job *j, const ps_peer *p);
/* Every rank has joined and the job has not started. */
int ps_job_complete(const ps_job *j);
/* Training starts: the schedule's span is fixed, from --total-steps, a
 * checkpoint, or else the most steps any rank here planned. */
void ps_job_start(ps_job *j);
/* p leaves the job (BYE, a lost connection, silence, its table withdrawn)
 * at loop time now (ms): it stops counting at once. Before the start its
 * rank counts as never having joined; after, a rank that did not finish
 * may rejoin until the rejoin timeout. Returns 1, or 0 when p was not a
 * live worker (nothing changed). */
int ps_job_leave(ps_job *j, ps_peer *p, const char *why, uint64_t now);
/* The rank said goodbye after the start: it finished. */
void ps_job_finished(ps_job *j, uint32_t rank);
/* Ranks that left unfinished more than the rejoin timeout before now (loop
 * ms) are counted as lost. Returns how many were. */
int ps_job_check_rejoins(ps_job *j, uint64_t now);
/* The job has started, nobody is live and every rank has finished or is
 * lost; otherwise says which rank is still waited for. */
int ps_job_over(const ps_job *j);
/* A withdrawn table takes the job with it: who joined, finished or was
 * lost, and where it would resume, are forgotten. */
void ps_job_forget(ps_job *j);
/* A restore: the job resumes at clock, with the schedule's span the file's. */
void ps_job_restored(ps_job *j, uint64_t clock, uint64_t total_steps);

/* The lowest clock of the live workers (UINT64_MAX: none live). */
uint64_t ps_job_min_live_clock(const ps_job *j);
/* The rate of a step, on the schedule's span, damped by staleness when the
 * job asks for it. */
float ps_job_rate(const ps_job *j, uint64_t step, uint64_t staleness);

#endif
