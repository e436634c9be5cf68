/* libshardps's embedding tables (include/shardps.h, 1.4): declaring them,
 * finding one by name, pulling and pushing rows. Every argument and the
 * handle's state are checked here before the client (lib/transfer/kv_rows.c)
 * sees them; the handle's parts come through shardps_handle.h. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "kv_client.h"
#include "model_spec.h"
#include "row_table.h"
#include "shardps.h"
#include "shardps_handle.h"

_Static_assert(SHARDPS_ROW_INIT_ZEROS == PS_ROW_INIT_ZEROS &&
                   SHARDPS_ROW_INIT_UNIFORM == PS_ROW_INIT_UNIFORM &&
                   SHARDPS_ROW_INIT_NORMAL == PS_ROW_INIT_NORMAL,
               "the public row initializers are row_init.h's");

int shardps_declare_rows(shardps *h, const shardps_row_table *t, size_t size)
{
    ps_row_table_spec r;
    char why[256];
    int rc;

    if ((rc = ps_shardps_may_declare(h, "shardps_declare_rows")) < 0)
        return rc;
    if (t == NULL || size != sizeof(*t) || t->name == NULL)
        return ps_shardps_err(h, -EINVAL,
                              "shardps_declare_rows: need a table with a name and size %zu "
                              "(sizeof(shardps_row_table)), got %zu",
                              sizeof(*t), size);
    memset(&r, 0, sizeof(r));
    if (strlen(t->name) >= sizeof(r.name) ||
        (t->optimizer && strlen(t->optimizer) >= sizeof(r.optimizer)))
        return ps_shardps_err(h, -EINVAL,
                              "shardps_declare_rows: a name or optimizer name too long");
    snprintf(r.name, sizeof(r.name), "%s", t->name);
    snprintf(r.optimizer, sizeof(r.optimizer), "%s", t->optimizer ? t->optimizer : "");
    r.dim = t->dim;
    r.init = (ps_row_init){(ps_row_init_kind)t->init, 0, t->mean, t->std, t->lo, t->hi};
    r.admit_after = t->admit_after;
    r.expire_after = t->expire_after;
    r.capacity = t->capacity;
    rc = ps_model_spec_add_row_table(&h->cfg.spec, &r, why, sizeof(why));
    if (rc < 0)
        return ps_shardps_err(h, rc == -ENOMEM ? rc : -EINVAL, "shardps_declare_rows: %s",
                              rc == -ENOMEM ? "out of memory" : why);
    return 0;
}

/* The spec the handle knows: what it declared, or once connected the
 * job's (a joiner learns it from the servers). */
static const ps_model_spec *ps__spec(shardps *h)
{
    ps_kv_client *kv = h->kv;

    return kv ? ps_kv_client_spec(kv) : &h->cfg.spec;
}

int shardps_row_table_find(const shardps *h, const char *name, uint32_t *dim)
{
    const ps_model_spec *spec;

    if (h == NULL || name == NULL)
        return -EINVAL;
    /* Reading only: ps__spec does not change the handle. */
    spec = ps__spec((shardps *)h);
    for (int i = 0; i < spec->n_row_tables; i++)
        if (strcmp(spec->row_tables[i].name, name) == 0) {
            if (dim)
                *dim = spec->row_tables[i].dim;
            return i;
        }
    return -ENOENT;
}

/* The checks pull and push share: connected, a table, IDs and a buffer of
 * n x dim floats. */
static int ps__rows_args(shardps *h, const char *fn, int table, const uint64_t *ids, size_t n,
                         const float *buf, size_t len)
{
    const ps_model_spec *spec;
    uint32_t dim;

    if (h == NULL)
        return -EINVAL;
    if (h->kv == NULL)
        return ps_shardps_err(h, -EINVAL, "%s: not connected (shardps_connect first)", fn);
    spec = ps__spec(h);
    if (table < 0 || table >= spec->n_row_tables)
        return ps_shardps_err(h, -EINVAL, "%s: no row table %d (the job has %d)", fn, table,
                              spec->n_row_tables);
    dim = spec->row_tables[table].dim;
    if (n >= ((size_t)1 << 31) || (n > 0 && (ids == NULL || buf == NULL)) || len / dim != n ||
        len % dim != 0)
        return ps_shardps_err(h, -EINVAL,
                              "%s: row table %s: %zu IDs take %zu x %u floats, got %zu%s", fn,
                              spec->row_tables[table].name, n, n, dim, len,
                              n > 0 && (ids == NULL || buf == NULL) ? " (a NULL pointer)" : "");
    return 0;
}

int shardps_pull_rows(shardps *h, int table, uint64_t clock, const uint64_t *ids, size_t n,
                      float *out, size_t out_len)
{
    int rc = ps__rows_args(h, "shardps_pull_rows", table, ids, n, out, out_len);

    if (rc < 0)
        return rc;
    rc = ps_kv_client_pull_rows(h->kv, (uint32_t)table, clock, ids, n, out);
    return rc < 0 ? ps_shardps_kv_err(h, rc, "shardps_pull_rows") : 0;
}

int shardps_push_rows(shardps *h, int table, const uint64_t *ids, size_t n, const float *grads,
                      size_t grads_len)
{
    int rc = ps__rows_args(h, "shardps_push_rows", table, ids, n, grads, grads_len);

    if (rc == 0)
        rc = ps_shardps_may_write(h, "shardps_push_rows");
    if (rc < 0)
        return rc;
    rc = ps_kv_client_push_rows(h->kv, (uint32_t)table, ids, n, grads);
    /* The server takes one push per table per step from a worker (a second
     * is dropped as a repeat), so a push is neither split nor sent twice. */
    if (rc == -E2BIG)
        return ps_shardps_err(h, rc,
                              "shardps_push_rows: row table %s: more unique IDs for one server "
                              "than --max-row-ids (%d) allows in a request; a step's push of a "
                              "table is one request per server, so it cannot be split: raise "
                              "--max-row-ids or push fewer IDs per step",
                              ps__spec(h)->row_tables[table].name, h->opts.max_row_ids);
    if (rc == -EALREADY)
        return ps_shardps_err(h, rc,
                              "shardps_push_rows: row table %s was already pushed at this step; "
                              "servers take one push per table per step: sum the step's "
                              "gradients of a table into one push (repeated IDs are summed)",
                              ps__spec(h)->row_tables[table].name);
    return rc < 0 ? ps_shardps_kv_err(h, rc, "shardps_push_rows") : 0;
}
