/* The job's clocks as the consistency rules take them: one view (who is
 * live, at which clock; what this server has applied) built from the
 * membership and the units, for the chunks or for one row table, whose
 * sync step is its own. Pure reads of both. */
#ifndef PS_CLOCKS_H
#define PS_CLOCKS_H

#include "consistency.h"
#include "membership.h"
#include "units.h"

/* The view as of now, for unit's kind: the chunks (unit < n_chunks, or -1;
 * stepless when none of them is pushed) or, in sync mode, the row table's
 * own step. */
void ps_clocks_view(const ps_job *j, const ps_units *u, int unit, ps_consistency_view *v);

#endif
