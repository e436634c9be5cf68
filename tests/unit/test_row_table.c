/* Embedding table declarations (common/row_table): each field's rule
 * refused by name, a table with row tables surviving the wire with the same
 * digest, the digest and the comparison telling every field apart, and a
 * table without rows keeping the digest it had before row tables. */
#include <criterion/criterion.h>

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model_spec.h"
#include "ps_error.h"
#include "row_table.h"
#include "tensor_table.h"

static ps_row_table_spec good(void)
{
    ps_row_table_spec t;

    memset(&t, 0, sizeof(t));
    strcpy(t.name, "users");
    t.dim = 16;
    t.init = (ps_row_init){PS_ROW_INIT_NORMAL, 0, 0.0, 0.01, -0.02, 0.02};
    strcpy(t.optimizer, "rowwise-adagrad");
    t.admit_after = 3;
    t.expire_after = 100;
    t.capacity = 1000;
    return t;
}

static void spec_with_rows(ps_model_spec *spec, int n_rows)
{
    const int sizes[] = {8, 4, 2};

    cr_assert_eq(ps_model_spec_init_mlp(spec, sizes, 3, 7), 0);
    for (int i = 0; i < n_rows; i++) {
        ps_row_table_spec t = good();
        t.name[5] = (char)('a' + i);
        t.name[6] = '\0';
        cr_assert_eq(ps_model_spec_add_row_table(spec, &t, NULL, 0), 0);
    }
}

static void refused(ps_row_table_spec t, const char *needle)
{
    char why[256] = "";

    cr_assert_eq(ps_row_table_check(&t, why, sizeof(why)), -PS_EPROTO, "%s", needle);
    cr_assert_not_null(strstr(why, needle), "\"%s\" lacks \"%s\"", why, needle);
}

Test(row_table, every_field_is_checked_by_name)
{
    ps_row_table_spec t = good();
    char why[256];

    cr_assert_eq(ps_row_table_check(&t, why, sizeof(why)), 0, "%s", why);
    t = good(), t.name[0] = '\0', refused(t, "name");
    t = good(), t.name[1] = ' ', refused(t, "name");
    t = good(), t.dim = 0, refused(t, "dim 0");
    t = good(), t.dim = PS_ROW_TABLE_MAX_DIM + 1, refused(t, "dim 65537");
    t = good(), t.init.std = -1, refused(t, "users: initializer");
    t = good(), t.init.kind = (ps_row_init_kind)7, refused(t, "initializer");
    t = good(), t.init = (ps_row_init){PS_ROW_INIT_UNIFORM, 0, 0, 0, 1, NAN},
    refused(t, "initializer");
    t = good(), strcpy(t.optimizer, "lamb"), refused(t, "optimizer \"lamb\"");
    t = good(), t.admit_after = 65536, refused(t, "admit_after 65536");
    t = good(), t.capacity = (uint64_t)UINT32_MAX, refused(t, "capacity");
}

Test(row_table, every_optimizer_name_and_the_jobs)
{
    const char *ok[] = {"", "sgd", "nesterov", "adam", "adamw", "adagrad", "rowwise-adagrad"};

    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++)
        cr_assert(ps_row_table_optimizer_ok(ok[i]), "%s", ok[i]);
    cr_assert_not(ps_row_table_optimizer_ok("momentum"));
}

/* Packs spec's wire form and decodes it as a server does a TABLE payload. */
static int round_trip(const ps_model_spec *spec, ps_model_spec *out, char *why)
{
    uint8_t *buf;
    size_t len;
    int rc;

    cr_assert_eq(ps_tensor_table_pack(spec, &buf, &len), 0);
    rc = ps_tensor_table_decode(buf, len, 0, out, why, 256);
    free(buf);
    return rc;
}

Test(row_table, survives_the_wire_with_the_same_digest)
{
    ps_model_spec a, b;
    char why[256];
    uint8_t da[PS_TABLE_DIGEST_BYTES], db[PS_TABLE_DIGEST_BYTES];

    spec_with_rows(&a, 3);
    cr_assert_eq(round_trip(&a, &b, why), 0, "%s", why);
    cr_assert_eq(b.n_row_tables, 3);
    cr_assert_eq(b.row_tables[2].dim, 16);
    cr_assert_eq(b.row_tables[0].init.seed, 7, "the seed is the tensor table's");
    ps_model_spec_digest(&a, da);
    ps_model_spec_digest(&b, db);
    cr_assert_eq(memcmp(da, db, sizeof(da)), 0);
    cr_assert_eq(ps_tensor_table_diff(&a, &b, "x", "y", why, sizeof(why)), 0, "%s", why);
    ps_model_spec_free(&a);
    ps_model_spec_free(&b);
}

Test(row_table, digest_and_diff_tell_every_field)
{
    ps_model_spec a, b, c;
    uint8_t da[PS_TABLE_DIGEST_BYTES], db[PS_TABLE_DIGEST_BYTES];
    char msg[256];

    spec_with_rows(&a, 2);
    ps_model_spec_digest(&a, da);
    for (int field = 0; field < 8; field++) {
        ps_row_table_spec *r;

        cr_assert_eq(ps_model_spec_copy(&b, &a), 0);
        r = &b.row_tables[1];
        switch (field) {
        case 0:
            r->dim = 32;
            break;
        case 1:
            r->init.std = 0.02;
            break;
        case 2:
            r->init.lo = -0.03;
            break;
        case 3:
            r->init.kind = PS_ROW_INIT_ZEROS;
            break;
        case 4:
            strcpy(r->optimizer, "adam");
            break;
        case 5:
            r->admit_after = 4;
            break;
        case 6:
            r->expire_after = 0;
            break;
        case 7:
            r->capacity = 0;
            break;
        }
        ps_model_spec_digest(&b, db);
        cr_assert_neq(memcmp(da, db, sizeof(da)), 0, "field %d", field);
        cr_assert_eq(
            ps_tensor_table_diff(&b, &a, "from the worker", "on this server", msg, sizeof(msg)), 1,
            "field %d", field);
        cr_assert_not_null(strstr(msg, "row table usersb"), "%s", msg);
        ps_model_spec_free(&b);
    }
    /* A dimension mismatched between ranks is named with both sides. */
    cr_assert_eq(ps_model_spec_copy(&b, &a), 0);
    b.row_tables[0].dim = 64;
    cr_assert_eq(
        ps_tensor_table_diff(&b, &a, "from the worker", "on this server", msg, sizeof(msg)), 1);
    cr_assert_str_eq(msg, "row table usersa: dim 64 from the worker, 16 on this server");
    /* One table more. */
    spec_with_rows(&c, 3);
    cr_assert_eq(ps_tensor_table_diff(&c, &a, "x", "y", msg, sizeof(msg)), 1);
    cr_assert_not_null(strstr(msg, "3 row tables x, 2 y"), "%s", msg);
    ps_model_spec_free(&a);
    ps_model_spec_free(&b);
    ps_model_spec_free(&c);
}

Test(row_table, a_table_without_rows_keeps_its_digest)
{
    ps_model_spec a, b;
    uint8_t da[PS_TABLE_DIGEST_BYTES], db[PS_TABLE_DIGEST_BYTES];

    spec_with_rows(&a, 0);
    spec_with_rows(&b, 1);
    ps_model_spec_digest(&a, da);
    ps_model_spec_digest(&b, db);
    cr_assert_neq(memcmp(da, db, sizeof(da)), 0);
    /* With no row tables nothing of them is hashed, so a dense table's
     * digest (what a WELCOME carries, what old peers compute) is the same
     * whatever the row tables' storage holds. */
    b.n_row_tables = 0;
    ps_model_spec_digest(&b, db);
    cr_assert_eq(memcmp(da, db, sizeof(da)), 0);
    b.n_row_tables = 1;
    ps_model_spec_free(&a);
    ps_model_spec_free(&b);
}

Test(row_table, refused_on_receipt_and_twice_declared)
{
    ps_model_spec a, b;
    ps_row_table_spec t = good();
    char why[256];

    spec_with_rows(&a, 1);
    t.name[5] = 'a';
    t.name[6] = '\0';
    cr_assert_eq(ps_model_spec_add_row_table(&a, &t, why, sizeof(why)), -EINVAL);
    cr_assert_not_null(strstr(why, "declared twice"), "%s", why);
    /* A dim the sender should never have sent is refused on decode. */
    a.row_tables[0].dim = 0;
    cr_assert_eq(round_trip(&a, &b, why), -PS_EPROTO);
    cr_assert_not_null(strstr(why, "row table usersa: dim 0"), "%s", why);
    cr_assert_eq(b.n_row_tables, 0);
    ps_model_spec_free(&a);
}
