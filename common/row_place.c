/* Row placement by hash (see row_place.h for the definition, which is part
 * of the stored format). */
#include "row_place.h"

#include <errno.h>

#include "mix64.h"

uint64_t ps_row_hash(uint32_t table_id, uint64_t id)
{
    return ps_mix64(ps_mix64((uint64_t)table_id) ^ id);
}

uint32_t ps_row_place(uint32_t table_id, uint64_t id, uint32_t n_servers)
{
    return ps_row_server_of(ps_row_hash(table_id, id), n_servers);
}

int ps_row_place_many(uint32_t table_id, const uint64_t *ids, size_t n, uint32_t n_servers,
                      uint32_t *out)
{
    /* The table's half of the hash once, not once per ID. */
    uint64_t salt = ps_mix64((uint64_t)table_id);

    if (n_servers == 0)
        return -EINVAL;
    for (size_t i = 0; i < n; i++)
        out[i] = ps_row_server_of(ps_mix64(salt ^ ids[i]), n_servers);
    return 0;
}
