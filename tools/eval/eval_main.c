/* shardps-eval: scores a saved model (shardps-worker --save-model) on the
 * test split of a data directory, with the same executor and forward pass
 * the worker evaluates with, so it reproduces the accuracy the training run
 * reported; optionally writes each sample's prediction as CSV. main() parses
 * and wires: model_file reads the model, dataset the data, model computes. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_ops.h"
#include "dataset.h"
#include "flags.h"
#include "job_options.h"
#include "model.h"
#include "model_file.h"

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
static int ps__evaluate(const ps_saved_model *sm, const ps_dataset *ds, const char *pred_path)
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

int main(int argc, char **argv)
{
    const char *model_path = NULL, *data_dir = PS_DEFAULT_DATA_DIR, *pred_path = NULL;
    ps_saved_model sm;
    ps_dataset ds;
    char err[512], shape[2][64];
    int rc;
    const ps_flag flags[] = {
        {"model-file", PS_FLAG_STRING, &model_path, "FILE",
         "the saved model (shardps-worker --save-model)", 0, 0, NULL, NULL, NULL},
        {"data", PS_FLAG_STRING, &data_dir, "DIR",
         "folder with the data; its test split is scored (docs/data.md)", 0, 0, NULL, NULL, NULL},
        {"predictions", PS_FLAG_STRING, &pred_path, "OUT.csv",
         "also write index,label,predicted for every test sample here", 0, 0, NULL, NULL, NULL},
    };

    rc = ps_flags_parse(flags, (int)(sizeof(flags) / sizeof(flags[0])), argc, argv, "shardps-eval",
                        "Reports a saved model's test accuracy and loss on a data directory's "
                        "test split.");
    if (rc != 0)
        return rc > 0 ? 0 : 2;
    if (model_path == NULL) {
        fprintf(stderr, "shardps-eval: name the saved model with --model-file (see --help)\n");
        return 2;
    }
    memset(&ds, 0, sizeof(ds));
    rc = ps_model_file_read(model_path, &sm, err, sizeof(err));
    if (rc == 0)
        rc = ps_dataset_load_dir(&ds, data_dir, 0, err, sizeof(err));
    if (rc < 0) {
        fprintf(stderr, "shardps-eval: %s\n", err);
        goto out;
    }
    /* The saved model's input must be this data's sample, value for value;
     * a label it has no score for cannot be judged. */
    if (ds.shape.ndim != sm.desc.input.ndim ||
        memcmp(ds.shape.d, sm.desc.input.d, sizeof(int) * (size_t)ds.shape.ndim) != 0 ||
        ds.classes > sm.desc.classes) {
        fprintf(stderr,
                "shardps-eval: %s was trained on samples of %s and %d classes, but %s has %s "
                "and %d\n",
                model_path, ps_act_shape_str(&sm.desc.input, shape[0], sizeof(shape[0])),
                sm.desc.classes, data_dir, ps_act_shape_str(&ds.shape, shape[1], sizeof(shape[1])),
                ds.classes);
        rc = -EINVAL;
        goto out;
    }
    rc = ps__evaluate(&sm, &ds, pred_path);
out:
    ps_dataset_free(&ds);
    ps_saved_model_free(&sm);
    return rc < 0 ? 1 : 0;
}
