/* Tests for the partition: that every process computes the same one, that
 * chunks tile every tensor exactly once in key order, that no chunk exceeds
 * chunk_bytes, that servers stay within one chunk of each other, that the
 * default models are balanced within 1.25x at 1..8 servers, and that
 * lookups by key and bad arguments behave as partition.h promises. */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "model_desc.h"
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
    cr_assert_leq(chunk_elems, chunk_bytes / sizeof(float));
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
            cr_assert_leq(c->numel, ps_partition_chunk_elems(p));
            if (c->offset + c->numel < spec->tensors[t].numel)
                cr_assert_eq(c->numel, ps_partition_chunk_elems(p), "only a last chunk is short");
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
    /* 4-3-2: tensors of 12, 3, 6 and 2 floats, one chunk each (4 KiB floor). */
    static const int tiny[] = {4, 3, 2};
    ps_model_spec spec = make_spec(tiny, 3);
    ps_partition *p;
    int empty = 0;

    check_partition(&spec, 64, PS_DEFAULT_CHUNK_BYTES);
    cr_assert_eq(ps_partition_init(&p, &spec, 64, PS_DEFAULT_CHUNK_BYTES), 0);
    cr_assert_eq(ps_partition_chunk_count(p), 4);
    for (int s = 0; s < 64; s++)
        empty += ps_partition_server_chunk_count(p, s) == 0;
    cr_assert_eq(empty, 60);
    ps_partition_free(p);
}

Test(partition, default_chunking_counts)
{
    ps_model_spec spec = make_spec(default_sizes, 4);
    ps_partition *p;

    /* 235146 floats over 2 servers in 16 shares: cut at 14697 floats (57 KiB),
     * under both 1 MiB and 64 KiB. fc1.weight (200704) takes 14 chunks,
     * fc2.weight (32768) 3, the others one each: 21 chunks. */
    cr_assert_eq(ps_partition_init(&p, &spec, 2, PS_DEFAULT_CHUNK_BYTES), 0);
    cr_assert_eq(ps_partition_chunk_elems(p), 14697);
    cr_assert_eq(ps_partition_chunk_count(p), 21);
    cr_assert_eq(ps_partition_find(p, ps_key_make(0, 13))->numel, 200704 - 13 * 14697);
    cr_assert_null(ps_partition_find(p, ps_key_make(0, 14)));
    ps_partition_free(p);
    cr_assert_eq(ps_partition_init(&p, &spec, 2, 65536), 0);
    cr_assert_eq(ps_partition_chunk_elems(p), 14697);
    ps_partition_free(p);
    /* A chunk_bytes below the share wins: 4 KiB chunks are 1024 floats. */
    cr_assert_eq(ps_partition_init(&p, &spec, 2, 4096), 0);
    cr_assert_eq(ps_partition_chunk_elems(p), 1024);
    cr_assert_eq(ps_partition_find(p, ps_key_make(0, 195))->numel, 200704 - 195 * 1024);
    cr_assert_null(ps_partition_find(p, ps_key_make(0, 196)));
    cr_assert_eq(ps_partition_find(p, ps_key_make(1, 0))->numel, 256);
    ps_partition_free(p);
}

/* Builds a model's table from description text for a 1x28x28, 10-class input. */
static ps_model_spec spec_from_text(const char *text)
{
    static const ps_act_shape in = {3, {1, 28, 28}};
    ps_model_desc d;
    ps_model_spec spec;
    char err[256];

    cr_assert_eq(ps_model_desc_parse(&d, text, "test", err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(ps_model_desc_resolve(&d, &in, 10, 42, &spec, err, sizeof(err)), 0, "%s", err);
    return spec;
}

/* Heaviest over lightest server, in bytes. */
static double imbalance(const ps_model_spec *spec, int n_servers, size_t chunk_bytes)
{
    ps_partition *p;
    size_t lo = SIZE_MAX, hi = 0;

    cr_assert_eq(ps_partition_init(&p, spec, n_servers, chunk_bytes), 0);
    for (int s = 0; s < n_servers; s++) {
        size_t n = ps_partition_server_numel(p, s);
        lo = n < lo ? n : lo;
        hi = n > hi ? n : hi;
    }
    ps_partition_free(p);
    cr_assert_gt(lo, 0, "%d servers: one holds nothing", n_servers);
    return (double)hi / (double)lo;
}

/* The issue this planner fixes: with 1 MiB chunks fc1.weight was one chunk and
 * server 0 of 2 held 85% of the MLP. Now the heaviest of 1..8 servers holds at
 * most 1.25x the lightest, for the default MLP and the example CNN. */
Test(partition, default_models_balanced_at_1_to_8_servers)
{
    ps_model_spec mlp = make_spec(default_sizes, 4);
    ps_model_spec cnn = spec_from_text("conv2d out=32 kernel=3 pad=1\nrelu\nmaxpool kernel=2\n"
                                       "conv2d out=64 kernel=3 pad=1\nrelu\nmaxpool kernel=2\n"
                                       "flatten\ndense out=128\nrelu\ndropout p=0.25\n"
                                       "dense out=classes\n");
    static const size_t chunk_bytes[] = {1 << 20, 4 << 20, 65536};

    for (size_t k = 0; k < sizeof(chunk_bytes) / sizeof(chunk_bytes[0]); k++)
        for (int s = 1; s <= 8; s++) {
            double a = imbalance(&mlp, s, chunk_bytes[k]), b = imbalance(&cnn, s, chunk_bytes[k]);
            cr_assert_leq(a, 1.25, "MLP, %d servers, chunk %zu: %.3f", s, chunk_bytes[k], a);
            cr_assert_leq(b, 1.25, "CNN, %d servers, chunk %zu: %.3f", s, chunk_bytes[k], b);
            check_partition(&cnn, s, chunk_bytes[k]);
        }
}

Test(partition, placement_is_largest_first_on_least_loaded)
{
    static const int tiny[] = {4, 3, 2};
    ps_model_spec spec = make_spec(tiny, 3);
    ps_partition *p;

    /* One chunk per tensor, sizes 12, 3, 6, 2: fc1.weight goes to server 0,
     * the next largest (fc2.weight) to server 1, and the small ones then fill
     * server 1, the less loaded (6, then 9 < 12). */
    cr_assert_eq(ps_partition_init(&p, &spec, 2, PS_DEFAULT_CHUNK_BYTES), 0);
    cr_assert_eq(ps_partition_find(p, ps_key_make(0, 0))->server, 0);
    for (uint32_t t = 1; t < 4; t++)
        cr_assert_eq(ps_partition_find(p, ps_key_make(t, 0))->server, 1, "tensor %u", t);
    cr_assert_eq(ps_partition_server_numel(p, 1), 11);
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
    /* 235146 floats in 24 shares: cut at 9798 floats. */
    cr_assert_eq(ps_partition_find(p, ps_key_make(0, 3))->offset, 3 * 9798);
    ps_partition_free(p);
}
