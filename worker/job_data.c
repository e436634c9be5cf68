/* The data loader of the job check and what is said about the data (see
 * job_data.h). */
#include "job_data.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "ps_log.h"

int ps_job_data_load(void *arg, const char *dir, ps_job_data *out, char *err, size_t len)
{
    ps_job_datasets *ds = arg;
    const ps_dataset *shape_of = &ds->test;
    int rc = 0;

    memset(out, 0, sizeof(*out));
    if (!ds->test_only) {
        rc = ps_dataset_load_dir(&ds->train, dir, 1, err, len);
        shape_of = &ds->train;
    }
    if (rc == 0)
        rc = ps_dataset_load_dir(&ds->test, dir, 0, err, len);
    if (rc == 0 && !ds->test_only)
        rc = ps_dataset_match(&ds->train, &ds->test, err, len);
    if (rc < 0)
        return rc;
    out->shape = shape_of->shape;
    out->classes = shape_of->classes;
    out->is_float = shape_of->is_float;
    out->train_samples = ds->train.n;
    out->test_samples = ds->test.n;
    ps_job_data_class_note(ds->test_only ? &ds->test : &ds->train, ds->test_only ? NULL : &ds->test,
                           dir, out->notes, sizeof(out->notes));
    return 0;
}

/* The largest label of ds, or -1 without samples. */
static int ps__top_label(const ps_dataset *ds)
{
    int top = -1;

    for (int i = 0; i < ds->n; i++)
        top = ds->labels[i] > top ? ds->labels[i] : top;
    return top;
}

int ps_job_data_class_note(const ps_dataset *train, const ps_dataset *test, const char *dir,
                           char *buf, size_t len)
{
    int count[PS_DATASET_MAX_CLASSES] = {0}, classes = train->classes, few, rare = 0, top;
    size_t used = 0;

    buf[0] = '\0';
    if (train->named_classes || train->n == 0 || classes < 2)
        return 0;
    for (int i = 0; i < train->n; i++)
        count[train->labels[i]]++;
    /* Fewer than 1% of an even share: at most this many. */
    few = train->n / classes / 100;
    for (int c = 0; c < classes; c++)
        rare += count[c] <= few;
    if (rare == 0)
        return 0;
    if (few == 0)
        used += (size_t)snprintf(buf, len,
                                 "%d classes (the largest label + 1), but %d of them %s no "
                                 "training sample:",
                                 classes, rare, rare == 1 ? "has" : "have");
    else
        used +=
            (size_t)snprintf(buf, len,
                             "%d classes (the largest label + 1), but %d of them %s at most "
                             "%d training sample%s:",
                             classes, rare, rare == 1 ? "has" : "have", few, few == 1 ? "" : "s");
    /* The classes as ranges: "10..199, 200". */
    for (int c = 0; c < classes && used < len; c++) {
        int end = c;
        if (count[c] > few)
            continue;
        while (end + 1 < classes && count[end + 1] <= few)
            end++;
        used += (size_t)snprintf(buf + used, len - used, end > c ? " %d..%d" : " %d", c, end);
        c = end;
    }
    top = ps__top_label(train);
    if (used < len && top >= 0)
        used += (size_t)snprintf(buf + used, len - used,
                                 "; the largest training label, %d, has %d sample%s", top,
                                 count[top], count[top] == 1 ? "" : "s");
    if (used < len && test && ps__top_label(test) > top)
        used += (size_t)snprintf(buf + used, len - used, "; the test labels go up to %d",
                                 ps__top_label(test));
    if (used < len)
        snprintf(buf + used, len - used,
                 ". A stray label? Fix the labels, or name the classes in %s/classes.txt", dir);
    return 1;
}

const char *ps_job_data_describe(const ps_job_data *d, char *buf, size_t len)
{
    char shape[48];

    if (d->train_samples > 0)
        snprintf(buf, len, "%d training and %d test samples of %s %s, %d classes", d->train_samples,
                 d->test_samples, ps_act_shape_str(&d->shape, shape, sizeof(shape)),
                 d->is_float ? "float32" : "uint8", d->classes);
    else
        snprintf(buf, len, "%d test samples of %s %s, %d classes", d->test_samples,
                 ps_act_shape_str(&d->shape, shape, sizeof(shape)),
                 d->is_float ? "float32" : "uint8", d->classes);
    return buf;
}

void ps_job_data_say_valid(const char *prog, const ps_job_options *o, const ps_job_plan *plan)
{
    char length[128], data[160];

    printf("%s: the options are valid: %s on %s (%s)\n", prog,
           ps_job_plan_length(o, plan, length, sizeof(length)), o->data,
           ps_job_data_describe(&plan->data, data, sizeof(data)));
    if (plan->data.notes[0])
        ps_warn("data: %s", plan->data.notes);
}
