/* Tests for the worker -> launcher report lines: every kind reads back as
 * written (non-finite numbers as NaN), and malformed lines are refused with a
 * reason rather than half read. */
#include <criterion/criterion.h>

#include <errno.h>
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "report.h"

static void round_trip(const ps_report *in)
{
    char line[PS_REPORT_MAX_LINE], err[160];
    ps_report out;
    int n = ps_report_format(in, line, sizeof(line));

    cr_assert_gt(n, 0);
    cr_assert_eq(line[n - 1], '\n');
    cr_assert_eq((size_t)n, strlen(line));
    line[n - 1] = '\0';
    cr_assert_eq(ps_report_parse(line, &out, err, sizeof(err)), 0, "%s: %s", line, err);
    cr_assert_eq(out.kind, in->kind);
    cr_assert_eq(out.rank, in->rank);
    switch (in->kind) {
    case PS_REPORT_START:
        cr_assert_eq(memcmp(&out.u.start, &in->u.start, sizeof(in->u.start)), 0);
        break;
    case PS_REPORT_PROGRESS:
        cr_assert_eq(out.u.progress.epoch, in->u.progress.epoch);
        cr_assert_eq(out.u.progress.step, in->u.progress.step);
        cr_assert_eq(out.u.progress.steps, in->u.progress.steps);
        cr_assert_eq(out.u.progress.samples_per_second, in->u.progress.samples_per_second);
        cr_assert_eq(out.u.progress.staleness_mean, in->u.progress.staleness_mean);
        cr_assert_eq(out.u.progress.staleness_max, in->u.progress.staleness_max);
        cr_assert_eq(out.u.progress.dropped, in->u.progress.dropped);
        if (isnan(in->u.progress.loss))
            cr_assert(isnan(out.u.progress.loss));
        else
            cr_assert_eq(out.u.progress.loss, in->u.progress.loss);
        break;
    case PS_REPORT_STEP:
        cr_assert_eq(out.u.step.step, in->u.step.step);
        break;
    case PS_REPORT_EVAL:
        cr_assert_eq(memcmp(&out.u.eval, &in->u.eval, sizeof(in->u.eval)), 0);
        break;
    case PS_REPORT_DONE:
        cr_assert_eq(memcmp(&out.u.done, &in->u.done, sizeof(in->u.done)), 0);
        break;
    }
}

Test(report, every_kind_round_trips)
{
    ps_report r;

    memset(&r, 0, sizeof(r));
    r.kind = PS_REPORT_START;
    r.rank = 3;
    r.u.start = (ps_report_start){50, UINT64_MAX, 937};
    round_trip(&r);

    memset(&r, 0, sizeof(r));
    r.kind = PS_REPORT_PROGRESS;
    r.rank = 0;
    r.u.progress =
        (ps_report_progress){2, 1200, 9370, 0.1 + 0.2, 12345.678, 1.0 / 3, 7, 1ull << 40, 12};
    round_trip(&r);
    r.u.progress.loss = NAN; /* a diverged run: travels as null */
    round_trip(&r);

    memset(&r, 0, sizeof(r));
    r.kind = PS_REPORT_STEP;
    r.rank = 2;
    r.u.step.step = 100;
    round_trip(&r);

    memset(&r, 0, sizeof(r));
    r.kind = PS_REPORT_EVAL;
    r.rank = 0;
    r.u.eval = (ps_report_eval){1, 937, 0.8531, 0.41234567890123, 1};
    round_trip(&r);
    r.u.eval.epoch_end = 0;
    round_trip(&r);

    memset(&r, 0, sizeof(r));
    r.kind = PS_REPORT_DONE;
    r.rank = 65535;
    r.u.done = (ps_report_done){9370, 599680, 61.25, -1, 5, 3, 123456789012ull, 98765432109ull};
    round_trip(&r);
}

Test(report, written_in_one_line_to_a_pipe)
{
    ps_report r = {.kind = PS_REPORT_EVAL, .rank = 1, .u.eval = {4, 40, 0.5, 1.5, 0}}, out;
    char buf[PS_REPORT_MAX_LINE], err[160];
    int fd[2];
    ssize_t n;

    cr_assert_eq(pipe(fd), 0);
    cr_assert_eq(ps_report_write(fd[1], &r), 0);
    close(fd[1]);
    n = read(fd[0], buf, sizeof(buf) - 1);
    close(fd[0]);
    cr_assert_gt(n, 1);
    cr_assert_eq(buf[n - 1], '\n');
    buf[n - 1] = '\0';
    cr_assert_eq(ps_report_parse(buf, &out, err, sizeof(err)), 0, "%s", err);
    cr_assert_eq(out.u.eval.step, 40);
}

Test(report, format_refuses_a_small_buffer)
{
    ps_report r = {.kind = PS_REPORT_START, .rank = 0, .u.start = {0, 10, 5}};
    char buf[16];

    cr_assert_eq(ps_report_format(&r, buf, sizeof(buf)), -ENOSPC);
}

static void refused(const char *line, const char *why)
{
    ps_report out;
    char err[160];

    cr_assert_eq(ps_report_parse(line, &out, err, sizeof(err)), -EINVAL, "accepted: %s", line);
    cr_assert(strstr(err, why) != NULL, "for %s: '%s' does not say '%s'", line, err, why);
}

#define EVAL_TAIL                                                                                  \
    "\"epoch\":1,\"step\":10,\"test_accuracy\":0.5,\"test_loss\":1,\"epoch_end\":false"

Test(report, refuses_malformed_lines)
{
    char longline[PS_REPORT_MAX_LINE + 10];

    /* The well-formed line the others are variations of. */
    {
        ps_report out;
        char err[160];
        cr_assert_eq(ps_report_parse("{\"event\":\"eval\",\"rank\":0," EVAL_TAIL "}", &out, err,
                                     sizeof(err)),
                     0, "%s", err);
    }
    refused("", "not a JSON object");
    refused("epoch 1 done", "not a JSON object");
    refused("{\"event\":\"eval\",\"rank\":0," EVAL_TAIL, "expected ',' or '}'");
    refused("{\"event\":\"eval\",\"rank\":0," EVAL_TAIL "}x", "text after the object");
    refused("{\"rank\":0," EVAL_TAIL "}", "no \"event\"");
    refused("{\"event\":\"reboot\",\"rank\":0}", "unknown event");
    refused("{\"event\":\"eval\",\"event\":\"eval\",\"rank\":0," EVAL_TAIL "}", "given twice");
    refused("{\"event\":\"eval\"," EVAL_TAIL "}", "no \"rank\"");
    refused("{\"event\":\"eval\",\"rank\":0,\"epoch\":1,\"step\":10,\"test_accuracy\":0.5}",
            "no \"test_loss\"");
    refused("{\"event\":\"eval\",\"rank\":0,\"loss\":2," EVAL_TAIL "}", "unknown key \"loss\"");
    refused("{\"event\":\"eval\",\"rank\":0,\"rank\":1," EVAL_TAIL "}", "\"rank\" given twice");
    refused("{\"event\":\"eval\",\"rank\":\"zero\"," EVAL_TAIL "}", "not a number");
    refused("{\"event\":\"eval\",\"rank\":0.5," EVAL_TAIL "}", "not an integer");
    refused("{\"event\":\"eval\",\"rank\":4294967296," EVAL_TAIL "}", "not an integer");
    refused("{\"event\":\"eval\",\"rank\":0,\"epoch\":1,\"step\":-10,\"test_accuracy\":0.5,"
            "\"test_loss\":1}",
            "unsigned");
    refused("{\"event\":\"eval\",\"rank\":0,\"epoch\":1,\"step\":18446744073709551616,"
            "\"test_accuracy\":0.5,\"test_loss\":1}",
            "unsigned");
    refused("{\"event\":\"eval\",\"rank\":0,\"epoch\":1,\"step\":null,\"test_accuracy\":0.5,"
            "\"test_loss\":1}",
            "not a number");
    refused("{\"event\":\"eval\",\"rank\":0,\"epoch\":1,\"step\":10,\"test_accuracy\":nan,"
            "\"test_loss\":1}",
            "not a number");
    refused("{\"event\":\"eval\",\"rank\":0,\"epoch\":1,\"step\":10,\"test_accuracy\":1e999,"
            "\"test_loss\":1}",
            "finite");
    refused("{\"event\":\"eval\",\"rank\":0,\"epoch\":1,\"step\":10,\"test_accuracy\":0.5.5,"
            "\"test_loss\":1}",
            "finite");
    refused("{\"event\":\"eval\",\"rank\":0,\"epoch\":1,\"step\":10,\"test_accuracy\":,"
            "\"test_loss\":1}",
            "empty value");
    refused("{\"event\":\"eval\", \"rank\":0," EVAL_TAIL "}", "expected a key");
    refused("{\"event\":\"eval\",\"rank\":0,\"epoch\":1,\"step\":10,\"test_accuracy\":0.5,"
            "\"test_loss\":1,\"epoch_end\":1}",
            "not true or false");
    memset(longline, 'x', sizeof(longline) - 1);
    longline[0] = '{';
    longline[sizeof(longline) - 1] = '\0';
    refused(longline, "longer than");
}
