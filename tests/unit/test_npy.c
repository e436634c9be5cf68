/* Unit tests of the .npy header parser: the headers np.save writes (format
 * versions 1 to 3, every numeric dtype, 0 to 8 dimensions) parse to the right
 * description, and every malformed or unsupported one is refused with a
 * reason. */
#include <criterion/criterion.h>

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "npy.h"
#include "ps_error.h"

/* Builds a version-major file preamble and header around dict into buf,
 * padded with spaces and a newline as np.save does; returns its length. */
static size_t make(uint8_t *buf, size_t cap, int major, const char *dict)
{
    size_t fixed = major == 1 ? 10 : 12, dl = strlen(dict), hl = dl + 1;

    hl += (64 - (fixed + hl) % 64) % 64;
    cr_assert_leq(fixed + hl, cap);
    memcpy(buf, "\x93NUMPY", 6);
    buf[6] = (uint8_t)major;
    buf[7] = 0;
    buf[8] = (uint8_t)hl;
    buf[9] = (uint8_t)(hl >> 8);
    if (major > 1) {
        buf[10] = (uint8_t)(hl >> 16);
        buf[11] = (uint8_t)(hl >> 24);
    }
    memcpy(buf + fixed, dict, dl);
    memset(buf + fixed + dl, ' ', hl - dl - 1);
    buf[fixed + hl - 1] = '\n';
    return fixed + hl;
}

static ps_npy_header parse_ok(int major, const char *dict)
{
    uint8_t buf[512];
    size_t len = make(buf, sizeof(buf), major, dict), total;
    ps_npy_header h;
    char why[160] = "";

    cr_assert_eq(ps_npy_header_size(buf, PS_NPY_PREAMBLE, &total, why, sizeof(why)), 0, "%s", why);
    cr_assert_eq(total, len);
    cr_assert_eq(total % 64, 0);
    cr_assert_eq(ps_npy_parse_header(buf, len, &h, why, sizeof(why)), 0, "%s: %s", dict, why);
    cr_assert_eq(h.data_off, len);
    return h;
}

Test(npy, typical_headers)
{
    ps_npy_header h =
        parse_ok(1, "{'descr': '<f4', 'fortran_order': False, 'shape': (60000, 28, 28), }");

    cr_assert_eq(h.kind, 'f');
    cr_assert_eq(h.elem_size, 4);
    cr_assert_eq(h.big_endian, 0);
    cr_assert_eq(h.fortran_order, 0);
    cr_assert_eq(h.ndim, 3);
    cr_assert_eq(h.shape[0], 60000);
    cr_assert_eq(h.shape[2], 28);
    cr_assert_eq(h.count, 60000 * 28 * 28);
    cr_assert_str_eq(h.descr, "<f4");

    h = parse_ok(1, "{'descr': '|u1', 'fortran_order': False, 'shape': (7,), }");
    cr_assert_eq(h.kind, 'u');
    cr_assert_eq(h.elem_size, 1);
    cr_assert_eq(h.ndim, 1);
    cr_assert_eq(h.count, 7);

    h = parse_ok(2, "{\"shape\": (3, 1), \"fortran_order\": True, \"descr\": \">i8\"}");
    cr_assert_eq(h.kind, 'i');
    cr_assert_eq(h.elem_size, 8);
    cr_assert_eq(h.big_endian, 1);
    cr_assert_eq(h.fortran_order, 1);
    cr_assert_eq(h.ndim, 2);

    h = parse_ok(3, "{'descr': '<u2', 'fortran_order': False, 'shape': (), }");
    cr_assert_eq(h.ndim, 0);
    cr_assert_eq(h.count, 1);

    h = parse_ok(1, "{'descr':'<i4','fortran_order':False,'shape':(2,3,4,5,6,7,8,9)}");
    cr_assert_eq(h.ndim, 8);
    cr_assert_eq(h.count, 2 * 3 * 4 * 5 * 6 * 7 * 8 * 9);

    h = parse_ok(1, "{'descr': '|i1', 'fortran_order': False, 'shape': (0, 5), }");
    cr_assert_eq(h.count, 0);
    h = parse_ok(1, "{'descr': '<f8', 'fortran_order': False, 'shape': (4,), }");
    cr_assert_eq(h.elem_size, 8);
}

static const struct {
    const char *dict, *why;
} bad[] = {
    {"{'descr': '<c8', 'fortran_order': False, 'shape': (3,), }", "dtype '<c8' is not"},
    {"{'descr': '|b1', 'fortran_order': False, 'shape': (3,), }", "dtype '|b1'"},
    {"{'descr': '|O', 'fortran_order': False, 'shape': (3,), }", "dtype '|O'"},
    {"{'descr': '<U5', 'fortran_order': False, 'shape': (3,), }", "dtype '<U5'"},
    {"{'descr': '<f2', 'fortran_order': False, 'shape': (3,), }", "float16"},
    {"{'descr': '=f4', 'fortran_order': False, 'shape': (3,), }", "native byte order"},
    {"{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (3,), }", "structured"},
    {"{'descr': '<f4', 'fortran_order': Maybe, 'shape': (3,), }", "not True or False"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': [3], }", "'shape' is not a tuple"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (3, x), }", "other than integers"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (3 4), }", "malformed 'shape'"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (1,2,3,4,5,6,7,8,9), }",
     "more than 8 dimensions"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (99999999999999999999,), }", "too large"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (4294967296, 4294967296), }", "overflows"},
    {"{'descr': '<f4', 'shape': (3,), }", "lacks 'fortran_order'"},
    {"{'fortran_order': False, 'shape': (3,), }", "lacks 'descr'"},
    {"{'descr': '<f4', 'fortran_order': False}", "lacks 'shape'"},
    {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (3,), }",
     "repeated key 'descr'"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (3,), 'extra': 1}", "key 'extra'"},
    {"['descr', '<f4']", "not a dict"},
    {"{'descr' '<f4'}", "malformed .npy header dict"},
    {"{'descr': '<f4' 'fortran_order': False}", "malformed .npy header dict"},
    {"{'descr': '<f4', 'fortran_order': False, 'shape': (3,)", "malformed"},
};

Test(npy, refusals)
{
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        uint8_t buf[512];
        size_t len = make(buf, sizeof(buf), 1, bad[i].dict);
        ps_npy_header h;
        char why[160] = "";

        cr_assert_eq(ps_npy_parse_header(buf, len, &h, why, sizeof(why)), -PS_EFORMAT,
                     "accepted %s", bad[i].dict);
        cr_assert_not_null(strstr(why, bad[i].why), "%s: got \"%s\", want \"%s\"", bad[i].dict, why,
                           bad[i].why);
    }
}

Test(npy, preamble_refusals)
{
    uint8_t buf[512];
    size_t len = make(buf, sizeof(buf), 1, "{'descr': '<f4', 'fortran_order': False, 'shape': ()}");
    size_t total;
    ps_npy_header h;
    char why[160];

    cr_assert_eq(ps_npy_header_size(buf, 9, &total, why, sizeof(why)), -PS_EFORMAT);
    cr_assert_eq(ps_npy_parse_header(buf, len - 1, &h, why, sizeof(why)), -PS_EFORMAT);
    cr_assert_not_null(strstr(why, "truncated .npy header"), "%s", why);
    buf[6] = 4;
    cr_assert_eq(ps_npy_header_size(buf, len, &total, why, sizeof(why)), -PS_EFORMAT);
    cr_assert_not_null(strstr(why, "version 4.0 is not supported"), "%s", why);
    buf[6] = 2;
    cr_assert_eq(ps_npy_header_size(buf, 11, &total, why, sizeof(why)), -PS_EFORMAT);
    buf[10] = 0x20; /* header length 32 MiB and more */
    cr_assert_eq(ps_npy_header_size(buf, 12, &total, why, sizeof(why)), -PS_EFORMAT);
    cr_assert_not_null(strstr(why, "over 1 MiB"), "%s", why);
    buf[1] = 'n';
    cr_assert_eq(ps_npy_header_size(buf, len, &total, why, sizeof(why)), -PS_EFORMAT);
    cr_assert_not_null(strstr(why, "not a .npy file"), "%s", why);
}
