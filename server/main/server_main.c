/* shardps-server: one parameter-server daemon. main() parses its options,
 * has the job checked (job_check.h; --check stops there), builds the
 * key-value server's configuration from it (server_config.h), and serves:
 * listens and runs the event loop until every worker has finished (or
 * SIGINT/SIGTERM). The tensors it holds are declared by the first worker. */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <uv.h>

#include "flags.h"
#include "flags_help.h"
#include "job_check.h"
#include "job_options.h"
#include "kv_server.h"
#include "metrics_http.h"
#include "parent_watch.h"
#include "ps_error.h"
#include "ps_log.h"
#include "server_config.h"
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
static void ps__server_main_stop(ps__server_app *app, const char *why)
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
    ps__server_main_stop(app, app->quiesce_why);
}

/* The checkpoint on the way down is taken at a step boundary, so a run
 * resumed from it equals an uninterrupted one; a second signal does not
 * wait. */
static void ps__server_main_on_signal(uv_signal_t *h, int signum)
{
    ps__server_app *app = h->data;
    const char *name = signum == SIGINT ? "SIGINT" : "SIGTERM";

    ps_info("received %s, shutting down", name);
    if (app->quiescing) {
        ps__server_main_stop(app, name);
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
    ps__server_main_stop(app, "final");
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

/* --restore: resume from this job's newest usable checkpoint; auto starts
 * fresh without one (a first start, or a directory of other jobs only), and
 * also, said loudly, when every file of this job is unusable. A re-placing
 * set this server cannot take its share of is refused even with auto: the
 * other servers restore it, and a fresh start here would put the job at
 * two clocks. Returns 0 or -1 after the error line. */
static int ps__restore(ps__server_app *app, const ps_job_options *jo)
{
    char err[4096];
    int rc = ps_kv_server_restore(app->srv,
                                  jo->restore_clock < 0 ? UINT64_MAX : (uint64_t)jo->restore_clock,
                                  err, sizeof(err));

    if (rc == 0)
        return 0;
    if (rc == -ENOTRECOVERABLE) {
        ps_error("cannot restore from %s: %s", jo->checkpoint_dir, err);
        return -1;
    }
    if (jo->restore == PS_RESTORE_AUTO && rc == -ENOENT)
        ps_info("--restore auto: no checkpoint of this job in %s; starting fresh at clock 0",
                jo->checkpoint_dir);
    else if (jo->restore == PS_RESTORE_AUTO)
        ps_warn("--restore auto: no usable checkpoint of this job in %s (%s); starting fresh at "
                "clock 0",
                jo->checkpoint_dir, err);
    else
        ps_error("cannot restore from %s: %s", jo->checkpoint_dir,
                 rc == -ENOENT ? "no checkpoint of this server and job there" : err);
    return jo->restore == PS_RESTORE_AUTO ? 0 : -1;
}

/* addr with port instead of its own, as "host:port" into buf. */
static const char *ps__addr_port(struct sockaddr_storage *addr, int port, char *buf, size_t len)
{
    ((struct sockaddr_in *)addr)->sin_port = htons((uint16_t)port);
    if (addr->ss_family == AF_INET6)
        ((struct sockaddr_in6 *)addr)->sin6_port = htons((uint16_t)port);
    ps_format_addr((struct sockaddr *)addr, buf, len);
    return buf;
}

static void ps__log_listening(const ps_job_plan *plan, int workers, int auth, const char *bound)
{
    const char *listen = plan->listen;

    if (strncmp(bound, listen, (size_t)(strrchr(bound, ':') - bound) + 1) == 0)
        ps_info("listening on %s for %d worker%s", bound, workers, workers == 1 ? "" : "s");
    else
        ps_info("listening on %s (%s, resolved once at start-up) for %d worker%s", bound, listen,
                workers, workers == 1 ? "" : "s");
    if (!auth && strncmp(bound, "127.", 4) != 0 && strncmp(bound, "[::1]", 5) != 0)
        ps_warn("listening beyond loopback without authentication: anyone who can reach %s can "
                "read and change the model; use --auth-token-file",
                bound);
}

/* The server's own options: how this process serves, not what the job is. */
typedef struct {
    int server_index, num_servers, ready_fd, linger, metrics_port;
    const char *listen, *metrics_file;
    double metrics_interval;
} ps__server_own;

/* Sets up the key-value server (restored if asked), listens, serves metrics,
 * reports the port, and runs the loop until the job is over. Returns the
 * exit status. */
static int ps__serve(ps__server_app *app, const ps_kv_server_config *cfg, const ps_job_options *jo,
                     const ps_job_plan *plan, const ps__server_own *own)
{
    struct sockaddr_storage addr = plan->listen_addr;
    char where[80];
    int port, mport, rc;

    app->linger = own->linger;
    /* A worker silent this long has left anyway. */
    app->quiesce_ms = cfg->heartbeat_timeout_ms > 0 ? cfg->heartbeat_timeout_ms : 10000;
    uv_loop_init(&app->loop);
    rc = ps_kv_server_init(&app->srv, &app->loop, cfg, ps__on_done, app);
    if (rc < 0) {
        ps_error("cannot set up the shard: %s", ps_strerror(rc));
        return 1;
    }
    if (jo->restore && ps__restore(app, jo) < 0) {
        ps_kv_server_close(app->srv);
        uv_loop_close(&app->loop);
        return 1;
    }
    rc = ps_kv_server_start(app->srv, (struct sockaddr *)&addr, &port);
    if (rc < 0)
        ps_error("cannot listen on %s: %s", plan->listen, uv_strerror(rc));
    if (rc == 0)
        ps__log_listening(plan, jo->workers, cfg->auth, ps__addr_port(&addr, port, where, 80));
    /* Before the port is reported, so whoever reads it can scrape at once. */
    if (rc == 0 && (own->metrics_port >= 0 || own->metrics_file != NULL)) {
        ps_metrics_config mc = {(struct sockaddr *)&addr, own->metrics_port, own->metrics_file,
                                own->metrics_interval};
        rc = ps_metrics_start(&app->metrics, &app->loop, app->srv, &mc, &mport);
        if (rc == 0 && mport >= 0)
            ps_info("metrics on http://%s/metrics", ps__addr_port(&addr, mport, where, 80));
    }
    if (rc < 0) {
        ps_kv_server_stop(app->srv);
        uv_run(&app->loop, UV_RUN_DEFAULT);
        ps_kv_server_close(app->srv);
        return 1;
    }
    if (own->ready_fd >= 0 && (rc = ps__report_port(own->ready_fd, port)) < 0)
        ps_warn("could not report the port on descriptor %d: %s", own->ready_fd, strerror(-rc));
    uv_signal_init(&app->loop, &app->sigint);
    uv_signal_init(&app->loop, &app->sigterm);
    app->sigint.data = app->sigterm.data = app;
    uv_signal_start(&app->sigint, ps__server_main_on_signal, SIGINT);
    uv_signal_start(&app->sigterm, ps__server_main_on_signal, SIGTERM);
    uv_run(&app->loop, UV_RUN_DEFAULT);
    ps_kv_server_log_summary(app->srv);
    ps_kv_server_close(app->srv);
    uv_loop_close(&app->loop);
    return 0;
}

int main(int argc, char **argv)
{
    /* Static: the settings last as long as the process, and the table's
     * strings may point into the cluster file's values the context holds. */
    static ps_job_options jo;
    static ps_flags_ctx ctx;
    static ps_flag flags[96];
    static ps_job_plan plan;
    static ps_kv_server_config cfg;
    static ps__server_app app;
    const char *cluster = NULL;
    ps__server_own o = {.listen = "127.0.0.1:7000",
                        .num_servers = 1,
                        .ready_fd = -1,
                        .metrics_port = -1,
                        .metrics_interval = 1};
    int print_config = 0, check = 0, parent_pid = 0;
    const ps_flag own[] = {
        {"cluster", PS_FLAG_STRING, &cluster, "FILE",
         "cluster file (INI) shared by the job's servers and workers; see docs/deploy.md", 0, 0,
         NULL, NULL, NULL},
        {"listen", PS_FLAG_STRING, &o.listen, "HOST:PORT",
         "address to listen on (port 0: any free port)", 0, 0, NULL, NULL, NULL},
        {"server-index", PS_FLAG_INT, &o.server_index, "I",
         "this server's index in the server list", 0, 4095, NULL, NULL, NULL},
        {"num-servers", PS_FLAG_INT, &o.num_servers, "S", "number of servers in the cluster", 1,
         PS_MAX_SERVERS, NULL, NULL, NULL},
        {"ready-fd", PS_FLAG_INT, &o.ready_fd, "FD",
         "write the bound port to this descriptor once listening", -1, 1 << 20, NULL, NULL, NULL},
        {"metrics-port", PS_FLAG_INT, &o.metrics_port, "PORT",
         "serve Prometheus metrics at http://HOST:PORT/metrics on the --listen host (0: any "
         "free port, logged)",
         0, 65535, NULL, "off=-1", NULL},
        {"metrics-file", PS_FLAG_STRING, &o.metrics_file, "FILE",
         "append a JSON line of this server's figures every --metrics-interval", 0, 0, NULL, NULL,
         NULL},
        {"metrics-interval", PS_FLAG_DOUBLE, &o.metrics_interval, "SECONDS",
         "seconds between --metrics-file lines", 0.01, 86400, NULL, NULL, NULL},
        {"parent-pid", PS_FLAG_INT, &parent_pid, "PID",
         "exit when process PID, its parent, does (set by shardps-cluster)", 0, 2147483647, NULL,
         NULL, NULL},
        {"linger", PS_FLAG_BOOL, &o.linger, NULL, "keep serving after every worker has finished", 0,
         0, NULL, NULL, NULL},
        {"print-config", PS_FLAG_BOOL, &print_config, NULL,
         "print the effective settings and where each came from, then exit", 0, 0, NULL, NULL,
         NULL},
        {"check", PS_FLAG_BOOL, &check, NULL,
         "check every option and the files they name as a run would, start nothing, exit 0 if "
         "the server would start (2 and the reason if not)",
         0, 0, NULL, NULL, NULL},
    };
    int nflags, n_own = (int)(sizeof(own) / sizeof(own[0])), rc;
    char role[32], others[256], err[1024];
    ps_job_process proc;

    /* A peer that resets while we write must cost a connection, not the
     * process: take write errors as EPIPE instead of the signal. */
    signal(SIGPIPE, SIG_IGN);
    ps_job_options_defaults(&jo);
    nflags =
        ps_job_options_flags(&jo, PS_JOB_SERVER, flags, (int)(sizeof(flags) / sizeof(flags[0])));
    if (nflags < 0 || nflags + n_own > (int)(sizeof(flags) / sizeof(flags[0])) ||
        ps_job_options_others(PS_JOB_SERVER, others, sizeof(others)) < 0)
        return 1;
    memcpy(flags + nflags, own, sizeof(own));
    ctx = (ps_flags_ctx){.flags = flags,
                         .n = nflags + n_own,
                         .prog = "shardps-server",
                         .summary = "Holds a shard of the model's weights and applies workers' "
                                    "gradients.",
                         .section = "server",
                         .per_process = "listen|server-index|ready-fd|parent-pid",
                         .others = others};
    rc = ps_flags_load(&ctx, argc, argv);
    if (rc != 0)
        return rc > 0 ? 0 : 2;
    if (parent_pid > 0 && ps_parent_watch(parent_pid) < 0) {
        fprintf(stderr, "%s: --parent-pid %d: the parent is gone or cannot be watched; exiting\n",
                ctx.prog, parent_pid);
        return 1;
    }
    snprintf(role, sizeof(role), "server %d", o.server_index);
    ps_log_set_role(role);
    if (jo.verbose)
        ps_log_set_level(PS_LOG_DEBUG);
    /* --print-config shows where this server stands in the server list
     * (--num-servers and --listen come from it), whether or not it would
     * start; everything else is the check's. */
    proc = (ps_job_process){.program = PS_JOB_SERVER,
                            .flags = &ctx,
                            .server_index = o.server_index,
                            .num_servers = o.num_servers,
                            .listen = o.listen};
    rc = print_config ? ps_job_server_place(&jo, &proc, &plan, err, sizeof(err))
                      : ps_job_check(&jo, &proc, &plan, err, sizeof(err));
    if (rc == 0 && print_config) {
        o.num_servers = plan.num_servers;
        o.listen = plan.listen;
        ps_flags_print_config(&ctx, stdout);
    } else if (rc == 0 && check) {
        printf("shardps-server: the options are valid: server %d of %d, listening on %s\n",
               o.server_index, plan.num_servers, plan.listen);
    } else if (rc == 0) {
        rc = ps_server_config_build(&cfg, &jo, &plan, o.server_index, err, sizeof(err));
    }
    if (rc < 0) {
        fprintf(stderr, "shardps-server: %s\n", err);
        return 2;
    }
    return print_config || check ? 0 : ps__serve(&app, &cfg, &jo, &plan, &o);
}
