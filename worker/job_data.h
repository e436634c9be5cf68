/* The data's part in the job check (common/job_check.h), from the layer that
 * reads data: the loader ps_job_check calls to read a --data folder (both
 * splits, or only the test split for shardps-eval), which keeps what it read
 * for the program that asked, and what a person should hear about the data
 * before a run: its shape and class count, and a class count that a stray
 * label has inflated.
 *
 * Without a classes.txt the class count is the largest label + 1, so one
 * sample labelled 200 in a ten-class set makes 201 classes, and a model with
 * 201 outputs. That is not refused (a rare class is legitimate), but said:
 * when some class below the count has fewer training samples than 1% of an
 * even share, the note names those classes and how many samples the largest
 * label has, and points at the labels and at classes.txt. */
#ifndef PS_JOB_DATA_H
#define PS_JOB_DATA_H

#include <stddef.h>

#include "dataset.h"
#include "job_check.h"

/* The splits a loader read; free both with ps_dataset_free (an unread split
 * is all zero). */
typedef struct {
    int test_only; /* set by the caller: read only the test split (shardps-eval) */
    ps_dataset train, test;
} ps_job_datasets;

/* A ps_job_data_fn: arg is a ps_job_datasets, which keeps the splits read
 * (matched: the same sample shape and type, the larger class count), even
 * on failure (free them). */
int ps_job_data_load(void *arg, const char *dir, ps_job_data *out, char *err, size_t len);

/* The note on nearly empty classes (see above) for the training split train
 * of a data set whose class count the test split may have raised (test may
 * be NULL); dir names where classes.txt would go. Pure. Returns 1 with the
 * note in buf, or 0 when there is nothing to say (or the classes are named). */
int ps_job_data_class_note(const ps_dataset *train, const ps_dataset *test, const char *dir,
                           char *buf, size_t len);

/* "60000 training and 10000 test samples of 1x28x28 uint8, 10 classes" into
 * buf; returns buf. */
const char *ps_job_data_describe(const ps_job_data *d, char *buf, size_t len);

/* What --check says when the job would start: "prog: the options are valid:
 * <length> on <data> (<what the data hold>)" on stdout, and the data's note,
 * if any, as a warning. */
void ps_job_data_say_valid(const char *prog, const ps_job_options *o, const ps_job_plan *plan);

#endif
