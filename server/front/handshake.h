/* The handshake: the first frames of a connection. A HELLO is checked
 * against this server's job settings, cluster and tensor table (and, with
 * --auth-token-file, proven by a challenge and response before anything it
 * says is looked at); a declarer's table follows in a TABLE frame, which
 * must match the digest its HELLO carried; the worker is then admitted at
 * the job's current clock with a WELCOME (a joiner first gets the table in
 * a TABLE frame), or refused with a REJECT naming why. A HELLO with the
 * evaluator's role is admitted read-only, without a rank (and told the
 * table as a joiner is).
 *
 * The handshake judges, and moves a peer through its handshake's states; an
 * evaluator it admits takes a connection slot and no place in the job.
 * What its verdict asks of the rest of the server (a table adopted or
 * withdrawn, a worker admitted into the membership, the job starting) is
 * the front's to carry out, in kv_server.c: a HELLO that is ready to be
 * judged comes back to the front as PS_HS_READY. */
#ifndef PS_HANDSHAKE_H
#define PS_HANDSHAKE_H

#include <stddef.h>
#include <stdint.h>

#include "kv_config.h"
#include "membership.h"
#include "peer.h"
#include "tensors.h"
#include "units.h"

typedef struct {
    const ps_kv_server_config *cfg; /* borrowed, as the rest */
    const ps_job *job;
    ps_peers *peers;
    const ps_tensors *tensors;
    const ps_units *units;
    int max_connections; /* cfg's, or its default */
} ps_handshake;

/* What a frame of the handshake, or a HELLO judged, comes to. */
typedef enum {
    PS_HS_REFUSED = -1, /* the peer was refused (or closed): nothing else to do */
    PS_HS_WAIT = 0,     /* more of the handshake is to come */
    PS_HS_READY,        /* the HELLO (p->hello when kept, with its TABLE) is to be judged */
    PS_HS_JOIN,         /* judged: it joins the table held */
    PS_HS_ADOPT,        /* judged: the server holds no table; the declared one is adopted */
    PS_HS_OUTRANKS,     /* judged: rank 0's table replaces the one other ranks declared */
} ps_hs_verdict;

/* HELLO, AUTH_RESPONSE and TABLE, in the states that await them. READY
 * leaves the HELLO to be judged: *hello, *request_id and (a declarer's)
 * *spec, decoded from its TABLE into the caller's spec (the caller frees
 * it with ps_model_spec_free when *has_spec). */
ps_hs_verdict ps_handshake_frame(ps_handshake *hs, ps_peer *p, const ps_frame *f,
                                 const Shardps__Hello **hello, uint64_t *request_id,
                                 ps_model_spec *spec, int *has_spec);
/* Judges a worker's HELLO (spec: its declared table, NULL for a joiner)
 * against the settings, the table held, the partition and the ranks.
 * OUTRANKS leaves the difference in why. */
ps_hs_verdict ps_handshake_judge(ps_handshake *hs, ps_peer *p, const Shardps__Hello *hello,
                                 const ps_model_spec *spec, char *why, size_t why_len);
/* p, judged, takes its rank and the job's clock (where a worker joining
 * now starts), and an admitted peer's limits. The front then admits it into
 * the membership (membership.h) and welcomes it. */
void ps_handshake_place(ps_handshake *hs, ps_peer *p, const Shardps__Hello *hello);
/* The WELCOME of p, placed (declared: it declared the table, so it is not
 * sent one; the declaring rank 0 is asked for its values). Returns 0, or -1
 * when it could not be sent (the connection closes). */
int ps_handshake_welcome(ps_handshake *hs, ps_peer *p, uint64_t request_id, int declared);
/* Judges an evaluator's HELLO and admits it read-only: PS_HS_JOIN, or
 * PS_HS_REFUSED (p refused or closed). When every evaluator slot was taken,
 * *gives_way is the admitted evaluator whose slot p took (peer.h's
 * ps_peers_evaluator_to_replace), for the front to let go; else NULL. */
ps_hs_verdict ps_handshake_evaluator(ps_handshake *hs, ps_peer *p, const Shardps__Hello *hello,
                                     uint64_t request_id, ps_peer **gives_way);
/* At start, without auth: one line (server 0's) on what a stranger can do. */
void ps_handshake_say_strangers(const ps_kv_server_config *cfg);

#endif
