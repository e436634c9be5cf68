/* The rules of a rows request (see row_wire.h). Pure: no server, no
 * sockets. */
#include "row_wire.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "half.h"
#include "ps_error.h"
#include "row_store.h"

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
               "IDs and values travel little-endian and are read in place");

static int ps__is_push(Shardps__MsgType type)
{
    return type == SHARDPS__MSG_TYPE__PUSH_ROWS;
}

static size_t ps__value_bytes(Shardps__DType dtype)
{
    return dtype == SHARDPS__DTYPE__DTYPE_F16 || dtype == SHARDPS__DTYPE__DTYPE_BF16 ? 2 : 4;
}

uint64_t ps_rows_payload_bytes(Shardps__MsgType type, Shardps__DType dtype, uint64_t count,
                               uint32_t dim)
{
    if (!ps__is_push(type))
        return count * sizeof(uint64_t);
    return count * (sizeof(uint64_t) + (uint64_t)dim * ps__value_bytes(dtype));
}

int ps_rows_check_header(const ps_rows_limits *lim, const Shardps__Header *h, char *why,
                         size_t why_len)
{
    uint64_t want;
    uint32_t dim;

    if (h->type != SHARDPS__MSG_TYPE__PULL_ROWS && h->type != SHARDPS__MSG_TYPE__PUSH_ROWS) {
        snprintf(why, why_len, "message type %d is no rows request", h->type);
        return -PS_EPROTO;
    }
    if (h->n_keys != 0) {
        snprintf(why, why_len, "a rows request names %zu keys; its IDs travel in the payload",
                 h->n_keys);
        return -PS_EPROTO;
    }
    if (h->row_table >= lim->n_tables) {
        snprintf(why, why_len, "row table %" PRIu32 "; the job declares %" PRIu32, h->row_table,
                 lim->n_tables);
        return -PS_EPROTO;
    }
    if (h->row_count > lim->max_ids) {
        snprintf(why, why_len,
                 "a request of %" PRIu64 " row IDs; this server takes at most %" PRIu64
                 " (--max-row-ids)",
                 h->row_count, lim->max_ids);
        return -E2BIG;
    }
    if (ps__is_push(h->type) && h->dtype != SHARDPS__DTYPE__DTYPE_F32 &&
        h->dtype != SHARDPS__DTYPE__DTYPE_F16 && h->dtype != SHARDPS__DTYPE__DTYPE_BF16) {
        snprintf(why, why_len,
                 "rows push with dtype %d; only float32 (1), float16 (2) and bfloat16 (3)",
                 h->dtype);
        return -PS_EPROTO;
    }
    dim = lim->dims[h->row_table];
    want = ps_rows_payload_bytes(h->type, h->dtype, h->row_count, dim);
    if (h->payload_bytes != want) {
        snprintf(why, why_len,
                 "a rows %s of %" PRIu64 " IDs of row table %" PRIu32 " (dim %" PRIu32
                 ") carries %" PRIu64 " bytes; it needs %" PRIu64,
                 ps__is_push(h->type) ? "push" : "pull", h->row_count, h->row_table, dim,
                 h->payload_bytes, want);
        return -PS_EPROTO;
    }
    return 0;
}

long ps_rows_find_repeat(const uint64_t *ids, size_t n, ps_id_set *seen)
{
    if (n < 2 || ps_id_set_reset(seen, n) < 0)
        return n < 2 ? -1 : -ENOMEM;
    for (size_t i = 0; i < n; i++)
        if (ps_id_set_put(seen, ids[i], 0) >= 0)
            return (long)i;
    return -1;
}

int ps_rows_parse(const uint8_t *payload, Shardps__MsgType type, Shardps__DType dtype,
                  uint64_t count, uint32_t dim, uint64_t *ids, float *widened, const float **grads,
                  ps_id_set *seen, char *why, size_t why_len)
{
    const float *g;
    size_t n = (size_t)count, values = n * dim;
    const uint8_t *v = payload + n * sizeof(uint64_t);
    long rep;

    memcpy(ids, payload, n * sizeof(uint64_t));
    rep = ps_rows_find_repeat(ids, n, seen);
    if (rep == -ENOMEM) {
        snprintf(why, why_len, "out of memory checking %zu IDs for repeats", n);
        return -ENOMEM;
    }
    if (rep >= 0) {
        snprintf(why, why_len,
                 "a rows request names ID %" PRIu64 " twice (again at position %ld of %zu); "
                 "the client sums repeats",
                 ids[rep], rep, n);
        return -PS_EPROTO;
    }
    if (!ps__is_push(type))
        return 0;
    if (dtype == SHARDPS__DTYPE__DTYPE_F16 || dtype == SHARDPS__DTYPE__DTYPE_BF16) {
        /* IDs are 8 bytes each, so the halves start 2-aligned. */
        if (dtype == SHARDPS__DTYPE__DTYPE_F16)
            ps_f16_to_f32(widened, (const uint16_t *)(const void *)v, values);
        else
            ps_bf16_to_f32(widened, (const uint16_t *)(const void *)v, values);
        g = widened;
    } else {
        /* float32 is read in place: 8-byte IDs keep it 4-aligned in a
         * payload that starts aligned. */
        g = (const float *)(const void *)v;
    }
    *grads = g;
    for (size_t i = 0; i < values; i++)
        if (!isfinite(g[i])) {
            snprintf(why, why_len,
                     "a rows push holds a non-finite gradient (row of ID %" PRIu64
                     ", element %zu); the table is unchanged",
                     ids[i / dim], i % dim);
            return -ERANGE;
        }
    return 0;
}
