/* shardps-cluster: a whole parameter-server job of shardps-workers on this
 * machine.
 *
 * main parses the options (the job's and the launchers', launcher.h, and
 * its own fault drills), has the job checked as its servers and workers
 * will check it (job_check.h: the rules, the files, the data read and the
 * model built on them; --check stops there), and runs it through the one
 * launcher with shardps-worker and its flags as the workers' command
 * (ps__worker_argv), and with --evaluator shardps-eval --follow beside
 * them (ps__evaluator_argv): the supervisor (supervisor.h) starts, watches
 * and stops the processes, carrying out the drills (drills.h). */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "child_args.h"
#include "drills.h"
#include "job_check.h"
#include "job_data.h"
#include "launcher.h"

/* What shardps-worker gets besides the job in its environment
 * (worker_env.h): its threads, the launcher to die with, and per rank its
 * metrics file, rank 0's weights, the steps the drills wait for and a
 * straggler's delay. */
typedef struct {
    const ps_launcher *l;
    const char *dump_weights;
    const char *evaluator; /* the evaluator's curve; NULL: no evaluator */
    ps_drills *drills;
    char path[PATH_MAX];
    ps_child_args a;
} ps__worker_cmd;

static char **ps__worker_argv(void *arg, int r)
{
    ps__worker_cmd *w = arg;
    ps_child_args *a = &w->a;
    const char *metrics_dir = w->l->sup.metrics_dir;
    uint64_t steps[PS_DRILLS_MAX_STEPS];
    int n_steps = ps_drills_report_steps(w->drills, r, steps);

    ps_child_args_reset(a);
    ps_child_args_opt(a, "--threads", "%d", w->l->threads);
    ps_child_args_opt(a, "--parent-pid", "%ld", (long)getpid());
    if (metrics_dir)
        ps_child_args_opt(a, "--metrics-file", "%s/worker-%d.jsonl", metrics_dir, r);
    if (r == 0 && w->dump_weights)
        ps_child_args_opt(a, "--dump-weights", "%s", w->dump_weights);
    if (n_steps > 0) {
        char list[PS_DRILLS_MAX_STEPS * 24] = "";
        for (int i = 0; i < n_steps; i++)
            snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%" PRIu64, i ? "," : "",
                     steps[i]);
        ps_child_args_opt(a, "--report-steps", "%s", list);
    }
    /* The evaluator tests; rank 0 only scores the final weights. */
    if (w->evaluator)
        ps_child_args_flag(a, "--eval-at-end");
    if (ps_drills_slow_ms(w->drills, r) > 0)
        ps_child_args_opt(a, "--slow-ms", "%d", ps_drills_slow_ms(w->drills, r));
    if (a->too_long) {
        fprintf(stderr, "shardps-cluster: internal: more flags for a worker than ps_child_args "
                        "holds\n");
        return NULL;
    }
    snprintf(w->path, sizeof(w->path), "%s/shardps-worker", w->l->sup.bin_dir);
    a->argv[0] = w->path;
    a->argv[a->n + 1] = NULL;
    return a->argv;
}

/* shardps-eval --follow, writing its curve to the --evaluator file; the
 * job's options come in the workers' environment. */
static char **ps__evaluator_argv(const ps_launcher *l, const char *curve)
{
    static ps_child_args a;
    static char path[PATH_MAX];

    ps_child_args_reset(&a);
    ps_child_args_flag(&a, "--follow");
    ps_child_args_opt(&a, "--curve", "%s", curve);
    snprintf(path, sizeof(path), "%s/shardps-eval", l->sup.bin_dir);
    a.argv[0] = path;
    a.argv[a.n + 1] = NULL;
    return a.argv;
}

int main(int argc, char **argv)
{
    /* Static: the option table points at them, the run borrows them, and
     * the context must outlive every use of the strings. */
    static ps_launcher l;
    static ps_job_plan plan;
    static ps_job_datasets data;
    static ps__worker_cmd cmd = {.l = &l};
    const char *kill_worker = NULL, *slow_worker = NULL, *pause_worker = NULL, *kill_server = NULL;
    const ps_flag own[] = {
        {"slow-worker", PS_FLAG_STRING, &slow_worker, "RANK:MS",
         "make that worker wait MS every step (straggler experiments)", 0, 0, NULL, NULL, NULL},
        {"pause-worker", PS_FLAG_STRING, &pause_worker, "RANK@STEP:N",
         "SIGSTOP that worker at STEP, SIGCONT once another is N steps further", 0, 0, NULL, NULL,
         NULL},
        {"kill-server", PS_FLAG_STRING, &kill_server, "I@STEP",
         "SIGKILL server I once worker 0 reports STEP, then restart it with --restore", 0, 0, NULL,
         NULL, NULL},
        {"kill-worker", PS_FLAG_STRING, &kill_worker, "RANK@STEP",
         "SIGKILL that worker once it reports that step (fault drills)", 0, 0, NULL, NULL, NULL},
        {"dump-weights", PS_FLAG_STRING, &cmd.dump_weights, "FILE",
         "rank 0 writes the final weights here", 0, 0, NULL, NULL, NULL},
        {"evaluator", PS_FLAG_STRING, &cmd.evaluator, "OUT.jsonl",
         "also start an evaluator (shardps-eval --follow) that scores snapshots of the weights "
         "at low priority and writes its curve here; rank 0 then tests only after its last step",
         0, 0, NULL, NULL, NULL},
    };
    char err[1024], length[128];
    int rc = ps_launcher_parse(&l, "shardps-cluster",
                               "Runs a parameter-server job on this machine: S servers and W "
                               "workers (shardps-worker) on 127.0.0.1, ports chosen by the OS.",
                               own, (int)(sizeof(own) / sizeof(own[0])), argc, argv);

    if (rc != 0)
        return rc == 1 ? 0 : 2;
    rc = ps_drills_init(&cmd.drills,
                        &(ps_drills_config){kill_worker, pause_worker, kill_server, slow_worker,
                                            l.job.workers, l.sup.n_servers,
                                            l.job.checkpoint_dir != NULL},
                        err, sizeof(err));
    if (rc < 0 && rc != -ENOMEM)
        strncat(err, "; see shardps-cluster --help", sizeof(err) - strlen(err) - 1);
    if (rc == 0)
        rc = ps_job_check(&l.job,
                          &(ps_job_process){.program = PS_JOB_LAUNCHER,
                                            .flags = &l.ctx,
                                            .num_servers = l.sup.n_servers,
                                            .dump_weights = cmd.dump_weights,
                                            .evaluator_curve = cmd.evaluator,
                                            .bin_dir = l.sup.bin_dir,
                                            .load_data = ps_job_data_load,
                                            .data_arg = &data},
                          &plan, err, sizeof(err));
    /* The launcher only looks at the data; each worker reads its own. */
    ps_dataset_free(&data.train);
    ps_dataset_free(&data.test);
    if (rc < 0) {
        fprintf(stderr, "shardps-cluster: %s\n", err);
        rc = rc == -ENOMEM ? 1 : 2;
    } else if (l.check) {
        ps_job_data_say_valid(l.ctx.prog, &l.job, &plan);
    } else {
        /* The workers get the model file by absolute path, so they find it
         * wherever they run. */
        if (l.job.model)
            l.job.model = plan.model_path;
        l.sup.drills = cmd.drills;
        l.sup.worker_argv = ps__worker_argv;
        l.sup.worker_arg = &cmd;
        l.sup.evaluator_argv = cmd.evaluator ? ps__evaluator_argv(&l, cmd.evaluator) : NULL;
        rc = ps_launcher_run(&l, plan.epochs,
                             ps_job_plan_length(&l.job, &plan, length, sizeof(length)));
    }
    ps_job_plan_free(&plan);
    ps_drills_free(cmd.drills);
    return rc;
}
