/* libshardps under a launcher (include/shardps.h, 1.2), linked as the shared
 * library, against a real server in a thread (kv_fixture): a handle made
 * from the environment shardps-run sets (each variable checked, and named
 * when it is wrong), and the report lines it writes to the launcher's pipe:
 * "start" on connect, a progress line every progress-every steps with the
 * interval's mean loss and throughput, "done" on close, each read back with
 * the launcher's parser (common/report); every handle reports, however it
 * was made, unless told not to (report-fd -1, as shardps-worker's trainer);
 * the job's settings taken from SHARDPS_JOB_SETTINGS, and a cosine job
 * without a span refused at connect. */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "kv_fixture.h"
#include "report.h"
#include "shardps.h"

static const int sizes[] = {5, 16, 3};

/* shardps_new_from_env fails with code, its sentence holding words. */
static void refused(int code, const char *words)
{
    shardps *h = (shardps *)&h;
    int rc = shardps_new_from_env(&h);

    cr_assert_eq(rc, code, "returned %d, not %d (%s)", rc, code, shardps_last_error(NULL));
    cr_assert_null(h);
    cr_assert(strstr(shardps_last_error(NULL), words) != NULL, "'%s' not in '%s'", words,
              shardps_last_error(NULL));
}

static void job_env(const char *servers)
{
    setenv("SHARDPS_SERVERS", servers, 1);
    setenv("SHARDPS_RANK", "0", 1);
    setenv("SHARDPS_WORKERS", "1", 1);
}

Test(shardps_env, every_variable_is_checked_and_named)
{
    char fd[16];
    int fds[2];
    shardps *h;

    unsetenv("SHARDPS_SERVERS");
    cr_assert_eq(shardps_new_from_env(NULL), -EINVAL);
    refused(-EINVAL, "SHARDPS_SERVERS is not set: start the program under shardps-run");
    job_env("127.0.0.1");
    refused(-EINVAL, "SHARDPS_SERVERS '127.0.0.1'");
    job_env("127.0.0.1:7000,127.0.0.1:7001");
    unsetenv("SHARDPS_WORKERS");
    refused(-EINVAL, "SHARDPS_WORKERS is not set");
    setenv("SHARDPS_WORKERS", "2", 1);
    setenv("SHARDPS_RANK", "2", 1);
    refused(-EINVAL, "SHARDPS_RANK: '2' is not an integer in 0..1");
    setenv("SHARDPS_RANK", "1", 1);
    setenv("SHARDPS_SEED", "-1", 1);
    refused(-EINVAL, "SHARDPS_SEED: '-1' is out of range");
    unsetenv("SHARDPS_SEED");
    setenv("SHARDPS_AUTH_TOKEN_FILE", "/nonexistent/token", 1);
    refused(-ENOENT, "SHARDPS_AUTH_TOKEN_FILE: ");
    unsetenv("SHARDPS_AUTH_TOKEN_FILE");
    /* A report pipe this process does not hold (a worker's own child, which
     * did not inherit it) is no reason to fail: no reports, said in the log. */
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    close(fds[1]);
    snprintf(fd, sizeof(fd), "%d", fds[1]);
    setenv("SHARDPS_REPORT_FD", fd, 1);
    cr_assert_eq(shardps_new_from_env(&h), 0, "%s", shardps_last_error(NULL));
    cr_assert_str_eq(shardps_last_error(h), "");
    shardps_abandon(h);
    close(fds[0]);
}

/* The job's settings shardps-run hands on (SHARDPS_JOB_SETTINGS) are
 * checked and sent; when they leave the servers' cosine schedule to the
 * workers' plans, a handle that plans no steps is refused at connect,
 * before it reaches any server, with the fix named. */
Test(shardps_env, a_cosine_job_needs_the_workers_plan)
{
    shardps *h;

    job_env("127.0.0.1:7000");
    setenv("SHARDPS_JOB_SETTINGS", "num-servers=1\nmode\n", 1);
    refused(-EINVAL, "SHARDPS_JOB_SETTINGS is not a settings list");
    setenv("SHARDPS_JOB_SETTINGS", "num-servers=1\nlr-schedule=cosine\ntotal-steps=0\n", 1);
    cr_assert_eq(shardps_new_from_env(&h), 0, "%s", shardps_last_error(NULL));
    cr_assert_eq(shardps_declare_mlp(h, sizes, 3), 0);
    cr_assert_eq(shardps_connect(h), -EINVAL);
    cr_assert(strstr(shardps_last_error(h),
                     "shardps_connect: the job's cosine schedule has no span: tell this worker "
                     "the steps it plans (option total-steps: "),
              "%s", shardps_last_error(h));
    shardps_abandon(h);
    unsetenv("SHARDPS_JOB_SETTINGS");
}

/* The next line the handle wrote to the launcher's end, parsed. */
static void next_report(int fd, ps_report *r)
{
    char line[PS_REPORT_MAX_LINE], err[160];
    size_t n = 0;

    for (;;) {
        cr_assert_eq(read(fd, line + n, 1), 1, "no report line");
        if (line[n] == '\n')
            break;
        cr_assert_lt(++n, sizeof(line) - 1);
    }
    line[n] = '\0';
    cr_assert_eq(ps_report_parse(line, r, err, sizeof(err)), 0, "%s: %s", line, err);
}

/* Rank 0 of 1 with the job in the environment (and extra, a variable or
 * NULL), to the fixture's server, connected and reporting to a socket pair
 * whose launcher's end is fds[0] (reads time out after timeout_ms); its
 * "start" report read into *start. */
static shardps *launched(int fds[2], int timeout_ms, const char *extra, ps_report *start)
{
    struct timeval tv = {.tv_sec = timeout_ms / 1000, .tv_usec = timeout_ms % 1000 * 1000};
    shardps *h;
    char fd[16];

    server_up();
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    setsockopt(fds[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    snprintf(fd, sizeof(fd), "%d", fds[1]);
    job_env(fx.addr);
    setenv("SHARDPS_SEED", "1234", 1);
    setenv("SHARDPS_CHUNK_BYTES", "64", 1);
    setenv("SHARDPS_PROGRESS_EVERY", "5", 1);
    setenv("SHARDPS_REPORT_FD", fd, 1);
    if (extra)
        cr_assert_eq(putenv((char *)extra), 0);
    cr_assert_eq(shardps_new_from_env(&h), 0, "%s", shardps_last_error(NULL));
    cr_assert_eq(shardps_report(h, 1, 0.5, 8), -EINVAL, "a report before connecting");
    cr_assert_eq(shardps_set_option(h, "log-level", "none"), 0);
    cr_assert_eq(shardps_declare_mlp(h, sizes, 3), 0);
    cr_assert_eq(shardps_connect(h), 0, "%s", shardps_last_error(h));
    next_report(fds[0], start);
    cr_assert(start->kind == PS_REPORT_START && start->rank == 0 && start->u.start.step == 0 &&
              start->u.start.steps_per_epoch == 0);
    return h;
}

Test(shardps_env, reports_reach_the_launcher, .timeout = 30)
{
    ps_report r;
    int fds[2];
    shardps *h = launched(fds, 10000, "SHARDPS_TOTAL_STEPS=10", &r);

    cr_assert_eq(r.u.start.steps, 10);
    for (int step = 1; step <= 10; step++)
        cr_assert_eq(shardps_report(h, (uint64_t)step, step == 2 ? NAN : 0.1 * step, 32), 0);
    next_report(fds[0], &r);
    /* Steps 1..5, the unknown loss of step 2 left out of the mean. */
    cr_assert(r.kind == PS_REPORT_PROGRESS && r.u.progress.step == 5 && r.u.progress.steps == 10 &&
              r.u.progress.epoch == 0);
    cr_assert_float_eq(r.u.progress.loss, (0.1 + 0.3 + 0.4 + 0.5) / 4, 1e-12);
    cr_assert_gt(r.u.progress.samples_per_second, 0);
    next_report(fds[0], &r);
    cr_assert(r.kind == PS_REPORT_PROGRESS && r.u.progress.step == 10);
    cr_assert_float_eq(r.u.progress.loss, 0.8, 1e-12);
    cr_assert_eq(shardps_report(h, 9, 0.1, 32), -EINVAL);
    cr_assert(strstr(shardps_last_error(h), "step 9 is before step 10") != NULL, "%s",
              shardps_last_error(h));
    /* Steps short of an interval make their line when the handle closes,
     * so the launcher learns where the worker stopped. */
    cr_assert_eq(shardps_report(h, 12, 0.25, 32), 0);
    cr_assert_eq(shardps_close(h), 0);
    next_report(fds[0], &r);
    cr_assert(r.kind == PS_REPORT_PROGRESS && r.u.progress.step == 12);
    cr_assert_float_eq(r.u.progress.loss, 0.25, 1e-12);
    next_report(fds[0], &r);
    cr_assert(r.kind == PS_REPORT_DONE && r.u.done.steps == 12 && r.u.done.samples == 352 &&
              r.u.done.test_accuracy == -1);
    close(fds[0]);
    close(fds[1]);
    server_down();
}

/* Without a launcher nothing is written anywhere but the log, and a handle
 * abandoned says no "done": the launcher must not take it as finished. */
Test(shardps_env, an_abandoned_handle_says_no_done, .timeout = 30)
{
    ps_report r;
    int fds[2];
    char byte;
    shardps *h = launched(fds, 200, NULL, &r);

    cr_assert_eq(r.u.start.steps, 0, "the run's length is not known");
    shardps_abandon(h);
    /* Nothing more: the read times out (the socket's other end is still
     * open here, so silence is not an end of file). */
    cr_assert_eq(read(fds[0], &byte, 1), -1);
    cr_assert(errno == EAGAIN || errno == EWOULDBLOCK);
    close(fds[0]);
    close(fds[1]);
    server_down();
}

/* A handle made by shardps_new reports to the launcher too (a program that
 * takes its job from its own options); one told report-fd -1 says nothing.
 * Two ranks of one job, so both connect. */
Test(shardps_env, every_handle_reports_unless_told_not_to, .timeout = 30)
{
    struct timeval tv = {.tv_usec = 200000};
    ps_kv_server_config cfg;
    const char *addr[1];
    shardps *h[2];
    ps_report r;
    int fds[2];
    char fd[16], byte;

    kv_fixture_config(&cfg);
    cfg.world = 2;
    server_up_with(&cfg);
    addr[0] = fx.addr;
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM, 0, fds), 0);
    setsockopt(fds[0], SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    snprintf(fd, sizeof(fd), "%d", fds[1]);
    setenv("SHARDPS_REPORT_FD", fd, 1);
    for (int rank = 0; rank < 2; rank++) {
        cr_assert_eq(shardps_new(&h[rank], addr, 1, rank, 2), 0);
        cr_assert_eq(shardps_set_option(h[rank], "seed", "1234"), 0);
        cr_assert_eq(shardps_set_option(h[rank], "chunk-bytes", "64"), 0);
        cr_assert_eq(shardps_set_option(h[rank], "log-level", "none"), 0);
        cr_assert_eq(shardps_declare_mlp(h[rank], sizes, 3), 0);
    }
    cr_assert_eq(shardps_set_option(h[1], "report-fd", "-1"), 0);
    cr_assert_eq(shardps_connect(h[0]), 0, "%s", shardps_last_error(h[0]));
    next_report(fds[0], &r);
    cr_assert(r.kind == PS_REPORT_START && r.rank == 0);
    cr_assert_eq(shardps_connect(h[1]), 0, "%s", shardps_last_error(h[1]));
    cr_assert_eq(shardps_close(h[1]), 0);
    cr_assert_eq(shardps_close(h[0]), 0);
    next_report(fds[0], &r);
    cr_assert(r.kind == PS_REPORT_DONE && r.rank == 0 && r.u.done.steps == 0);
    cr_assert_eq(read(fds[0], &byte, 1), -1, "rank 1 reported though told not to");
    close(fds[0]);
    close(fds[1]);
    server_down();
}
