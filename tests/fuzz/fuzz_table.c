/* libFuzzer target: the tensor-table decoder (common/tensor_table.c), what a
 * server runs on the table a HELLO declares, a worker on the one a WELCOME
 * carries, and a restore on the one a checkpoint stores. The input is a
 * packed TensorTable. Invariants, for a table the checks accept: it packs
 * and decodes back to itself (the same fingerprint, no difference named);
 * it equals itself; it cuts into chunks on 1 to 4 servers; every tensor's
 * initial values at its ends are finite and within its bound (the fans'
 * sum overflowed once). Also replayed by make test (fuzz_replay_table). */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

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
    ps_tensor_table_wire w;
    Shardps__TensorTable *t, *again;
    uint8_t *packed;
    size_t len;
    char why[256];

    t = ps_tensor_table_unpack(data, size, why, sizeof(why));
    if (t == NULL)
        return 0;
    if (ps_tensor_table_from_wire(t, FT_MAX_BYTES, &spec, why, sizeof(why)) < 0) {
        shardps__tensor_table__free_unpacked(t, NULL);
        return 0;
    }
    shardps__tensor_table__free_unpacked(t, NULL);
    if (ps_tensor_table_diff(&spec, &spec, "a", "b", why, sizeof(why)) != 0)
        abort();
    ps_tensor_table_to_wire(&spec, &w);
    len = shardps__tensor_table__get_packed_size(&w.msg);
    packed = malloc(len ? len : 1);
    if (packed == NULL)
        return 0;
    shardps__tensor_table__pack(&w.msg, packed);
    again = ps_tensor_table_unpack(packed, len, why, sizeof(why));
    if (again == NULL || ps_tensor_table_from_wire(again, FT_MAX_BYTES, &back, why, sizeof(why)) ||
        ps_tensor_table_diff(&spec, &back, "a", "b", why, sizeof(why)) != 0 ||
        ps_model_spec_fingerprint(&spec) != ps_model_spec_fingerprint(&back))
        abort();
    shardps__tensor_table__free_unpacked(again, NULL);
    free(packed);
    for (int servers = 1; servers <= 4; servers++) {
        ps_partition *part;
        size_t numel = 0;
        if (ps_partition_init(&part, &spec, servers, 1 << 16) < 0)
            continue;
        for (int s = 0; s < servers; s++)
            numel += ps_partition_server_numel(part, s);
        ps_partition_free(part);
        if (numel != spec.total_numel)
            abort();
    }
    ft_check_values(&spec);
    return 0;
}
