/* The frame shape rules (see validate.h): types, payload sizes, dtypes,
 * gradient norms, the evaluator's frames and slots. Pure: no server, no
 * sockets. */
#include "validate.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>

#include "ps_error.h"
#include "tensor_table.h"

int ps_validate_worker_type(Shardps__MsgType type, char *why, size_t why_len)
{
    switch (type) {
    case SHARDPS__MSG_TYPE__PULL:
    case SHARDPS__MSG_TYPE__PUSH:
    case SHARDPS__MSG_TYPE__WRITE:
    case SHARDPS__MSG_TYPE__BYE:
    case SHARDPS__MSG_TYPE__HEARTBEAT:
    case SHARDPS__MSG_TYPE__PULL_ROWS:
    case SHARDPS__MSG_TYPE__PUSH_ROWS:
        return 0;
    default:
        snprintf(why, why_len, "unexpected message type %d from a worker", type);
        return -PS_EPROTO;
    }
}

int ps_validate_table_frame(Shardps__MsgType type, size_t n_keys, uint64_t payload_bytes, char *why,
                            size_t why_len)
{
    if (type != SHARDPS__MSG_TYPE__TABLE) {
        snprintf(why, why_len,
                 "expected the TABLE its HELLO's table_digest announced, got message type %d",
                 type);
        return -PS_EPROTO;
    }
    if (n_keys != 0 || payload_bytes == 0) {
        snprintf(why, why_len, "a TABLE carries the packed table and no keys");
        return -PS_EPROTO;
    }
    if (payload_bytes > PS_TABLE_MAX_BYTES) {
        snprintf(why, why_len, "a TABLE of %llu bytes; the tensor table takes at most %zu",
                 (unsigned long long)payload_bytes, PS_TABLE_MAX_BYTES);
        return -PS_ETOOBIG;
    }
    return 0;
}

int ps_validate_evaluator_type(Shardps__MsgType type, char *why, size_t why_len)
{
    switch (type) {
    case SHARDPS__MSG_TYPE__PULL:
    case SHARDPS__MSG_TYPE__BYE:
    case SHARDPS__MSG_TYPE__HEARTBEAT:
        return 0;
    case SHARDPS__MSG_TYPE__PUSH:
        snprintf(why, why_len, "an evaluator is read-only: it cannot push");
        return -PS_EPROTO;
    default:
        snprintf(why, why_len, "unexpected message type %d from an evaluator", type);
        return -PS_EPROTO;
    }
}

int ps_validate_evaluator_slot(int max_connections, int world, int evaluators, char *why,
                               size_t why_len)
{
    int room = max_connections - world, slots = room / 2 > 0 ? room / 2 : 1;

    if (evaluators < slots)
        return 0;
    snprintf(why, why_len,
             "all %d evaluator slots of this server are taken (half of --max-connections %d "
             "beyond the %d workers'); come back",
             slots, max_connections, world);
    return -EAGAIN;
}

int ps_validate_payload(Shardps__MsgType type, Shardps__DType dtype, int unused, size_t f32_bytes,
                        uint64_t payload_bytes, char *why, size_t why_len)
{
    int half = dtype == SHARDPS__DTYPE__DTYPE_F16 || dtype == SHARDPS__DTYPE__DTYPE_BF16;
    size_t numel = f32_bytes / sizeof(float);
    uint64_t want = half ? numel * sizeof(uint16_t) : f32_bytes;

    if (type != SHARDPS__MSG_TYPE__PUSH) {
        if (payload_bytes == 0)
            return 0;
        snprintf(why, why_len, "message type %d carries a %llu-byte payload; it takes none", type,
                 (unsigned long long)payload_bytes);
        return -PS_EPROTO;
    }
    if (unused) {
        if (payload_bytes == 0 && dtype == SHARDPS__DTYPE__DTYPE_UNKNOWN)
            return 0;
        snprintf(why, why_len,
                 "a push marked unused carries no gradient, but this one has a %llu-byte payload "
                 "of dtype %d",
                 (unsigned long long)payload_bytes, dtype);
        return -PS_EPROTO;
    }
    if (!half && dtype != SHARDPS__DTYPE__DTYPE_F32) {
        snprintf(why, why_len,
                 "push with dtype %d; only float32 (1), float16 (2) and bfloat16 (3) are supported",
                 dtype);
        return -PS_EPROTO;
    }
    if (payload_bytes != want) {
        snprintf(why, why_len,
                 "%s push payload is %llu bytes, its keys need %llu (%zu values of %zu bytes)",
                 !half                                ? "float32"
                 : dtype == SHARDPS__DTYPE__DTYPE_F16 ? "float16"
                                                      : "bfloat16",
                 (unsigned long long)payload_bytes, (unsigned long long)want, numel,
                 half ? sizeof(uint16_t) : sizeof(float));
        return -PS_EPROTO;
    }
    return 0;
}

int ps_validate_grad_norm(const float *g, size_t n, double max_norm, char *why, size_t why_len)
{
    double sum = 0;

    if (max_norm <= 0)
        return 0;
    for (size_t i = 0; i < n; i++)
        sum += (double)g[i] * g[i];
    if (sqrt(sum) <= max_norm)
        return 0;
    snprintf(why, why_len, "gradient norm %.3g over --max-grad-norm %.3g", sqrt(sum), max_norm);
    return -ERANGE;
}
