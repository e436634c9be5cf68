/* Tests for the launcher's view of the workers' reports (tools/cluster/
 * progress.c) and its end-of-job summary (summary.c), without processes:
 * that a report hands back the step the drills wait for, that an unreadable
 * one or one naming another rank is dropped, and that the summary's totals
 * add up the workers' last reports. */
#include <criterion/criterion.h>
#include <criterion/redirect.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <uv.h>

#include "console.h"
#include "progress.h"
#include "ps_error.h"
#include "report.h"
#include "summary.h"

static uv_loop_t loop;
static ps_console *con;
static ps_progress *prog;

static void setup(void)
{
    cr_assert_eq(uv_loop_init(&loop), 0);
    cr_assert_eq(ps_console_init(&con, &loop), 0);
    cr_assert_eq(ps_progress_init(&prog, con, 2, 3), 0);
}

static void teardown(void)
{
    ps_progress_free(prog);
    ps_console_close(con);
    uv_run(&loop, UV_RUN_DEFAULT);
    ps_console_free(con);
    cr_assert_eq(uv_loop_close(&loop), 0);
}

/* r as the line a worker writes, without its newline. */
static const char *line_of(const ps_report *r)
{
    static char buf[PS_REPORT_MAX_LINE];
    int n = ps_report_format(r, buf, sizeof(buf));

    cr_assert_gt(n, 0);
    buf[n - 1] = '\0';
    return buf;
}

static int report(int rank, const ps_report *r, uint64_t *step)
{
    return ps_progress_report(prog, rank, line_of(r), step);
}

TestSuite(progress, .init = setup, .fini = teardown, .timeout = 10);

Test(progress, init_refuses_bad_worker_counts)
{
    ps_progress *p = (ps_progress *)1;

    cr_assert_eq(ps_progress_init(&p, con, 0, 1), -EINVAL);
    cr_assert_null(p);
    cr_assert_eq(ps_progress_init(&p, con, PS_PROGRESS_MAX_WORKERS + 1, 1), -EINVAL);
    ps_progress_free(NULL);
}

Test(progress, steps_go_to_the_drills)
{
    ps_report start = {.kind = PS_REPORT_START, .rank = 0};
    ps_report pr = {.kind = PS_REPORT_PROGRESS, .rank = 1};
    ps_report st = {.kind = PS_REPORT_STEP, .rank = 0};
    uint64_t step = 0;

    start.u.start.steps = 30;
    start.u.start.steps_per_epoch = 10;
    cr_assert_eq(report(0, &start, &step), 0);
    pr.u.progress.epoch = 1;
    pr.u.progress.step = 7;
    pr.u.progress.steps = 30;
    cr_assert_eq(report(1, &pr, &step), 1);
    cr_assert_eq(step, 7);
    st.u.step.step = 12;
    cr_assert_eq(report(0, &st, &step), 1);
    cr_assert_eq(step, 12);
}

Test(progress, unreadable_or_foreign_reports_are_dropped)
{
    ps_report done = {.kind = PS_REPORT_DONE, .rank = 1};
    uint64_t step = 99;

    cr_assert_eq(ps_progress_report(prog, 0, "{\"kind\":\"nonsense\"}", &step), -PS_EPROTO);
    /* Worker 0 sending worker 1's "done" must not mark either done. */
    cr_assert_eq(report(0, &done, &step), -PS_EPROTO);
    cr_assert_eq(step, 99);
    cr_assert_not(ps_progress_worker_done(prog, 0));
    cr_assert_not(ps_progress_worker_done(prog, 1));
}

Test(progress, summary_adds_up_the_workers)
{
    ps_report eval = {.kind = PS_REPORT_EVAL, .rank = 0};
    ps_report d0 = {.kind = PS_REPORT_DONE, .rank = 0};
    ps_report pr = {.kind = PS_REPORT_PROGRESS, .rank = 1};
    ps_summary s = {0};
    uint64_t step;

    eval.u.eval.epoch = 1;
    eval.u.eval.step = 10;
    eval.u.eval.epoch_end = 1;
    eval.u.eval.test_accuracy = 0.75;
    cr_assert_eq(report(0, &eval, &step), 0);
    d0.u.done.samples = 1000;
    d0.u.done.seconds = 4;
    d0.u.done.bytes_pushed = 3000000;
    d0.u.done.dropped = 5;
    d0.u.done.rejected = 2;
    cr_assert_eq(report(0, &d0, &step), 0);
    pr.u.progress.epoch = 1;
    pr.u.progress.step = 9;
    pr.u.progress.steps = 30;
    pr.u.progress.staleness_mean = 1.5;
    pr.u.progress.staleness_max = 4;
    pr.u.progress.dropped = 1;
    cr_assert_eq(report(1, &pr, &step), 1);

    cr_assert(ps_progress_worker_done(prog, 0));
    cr_assert_not(ps_progress_worker_done(prog, 1));
    ps_progress_summary(prog, &s);
    cr_assert_float_eq(s.test_accuracy, 0.75, 1e-12);
    cr_assert_float_eq(s.samples, 1000, 1e-9);
    cr_assert_float_eq(s.seconds, 4, 1e-9);
    cr_assert_float_eq(s.bytes_pushed, 3e6, 1e-3);
    cr_assert_float_eq(s.staleness_mean, 0.75, 1e-12); /* (0 + 1.5) / 2 workers */
    cr_assert_float_eq(s.staleness_max, 4, 1e-12);
    cr_assert_eq(s.dropped, 6);
    cr_assert_eq(s.rejected, 2);
    cr_assert_eq(s.lost, 1);
}

/* A worker on libshardps knows no epochs and here not the run's length
 * either: its reports count all the same, and the line shows what is known. */
Test(progress, a_library_workers_reports)
{
    ps_report start = {.kind = PS_REPORT_START, .rank = 0};
    ps_report pr = {.kind = PS_REPORT_PROGRESS, .rank = 0};
    ps_report d0 = {.kind = PS_REPORT_DONE, .rank = 0};
    uint64_t step = 0;

    cr_redirect_stdout();
    cr_assert_not(ps_progress_worker_started(prog, 0));
    cr_assert_eq(report(0, &start, &step), 0);
    cr_assert(ps_progress_worker_started(prog, 0));
    cr_assert_not(ps_progress_worker_started(prog, 1));
    pr.u.progress.step = 5;
    pr.u.progress.loss = 0.5;
    pr.u.progress.samples_per_second = 100;
    cr_assert_eq(report(0, &pr, &step), 1);
    cr_assert_eq(step, 5);
    cr_assert_eq(ps_progress_worker_step(prog, 0), 5);
    cr_assert_not(ps_progress_worker_done(prog, 0));
    d0.u.done.steps = 5;
    cr_assert_eq(report(0, &d0, &step), 0);
    cr_assert(ps_progress_worker_done(prog, 0));
    fflush(stdout);
    cr_assert_stdout_eq_str("step 5  loss 0.5000  100 samples/s\n");
}

Test(summary, json_line_carries_the_figures)
{
    ps_summary s = {.prog = "shardps-cluster",
                    .mode = "sync",
                    .compress = "none",
                    .servers = 2,
                    .workers = 2,
                    .wall_seconds = 3.5,
                    .test_accuracy = NAN,
                    .steps_per_epoch = 10,
                    .samples = 800,
                    .seconds = 2,
                    .bytes_pushed = 1e6,
                    .dropped = 3,
                    .rejected = 1,
                    .lost = 1};
    char *text = NULL;
    size_t len = 0;
    FILE *out = open_memstream(&text, &len);

    cr_assert_not_null(out);
    ps_summary_print(&s, 1, out);
    fclose(out);
    cr_assert_not_null(strstr(text, "\nshardps-cluster summary\n"), "%s", text);
    cr_assert_not_null(strstr(text, "  test accuracy     not evaluated\n"), "%s", text);
    cr_assert_not_null(strstr(text, "  samples/s         400 (all workers"), "%s", text);
    cr_assert_not_null(strstr(text, "  not applied       1 chunks rejected"), "%s", text);
    cr_assert_not_null(strstr(text, "{\"test_accuracy\":null,\"wall_seconds\":3.500,"
                                    "\"samples_per_second\":400.0,\"mode\":\"sync\","),
                       "%s", text);
    cr_assert_not_null(strstr(text, "\"chunks_dropped\":3,\"chunks_rejected\":1,"
                                    "\"chunks_late\":2,\"workers_lost\":1}\n"),
                       "%s", text);
    free(text);
}
