/* Tests for the option layers and the cluster file: that a flag beats the
 * environment, which beats the file, which beats the default, and each
 * value's origin is recorded; that a server and a worker accept the same file
 * and each takes only its share; and that every kind of mistake in the file
 * (unknown key or section, a key in the wrong section, a per-process key, a
 * key given twice, an overlong line) is one line naming file:line. */
#include <criterion/criterion.h>

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "flags.h"
#include "flags_help.h"
#include "ps_error.h"

/* A worker-like and a server-like table over the same variables; the
 * options with a section are shared by both, as job_options.c builds them. */
static const char *servers, *mode, *hidden, *cluster, *data_dir, *optim;
static int rank_, workers, batch, print_config, quorum;
static double lr, heartbeat;

static const ps_flag worker_flags[] = {
    {"cluster", PS_FLAG_STRING, &cluster, "FILE", "cluster file", 0, 0, NULL, NULL, NULL},
    {"servers", PS_FLAG_STRING, &servers, "LIST", "servers", 0, 0, NULL, NULL, "cluster"},
    {"rank", PS_FLAG_INT, &rank_, "R", "rank", 0, 100, NULL, NULL, NULL},
    {"workers", PS_FLAG_INT, &workers, "W", "workers", 1, 100, NULL, NULL, "cluster"},
    {"mode", PS_FLAG_CHOICE, &mode, "MODE", "mode", 0, 0, "sync|async|ssp", NULL, "cluster"},
    {"hidden", PS_FLAG_STRING, &hidden, "N,N", "hidden", 0, 0, NULL, NULL, "model"},
    {"optimizer", PS_FLAG_CHOICE, &optim, "NAME", "optimizer", 0, 0, "sgd|adam", NULL, "optimizer"},
    {"lr", PS_FLAG_DOUBLE, &lr, "RATE", "lr", 0, 10, NULL, NULL, "optimizer"},
    {"batch", PS_FLAG_INT, &batch, "B", "batch", 1, 1000, NULL, NULL, NULL},
    {"data-dir", PS_FLAG_STRING, &data_dir, "DIR", "data", 0, 0, NULL, NULL, NULL},
    {"print-config", PS_FLAG_BOOL, &print_config, NULL, "print", 0, 0, NULL, NULL, NULL},
};

static const ps_flag server_flags[] = {
    {"cluster", PS_FLAG_STRING, &cluster, "FILE", "cluster file", 0, 0, NULL, NULL, NULL},
    {"servers", PS_FLAG_STRING, &servers, "LIST", "servers", 0, 0, NULL, NULL, "cluster"},
    {"workers", PS_FLAG_INT, &workers, "W", "workers", 1, 100, NULL, NULL, "cluster"},
    {"mode", PS_FLAG_CHOICE, &mode, "MODE", "mode", 0, 0, "sync|async|ssp", NULL, "cluster"},
    {"hidden", PS_FLAG_STRING, &hidden, "N,N", "hidden", 0, 0, NULL, NULL, "model"},
    {"optimizer", PS_FLAG_CHOICE, &optim, "NAME", "optimizer", 0, 0, "sgd|adam", NULL, "optimizer"},
    {"lr", PS_FLAG_DOUBLE, &lr, "RATE", "lr", 0, 10, NULL, NULL, "optimizer"},
    {"heartbeat-timeout", PS_FLAG_DOUBLE, &heartbeat, "S", "heartbeat", 0, 100, NULL, "off=0",
     NULL},
    {"sync-quorum", PS_FLAG_INT, &quorum, "K", "quorum", 1, 100, NULL, "all=0", NULL},
};

static char path[64];
static char err[4096];

static void defaults(void)
{
    servers = "127.0.0.1:7000";
    mode = "sync";
    optim = "adam";
    quorum = 3;
    hidden = "256,128";
    cluster = data_dir = NULL;
    rank_ = 0;
    workers = 1;
    batch = 64;
    print_config = 0;
    lr = 0.001;
    heartbeat = 10;
    unsetenv("SHARDPS_CLUSTER");
    unsetenv("SHARDPS_WORKERS");
    unsetenv("SHARDPS_LR");
    unsetenv("SHARDPS_SYNC_QUORUM");
}

static void write_file(const char *text)
{
    int fd;

    snprintf(path, sizeof(path), "/tmp/test_flags.XXXXXX");
    fd = mkstemp(path);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
}

/* Runs one parse with stderr captured into err; the context stays loaded
 * (released by the caller) so its origins can be checked. */
static int load(ps_flags_ctx *ctx, int server, const char **args)
{
    char *argv[16] = {"prog"};
    int argc = 1, saved = dup(2), rc;
    FILE *cap = tmpfile();
    size_t n;

    for (; args && args[argc - 1]; argc++)
        argv[argc] = (char *)args[argc - 1];
    memset(ctx, 0, sizeof(*ctx));
    ctx->flags = server ? server_flags : worker_flags;
    ctx->n = server ? (int)(sizeof(server_flags) / sizeof(server_flags[0]))
                    : (int)(sizeof(worker_flags) / sizeof(worker_flags[0]));
    ctx->prog = "prog";
    ctx->summary = "test";
    ctx->section = server ? "server" : "worker";
    ctx->per_process = "rank";
    fflush(stderr);
    dup2(fileno(cap), 2);
    rc = ps_flags_load(ctx, argc, argv);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(cap);
    n = fread(err, 1, sizeof(err) - 1, cap);
    err[n] = '\0';
    fclose(cap);
    return rc;
}

static const char *shared_file = "# one file for the whole job\n"
                                 "[cluster]\n"
                                 "servers = a:7000,b:7001\n"
                                 "workers = 3\n"
                                 "mode = async\n"
                                 "[model]\n"
                                 "hidden = 64,32\n"
                                 "[optimizer]\n"
                                 "lr = 0.5 ; inline comment\n"
                                 "[server]\n"
                                 "heartbeat-timeout = 2.5\n"
                                 "[worker]\n"
                                 "batch = 16\n";

Test(flags, layers_in_order_with_origins, .init = defaults)
{
    ps_flags_ctx ctx;
    char arg[80];
    const char *args[] = {arg, "--servers", "c:1", NULL};

    write_file(shared_file);
    snprintf(arg, sizeof(arg), "--cluster=%s", path);
    setenv("SHARDPS_WORKERS", "5", 1);
    cr_assert_eq(load(&ctx, 0, args), 0, "%s", err);
    cr_assert_str_eq(servers, "c:1");
    cr_assert_eq(workers, 5);
    cr_assert_str_eq(hidden, "64,32");
    cr_assert_eq(batch, 16);
    cr_assert_null(data_dir);
    cr_assert_eq(ps_flags_origin(&ctx, "servers"), PS_FLAG_FROM_ARGV);
    cr_assert_eq(ps_flags_origin(&ctx, "workers"), PS_FLAG_FROM_ENV);
    cr_assert_eq(ps_flags_origin(&ctx, "hidden"), PS_FLAG_FROM_FILE);
    cr_assert_eq(ps_flags_origin(&ctx, "data-dir"), PS_FLAG_FROM_DEFAULT);
    cr_assert_eq(ps_flags_origin(&ctx, "no-such"), PS_FLAG_FROM_DEFAULT);
    ps_flags_release(&ctx);
    unlink(path);
}

Test(flags, server_takes_its_share_of_the_same_file, .init = defaults)
{
    ps_flags_ctx ctx;
    char want[96], path2[96];

    write_file(shared_file);
    setenv("SHARDPS_CLUSTER", path, 1);
    cr_assert_eq(load(&ctx, 1, NULL), 0, "%s", err);
    cr_assert_str_eq(servers, "a:7000,b:7001");
    cr_assert_str_eq(mode, "async");
    cr_assert_float_eq(lr, 0.5, 1e-12);
    cr_assert_float_eq(heartbeat, 2.5, 1e-12);
    cr_assert_eq(batch, 64, "the server must skip [worker]");
    cr_assert_eq(ps_flags_origin(&ctx, "cluster"), PS_FLAG_FROM_ENV);
    cr_assert_str_eq(ps_flags_describe_origin(&ctx, "cluster", want, sizeof(want)),
                     "SHARDPS_CLUSTER");
    snprintf(path2, sizeof(path2), "%s:11", path);
    cr_assert_str_eq(ps_flags_describe_origin(&ctx, "heartbeat-timeout", want, sizeof(want)),
                     path2);
    ps_flags_release(&ctx);
    unlink(path);
}

Test(flags, print_config_names_each_origin, .init = defaults)
{
    ps_flags_ctx ctx;
    char want[96], out[4096];
    const char *args[] = {"--cluster", path, "--rank", "2", NULL};
    FILE *f = tmpfile();
    size_t n;

    write_file(shared_file);
    cr_assert_eq(load(&ctx, 0, args), 0, "%s", err);
    cr_assert_eq(ps_flags_set_derived(&ctx, "workers", "nothing"), 0);
    cr_assert_eq(ps_flags_set_derived(&ctx, "nope", "x"), -ENOENT);
    ps_flags_print_config(&ctx, f);
    rewind(f);
    n = fread(out, 1, sizeof(out) - 1, f);
    out[n] = '\0';
    fclose(f);
    snprintf(want, sizeof(want), "# %s:7", path);
    cr_assert(strstr(out, want) && strstr(out, "hidden "), "%s", out);
    cr_assert(strstr(out, "# the command line"), "%s", out);
    cr_assert(strstr(out, "# derived from nothing"), "%s", out);
    cr_assert(strstr(out, "# the default"), "%s", out);
    cr_assert_null(strstr(out, "print-config"), "%s", out);
    ps_flags_release(&ctx);
    unlink(path);
}

/* Loads text as the worker's cluster file and expects one error line that
 * contains want, and names the line. */
static void expect_file_error(const char *text, int line, const char *want)
{
    ps_flags_ctx ctx;
    const char *args[] = {"--cluster", path, NULL};
    char where[96];

    write_file(text);
    cr_assert_eq(load(&ctx, 0, args), -PS_EUSAGE, "accepted:\n%s", text);
    ps_flags_release(&ctx);
    unlink(path);
    snprintf(where, sizeof(where), "prog: %s:%d: ", path, line);
    cr_assert(strncmp(err, where, strlen(where)) == 0, "'%s' does not start with '%s'", err, where);
    cr_assert(strstr(err, want), "'%s' does not mention '%s'", err, want);
    cr_assert_eq(strchr(err, '\n'), err + strlen(err) - 1, "more than one line: %s", err);
}

Test(flags, file_mistakes_name_file_and_line, .init = defaults)
{
    expect_file_error("[cluster]\nworkers = 2\n\n[optimizer]\nlrr = 1\n", 5,
                      "unknown key 'lrr' in [optimizer] (known there: optimizer lr");
    expect_file_error("[cluster]\nhidden = 8\n", 2, "'hidden' belongs in [model]");
    expect_file_error("[worker]\nlr = 8\n", 2, "'lr' belongs in [optimizer]");
    expect_file_error("[worker]\nrank = 1\n", 2, "give it as --rank or SHARDPS_RANK");
    expect_file_error("[worker]\nbogus = 1\n", 2, "unknown key 'bogus' in [worker]");
    expect_file_error("[cluster]\nbatch = 1\n", 2, "put it in [worker]");
    expect_file_error("[clusters]\nworkers = 1\n", 2, "unknown section [clusters]");
    expect_file_error("workers = 1\n", 1, "before any [section]");
    expect_file_error("[cluster]\nworkers = 1\nworkers = 2\n", 3, "given twice");
    expect_file_error("[cluster]\nworkers = 500\n", 2, "workers: '500' is out of range");
    expect_file_error("[cluster]\nservers =\n", 2, "'servers' has no value");
    expect_file_error("[cluster]\njunk\n", 2, "expected 'key = value'");
    expect_file_error("[cluster]\nservers = a:1\n  workers = 2\n", 3, "continues the value");
}

Test(flags, other_program_section_is_skipped_unchecked, .init = defaults)
{
    ps_flags_ctx ctx;
    const char *args[] = {"--cluster", path, NULL};

    /* The worker does not know the server's options, so it cannot check
     * them: the server does. */
    write_file("[server]\nwhatever = 1\n[optimizer]\nlr = 0.1\n");
    cr_assert_eq(load(&ctx, 0, args), 0, "%s", err);
    ps_flags_release(&ctx);
    cr_assert_eq(load(&ctx, 1, args), -PS_EUSAGE);
    cr_assert(strstr(err, "unknown key 'whatever' in [server]"), "%s", err);
    ps_flags_release(&ctx);
    unlink(path);
}

Test(flags, indented_lines_continue_a_list, .init = defaults)
{
    ps_flags_ctx ctx;
    const char *args[] = {"--cluster", path, NULL};

    write_file("[cluster]\nservers = a:1 ,\n  b:2\n\tc:3, d:4\nworkers = 2\n");
    cr_assert_eq(load(&ctx, 0, args), 0, "%s", err);
    cr_assert_str_eq(servers, "a:1,b:2,c:3,d:4");
    ps_flags_release(&ctx);
    unlink(path);
}

Test(flags, overlong_line_is_refused, .init = defaults)
{
    char text[600];

    memset(text, 'x', sizeof(text));
    memcpy(text, "[cluster]\nservers = ", 20);
    text[sizeof(text) - 2] = '\n';
    text[sizeof(text) - 1] = '\0';
    expect_file_error(text, 2, "line longer than");
}

Test(flags, missing_file_and_help, .init = defaults)
{
    ps_flags_ctx ctx;
    const char *missing[] = {"--cluster", "/nonexistent/c.ini", NULL};
    const char *help[] = {"--workers", "0", "--help", NULL};
    int saved = dup(1), devnull = open("/dev/null", O_WRONLY);

    cr_assert_eq(load(&ctx, 0, missing), -PS_EUSAGE);
    cr_assert(strstr(err, "cannot read the cluster file /nonexistent/c.ini"), "%s", err);
    ps_flags_release(&ctx);
    /* --help wins over a bad value before it, and shows the defaults. */
    fflush(stdout);
    dup2(devnull, 1);
    cr_assert_eq(load(&ctx, 0, help), 1, "%s", err);
    fflush(stdout);
    dup2(saved, 1);
    close(saved);
    close(devnull);
    ps_flags_release(&ctx);
}

/* Words stand for numbers ("all" for 0): accepted as values, shown by
 * --print-config, named in range errors; the number itself is accepted too
 * even outside [min, max]. */
Test(flags, words_stand_for_numbers, .init = defaults)
{
    ps_flags_ctx ctx;
    const char *all[] = {"--sync-quorum", "all", "--heartbeat-timeout=off", NULL};
    const char *zero[] = {"--sync-quorum", "0", NULL};
    const char *bad[] = {"--sync-quorum", "most", NULL};
    char out[4096];
    FILE *f = tmpfile();
    size_t n;

    cr_assert_eq(load(&ctx, 1, all), 0, "%s", err);
    cr_assert_eq(quorum, 0);
    cr_assert_float_eq(heartbeat, 0, 1e-12);
    ps_flags_print_config(&ctx, f);
    rewind(f);
    n = fread(out, 1, sizeof(out) - 1, f);
    out[n] = '\0';
    fclose(f);
    cr_assert(strstr(out, "sync-quorum          = all "), "%s", out);
    cr_assert(strstr(out, "heartbeat-timeout    = off "), "%s", out);
    ps_flags_release(&ctx);
    quorum = 3;
    cr_assert_eq(load(&ctx, 1, zero), 0, "%s", err);
    cr_assert_eq(quorum, 0);
    ps_flags_release(&ctx);
    cr_assert_eq(load(&ctx, 1, bad), -PS_EUSAGE);
    cr_assert(strstr(err, "'most' is not an integer (accepted: 1 to 100 or all)"), "%s", err);
    ps_flags_release(&ctx);
}
