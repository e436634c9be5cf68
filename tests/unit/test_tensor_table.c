/* The tensor table on the wire (common/tensor_table): a table survives
 * to_wire, packing, unpacking and from_wire with the same fingerprint and the
 * same initial values; every rule a server applies to a table it is sent is
 * refused by name; and the comparison names the first difference. */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "model_spec.h"
#include "ps_error.h"
#include "tensor_table.h"

static void mlp(ps_model_spec *spec, int hidden, uint64_t seed)
{
    const int sizes[] = {784, hidden, 10};

    cr_assert_eq(ps_model_spec_init_mlp(spec, sizes, 3, seed), 0);
}

/* Packs spec's wire form and reads it back through from_wire. */
static int round_trip(const ps_model_spec *spec, size_t max_bytes, ps_model_spec *out, char *why)
{
    ps_tensor_table_wire w;
    Shardps__TensorTable *t;
    size_t len;
    uint8_t *buf;
    int rc;

    cr_assert_eq(ps_tensor_table_to_wire(spec, &w), 0);
    len = shardps__tensor_table__get_packed_size(&w.msg);
    buf = malloc(len);
    cr_assert_not_null(buf);
    shardps__tensor_table__pack(&w.msg, buf);
    ps_tensor_table_wire_free(&w);
    t = shardps__tensor_table__unpack(NULL, len, buf);
    cr_assert_not_null(t);
    rc = ps_tensor_table_from_wire(t, max_bytes, out, why, 256);
    shardps__tensor_table__free_unpacked(t, NULL);
    free(buf);
    return rc;
}

Test(tensor_table, round_trip_keeps_fingerprint_and_initial_values)
{
    ps_model_spec a, b;
    char why[256];
    float va[300], vb[300];

    mlp(&a, 256, 42);
    cr_assert_eq(round_trip(&a, 0, &b, why), 0, "%s", why);
    cr_assert_eq(ps_model_spec_fingerprint(&a), ps_model_spec_fingerprint(&b));
    cr_assert_eq(b.n_tensors, 4);
    cr_assert_eq(b.total_numel, a.total_numel);
    cr_assert_eq(ps_tensor_table_diff(&a, &b, "x", "y", why, sizeof(why)), 0);
    for (int t = 0; t < a.n_tensors; t++) {
        ps_model_spec_init_values(&a, t, 7, 200, va);
        ps_model_spec_init_values(&b, t, 7, 200, vb);
        cr_assert_eq(memcmp(va, vb, 200 * sizeof(float)), 0, "tensor %d", t);
    }
}

Test(tensor_table, total_bytes_are_bounded)
{
    ps_model_spec a, b;
    char why[256];
    size_t bytes;

    mlp(&a, 256, 1);
    bytes = a.total_numel * sizeof(float);
    cr_assert_eq(round_trip(&a, bytes, &b, why), 0, "%s", why);
    cr_assert_eq(round_trip(&a, bytes - 1, &b, why), -E2BIG);
    cr_assert(strstr(why, "--max-model-bytes"), "%s", why);
}

/* from_wire on one declaration changed by edit. */
static int refused(void (*edit)(ps_tensor_table_wire *w), char *why)
{
    ps_model_spec a, b;
    ps_tensor_table_wire w;
    int rc;

    mlp(&a, 16, 1);
    cr_assert_eq(ps_tensor_table_to_wire(&a, &w), 0);
    edit(&w);
    rc = ps_tensor_table_from_wire(&w.msg, 0, &b, why, 256);
    ps_tensor_table_wire_free(&w);
    ps_model_spec_free(&a);
    ps_model_spec_free(&b);
    return rc;
}

static void bad_name(ps_tensor_table_wire *w)
{
    w->decls[1].name = "fc1 bias";
}
static char name_256[257];
static void long_name(ps_tensor_table_wire *w)
{
    memset(name_256, 'a', 256);
    w->decls[1].name = name_256;
}
static void twice(ps_tensor_table_wire *w)
{
    w->decls[2].name = "fc1.weight";
}
static void no_dims(ps_tensor_table_wire *w)
{
    w->decls[0].n_dims = 0;
}
static void five_dims(ps_tensor_table_wire *w)
{
    static uint32_t d[5] = {1, 2, 3, 4, 5};
    w->decls[0].n_dims = 5;
    w->decls[0].dims = d;
}
static void zero_dim(ps_tensor_table_wire *w)
{
    w->dims[1] = 0;
}
static void huge_tensor(ps_tensor_table_wire *w)
{
    w->dims[0] = 1u << 20;
    w->dims[1] = 1u << 20;
}
static void bad_init(ps_tensor_table_wire *w)
{
    w->decls[0].init = (Shardps__TensorInit)7;
}
static void zero_fan(ps_tensor_table_wire *w)
{
    w->decls[0].fan_in = 0;
}
static void empty(ps_tensor_table_wire *w)
{
    w->msg.n_tensors = 0;
}
static void too_many(ps_tensor_table_wire *w)
{
    w->msg.n_tensors = PS_MAX_TENSORS + 1;
}
static void int64_parameter(ps_tensor_table_wire *w)
{
    w->decls[0].dtype = SHARDPS__TENSOR_DTYPE__TENSOR_I64;
}
static void bad_kind(ps_tensor_table_wire *w)
{
    w->decls[0].kind = (Shardps__TensorKind)3;
}

Test(tensor_table, every_rule_is_refused_by_name)
{
    char why[256];

    cr_assert_eq(refused(bad_name, why), -PS_EPROTO);
    cr_assert(strstr(why, "tensor 1 (\"fc1?bias\", 8 bytes): a name is 1-255 bytes"), "%s", why);
    cr_assert_eq(refused(long_name, why), -PS_EPROTO);
    cr_assert(strstr(why, "tensor 1 (\"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa...\", 256 bytes)"),
              "%s", why);
    cr_assert_eq(refused(twice, why), -PS_EPROTO);
    cr_assert_str_eq(why, "tensor fc1.weight is declared twice");
    cr_assert_eq(refused(no_dims, why), -PS_EPROTO);
    cr_assert_str_eq(why, "tensor fc1.weight: 0 dimensions; 1 to 4");
    cr_assert_eq(refused(five_dims, why), -PS_EPROTO);
    cr_assert_eq(refused(zero_dim, why), -PS_EPROTO);
    cr_assert_str_eq(why, "tensor fc1.weight: dimension 1 is 0");
    cr_assert_eq(refused(huge_tensor, why), -E2BIG);
    cr_assert_eq(refused(bad_init, why), -PS_EPROTO);
    cr_assert_str_eq(why, "tensor fc1.weight: unknown init kind 7");
    cr_assert_eq(refused(zero_fan, why), -PS_EPROTO);
    cr_assert_eq(refused(empty, why), -PS_EPROTO);
    cr_assert_eq(refused(too_many, why), -E2BIG);
    cr_assert_str_eq(why, "4097 tensors; at most 4096");
    cr_assert_eq(refused(int64_parameter, why), -PS_EPROTO);
    cr_assert(strstr(why, "a int64 parameter cannot be initialised as he_uniform"), "%s", why);
    cr_assert_eq(refused(bad_kind, why), -PS_EPROTO);
    cr_assert(strstr(why, "unknown kind 3"), "%s", why);
    cr_assert_eq(ps_tensor_table_from_wire(NULL, 0, &(ps_model_spec){0}, why, sizeof(why)),
                 -PS_EPROTO);
}

Test(tensor_table, diff_names_the_first_difference)
{
    ps_model_spec a, b;
    char msg[256];

    mlp(&a, 256, 1);
    mlp(&b, 128, 1);
    cr_assert_eq(
        ps_tensor_table_diff(&a, &b, "from the worker", "on this server", msg, sizeof(msg)), 1);
    cr_assert_str_eq(msg, "tensor fc1.weight: 256x784 from the worker, 128x784 on this server");
    mlp(&b, 256, 2);
    cr_assert_eq(ps_tensor_table_diff(&a, &b, "here", "there", msg, sizeof(msg)), 1);
    cr_assert_str_eq(msg, "seed 1 here, 2 there");
    mlp(&b, 256, 1);
    b.tensors[3].init = PS_INIT_HE_UNIFORM;
    cr_assert_eq(ps_tensor_table_diff(&a, &b, "here", "there", msg, sizeof(msg)), 1);
    cr_assert_str_eq(msg, "tensor fc2.bias: init zero (fans 256, 10) here, he_uniform (fans 256, "
                          "10) there");
    mlp(&b, 256, 1);
    strcpy(b.tensors[2].name, "out.weight");
    cr_assert_eq(ps_tensor_table_diff(&a, &b, "here", "there", msg, sizeof(msg)), 1);
    cr_assert_str_eq(msg, "tensor 2: fc2.weight here, out.weight there");
    mlp(&b, 256, 1);
    b.n_tensors = 3;
    cr_assert_eq(ps_tensor_table_diff(&a, &b, "here", "there", msg, sizeof(msg)), 1);
    cr_assert_str_eq(msg, "4 tensors here, 3 there (first extra: fc2.bias)");
}

/* Issue 22, cause 8: a stored table whose name holds a NUL byte ("ab\0cd",
 * which protobuf-c would hand over as "ab") is refused, naming the field;
 * the same bytes without the NUL unpack. */
Test(tensor_table, a_nul_in_a_name_is_refused)
{
    Shardps__TensorTable t = SHARDPS__TENSOR_TABLE__INIT, *back;
    Shardps__TensorDecl d = SHARDPS__TENSOR_DECL__INIT, *dp = &d;
    uint32_t dims[1] = {4};
    uint8_t buf[64], *at;
    size_t len;
    char why[256];

    d.name = "abXcd";
    d.n_dims = 1;
    d.dims = dims;
    d.fan_in = d.fan_out = 1;
    t.n_tensors = 1;
    t.tensors = &dp;
    len = shardps__tensor_table__pack(&t, buf);
    at = memmem(buf, len, "abXcd", 5);
    cr_assert_not_null(at);
    back = ps_tensor_table_unpack(buf, len, why, sizeof(why));
    cr_assert_not_null(back, "%s", why);
    cr_assert_str_eq(back->tensors[0]->name, "abXcd");
    shardps__tensor_table__free_unpacked(back, NULL);
    at[2] = '\0';
    cr_assert_null(ps_tensor_table_unpack(buf, len, why, sizeof(why)));
    cr_assert(strstr(why, "TensorTable.tensors.name holds a NUL byte"), "%s", why);
}
