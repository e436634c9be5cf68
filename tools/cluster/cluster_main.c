/* shardps-cluster: a whole parameter-server job on this machine.
 *
 * Starts S servers on 127.0.0.1 with ports chosen by the OS (each reports its
 * port on a pipe, so nothing polls), then W workers pointed at them; turns the
 * workers' reports (report.h) into one progress line per interval and a
 * summary, carries out the fault drills (drills.h), and stops everything on
 * exit, on Ctrl-C, or as soon as any process fails. The children's stdout
 * and stderr come through pipes and go out, with the launcher's own log and
 * progress, through one writer (console.h), so nothing breaks the progress
 * line. The children die with the launcher (--parent-pid, parent_watch.h). */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <uv.h>

#include "child_env.h"
#include "clock.h"
#include "console.h"
#include "drills.h"
#include "flags.h"
#include "flags_help.h"
#include "job_options.h"
#include "model_spec.h"
#include "ps_log.h"
#include "report.h"

#define PS__MAX_PROCS 256

typedef enum { PS__SERVER, PS__WORKER } ps__role;

typedef struct ps__cluster ps__cluster;
typedef struct ps__child ps__child;

/* What comes out of a child, line by line: its stdout, its stderr, and the
 * pipe at fd 3 (a server's port, a worker's reports). */
enum { PS__OUT, PS__ERR, PS__REPORTS, PS__N_STREAMS };

typedef struct {
    ps__child *child;
    int kind; /* PS__OUT, PS__ERR, PS__REPORTS */
    uv_pipe_t pipe;
    char buf[4096];
    size_t len;
} ps__stream;

struct ps__child {
    ps__cluster *cl;
    ps__role role;
    int index;
    uv_process_t proc;
    ps__stream streams[PS__N_STREAMS];
    int running;
    int killed_on_purpose;
    /* Latest figures reported by a worker. */
    double samples_per_second;
    uint64_t step;
    int done;
    double samples, seconds;
    double bytes_pushed;                  /* gradient payload bytes, from its "done" report */
    double staleness_mean, staleness_max; /* of its pushes, from its last report */
    uint64_t dropped, rejected;           /* chunks not applied, from its last report */
};

struct ps__cluster {
    uv_loop_t loop;
    uv_signal_t sigint, sigterm;
    uv_timer_t grace;
    ps__child children[PS__MAX_PROCS];
    int n_children;
    int n_servers;
    int ports_known, workers_exited;
    int ports[PS__MAX_PROCS];
    int failed, interrupted, stopping;
    ps_drills *drills; /* --kill-worker, --pause-worker, --kill-server, --slow-worker */
    ps__child *server_slot[PS__MAX_PROCS]; /* current process of each server index */
    char **child_env;                      /* ps_child_env: no SHARDPS_* variables */
    double t_start;
    double last_accuracy;
    /* Observability: --metrics-dir (per-process JSON lines), --metrics-port
     * (servers' /metrics), --eval-every; con: everything shown (owned). */
    const char *metrics_dir;
    int metrics_port;
    ps_console *con;
    int steps_per_epoch;
    double t_train; /* when worker 0 started training */
    uint64_t total_steps;
    /* The job options, each handed to every child that takes it. */
    ps_job_options job;
    const char *bin_dir, *dump_weights;
    int json, threads;
};

static const char *ps__child_name(const ps__child *c, char *buf, size_t len)
{
    snprintf(buf, len, "%s %d", c->role == PS__SERVER ? "server" : "worker", c->index);
    return buf;
}

static void ps__shutdown(ps__cluster *cl)
{
    if (cl->stopping)
        return;
    cl->stopping = 1;
    for (int i = 0; i < cl->n_children; i++)
        if (cl->children[i].running)
            uv_process_kill(&cl->children[i].proc, SIGTERM);
    uv_close((uv_handle_t *)&cl->sigint, NULL);
    uv_close((uv_handle_t *)&cl->sigterm, NULL);
    ps_console_close(cl->con);
    if (!uv_is_closing((uv_handle_t *)&cl->grace))
        uv_close((uv_handle_t *)&cl->grace, NULL);
}

static void ps__fail(ps__cluster *cl, const char *why)
{
    if (!cl->failed && !cl->interrupted)
        ps_error("%s; stopping the cluster", why);
    cl->failed = 1;
    ps__shutdown(cl);
}

/* The time left as "ETA 1:05" or "ETA 2:03:04"; "ETA --" before the first
 * step says how fast the job goes. */
static void ps__format_eta(const ps__cluster *cl, uint64_t step, char *buf, size_t len)
{
    double t = ps_clock_now() - cl->t_train;
    long eta;

    if (step == 0 || cl->total_steps <= step) {
        snprintf(buf, len, "ETA %s", step == 0 ? "--" : "0:00");
        return;
    }
    eta = (long)(t / (double)step * (double)(cl->total_steps - step));
    if (eta >= 3600)
        snprintf(buf, len, "ETA %ld:%02ld:%02ld", eta / 3600, eta / 60 % 60, eta % 60);
    else
        snprintf(buf, len, "ETA %ld:%02ld", eta / 60, eta % 60);
}

/* On a terminal: one line redrawn in place, the time left first, then the
 * epoch, step, loss, a bar through the epoch, throughput and staleness, as
 * many as fit; elsewhere (logs, tests that grep) one plain line per report. */
static void ps__print_progress(ps__cluster *cl, const ps_report_progress *p)
{
    char eta[32], epoch[32], bar[24], step[48], loss[32], sps_text[40], stale[32], plain[160];
    const char *fields[] = {eta, epoch, step, loss, bar, sps_text, stale};
    int spe = cl->steps_per_epoch > 0 ? cl->steps_per_epoch : 1;
    int fill = (int)(20 * (double)(p->step - (uint64_t)(p->epoch - 1) * (uint64_t)spe) / spe);
    double sps = 0;

    for (int r = 0; r < cl->job.workers; r++)
        sps += cl->children[cl->n_servers + r].samples_per_second;
    ps__format_eta(cl, p->step, eta, sizeof(eta));
    snprintf(epoch, sizeof(epoch), "epoch %d/%d", p->epoch, cl->job.epochs);
    bar[0] = '[';
    for (int i = 0; i < 20; i++)
        bar[1 + i] = i < fill ? '#' : '.';
    snprintf(bar + 21, sizeof(bar) - 21, "]");
    snprintf(step, sizeof(step), "step %" PRIu64 "/%" PRIu64, p->step, cl->total_steps);
    snprintf(loss, sizeof(loss), "loss %.4f", p->loss);
    snprintf(sps_text, sizeof(sps_text), "%.0f samples/s", sps);
    snprintf(stale, sizeof(stale), "staleness %.2f", p->staleness_mean);
    snprintf(plain, sizeof(plain),
             "epoch %d/%d  step %" PRIu64 "/%" PRIu64 "  loss %.4f  %.0f samples/s  %s", p->epoch,
             cl->job.epochs, p->step, cl->total_steps, p->loss, sps, eta);
    ps_console_progress(cl->con, fields, (int)(sizeof(fields) / sizeof(fields[0])), plain);
}

static int ps__running(void *arg, int is_server, int index)
{
    ps__cluster *cl = arg;
    ps__child *c = is_server ? cl->server_slot[index] : &cl->children[cl->n_servers + index];

    return c != NULL && c->running;
}

/* Worker rank has reached step: the drills due now are carried out here,
 * where the processes are. A killed server is restarted by ps__on_exit. */
static void ps__run_drills(ps__cluster *cl, int rank, uint64_t step)
{
    ps_drill_action act[PS_DRILLS_MAX_ACTIONS];
    int n = ps_drills_on_step(cl->drills, rank, step, ps__running, cl, act);

    for (int i = 0; i < n; i++) {
        ps__child *c = act[i].kind == PS_DRILL_KILL_SERVER
                           ? cl->server_slot[act[i].target]
                           : &cl->children[cl->n_servers + act[i].target];
        int sig = act[i].kind == PS_DRILL_STOP_WORKER   ? SIGSTOP
                  : act[i].kind == PS_DRILL_CONT_WORKER ? SIGCONT
                                                        : SIGKILL;
        if (sig == SIGKILL)
            c->killed_on_purpose = 1;
        uv_process_kill(&c->proc, sig);
    }
}

/* How much of its epoch step has done, in whole percent. */
static int ps__epoch_percent(const ps__cluster *cl, uint64_t step)
{
    uint64_t spe = cl->steps_per_epoch > 0 ? (uint64_t)cl->steps_per_epoch : 1;

    return (int)(step % spe * 100 / spe);
}

/* A worker's report (report.h). A line that does not parse, or that names
 * another rank, is logged and dropped: the launcher acts only on reports it
 * can read as written. */
static void ps__worker_line(ps__cluster *cl, ps__child *c, const char *line)
{
    ps_report r;
    char err[160];

    if (ps_report_parse(line, &r, err, sizeof(err)) < 0 || r.rank != c->index) {
        ps_warn("worker %d sent a report the launcher cannot read (%s): %.200s", c->index,
                err[0] ? err : "wrong rank", line);
        return;
    }
    switch (r.kind) {
    case PS_REPORT_START:
        if (c->index == 0) {
            cl->total_steps = r.u.start.steps;
            cl->steps_per_epoch = r.u.start.steps_per_epoch;
            cl->t_train = ps_clock_now();
        }
        break;
    case PS_REPORT_PROGRESS:
        c->step = r.u.progress.step;
        c->samples_per_second = r.u.progress.samples_per_second;
        c->staleness_mean = r.u.progress.staleness_mean;
        c->staleness_max = (double)r.u.progress.staleness_max;
        c->dropped = r.u.progress.dropped;
        c->rejected = r.u.progress.rejected;
        if (c->index == 0)
            ps__print_progress(cl, &r.u.progress);
        ps__run_drills(cl, c->index, c->step);
        break;
    case PS_REPORT_STEP: /* a step a drill named: --report-steps */
        ps__run_drills(cl, c->index, r.u.step.step);
        break;
    case PS_REPORT_EVAL:
        cl->last_accuracy = r.u.eval.test_accuracy;
        if (r.u.eval.epoch_end)
            ps_console_printf(cl->con, "epoch %d done: test accuracy %.4f", r.u.eval.epoch,
                              cl->last_accuracy);
        else
            /* --steps stopped the run inside an epoch: say how far it got. */
            ps_console_printf(cl->con, "step %" PRIu64 " (epoch %d, %d%%): test accuracy %.4f",
                              r.u.eval.step, r.u.eval.epoch, ps__epoch_percent(cl, r.u.eval.step),
                              cl->last_accuracy);
        break;
    case PS_REPORT_DONE:
        c->done = 1;
        c->samples = r.u.done.samples;
        c->seconds = r.u.done.seconds;
        c->bytes_pushed = (double)r.u.done.bytes_pushed;
        c->dropped = r.u.done.dropped;
        c->rejected = r.u.done.rejected;
        break;
    }
}

static void ps__start_workers(ps__cluster *cl);

static void ps__server_line(ps__cluster *cl, ps__child *c, const char *line)
{
    char *end;
    long port = strtol(line, &end, 10);

    if (end == line || port < 1 || port > 65535 ||
        (cl->ports[c->index] != 0 && cl->ports[c->index] != port)) {
        ps__fail(cl, "a server reported a malformed or changed port");
        return;
    }
    if (cl->ports[c->index] != 0) {
        ps_info("server %d is back on port %ld", c->index, port);
        return;
    }
    cl->ports[c->index] = (int)port;
    if (++cl->ports_known == cl->n_servers)
        ps__start_workers(cl);
}

static void ps__on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    ps__stream *st = h->data;

    (void)suggested;
    *buf = uv_buf_init(st->buf + st->len, (unsigned int)(sizeof(st->buf) - 1 - st->len));
}

/* One whole line of a child's: its reports are acted on, its output shown. */
static void ps__stream_line(ps__stream *st, char *line, size_t len)
{
    ps__child *c = st->child;

    if (st->kind != PS__REPORTS)
        ps_console_line(c->cl->con, st->kind == PS__OUT, line, len);
    else if (c->role == PS__SERVER)
        ps__server_line(c->cl, c, line);
    else
        ps__worker_line(c->cl, c, line);
}

static void ps__on_pipe_read(uv_stream_t *s, ssize_t nread, const uv_buf_t *buf)
{
    ps__stream *st = s->data;
    char *nl;

    (void)buf;
    if (nread < 0) {
        /* A last line without its newline is still shown. */
        if (st->len > 0 && st->kind != PS__REPORTS)
            ps__stream_line(st, st->buf, st->len);
        uv_close((uv_handle_t *)s, NULL);
        return;
    }
    st->len += (size_t)nread;
    st->buf[st->len] = '\0';
    while ((nl = strchr(st->buf, '\n')) != NULL) {
        *nl = '\0';
        ps__stream_line(st, st->buf, (size_t)(nl - st->buf));
        st->len -= (size_t)(nl + 1 - st->buf);
        memmove(st->buf, nl + 1, st->len + 1);
    }
    if (st->len == sizeof(st->buf) - 1) {
        /* An overlong line: shown in pieces, or, as a report, dropped
         * rather than stall. */
        if (st->kind != PS__REPORTS)
            ps__stream_line(st, st->buf, st->len);
        st->len = 0;
    }
}

static void ps__on_grace(uv_timer_t *t)
{
    ps__cluster *cl = t->data;
    ps__fail(cl, "servers did not exit within 30 s of being asked to stop");
}

/* The job is over once every worker is gone: servers still waiting for a
 * worker that was lost (and may never rejoin) are asked to stop, which makes
 * them write their final checkpoint and exit 0. */
static void ps__stop_servers(ps__cluster *cl)
{
    int asked = 0;

    for (int i = 0; i < cl->n_children; i++) {
        ps__child *c = &cl->children[i];
        if (c->role == PS__SERVER && c->running) {
            uv_process_kill(&c->proc, SIGTERM);
            asked++;
        }
    }
    if (asked)
        ps_info("every worker is done; asking %d server%s to stop", asked, asked == 1 ? "" : "s");
    uv_timer_start(&cl->grace, ps__on_grace, 30000, 0);
}

/* A worker has finished once it reported "done" or is gone; servers exit on
 * their own when every worker has said goodbye, possibly before the worker
 * processes themselves have exited. */
static int ps__workers_finished(const ps__cluster *cl)
{
    for (int r = 0; r < cl->job.workers; r++) {
        const ps__child *w = &cl->children[cl->n_servers + r];
        if (cl->n_children <= cl->n_servers + r || (w->running && !w->done))
            return 0;
    }
    return 1;
}

static void ps__spawn_server(ps__cluster *cl, int i, int restore);

static void ps__on_exit(uv_process_t *p, int64_t status, int term_signal)
{
    ps__child *c = p->data;
    ps__cluster *cl = c->cl;
    char name[32], why[160];

    c->running = 0;
    uv_close((uv_handle_t *)p, NULL);
    ps__child_name(c, name, sizeof(name));
    if (c->killed_on_purpose && term_signal == SIGKILL && c->role == PS__SERVER) {
        ps_info("%s is gone (killed on purpose); starting it again with --restore", name);
        if (!cl->stopping)
            ps__spawn_server(cl, c->index, 1);
    } else if (c->killed_on_purpose && term_signal == SIGKILL) {
        ps_info("%s is gone (killed on purpose); the others carry on", name);
    } else if (status != 0 || term_signal != 0) {
        if (term_signal)
            snprintf(why, sizeof(why), "%s was killed by signal %d (%s)", name, term_signal,
                     strsignal(term_signal));
        else
            snprintf(why, sizeof(why), "%s exited with status %" PRId64 " (see its log above)",
                     name, status);
        /* Interrupted: the workers stop as asked, with a signal's status. */
        if (!cl->stopping && !(cl->interrupted && c->role == PS__WORKER))
            ps__fail(cl, why);
    } else if (c->role == PS__SERVER && !cl->stopping && !ps__workers_finished(cl)) {
        snprintf(why, sizeof(why), "%s exited before the workers finished", name);
        ps__fail(cl, why);
    }
    if (c->role == PS__WORKER && ++cl->workers_exited == cl->job.workers && !cl->stopping)
        cl->interrupted ? ps__shutdown(cl) : ps__stop_servers(cl);
    for (int i = 0; i < cl->n_children; i++)
        if (cl->children[i].running)
            return;
    /* Everyone is gone: release the signal and timer handles so the loop ends. */
    ps__shutdown(cl);
}

extern char **environ;

/* A child's argv: every job option it takes (ps_job_options_argv, texts in
 * job_text), then its own flags (values in vals). Room for the whole table
 * and the launcher's own flags; a flag past it marks the argv as too long
 * rather than writing out of bounds, and ps__spawn refuses it. */
#define PS__CHILD_OPTS 24
#define PS__CHILD_ARGV 160
typedef struct {
    char *argv[PS__CHILD_ARGV + 2]; /* argv[0] is the program, set by ps__spawn */
    char job_text[16384];
    char vals[PS__CHILD_OPTS][4096];
    int n, v, too_long;
} ps__child_args;

static int ps__spawn(ps__cluster *cl, ps__role role, int index, ps__child_args *a)
{
    ps__child *c = &cl->children[cl->n_children];
    uv_process_options_t opt;
    uv_stdio_container_t stdio[4];
    char path[PATH_MAX], name[32];
    int rc;

    memset(c, 0, sizeof(*c));
    c->cl = cl;
    c->role = role;
    c->index = index;
    snprintf(path, sizeof(path), "%s/%s", cl->bin_dir,
             role == PS__SERVER ? "shardps-server" : "shardps-worker");
    if (a->too_long) {
        ps_error("internal: more options for %s than ps__child_args holds (PS__CHILD_OPTS)",
                 role == PS__SERVER ? "a server" : "a worker");
        return -E2BIG;
    }
    a->argv[0] = path;
    a->argv[a->n + 1] = NULL;
    c->proc.data = c;
    stdio[0].flags = UV_IGNORE;
    for (int k = 0; k < PS__N_STREAMS; k++) {
        ps__stream *st = &c->streams[k];
        st->child = c;
        st->kind = k;
        uv_pipe_init(&cl->loop, &st->pipe, 0);
        st->pipe.data = st;
        stdio[1 + k].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
        stdio[1 + k].data.stream = (uv_stream_t *)&st->pipe;
    }
    memset(&opt, 0, sizeof(opt));
    opt.file = path;
    opt.args = a->argv;
    opt.exit_cb = ps__on_exit;
    opt.stdio = stdio;
    opt.stdio_count = 4;
    opt.env = cl->child_env;
    rc = uv_spawn(&cl->loop, &c->proc, &opt);
    if (rc < 0) {
        ps_error("cannot start %s (%s): %s", ps__child_name(c, name, sizeof(name)), path,
                 uv_strerror(rc));
        for (int k = 0; k < PS__N_STREAMS; k++)
            uv_close((uv_handle_t *)&c->streams[k].pipe, NULL);
        return rc;
    }
    cl->n_children++;
    c->running = 1;
    for (int k = 0; k < PS__N_STREAMS; k++)
        uv_read_start((uv_stream_t *)&c->streams[k].pipe, ps__on_alloc, ps__on_pipe_read);
    return 0;
}

/* A switch: "--name". */
static void ps__flag(ps__child_args *a, const char *name)
{
    if (a->n + 1 >= PS__CHILD_ARGV) {
        a->too_long = 1;
        return;
    }
    a->argv[++a->n] = (char *)name;
}

/* An option: "--name value", the value formatted from fmt. */
static void ps__opt(ps__child_args *a, const char *name, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void ps__opt(ps__child_args *a, const char *name, const char *fmt, ...)
{
    va_list ap;

    if (a->v == PS__CHILD_OPTS) {
        a->too_long = 1;
        return;
    }
    ps__flag(a, name);
    va_start(ap, fmt);
    vsnprintf(a->vals[a->v], sizeof(a->vals[a->v]), fmt, ap);
    va_end(ap);
    ps__flag(a, a->vals[a->v++]);
}

/* Starts a to-program's argv with every job option it takes, as this
 * launcher holds them: none can be left out by hand. */
static void ps__job_args(const ps__cluster *cl, unsigned to, ps__child_args *a)
{
    int n = ps_job_options_argv(&cl->job, PS_JOB_LAUNCHER, to, a->job_text, sizeof(a->job_text),
                                a->argv + 1, PS__CHILD_ARGV);

    a->n = n < 0 ? 0 : n;
    a->v = 0;
    a->too_long = n < 0;
}

/* Starts server i: on a port of the OS's choosing the first time, and on the
 * same port when it is restarted, so the workers' server list stays right. */
static void ps__spawn_server(ps__cluster *cl, int i, int restore)
{
    /* Static: too large for the stack; the loop's thread is the only one. */
    static ps__child_args a;

    ps__job_args(cl, PS_JOB_SERVER, &a);
    ps__opt(&a, "--listen", "127.0.0.1:%d", cl->ports[i]);
    ps__opt(&a, "--server-index", "%d", i);
    ps__opt(&a, "--num-servers", "%d", cl->n_servers);
    ps__opt(&a, "--ready-fd", "%d", 3);
    ps__opt(&a, "--parent-pid", "%ld", (long)getpid());
    if (cl->metrics_port >= 0)
        ps__opt(&a, "--metrics-port", "%d", cl->metrics_port ? cl->metrics_port + i : 0);
    if (cl->metrics_dir)
        ps__opt(&a, "--metrics-file", "%s/server-%d.jsonl", cl->metrics_dir, i);
    /* A server restarted after --kill-server must restore; at the start the
     * table already handed over the job's --restore and --restore-clock. */
    if (restore)
        ps__flag(&a, "--restore=1");
    if (ps__spawn(cl, PS__SERVER, i, &a) < 0) {
        ps__fail(cl, "a server could not be started");
        return;
    }
    cl->server_slot[i] = &cl->children[cl->n_children - 1];
}

static void ps__start_servers(ps__cluster *cl)
{
    for (int i = 0; i < cl->n_servers && !cl->failed; i++)
        ps__spawn_server(cl, i, 0);
}

static void ps__start_workers(ps__cluster *cl)
{
    char servers[4096];
    size_t off = 0;

    for (int i = 0; i < cl->n_servers; i++)
        off += (size_t)snprintf(servers + off, sizeof(servers) - off, "%s127.0.0.1:%d",
                                i ? "," : "", cl->ports[i]);
    ps_info("%d server%s listening; starting %d worker%s", cl->n_servers,
            cl->n_servers == 1 ? "" : "s", cl->job.workers, cl->job.workers == 1 ? "" : "s");
    for (int r = 0; r < cl->job.workers && !cl->failed; r++) {
        static ps__child_args a;
        uint64_t steps[PS_DRILLS_MAX_STEPS];
        int n_steps;

        ps__job_args(cl, PS_JOB_WORKER, &a);
        ps__opt(&a, "--servers", "%s", servers);
        ps__opt(&a, "--rank", "%d", r);
        ps__opt(&a, "--threads", "%d", cl->threads);
        ps__opt(&a, "--report-fd", "%d", 3);
        ps__opt(&a, "--parent-pid", "%ld", (long)getpid());
        if (cl->metrics_dir)
            ps__opt(&a, "--metrics-file", "%s/worker-%d.jsonl", cl->metrics_dir, r);
        if (r == 0 && cl->dump_weights)
            ps__opt(&a, "--dump-weights", "%s", cl->dump_weights);
        n_steps = ps_drills_report_steps(cl->drills, r, steps);
        if (n_steps > 0) {
            char list[PS_DRILLS_MAX_STEPS * 24] = "";
            for (int i = 0; i < n_steps; i++)
                snprintf(list + strlen(list), sizeof(list) - strlen(list), "%s%" PRIu64,
                         i ? "," : "", steps[i]);
            ps__opt(&a, "--report-steps", "%s", list);
        }
        if (ps_drills_slow_ms(cl->drills, r) > 0)
            ps__opt(&a, "--slow-ms", "%d", ps_drills_slow_ms(cl->drills, r));
        if (ps__spawn(cl, PS__WORKER, r, &a) < 0)
            ps__fail(cl, "a worker could not be started");
    }
}

/* Workers first: each stops at the end of its step, which leaves every
 * server at one step boundary; the servers, asked once the workers are
 * gone, checkpoint there, so a run resumed from it equals an uninterrupted
 * one. A second signal stops everyone at once. */
static void ps__on_signal(uv_signal_t *h, int signum)
{
    ps__cluster *cl = h->data;
    int asked = 0;

    ps_warn("received %s; stopping the workers at a step boundary, then the servers",
            signum == SIGINT ? "SIGINT" : "SIGTERM");
    if (cl->interrupted) {
        ps__shutdown(cl);
        return;
    }
    cl->interrupted = 1;
    for (int i = cl->n_servers; i < cl->n_children; i++)
        if (cl->children[i].running) {
            uv_process_kill(&cl->children[i].proc, SIGTERM);
            asked++;
        }
    if (asked == 0)
        ps__shutdown(cl);
}

static void ps__summary(const ps__cluster *cl, double wall)
{
    double samples = 0, seconds = 0, sps, stale_mean = 0, stale_max = 0, pushed = 0;
    uint64_t dropped = 0, rejected = 0;
    int lost = 0;

    for (int r = 0; r < cl->job.workers && cl->n_servers + r < cl->n_children; r++) {
        const ps__child *c = &cl->children[cl->n_servers + r];
        lost += !c->done;
        dropped += c->dropped;
        rejected += c->rejected;
        samples += c->samples;
        pushed += c->bytes_pushed;
        stale_mean += c->staleness_mean / cl->job.workers;
        stale_max = fmax(stale_max, c->staleness_max);
        if (c->seconds > seconds)
            seconds = c->seconds;
    }
    sps = seconds > 0 ? samples / seconds : 0;
    printf("\nshardps-cluster summary\n");
    printf("  mode              %s\n", cl->job.mode);
    printf("  servers, workers  %d, %d\n", cl->n_servers, cl->job.workers);
    printf("  test accuracy     %.4f\n", cl->last_accuracy);
    printf("  wall time         %.1f s\n", wall);
    printf("  samples/s         %.0f (all workers, training only)\n", sps);
    printf("  pushed            %.1f MB (all workers' gradient payloads, --compress %s)\n",
           pushed / 1e6, cl->job.compress);
    printf("  staleness         mean %.2f, max %.0f (steps, of the workers' applied pushes)\n",
           stale_mean, stale_max);
    printf("  not applied       %" PRIu64 " chunks rejected (NaN/Inf, --max-grad-norm), %" PRIu64
           " late (their step was applied without them)\n",
           rejected, dropped - rejected);
    printf("  workers lost      %d (did not finish)\n", lost);
    if (cl->metrics_dir)
        printf("  metrics           %s/ (server-I.jsonl, worker-R.jsonl)\n", cl->metrics_dir);
    if (cl->json) {
        char acc[32] = "null";
        if (!isnan(cl->last_accuracy))
            snprintf(acc, sizeof(acc), "%.6f", cl->last_accuracy);
        printf("{\"test_accuracy\":%s,\"wall_seconds\":%.3f,\"samples_per_second\":%.1f,"
               "\"mode\":\"%s\",\"servers\":%d,\"workers\":%d,\"bytes_pushed\":%.0f,"
               "\"compress\":\"%s\",\"steps_per_epoch\":%d,\"chunks_dropped\":%" PRIu64
               ",\"chunks_rejected\":%" PRIu64 ",\"chunks_late\":%" PRIu64
               ",\"workers_lost\":%d}\n",
               acc, wall, sps, cl->job.mode, cl->n_servers, cl->job.workers, pushed,
               cl->job.compress, cl->steps_per_epoch, dropped, rejected, dropped - rejected, lost);
    }
    fflush(stdout);
}

/* The folder this executable lives in: the other binaries sit beside it. */
static int ps__self_dir(char *buf, size_t len)
{
    size_t n = len;
    char *slash;

    if (uv_exepath(buf, &n) < 0)
        return -1;
    slash = strrchr(buf, '/');
    if (slash == NULL)
        return -1;
    *slash = '\0';
    return 0;
}

int main(int argc, char **argv)
{
    static ps__cluster cl;
    char self_dir[PATH_MAX];
    const char *kill_worker = NULL, *slow_worker = NULL, *pause_worker = NULL, *kill_server = NULL;
    int ncpu;
    /* The job options first, then the launcher's own. Static: too large for
     * the stack, and the context must outlive every use of the strings. */
    static ps_flag flags[96];
    static ps_flags_ctx ctx;
    int print_config = 0, check = 0, nflags;
    const ps_flag own[] = {
        {"servers", PS_FLAG_INT, &cl.n_servers, "S", "parameter servers to start", 1, 64, NULL,
         NULL, NULL},
        {"threads", PS_FLAG_INT, &cl.threads, "N", "BLAS threads per worker (0: cores / workers)",
         0, 1024, NULL, NULL, NULL},
        {"slow-worker", PS_FLAG_STRING, &slow_worker, "RANK:MS",
         "make that worker wait MS every step (straggler experiments)", 0, 0, NULL, NULL, NULL},
        {"pause-worker", PS_FLAG_STRING, &pause_worker, "RANK@STEP:N",
         "SIGSTOP that worker at STEP, SIGCONT once another is N steps further", 0, 0, NULL, NULL,
         NULL},
        {"kill-server", PS_FLAG_STRING, &kill_server, "I@STEP",
         "SIGKILL server I once worker 0 reports STEP, then restart it with --restore", 0, 0, NULL,
         NULL, NULL},
        {"kill-worker", PS_FLAG_STRING, &kill_worker, "RANK@STEP",
         "SIGKILL that worker once it reports that step (fault drills)", 0, 0, NULL, NULL, NULL},
        {"metrics-dir", PS_FLAG_STRING, &cl.metrics_dir, "DIR",
         "write JSON-lines metrics of every process here (server-I.jsonl, worker-R.jsonl)", 0, 0,
         NULL, NULL, NULL},
        {"metrics-port", PS_FLAG_INT, &cl.metrics_port, "PORT",
         "servers serve Prometheus /metrics on PORT+index (0: any free port, logged)", 0, 65535,
         NULL, "off=-1", NULL},
        {"json", PS_FLAG_BOOL, &cl.json, NULL, "end with the summary as one JSON line", 0, 0, NULL,
         NULL, NULL},
        {"dump-weights", PS_FLAG_STRING, &cl.dump_weights, "FILE",
         "rank 0 writes the final weights here", 0, 0, NULL, NULL, NULL},
        {"bin-dir", PS_FLAG_STRING, &cl.bin_dir, "DIR",
         "where shardps-server and shardps-worker are (default: beside this program)", 0, 0, NULL,
         NULL, NULL},
        {"print-config", PS_FLAG_BOOL, &print_config, NULL,
         "print the effective settings and where each came from, then exit", 0, 0, NULL, NULL,
         NULL},
        {"check", PS_FLAG_BOOL, &check, NULL,
         "check every option as a run would, start nothing, exit 0 if the job would start (2 "
         "and the reason if not)",
         0, 0, NULL, NULL, NULL},
    };
    int n_own = (int)(sizeof(own) / sizeof(own[0])), max = (int)(sizeof(flags) / sizeof(flags[0]));
    double wall;
    int rc;

    ps_job_options_defaults(&cl.job);
    /* A launcher's job: two of each, unlike a lone server or worker. */
    cl.job.workers = 2;
    cl.n_servers = 2;
    cl.metrics_port = -1;
    if (ps__self_dir(self_dir, sizeof(self_dir)) == 0)
        cl.bin_dir = self_dir;
    /* A peer that resets while we write must cost a connection, not the
     * process: take write errors as EPIPE instead of the signal. */
    signal(SIGPIPE, SIG_IGN);
    nflags = ps_job_options_flags(&cl.job, PS_JOB_LAUNCHER, flags, max);
    if (nflags < 0 || nflags + n_own > max)
        return 1;
    memcpy(flags + nflags, own, sizeof(own));
    ctx.flags = flags;
    ctx.n = nflags + n_own;
    ctx.prog = "shardps-cluster";
    ctx.summary = "Runs a parameter-server job on this machine: S servers and W workers on "
                  "127.0.0.1, ports chosen by the OS.";
    rc = ps_flags_load(&ctx, argc, argv);
    if (rc != 0)
        return rc > 0 ? 0 : 2;
    if (print_config) {
        ps_flags_print_config(&ctx, stdout);
        return 0;
    }
    if (cl.job.workers > 128) {
        fprintf(stderr,
                "shardps-cluster: --workers %d: this launcher starts at most 128; see "
                "shardps-cluster --help\n",
                cl.job.workers);
        return 2;
    }
    /* The workers get the model file by absolute path, so they find it
     * wherever they run, and a missing file fails here, before any start. */
    if (cl.job.model) {
        static char model_path[PATH_MAX];
        if (realpath(cl.job.model, model_path) == NULL) {
            fprintf(stderr, "shardps-cluster: --model %s: %s\n", cl.job.model, strerror(errno));
            return 2;
        }
        cl.job.model = model_path;
    }
    if (cl.job.restore && cl.job.checkpoint_dir == NULL) {
        fprintf(stderr, "shardps-cluster: --restore needs --checkpoint-dir DIR; see "
                        "shardps-cluster --help\n");
        return 2;
    }
    {
        const ps_drills_config dc = {kill_worker,
                                     pause_worker,
                                     kill_server,
                                     slow_worker,
                                     cl.job.workers,
                                     cl.n_servers,
                                     cl.job.checkpoint_dir != NULL};
        char err[256];
        rc = ps_drills_init(&cl.drills, &dc, err, sizeof(err));
        if (rc < 0) {
            fprintf(stderr, "shardps-cluster: %s; see shardps-cluster --help\n", err);
            return rc == -ENOMEM ? 1 : 2;
        }
    }
    {
        int sizes[PS_MAX_LAYERS + 1];
        if (ps_model_spec_parse_sizes(cl.job.hidden, sizes, PS_MAX_LAYERS - 1) < 0) {
            fprintf(stderr,
                    "shardps-cluster: --hidden '%s' is not a list of positive sizes like "
                    "256,128\n",
                    cl.job.hidden);
            rc = 2;
            goto out;
        }
    }
    if (cl.bin_dir == NULL) {
        fprintf(stderr,
                "shardps-cluster: cannot tell where the shardps binaries are; pass --bin-dir\n");
        rc = 2;
        goto out;
    }
    if (check) {
        printf("shardps-cluster: the options are valid\n");
        rc = 0;
        goto out;
    }
    ncpu = (int)uv_available_parallelism();
    if (cl.threads == 0)
        cl.threads = ncpu / cl.job.workers > 1 ? ncpu / cl.job.workers : 1;
    if (cl.metrics_dir && mkdir(cl.metrics_dir, 0777) < 0 && errno != EEXIST) {
        fprintf(stderr, "shardps-cluster: cannot create --metrics-dir %s: %s\n", cl.metrics_dir,
                strerror(errno));
        rc = 2;
        goto out;
    }
    /* Servers append to their files, so that one restarted with --restore
     * goes on with its history; a new job starts from empty files. */
    for (int i = 0; cl.metrics_dir && i < cl.n_servers; i++) {
        char path[PATH_MAX];
        snprintf(path, sizeof(path), "%s/server-%d.jsonl", cl.metrics_dir, i);
        if (truncate(path, 0) < 0 && errno != ENOENT) {
            fprintf(stderr, "shardps-cluster: cannot empty %s: %s\n", path, strerror(errno));
            rc = 2;
            goto out;
        }
    }
    ps_log_set_role("cluster");
    if (cl.job.verbose)
        ps_log_set_level(PS_LOG_DEBUG);
    setvbuf(stdout, NULL, _IOLBF, 0);

    cl.child_env = ps_child_env(environ);
    if (cl.child_env == NULL) {
        fprintf(stderr, "shardps-cluster: out of memory\n");
        rc = 1;
        goto out;
    }
    uv_loop_init(&cl.loop);
    if (ps_console_init(&cl.con, &cl.loop) < 0) {
        fprintf(stderr, "shardps-cluster: out of memory\n");
        rc = 1;
        goto out;
    }
    ps_log_set_sink(ps_console_log_sink, cl.con);
    uv_signal_init(&cl.loop, &cl.sigint);
    uv_signal_init(&cl.loop, &cl.sigterm);
    uv_timer_init(&cl.loop, &cl.grace);
    cl.sigint.data = cl.sigterm.data = cl.grace.data = &cl;
    uv_signal_start(&cl.sigint, ps__on_signal, SIGINT);
    uv_signal_start(&cl.sigterm, ps__on_signal, SIGTERM);
    ps_info("starting %d server%s and %d worker%s, mode %s, %d epoch%s", cl.n_servers,
            cl.n_servers == 1 ? "" : "s", cl.job.workers, cl.job.workers == 1 ? "" : "s",
            cl.job.mode, cl.job.epochs, cl.job.epochs == 1 ? "" : "s");
    cl.t_start = ps_clock_now();
    cl.last_accuracy = NAN;
    ps__start_servers(&cl);
    uv_run(&cl.loop, UV_RUN_DEFAULT);
    wall = ps_clock_now() - cl.t_start;
    ps_console_end_progress(cl.con);
    uv_loop_close(&cl.loop);
    rc = cl.interrupted ? 130 : cl.failed ? 1 : 0;
    if (rc == 0)
        ps__summary(&cl, wall);
out:
    ps_log_set_sink(NULL, NULL);
    ps_console_free(cl.con);
    free(cl.child_env);
    ps_drills_free(cl.drills);
    return rc;
}
