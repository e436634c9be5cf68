/* Tests for the children's environment: SHARDPS_* entries dropped, every
 * other entry kept in order, the caller's array untouched. */
#include <criterion/criterion.h>

#include <stdlib.h>

#include "child_env.h"

Test(child_env, drops_only_shardps_variables)
{
    char *env[] = {"PATH=/bin",       "SHARDPS_MODE=async",
                   "HOME=/root",      "SHARDPS_CLUSTER=c.ini",
                   "XSHARDPS_KEEP=1", NULL};
    char **out = ps_child_env(env);

    cr_assert_not_null(out);
    cr_assert_str_eq(out[0], "PATH=/bin");
    cr_assert_str_eq(out[1], "HOME=/root");
    cr_assert_str_eq(out[2], "XSHARDPS_KEEP=1");
    cr_assert_null(out[3]);
    cr_assert_str_eq(env[1], "SHARDPS_MODE=async");
    free(out);
}

Test(child_env, empty_environment)
{
    char *env[] = {NULL};
    char **out = ps_child_env(env);

    cr_assert_not_null(out);
    cr_assert_null(out[0]);
    free(out);
}
