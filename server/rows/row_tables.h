/* This server's share of the job's row tables: for each row table the
 * table declares (TensorTable.row_tables), the row store holding the rows
 * common/row_place puts here and, in sync mode, the accumulator of the
 * step's pushes. Built with the table, freed with it; their clocks are
 * units like the chunks' (units.h). What a table is (its name, dim,
 * initializer, optimizer) stays in the declaration, the one place it is
 * written. */
#ifndef PS_ROW_TABLES_H
#define PS_ROW_TABLES_H

#include "id_set.h"
#include "kv_config.h"
#include "model_spec.h"
#include "row_accum.h"
#include "row_store.h"

typedef struct {
    ps_row_store *store;
    ps_row_accum *accum; /* sync: the step's pushes summed */
} ps_row_table;

typedef struct {
    int n;
    ps_row_table *t; /* n of them (owned) */
    ps_id_set seen;  /* a request's IDs, to find repeats (reused) */
} ps_row_tables;

/* One store (and accumulator) per row table of spec, for cfg's server
 * (both read now). Returns 0 or a negative code (logged) with nothing
 * built. */
int ps_row_tables_build(ps_row_tables *r, const ps_kv_server_config *cfg,
                        const ps_model_spec *spec);
void ps_row_tables_free(ps_row_tables *r);
/* The stores' counters, summed. */
void ps_row_tables_counters(const ps_row_tables *r, ps_row_counters *sum);

#endif
