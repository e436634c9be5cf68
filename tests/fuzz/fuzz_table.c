/* libFuzzer target: the tensor-table decoder (common/tensor_table.c), what a
 * server runs on a TABLE frame's payload (the table a worker declares), a
 * joining worker on the TABLE a server sends, and a restore on the table a
 * checkpoint stores. The input is a packed TensorTable. Invariants, for a table the checks accept:
 * it packs and decodes back to itself (the same fingerprint, no difference named); it equals
 * itself; it cuts into chunks on 1 to 4 servers; every tensor's initial values at its ends are
 * finite and within its bound (the fans' sum overflowed once); digests agree. Also replayed by make
 * test (fuzz_replay_table). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model_spec.h"
#include "partition.h"
#include "tensor_table.h"

/* A server's --max-model-bytes while fuzzing: large tables are refused by
 * it, not built. */
#define FT_MAX_BYTES ((size_t)16 << 20)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void ft_check_values(const ps_model_spec *spec)
{
    for (int t = 0; t < spec->n_tensors; t++) {
        const ps_tensor_spec *ts = &spec->tensors[t];
        double bound = ts->init == PS_INIT_HE_UNIFORM ? sqrt(6.0 / ts->fan_in)
                       : ts->init == PS_INIT_XAVIER_UNIFORM
                           ? sqrt(6.0 / ((double)ts->fan_in + ts->fan_out))
                           : 0;
        float v[2];

        ps_model_spec_init_values(spec, t, 0, 1, &v[0]);
        ps_model_spec_init_values(spec, t, ts->numel - 1, 1, &v[1]);
        for (int i = 0; i < 2; i++)
            if (!isfinite(v[i]) || fabs(v[i]) > (float)bound)
                abort();
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ps_model_spec spec, back;
    uint8_t *packed, d1[PS_TABLE_DIGEST_BYTES], d2[PS_TABLE_DIGEST_BYTES];
    size_t len;
    char why[256];

    /* What a server does with a TABLE frame's payload (and a restore with
     * a checkpoint's table). */
    if (ps_tensor_table_decode(data, size, FT_MAX_BYTES, &spec, why, sizeof(why)) < 0)
        return 0;
    if (ps_tensor_table_diff(&spec, &spec, "a", "b", why, sizeof(why)) != 0)
        abort();
    if (ps_tensor_table_pack(&spec, &packed, &len) < 0)
        abort();
    if (ps_tensor_table_decode(packed, len, FT_MAX_BYTES, &back, why, sizeof(why)) < 0 ||
        ps_tensor_table_diff(&spec, &back, "a", "b", why, sizeof(why)) != 0)
        abort();
    ps_model_spec_digest(&spec, d1);
    ps_model_spec_digest(&back, d2);
    if (memcmp(d1, d2, sizeof(d1)) != 0)
        abort();
    ps_model_spec_free(&back);
    free(packed);
    for (int servers = 1; servers <= 4; servers++) {
        ps_partition *part;
        size_t words = 0;
        if (ps_partition_init(&part, &spec, servers, 1 << 16) < 0)
            continue;
        for (int s = 0; s < servers; s++)
            words += ps_partition_server_numel(part, s);
        ps_partition_free(part);
        if (words != spec.total_words)
            abort();
    }
    ft_check_values(&spec);
    ps_model_spec_free(&spec);
    return 0;
}
