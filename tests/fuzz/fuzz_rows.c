/* libFuzzer target: the rows request rules (server/rows/row_wire.c), what a
 * server runs on every PULL_ROWS and PUSH_ROWS: the header's checks, then
 * the payload taken apart. The input is 12 bytes standing for the header
 * (byte 0: bit 0 set for a push; byte 1: the dtype; bytes 2-3: the table's
 * dim - 1, little-endian; bytes 4-11: row_count, little-endian), then the
 * payload, whose size is payload_bytes. Invariants, for a request the
 * rules accept: its payload is exactly what its count needs, its IDs are
 * unique and read back as the payload's bytes, and a push's gradients are
 * finite and, in float32, the payload's bits. Also replayed by make test
 * (fuzz_replay_rows). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "row_wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    Shardps__Header h = SHARDPS__HEADER__INIT;
    uint32_t dim;
    ps_rows_limits lim = {1, &dim, 4096};
    uint64_t *ids = NULL;
    float *widened = NULL;
    const float *grads = NULL;
    ps_id_set seen = {0};
    char why[256];
    int push;

    if (size < 12)
        return 0;
    push = data[0] & 1;
    h.type = push ? SHARDPS__MSG_TYPE__PUSH_ROWS : SHARDPS__MSG_TYPE__PULL_ROWS;
    h.dtype = (Shardps__DType)data[1];
    dim = 1 + (uint32_t)(data[2] | data[3] << 8);
    memcpy(&h.row_count, data + 4, 8);
    h.payload_bytes = size - 12;
    if (ps_rows_check_header(&lim, &h, why, sizeof(why)) < 0)
        return 0;
    if (h.payload_bytes != ps_rows_payload_bytes(h.type, h.dtype, h.row_count, dim) ||
        h.row_count > lim.max_ids)
        abort();
    ids = malloc((h.row_count + 1) * sizeof(*ids));
    widened = push ? malloc((h.row_count * dim + 1) * sizeof(*widened)) : NULL;
    if (ids == NULL || (push && widened == NULL))
        abort();
    if (ps_rows_parse(data + 12, h.type, h.dtype, h.row_count, dim, ids, widened, &grads, &seen,
                      why, sizeof(why)) == 0) {
        if (memcmp(ids, data + 12, h.row_count * 8) != 0 ||
            ps_rows_find_repeat(ids, h.row_count, &seen) != -1)
            abort();
        for (uint64_t i = 0; push && i < h.row_count * dim; i++)
            if (!isfinite(grads[i]))
                abort();
        if (push && h.dtype == SHARDPS__DTYPE__DTYPE_F32 &&
            memcmp(grads, data + 12 + h.row_count * 8, h.row_count * dim * 4) != 0)
            abort();
    }
    free(ids);
    free(widened);
    ps_id_set_free(&seen);
    return 0;
}
