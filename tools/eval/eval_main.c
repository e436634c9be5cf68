/* shardps-eval: scores a saved model (shardps-worker --save-model) on the
 * test split of a data directory, with the same executor and forward pass
 * the worker evaluates with, so it reproduces the accuracy the training run
 * reported; optionally writes each sample's prediction as CSV. With
 * --follow it is the job's evaluator instead: it scores snapshots of a
 * running job's weights (follow.h). main() parses and wires: model_file
 * reads the model, dataset the data, model computes, follow follows. */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_ops.h"
#include "dataset.h"
#include "flags.h"
#include "follow.h"
#include "job_check.h"
#include "job_data.h"
#include "job_options.h"
#include "model.h"
#include "model_file.h"
#include "ps_error.h"
#include "ps_log.h"

/* The worker evaluates in batches of at least this many (trainer.c), and so
 * do we: the same batches give the same loss to the last bit. */
#define PS__EVAL_BATCH 256

/* index,label,predicted for every test sample. Returns 0 or -errno. */
static int ps__write_predictions(const char *path, const uint8_t *labels, const uint8_t *pred,
                                 int n)
{
    FILE *f = fopen(path, "w");
    int rc = 0;

    if (f == NULL)
        return -errno;
    if (fprintf(f, "index,label,predicted\n") < 0)
        rc = -EIO;
    for (int i = 0; i < n && rc == 0; i++)
        if (fprintf(f, "%d,%d,%d\n", i, labels[i], pred[i]) < 0)
            rc = -EIO;
    if (fclose(f) != 0 && rc == 0)
        rc = -EIO;
    return rc;
}

/* Evaluates m's saved weights on ds; the predictions go to pred_path if set. */
static int ps__eval_saved_model(const ps_saved_model *sm, const ps_dataset *ds,
                                const char *pred_path)
{
    ps_model *m = NULL;
    float *x = NULL, loss;
    uint32_t *all = NULL;
    uint8_t *labels = NULL, *pred = NULL;
    int correct, rc;

    rc = ps_model_init(&m, &ps_backend_cpu_ops, NULL, &sm->desc, &sm->table, PS__EVAL_BATCH, 0);
    if (rc < 0) {
        fprintf(stderr, "shardps-eval: cannot build the model: %s\n", strerror(-rc));
        return rc;
    }
    rc = -ENOMEM;
    x = malloc((size_t)ds->n * (size_t)ds->features * sizeof(float));
    all = malloc((size_t)ds->n * sizeof(uint32_t));
    labels = malloc((size_t)ds->n);
    pred = malloc((size_t)ds->n);
    if (x == NULL || all == NULL || labels == NULL || pred == NULL)
        goto out;
    for (int i = 0; i < ds->n; i++)
        all[i] = (uint32_t)i;
    ps_dataset_gather(ds, all, ds->n, x, labels);
    for (int t = 0; t < sm->table.n_tensors; t++)
        memcpy(ps_model_param(m, t), sm->tensor[t], sm->table.tensors[t].numel * sizeof(float));
    rc = ps_model_evaluate(m, x, labels, ds->n, &loss, &correct, pred);
    if (rc < 0) {
        fprintf(stderr, "shardps-eval: evaluation failed: %s\n", strerror(-rc));
        goto out;
    }
    printf("test accuracy %.4f, test loss %.4f (%d of %d samples correct)\n",
           (double)correct / ds->n, loss, correct, ds->n);
    printf("{\"test_accuracy\":%.6f,\"test_loss\":%.6f,\"correct\":%d,\"samples\":%d}\n",
           (double)correct / ds->n, loss, correct, ds->n);
    if (pred_path && (rc = ps__write_predictions(pred_path, labels, pred, ds->n)) < 0)
        fprintf(stderr, "shardps-eval: cannot write --predictions %s: %s\n", pred_path,
                strerror(-rc));
out:
    ps_model_free(m);
    free(x);
    free(all);
    free(labels);
    free(pred);
    return rc;
}

/* The saved model's input must be this data's sample, value for value; a
 * label it has no score for cannot be judged. Returns 0 or -EINVAL after
 * the error line. */
static int ps__model_fits(const ps_saved_model *sm, const ps_dataset *ds, const char *model_path,
                          const char *data)
{
    char shape[2][64];

    if (ds->shape.ndim == sm->desc.input.ndim &&
        memcmp(ds->shape.d, sm->desc.input.d, sizeof(int) * (size_t)ds->shape.ndim) == 0 &&
        ds->classes <= sm->desc.classes)
        return 0;
    fprintf(stderr,
            "shardps-eval: %s was trained on samples of %s and %d classes, but %s has %s and %d\n",
            model_path, ps_act_shape_str(&sm->desc.input, shape[0], sizeof(shape[0])),
            sm->desc.classes, data, ps_act_shape_str(&ds->shape, shape[1], sizeof(shape[1])),
            ds->classes);
    return -EINVAL;
}

static volatile sig_atomic_t ps__eval_stop;

static void ps__eval_on_signal(int sig)
{
    (void)sig;
    ps__eval_stop = 1;
}

/* The launcher's report pipe, when it started us (worker_env.h). */
static int ps__eval_report_fd(void)
{
    const char *v = getenv("SHARDPS_REPORT_FD");
    char *end;
    long fd = v ? strtol(v, &end, 10) : -1;

    return v && *v && *end == '\0' && fd >= 0 && fd < 1024 ? (int)fd : -1;
}

/* --follow: the job's evaluator, until the job ends or a signal. */
static int ps__follow(const ps_job_options *jo, const ps_job_plan *plan, const ps_dataset *test,
                      double every, int max_snapshots, const char *curve_path)
{
    FILE *curve = curve_path ? fopen(curve_path, "w") : stdout;
    int rc;

    if (curve == NULL) {
        rc = -errno;
        fprintf(stderr, "shardps-eval: cannot write --curve %s: %s\n", curve_path, strerror(-rc));
        return rc;
    }
    signal(SIGINT, ps__eval_on_signal);
    signal(SIGTERM, ps__eval_on_signal);
    signal(SIGPIPE, SIG_IGN);
    ps_log_set_role("eval");
    rc = ps_follow_run(&(ps_follow_config){.job = jo,
                                           .plan = plan,
                                           .test = test,
                                           .every_s = every,
                                           .max_snapshots = max_snapshots,
                                           .curve = curve,
                                           .stop = &ps__eval_stop,
                                           .report_fd = ps__eval_report_fd()});
    if (curve != stdout && fclose(curve) != 0 && rc == 0)
        rc = -EIO;
    return rc;
}

int main(int argc, char **argv)
{
    static ps_job_options jo;
    static ps_job_plan plan;
    static ps_job_datasets data = {.test_only = 1};
    const char *model_path = NULL, *pred_path = NULL, *curve_path = NULL;
    double every = 1;
    int follow = 0, max_snapshots = 0;
    ps_flag flags[24];
    const ps_flag own[] = {
        {"model-file", PS_FLAG_STRING, &model_path, "FILE",
         "the saved model (shardps-worker --save-model)", 0, 0, NULL, NULL, NULL},
        {"predictions", PS_FLAG_STRING, &pred_path, "OUT.csv",
         "also write index,label,predicted for every test sample here", 0, 0, NULL, NULL, NULL},
        {"follow", PS_FLAG_BOOL, &follow, NULL,
         "be the evaluator of the job at --servers: score snapshots of its weights while it "
         "trains (the model from --model or --hidden, --seed), until it ends",
         0, 0, NULL, NULL, NULL},
        {"every", PS_FLAG_DOUBLE, &every, "SECONDS", "--follow: wait between snapshots", 0, 86400,
         NULL, NULL, NULL},
        {"max-snapshots", PS_FLAG_INT, &max_snapshots, "N",
         "--follow: stop after N snapshots scored (0: when the job ends)", 0, 2147483647, NULL,
         NULL, NULL},
        {"curve", PS_FLAG_STRING, &curve_path, "OUT.jsonl",
         "--follow: write one JSON line per snapshot here (default: standard output)", 0, 0, NULL,
         NULL, NULL},
    };
    const int n_own = (int)(sizeof(own) / sizeof(own[0]));
    ps_saved_model sm;
    char err[1024];
    int n, rc;

    /* The job's options (--data, and for --follow the servers and the
     * model), by the same rows as the worker's. */
    ps_job_options_defaults(&jo);
    n = ps_job_options_flags(&jo, PS_JOB_EVAL, flags,
                             (int)(sizeof(flags) / sizeof(flags[0])) - n_own);
    if (n < 0)
        return 1;
    memcpy(flags + n, own, sizeof(own));
    rc = ps_flags_parse(flags, n + n_own, argc, argv, "shardps-eval",
                        "Reports a saved model's test accuracy and loss on a data directory's "
                        "test split; with --follow, a running job's, snapshot after snapshot.");
    if (rc != 0)
        return rc > 0 ? 0 : 2;
    if ((model_path == NULL) == (follow == 0)) {
        fprintf(stderr, "shardps-eval: name the saved model with --model-file, or follow a job "
                        "with --follow (one of them; see --help)\n");
        return 2;
    }
    memset(&sm, 0, sizeof(sm));
    rc = ps_job_check(&jo,
                      &(ps_job_process){.program = PS_JOB_EVAL,
                                        .evaluator = follow,
                                        .load_data = ps_job_data_load,
                                        .data_arg = &data},
                      &plan, err, sizeof(err));
    if (rc == 0 && !follow && (rc = ps_model_file_read(model_path, &sm, err, sizeof(err))) < 0)
        rc = -EINVAL;
    if (rc < 0)
        fprintf(stderr, "shardps-eval: %s\n", err);
    if (rc == 0 && follow)
        rc = ps__follow(&jo, &plan, &data.test, every, max_snapshots, curve_path);
    else if (rc == 0)
        rc = ps__model_fits(&sm, &data.test, model_path, jo.data);
    if (rc == 0 && !follow)
        rc = ps__eval_saved_model(&sm, &data.test, pred_path);
    ps_job_plan_free(&plan);
    ps_dataset_free(&data.test);
    ps_saved_model_free(&sm);
    return rc == -PS_EUSAGE ? 2 : rc < 0 ? 1 : 0;
}
