/* The job-wide options: every option that more than one program takes, in
 * one table (job_options.c) with its name, type, bounds, default, help, the
 * cluster-file section every process reads it from, and which programs take
 * it (server, worker, launcher). Each program's flag table is the job options
 * it takes (ps_job_options_flags) followed by its own; the launcher hands
 * each child every job option the child takes by walking the same table
 * (ps_job_options_argv), so none can be dropped on the way.
 *
 * The options that every process of a job must agree on (seed,
 * chunking, mode, staleness, optimizer and schedule, worker and server
 * counts) also form the job's settings: a canonical "name=value" list
 * (ps_job_settings_format) that a worker sends in its HELLO and a server
 * compares with its own (ps_job_settings_diff), refusing a worker that
 * differs with every differing setting and both values named. The model is
 * not among them: a server compares the tensor table itself (tensor_table.h),
 * which every HELLO carries. */
#ifndef PS_JOB_OPTIONS_H
#define PS_JOB_OPTIONS_H

#include <stddef.h>
#include <stdint.h>

#include "flags.h"

/* Where workers look for Fashion-MNIST unless told otherwise. */
#define PS_DEFAULT_DATA_DIR "/usr/share/datasets/fashion-mnist"

/* --restore auto: resume from this job's newest checkpoint if there is one. */
#define PS_RESTORE_AUTO 2

/* Passes over the data when neither --epochs nor --steps says otherwise. */
#define PS_DEFAULT_EPOCHS 10

/* Which programs take an option; a mask of these. The library
 * (shardps_set_option) and shardps-eval take a few job options too, checked
 * by the same rows. */
#define PS_JOB_SERVER   1u
#define PS_JOB_WORKER   2u
#define PS_JOB_LAUNCHER 4u
#define PS_JOB_LIBRARY  8u
#define PS_JOB_EVAL     16u

/* The values of every job option. STRING and CHOICE members point into
 * argv, the environment, a cluster file's values (ps_flags_ctx) or the
 * defaults' literals; they are never owned. */
typedef struct {
    /* [cluster] */
    const char *servers; /* server and worker: HOST:PORT,... in index order */
    int workers;
    const char *mode;
    int staleness;
    const char *auth_token_file;
    /* [model] */
    const char *model;      /* worker and launcher: the model file (NULL: the MLP of --hidden) */
    const char *save_model; /* worker rank 0: write the trained model here */
    const char *hidden;
    int seed;
    double chunk_bytes;
    /* [optimizer] */
    const char *optimizer;
    double lr, momentum, weight_decay;
    const char *lr_schedule;
    int warmup_steps, total_steps, lr_step_size;
    double lr_gamma, min_lr;
    /* How servers apply pushes. */
    int sync_quorum, staleness_damping, apply_threads, reject_nonfinite;
    double apply_pool_min_bytes;
    /* How workers train. */
    int batch, steps, eval_every, progress_every, tf32;
    int epochs; /* 0: auto (PS_DEFAULT_EPOCHS, or as many as steps takes) */
    const char *data, *device, *compress, *precision;
    double clip_norm;
    /* Checkpoints. */
    const char *checkpoint_dir;
    int checkpoint_every, keep_checkpoints;
    int restore; /* 0, 1 (must restore) or PS_RESTORE_AUTO */
    double checkpoint_seconds, restore_clock;
    /* Deadlines and limits. */
    double heartbeat_timeout, rejoin_timeout, connect_timeout, request_timeout, max_payload,
        max_model_bytes;
    int max_rejected_steps;
    int max_reconnects;
    /* Hostile peers (docs/reliability.md). */
    int max_connections;
    double handshake_timeout, max_grad_norm, max_clock_lead;
    int max_row_ids; /* a rows request's IDs at most (server/rows/row_wire.h) */
    int verbose;
} ps_job_options;

/* Sets every member to its default from the table. */
void ps_job_options_defaults(ps_job_options *o);

/* Writes the flags of the job options that program (one PS_JOB_* bit) takes
 * into out, in table order, each pointing at its member of o (which must
 * outlive them). Returns how many, or -ENOSPC when max is too small. */
int ps_job_options_flags(ps_job_options *o, unsigned program, ps_flag *out, int max);

/* Writes the '|'-separated names of the job options that live in a shared
 * cluster-file section but that program does not take (ps_flags_ctx's
 * others), so it skips them in a file every program reads. Returns 0 or
 * -ENOSPC. */
int ps_job_options_others(unsigned program, char *buf, size_t len);

/* Formats "--name" "value" pairs (a switch as "--name=1" or "--name=0") for
 * every job option that both from and to take (by its name, not an alias's),
 * for the launcher to start a to-program child with what it was given, or the
 * trainer to hand the library its options. Numbers have 17 digits, so each
 * reads back as the very double. The texts go into buf, argv points
 * into it; returns the number of argv entries, or -ENOSPC. */
int ps_job_options_argv(const ps_job_options *o, unsigned from, unsigned to, char *buf, size_t len,
                        char **argv, int max_argv);

/* The longest settings list a process sends or accepts, terminator
 * included: the table's agreeing settings fit several times over. */
#define PS_JOB_SETTINGS_MAX 4096

/* The job's settings that every process must agree on, as canonical
 * "name=value" lines in table order, with "num-servers=<num_servers>" first.
 * Returns 0, or -ENOSPC when len is too small. */
int ps_job_settings_format(const ps_job_options *o, int num_servers, char *buf, size_t len);

/* Whether list is a settings list: short enough (under
 * PS_JOB_SETTINGS_MAX bytes), every line has a '=' after a non-empty name,
 * no name comes twice, and nothing could garble a log line. Pure; 1 or 0. */
int ps_job_settings_valid(const char *list);

/* Compares two settings lists (ps_job_settings_format's form) and writes,
 * for each setting whose values differ or that one side lacks, "name: <ours>
 * on <our_side>, <theirs> on <their_side>" joined by "; " into msg (truncated
 * to len). Pure; returns the number of differing settings (0: they agree), or
 * -EINVAL when either list is malformed (longer than PS_JOB_SETTINGS_MAX, a
 * line without '=', a name given twice, a control character). */
int ps_job_settings_diff(const char *ours, const char *theirs, const char *our_side,
                         const char *their_side, char *msg, size_t len);

/* Whether a worker of a job whose settings are settings (this form) and
 * that plans planned steps leaves the servers' cosine schedule without a
 * span: the settings say lr-schedule=cosine and total-steps=0 (the servers
 * take the span from the workers' plans) and the worker plans none. Pure;
 * 1 or 0 (0 also for a list that says neither, or is malformed). */
int ps_job_settings_unspanned(const char *settings, uint64_t planned);

/* The job's fingerprint: its settings (ps_job_settings_format; NULL as
 * empty) and the model's fingerprint, hashed. Checkpoints carry it, so a
 * server restores and prunes only the files of its own job. */
uint64_t ps_job_fingerprint(const char *settings, uint64_t model_fingerprint);

#endif
