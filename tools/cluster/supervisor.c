/* The processes of a launcher's job (see supervisor.h): each child's three
 * pipes (stdout, stderr, and fd 3 for a server's port or a worker's reports)
 * read line by line on the loop, and the job's lifecycle decided from its
 * children's lines and exits. */
#include "supervisor.h"

#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "child_args.h"
#include "ps_log.h"
#include "worker_env.h"

#define PS__MAX_PROCS 256

typedef enum { PS__SERVER, PS__WORKER, PS__EVALUATOR } ps__role;

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
};

struct ps__cluster {
    uv_loop_t *loop;
    uv_signal_t sigint, sigterm;
    uv_timer_t grace;
    ps__child children[PS__MAX_PROCS];
    int n_children;
    int ports_known, workers_exited;
    int ports[PS__MAX_PROCS];
    int failed, interrupted, stopping;
    ps__child *server_slot[PS__MAX_PROCS]; /* current process of each server index */
    ps__child *worker_slot[PS__MAX_PROCS]; /* each rank's process; NULL until started */
    ps__child *evaluator;                  /* NULL: none started */
    int held_rank;                         /* started once the evaluator follows (-1: none) */
    char servers[4096];                    /* the workers' server list */
    ps_supervisor_config cfg;
};

static const char *ps__child_name(const ps__child *c, char *buf, size_t len)
{
    if (c->role == PS__EVALUATOR)
        snprintf(buf, len, "the evaluator");
    else
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
    ps_console_close(cl->cfg.con);
    if (!uv_is_closing((uv_handle_t *)&cl->grace))
        uv_close((uv_handle_t *)&cl->grace, NULL);
}

static void ps__supervisor_fail(ps__cluster *cl, const char *why)
{
    if (!cl->failed && !cl->interrupted)
        ps_error("%s; stopping the cluster", why);
    cl->failed = 1;
    ps__shutdown(cl);
}

static int ps__running(void *arg, int is_server, int index)
{
    ps__cluster *cl = arg;
    ps__child *c = is_server ? cl->server_slot[index] : cl->worker_slot[index];

    return c != NULL && c->running;
}

/* Worker rank has reached step: the drills due now are carried out here,
 * where the processes are. A killed server is restarted by ps__on_exit. */
static void ps__run_drills(ps__cluster *cl, int rank, uint64_t step)
{
    ps_drill_action act[PS_DRILLS_MAX_ACTIONS];
    int n =
        cl->cfg.drills ? ps_drills_on_step(cl->cfg.drills, rank, step, ps__running, cl, act) : 0;

    for (int i = 0; i < n; i++) {
        ps__child *c = act[i].kind == PS_DRILL_KILL_SERVER ? cl->server_slot[act[i].target]
                                                           : cl->worker_slot[act[i].target];
        int sig = act[i].kind == PS_DRILL_STOP_WORKER   ? SIGSTOP
                  : act[i].kind == PS_DRILL_CONT_WORKER ? SIGCONT
                                                        : SIGKILL;
        if (sig == SIGKILL)
            c->killed_on_purpose = 1;
        uv_process_kill(&c->proc, sig);
    }
}

/* A worker's report: shown by the progress, and the drills it makes due
 * carried out after. */
static void ps__worker_line(ps__cluster *cl, ps__child *c, const char *line)
{
    uint64_t step;

    if (ps_progress_report(cl->cfg.progress, c->index, line, &step) == 1)
        ps__run_drills(cl, c->index, step);
}

static void ps__start_workers(ps__cluster *cl);
static void ps__start_held_worker(ps__cluster *cl);

static void ps__server_line(ps__cluster *cl, ps__child *c, const char *line)
{
    char *end;
    long port = strtol(line, &end, 10);

    if (end == line || port < 1 || port > 65535 ||
        (cl->ports[c->index] != 0 && cl->ports[c->index] != port)) {
        ps__supervisor_fail(cl, "a server reported a malformed or changed port");
        return;
    }
    if (cl->ports[c->index] != 0) {
        ps_info("server %d is back on port %ld", c->index, port);
        return;
    }
    cl->ports[c->index] = (int)port;
    if (++cl->ports_known == cl->cfg.n_servers)
        ps__start_workers(cl);
}

static void ps__supervisor_on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
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
        ps_console_line(c->cl->cfg.con, st->kind == PS__OUT, line, len);
    else if (c->role == PS__SERVER)
        ps__server_line(c->cl, c, line);
    else if (c->role == PS__WORKER)
        ps__worker_line(c->cl, c, line);
    else if (strcmp(line, "following") == 0)
        ps__start_held_worker(c->cl);
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
    ps__supervisor_fail(cl, "servers did not exit within 30 s of being asked to stop");
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
    if (cl->evaluator && cl->evaluator->running)
        uv_process_kill(&cl->evaluator->proc, SIGTERM);
    uv_timer_start(&cl->grace, ps__on_grace, 30000, 0);
}

/* A worker has finished once it reported "done" or is gone; servers exit on
 * their own when every worker has said goodbye, possibly before the worker
 * processes themselves have exited. */
static int ps__workers_finished(const ps__cluster *cl)
{
    for (int r = 0; r < cl->cfg.job->workers; r++) {
        const ps__child *w = cl->worker_slot[r];
        if (w == NULL || (w->running && !ps_progress_worker_done(cl->cfg.progress, r)))
            return 0;
    }
    return 1;
}

static void ps__spawn_server(ps__cluster *cl, int i, int restore);

/* Whether worker rank, which exited 0, left before its job was done: it
 * never joined (no "start" report: it never connected through libshardps) or never said it finished
 * (no "done": it did not close its handle, or stopped before its last step). Writes the sentence
 * into why. */
static int ps__left_early(const ps__cluster *cl, int rank, char *why, size_t len)
{
    const ps_progress *p = cl->cfg.progress;

    if (!ps_progress_worker_started(p, rank))
        snprintf(why, len,
                 "worker %d exited (status 0) without joining the job: it never connected to "
                 "the servers through libshardps, which tells the launcher (SHARDPS_REPORT_FD)",
                 rank);
    else if (!ps_progress_worker_done(p, rank))
        snprintf(why, len,
                 "worker %d exited (status 0) without leaving the job (the last step it "
                 "reported: %" PRIu64 "): it stopped early, or never closed its connection "
                 "(shardps_close, Client.close)",
                 rank, ps_progress_worker_step(p, rank));
    else
        return 0;
    return 1;
}

/* A worker that left the job well but before the step it announced
 * (early stopping, or a loop that ended too soon): not a failure, since
 * only the program knows which, but said. */
static void ps__say_short(const ps__cluster *cl, int rank)
{
    uint64_t step = ps_progress_worker_step(cl->cfg.progress, rank);
    uint64_t total = ps_progress_worker_total(cl->cfg.progress, rank);

    if (total > 0 && step < total)
        ps_warn("worker %d left the job at step %" PRIu64 " of the %" PRIu64
                " it announced: it stopped before its last step",
                rank, step, total);
}

static void ps__on_exit(uv_process_t *p, int64_t status, int term_signal)
{
    ps__child *c = p->data;
    ps__cluster *cl = c->cl;
    char name[32], why[320];

    c->running = 0;
    uv_close((uv_handle_t *)p, NULL);
    ps__child_name(c, name, sizeof(name));
    if (c->role == PS__EVALUATOR) {
        /* Testing is not training: the job goes on without it. */
        if ((status != 0 || term_signal != 0) && !cl->stopping && term_signal != SIGTERM)
            ps_warn("the evaluator stopped (status %" PRId64 ", signal %d); the job goes on "
                    "without it",
                    status, term_signal);
        ps__start_held_worker(cl);
    } else if (c->killed_on_purpose && term_signal == SIGKILL && c->role == PS__SERVER) {
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
            ps__supervisor_fail(cl, why);
    } else if (c->role == PS__SERVER && !cl->stopping && !ps__workers_finished(cl)) {
        snprintf(why, sizeof(why), "%s exited before the workers finished", name);
        ps__supervisor_fail(cl, why);
    } else if (c->role == PS__WORKER && !cl->stopping && !cl->interrupted &&
               ps__left_early(cl, c->index, why, sizeof(why))) {
        ps__supervisor_fail(cl, why);
    } else if (c->role == PS__WORKER && !cl->stopping && !cl->interrupted) {
        ps__say_short(cl, c->index);
    }
    if (c->role == PS__WORKER && ++cl->workers_exited == cl->cfg.job->workers && !cl->stopping)
        cl->interrupted ? ps__shutdown(cl) : ps__stop_servers(cl);
    for (int i = 0; i < cl->n_children; i++)
        if (cl->children[i].running)
            return;
    /* Everyone is gone: release the signal and timer handles so the loop ends. */
    ps__shutdown(cl);
}

/* Starts a child of role with argv (argv[0] the program) and env. */
static int ps__spawn(ps__cluster *cl, ps__role role, int index, char **argv, char **env)
{
    ps__child *c = &cl->children[cl->n_children];
    uv_process_options_t opt;
    uv_stdio_container_t stdio[4];
    char name[32];
    int rc;

    memset(c, 0, sizeof(*c));
    c->cl = cl;
    c->role = role;
    c->index = index;
    c->proc.data = c;
    stdio[0].flags = UV_IGNORE;
    for (int k = 0; k < PS__N_STREAMS; k++) {
        ps__stream *st = &c->streams[k];
        st->child = c;
        st->kind = k;
        uv_pipe_init(cl->loop, &st->pipe, 0);
        st->pipe.data = st;
        stdio[1 + k].flags = UV_CREATE_PIPE | UV_WRITABLE_PIPE;
        stdio[1 + k].data.stream = (uv_stream_t *)&st->pipe;
    }
    memset(&opt, 0, sizeof(opt));
    opt.file = argv[0];
    opt.args = argv;
    opt.exit_cb = ps__on_exit;
    opt.stdio = stdio;
    opt.stdio_count = 4;
    opt.env = env;
    /* A session of its own: a terminal's Ctrl-C (SIGINT to the foreground
     * process group) reaches only the launcher, which stops the workers at a
     * step boundary and then the servers. Signalled all at once, a server
     * that happened to be at a boundary would checkpoint and leave while the
     * workers were still inside the step. The child has no terminal to lose
     * (its output is piped); servers die with the launcher (--parent-pid). */
    opt.flags = UV_PROCESS_DETACHED;
    rc = uv_spawn(cl->loop, &c->proc, &opt);
    if (rc < 0) {
        ps_error("cannot start %s (%s): %s", ps__child_name(c, name, sizeof(name)), argv[0],
                 uv_strerror(rc));
        for (int k = 0; k < PS__N_STREAMS; k++)
            uv_close((uv_handle_t *)&c->streams[k].pipe, NULL);
        return rc;
    }
    cl->n_children++;
    c->running = 1;
    for (int k = 0; k < PS__N_STREAMS; k++)
        uv_read_start((uv_stream_t *)&c->streams[k].pipe, ps__supervisor_on_alloc,
                      ps__on_pipe_read);
    return 0;
}

/* Starts server i: on a port of the OS's choosing the first time, and on the
 * same port when it is restarted, so the workers' server list stays right. */
static void ps__spawn_server(ps__cluster *cl, int i, int restore)
{
    /* Static: too large for the stack; the loop's thread is the only one. */
    static ps_child_args a;
    static char path[PATH_MAX];

    ps_child_args_job(&a, cl->cfg.job, PS_JOB_SERVER);
    ps_child_args_opt(&a, "--listen", "127.0.0.1:%d", cl->ports[i]);
    ps_child_args_opt(&a, "--server-index", "%d", i);
    ps_child_args_opt(&a, "--num-servers", "%d", cl->cfg.n_servers);
    ps_child_args_opt(&a, "--ready-fd", "%d", 3);
    ps_child_args_opt(&a, "--parent-pid", "%ld", (long)getpid());
    if (cl->cfg.metrics_port >= 0)
        ps_child_args_opt(&a, "--metrics-port", "%d",
                          cl->cfg.metrics_port ? cl->cfg.metrics_port + i : 0);
    if (cl->cfg.metrics_dir)
        ps_child_args_opt(&a, "--metrics-file", "%s/server-%d.jsonl", cl->cfg.metrics_dir, i);
    /* A server restarted after --kill-server must restore; at the start the
     * table already handed over the job's --restore and --restore-clock. */
    if (restore)
        ps_child_args_flag(&a, "--restore=1");
    snprintf(path, sizeof(path), "%s/shardps-server", cl->cfg.bin_dir);
    if (a.too_long) {
        ps_error("internal: more options for a server than ps_child_args holds (PS_CHILD_OPTS)");
        ps__supervisor_fail(cl, "a server could not be started");
        return;
    }
    a.argv[0] = path;
    a.argv[a.n + 1] = NULL;
    if (ps__spawn(cl, PS__SERVER, i, a.argv, cl->cfg.server_env) < 0) {
        ps__supervisor_fail(cl, "a server could not be started");
        return;
    }
    cl->server_slot[i] = &cl->children[cl->n_children - 1];
}

static void ps__start_servers(ps__cluster *cl)
{
    for (int i = 0; i < cl->cfg.n_servers && !cl->failed; i++)
        ps__spawn_server(cl, i, 0);
}

static void ps__start_worker(ps__cluster *cl, int r)
{
    char **argv = cl->cfg.worker_argv(cl->cfg.worker_arg, r);
    char **env = ps_worker_env_rank(cl->cfg.worker_env, cl->servers, r);

    if (argv == NULL || env == NULL || ps__spawn(cl, PS__WORKER, r, argv, env) < 0)
        ps__supervisor_fail(cl, "a worker could not be started");
    else
        cl->worker_slot[r] = &cl->children[cl->n_children - 1];
}

/* The rank held for the evaluator: it follows the job, or is gone. */
static void ps__start_held_worker(ps__cluster *cl)
{
    int r = cl->held_rank;

    if (r < 0 || cl->stopping)
        return;
    cl->held_rank = -1;
    ps__start_worker(cl, r);
}

/* An evaluator needs the tensors a worker declares, so with two workers
 * or more it starts beside the first ones and the last waits for it. */
static void ps__start_workers(ps__cluster *cl)
{
    int w = cl->cfg.job->workers;
    size_t off = 0;

    for (int i = 0; i < cl->cfg.n_servers; i++)
        off += (size_t)snprintf(cl->servers + off, sizeof(cl->servers) - off, "%s127.0.0.1:%d",
                                i ? "," : "", cl->ports[i]);
    ps_info("%d server%s listening; starting %d worker%s%s", cl->cfg.n_servers,
            cl->cfg.n_servers == 1 ? "" : "s", w, w == 1 ? "" : "s",
            cl->cfg.evaluator_argv ? " and the evaluator" : "");
    if (cl->cfg.evaluator_argv && w > 1)
        cl->held_rank = w - 1;
    for (int r = 0; r < w && r != cl->held_rank && !cl->failed; r++)
        ps__start_worker(cl, r);
    if (cl->cfg.evaluator_argv && !cl->failed) {
        char **env = ps_worker_env_rank(cl->cfg.worker_env, cl->servers, 0);
        if (env != NULL && ps__spawn(cl, PS__EVALUATOR, 0, cl->cfg.evaluator_argv, env) == 0)
            cl->evaluator = &cl->children[cl->n_children - 1];
        else
            ps_warn("the evaluator could not be started; the job goes on without it");
    }
    if (cl->evaluator == NULL)
        ps__start_held_worker(cl);
}

/* Workers first: each stops at the end of its step, which leaves every
 * server at one step boundary; the servers, asked once the workers are
 * gone, checkpoint there, so a run resumed from it equals an uninterrupted
 * one. A second signal stops everyone at once. */
static void ps__supervisor_on_signal(uv_signal_t *h, int signum)
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
    /* A rank held for the evaluator will not start now: it counts as gone. */
    if (cl->held_rank >= 0) {
        cl->held_rank = -1;
        cl->workers_exited++;
    }
    for (int i = cl->cfg.n_servers; i < cl->n_children; i++)
        if (cl->children[i].running) {
            uv_process_kill(&cl->children[i].proc, SIGTERM);
            asked++;
        }
    if (asked == 0)
        ps__shutdown(cl);
}

int ps_supervisor_run(uv_loop_t *loop, const ps_supervisor_config *cfg, ps_job_outcome *outcome)
{
    /* Its children's pipe buffers make it too large for the stack. */
    ps__cluster *cl = calloc(1, sizeof(*cl));

    if (cl == NULL)
        return -ENOMEM;
    cl->loop = loop;
    cl->cfg = *cfg;
    cl->held_rank = -1;
    uv_signal_init(loop, &cl->sigint);
    uv_signal_init(loop, &cl->sigterm);
    uv_timer_init(loop, &cl->grace);
    cl->sigint.data = cl->sigterm.data = cl->grace.data = cl;
    uv_signal_start(&cl->sigint, ps__supervisor_on_signal, SIGINT);
    uv_signal_start(&cl->sigterm, ps__supervisor_on_signal, SIGTERM);
    ps__start_servers(cl);
    /* Returns once every handle is closed, their callbacks run: then no
     * callback can reach cl any more. */
    uv_run(loop, UV_RUN_DEFAULT);
    *outcome = cl->interrupted ? PS_JOB_INTERRUPTED : cl->failed ? PS_JOB_FAILED : PS_JOB_FINISHED;
    free(cl);
    return 0;
}
