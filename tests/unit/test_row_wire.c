/* The rules of a rows request (server/rows/row_wire), called directly: the
 * header's checks (a count over --max-row-ids, 100 million IDs among them,
 * refused before any payload byte; a payload whose size disagrees with its
 * count; keys, an undeclared table, dtypes), and the parser (IDs and
 * widened gradients taken apart, a repeated ID and a NaN or Inf gradient
 * refused and named). */
#include <criterion/criterion.h>

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "half.h"
#include "ps_error.h"
#include "row_wire.h"

static const uint32_t dims[] = {4, 64};
static const ps_rows_limits lim = {2, dims, 65536};

static Shardps__Header hdr(Shardps__MsgType type, uint32_t table, uint64_t count,
                           Shardps__DType dtype)
{
    Shardps__Header h = SHARDPS__HEADER__INIT;

    h.type = type;
    h.row_table = table;
    h.row_count = count;
    h.dtype = dtype;
    h.payload_bytes = ps_rows_payload_bytes(type, dtype, count, dims[table < 2 ? table : 0]);
    return h;
}

static void refused(const Shardps__Header *h, int code, const char *needle)
{
    char why[256] = "";

    cr_assert_eq(ps_rows_check_header(&lim, h, why, sizeof(why)), code, "%s: %s", needle, why);
    cr_assert_not_null(strstr(why, needle), "\"%s\" lacks \"%s\"", why, needle);
}

Test(row_wire, payload_sizes)
{
    cr_assert_eq(ps_rows_payload_bytes(SHARDPS__MSG_TYPE__PULL_ROWS, 0, 10, 64), 80);
    cr_assert_eq(
        ps_rows_payload_bytes(SHARDPS__MSG_TYPE__PUSH_ROWS, SHARDPS__DTYPE__DTYPE_F32, 10, 64),
        10 * (8 + 256));
    cr_assert_eq(
        ps_rows_payload_bytes(SHARDPS__MSG_TYPE__PUSH_ROWS, SHARDPS__DTYPE__DTYPE_BF16, 10, 64),
        10 * (8 + 128));
    /* The largest count at the largest dim does not overflow. */
    cr_assert_eq(ps_rows_payload_bytes(SHARDPS__MSG_TYPE__PUSH_ROWS, SHARDPS__DTYPE__DTYPE_F32,
                                       PS_ROWS_MAX_IDS_LIMIT, 65536),
                 PS_ROWS_MAX_IDS_LIMIT * (8 + 65536 * 4));
}

Test(row_wire, good_headers_pass)
{
    Shardps__Header h;
    char why[256];

    h = hdr(SHARDPS__MSG_TYPE__PULL_ROWS, 1, 65536, 0);
    cr_assert_eq(ps_rows_check_header(&lim, &h, why, sizeof(why)), 0, "%s", why);
    h = hdr(SHARDPS__MSG_TYPE__PUSH_ROWS, 0, 0, SHARDPS__DTYPE__DTYPE_F32);
    cr_assert_eq(ps_rows_check_header(&lim, &h, why, sizeof(why)), 0, "an empty push: %s", why);
    h = hdr(SHARDPS__MSG_TYPE__PUSH_ROWS, 1, 7, SHARDPS__DTYPE__DTYPE_F16);
    cr_assert_eq(ps_rows_check_header(&lim, &h, why, sizeof(why)), 0, "%s", why);
}

Test(row_wire, a_count_over_the_limit_is_refused_on_the_header)
{
    Shardps__Header h = hdr(SHARDPS__MSG_TYPE__PULL_ROWS, 0, 100000000, 0);

    refused(&h, -E2BIG, "100000000 row IDs; this server takes at most 65536 (--max-row-ids)");
    h = hdr(SHARDPS__MSG_TYPE__PUSH_ROWS, 0, 65537, SHARDPS__DTYPE__DTYPE_F32);
    refused(&h, -E2BIG, "at most 65536");
}

Test(row_wire, a_payload_that_disagrees_with_its_count_is_refused)
{
    Shardps__Header h = hdr(SHARDPS__MSG_TYPE__PUSH_ROWS, 1, 3, SHARDPS__DTYPE__DTYPE_F32);

    h.payload_bytes -= 4;
    refused(&h, -PS_EPROTO, "carries 788 bytes; it needs 792");
    h = hdr(SHARDPS__MSG_TYPE__PULL_ROWS, 0, 3, 0);
    h.payload_bytes = 0;
    refused(&h, -PS_EPROTO, "it needs 24");
    /* Float32 values announced as bfloat16's size. */
    h = hdr(SHARDPS__MSG_TYPE__PUSH_ROWS, 0, 2, SHARDPS__DTYPE__DTYPE_BF16);
    h.dtype = SHARDPS__DTYPE__DTYPE_F32;
    refused(&h, -PS_EPROTO, "it needs 48");
}

Test(row_wire, keys_tables_types_and_dtypes)
{
    Shardps__Header h = hdr(SHARDPS__MSG_TYPE__PULL_ROWS, 0, 1, 0);
    uint64_t key = 1;

    h.n_keys = 1;
    h.keys = &key;
    refused(&h, -PS_EPROTO, "names 1 keys");
    h = hdr(SHARDPS__MSG_TYPE__PULL_ROWS, 2, 1, 0);
    refused(&h, -PS_EPROTO, "row table 2; the job declares 2");
    h = hdr(SHARDPS__MSG_TYPE__PUSH, 0, 1, 0);
    refused(&h, -PS_EPROTO, "no rows request");
    h = hdr(SHARDPS__MSG_TYPE__PUSH_ROWS, 0, 1, (Shardps__DType)4);
    refused(&h, -PS_EPROTO, "dtype 4");
}

Test(row_wire, repeats_are_found)
{
    uint64_t ids[] = {5, 9, 1, 7, 9, 3};
    ps_id_set seen = {0};

    cr_assert_eq(ps_rows_find_repeat(ids, 6, &seen), 4);
    ids[4] = 4;
    cr_assert_eq(ps_rows_find_repeat(ids, 6, &seen), -1);
    cr_assert_eq(ps_rows_find_repeat(ids, 0, &seen), -1);
    /* Sets are reused across requests: the last one's IDs are forgotten. */
    cr_assert_eq(ps_rows_find_repeat(ids + 3, 3, &seen), -1);
    ps_id_set_free(&seen);
}

/* Moved here from the accumulator's and the store's tests when the wire
 * became the one place that refuses an ID named twice: a push naming one
 * twice is refused whole, and the same IDs once each pass; among many IDs
 * with only high bits set a repeat is found too. */
Test(row_wire, a_push_naming_an_id_twice_is_refused_whole)
{
    uint64_t bad[4] = {2, 5, 6, 5}, ids[4];
    uint8_t payload[4 * 8 + 4 * 2 * 4];
    float g[8] = {0};
    const float *got = NULL;
    ps_id_set seen = {0};
    char why[256];

    memcpy(payload, bad, sizeof(bad));
    memcpy(payload + sizeof(bad), g, sizeof(g));
    cr_assert_eq(ps_rows_parse(payload, SHARDPS__MSG_TYPE__PUSH_ROWS, SHARDPS__DTYPE__DTYPE_F32, 4,
                               2, ids, NULL, &got, &seen, why, sizeof(why)),
                 -PS_EPROTO);
    cr_assert_not_null(strstr(why, "names ID 5 twice"), "%s", why);
    /* The refused push left no mark: the same IDs once each are fine. */
    bad[3] = 8;
    memcpy(payload, bad, sizeof(bad));
    cr_assert_eq(ps_rows_parse(payload, SHARDPS__MSG_TYPE__PUSH_ROWS, SHARDPS__DTYPE__DTYPE_F32, 4,
                               2, ids, NULL, &got, &seen, why, sizeof(why)),
                 0, "%s", why);
    {
        uint64_t many[2000];
        for (int i = 0; i < 2000; i++)
            many[i] = (uint64_t)i << 44;
        many[1999] = many[3];
        cr_assert_eq(ps_rows_find_repeat(many, 2000, &seen), 1999);
        many[1999] = (uint64_t)1999 << 44;
        cr_assert_eq(ps_rows_find_repeat(many, 2000, &seen), -1);
    }
    ps_id_set_free(&seen);
}

Test(row_wire, a_push_is_taken_apart)
{
    uint8_t payload[3 * 8 + 3 * 4 * 4];
    uint64_t in_ids[3] = {UINT64_MAX, 0, 42}, ids[3];
    float in_g[12], g[12];
    const float *got = NULL;
    ps_id_set seen = {0};
    char why[256];

    for (int i = 0; i < 12; i++)
        in_g[i] = (float)i - 5.5f;
    memcpy(payload, in_ids, sizeof(in_ids));
    memcpy(payload + 24, in_g, sizeof(in_g));
    cr_assert_eq(ps_rows_parse(payload, SHARDPS__MSG_TYPE__PUSH_ROWS, SHARDPS__DTYPE__DTYPE_F32, 3,
                               4, ids, NULL, &got, &seen, why, sizeof(why)),
                 0, "%s", why);
    cr_assert_eq(memcmp(ids, in_ids, sizeof(ids)), 0);
    cr_assert_eq(got, (const float *)(const void *)(payload + 24), "float32 is read in place");
    cr_assert_eq(memcmp(got, in_g, sizeof(in_g)), 0);
    /* bfloat16: widened exactly (these values are representable). */
    {
        uint8_t p16[3 * 8 + 12 * 2];
        uint16_t h[12];
        ps_f32_to_bf16(h, in_g, 12);
        memcpy(p16, in_ids, sizeof(in_ids));
        memcpy(p16 + 24, h, sizeof(h));
        cr_assert_eq(ps_rows_parse(p16, SHARDPS__MSG_TYPE__PUSH_ROWS, SHARDPS__DTYPE__DTYPE_BF16, 3,
                                   4, ids, g, &got, &seen, why, sizeof(why)),
                     0, "%s", why);
        cr_assert_eq(got, g);
        cr_assert_eq(memcmp(g, in_g, sizeof(g)), 0);
    }
    ps_id_set_free(&seen);
}

Test(row_wire, duplicates_and_nan_are_refused_by_name)
{
    uint8_t payload[3 * 8 + 3 * 4 * 4];
    uint64_t in_ids[3] = {11, 12, 11}, ids[3];
    float in_g[12] = {0};
    const float *g;
    ps_id_set seen = {0};
    char why[256];

    memcpy(payload, in_ids, sizeof(in_ids));
    memcpy(payload + 24, in_g, sizeof(in_g));
    cr_assert_eq(ps_rows_parse(payload, SHARDPS__MSG_TYPE__PULL_ROWS, 0, 3, 4, ids, NULL, NULL,
                               &seen, why, sizeof(why)),
                 -PS_EPROTO);
    cr_assert_not_null(strstr(why, "names ID 11 twice (again at position 2 of 3)"), "%s", why);
    in_ids[2] = 13;
    in_g[9] = NAN;
    memcpy(payload, in_ids, sizeof(in_ids));
    memcpy(payload + 24, in_g, sizeof(in_g));
    cr_assert_eq(ps_rows_parse(payload, SHARDPS__MSG_TYPE__PUSH_ROWS, SHARDPS__DTYPE__DTYPE_F32, 3,
                               4, ids, NULL, &g, &seen, why, sizeof(why)),
                 -ERANGE);
    cr_assert_not_null(strstr(why, "row of ID 13, element 1"), "%s", why);
    in_g[9] = INFINITY;
    memcpy(payload + 24, in_g, sizeof(in_g));
    cr_assert_eq(ps_rows_parse(payload, SHARDPS__MSG_TYPE__PUSH_ROWS, SHARDPS__DTYPE__DTYPE_F32, 3,
                               4, ids, NULL, &g, &seen, why, sizeof(why)),
                 -ERANGE);
    ps_id_set_free(&seen);
}
