/* shardps-server: one parameter-server daemon. Parses its options, listens,
 * and runs the event loop until every worker has finished (or
 * SIGINT/SIGTERM); the tensors it holds are declared by the first worker. */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "auth.h"
#include "flags.h"
#include "flags_help.h"
#include "job_options.h"
#include "kv_server.h"
#include "metrics_http.h"
#include "partition.h"
#include "ps_error.h"
#include "ps_log.h"
#include "parent_watch.h"
#include "server_list.h"
#include "transport.h"

typedef struct {
    uv_loop_t loop;
    ps_kv_server *srv;
    ps_metrics *metrics; /* NULL without --metrics-port/--metrics-file */
    uv_signal_t sigint, sigterm;
    int linger;
    int stopped;
    int quiescing;        /* a signal came; waiting for a step boundary */
    uint32_t quiesce_ms;  /* how long at most */
    char quiesce_why[16]; /* "SIGINT" or "SIGTERM" */
} ps__server_app;

/* Reached from the last worker leaving and from signals, possibly both. */
static void ps__stop(ps__server_app *app, const char *why)
{
    if (app->stopped)
        return;
    app->stopped = 1;
    /* First, so the metrics file ends with the final figures. */
    ps_metrics_stop(app->metrics);
    app->metrics = NULL;
    ps_kv_server_checkpoint(app->srv, why);
    ps_kv_server_stop(app->srv);
    uv_close((uv_handle_t *)&app->sigint, NULL);
    uv_close((uv_handle_t *)&app->sigterm, NULL);
    /* Closing the handles restores the default action; a second SIGTERM
     * (say, from a launcher that saw the job end) must not kill a server
     * that is already writing its final checkpoint. */
    signal(SIGINT, SIG_IGN);
    signal(SIGTERM, SIG_IGN);
}

static void ps__on_quiesced(ps_kv_server *s, void *arg)
{
    ps__server_app *app = arg;

    (void)s;
    ps__stop(app, app->quiesce_why);
}

/* The checkpoint on the way down is taken at a step boundary, so a run
 * resumed from it equals an uninterrupted one; a second signal does not
 * wait. */
static void ps__on_signal(uv_signal_t *h, int signum)
{
    ps__server_app *app = h->data;
    const char *name = signum == SIGINT ? "SIGINT" : "SIGTERM";

    ps_info("received %s, shutting down", name);
    if (app->quiescing) {
        ps__stop(app, name);
        return;
    }
    app->quiescing = 1;
    snprintf(app->quiesce_why, sizeof(app->quiesce_why), "%s", name);
    ps_kv_server_quiesce(app->srv, app->quiesce_ms, ps__on_quiesced, app);
}

static void ps__on_done(ps_kv_server *s, void *arg)
{
    ps__server_app *app = arg;

    (void)s;
    if (app->linger)
        return;
    ps_info("every worker has finished; exiting (use --linger to keep serving)");
    ps__stop(app, "final");
}

/* With the job's server list (usually from the cluster file), this server's
 * entry gives --num-servers and, unless --listen was given, the address to
 * listen on (copied into own), so one file describes every server. An index
 * with no entry, or a --num-servers given elsewhere that disagrees, is
 * refused, saying where each side came from. Returns 0 or -PS_EUSAGE. */
static int ps__apply_servers(ps_flags_ctx *ctx, const char *servers, int index, int *num_servers,
                             const char **listen, char *own, size_t own_len)
{
    char from[PATH_MAX + 64], other[PATH_MAX + 64], why[2 * PATH_MAX + 64], err[256];
    const char *colon;
    ps_server_list *sl;
    int n, rc;

    if (servers == NULL)
        return 0;
    ps_flags_describe_origin(ctx, "servers", from, sizeof(from));
    rc = ps_server_list_parse(&sl, servers, PS_MAX_SERVERS, 1, err, sizeof(err));
    if (rc < 0) {
        fprintf(stderr, "shardps-server: servers '%s' (from %s): %s\n", servers, from, err);
        return rc == -ENOMEM ? rc : -PS_EUSAGE;
    }
    n = ps_server_list_count(sl);
    if (index < n && strlen(ps_server_list_entries(sl)[index]) >= own_len) {
        fprintf(stderr, "shardps-server: servers '%s' (from %s): entry %d is too long\n", servers,
                from, index);
        ps_server_list_free(sl);
        return -PS_EUSAGE;
    }
    if (index < n)
        snprintf(own, own_len, "%s", ps_server_list_entries(sl)[index]);
    ps_server_list_free(sl);
    if (index >= n) {
        fprintf(stderr,
                "shardps-server: --server-index %d (from %s) has no entry in the servers list "
                "(from %s), which names %d server%s, indices 0..%d: %s\n",
                index, ps_flags_describe_origin(ctx, "server-index", other, sizeof(other)), from, n,
                n == 1 ? "" : "s", n - 1, servers);
        return -PS_EUSAGE;
    }
    if (ps_flags_origin(ctx, "num-servers") != PS_FLAG_FROM_DEFAULT && *num_servers != n) {
        fprintf(stderr,
                "shardps-server: --num-servers %d (from %s) disagrees with the %d servers listed "
                "in servers (from %s); drop one of them\n",
                *num_servers, ps_flags_describe_origin(ctx, "num-servers", other, sizeof(other)), n,
                from);
        return -PS_EUSAGE;
    }
    *num_servers = n;
    snprintf(why, sizeof(why), "the length of servers (%s)", from);
    ps_flags_set_derived(ctx, "num-servers", why);
    if (ps_flags_origin(ctx, "listen") == PS_FLAG_FROM_DEFAULT) {
        *listen = own;
        snprintf(why, sizeof(why), "servers[%d] (%s)", index, from);
        ps_flags_set_derived(ctx, "listen", why);
    } else if ((colon = strrchr(*listen, ':')) != NULL && strrchr(own, ':') != NULL &&
               strcmp(colon, strrchr(own, ':')) != 0 && strcmp(colon, ":0") != 0) {
        /* Legitimate behind port forwarding, so a warning, not an error. */
        ps_warn("--listen %s uses another port than this server's entry %s in the servers list; "
                "workers will connect to %s",
                *listen, own, own);
    }
    return 0;
}

/* Writes the bound port to the launcher's pipe, so it never has to poll. */
static int ps__report_port(int fd, int port)
{
    char line[16];
    int n = snprintf(line, sizeof(line), "%d\n", port);

    if (write(fd, line, (size_t)n) != n)
        return -errno;
    close(fd);
    return 0;
}

int main(int argc, char **argv)
{
    /* Static: the settings last as long as the process, and the table's
     * strings may point into the cluster file's values the context holds. */
    static ps_job_options jo;
    static ps_flags_ctx ctx;
    static ps_flag flags[96];
    static char settings[PS_JOB_SETTINGS_MAX];
    const char *listen = "127.0.0.1:7000", *cluster = NULL, *metrics_file = NULL;
    char err[256];
    int print_config = 0, server_index = 0, num_servers = 1, ready_fd = -1, linger = 0;
    int metrics_port = -1, parent_pid = 0;
    double metrics_interval = 1;
    const ps_flag own[] = {
        {"cluster", PS_FLAG_STRING, &cluster, "FILE",
         "cluster file (INI) shared by the job's servers and workers; see docs/deploy.md", 0, 0,
         NULL, NULL, NULL},
        {"listen", PS_FLAG_STRING, &listen, "HOST:PORT",
         "address to listen on (port 0: any free port)", 0, 0, NULL, NULL, NULL},
        {"server-index", PS_FLAG_INT, &server_index, "I", "this server's index in the server list",
         0, 4095, NULL, NULL, NULL},
        {"num-servers", PS_FLAG_INT, &num_servers, "S", "number of servers in the cluster", 1,
         PS_MAX_SERVERS, NULL, NULL, NULL},
        {"ready-fd", PS_FLAG_INT, &ready_fd, "FD",
         "write the bound port to this descriptor once listening", -1, 1 << 20, NULL, NULL, NULL},
        {"metrics-port", PS_FLAG_INT, &metrics_port, "PORT",
         "serve Prometheus metrics at http://HOST:PORT/metrics on the --listen host (0: any "
         "free port, logged)",
         0, 65535, NULL, "off=-1", NULL},
        {"metrics-file", PS_FLAG_STRING, &metrics_file, "FILE",
         "append a JSON line of this server's figures every --metrics-interval", 0, 0, NULL, NULL,
         NULL},
        {"metrics-interval", PS_FLAG_DOUBLE, &metrics_interval, "SECONDS",
         "seconds between --metrics-file lines", 0.01, 86400, NULL, NULL, NULL},
        {"parent-pid", PS_FLAG_INT, &parent_pid, "PID",
         "exit when process PID, its parent, does (set by shardps-cluster)", 0, 2147483647, NULL,
         NULL, NULL},
        {"linger", PS_FLAG_BOOL, &linger, NULL, "keep serving after every worker has finished", 0,
         0, NULL, NULL, NULL},
        {"print-config", PS_FLAG_BOOL, &print_config, NULL,
         "print the effective settings and where each came from, then exit", 0, 0, NULL, NULL,
         NULL},
    };
    int nflags, n_own = (int)(sizeof(own) / sizeof(own[0]));
    char own_listen[256];
    ps__server_app app;
    ps_kv_server_config cfg;
    ps_optimizer_kind kind;
    struct sockaddr_storage addr;
    int port, rc;
    char role[32], others[256];

    /* A peer that resets while we write must cost a connection, not the
     * process: take write errors as EPIPE instead of the signal. */
    signal(SIGPIPE, SIG_IGN);
    ps_job_options_defaults(&jo);
    nflags =
        ps_job_options_flags(&jo, PS_JOB_SERVER, flags, (int)(sizeof(flags) / sizeof(flags[0])));
    if (nflags < 0 || nflags + n_own > (int)(sizeof(flags) / sizeof(flags[0])))
        return 1;
    memcpy(flags + nflags, own, sizeof(own));
    nflags += n_own;
    ctx.flags = flags;
    ctx.n = nflags;
    ctx.prog = "shardps-server";
    ctx.summary = "Holds a shard of the model's weights and applies workers' gradients.";
    ctx.section = "server";
    ctx.per_process = "listen|server-index|ready-fd|parent-pid";
    if (ps_job_options_others(PS_JOB_SERVER, others, sizeof(others)) < 0)
        return 1;
    ctx.others = others;
    rc = ps_flags_load(&ctx, argc, argv);
    if (rc == 0)
        rc = ps__apply_servers(
            &ctx,
            /* The default list is a worker's; a server
             * without one keeps --listen, --num-servers. */
            ps_flags_origin(&ctx, "servers") == PS_FLAG_FROM_DEFAULT ? NULL : jo.servers,
            server_index, &num_servers, &listen, own_listen, sizeof(own_listen));
    if (rc != 0)
        return rc > 0 ? 0 : 2;
    if (parent_pid > 0 && ps_parent_watch(parent_pid) < 0) {
        fprintf(stderr, "%s: --parent-pid %d: the parent is gone or cannot be watched; exiting\n",
                ctx.prog, parent_pid);
        return 1;
    }
    if (print_config) {
        ps_flags_print_config(&ctx, stdout);
        return 0;
    }
    snprintf(role, sizeof(role), "server %d", server_index);
    ps_log_set_role(role);
    if (jo.verbose)
        ps_log_set_level(PS_LOG_DEBUG);
    if (server_index >= num_servers) {
        fprintf(stderr, "shardps-server: --server-index %d must be below --num-servers %d\n",
                server_index, num_servers);
        return 2;
    }
    /* A host name is resolved once, here; the log names the address bound. */
    rc = ps_parse_hostport(listen, &addr, 1, err, sizeof(err));
    if (rc < 0) {
        char from[PATH_MAX + 64];
        fprintf(stderr, "shardps-server: listen address (from %s): %s\n",
                ps_flags_describe_origin(&ctx, "listen", from, sizeof(from)), err);
        return 2;
    }
    memset(&cfg, 0, sizeof(cfg));
    if (ps_optimizer_parse(jo.optimizer, &kind) < 0) {
        fprintf(stderr, "shardps-server: unknown --optimizer '%s'; see shardps-server --help\n",
                jo.optimizer);
        return 2;
    }
    /* The tensors come from the first worker's HELLO (or the checkpoint
     * restored), so this server serves any model its workers declare. */
    cfg.max_model_bytes = (size_t)jo.max_model_bytes;
    ps_optimizer_defaults(&cfg.opt, kind);
    cfg.opt.lr = (float)jo.lr;
    cfg.opt.momentum = (float)jo.momentum;
    cfg.opt.weight_decay = (float)jo.weight_decay;
    cfg.server_index = server_index;
    cfg.num_servers = num_servers;
    cfg.chunk_bytes = (size_t)jo.chunk_bytes;
    cfg.world = jo.workers;
    cfg.mode = jo.mode;
    cfg.staleness = strcmp(jo.mode, "sync") == 0    ? 0
                    : strcmp(jo.mode, "async") == 0 ? PS_STALENESS_UNBOUNDED
                                                    : (uint32_t)jo.staleness;
    cfg.max_payload = (size_t)jo.max_payload;
    cfg.quorum = jo.sync_quorum;
    /* On 2 cores every core is already busy with a loop or a worker: handing
     * updates to another thread measured 10-20% slower (docs/performance.md). */
    if (jo.apply_threads < 0) {
        int cores = (int)uv_available_parallelism();
        jo.apply_threads = cores < 4 ? 0 : cores / 2 < 4 ? cores / 2 : 4;
    }
    if (jo.apply_threads > 0) {
        char n[16];
        /* libuv sizes its pool from this on first use, which is later. */
        snprintf(n, sizeof(n), "%d", jo.apply_threads);
        setenv("UV_THREADPOOL_SIZE", n, 1);
    }
    cfg.pool_updates = jo.apply_threads > 0;
    cfg.pool_min_bytes = (size_t)jo.apply_pool_min_bytes;
    if (jo.apply_threads > 0)
        ps_info("optimizer updates of chunks from %.0f bytes on %d threads",
                jo.apply_pool_min_bytes, jo.apply_threads);
    else
        ps_info("optimizer updates on the event loop (--apply-threads to change)");
    cfg.staleness_damping = jo.staleness_damping;
    cfg.heartbeat_timeout_ms = (uint32_t)(jo.heartbeat_timeout * 1000);
    cfg.rejoin_timeout_ms =
        jo.rejoin_timeout * 1000 > UINT32_MAX ? UINT32_MAX : (uint32_t)(jo.rejoin_timeout * 1000);
    ps_lr_schedule_parse(jo.lr_schedule, &cfg.lr.kind);
    cfg.lr.warmup_steps = (uint64_t)jo.warmup_steps;
    cfg.lr.total_steps = (uint64_t)jo.total_steps;
    cfg.lr.step_size = (uint64_t)jo.lr_step_size;
    cfg.lr.gamma = jo.lr_gamma;
    cfg.lr.min_lr = jo.min_lr;
    cfg.checkpoint_dir = jo.checkpoint_dir;
    cfg.checkpoint_every = (uint32_t)jo.checkpoint_every;
    cfg.checkpoint_seconds = jo.checkpoint_seconds;
    cfg.keep_checkpoints = jo.keep_checkpoints;
    cfg.reject_nonfinite = jo.reject_nonfinite;
    cfg.max_connections = jo.max_connections;
    cfg.handshake_timeout_ms = (uint32_t)(jo.handshake_timeout * 1000);
    cfg.max_grad_norm = jo.max_grad_norm;
    cfg.max_clock_lead = (uint64_t)jo.max_clock_lead;
    if (ps_job_settings_format(&jo, num_servers, settings, sizeof(settings)) < 0) {
        fprintf(stderr, "shardps-server: the job's settings do not fit in %zu bytes\n",
                sizeof(settings));
        return 2;
    }
    cfg.job_settings = settings;
    if (jo.restore && jo.checkpoint_dir == NULL) {
        fprintf(stderr, "shardps-server: --restore needs --checkpoint-dir DIR to restore from\n");
        return 2;
    }
    if (jo.sync_quorum > jo.workers) {
        fprintf(stderr, "shardps-server: --sync-quorum %d exceeds --workers %d\n", jo.sync_quorum,
                jo.workers);
        return 2;
    }

    memset(&app, 0, sizeof(app));
    app.linger = linger;
    /* A worker silent this long has left anyway. */
    app.quiesce_ms = cfg.heartbeat_timeout_ms > 0 ? cfg.heartbeat_timeout_ms : 10000;
    uv_loop_init(&app.loop);
    if (jo.auth_token_file) {
        char err[512];
        int loose = 0;
        if (ps_auth_load_key(jo.auth_token_file, cfg.auth_key, &loose, err, sizeof(err)) < 0) {
            fprintf(stderr, "shardps-server: %s\n", err);
            return 2;
        }
        cfg.auth = 1;
        if (loose)
            ps_warn("%s is readable by other users; chmod 600 it", jo.auth_token_file);
    }
    rc = ps_kv_server_init(&app.srv, &app.loop, &cfg, ps__on_done, &app);
    if (rc < 0) {
        ps_error("cannot set up the shard: %s", ps_strerror(rc));
        return 1;
    }
    if (jo.restore) {
        char err[4096];
        rc = ps_kv_server_restore(app.srv,
                                  jo.restore_clock < 0 ? UINT64_MAX : (uint64_t)jo.restore_clock,
                                  err, sizeof(err));
        /* auto: a first start, or a directory of other jobs only, starts
         * fresh; so does one whose every file of this job is unusable, said
         * loudly. */
        if (rc < 0 && jo.restore == PS_RESTORE_AUTO) {
            if (rc == -ENOENT)
                ps_info("--restore auto: no checkpoint of this job in %s; starting fresh at "
                        "clock 0",
                        jo.checkpoint_dir);
            else
                ps_warn("--restore auto: no usable checkpoint of this job in %s (%s); starting "
                        "fresh at clock 0",
                        jo.checkpoint_dir, err);
            rc = 0;
        } else if (rc < 0) {
            ps_error("cannot restore from %s: %s", jo.checkpoint_dir,
                     rc == -ENOENT ? "no checkpoint of this server and job there" : err);
            ps_kv_server_close(app.srv);
            uv_loop_close(&app.loop);
            return 1;
        }
    }
    rc = ps_kv_server_start(app.srv, (struct sockaddr *)&addr, &port);
    if (rc < 0) {
        ps_error("cannot listen on %s: %s", listen, uv_strerror(rc));
        ps_kv_server_stop(app.srv);
        uv_run(&app.loop, UV_RUN_DEFAULT);
        ps_kv_server_close(app.srv);
        return 1;
    }
    {
        char bound[80];
        ((struct sockaddr_in *)&addr)->sin_port = htons((uint16_t)port);
        if (addr.ss_family == AF_INET6)
            ((struct sockaddr_in6 *)&addr)->sin6_port = htons((uint16_t)port);
        ps_format_addr((struct sockaddr *)&addr, bound, sizeof(bound));
        if (strncmp(bound, listen, (size_t)(strrchr(bound, ':') - bound) + 1) == 0)
            ps_info("listening on %s for %d worker%s", bound, jo.workers,
                    jo.workers == 1 ? "" : "s");
        else
            ps_info("listening on %s (%s, resolved once at start-up) for %d worker%s", bound,
                    listen, jo.workers, jo.workers == 1 ? "" : "s");
        if (!cfg.auth && strncmp(bound, "127.", 4) != 0 && strncmp(bound, "[::1]", 5) != 0)
            ps_warn("listening beyond loopback without authentication: anyone who can reach "
                    "%s can read and change the model; use --auth-token-file",
                    bound);
    }
    /* Before the port is reported, so whoever reads it can scrape at once. */
    if (metrics_port >= 0 || metrics_file != NULL) {
        ps_metrics_config mc = {(struct sockaddr *)&addr, metrics_port, metrics_file,
                                metrics_interval};
        int mport;
        rc = ps_metrics_start(&app.metrics, &app.loop, app.srv, &mc, &mport);
        if (rc < 0) {
            ps_kv_server_stop(app.srv);
            uv_run(&app.loop, UV_RUN_DEFAULT);
            ps_kv_server_close(app.srv);
            return 1;
        }
        if (mport >= 0) {
            char where[80];
            ((struct sockaddr_in *)&addr)->sin_port = htons((uint16_t)mport);
            if (addr.ss_family == AF_INET6)
                ((struct sockaddr_in6 *)&addr)->sin6_port = htons((uint16_t)mport);
            ps_format_addr((struct sockaddr *)&addr, where, sizeof(where));
            ps_info("metrics on http://%s/metrics", where);
        }
    }
    if (ready_fd >= 0 && (rc = ps__report_port(ready_fd, port)) < 0)
        ps_warn("could not report the port on descriptor %d: %s", ready_fd, strerror(-rc));

    uv_signal_init(&app.loop, &app.sigint);
    uv_signal_init(&app.loop, &app.sigterm);
    app.sigint.data = app.sigterm.data = &app;
    uv_signal_start(&app.sigint, ps__on_signal, SIGINT);
    uv_signal_start(&app.sigterm, ps__on_signal, SIGTERM);

    uv_run(&app.loop, UV_RUN_DEFAULT);
    ps_kv_server_log_summary(app.srv);
    ps_kv_server_close(app.srv);
    uv_loop_close(&app.loop);
    return 0;
}
