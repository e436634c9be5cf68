/* ps-rows-ref: the embedding tables' C definitions of IDs and initial rows,
 * printed for the Python side to be checked against (tests/python/
 * test_recsys.py): the recommendation example's data generator maps Zipf
 * ranks to IDs with ps_zipf_scramble, and its single-process model starts
 * every row from the value shardps' uniform initializer gives it
 * (ps_row_init_values), both reimplemented in NumPy.
 *
 *   ps-rows-ref scramble SALT RANK...          one ID per rank (decimal)
 *   ps-rows-ref uniform SEED TABLE DIM LO HI ID...
 *                                              one row per ID, DIM floats
 *                                              as %a (exact)
 *
 * Numbers are decimal unsigned 64-bit integers (IDs too), LO and HI
 * decimal floats. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "row_init.h"
#include "zipf.h"

static int parse_u64(const char *s, uint64_t *out)
{
    char *end;

    errno = 0;
    *out = strtoull(s, &end, 10);
    return errno || end == s || *end || s[0] == '-' ? -EINVAL : 0;
}

static int parse_double(const char *s, double *out)
{
    char *end;

    errno = 0;
    *out = strtod(s, &end);
    return errno || end == s || *end ? -EINVAL : 0;
}

static int print_scramble(int argc, char **argv)
{
    uint64_t salt, rank;

    if (argc < 1 || parse_u64(argv[0], &salt))
        return -EINVAL;
    for (int i = 1; i < argc; i++) {
        if (parse_u64(argv[i], &rank))
            return -EINVAL;
        printf("%" PRIu64 "\n", ps_zipf_scramble(rank, salt));
    }
    return 0;
}

static int print_uniform(int argc, char **argv)
{
    ps_row_init init = {.kind = PS_ROW_INIT_UNIFORM};
    uint64_t table, dim, id;
    float row[1024];
    char why[256];

    if (argc < 5 || parse_u64(argv[0], &init.seed) || parse_u64(argv[1], &table) ||
        table > UINT32_MAX || parse_u64(argv[2], &dim) || dim == 0 || dim > 1024 ||
        parse_double(argv[3], &init.lo) || parse_double(argv[4], &init.hi))
        return -EINVAL;
    if (ps_row_init_check(&init, why, sizeof(why))) {
        fprintf(stderr, "ps-rows-ref: %s\n", why);
        return -EINVAL;
    }
    for (int i = 5; i < argc; i++) {
        if (parse_u64(argv[i], &id))
            return -EINVAL;
        ps_row_init_values(&init, (uint32_t)table, id, 0, (size_t)dim, row);
        for (uint64_t e = 0; e < dim; e++)
            printf("%a%c", (double)row[e], e + 1 < dim ? ' ' : '\n');
    }
    return 0;
}

int main(int argc, char **argv)
{
    int rc = -EINVAL;

    if (argc >= 2 && strcmp(argv[1], "scramble") == 0)
        rc = print_scramble(argc - 2, argv + 2);
    else if (argc >= 2 && strcmp(argv[1], "uniform") == 0)
        rc = print_uniform(argc - 2, argv + 2);
    if (rc) {
        fprintf(stderr, "usage: ps-rows-ref scramble SALT RANK... | "
                        "uniform SEED TABLE DIM LO HI ID...\n");
        return 2;
    }
    return 0;
}
