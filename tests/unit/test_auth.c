/* The auth token file (common/auth.h), read as every program reads it
 * (shardps-run and its --check, servers, libshardps): a regular file, or a
 * link to one, gives the key; anything else is refused at once with one
 * line naming what it is (issue 34 point 10: a FIFO named as the token
 * file was opened blocking and hung every program past every timeout). */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "auth.h"

static char dir[64];

static void setup(void)
{
    snprintf(dir, sizeof(dir), "/tmp/test_auth.XXXXXX");
    cr_assert_not_null(mkdtemp(dir));
}

static void teardown(void)
{
    char cmd[128];

    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    cr_assert_eq(system(cmd), 0);
}

static void path_of(char *out, size_t len, const char *name)
{
    snprintf(out, len, "%s/%s", dir, name);
}

static void write_token(const char *path, const char *text, mode_t mode)
{
    FILE *f = fopen(path, "w");

    cr_assert_not_null(f);
    cr_assert_eq(fputs(text, f) >= 0, 1);
    cr_assert_eq(fclose(f), 0);
    cr_assert_eq(chmod(path, mode), 0);
}

/* path is refused with code, err naming words. */
static void expect_refused(const char *path, int code, const char *words)
{
    uint8_t key[PS_AUTH_KEY_BYTES];
    char err[512] = "";
    int loose = -1;

    cr_assert_eq(ps_auth_load_key(path, key, &loose, err, sizeof(err)), code, "%s: %s", path, err);
    cr_assert(strstr(err, words) != NULL, "'%s' not in '%s'", words, err);
    cr_assert(strstr(err, path) != NULL, "the line does not name the file: %s", err);
}

Test(auth, a_token_file_or_a_link_to_one_gives_the_key, .init = setup, .fini = teardown)
{
    uint8_t key[PS_AUTH_KEY_BYTES], via_link[PS_AUTH_KEY_BYTES];
    char path[128], link[128], err[512];
    int loose = -1;

    path_of(path, sizeof(path), "token");
    path_of(link, sizeof(link), "token-link");
    write_token(path, "0123456789abcdef0123\n", 0600);
    cr_assert_eq(ps_auth_load_key(path, key, &loose, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(loose, 0);
    /* A Kubernetes Secret's key is a link into its data folder. */
    cr_assert_eq(symlink(path, link), 0);
    cr_assert_eq(ps_auth_load_key(link, via_link, &loose, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(memcmp(key, via_link, sizeof(key)), 0);
    cr_assert_eq(chmod(path, 0644), 0);
    cr_assert_eq(ps_auth_load_key(path, key, &loose, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(loose, 1, "readable by others: worth a warning");
    write_token(path, "short\n", 0600);
    expect_refused(path, -EINVAL, "it has 5");
}

/* Before the fix, the FIFO's open waited for a writer that never came:
 * the timeout is the test's failure. */
Test(auth, a_fifo_as_the_token_file_is_refused_at_once, .init = setup, .fini = teardown,
     .timeout = 10)
{
    char path[128], link[128];

    path_of(path, sizeof(path), "token-fifo");
    cr_assert_eq(mkfifo(path, 0600), 0);
    expect_refused(path, -EINVAL, "must be a regular file; it is a FIFO");
    path_of(link, sizeof(link), "token-fifo-link");
    cr_assert_eq(symlink(path, link), 0);
    expect_refused(link, -EINVAL, "it is a FIFO");
}

Test(auth, other_kinds_of_files_are_named, .init = setup, .fini = teardown, .timeout = 10)
{
    char path[128];

    expect_refused(dir, -EINVAL, "it is a directory");
    expect_refused("/dev/null", -EINVAL, "it is a device");
    path_of(path, sizeof(path), "absent");
    expect_refused(path, -ENOENT, "cannot open the auth token file");
}
