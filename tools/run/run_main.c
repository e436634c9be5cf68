/* shardps-run: the torchrun of shardps. Starts S servers on this machine
 * and W copies of any command, each with the job in its environment
 * (worker_env.h: SHARDPS_SERVERS, SHARDPS_RANK, SHARDPS_WORKERS, the job's
 * options as SHARDPS_<NAME>, torchrun's RANK, WORLD_SIZE, LOCAL_RANK), shows
 * one progress line for the job from what the workers report through
 * libshardps (shardps_report), sums the job up at the end, and stops
 * everything together.
 *
 *   shardps-run --servers 2 --workers 2 [job options] -- python3 train.py ARGS
 *
 * main splits its argv at "--", parses the options before it (the job's and
 * the launchers', launcher.h), has the job checked (job_check.h: the rules,
 * the files the options name, the command found), and runs it through the
 * launcher that shardps-cluster uses too. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "job_check.h"
#include "launcher.h"

/* The workers' command: the same argv for every rank, the rank being in
 * its environment. */
static char **ps__command_argv(void *arg, int rank)
{
    (void)rank;
    return arg;
}

/* The command as one line for the log, cut to fit buf. */
static const char *ps__command_text(char **cmd, char *buf, size_t len)
{
    size_t used = 0;

    buf[0] = '\0';
    for (int i = 0; cmd[i] && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%s", i ? " " : "", cmd[i]);
    return buf;
}

int main(int argc, char **argv)
{
    static ps_launcher l;
    static ps_job_plan plan;
    char err[1024], what[256], text[200];
    int split = 1, rc;

    while (split < argc && strcmp(argv[split], "--") != 0)
        split++;
    rc = ps_launcher_parse(&l, "shardps-run",
                           "Runs a parameter-server job on this machine: S servers on "
                           "127.0.0.1 (ports chosen by the OS) and W copies of CMD, each with "
                           "the job in its environment: shardps-run [options] -- CMD [ARGS...] "
                           "(docs/run.md).",
                           NULL, 0, split, argv);
    if (rc != 0)
        return rc == 1 ? 0 : 2;
    if (split + 1 >= argc) {
        fprintf(stderr,
                "shardps-run: no command to run: shardps-run [options] -- CMD [ARGS...]; see "
                "shardps-run --help\n");
        return 2;
    }
    rc = ps_job_check(&l.job,
                      &(ps_job_process){.program = PS_JOB_LAUNCHER,
                                        .flags = &l.ctx,
                                        .num_servers = l.sup.n_servers,
                                        .bin_dir = l.sup.bin_dir,
                                        .command = argv[split + 1]},
                      &plan, err, sizeof(err));
    ps__command_text(argv + split + 1, text, sizeof(text));
    if (rc < 0) {
        fprintf(stderr, "shardps-run: %s\n", err);
        rc = rc == -ENOMEM ? 1 : 2;
    } else if (l.check) {
        printf("shardps-run: the options are valid: %d server%s and %d worker%s running %s\n",
               l.sup.n_servers, l.sup.n_servers == 1 ? "" : "s", l.job.workers,
               l.job.workers == 1 ? "" : "s", text);
    } else {
        if (l.job.model)
            l.job.model = plan.model_path;
        l.sup.worker_argv = ps__command_argv;
        l.sup.worker_arg = argv + split + 1;
        snprintf(what, sizeof(what), "each running %s", text);
        rc = ps_launcher_run(&l, 0, what);
    }
    ps_job_plan_free(&plan);
    return rc;
}
