/* The job's configuration layer: what follows from the options once they are
 * parsed. Every program parses its options into one ps_job_options (the one
 * table, job_options.h) plus its few per-process ones (ps_job_process), then
 * calls ps_job_check, the one function that checks every rule tying options
 * together (--sync-quorum against --workers, --rank against --workers, a
 * server's index against the server list, --restore against
 * --checkpoint-dir, the batch against the data, ...) and every file an
 * option names (the model file, the data, the auth token, the checkpoint
 * directory, where --save-model and --dump-weights will write, the
 * launcher's programs and its workers' command). What it works out on the way (the server count,
 * the model resolved against the data, the steps to run) is the plan each program builds its
 * modules' configurations from.
 *
 * --check runs exactly this and stops, so a job that --check accepts is one
 * that starts, and a refusal reads the same either way: the run and --check
 * print "prog: <err>" and exit 2.
 *
 * The data belong to the worker's layer (worker/dataset.h), which common/
 * must not include: the programs that read data hand ps_job_check a loader
 * (ps_job_data_fn), as the server's checkpoint restore asks its caller for a
 * table. */
#ifndef PS_JOB_CHECK_H
#define PS_JOB_CHECK_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>

#include "flags.h"
#include "job_options.h"
#include "model_desc.h"
#include "model_spec.h"
#include "server_list.h"

/* What the data hold, as far as the options depend on it. */
typedef struct {
    ps_act_shape shape; /* one sample */
    int classes;
    int train_samples; /* 0 for a loader that reads only the test split */
    int test_samples;
    int is_float; /* float32 samples (else uint8 pixels) */
    /* Warnings about the data for the program to log once the check has
     * passed (a stray label: dataset.h); "" when none. */
    char notes[512];
} ps_job_data;

/* Loads (or at least reads through) the data in dir and describes them in
 * out; arg is the caller's (a worker keeps what it loaded for training).
 * Returns 0, or a negative code with one line in err naming the file and
 * what is wrong. */
typedef int (*ps_job_data_fn)(void *arg, const char *dir, ps_job_data *out, char *err, size_t len);

/* The per-process side of a check: which program asks, its own options that
 * job rules involve, and how it reads data. */
typedef struct {
    unsigned program; /* one PS_JOB_* bit */
    /* Where each value came from, named in messages; a server's derived
     * --num-servers and --listen are recorded in it (--print-config shows
     * them). NULL: messages do not say, and a server derives nothing. */
    ps_flags_ctx *flags;
    int server_index;   /* server */
    int num_servers;    /* server: --num-servers; launcher: servers it starts */
    const char *listen; /* server: --listen */
    int rank;           /* worker */
    /* Worker, launcher: written at the end of the run; checked now. */
    const char *dump_weights;
    /* Launcher: its evaluator's curve (shardps-cluster --evaluator),
     * written while the job runs; checked now. */
    const char *evaluator_curve;
    const char *bin_dir; /* launcher: where shardps-server and shardps-worker are */
    /* Launcher: the program its workers run (shardps-run's command: a path,
     * or a name looked up on PATH); NULL: shardps-worker from bin_dir. */
    const char *command;
    /* Eval following a running job (shardps-eval --follow): the model
     * options are read and resolved against the data as a worker's are, so
     * the evaluator can build the model whose weights it pulls. */
    int evaluator;
    /* Worker, launcher, eval: reads the data; NULL: the data are not read
     * (nor the model resolved). */
    ps_job_data_fn load_data;
    void *data_arg;
} ps_job_process;

/* The most workers shardps-cluster starts on one machine. */
#define PS_LAUNCHER_MAX_WORKERS 128

/* What a checked job works out. A plain value but for servers (ps_job_plan_free). */
typedef struct {
    int num_servers; /* of the job */
    /* Worker: --servers parsed (owned). */
    ps_server_list *servers;
    /* Server: the address to listen on (--listen, or its entry in --servers),
     * resolved once. */
    char listen[256];
    struct sockaddr_storage listen_addr;
    /* Launcher: --model as an absolute path, so a child finds it anywhere. */
    char model_path[PATH_MAX];
    /* Worker, launcher: the model (--model's file or --hidden's MLP), and,
     * with the data read, resolved against them into the tensor table. */
    ps_model_desc desc;
    ps_model_spec spec;
    ps_job_data data;
    /* With the data read: the run's length. total_steps is --steps when
     * given (capped by --epochs only when that is given too), else the
     * epochs' steps; epochs is how many epochs those steps reach into. */
    int steps_per_epoch;
    uint64_t total_steps;
    int epochs;
    /* Server, worker: the job's settings (ps_job_settings_format). */
    char settings[PS_JOB_SETTINGS_MAX];
} ps_job_plan;

/* Checks o for process p and fills plan (which needs no set-up). Returns 0,
 * or -PS_EUSAGE with one line in err (no program name: the caller prints
 * "prog: err") naming the options or the file and what is wrong, or -ENOMEM.
 * Cheap rules come first, then files, then the data, so the first mistake a
 * person can fix without waiting is the one reported. Call ps_job_plan_free
 * afterwards whatever it returned. */
int ps_job_check(const ps_job_options *o, const ps_job_process *p, ps_job_plan *plan, char *err,
                 size_t len);

/* The run's length as the options asked for it, for the log: "10 epochs",
 * "300 steps (--steps), 2.5 epochs", or "240 steps: --epochs 2 ends before
 * --steps 300"; into buf, returned. */
const char *ps_job_plan_length(const ps_job_options *o, const ps_job_plan *plan, char *buf,
                               size_t len);

void ps_job_plan_free(ps_job_plan *plan);

/* The part of a server's check that --print-config needs too, which shows
 * the settings in effect whether or not the job would start: with a server
 * list (not the default one), the server's entry in it gives plan's
 * num_servers and, unless --listen was given, its listen address, both
 * recorded as derived in p->flags; an index with no entry, or a
 * --num-servers that disagrees with the list, is refused. Without a list
 * (or p->flags), --num-servers and --listen stand. ps_job_check calls it for
 * a server. Returns 0, -PS_EUSAGE with err, or -ENOMEM. */
int ps_job_server_place(const ps_job_options *o, const ps_job_process *p, ps_job_plan *plan,
                        char *err, size_t len);

/* The steps a run makes: --steps when given (with --epochs also given, the
 * run ends at whichever comes first), else the epochs' steps
 * (PS_DEFAULT_EPOCHS when --epochs is auto); *epochs gets how many epochs
 * those steps reach into. Pure. */
uint64_t ps_job_total_steps(int steps, int epochs_opt, int steps_per_epoch, int *epochs);

#endif
