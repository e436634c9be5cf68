/* The rules of a rows request (PULL_ROWS, PUSH_ROWS; proto/shardps.proto)
 * as pure functions, as server/rules/validate.h holds those of dense frames: what
 * its header may announce (checked before any payload byte is buffered),
 * and the payload taken apart into IDs and float32 gradients, refusing
 * repeated IDs and non-finite gradients. The server calls them before a
 * request changes anything; tests call them directly
 * (tests/unit/test_row_wire.c) and a fuzz target feeds the parser
 * (tests/fuzz/fuzz_rows.c).
 *
 * Payloads: PULL_ROWS carries row_count IDs, 8 little-endian bytes each;
 * PUSH_ROWS the IDs, then row_count x dim gradient values of its dtype
 * (4 bytes in float32, 2 in float16 or bfloat16). Each returns 0 or a
 * negative code with the reason in why. */
#ifndef PS_ROW_WIRE_H
#define PS_ROW_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "id_set.h"
#include "shardps.pb-c.h"

/* The largest --max-row-ids: 2^26 IDs, whose push at the largest dim fits
 * in 64 bits many times over and whose pull is 512 MiB of IDs. */
#define PS_ROWS_MAX_IDS_LIMIT ((uint64_t)1 << 26)

/* What a server holds that a request is judged against. */
typedef struct {
    uint32_t n_tables;    /* row tables the job declares */
    const uint32_t *dims; /* each table's dim */
    uint64_t max_ids;     /* --max-row-ids */
} ps_rows_limits;

/* A rows request's header: a PULL_ROWS or PUSH_ROWS with no keys, a
 * declared row table, row_count at most max_ids, a push's dtype float32,
 * float16 or bfloat16 (a pull's any: it carries no values), and exactly the
 * payload its count needs (ps_rows_payload_bytes). -PS_EPROTO, or -E2BIG
 * for a count over the limit. */
int ps_rows_check_header(const ps_rows_limits *lim, const Shardps__Header *h, char *why,
                         size_t why_len);

/* Bytes of the payload of a request of count IDs of a table of dim:
 * count x 8 for a pull, count x (8 + dim x value bytes) for a push.
 * count must be at most PS_ROWS_MAX_IDS_LIMIT and dim at most 65536 (no
 * overflow then). */
uint64_t ps_rows_payload_bytes(Shardps__MsgType type, Shardps__DType dtype, uint64_t count,
                               uint32_t dim);

/* The index of the first ID of ids[0..n) that appears earlier too, -1 when
 * they are unique, or -ENOMEM. seen: the caller's set, reset here. */
long ps_rows_find_repeat(const uint64_t *ids, size_t n, ps_id_set *seen);

/* Takes a payload of a request whose header passed ps_rows_check_header
 * apart: the count IDs into ids (the caller's, count uint64), and for a
 * push *grads = its count x dim float32 gradients: in the payload itself
 * (float32, read in place, so the payload must start 4-aligned and stay
 * while they are used) or widened from float16/bfloat16 into widened (the
 * caller's, count x dim floats; may be NULL for float32 and for a pull).
 * Refuses (-PS_EPROTO) an ID named twice and (-ERANGE) a push holding a NaN
 * or Inf value, naming the first; -ENOMEM when seen (the caller's, see
 * ps_rows_find_repeat) cannot grow. The caller discards ids and grads on a
 * refusal. */
int ps_rows_parse(const uint8_t *payload, Shardps__MsgType type, Shardps__DType dtype,
                  uint64_t count, uint32_t dim, uint64_t *ids, float *widened, const float **grads,
                  ps_id_set *seen, char *why, size_t why_len);

#endif
