/* Tests for HOST:PORT lists: good lists read back in order, and each kind of
 * mistake is refused with a message that names the entry and the problem. */
#include <criterion/criterion.h>

#include <errno.h>
#include <string.h>

#include "server_list.h"

Test(server_list, reads_entries_in_order)
{
    ps_server_list *l;
    char err[256];

    cr_assert_eq(
        ps_server_list_parse(&l, "h0:7000,10.0.0.2:1,[::1]:65535,::1:9", 8, 0, err, sizeof(err)), 0,
        "%s", err);
    cr_assert_eq(ps_server_list_count(l), 4);
    cr_assert_str_eq(ps_server_list_entries(l)[0], "h0:7000");
    cr_assert_str_eq(ps_server_list_entries(l)[1], "10.0.0.2:1");
    cr_assert_str_eq(ps_server_list_entries(l)[2], "[::1]:65535");
    cr_assert_str_eq(ps_server_list_entries(l)[3], "::1:9");
    ps_server_list_free(l);
}

static void refused(const char *text, int max, const char *why)
{
    ps_server_list *l = (ps_server_list *)1;
    char err[256];

    cr_assert_eq(ps_server_list_parse(&l, text, max, 0, err, sizeof(err)), -EINVAL, "accepted %s",
                 text);
    cr_assert_null(l);
    cr_assert(strstr(err, why) != NULL, "for '%s': '%s' does not say '%s'", text, err, why);
}

Test(server_list, says_what_is_wrong)
{
    refused("", 8, "entry 0 is empty");
    refused("a:1,,b:2", 8, "entry 1 is empty");
    refused("a:1,", 8, "entry 1 is empty");
    refused("a:1,hostonly", 8, "entry 1 'hostonly' has no port");
    refused("[::1]", 8, "has no port");
    refused("a:", 8, "has no port after ':'");
    refused(":7000", 8, "has no host");
    refused("a:70000", 8, "port 70000 is out of range 1..65535");
    refused("a:0", 8, "out of range");
    refused("a:99999999999999999999", 8, "out of range");
    refused("a:-5", 8, "is not a number");
    refused("a:7000x", 8, "is not a number");
    refused("a:1,b:2,c:3", 2, "3 entries, more than the 2 allowed");
    /* How people write lists in INI files: refused where it is read. */
    refused("a:1 b:2", 8, "entry 0 'a:1 b:2' contains a space; separate addresses with commas");
}

/* One address (--listen, a metrics endpoint) gets the same checks, without
 * an entry number. */
Test(server_list, one_address)
{
    char err[256];

    cr_assert_eq(ps_hostport_check("[::1]:0", 1, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(ps_hostport_check("127.0.0.1", 0, err, sizeof(err)), -EINVAL);
    cr_assert_str_eq(err, "address '127.0.0.1' has no port (HOST:PORT, e.g. 10.0.0.1:7000)");
    cr_assert_eq(ps_hostport_check("h:99999", 0, err, sizeof(err)), -EINVAL);
    cr_assert_str_eq(err, "address 'h:99999': port 99999 is out of range 1..65535");
    cr_assert_eq(ps_hostport_check("h:0", 0, err, sizeof(err)), -EINVAL);
}

Test(server_list, port_zero_only_where_allowed)
{
    ps_server_list *l;
    char err[256];

    cr_assert_eq(ps_server_list_parse(&l, "127.0.0.1:0", 4, 1, err, sizeof(err)), 0, "%s", err);
    ps_server_list_free(l);
    cr_assert_eq(ps_server_list_parse(&l, "127.0.0.1:0", 4, 0, err, sizeof(err)), -EINVAL);
    cr_assert(strstr(err, "out of range 1..65535") != NULL, "%s", err);
}
