/* Tests for the job-option table: each program gets the options it takes
 * and no others; what the launcher hands a child parses back to the very
 * values it holds; the job settings list is canonical; and the settings diff
 * names every differing setting with both values, and refuses a malformed
 * list. */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "flags.h"
#include "job_options.h"

static int has_flag(const ps_flag *flags, int n, const char *name)
{
    for (int i = 0; i < n; i++)
        if (strcmp(flags[i].name, name) == 0)
            return 1;
    return 0;
}

Test(job_options, each_program_gets_its_options)
{
    ps_job_options o;
    ps_flag s[96], w[96], l[96];
    int ns, nw, nl;

    ps_job_options_defaults(&o);
    cr_assert_str_eq(o.mode, "sync");
    cr_assert_eq(o.apply_threads, -1);
    cr_assert_str_eq(o.hidden, "256,128");
    ns = ps_job_options_flags(&o, PS_JOB_SERVER, s, 96);
    nw = ps_job_options_flags(&o, PS_JOB_WORKER, w, 96);
    nl = ps_job_options_flags(&o, PS_JOB_LAUNCHER, l, 96);
    cr_assert(ns > 0 && nw > 0 && nl > 0);
    cr_assert_eq(ps_job_options_flags(&o, PS_JOB_SERVER, s, 3), -ENOSPC);
    /* The bugs of issue 13: the launcher had no --weight-decay or
     * --lr-step-size. The model is the worker's and the launcher's alone:
     * servers learn the tensors from the workers. */
    cr_assert(has_flag(l, nl, "weight-decay") && has_flag(l, nl, "lr-step-size"));
    cr_assert(has_flag(l, nl, "reject-nonfinite") && has_flag(l, nl, "min-lr"));
    cr_assert(has_flag(w, nw, "model") && has_flag(l, nl, "save-model") && has_flag(w, nw, "mode"));
    cr_assert(!has_flag(s, ns, "model") && !has_flag(s, ns, "hidden"));
    cr_assert(!has_flag(w, nw, "sync-quorum") && !has_flag(s, ns, "batch"));
    cr_assert(!has_flag(l, nl, "servers"), "the launcher's --servers is a count, its own");
    /* Every flag points into o; the shared ones name their section. */
    for (int i = 0; i < ns; i++) {
        cr_assert((char *)s[i].dest >= (char *)&o && (char *)s[i].dest < (char *)(&o + 1));
        if (strcmp(s[i].name, "lr") == 0)
            cr_assert_str_eq(s[i].section, "optimizer");
        if (strcmp(s[i].name, "sync-quorum") == 0)
            cr_assert_null(s[i].section);
    }
}

/* What the launcher hands a server parses back, through the server's own
 * flag table, to the very values the launcher holds. */
Test(job_options, argv_round_trips)
{
    ps_job_options l, s;
    ps_flag flags[96];
    char buf[8192], *argv[200], *full[201], a[4096], b[4096];
    int n, nf;

    ps_job_options_defaults(&l);
    l.optimizer = "adamw";
    l.weight_decay = 0.1;
    l.lr = 0.1 + 1e-17; /* no shorter decimal reads back as this double */
    l.lr_schedule = "step";
    l.lr_step_size = 500;
    l.staleness_damping = 1;
    l.reject_nonfinite = 0;
    l.batch = 7;
    l.restore = PS_RESTORE_AUTO; /* a switch with a word: handed over as "--restore=auto" */
    n = ps_job_options_argv(&l, PS_JOB_LAUNCHER, PS_JOB_SERVER, buf, sizeof(buf), argv, 200);
    cr_assert_gt(n, 0);
    for (int i = 0; i < n; i++) {
        cr_assert(strcmp(argv[i], "--batch") != 0, "a worker's option went to a server");
        cr_assert(strcmp(argv[i], "--checkpoint-dir") != 0, "an unset path was handed over");
    }
    cr_assert_eq(ps_job_options_argv(&l, PS_JOB_LAUNCHER, PS_JOB_SERVER, buf, 64, argv, 200),
                 -ENOSPC);
    cr_assert_eq(ps_job_options_argv(&l, PS_JOB_LAUNCHER, PS_JOB_SERVER, buf, sizeof(buf), argv, 4),
                 -ENOSPC);
    n = ps_job_options_argv(&l, PS_JOB_LAUNCHER, PS_JOB_SERVER, buf, sizeof(buf), argv, 200);
    full[0] = "shardps-server";
    memcpy(full + 1, argv, (size_t)n * sizeof(*argv));
    ps_job_options_defaults(&s);
    nf = ps_job_options_flags(&s, PS_JOB_SERVER, flags, 96);
    cr_assert_eq(ps_flags_parse(flags, nf, n + 1, full, "shardps-server", "test"), 0);
    cr_assert(s.lr == l.lr, "lr %.17g, not %.17g", s.lr, l.lr);
    cr_assert_str_eq(s.optimizer, "adamw");
    cr_assert_eq(s.staleness_damping, 1);
    cr_assert_eq(s.reject_nonfinite, 0);
    cr_assert_eq(s.lr_step_size, 500);
    cr_assert_eq(s.restore, PS_RESTORE_AUTO);
    cr_assert_eq(ps_job_settings_format(&l, 2, a, sizeof(a)), 0);
    cr_assert_eq(ps_job_settings_format(&s, 2, b, sizeof(b)), 0);
    cr_assert_str_eq(a, b);
}

Test(job_options, settings_are_canonical)
{
    ps_job_options o;
    char a[4096];

    ps_job_options_defaults(&o);
    cr_assert_eq(ps_job_settings_format(&o, 3, a, sizeof(a)), 0);
    cr_assert_eq(strncmp(a, "num-servers=3\n", 14), 0, "%s", a);
    cr_assert(strstr(a, "\nmode=sync\n") && strstr(a, "\nlr=0.001\n"), "%s", a);
    cr_assert(strstr(a, "\nseed=1\n") && strstr(a, "\nweight-decay=0\n"), "%s", a);
    /* The model is the tensor table's to compare, not a setting's. */
    cr_assert_null(strstr(a, "input="));
    cr_assert_null(strstr(a, "hidden="));
    /* Per-process and per-program options are not job settings. */
    cr_assert_null(strstr(a, "batch="));
    cr_assert_null(strstr(a, "auth-token-file="));
    cr_assert_eq(ps_job_settings_format(&o, 3, a, 40), -ENOSPC);
}

Test(job_options, diff_names_each_difference)
{
    char msg[512];

    cr_assert_eq(ps_job_settings_diff("a=1\nb=2\n", "a=1\nb=2\n", "w", "s", msg, sizeof(msg)), 0);
    cr_assert_str_eq(msg, "");
    cr_assert_eq(ps_job_settings_diff("mode=sync\nlr=0.1\nseed=1\n", "mode=async\nlr=0.1\nseed=2",
                                      "the worker", "this server", msg, sizeof(msg)),
                 2);
    cr_assert_str_eq(msg, "mode: sync on the worker, async on this server; seed: 1 on the worker, "
                          "2 on this server");
    /* A value that is a prefix of the other still differs. */
    cr_assert_eq(ps_job_settings_diff("lr=0.1\n", "lr=0.12\n", "w", "s", msg, sizeof(msg)), 1);
    /* A setting one side lacks (an older or newer peer) is named too. */
    cr_assert_eq(ps_job_settings_diff("a=1\nb=2\n", "a=1\nc=3\n", "w", "s", msg, sizeof(msg)), 2);
    cr_assert_str_eq(msg, "b: 2 on w, (none) on s; c: (none) on w, 3 on s");
    /* Empty lists agree with each other only. */
    cr_assert_eq(ps_job_settings_diff("", "", "w", "s", msg, sizeof(msg)), 0);
    cr_assert_eq(ps_job_settings_diff("a=1\n", "", "w", "s", msg, sizeof(msg)), 1);
    /* Malformed: no '=', an empty name, a name twice. */
    cr_assert_eq(ps_job_settings_diff("a\n", "a=1\n", "w", "s", msg, sizeof(msg)), -EINVAL);
    cr_assert_eq(ps_job_settings_diff("a=1\n", "=1\n", "w", "s", msg, sizeof(msg)), -EINVAL);
    cr_assert_eq(ps_job_settings_diff("a=1\na=2\n", "a=1\n", "w", "s", msg, sizeof(msg)), -EINVAL);
    cr_assert_eq(ps_job_settings_diff("a=1\nb\n=c\n", "a=1\n", "w", "s", msg, sizeof(msg)),
                 -EINVAL);
    /* Control characters (a log line a peer could garble) and lists at the
     * size bound are refused. */
    cr_assert_eq(ps_job_settings_diff("a=\x1b[2J\n", "a=1\n", "w", "s", msg, sizeof(msg)), -EINVAL);
    {
        static char big[PS_JOB_SETTINGS_MAX + 8];
        memset(big, 'x', sizeof(big) - 1);
        big[0] = 'a';
        big[1] = '=';
        cr_assert_eq(ps_job_settings_diff(big, "a=1\n", "w", "s", msg, sizeof(msg)), -EINVAL);
        big[PS_JOB_SETTINGS_MAX - 1] = '\0';
        cr_assert_eq(ps_job_settings_diff(big, "a=1\n", "w", "s", msg, sizeof(msg)), 1);
    }
    /* A short buffer is cut, still terminated, and the count is whole. */
    cr_assert_eq(ps_job_settings_diff("a=1\nb=2\nc=3\n", "a=9\nb=9\nc=9\n", "w", "s", msg, 12), 3);
    cr_assert_eq(strlen(msg), 11);
}

/* --restore is a switch that also takes its word: "--restore" alone means
 * "must restore", "--restore auto" (or "=auto") resume-or-fresh, and a
 * word is only taken as the switch's value, never another option. */
Test(job_options, restore_takes_auto)
{
    ps_job_options o;
    ps_flag flags[96];
    char *must[] = {"shardps-server", "--restore", "--workers", "3"};
    char *spaced[] = {"shardps-server", "--restore", "auto"};
    char *joined[] = {"shardps-server", "--restore=auto"};
    char *other[] = {"shardps-server", "--restore", "maybe"};
    int nf;

    ps_job_options_defaults(&o);
    nf = ps_job_options_flags(&o, PS_JOB_SERVER, flags, 96);
    cr_assert_eq(ps_flags_parse(flags, nf, 4, must, "shardps-server", "test"), 0);
    cr_assert_eq(o.restore, 1);
    cr_assert_eq(o.workers, 3);
    ps_job_options_defaults(&o);
    cr_assert_eq(ps_flags_parse(flags, nf, 3, spaced, "shardps-server", "test"), 0);
    cr_assert_eq(o.restore, PS_RESTORE_AUTO);
    ps_job_options_defaults(&o);
    cr_assert_eq(ps_flags_parse(flags, nf, 2, joined, "shardps-server", "test"), 0);
    cr_assert_eq(o.restore, PS_RESTORE_AUTO);
    /* Not a word of the switch: an unexpected argument. */
    cr_assert_lt(ps_flags_parse(flags, nf, 3, other, "shardps-server", "test"), 0);
}

Test(job_options, fingerprint_tells_jobs_apart)
{
    cr_assert_eq(ps_job_fingerprint("a=1\n", 7), ps_job_fingerprint("a=1\n", 7));
    cr_assert_neq(ps_job_fingerprint("a=1\n", 7), ps_job_fingerprint("a=2\n", 7));
    cr_assert_neq(ps_job_fingerprint("a=1\n", 7), ps_job_fingerprint("a=1\n", 8));
    cr_assert_eq(ps_job_fingerprint(NULL, 7), ps_job_fingerprint("", 7));
}

/* An alias row (--data-dir, the older name of --data) is taken but never
 * handed on; the library and shardps-eval (the data, and for --follow the
 * job's servers and model) take their rows of the same table. */
Test(job_options, aliases_and_the_library)
{
    ps_job_options o;
    ps_flag lib[16], ev[16];
    char buf[16384], *argv[200];
    const char *want[] = {"auth-token-file", "seed",        "chunk-bytes",
                          "total-steps",     "compress",    "connect-timeout",
                          "request-timeout", "max-payload", "progress-every",
                          "max-row-ids"};
    const char *eval_wants[] = {"servers",    "workers",  "auth-token-file", "model",
                                "hidden",     "seed",     "chunk-bytes",     "batch",
                                "data",       "data-dir", "connect-timeout", "request-timeout",
                                "max-payload"};
    int n, has_data = 0;

    ps_job_options_defaults(&o);
    n = ps_job_options_flags(&o, PS_JOB_LIBRARY, lib, 16);
    cr_assert_eq(n, 10);
    for (int i = 0; i < 10; i++)
        cr_assert(has_flag(lib, n, want[i]), "the library lacks %s", want[i]);
    n = ps_job_options_flags(&o, PS_JOB_EVAL, ev, 16);
    cr_assert_eq(n, 13);
    for (int i = 0; i < n; i++)
        cr_assert(has_flag(ev, n, eval_wants[i]), "shardps-eval lacks %s", eval_wants[i]);
    for (int i = 0; i + 1 < n; i++)
        if (strcmp(ev[i].name, "data") == 0)
            cr_assert_eq(ev[i].dest, ev[i + 1].dest, "an alias sets the same member");
    o.data = "/somewhere";
    n = ps_job_options_argv(&o, PS_JOB_LAUNCHER, PS_JOB_WORKER, buf, sizeof(buf), argv, 200);
    cr_assert_gt(n, 0);
    for (int i = 0; i < n; i++) {
        cr_assert(strcmp(argv[i], "--data-dir") != 0, "an alias was handed on");
        has_data |= strcmp(argv[i], "--data") == 0 && strcmp(argv[i + 1], "/somewhere") == 0;
    }
    cr_assert(has_data);
    /* --epochs is auto unless given: --steps alone then means its steps. */
    cr_assert_eq(o.epochs, 0);
}

/* A worker holding the job's settings knows whether the servers' cosine
 * schedule can get a span from it: cosine with total-steps 0 needs the
 * worker's own plan; another schedule, or a span the servers hold, does not. */
Test(job_options, cosine_without_a_span)
{
    ps_job_options o;
    char a[PS_JOB_SETTINGS_MAX];

    ps_job_options_defaults(&o);
    cr_assert_str_eq(o.lr_schedule, "cosine");
    cr_assert_eq(ps_job_settings_format(&o, 2, a, sizeof(a)), 0);
    cr_assert_eq(ps_job_settings_unspanned(a, 0), 1);
    cr_assert_eq(ps_job_settings_unspanned(a, 1), 0);
    o.total_steps = 10;
    cr_assert_eq(ps_job_settings_format(&o, 2, a, sizeof(a)), 0);
    cr_assert_eq(ps_job_settings_unspanned(a, 0), 0);
    o.total_steps = 0;
    o.lr_schedule = "constant";
    cr_assert_eq(ps_job_settings_format(&o, 2, a, sizeof(a)), 0);
    cr_assert_eq(ps_job_settings_unspanned(a, 0), 0);
    /* Nothing said, or nothing readable: nothing to refuse. */
    cr_assert_eq(ps_job_settings_unspanned("", 0), 0);
    cr_assert_eq(ps_job_settings_unspanned("lr-schedule=cosine\n", 0), 0);
    cr_assert_eq(ps_job_settings_unspanned("lr-schedule=cosine\ntotal-steps=00\n", 0), 0);
    cr_assert_eq(ps_job_settings_unspanned("lr-schedule=cosine\ntotal-steps\n", 0), 0);
    cr_assert_eq(ps_job_settings_unspanned("lr-schedule=cosine\ntotal-steps=0\n", 0), 1);
}
