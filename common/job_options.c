/* The one table of job-wide options (see job_options.h). */
#include "job_options.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "frame.h"
#include "job_kinds.h"
#include "partition.h"

#define PS__S PS_JOB_SERVER
#define PS__W PS_JOB_WORKER
#define PS__L PS_JOB_LAUNCHER
#define PS__C PS_JOB_LIBRARY
#define PS__E PS_JOB_EVAL

typedef struct {
    const char *name;
    ps_flag_type type;
    size_t offset; /* of the member in ps_job_options */
    const char *metavar, *help;
    double min, max;
    const char *choices, *words, *section;
    double def;           /* INT, DOUBLE, BOOL */
    const char *def_text; /* STRING, CHOICE */
    unsigned programs;
    int agree; /* every process of a job must hold the same value */
} ps__job_option;

#define PS__AT(member) offsetof(ps_job_options, member)
#define PS__STR2(x)    #x
#define PS__STR(x)     PS__STR2(x)

/* A new option that more than one program takes goes here, and nowhere else. */
static const ps__job_option ps__job_table[] = {
    /* [cluster] */
    {"servers", PS_FLAG_STRING, PS__AT(servers), "HOST:PORT,...",
     "every server of the job in index order (a server: sets --num-servers and, unless given, "
     "--listen)",
     0, 0, NULL, NULL, "cluster", 0, "127.0.0.1:7000", PS__S | PS__W | PS__E, 0},
    {"workers", PS_FLAG_INT, PS__AT(workers), "W", "number of workers in the job", 1, 65536, NULL,
     NULL, "cluster", 1, NULL, PS__S | PS__W | PS__L | PS__E, 1},
    {"mode", PS_FLAG_CHOICE, PS__AT(mode), "MODE", "consistency: sync (BSP), async, or ssp", 0, 0,
     PS_JOB_KIND_CHOICES(PS_MODE_MAP), NULL, "cluster", 0, "sync", PS__S | PS__W | PS__L, 1},
    {"staleness", PS_FLAG_INT, PS__AT(staleness), "S", "clocks a worker may run ahead in ssp mode",
     0, 1000000, NULL, NULL, "cluster", 2, NULL, PS__S | PS__W | PS__L, 1},
    {"auth-token-file", PS_FLAG_STRING, PS__AT(auth_token_file), "FILE",
     "servers and workers prove to each other that they hold this shared secret", 0, 0, NULL, NULL,
     "cluster", 0, NULL, PS__S | PS__W | PS__L | PS__C | PS__E, 0},
    /* [model] */
    {"model", PS_FLAG_STRING, PS__AT(model), "FILE",
     "the model file (docs/model.md, e.g. models/cnn.model); input shape and classes come from "
     "the data; without it, the MLP of --hidden",
     0, 0, NULL, NULL, "model", 0, NULL, PS__W | PS__L | PS__E, 0},
    {"save-model", PS_FLAG_STRING, PS__AT(save_model), "FILE",
     "worker 0 writes the trained model here at the end (read by shardps-eval)", 0, 0, NULL, NULL,
     "model", 0, NULL, PS__W | PS__L, 0},
    {"hidden", PS_FLAG_STRING, PS__AT(hidden), "N,N,...",
     "hidden layer sizes of the MLP (flatten, dense + ReLU each, dense classes); not used with "
     "--model",
     0, 0, NULL, NULL, "model", 0, "256,128", PS__W | PS__L | PS__E, 0},
    {"seed", PS_FLAG_INT, PS__AT(seed), "N", "seed for the initial weights and the data order", 0,
     2147483647, NULL, NULL, "model", 1, NULL, PS__S | PS__W | PS__L | PS__C | PS__E, 1},
    {"chunk-bytes", PS_FLAG_DOUBLE, PS__AT(chunk_bytes), "BYTES",
     "largest chunk a tensor is cut into", 4, 1 << 30, NULL, NULL, "model", PS_DEFAULT_CHUNK_BYTES,
     NULL, PS__S | PS__W | PS__L | PS__C | PS__E, 1},
    /* [optimizer] */
    {"optimizer", PS_FLAG_CHOICE, PS__AT(optimizer), "NAME", "the servers' update rule", 0, 0,
     PS_JOB_KIND_CHOICES(PS_OPTIMIZER_MAP), NULL, "optimizer", 0, "adam", PS__S | PS__W | PS__L, 1},
    {"lr", PS_FLAG_DOUBLE, PS__AT(lr), "RATE", "learning rate", 0, 1000, NULL, NULL, "optimizer",
     0.001, NULL, PS__S | PS__W | PS__L, 1},
    {"momentum", PS_FLAG_DOUBLE, PS__AT(momentum), "MU", "momentum for sgd and nesterov", 0,
     0.999999, NULL, NULL, "optimizer", 0.9, NULL, PS__S | PS__W | PS__L, 1},
    {"weight-decay", PS_FLAG_DOUBLE, PS__AT(weight_decay), "L2",
     "weight decay (decoupled for adamw, L2 in the gradient for the others)", 0, 10, NULL, "off=0",
     "optimizer", 0, NULL, PS__S | PS__W | PS__L, 1},
    {"lr-schedule", PS_FLAG_CHOICE, PS__AT(lr_schedule), "KIND",
     "learning-rate schedule over the planned steps", 0, 0, PS_JOB_KIND_CHOICES(PS_LR_SCHEDULE_MAP),
     NULL, "optimizer", 0, "cosine", PS__S | PS__W | PS__L, 1},
    {"warmup-steps", PS_FLAG_INT, PS__AT(warmup_steps), "N",
     "linear warm-up over the first N steps", 0, 2147483647, NULL, NULL, "optimizer", 0, NULL,
     PS__S | PS__W | PS__L, 1},
    {"total-steps", PS_FLAG_INT, PS__AT(total_steps), "N",
     "steps a cosine schedule spans (0: as planned by the workers)", 0, 2147483647, NULL, NULL,
     "optimizer", 0, NULL, PS__S | PS__W | PS__L | PS__C, 1},
    {"lr-step-size", PS_FLAG_INT, PS__AT(lr_step_size), "N",
     "step schedule: multiply the rate by --lr-gamma every N steps", 0, 2147483647, NULL, NULL,
     "optimizer", 0, NULL, PS__S | PS__W | PS__L, 1},
    {"lr-gamma", PS_FLAG_DOUBLE, PS__AT(lr_gamma), "G", "step schedule: decay factor", 0, 1, NULL,
     NULL, "optimizer", 0.1, NULL, PS__S | PS__W | PS__L, 1},
    {"min-lr", PS_FLAG_DOUBLE, PS__AT(min_lr), "RATE", "cosine schedule: final rate", 0, 1000, NULL,
     NULL, "optimizer", 0, NULL, PS__S | PS__W | PS__L, 1},
    /* How servers apply pushes. */
    {"sync-quorum", PS_FLAG_INT, PS__AT(sync_quorum), "K",
     "sync: apply a step once K workers pushed it; later pushes are dropped (backup workers)", 0,
     65536, NULL, "all=0", NULL, 0, NULL, PS__S | PS__L, 0},
    {"staleness-damping", PS_FLAG_BOOL, PS__AT(staleness_damping), NULL,
     "async/ssp: scale the rate by 1/(1+staleness) of each gradient", 0, 0, NULL, NULL, NULL, 0,
     NULL, PS__S | PS__L, 0},
    {"apply-threads", PS_FLAG_INT, PS__AT(apply_threads), "N",
     "threads per server for optimizer updates of large chunks (0: on the event loop; auto: 0 "
     "below 4 cores, else cores/2 up to 4)",
     0, 64, NULL, "auto=-1", NULL, -1, NULL, PS__S | PS__L, 0},
    {"apply-pool-min-bytes", PS_FLAG_DOUBLE, PS__AT(apply_pool_min_bytes), "BYTES",
     "with --apply-threads: chunks at least this large are updated on the threads, smaller ones on "
     "the event loop (handing a small update to a thread costs more than it saves)",
     0, 1 << 30, NULL, NULL, NULL, 256 << 10, NULL, PS__S | PS__L, 0},
    {"reject-nonfinite", PS_FLAG_BOOL, PS__AT(reject_nonfinite), NULL,
     "drop pushes with NaN or Inf gradients (counted and logged; =0 to apply them)", 0, 0, NULL,
     NULL, NULL, 1, NULL, PS__S | PS__L, 0},
    /* How workers train. */
    {"batch", PS_FLAG_INT, PS__AT(batch), "B", "samples per step on each worker", 1, 65536, NULL,
     NULL, NULL, 64, NULL, PS__W | PS__L | PS__E, 0},
    {"epochs", PS_FLAG_INT, PS__AT(epochs), "E",
     "passes over the training data (auto: " PS__STR(
         PS_DEFAULT_EPOCHS) ", or as many as --steps "
                            "takes; with --steps too, the run ends at whichever comes first)",
     1, 100000, NULL, "auto=0", NULL, 0, NULL, PS__W | PS__L, 0},
    {"steps", PS_FLAG_INT, PS__AT(steps), "N",
     "run exactly N steps in all, however many epochs that takes (0: by --epochs)", 0, 2147483647,
     NULL, NULL, NULL, 0, NULL, PS__W | PS__L, 0},
    {"data", PS_FLAG_STRING, PS__AT(data), "DIR",
     "folder with the data: IDX or .npy files (docs/data.md)", 0, 0, NULL, NULL, NULL, 0,
     PS_DEFAULT_DATA_DIR, PS__W | PS__L | PS__E, 0},
    /* An alias: a row whose member an earlier row sets (never handed on). */
    {"data-dir", PS_FLAG_STRING, PS__AT(data), "DIR", "the older name of --data", 0, 0, NULL, NULL,
     NULL, 0, PS_DEFAULT_DATA_DIR, PS__W | PS__L | PS__E, 0},
    {"device", PS_FLAG_CHOICE, PS__AT(device), "DEV",
     "where workers compute: auto (CUDA if a usable GPU is present, else CPU), cpu, cuda", 0, 0,
     "auto|cpu|cuda", NULL, NULL, 0, "auto", PS__W | PS__L, 0},
    {"tf32", PS_FLAG_BOOL, PS__AT(tf32), NULL,
     "CUDA: matrix products in TF32 on tensor cores (faster, ~1e-3 relative error)", 0, 0, NULL,
     NULL, NULL, 0, NULL, PS__W | PS__L, 0},
    {"precision", PS_FLAG_CHOICE, PS__AT(precision), "P",
     "CUDA: fp32, or bf16 (matrix products and convolutions on bfloat16 inputs with float32 "
     "accumulation; the servers keep float32 weights); the CPU computes in fp32 only",
     0, 0, "fp32|bf16", NULL, NULL, 0, "fp32", PS__W | PS__L, 0},
    {"compress", PS_FLAG_CHOICE, PS__AT(compress), "KIND",
     "how pushes carry gradients: none (float32), fp16 (IEEE half) or bf16 (bfloat16): the "
     "last two halve the bytes; the servers accumulate in float32",
     0, 0, "none|fp16|bf16", NULL, NULL, 0, "none", PS__W | PS__L | PS__C, 0},
    {"clip-norm", PS_FLAG_DOUBLE, PS__AT(clip_norm), "NORM",
     "scale each tensor's gradient to at most this L2 norm", 0, 1e9, NULL, "off=0", NULL, 0, NULL,
     PS__W | PS__L, 0},
    {"eval-every", PS_FLAG_INT, PS__AT(eval_every), "N",
     "rank 0 also evaluates on the test set every N steps (0: once per epoch)", 0, 2147483647, NULL,
     NULL, NULL, 0, NULL, PS__W | PS__L, 0},
    {"progress-every", PS_FLAG_INT, PS__AT(progress_every), "N", "report progress every N steps", 1,
     1000000, NULL, NULL, NULL, 100, NULL, PS__W | PS__L | PS__C, 0},
    /* Checkpoints. */
    {"checkpoint-dir", PS_FLAG_STRING, PS__AT(checkpoint_dir), "DIR",
     "servers checkpoint here (periodically, on SIGTERM/SIGINT and at the end)", 0, 0, NULL, NULL,
     NULL, 0, NULL, PS__S | PS__L, 0},
    {"checkpoint-every", PS_FLAG_INT, PS__AT(checkpoint_every), "STEPS",
     "checkpoint every N steps (0: not by steps)", 0, 2147483647, NULL, NULL, NULL, 0, NULL,
     PS__S | PS__L, 0},
    {"checkpoint-seconds", PS_FLAG_DOUBLE, PS__AT(checkpoint_seconds), "SECONDS",
     "checkpoint at most this often by time (0: not by time)", 0, 86400 * 365, NULL, NULL, NULL, 0,
     NULL, PS__S | PS__L, 0},
    {"keep-checkpoints", PS_FLAG_INT, PS__AT(keep_checkpoints), "N", "newest checkpoints kept", 1,
     1000000, NULL, NULL, NULL, 3, NULL, PS__S | PS__L, 0},
    {"restore", PS_FLAG_BOOL, PS__AT(restore), NULL,
     "servers resume from this job's newest usable checkpoint in --checkpoint-dir and fail "
     "without one; auto: resume if there is one, else start fresh (logged either way)",
     0, 0, NULL, "auto=2", NULL, 0, NULL, PS__S | PS__L, 0},
    {"restore-clock", PS_FLAG_DOUBLE, PS__AT(restore_clock), "N",
     "with --restore: the newest checkpoint at or before clock N (to put every server on the "
     "same clock)",
     -1, 1e18, NULL, "newest=-1", NULL, -1, NULL, PS__S | PS__L, 0},
    /* Deadlines and limits. */
    {"heartbeat-timeout", PS_FLAG_DOUBLE, PS__AT(heartbeat_timeout), "SECONDS",
     "a worker silent this long leaves the barrier", 0, 86400, NULL, "off=0", NULL, 10, NULL,
     PS__S | PS__L, 0},
    {"rejoin-timeout", PS_FLAG_DOUBLE, PS__AT(rejoin_timeout), "SECONDS",
     "a worker that left without finishing is waited for this long, then counted as lost and "
     "the job finishes without it (long enough for a restart: Docker's, Kubernetes', systemd's)",
     0.1, 86400 * 365, NULL, NULL, NULL, 30, NULL, PS__S | PS__L, 0},
    {"max-rejected-steps", PS_FLAG_INT, PS__AT(max_rejected_steps), "N",
     "a worker whose every pushed chunk the servers refuse (NaN/Inf, --max-grad-norm) for N "
     "steps in a row stops with an error",
     0, 2147483647, NULL, "off=0", NULL, 20, NULL, PS__W | PS__L, 0},
    {"connect-timeout", PS_FLAG_DOUBLE, PS__AT(connect_timeout), "SECONDS",
     "how long a worker keeps trying to reach the servers", 0, 86400, NULL, NULL, NULL, 30, NULL,
     PS__W | PS__L | PS__C | PS__E, 0},
    {"request-timeout", PS_FLAG_DOUBLE, PS__AT(request_timeout), "SECONDS",
     "a worker gives up on a server that owes it an answer this long (auto: 3 of the servers' "
     "heartbeat timeouts, or 30 s without one)",
     0, 86400, NULL, "auto=0", NULL, 0, NULL, PS__W | PS__L | PS__C | PS__E, 0},
    {"max-reconnects", PS_FLAG_INT, PS__AT(max_reconnects), "N",
     "a worker rejoins the job at most N times after losing a server", 0, 1000000, NULL, NULL, NULL,
     10, NULL, PS__W | PS__L, 0},
    {"max-payload", PS_FLAG_DOUBLE, PS__AT(max_payload), "BYTES", "largest frame payload accepted",
     1024, 1ull << 40, NULL, NULL, NULL, (double)PS_DEFAULT_MAX_PAYLOAD, NULL,
     PS__S | PS__W | PS__L | PS__C | PS__E, 0},
    {"max-model-bytes", PS_FLAG_DOUBLE, PS__AT(max_model_bytes), "BYTES",
     "a server refuses a declared tensor table of more float32 bytes in all", 4, 1ull << 50, NULL,
     NULL, NULL, (double)(4ull << 30), NULL, PS__S | PS__L, 0},
    {"max-connections", PS_FLAG_INT, PS__AT(max_connections), "N",
     "a server keeps at most N connections open: one per worker, up to half the rest for "
     "evaluators (shardps-eval --follow), the rest for handshakes, whose longest-waiting gives "
     "way to a newcomer (0: 2 x --workers + 16)",
     0, 1 << 20, NULL, NULL, NULL, 0, NULL, PS__S | PS__L, 0},
    {"handshake-timeout", PS_FLAG_DOUBLE, PS__AT(handshake_timeout), "SECONDS",
     "a connection must finish its handshake this soon (and a refused one go)", 0.01, 86400, NULL,
     NULL, NULL, 10, NULL, PS__S | PS__L, 0},
    {"max-grad-norm", PS_FLAG_DOUBLE, PS__AT(max_grad_norm), "NORM",
     "a server refuses a chunk's gradient whose L2 norm is larger (counted, logged)", 0, 1e30, NULL,
     "off=0", NULL, 0, NULL, PS__S | PS__L, 0},
    {"max-clock-lead", PS_FLAG_DOUBLE, PS__AT(max_clock_lead), "STEPS",
     "async, ssp: how many steps past a server's own clock a worker may be (a server restored "
     "behind the others; 0: 1 + --checkpoint-every)",
     0, 1e18, NULL, NULL, NULL, 0, NULL, PS__S | PS__L, 0},
    {"max-row-ids", PS_FLAG_INT, PS__AT(max_row_ids), "N",
     "a server refuses a rows request naming more IDs, on its header before a byte is read; a "
     "worker splits a larger pull and refuses a larger push",
     1, 1 << 26, NULL, NULL, NULL, 1 << 20, NULL, PS__S | PS__W | PS__L | PS__C, 0},
    {"verbose", PS_FLAG_BOOL, PS__AT(verbose), NULL, "log debug detail", 0, 0, NULL, NULL, NULL, 0,
     NULL, PS__S | PS__W | PS__L, 0},
};
#define PS__N_JOB_OPTIONS ((int)(sizeof(ps__job_table) / sizeof(ps__job_table[0])))

static void *ps__member(const ps_job_options *o, const ps__job_option *d)
{
    return (char *)o + d->offset;
}

/* Whether row i is another name for a member an earlier row sets. */
static int ps__is_alias(int i)
{
    for (int j = 0; j < i; j++)
        if (ps__job_table[j].offset == ps__job_table[i].offset)
            return 1;
    return 0;
}

void ps_job_options_defaults(ps_job_options *o)
{
    memset(o, 0, sizeof(*o));
    for (int i = 0; i < PS__N_JOB_OPTIONS; i++) {
        const ps__job_option *d = &ps__job_table[i];
        void *m = ps__member(o, d);
        switch (d->type) {
        case PS_FLAG_INT:
        case PS_FLAG_BOOL:
            *(int *)m = (int)d->def;
            break;
        case PS_FLAG_DOUBLE:
            *(double *)m = d->def;
            break;
        case PS_FLAG_STRING:
        case PS_FLAG_CHOICE:
            *(const char **)m = d->def_text;
            break;
        }
    }
}

int ps_job_options_flags(ps_job_options *o, unsigned program, ps_flag *out, int max)
{
    int n = 0;

    for (int i = 0; i < PS__N_JOB_OPTIONS; i++) {
        const ps__job_option *d = &ps__job_table[i];
        if (!(d->programs & program))
            continue;
        if (n == max)
            return -ENOSPC;
        out[n++] = (ps_flag){d->name, d->type, ps__member(o, d), d->metavar, d->help,
                             d->min,  d->max,  d->choices,       d->words,   d->section};
    }
    return n;
}

int ps_job_options_others(unsigned program, char *buf, size_t len)
{
    size_t used = 0;

    if (len == 0)
        return -ENOSPC;
    buf[0] = '\0';
    for (int i = 0; i < PS__N_JOB_OPTIONS; i++) {
        const ps__job_option *d = &ps__job_table[i];
        int w;
        if (d->section == NULL || (d->programs & program))
            continue;
        w = snprintf(buf + used, len - used, "%s%s", used ? "|" : "", d->name);
        if (w < 0 || (size_t)w >= len - used)
            return -ENOSPC;
        used += (size_t)w;
    }
    return 0;
}

/* The value of d in o as text, the way the flag parser reads it back, a
 * number with this many significant digits; returns the length snprintf
 * gives. */
static int ps__format_value(const ps_job_options *o, const ps__job_option *d, int digits, char *buf,
                            size_t len)
{
    const void *m = ps__member(o, d);

    switch (d->type) {
    case PS_FLAG_INT:
    case PS_FLAG_BOOL:
        return snprintf(buf, len, "%d", *(const int *)m);
    case PS_FLAG_DOUBLE:
        return snprintf(buf, len, "%.*g", digits, *(const double *)m);
    case PS_FLAG_STRING:
    case PS_FLAG_CHOICE:
        break;
    }
    return snprintf(buf, len, "%s", *(const char *const *)m ? *(const char *const *)m : "");
}

int ps_job_options_argv(const ps_job_options *o, unsigned from, unsigned to, char *buf, size_t len,
                        char **argv, int max_argv)
{
    size_t used = 0;
    int n = 0;

    for (int i = 0; i < PS__N_JOB_OPTIONS; i++) {
        const ps__job_option *d = &ps__job_table[i];
        int w;

        if ((d->programs & from) == 0 || (d->programs & to) == 0 || ps__is_alias(i))
            continue;
        /* An unset path stays unset: "" would be a path. */
        if ((d->type == PS_FLAG_STRING || d->type == PS_FLAG_CHOICE) &&
            *(const char *const *)ps__member(o, d) == NULL)
            continue;
        if (n + 2 > max_argv)
            return -ENOSPC;
        if (d->type == PS_FLAG_BOOL) {
            char word[32];
            int v = *(const int *)ps__member(o, d);
            if (ps_flags_value_word(d->words, v, word, sizeof(word)))
                w = snprintf(buf + used, len - used, "--%s=%s", d->name, word);
            else
                w = snprintf(buf + used, len - used, "--%s=%d", d->name, v);
            if (w < 0 || (size_t)w >= len - used)
                return -ENOSPC;
            argv[n++] = buf + used;
            used += (size_t)w + 1;
            continue;
        }
        w = snprintf(buf + used, len - used, "--%s", d->name);
        if (w < 0 || (size_t)w >= len - used)
            return -ENOSPC;
        argv[n++] = buf + used;
        used += (size_t)w + 1;
        /* 17 digits: the child gets the very double the launcher holds. */
        w = ps__format_value(o, d, 17, buf + used, len - used);
        if (w < 0 || (size_t)w >= len - used)
            return -ENOSPC;
        argv[n++] = buf + used;
        used += (size_t)w + 1;
    }
    return n;
}

int ps_job_settings_format(const ps_job_options *o, int num_servers, char *buf, size_t len)
{
    size_t used;
    int w = snprintf(buf, len, "num-servers=%d\n", num_servers);

    if (w < 0 || (size_t)w >= len)
        return -ENOSPC;
    used = (size_t)w;
    for (int i = 0; i < PS__N_JOB_OPTIONS; i++) {
        const ps__job_option *d = &ps__job_table[i];
        if (!d->agree)
            continue;
        w = snprintf(buf + used, len - used, "%s=", d->name);
        if (w < 0 || (size_t)w >= len - used)
            return -ENOSPC;
        used += (size_t)w;
        /* 15 digits: what a person typed reads back as typed in messages. */
        w = ps__format_value(o, d, 15, buf + used, len - used);
        if (w < 0 || (size_t)w + 1 >= len - used)
            return -ENOSPC;
        used += (size_t)w;
        buf[used++] = '\n';
        buf[used] = '\0';
    }
    return 0;
}

/* The line of list that sets name (name_len bytes): its value and the
 * value's length, or NULL. */
static const char *ps__setting(const char *list, const char *name, size_t name_len, int *len)
{
    for (const char *p = list; *p;) {
        const char *nl = strchr(p, '\n');
        size_t line = nl ? (size_t)(nl - p) : strlen(p);
        if (line > name_len && p[name_len] == '=' && strncmp(p, name, name_len) == 0) {
            *len = (int)(line - name_len - 1);
            return p + name_len + 1;
        }
        p += line + (nl != NULL);
    }
    return NULL;
}

/* The bound keeps the quadratic look-ups here cheap whatever a peer sends. */
int ps_job_settings_valid(const char *list)
{
    size_t n = strnlen(list, PS_JOB_SETTINGS_MAX);

    if (n == PS_JOB_SETTINGS_MAX)
        return 0;
    for (size_t i = 0; i < n; i++)
        if ((list[i] < 0x20 && list[i] != '\n') || list[i] == 0x7f)
            return 0;
    for (const char *p = list; *p;) {
        const char *nl = strchr(p, '\n'), *eq = strchr(p, '=');
        size_t line = nl ? (size_t)(nl - p) : strlen(p);
        int vlen;
        if (eq == NULL || eq == p || (size_t)(eq - p) >= line)
            return 0;
        /* The first line of this name must be this one. */
        if (ps__setting(list, p, (size_t)(eq - p), &vlen) != eq + 1)
            return 0;
        p += line + (nl != NULL);
    }
    return 1;
}

/* Appends one difference to msg; the first of "a" or "b" that lacks the
 * setting shows as "(none)". */
static void ps__append_diff(char *msg, size_t len, size_t *used, const char *name, int name_len,
                            const char *a, int a_len, const char *a_side, const char *b, int b_len,
                            const char *b_side)
{
    int w;

    if (*used >= len)
        return;
    w = snprintf(msg + *used, len - *used, "%s%.*s: %.*s on %s, %.*s on %s", *used ? "; " : "",
                 name_len, name, a ? a_len : 6, a ? a : "(none)", a_side, b ? b_len : 6,
                 b ? b : "(none)", b_side);
    if (w > 0)
        *used += (size_t)w < len - *used ? (size_t)w : len - *used - 1;
}

int ps_job_settings_diff(const char *ours, const char *theirs, const char *our_side,
                         const char *their_side, char *msg, size_t len)
{
    size_t used = 0;
    int n = 0;

    if (len > 0)
        msg[0] = '\0';
    if (!ps_job_settings_valid(ours) || !ps_job_settings_valid(theirs))
        return -EINVAL;
    /* Ours in order (differing or missing there), then theirs we lack. */
    for (int pass = 0; pass < 2; pass++) {
        const char *list = pass == 0 ? ours : theirs, *other = pass == 0 ? theirs : ours;
        for (const char *p = list; *p;) {
            const char *nl = strchr(p, '\n'), *eq = strchr(p, '=');
            size_t line = nl ? (size_t)(nl - p) : strlen(p);
            int name_len = (int)(eq - p), vlen = (int)(line - (size_t)name_len - 1), olen = 0;
            const char *ov = ps__setting(other, p, (size_t)name_len, &olen);
            if (pass == 0 && (ov == NULL || olen != vlen || strncmp(ov, eq + 1, (size_t)vlen))) {
                ps__append_diff(msg, len, &used, p, name_len, eq + 1, vlen, our_side, ov, olen,
                                their_side);
                n++;
            } else if (pass == 1 && ov == NULL) {
                ps__append_diff(msg, len, &used, p, name_len, NULL, 0, our_side, eq + 1, vlen,
                                their_side);
                n++;
            }
            p += line + (nl != NULL);
        }
    }
    return n;
}

int ps_job_settings_unspanned(const char *settings, uint64_t planned)
{
    int kind_len = 0, span_len = 0;
    const char *kind, *span;
    char name[16];
    ps_lr_kind schedule;

    if (planned > 0 || !ps_job_settings_valid(settings))
        return 0;
    kind = ps__setting(settings, "lr-schedule", strlen("lr-schedule"), &kind_len);
    span = ps__setting(settings, "total-steps", strlen("total-steps"), &span_len);
    if (kind == NULL || span == NULL)
        return 0;
    /* A longer value is cut to one that names no schedule. */
    snprintf(name, sizeof(name), "%.*s", kind_len, kind);
    return ps_lr_schedule_parse(name, &schedule) == 0 && schedule == PS_LR_COSINE &&
           span_len == 1 && span[0] == '0';
}

uint64_t ps_job_fingerprint(const char *settings, uint64_t model_fingerprint)
{
    /* FNV-1a over the settings text, then the model's fingerprint mixed in. */
    uint64_t h = 0xcbf29ce484222325ULL;

    for (const char *p = settings ? settings : ""; *p; p++)
        h = (h ^ (unsigned char)*p) * 0x100000001b3ULL;
    for (int i = 0; i < 8; i++)
        h = (h ^ ((model_fingerprint >> (8 * i)) & 0xff)) * 0x100000001b3ULL;
    return h;
}
