/* The life of the job's tensor table on a server, as pure rules (like
 * consistency.h: no sockets, no server struct), so every transition is
 * tested directly and later messages that bring tables (a table of its own
 * on the wire, embedding tables) reuse the same states.
 *
 *            declare                 start              filled           applied
 *   NONE ──────────────▶ DECLARED ─────────▶ FILLING ─────────▶ FILLED ─────────▶ COMMITTED
 *    ▲   (configure:          │                  │                  │                ▲
 *    │    pinned)             │  the last declarer left, or a check failed           │
 *    │                        ▼                  ▼                  ▼           restore (a
 *    └──── released ───── WITHDRAWN ◀────────────┴──────────────────┘           verified file)
 *
 * - declared: a HELLO's table passed every check and is held: the partition
 *   is cut, nothing is filled, no memory is committed for its values. Its
 *   declarers are the live peers whose HELLO carried it.
 * - filling / filled: every rank has joined, so the job may be real and
 *   training starts; the chunks get their memory and initial values off the
 *   event loop, first in each chunk's queue (a pull is answered, an update
 *   applied, only after its chunks' fills).
 * - committed: a step has been applied (or the table came from a verified
 *   checkpoint). Only now may it be checkpointed, and from now on it is the
 *   job's for good: workers that leave are waited for, not forgotten.
 * - withdrawn: before the commit, its last declarer left (a stranger's HELLO
 *   then takes nothing with it) or a check failed (no memory to fill it).
 *   Nothing of it survives: the peers that joined it are closed, who joined
 *   and what they planned is forgotten, and once the work still in flight on
 *   it has drained it is freed (released) and the server holds none.
 *   A declared table also gives way to rank 0's when rank 0 declares
 *   another (outranked): the job's starting point is rank 0's model.
 * A table the embedding program configures is pinned: no peer declared it,
 * so no peer's leaving withdraws it. */
#ifndef PS_TABLE_LIFE_H
#define PS_TABLE_LIFE_H

typedef enum {
    PS_TABLE_NONE,
    PS_TABLE_DECLARED,
    PS_TABLE_FILLING,
    PS_TABLE_FILLED,
    PS_TABLE_COMMITTED,
    PS_TABLE_WITHDRAWN,
} ps_table_state;

typedef enum {
    PS_TABLE_DECLARE,         /* a HELLO's table is adopted */
    PS_TABLE_CONFIGURE,       /* the embedding program's table is adopted (pinned) */
    PS_TABLE_RESTORE,         /* a verified checkpoint's table is adopted, or restored into the
                                 configured one */
    PS_TABLE_DECLARER_JOINED, /* a peer whose HELLO carried the table was admitted */
    PS_TABLE_DECLARER_LEFT,   /* such a peer left */
    PS_TABLE_START,           /* every rank has joined */
    PS_TABLE_FILL_DONE,       /* every chunk has its memory and initial values */
    PS_TABLE_APPLIED,         /* a step was applied */
    PS_TABLE_CHECK_FAILED,    /* the table cannot be held after all */
    PS_TABLE_OUTRANKED,       /* rank 0 declares another table: the job's is rank 0's */
    PS_TABLE_RELEASED,        /* a withdrawn table's work drained; it is freed */
} ps_table_event;

/* A plain value; zeroed, it is a server holding no table. */
typedef struct {
    ps_table_state state;
    int declarers; /* live peers whose HELLO carried the table */
    int pinned;    /* configured by the embedding program: never withdrawn */
} ps_table_life;

/* What an event asks of the server. */
typedef enum {
    PS_TABLE_KEEP,     /* nothing more than the new state */
    PS_TABLE_FILL,     /* give every chunk its memory and initial values */
    PS_TABLE_WITHDRAW, /* forget the table and everything joined to it */
} ps_table_action;

/* Applies ev to t. Returns the action it asks for, or -EINVAL (t
 * unchanged) for an event that cannot happen in t's state: declaring over a
 * held table, applying a step before the table is filled, withdrawing a
 * committed one. A withdrawn table takes no news but its release.
 * Outranked: a table declared by other ranks gives way to rank 0's, so the
 * job's table never depends on who started first, but only while it is
 * declared (training has not started, nothing is filled) and no program
 * configured it; later -EINVAL, and rank 0 is refused as any rank whose
 * table differs. */
int ps_table_life_step(ps_table_life *t, ps_table_event ev);

/* The server holds a table HELLOs are compared with (declared up to
 * committed). */
int ps_table_life_holds(const ps_table_life *t);
/* Its chunks have their values: pulls may be answered, pushes applied. */
int ps_table_life_filled(const ps_table_life *t);
/* Rank 0 declaring another table would outrank this one (only a declared
 * table, not configured). */
int ps_table_life_may_outrank(const ps_table_life *t);
/* Only a committed table is written to a checkpoint. */
int ps_table_life_may_checkpoint(const ps_table_life *t);

const char *ps_table_state_name(ps_table_state s);

#endif
