/* The job's embedding tables as declared: per table its name, the row
 * dimension, the initializer of rows not yet stored, the per-row optimizer
 * (or the job's), admission, expiry and capacity. They travel with the
 * tensor table (TensorTable.row_tables in a TABLE frame; row table id =
 * position), are covered by its digest (model_spec.h's
 * ps_model_spec_digest) and stored in checkpoints with it, so every
 * process of a job agrees on them as it agrees on the dense tensors.
 *
 * This module holds the declaration's rules as pure functions (checked on
 * receipt, field by field, each refusal naming the table and the field),
 * its translation to and from the wire, and the comparison that names the
 * first difference. What a server builds from a declaration is
 * server/rows/row_store's; where a row lives is common/row_place's. */
#ifndef PS_ROW_TABLE_H
#define PS_ROW_TABLE_H

#include <stddef.h>
#include <stdint.h>

#include "row_init.h"
#include "shardps.pb-c.h"

/* Row tables a job declares at most. */
#define PS_MAX_ROW_TABLES 256
/* As a tensor's (model_spec.h's PS_MAX_NAME_BYTES, asserted there). */
#define PS_ROW_TABLE_NAME_BYTES 255
/* server/rows/row_store.h's bounds, repeated here since common/ includes no
 * server header (asserted equal in server/rows/row_tables.c). */
#define PS_ROW_TABLE_MAX_DIM   65536
#define PS_ROW_TABLE_MAX_ADMIT 65535
#define PS_ROW_TABLE_MAX_CAP   ((uint64_t)UINT32_MAX - 1)
/* --max-row-ids when none is given: the most IDs one rows request names. */
#define PS_ROWS_DEFAULT_MAX_IDS ((uint64_t)1 << 20)

/* A plain value. */
typedef struct {
    char name[PS_ROW_TABLE_NAME_BYTES + 1];
    uint32_t dim;
    /* kind, lo, hi, mean, std; seed is the tensor table's (set on adoption). */
    ps_row_init init;
    /* "" for the job's optimizer, else a name server/rows/row_optimizer parses
     * (ps_row_table_optimizer_ok). */
    char optimizer[24];
    uint32_t admit_after;  /* 0, 1: stored at the first push; N: at the Nth */
    uint32_t expire_after; /* 0: never */
    uint64_t capacity;     /* 0: unbounded */
} ps_row_table_spec;

/* The per-row optimizer that only row tables have: Adagrad with one
 * accumulator per row (server/rows/row_optimizer.h). */
#define PS_ROW_TABLE_ROWWISE_ADAGRAD "rowwise-adagrad"

/* Whether name is "" or one of the per-row optimizers' names: the job's
 * (job_kinds.h: "sgd", "nesterov", "adam", "adamw", "adagrad") or
 * PS_ROW_TABLE_ROWWISE_ADAGRAD. */
int ps_row_table_optimizer_ok(const char *name);

/* The rules of one declaration: a name as a tensor's, dim 1 to
 * PS_ROW_TABLE_MAX_DIM, an initializer ps_row_init_check accepts, a known
 * optimizer, admit_after up to PS_ROW_TABLE_MAX_ADMIT, capacity up to
 * PS_ROW_TABLE_MAX_CAP. Returns 0, or -PS_EPROTO with the reason (naming
 * the table and the field) in why. Pure. */
int ps_row_table_check(const ps_row_table_spec *t, char *why, size_t why_len);

/* A declaration someone sent, as a spec (seed: the tensor table's), once
 * every field passed ps_row_table_check. Returns 0 or -PS_EPROTO with the
 * reason in why (out is then undefined). */
int ps_row_table_from_decl(const Shardps__RowTableDecl *d, uint64_t seed, ps_row_table_spec *out,
                           char *why, size_t why_len);

/* Fills d (initialised here) from t; d's strings point into t (borrowed:
 * valid while t lives and stays in place). */
void ps_row_table_to_decl(const ps_row_table_spec *t, Shardps__RowTableDecl *d);

/* Compares two lists of row tables. Returns 0 when equal, else 1 with the
 * first difference in msg ("row table users: dim 64 from the worker, 32 on
 * this server"). Pure. */
int ps_row_table_diff(const ps_row_table_spec *a, int na, const ps_row_table_spec *b, int nb,
                      const char *a_side, const char *b_side, char *msg, size_t len);

#endif
