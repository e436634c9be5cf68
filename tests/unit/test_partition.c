/* Tests for the partition: that every process computes the same one, that
 * chunks tile every tensor exactly once in key order, that no chunk exceeds
 * chunk_bytes, that servers stay within one chunk of each other, and that
 * lookups by key and bad arguments behave as partition.h promises. */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "partition.h"

/* Most servers check_partition handles; enough for the many-servers case. */
#define MAX_SERVERS 64

static const int default_sizes[] = {784, 256, 128, 10};
static const int wide_sizes[] = {784, 4096, 4096, 10};

static ps_model_spec make_spec(const int *sizes, int n)
{
    ps_model_spec spec;
    cr_assert_eq(ps_model_spec_init_mlp(&spec, sizes, n, 42), 0);
    return spec;
}

/* Checks every property the header promises for one partition. */
static void check_partition(const ps_model_spec *spec, int n_servers, size_t chunk_bytes)
{
    ps_partition *p = NULL, *q = NULL;
    size_t chunk_elems = chunk_bytes / sizeof(float), largest = 0, total = 0;
    size_t min_bytes = SIZE_MAX, max_bytes = 0;
    size_t numel_seen[MAX_SERVERS] = {0};
    int chunks_seen[MAX_SERVERS] = {0};
    int count, i = 0;

    cr_assert_leq(n_servers, MAX_SERVERS);
    cr_assert_eq(ps_partition_init(&p, spec, n_servers, chunk_bytes), 0);
    cr_assert_eq(ps_partition_init(&q, spec, n_servers, chunk_bytes), 0);
    cr_assert_eq(ps_partition_n_servers(p), n_servers);
    count = ps_partition_chunk_count(p);
    cr_assert_eq(ps_partition_chunk_count(q), count);

    for (int t = 0; t < spec->n_tensors; t++) {
        size_t next = 0;
        for (uint32_t ci = 0; next < spec->tensors[t].numel; ci++, i++) {
            cr_assert_lt(i, count, "ran out of chunks in tensor %d", t);
            const ps_chunk *c = ps_partition_chunk(p, i), *d = ps_partition_chunk(q, i);
            cr_assert_eq(memcmp(c, d, sizeof(*c)), 0, "chunk %d differs between inits", i);
            cr_assert_eq(c->tensor_id, (uint32_t)t);
            cr_assert_eq(c->chunk_index, ci);
            cr_assert_eq(c->key, ps_key_make((uint32_t)t, ci));
            cr_assert_eq(c->offset, next, "tensor %d chunk %u not contiguous", t, ci);
            cr_assert_gt(c->numel, 0);
            cr_assert_leq(c->numel, chunk_elems);
            cr_assert_leq(c->numel * sizeof(float), chunk_bytes);
            cr_assert(c->server >= 0 && c->server < n_servers);
            cr_assert_eq(ps_partition_find(p, c->key), c);
            next += c->numel;
            numel_seen[c->server] += c->numel;
            chunks_seen[c->server]++;
            if (c->numel > largest)
                largest = c->numel;
        }
        cr_assert_eq(next, spec->tensors[t].numel, "tensor %d overrun", t);
        /* The chunk index one past the end does not exist. */
        uint32_t n_chunks = ps_partition_chunk(p, i - 1)->chunk_index + 1;
        cr_assert_null(ps_partition_find(p, ps_key_make((uint32_t)t, n_chunks)));
    }
    cr_assert_eq(i, count, "chunks beyond the last tensor");
    cr_assert_null(ps_partition_chunk(p, count));
    cr_assert_null(ps_partition_chunk(p, -1));

    for (int s = 0; s < n_servers; s++) {
        size_t bytes = ps_partition_server_numel(p, s) * sizeof(float);
        cr_assert_eq(ps_partition_server_numel(p, s), numel_seen[s], "server %d numel", s);
        cr_assert_eq(ps_partition_server_chunk_count(p, s), chunks_seen[s], "server %d count", s);
        total += ps_partition_server_numel(p, s);
        min_bytes = bytes < min_bytes ? bytes : min_bytes;
        max_bytes = bytes > max_bytes ? bytes : max_bytes;
    }
    cr_assert_eq(total, spec->total_numel);
    cr_assert_leq(max_bytes - min_bytes, largest * sizeof(float),
                  "%d servers, chunk %zu: spread %zu > largest chunk %zu", n_servers, chunk_bytes,
                  max_bytes - min_bytes, largest * sizeof(float));
    cr_assert_eq(ps_partition_server_numel(p, n_servers), 0);
    cr_assert_eq(ps_partition_server_numel(p, -1), 0);
    cr_assert_eq(ps_partition_server_chunk_count(p, n_servers), 0);

    ps_partition_free(q);
    ps_partition_free(p);
}

Test(partition, default_model_all_server_counts_and_chunk_sizes)
{
    ps_model_spec spec = make_spec(default_sizes, 4);
    static const size_t chunk_bytes[] = {4, 26, 1000, 4096, 65536, 100000, 1 << 20};

    for (int s = 1; s <= 7; s++)
        for (size_t k = 0; k < sizeof(chunk_bytes) / sizeof(chunk_bytes[0]); k++)
            check_partition(&spec, s, chunk_bytes[k]);
}

Test(partition, wide_model)
{
    ps_model_spec spec = make_spec(wide_sizes, 4);
    static const size_t chunk_bytes[] = {4096, 65536, 1 << 20};

    for (int s = 1; s <= 7; s++)
        for (size_t k = 0; k < sizeof(chunk_bytes) / sizeof(chunk_bytes[0]); k++)
            check_partition(&spec, s, chunk_bytes[k]);
}

Test(partition, more_servers_than_chunks)
{
    ps_model_spec spec = make_spec(default_sizes, 4);
    ps_partition *p;
    int empty = 0;

    check_partition(&spec, 64, PS_DEFAULT_CHUNK_BYTES);
    cr_assert_eq(ps_partition_init(&p, &spec, 64, PS_DEFAULT_CHUNK_BYTES), 0);
    cr_assert_eq(ps_partition_chunk_count(p), 6);
    for (int s = 0; s < 64; s++)
        empty += ps_partition_server_chunk_count(p, s) == 0;
    cr_assert_eq(empty, 58);
    ps_partition_free(p);
}

Test(partition, default_chunking_counts)
{
    ps_model_spec spec = make_spec(default_sizes, 4);
    ps_partition *p;

    /* fc1.weight has 784 * 256 floats = 784 KiB, under 1 MiB: one chunk per
     * tensor. With 64 KiB chunks it takes 784 * 256 * 4 / 65536 = 12.25 -> 13. */
    cr_assert_eq(ps_partition_init(&p, &spec, 2, PS_DEFAULT_CHUNK_BYTES), 0);
    cr_assert_eq(ps_partition_chunk_count(p), 6);
    ps_partition_free(p);
    cr_assert_eq(ps_partition_init(&p, &spec, 2, 65536), 0);
    cr_assert_eq(ps_partition_find(p, ps_key_make(0, 12))->numel, 784 * 256 - 12 * 16384);
    cr_assert_null(ps_partition_find(p, ps_key_make(0, 13)));
    cr_assert_eq(ps_partition_find(p, ps_key_make(1, 0))->numel, 256);
    ps_partition_free(p);
}

Test(partition, placement_is_largest_first_on_least_loaded)
{
    ps_model_spec spec = make_spec(default_sizes, 4);
    ps_partition *p;

    /* One chunk per tensor, sizes 200704, 256, 32768, 128, 1280, 10: the
     * largest goes to server 0, the next largest (fc2.weight) to server 1,
     * and all the small ones then fill server 1, the less loaded. */
    cr_assert_eq(ps_partition_init(&p, &spec, 2, PS_DEFAULT_CHUNK_BYTES), 0);
    cr_assert_eq(ps_partition_find(p, ps_key_make(0, 0))->server, 0);
    for (uint32_t t = 1; t < 6; t++)
        cr_assert_eq(ps_partition_find(p, ps_key_make(t, 0))->server, 1, "tensor %u", t);
    ps_partition_free(p);
}

Test(partition, equal_sizes_tie_break_by_key)
{
    /* Two identical layers: equal chunks are placed in key order, so with
     * two servers fc1.weight's chunks alternate 0, 1, 0, 1. */
    static const int sizes[] = {64, 64, 64};
    ps_model_spec spec = make_spec(sizes, 3);
    ps_partition *p;

    cr_assert_eq(ps_partition_init(&p, &spec, 2, 1024), 0);
    for (uint32_t i = 0; i < 16; i++)
        cr_assert_eq(ps_partition_find(p, ps_key_make(0, i))->server, (int)(i % 2), "chunk %u", i);
    ps_partition_free(p);
}

Test(partition, find_nonexistent_keys)
{
    ps_model_spec spec = make_spec(default_sizes, 4);
    ps_partition *p;

    cr_assert_eq(ps_partition_init(&p, &spec, 3, 4096), 0);
    cr_assert_null(ps_partition_find(p, ps_key_make(6, 0)));
    cr_assert_null(ps_partition_find(p, ps_key_make(PS_MAX_TENSORS, 0)));
    cr_assert_null(ps_partition_find(p, ps_key_make(UINT32_MAX, 0)));
    cr_assert_null(ps_partition_find(p, ps_key_make(0, UINT32_MAX)));
    cr_assert_null(ps_partition_find(p, ps_key_make(5, 1)));
    cr_assert_null(ps_partition_find(p, UINT64_MAX));
    cr_assert_not_null(ps_partition_find(p, ps_key_make(5, 0)));
    ps_partition_free(p);
}

Test(partition, bad_arguments)
{
    ps_model_spec spec = make_spec(default_sizes, 4), bad = spec;
    ps_partition *p = NULL;

    cr_assert_eq(ps_partition_init(&p, &spec, 0, 4096), -EINVAL);
    cr_assert_eq(ps_partition_init(&p, &spec, -1, 4096), -EINVAL);
    cr_assert_eq(ps_partition_init(&p, &spec, 4097, 4096), -EINVAL);
    cr_assert_eq(ps_partition_init(&p, &spec, 2, 3), -EINVAL);
    cr_assert_eq(ps_partition_init(&p, &spec, 2, 0), -EINVAL);
    cr_assert_eq(ps_partition_init(&p, NULL, 2, 4096), -EINVAL);
    cr_assert_eq(ps_partition_init(NULL, &spec, 2, 4096), -EINVAL);
    bad.n_tensors = PS_MAX_TENSORS + 1;
    cr_assert_eq(ps_partition_init(&p, &bad, 2, 4096), -EINVAL);
    cr_assert_null(p);

    cr_assert_eq(ps_partition_init(&p, &spec, 4096, 4), 0);
    cr_assert_eq(ps_partition_n_servers(p), 4096);
    ps_partition_free(p);
    ps_partition_free(NULL);
}

Test(partition, spec_need_not_outlive_partition)
{
    ps_model_spec *spec = malloc(sizeof(*spec));
    ps_partition *p;

    cr_assert_not_null(spec);
    *spec = make_spec(default_sizes, 4);
    cr_assert_eq(ps_partition_init(&p, spec, 3, 65536), 0);
    free(spec);
    cr_assert_eq(ps_partition_find(p, ps_key_make(0, 3))->offset, 3 * 16384);
    ps_partition_free(p);
}
