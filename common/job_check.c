/* The one check of a job's options and the files they name (see
 * job_check.h). Each rule is a small function of the options that writes
 * the sentence a person reads; ps_job_check runs the ones the asking program
 * takes, in order. */
#include "job_check.h"

#include <errno.h>
#include <inttypes.h>
#include <libgen.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "auth.h"
#include "job_kinds.h"
#include "ps_error.h"
#include "ps_log.h"
#include "transport.h"

__attribute__((format(printf, 3, 4))) static int ps__refuse(char *err, size_t len, const char *fmt,
                                                            ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(err, len, fmt, ap);
    va_end(ap);
    return -PS_EUSAGE;
}

/* Where option name's value came from, as a phrase after "from". */
static const char *ps__from(const ps_job_process *p, const char *name, char *buf, size_t len)
{
    if (p->flags == NULL)
        snprintf(buf, len, "the options");
    else
        ps_flags_describe_origin(p->flags, name, buf, len);
    return buf;
}

uint64_t ps_job_total_steps(int steps, int epochs_opt, int steps_per_epoch, int *epochs)
{
    uint64_t spe = (uint64_t)steps_per_epoch;
    uint64_t by_epochs = spe * (uint64_t)(epochs_opt > 0 ? epochs_opt : PS_DEFAULT_EPOCHS);
    uint64_t total = by_epochs;

    if (steps > 0)
        total = epochs_opt > 0 && by_epochs < (uint64_t)steps ? by_epochs : (uint64_t)steps;
    *epochs = (int)((total + spe - 1) / spe);
    return total;
}

/* A server's place in the job's server list (usually from the cluster
 * file): its entry gives --num-servers and, unless --listen was given, the
 * address to listen on, so one file describes every server (job_check.h). */
int ps_job_server_place(const ps_job_options *o, const ps_job_process *p, ps_job_plan *plan,
                        char *err, size_t len)
{
    char from[PATH_MAX + 64], other[PATH_MAX + 64], why[2 * PATH_MAX + 64], e[256];
    const char *colon, *own;
    ps_server_list *sl;
    int n, rc;

    plan->num_servers = p->num_servers;
    snprintf(plan->listen, sizeof(plan->listen), "%s", p->listen);
    /* The default list is a worker's; a server without one keeps --listen
     * and --num-servers. */
    if (p->flags == NULL || ps_flags_origin(p->flags, "servers") == PS_FLAG_FROM_DEFAULT)
        return 0;
    ps__from(p, "servers", from, sizeof(from));
    rc = ps_server_list_parse(&sl, o->servers, PS_MAX_SERVERS, 1, e, sizeof(e));
    if (rc < 0)
        return rc == -ENOMEM
                   ? rc
                   : ps__refuse(err, len, "servers '%s' (from %s): %s", o->servers, from, e);
    n = ps_server_list_count(sl);
    if (p->server_index >= n) {
        ps_server_list_free(sl);
        return ps__refuse(err, len,
                          "--server-index %d (from %s) has no entry in the servers list (from %s), "
                          "which names %d server%s, indices 0..%d: %s",
                          p->server_index, ps__from(p, "server-index", other, sizeof(other)), from,
                          n, n == 1 ? "" : "s", n - 1, o->servers);
    }
    own = ps_server_list_entries(sl)[p->server_index];
    if (strlen(own) >= sizeof(plan->listen)) {
        ps_server_list_free(sl);
        return ps__refuse(err, len, "servers '%s' (from %s): entry %d is too long", o->servers,
                          from, p->server_index);
    }
    if (ps_flags_origin(p->flags, "num-servers") != PS_FLAG_FROM_DEFAULT && p->num_servers != n) {
        ps_server_list_free(sl);
        return ps__refuse(err, len,
                          "--num-servers %d (from %s) disagrees with the %d servers listed in "
                          "servers (from %s); drop one of them",
                          p->num_servers, ps__from(p, "num-servers", other, sizeof(other)), n,
                          from);
    }
    plan->num_servers = n;
    snprintf(why, sizeof(why), "the length of servers (%s)", from);
    ps_flags_set_derived(p->flags, "num-servers", why);
    if (ps_flags_origin(p->flags, "listen") == PS_FLAG_FROM_DEFAULT) {
        snprintf(plan->listen, sizeof(plan->listen), "%s", own);
        snprintf(why, sizeof(why), "servers[%d] (%s)", p->server_index, from);
        ps_flags_set_derived(p->flags, "listen", why);
    } else if ((colon = strrchr(p->listen, ':')) != NULL && strrchr(own, ':') != NULL &&
               strcmp(colon, strrchr(own, ':')) != 0 && strcmp(colon, ":0") != 0) {
        /* Legitimate behind port forwarding, so a warning, not an error. */
        ps_warn("--listen %s uses another port than this server's entry %s in the servers list; "
                "workers will connect to %s",
                p->listen, own, own);
    }
    ps_server_list_free(sl);
    return 0;
}

/* The server's own place: its index, and the address it listens on,
 * resolved once here. */
static int ps__job_check_server(const ps_job_options *o, const ps_job_process *p, ps_job_plan *plan,
                                char *err, size_t len)
{
    char e[256], from[PATH_MAX + 64];
    int rc = ps_job_server_place(o, p, plan, err, len);

    if (rc < 0)
        return rc;
    if (p->server_index >= plan->num_servers)
        return ps__refuse(err, len, "--server-index %d must be below --num-servers %d",
                          p->server_index, plan->num_servers);
    if (ps_parse_hostport(plan->listen, &plan->listen_addr, 1, e, sizeof(e)) < 0)
        return ps__refuse(err, len, "listen address (from %s): %s",
                          ps__from(p, "listen", from, sizeof(from)), e);
    return 0;
}

/* A worker's rank and the servers it reaches. */
static int ps__job_check_worker(const ps_job_options *o, const ps_job_process *p, ps_job_plan *plan,
                                char *err, size_t len)
{
    char e[256], from[2][PATH_MAX + 64];
    int rc;

    if (p->rank >= o->workers)
        return ps__refuse(err, len,
                          "--rank %d must be below --workers %d (rank from %s, workers from %s)",
                          p->rank, o->workers, ps__from(p, "rank", from[0], sizeof(from[0])),
                          ps__from(p, "workers", from[1], sizeof(from[1])));
    rc = ps_server_list_parse(&plan->servers, o->servers, PS_MAX_SERVERS, 0, e, sizeof(e));
    if (rc < 0)
        return rc == -ENOMEM ? rc
                             : ps__refuse(err, len, "servers '%s' (from %s): %s", o->servers,
                                          ps__from(p, "servers", from[0], sizeof(from[0])), e);
    plan->num_servers = ps_server_list_count(plan->servers);
    return 0;
}

/* Rules of the options alone, whoever takes them. */
static int ps__rules(const ps_job_options *o, const ps_job_process *p, char *err, size_t len)
{
    unsigned servers_side = PS_JOB_SERVER | PS_JOB_LAUNCHER;
    /* Any text that names no schedule (the table refuses one; a caller
     * filling the options by hand may not) ties no option to another. */
    ps_lr_kind schedule = PS_LR_CONSTANT;

    if ((p->program & PS_JOB_LAUNCHER) && o->workers > PS_LAUNCHER_MAX_WORKERS)
        return ps__refuse(err, len, "--workers %d: this launcher starts at most %d", o->workers,
                          PS_LAUNCHER_MAX_WORKERS);
    if (!(p->program & servers_side))
        return 0;
    if (o->sync_quorum > o->workers)
        return ps__refuse(err, len, "--sync-quorum %d exceeds --workers %d", o->sync_quorum,
                          o->workers);
    if (o->restore && o->checkpoint_dir == NULL)
        return ps__refuse(err, len, "--restore needs --checkpoint-dir DIR to restore from");
    if (o->checkpoint_every > 0 && o->checkpoint_dir == NULL)
        return ps__refuse(err, len, "--checkpoint-every %d needs --checkpoint-dir DIR to write to",
                          o->checkpoint_every);
    if (o->checkpoint_seconds > 0 && o->checkpoint_dir == NULL)
        return ps__refuse(err, len,
                          "--checkpoint-seconds %g needs --checkpoint-dir DIR to write to",
                          o->checkpoint_seconds);
    ps_lr_schedule_parse(o->lr_schedule, &schedule);
    if (schedule == PS_LR_STEP && o->lr_step_size == 0)
        return ps__refuse(err, len,
                          "--lr-schedule step needs --lr-step-size N (the steps between decays)");
    if (schedule == PS_LR_COSINE && o->min_lr > o->lr)
        return ps__refuse(err, len,
                          "--min-lr %g is above --lr %g: a cosine schedule decays from --lr to "
                          "--min-lr",
                          o->min_lr, o->lr);
    return 0;
}

/* A folder a program will create files in (and, with create, may create
 * itself, as checkpoints do): it exists and is writable, or its parent is. */
static int ps__writable_dir(const char *dir, int create, const char *what, char *err, size_t len)
{
    struct stat st;
    char buf[PATH_MAX];
    const char *parent;

    if (stat(dir, &st) == 0) {
        if (!S_ISDIR(st.st_mode))
            return ps__refuse(err, len, "%s %s is not a directory", what, dir);
        if (access(dir, W_OK | X_OK) < 0)
            return ps__refuse(err, len, "%s %s: cannot write there: %s", what, dir,
                              strerror(errno));
        return 0;
    }
    if (!create || errno != ENOENT)
        return ps__refuse(err, len, "%s %s: %s", what, dir, strerror(errno));
    /* Checkpoints create their folder, one level. */
    snprintf(buf, sizeof(buf), "%s", dir);
    parent = dirname(buf);
    if (stat(parent, &st) < 0 || access(parent, W_OK | X_OK) < 0)
        return ps__refuse(err, len, "%s %s does not exist and cannot be created in %s: %s", what,
                          dir, parent, strerror(errno));
    if (!S_ISDIR(st.st_mode))
        return ps__refuse(err, len, "%s %s cannot be created: %s is not a directory", what, dir,
                          parent);
    return 0;
}

/* A file a program will write at the end of the run: its folder must be
 * writable now, not after the training. */
static int ps__writable_file(const char *path, const char *what, char *err, size_t len)
{
    struct stat st;
    char buf[PATH_MAX];
    const char *dir;

    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        return ps__refuse(err, len, "%s %s is a directory", what, path);
    snprintf(buf, sizeof(buf), "%s", path);
    dir = dirname(buf);
    if (stat(dir, &st) < 0)
        return ps__refuse(err, len, "%s %s: no folder %s: %s", what, path, dir, strerror(errno));
    if (access(dir, W_OK | X_OK) < 0)
        return ps__refuse(err, len, "%s %s: cannot write in %s: %s", what, path, dir,
                          strerror(errno));
    return 0;
}

/* A launcher's workers' command, found as it will be started (execvp): a
 * name with a '/' as that path, any other on PATH. */
static int ps__command(const char *cmd, char *err, size_t len)
{
    const char *path = getenv("PATH"), *p;
    char full[PATH_MAX];

    if (strchr(cmd, '/') != NULL) {
        if (access(cmd, X_OK) < 0)
            return ps__refuse(err, len, "the command %s cannot be run: %s", cmd, strerror(errno));
        return 0;
    }
    for (p = path ? path : "/usr/local/bin:/usr/bin:/bin"; p != NULL;) {
        const char *colon = strchr(p, ':');
        int n = colon ? (int)(colon - p) : (int)strlen(p);
        /* An empty entry is the current folder. */
        snprintf(full, sizeof(full), "%.*s/%s", n ? n : 1, n ? p : ".", cmd);
        if (access(full, X_OK) == 0)
            return 0;
        p = colon ? colon + 1 : NULL;
    }
    return ps__refuse(err, len, "the command %s is no program on PATH", cmd);
}

/* The files the options name that a program opens before training. */
static int ps__files(const ps_job_options *o, const ps_job_process *p, char *err, size_t len)
{
    unsigned takes_model = PS_JOB_WORKER | PS_JOB_LAUNCHER;
    int rc;

    if (o->auth_token_file && ((p->program & (takes_model | PS_JOB_SERVER)) || p->evaluator)) {
        uint8_t key[PS_AUTH_KEY_BYTES];
        int loose;
        rc = ps_auth_load_key(o->auth_token_file, key, &loose, err, len);
        if (rc < 0)
            return -PS_EUSAGE;
    }
    if (o->checkpoint_dir && (p->program & (PS_JOB_SERVER | PS_JOB_LAUNCHER)) &&
        (rc = ps__writable_dir(o->checkpoint_dir, o->restore != 1, "--checkpoint-dir", err, len)) <
            0)
        return rc;
    if (!(p->program & takes_model))
        return 0;
    if (o->save_model && (rc = ps__writable_file(o->save_model, "--save-model", err, len)) < 0)
        return rc;
    if (p->evaluator_curve &&
        (rc = ps__writable_file(p->evaluator_curve, "--evaluator", err, len)) < 0)
        return rc;
    if (p->dump_weights &&
        (rc = ps__writable_file(p->dump_weights, "--dump-weights", err, len)) < 0)
        return rc;
    if ((p->program & PS_JOB_LAUNCHER) && p->bin_dir == NULL)
        return ps__refuse(err, len, "cannot tell where the shardps programs are; pass --bin-dir");
    if (p->command && (rc = ps__command(p->command, err, len)) < 0)
        return rc;
    for (int i = 0; p->bin_dir && i < (p->command ? 1 : 2); i++) {
        const char *prog = i == 0 ? "shardps-server" : "shardps-worker";
        char path[PATH_MAX];
        snprintf(path, sizeof(path), "%s/%s", p->bin_dir, prog);
        if (access(path, X_OK) < 0)
            return ps__refuse(err, len, "--bin-dir %s: no %s there to start (%s)", p->bin_dir, prog,
                              strerror(errno));
    }
    return 0;
}

/* The model: --model's file parsed (every layer known), or --hidden's MLP. */
static int ps__model(const ps_job_options *o, const ps_job_process *p, ps_job_plan *plan, char *err,
                     size_t len)
{
    int sizes[PS_MAX_LAYERS + 1], nh;
    char source[sizeof(plan->desc.source)];

    if (o->model) {
        if ((p->program & PS_JOB_LAUNCHER) && realpath(o->model, plan->model_path) == NULL)
            return ps__refuse(err, len, "--model %s: %s", o->model, strerror(errno));
        return ps_model_desc_load(&plan->desc, o->model, err, len) < 0 ? -PS_EUSAGE : 0;
    }
    nh = ps_model_spec_parse_sizes(o->hidden, sizes, PS_MAX_LAYERS - 1);
    if (nh < 0)
        return ps__refuse(err, len, "--hidden '%s' is not a list of positive sizes like 256,128",
                          o->hidden);
    snprintf(source, sizeof(source), "--hidden %s", o->hidden);
    return ps_model_desc_mlp(&plan->desc, sizes, nh, source, err, len) < 0 ? -PS_EUSAGE : 0;
}

/* The data read through the program's loader, the model resolved against
 * them, and the run's length. */
static int ps__data(const ps_job_options *o, const ps_job_process *p, ps_job_plan *plan, char *err,
                    size_t len)
{
    ps_job_data *d = &plan->data;
    size_t bytes = 0;
    int rc = p->load_data(p->data_arg, o->data, d, err, len);

    if (rc < 0)
        return rc == -ENOMEM ? rc : -PS_EUSAGE;
    if (!(p->program & (PS_JOB_WORKER | PS_JOB_LAUNCHER)) && !p->evaluator)
        return 0;
    if (ps_model_desc_resolve(&plan->desc, &d->shape, d->classes, (uint64_t)o->seed, &plan->spec,
                              err, len) < 0)
        return -PS_EUSAGE;
    if (p->evaluator)
        return 0;
    for (int i = 0; i < plan->spec.n_tensors; i++)
        bytes += plan->spec.tensors[i].numel * sizeof(float);
    if ((p->program & PS_JOB_LAUNCHER) && (double)bytes > o->max_model_bytes)
        return ps__refuse(err, len,
                          "the model's %zu bytes of float32 weights exceed --max-model-bytes %.0f",
                          bytes, o->max_model_bytes);
    plan->steps_per_epoch = d->train_samples / (o->batch * o->workers);
    if (plan->steps_per_epoch == 0)
        return ps__refuse(err, len,
                          "--batch %d x %d workers exceeds the %d training samples; use a smaller "
                          "batch",
                          o->batch, o->workers, d->train_samples);
    plan->total_steps =
        ps_job_total_steps(o->steps, o->epochs, plan->steps_per_epoch, &plan->epochs);
    return 0;
}

int ps_job_check(const ps_job_options *o, const ps_job_process *p, ps_job_plan *plan, char *err,
                 size_t len)
{
    int rc;

    memset(plan, 0, sizeof(*plan));
    err[0] = '\0';
    plan->num_servers = p->num_servers;
    rc = ps__rules(o, p, err, len);
    if (rc == 0 && (p->program & PS_JOB_SERVER))
        rc = ps__job_check_server(o, p, plan, err, len);
    if (rc == 0 && ((p->program & PS_JOB_WORKER) || p->evaluator))
        rc = ps__job_check_worker(o, p, plan, err, len);
    if (rc == 0 && (p->program & (PS_JOB_SERVER | PS_JOB_WORKER)) &&
        ps_job_settings_format(o, plan->num_servers, plan->settings, sizeof(plan->settings)) < 0)
        rc = ps__refuse(err, len, "the job's settings do not fit in %zu bytes",
                        sizeof(plan->settings));
    if (rc == 0)
        rc = ps__files(o, p, err, len);
    if (rc == 0 && ((p->program & (PS_JOB_WORKER | PS_JOB_LAUNCHER)) || p->evaluator))
        rc = ps__model(o, p, plan, err, len);
    if (rc == 0 && p->load_data)
        rc = ps__data(o, p, plan, err, len);
    return rc;
}

const char *ps_job_plan_length(const ps_job_options *o, const ps_job_plan *plan, char *buf,
                               size_t len)
{
    double epochs = (double)plan->total_steps / plan->steps_per_epoch;

    if (o->steps > 0 && plan->total_steps == (uint64_t)o->steps)
        snprintf(buf, len, "%d step%s (--steps), %.3g epoch%s", o->steps, o->steps == 1 ? "" : "s",
                 epochs, epochs == 1 ? "" : "s");
    else if (o->steps > 0)
        snprintf(buf, len, "%" PRIu64 " steps: --epochs %d ends before --steps %d",
                 plan->total_steps, o->epochs, o->steps);
    else
        snprintf(buf, len, "%d epoch%s", plan->epochs, plan->epochs == 1 ? "" : "s");
    return buf;
}

void ps_job_plan_free(ps_job_plan *plan)
{
    ps_server_list_free(plan->servers);
    plan->servers = NULL;
    ps_model_spec_free(&plan->spec);
}
