/* This server's row tables (see row_tables.h). */
#include "row_tables.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "ps_log.h"
#include "row_table.h"

/* The declarations' bounds (common/row_table.h, which includes no server
 * header) are the stores'. */
_Static_assert(PS_ROW_TABLE_MAX_DIM == PS_ROW_MAX_DIM &&
                   PS_ROW_TABLE_MAX_ADMIT == PS_ROW_MAX_ADMIT &&
                   PS_ROW_TABLE_MAX_CAP == PS_ROW_MAX_CAPACITY,
               "row_table.h's bounds are row_store.h's");

/* Admission sketches: 4 rows of 2^20 counters (8 MiB per table that uses
 * admission), about 1% overcounting at a few million distinct IDs. */
#define PS__ROW_TABLES_ADMIT_DEPTH 4
#define PS__ROW_TABLES_ADMIT_WIDTH (1u << 20)

/* The per-row optimizer of a declaration: the job's, or the one it names
 * with the job's momentum and weight decay. */
static void ps__row_tables_opt(const ps_kv_server_config *cfg, const ps_row_table_spec *t,
                               ps_row_opt_config *o)
{
    memset(o, 0, sizeof(*o));
    o->opt = cfg->opt;
    if (t->optimizer[0] == '\0' || ps_row_opt_parse(t->optimizer, o) < 0)
        return;
    o->opt.momentum = cfg->opt.momentum;
    o->opt.weight_decay = cfg->opt.weight_decay;
}

int ps_row_tables_build(ps_row_tables *r, const ps_kv_server_config *cfg, const ps_model_spec *spec)
{
    int n = spec->n_row_tables;
    char why[256];
    int rc = -ENOMEM;

    memset(r, 0, sizeof(*r));
    if (n == 0)
        return 0;
    r->t = calloc((size_t)n, sizeof(*r->t));
    if (r->t == NULL)
        goto fail;
    r->n = n;
    for (int i = 0; i < n; i++) {
        const ps_row_table_spec *t = &spec->row_tables[i];
        ps_row_store_config c;

        memset(&c, 0, sizeof(c));
        c.table_id = (uint32_t)i;
        c.dim = t->dim;
        c.init = t->init;
        c.init.seed = spec->seed;
        ps__row_tables_opt(cfg, t, &c.opt);
        c.admit_after = t->admit_after;
        c.sketch_depth = PS__ROW_TABLES_ADMIT_DEPTH;
        c.sketch_width = PS__ROW_TABLES_ADMIT_WIDTH;
        c.sketch_seed = spec->seed ^ (uint64_t)i;
        c.expire_after = t->expire_after;
        c.capacity = t->capacity;
        rc = ps_row_store_create(&r->t[i].store, &c, why, sizeof(why));
        if (rc == 0 && cfg->staleness == 0)
            rc = ps_row_accum_create(&r->t[i].accum, t->dim);
        if (rc < 0) {
            ps_error("row table %s: %s", t->name, rc == -ENOMEM ? "out of memory" : why);
            goto fail;
        }
    }
    ps_info("server %d of %d holds its share of %d row table%s", cfg->server_index,
            cfg->num_servers, n, n == 1 ? "" : "s");
    return 0;
fail:
    ps_row_tables_free(r);
    return rc;
}

void ps_row_tables_free(ps_row_tables *r)
{
    for (int i = 0; r->t && i < r->n; i++) {
        ps_row_store_free(r->t[i].store);
        ps_row_accum_free(r->t[i].accum);
    }
    free(r->t);
    ps_id_set_free(&r->seen);
    memset(r, 0, sizeof(*r));
}

void ps_row_tables_counters(const ps_row_tables *r, ps_row_counters *sum)
{
    memset(sum, 0, sizeof(*sum));
    for (int i = 0; i < r->n; i++) {
        ps_row_counters c;
        ps_row_store_counters(r->t[i].store, &c);
        sum->stored += c.stored;
        sum->created += c.created;
        sum->admitted += c.admitted;
        sum->evicted += c.evicted;
        sum->bytes += c.bytes;
    }
}
