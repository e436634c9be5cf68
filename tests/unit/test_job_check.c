/* Tests for the job check (common/job_check) and the data's part in it
 * (worker/job_data): each rule refuses with the sentence a person reads and
 * a program prints after its name, for every program that takes the
 * options involved; the files the options name are opened or looked at
 * before anything runs; the plan's length follows --steps and --epochs; and
 * a class count a stray label inflated is said. */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "job_check.h"
#include "job_data.h"
#include "ps_error.h"
#include "server_config.h"

static char tmp[64];
static ps_job_options o;
static ps_job_plan plan;
static char err[1024];

static void setup(void)
{
    snprintf(tmp, sizeof(tmp), "/tmp/ps_job_check_XXXXXX");
    cr_assert_not_null(mkdtemp(tmp));
    ps_job_options_defaults(&o);
    o.batch = 10; /* 10 steps an epoch of fake_data's 100 samples */
    memset(&plan, 0, sizeof(plan));
}

static void teardown(void)
{
    char cmd[128];

    ps_job_plan_free(&plan);
    snprintf(cmd, sizeof(cmd), "rm -rf %s", tmp);
    cr_assert_eq(system(cmd), 0);
}

/* A stand-in for the data: 100 training and 20 test samples of 8 values,
 * 3 classes (the real loader is tested below and in test_dataset). */
static int fake_data(void *arg, const char *dir, ps_job_data *out, char *e, size_t len)
{
    (void)arg;
    (void)dir;
    (void)e;
    (void)len;
    memset(out, 0, sizeof(*out));
    out->shape = (ps_act_shape){1, {8, 0, 0}};
    out->classes = 3;
    out->train_samples = 100;
    out->test_samples = 20;
    return 0;
}

static ps_job_process worker(void)
{
    return (ps_job_process){.program = PS_JOB_WORKER, .load_data = fake_data};
}

static ps_job_process server(void)
{
    return (ps_job_process){.program = PS_JOB_SERVER, .num_servers = 1, .listen = "127.0.0.1:0"};
}

/* A folder with the two programs the launcher starts (empty, executable). */
static ps_job_process launcher(void)
{
    static char bin[96];
    const char *progs[] = {"shardps-server", "shardps-worker"};

    snprintf(bin, sizeof(bin), "%s/bin", tmp);
    mkdir(bin, 0755);
    for (int i = 0; i < 2; i++) {
        char path[160];
        FILE *f;
        snprintf(path, sizeof(path), "%s/%s", bin, progs[i]);
        f = fopen(path, "w");
        cr_assert_not_null(f);
        fclose(f);
        chmod(path, 0755);
    }
    return (ps_job_process){
        .program = PS_JOB_LAUNCHER, .num_servers = 2, .bin_dir = bin, .load_data = fake_data};
}

static void refused(ps_job_process p, const char *want)
{
    ps_job_plan_free(&plan);
    cr_assert_eq(ps_job_check(&o, &p, &plan, err, sizeof(err)), -PS_EUSAGE, "accepted; wanted %s",
                 want);
    cr_assert_not_null(strstr(err, want), "'%s' does not say '%s'", err, want);
}

static void accepted(ps_job_process p)
{
    ps_job_plan_free(&plan);
    cr_assert_eq(ps_job_check(&o, &p, &plan, err, sizeof(err)), 0, "%s", err);
}

TestSuite(job_check, .init = setup, .fini = teardown);

/* The rule that lived only in the server's main(): every program that
 * takes --sync-quorum now refuses it, with one sentence. */
Test(job_check, sync_quorum_against_workers)
{
    o.workers = 2;
    o.sync_quorum = 3;
    refused(server(), "--sync-quorum 3 exceeds --workers 2");
    refused(launcher(), "--sync-quorum 3 exceeds --workers 2");
    o.sync_quorum = 2;
    accepted(server());
    accepted(launcher());
}

Test(job_check, options_that_need_another)
{
    o.restore = 1;
    refused(server(), "--restore needs --checkpoint-dir DIR");
    refused(launcher(), "--restore needs --checkpoint-dir DIR");
    o.restore = 0;
    o.checkpoint_every = 20;
    refused(server(), "--checkpoint-every 20 needs --checkpoint-dir DIR");
    o.checkpoint_every = 0;
    o.lr_schedule = "step";
    refused(launcher(), "--lr-schedule step needs --lr-step-size N");
    o.lr_step_size = 4;
    accepted(launcher());
    o.lr_schedule = "cosine";
    o.min_lr = 0.1;
    refused(server(), "--min-lr 0.1 is above --lr 0.001");
    o.workers = 200;
    o.min_lr = 0;
    refused(launcher(), "--workers 200: this launcher starts at most 128");
    accepted(server());
}

Test(job_check, per_process_places)
{
    ps_job_process p = worker();

    o.workers = 2;
    p.rank = 2;
    refused(p, "--rank 2 must be below --workers 2 (rank from the options, workers from the "
               "options)");
    p.rank = 1;
    o.servers = "a:1, b:2";
    refused(p, "servers 'a:1, b:2' (from the options)");
    o.servers = "127.0.0.1:7000,127.0.0.1:7001";
    accepted(p);
    cr_assert_eq(plan.num_servers, 2);
    cr_assert_not_null(strstr(plan.settings, "num-servers=2\n"));

    p = server();
    p.server_index = 1;
    refused(p, "--server-index 1 must be below --num-servers 1");
    p.num_servers = 2;
    p.listen = "127.0.0.1";
    refused(p, "listen address (from the options)");
}

Test(job_check, files_named_by_options)
{
    char path[160];
    ps_job_process p = worker();

    snprintf(path, sizeof(path), "%s/no/such/model.bin", tmp);
    o.save_model = path;
    refused(p, "--save-model");
    refused(launcher(), "no folder");
    o.save_model = tmp; /* a folder, not a file */
    refused(p, "is a directory");
    o.save_model = NULL;
    p.dump_weights = tmp;
    refused(p, "--dump-weights");
    p.dump_weights = NULL;
    p = launcher();
    p.evaluator_curve = path; /* .../no/such/model.bin */
    refused(p, "--evaluator");
    p = worker();

    snprintf(path, sizeof(path), "%s/token", tmp);
    o.auth_token_file = path;
    refused(server(), path);
    refused(p, path);
    o.auth_token_file = NULL;

    /* Checkpoints create their folder (one level), unless --restore needs
     * one already there. */
    snprintf(path, sizeof(path), "%s/ck", tmp);
    o.checkpoint_dir = path;
    accepted(server());
    o.restore = 1;
    refused(server(), "--checkpoint-dir");
    o.restore = PS_RESTORE_AUTO;
    accepted(server());
    snprintf(path, sizeof(path), "%s/no/ck", tmp);
    refused(server(), "cannot be created");

    o.checkpoint_dir = NULL;
    o.restore = 0;
    refused((ps_job_process){.program = PS_JOB_LAUNCHER, .num_servers = 2}, "pass --bin-dir");
}

/* An unknown layer is refused by file:line before anything starts. */
Test(job_check, model_file_and_hidden)
{
    char path[160];
    FILE *f;

    snprintf(path, sizeof(path), "%s/bad.model", tmp);
    f = fopen(path, "w");
    cr_assert_not_null(f);
    fprintf(f, "flatten\ndense out=16\nfrobnicate\ndense out=classes\n");
    fclose(f);
    o.model = path;
    refused(worker(), "bad.model:3");
    refused(launcher(), "bad.model:3");
    o.model = NULL;
    o.hidden = "256,,128";
    refused(worker(), "--hidden '256,,128' is not a list of positive sizes");
    o.hidden = "32";
    accepted(worker());
    cr_assert_eq(plan.spec.n_tensors, 4, "the MLP resolved against the data");
    cr_assert_eq(plan.spec.tensors[0].shape[1], 8);
    cr_assert_eq(plan.spec.tensors[2].shape[0], 3);
}

Test(job_check, the_data)
{
    ps_job_process p = worker();
    ps_job_datasets ds = {0};
    char dir[128];

    o.batch = 60;
    o.workers = 2;
    refused(p, "--batch 60 x 2 workers exceeds the 100 training samples");
    o.max_model_bytes = 4;
    o.batch = 10;
    refused(launcher(), "exceed --max-model-bytes 4");
    accepted(p); /* servers check that limit; a worker does not take it */

    /* The real loader: a folder that is not there is named as such. */
    snprintf(dir, sizeof(dir), "%s/no-data", tmp);
    o.data = dir;
    p.load_data = ps_job_data_load;
    p.data_arg = &ds;
    refused(p, "no such folder");
    ps_dataset_free(&ds.train);
    ps_dataset_free(&ds.test);
}

/* --steps means that many steps; --epochs caps them only when given. */
Test(job_check, run_length)
{
    int epochs;

    cr_assert_eq(ps_job_total_steps(300, 0, 120, &epochs), 300);
    cr_assert_eq(epochs, 3);
    cr_assert_eq(ps_job_total_steps(0, 0, 120, &epochs), 1200);
    cr_assert_eq(epochs, PS_DEFAULT_EPOCHS);
    cr_assert_eq(ps_job_total_steps(300, 2, 120, &epochs), 240);
    cr_assert_eq(epochs, 2);
    cr_assert_eq(ps_job_total_steps(100, 2, 120, &epochs), 100);
    cr_assert_eq(epochs, 1);

    o.batch = 10;
    o.steps = 300;
    accepted(worker());
    cr_assert_eq(plan.steps_per_epoch, 10);
    cr_assert_eq(plan.total_steps, 300);
    cr_assert_eq(plan.epochs, 30);
    cr_assert_str_eq(ps_job_plan_length(&o, &plan, err, sizeof(err)),
                     "300 steps (--steps), 30 epochs");
}

/* n samples of labels 0..classes-1 in turn, then the extra labels. */
static void labels(ps_dataset *ds, int n, int classes, const int *extra, int n_extra)
{
    memset(ds, 0, sizeof(*ds));
    ds->labels = malloc((size_t)(n + n_extra));
    cr_assert_not_null(ds->labels);
    ds->n = n + n_extra;
    for (int i = 0; i < n; i++)
        ds->labels[i] = (uint8_t)(i % classes);
    ds->classes = classes;
    for (int i = 0; i < n_extra; i++) {
        ds->labels[n + i] = (uint8_t)extra[i];
        ds->classes = extra[i] + 1 > ds->classes ? extra[i] + 1 : ds->classes;
    }
}

Test(job_check, a_stray_label_is_said)
{
    ps_dataset train, test;
    char note[512];
    int stray = 200, ten = 10;

    labels(&train, 60000, 10, NULL, 0);
    cr_assert_eq(ps_job_data_class_note(&train, NULL, "/d", note, sizeof(note)), 0, "%s", note);
    ps_dataset_free(&train);

    /* One sample labelled 200: 201 classes, 190 of them empty. */
    labels(&train, 60000, 10, &stray, 1);
    cr_assert_eq(ps_job_data_class_note(&train, NULL, "/d", note, sizeof(note)), 1);
    cr_assert_str_eq(note, "201 classes (the largest label + 1), but 191 of them have at most 2 "
                           "training samples: 10..200; the largest training label, 200, has 1 "
                           "sample. A stray label? Fix the labels, or name the classes in "
                           "/d/classes.txt");
    /* Named classes are the user's word. */
    train.named_classes = 1;
    cr_assert_eq(ps_job_data_class_note(&train, NULL, "/d", note, sizeof(note)), 0);
    ps_dataset_free(&train);

    /* No gap, but a class of one sample in 60001: still said. */
    labels(&train, 60000, 10, &ten, 1);
    cr_assert_eq(ps_job_data_class_note(&train, NULL, "/d", note, sizeof(note)), 1);
    cr_assert(strstr(note, "11 classes") && strstr(note, ": 10;"), "%s", note);
    ps_dataset_free(&train);

    /* The test split's stray label raised the count. */
    labels(&train, 600, 10, NULL, 0);
    labels(&test, 100, 10, &stray, 1);
    train.classes = test.classes;
    cr_assert_eq(ps_job_data_class_note(&train, &test, "/d", note, sizeof(note)), 1);
    cr_assert_not_null(strstr(note, "the test labels go up to 200"), "%s", note);
    ps_dataset_free(&train);
    ps_dataset_free(&test);
}

/* The server's configuration comes from the checked job in one place, and
 * --lr is one double from the option to the schedule (it was cut to a float
 * on the way). */
Test(job_check, server_config_from_the_job)
{
    ps_kv_server_config cfg;
    ps_job_process p = server();

    o.lr = 0.1;
    o.workers = 3;
    o.mode = "ssp";
    o.staleness = 4;
    o.optimizer = "sgd";
    o.rejoin_timeout = 1e9;
    accepted(p);
    cr_assert_eq(ps_server_config_build(&cfg, &o, &plan, 0, err, sizeof(err)), 0, "%s", err);
    cr_assert(cfg.lr.base_lr == 0.1, "--lr became %.17g", cfg.lr.base_lr);
    cr_assert_eq(cfg.opt.kind, PS_OPT_SGD);
    cr_assert_eq(cfg.world, 3);
    cr_assert_eq(cfg.staleness, 4);
    cr_assert_eq(cfg.num_servers, 1);
    cr_assert_eq(cfg.rejoin_timeout_ms, UINT32_MAX, "saturated, not wrapped");
    cr_assert_eq(cfg.job_settings, plan.settings);
}
