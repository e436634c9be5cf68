/* bench-bigmodel: a model far larger than the MLP, held by several servers.
 *
 * This process declares a wide dense table (--params float32 values in
 * --tensors tensors of 4096 columns) to --servers real shardps-server
 * processes (async, --optimizer, a checkpoint directory), which take it from
 * the HELLO. It then times:
 *   declare   connecting: every server adopts the table (it fills its share
 *             with the initial values on its thread pool once every rank has
 *             joined, before the first pull is answered, so in the first
 *             step);
 *   step      push of a gradient for every value, then pull of every weight
 *             (--steps times; the pull waits for the updates before it);
 *   checkpoint the client's goodbye until the servers have exited: each
 *             writes its final checkpoint (fsynced) and frees its share;
 *   restore   restarting the servers with --restore until each reports its
 *             port: read, check (CRC32C) and load the table and the share.
 * After the steps it reads each server's resident memory (VmRSS, VmHWM from
 * /proc) against its share of weights plus optimizer state, and after the
 * restore it pulls every weight again and requires the bits pulled before
 * the shutdown. One JSON line sums it up; docs/performance.md records it. */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bench_util.h"
#include "clock.h"
#include "flags.h"
#include "kv_client.h"
#include "optimizer.h"
#include "partition.h"
#include "ps_error.h"
#include "ps_log.h"

#ifndef PS_SERVER_BIN
#define PS_SERVER_BIN "shardps-server"
#endif

#define PS__MAX_SERVERS 16
#define PS__COLS        4096

typedef struct {
    double params;
    int tensors, servers, steps, logs;
    const char *optimizer, *dir, *server_bin;
} ps__opts;

typedef struct {
    ps_bench_child kids[PS__MAX_SERVERS];
    char addr[PS__MAX_SERVERS][32];
    const char *addrs[PS__MAX_SERVERS];
} ps__servers;

/* The wide table: tensors of PS__COLS columns, rows enough for params. */
static int ps__spec(const ps__opts *o, ps_model_spec *spec)
{
    size_t per = ((size_t)o->params + (size_t)o->tensors - 1) / (size_t)o->tensors;
    int rows = (int)((per + PS__COLS - 1) / PS__COLS);

    memset(spec, 0, sizeof(*spec));
    spec->seed = 1;
    for (int t = 0; t < o->tensors; t++) {
        char name[32];
        int shape[2] = {rows, PS__COLS};
        snprintf(name, sizeof(name), "wide%d.weight", t);
        int rc = ps_model_spec_add_tensor(spec, name, 2, shape, PS_INIT_HE_UNIFORM, PS__COLS, rows);
        if (rc < 0)
            return rc;
    }
    return 0;
}

static int ps__start(const ps__opts *o, int restore, ps__servers *sv)
{
    const char *extra[] = {"--workers",
                           "1",
                           "--mode",
                           "async",
                           "--optimizer",
                           o->optimizer,
                           "--lr",
                           "0.0001",
                           "--max-payload",
                           "2147483648",
                           "--checkpoint-dir",
                           o->dir,
                           restore ? "--restore" : NULL,
                           NULL};
    int rc = ps_bench_start_servers(o->server_bin, o->servers, extra, o->logs, sv->kids);

    if (rc < 0) {
        fprintf(stderr, "bench-bigmodel: the servers did not start (rerun with --logs)\n");
        return rc;
    }
    for (int s = 0; s < o->servers; s++) {
        snprintf(sv->addr[s], sizeof(sv->addr[s]), "127.0.0.1:%d", sv->kids[s].port);
        sv->addrs[s] = sv->addr[s];
    }
    return 0;
}

/* kB of "VmRSS:" or "VmHWM:" in /proc/PID/status; -1 if unreadable. */
static long ps__proc_kb(pid_t pid, const char *field)
{
    char path[64], line[256];
    long kb = -1;
    size_t n = strlen(field);
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    f = fopen(path, "r");
    if (f == NULL)
        return -1;
    while (fgets(line, sizeof(line), f))
        if (strncmp(line, field, n) == 0) {
            kb = strtol(line + n, NULL, 10);
            break;
        }
    fclose(f);
    return kb;
}

static int ps__client(const ps__opts *o, const ps_model_spec *spec, ps__servers *sv,
                      ps_kv_client **kv, uint64_t *clock)
{
    ps_kv_client_config kc;
    int rc;

    memset(&kc, 0, sizeof(kc));
    kc.spec = *spec;
    kc.rank = 0;
    kc.world = 1;
    kc.servers = sv->addrs;
    kc.n_servers = o->servers;
    kc.chunk_bytes = PS_DEFAULT_CHUNK_BYTES;
    kc.connect_timeout_s = 60;
    kc.request_timeout_s = 600;
    kc.max_payload = (size_t)2 << 30;
    rc = ps_kv_client_init(kv, &kc);
    if (rc == 0)
        rc = ps_kv_client_connect(*kv, clock);
    return rc;
}

/* Closes the client (its goodbye ends the servers' job, so each writes its
 * final checkpoint and exits) and waits for every server. */
static int ps__shutdown(const ps__opts *o, ps_kv_client *kv, ps__servers *sv)
{
    int rc = 0;

    ps_kv_client_close(kv);
    for (int s = 0; s < o->servers; s++)
        if (ps_bench_reap(&sv->kids[s], 600) < 0)
            rc = -PS_EPROTO;
    return rc;
}

static int ps__run(const ps__opts *o)
{
    ps_model_spec spec = {0};
    ps_optimizer_config oc;
    ps_optimizer_kind kind;
    ps_partition *part = NULL;
    ps__servers sv;
    ps_kv_client *kv = NULL;
    float *params[PS_MAX_TENSORS] = {0}, *grads[PS_MAX_TENSORS] = {0}, *again[PS_MAX_TENSORS] = {0};
    double t0, declare_s, step_s = 0, ckpt_s, restore_s, worst = 0;
    uint64_t clock;
    int rc;

    memset(&sv, 0, sizeof(sv));
    if ((rc = ps__spec(o, &spec)) < 0 || (rc = ps_optimizer_parse(o->optimizer, &kind)) < 0 ||
        (rc = ps_partition_init(&part, &spec, o->servers, PS_DEFAULT_CHUNK_BYTES)) < 0)
        goto out;
    ps_optimizer_defaults(&oc, kind);
    rc = -ENOMEM;
    for (int t = 0; t < spec.n_tensors; t++) {
        size_t n = spec.tensors[t].numel;
        params[t] = malloc(n * sizeof(float));
        grads[t] = malloc(n * sizeof(float));
        again[t] = malloc(n * sizeof(float));
        if (params[t] == NULL || grads[t] == NULL || again[t] == NULL)
            goto out;
        for (size_t i = 0; i < n; i++)
            grads[t][i] = 1e-3f;
    }
    printf("model: %d tensors, %zu float32 values (%.1f MiB), %d servers, %s\n", spec.n_tensors,
           spec.total_numel, (double)spec.total_numel * 4 / (1 << 20), o->servers, o->optimizer);

    if ((rc = ps__start(o, 0, &sv)) < 0)
        goto out;
    t0 = ps_clock_now();
    if ((rc = ps__client(o, &spec, &sv, &kv, &clock)) < 0)
        goto out;
    declare_s = ps_clock_now() - t0;
    for (int i = 0; i < o->steps; i++) {
        double t = ps_clock_now(), d;
        rc = ps_kv_client_push(kv, (const float *const *)grads);
        if (rc == 0)
            rc = ps_kv_client_pull(kv, clock + 1, params);
        if (rc == 0)
            rc = ps_kv_client_wait(kv);
        if (rc < 0)
            goto out;
        clock++;
        d = ps_clock_now() - t;
        step_s += d;
        printf("step %d: push + pull of the whole model in %.3f s\n", i + 1, d);
    }
    for (int s = 0; s < o->servers; s++) {
        size_t w = ps_partition_server_numel(part, s);
        double share = (double)(w + ps_optimizer_state_floats(&oc, w)) * sizeof(float);
        long rss = ps__proc_kb(sv.kids[s].pid, "VmRSS:"),
             hwm = ps__proc_kb(sv.kids[s].pid, "VmHWM:");
        double ratio = (double)rss * 1024 / share;
        printf(
            "server %d: weights + optimizer state %.1f MiB; resident %.1f MiB (%.2fx), peak %.1f "
            "MiB (%.2fx)\n",
            s, share / (1 << 20), rss / 1024.0, ratio, hwm / 1024.0, (double)hwm * 1024 / share);
        if (ratio > worst)
            worst = ratio;
    }
    t0 = ps_clock_now();
    rc = ps__shutdown(o, kv, &sv);
    kv = NULL;
    ckpt_s = ps_clock_now() - t0;
    if (rc < 0)
        goto out;
    t0 = ps_clock_now();
    if ((rc = ps__start(o, 1, &sv)) < 0)
        goto out;
    restore_s = ps_clock_now() - t0;
    if ((rc = ps__client(o, &spec, &sv, &kv, &clock)) < 0 ||
        (rc = ps_kv_client_pull(kv, clock, again)) < 0 || (rc = ps_kv_client_wait(kv)) < 0)
        goto out;
    for (int t = 0; t < spec.n_tensors; t++)
        if (memcmp(params[t], again[t], spec.tensors[t].numel * sizeof(float)) != 0) {
            fprintf(stderr, "bench-bigmodel: %s after the restore differs from before\n",
                    spec.tensors[t].name);
            rc = -PS_EMISMATCH;
            goto out;
        }
    printf("declare %.2f s, step %.3f s (mean of %d), checkpoint %.2f s, restore %.2f s; the "
           "restored weights equal the ones pulled before\n",
           declare_s, step_s / o->steps, o->steps, ckpt_s, restore_s);
    printf("{\"bench\":\"bigmodel\",\"params\":%zu,\"servers\":%d,\"optimizer\":\"%s\","
           "\"declare_s\":%.3f,\"step_s\":%.3f,\"checkpoint_s\":%.3f,\"restore_s\":%.3f,"
           "\"worst_rss_ratio\":%.3f}\n",
           spec.total_numel, o->servers, o->optimizer, declare_s, step_s / o->steps, ckpt_s,
           restore_s, worst);
    rc = ps__shutdown(o, kv, &sv);
    kv = NULL;
out:
    if (rc < 0)
        fprintf(stderr, "bench-bigmodel: %s\n", ps_strerror(rc));
    if (kv)
        ps_kv_client_close(kv);
    for (int s = 0; s < o->servers; s++)
        if (sv.kids[s].pid > 0) {
            kill(sv.kids[s].pid, SIGTERM);
            ps_bench_reap(&sv.kids[s], 60);
        }
    for (int t = 0; t < PS_MAX_TENSORS; t++) {
        free(params[t]);
        free(grads[t]);
        free(again[t]);
    }
    ps_partition_free(part);
    ps_model_spec_free(&spec);
    return rc;
}

int main(int argc, char **argv)
{
    char dir[] = "/tmp/bench-bigmodel-XXXXXX";
    ps__opts o = {100e6, 8, 4, 3, 0, "adam", NULL, PS_SERVER_BIN};
    ps_flag flags[] = {
        {"params", PS_FLAG_DOUBLE, &o.params, "N", "float32 values in the model", 4096, 1e10, NULL,
         NULL, NULL},
        {"tensors", PS_FLAG_INT, &o.tensors, "N", "tensors they are split into", 1, PS_MAX_TENSORS,
         NULL, NULL, NULL},
        {"servers", PS_FLAG_INT, &o.servers, "S", "servers holding them", 1, PS__MAX_SERVERS, NULL,
         NULL, NULL},
        {"steps", PS_FLAG_INT, &o.steps, "N", "timed push + pull steps", 1, 1000, NULL, NULL, NULL},
        {"optimizer", PS_FLAG_CHOICE, &o.optimizer, "NAME", "the servers' update rule", 0, 0,
         "sgd|nesterov|adam|adamw|adagrad", NULL, NULL},
        {"logs", PS_FLAG_BOOL, &o.logs, NULL, "show the servers' logs", 0, 0, NULL, NULL, NULL},
        {"server-bin", PS_FLAG_STRING, &o.server_bin, "PATH", "the shardps-server to run", 0, 0,
         NULL, NULL, NULL},
    };
    int rc =
        ps_flags_parse(flags, (int)(sizeof(flags) / sizeof(flags[0])), argc, argv, "bench-bigmodel",
                       "Times a >= 100M-parameter model on several servers: declare, push + "
                       "pull, checkpoint, restore, and each server's resident memory.");

    if (rc != 0)
        return rc > 0 ? 0 : 2;
    ps_log_set_level(PS_LOG_WARN);
    if (mkdtemp(dir) == NULL) {
        perror("bench-bigmodel: mkdtemp");
        return 1;
    }
    o.dir = dir;
    rc = ps__run(&o);
    /* The checkpoints are large: remove them whatever happened. */
    {
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
        if (system(cmd) != 0)
            fprintf(stderr, "bench-bigmodel: could not remove %s\n", dir);
    }
    return rc < 0 ? 1 : 0;
}
