/* shardps-top: a live view of a running job, read from its servers' /metrics
 * endpoints (shardps-server --metrics-port). For each server: live workers,
 * request and byte rates, applied updates, dropped pushes, staleness; for each
 * worker: its clock (the lowest over the servers), how far it is behind the
 * fastest, its step rate and traffic. It redraws every --interval seconds on a
 * terminal, prints a snapshot per interval otherwise, and with --once prints
 * one snapshot and exits (scripts and tests).
 *
 * It talks plain HTTP/1.0 over a blocking TCP socket with deadlines: one GET
 * per server per refresh needs no client library. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "flags.h"
#include "prom_text.h"
#include "server_list.h"
#include "transport.h"

#define PS__TOP_MAX_SERVERS 256
#define PS__TOP_MAX_BODY    (64u << 20)

typedef struct {
    int rank;
    double clock, pushes, pulls, bytes_in, bytes_out, seen;
} ps__top_worker;

typedef struct {
    const char *addr; /* points into the endpoint list */
    int ok;
    char err[160];
    double index, live, expected;
    char mode[16];
    double pushes, pulls, bytes_in, bytes_out, updates, dropped, rejected;
    double st_mean, st_p99, st_max;
    ps__top_worker *workers; /* owned; n_workers used, cap allocated */
    int n_workers, cap;
} ps__top_server;

typedef struct {
    double t; /* monotonic seconds of the scrape */
    int n;
    ps__top_server servers[PS__TOP_MAX_SERVERS];
} ps__top_view;

/* Waits until fd is ready for events or the deadline passes. */
static int ps__wait_fd(int fd, short events, double deadline)
{
    struct pollfd p = {fd, events, 0};
    int rc;

    do {
        int ms = (int)((deadline - ps_clock_now()) * 1000);
        if (ms <= 0)
            return -ETIMEDOUT;
        rc = poll(&p, 1, ms);
    } while (rc < 0 && errno == EINTR);
    if (rc < 0)
        return -errno;
    return rc == 0 ? -ETIMEDOUT : 0;
}

/* GETs /metrics from hostport; writes the malloc'd, NUL-terminated body (the
 * caller frees it). Returns 0 or a negative code with err filled in. */
static int ps__http_get(const char *hostport, double timeout_s, char **body, char *err,
                        size_t errlen)
{
    struct sockaddr_storage addr;
    double deadline = ps_clock_now() + timeout_s;
    char req[256], *buf = NULL, *hdr_end;
    size_t len = 0, cap = 0, off = 0;
    int fd = -1, rc, soerr = 0;
    socklen_t sl = sizeof(soerr);

    *body = NULL;
    rc = ps_parse_hostport(hostport, &addr, 0, err, errlen);
    if (rc < 0)
        return rc;
    fd = socket(addr.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        goto fail_errno;
    if (connect(fd, (struct sockaddr *)&addr,
                addr.ss_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                           : sizeof(struct sockaddr_in)) < 0) {
        if (errno != EINPROGRESS)
            goto fail_errno;
        if ((rc = ps__wait_fd(fd, POLLOUT, deadline)) < 0)
            goto fail_rc;
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0)
            goto fail_errno;
        if (soerr != 0) {
            rc = -soerr;
            goto fail_rc;
        }
    }
    snprintf(req, sizeof(req), "GET /metrics HTTP/1.0\r\nHost: %s\r\nAccept: text/plain\r\n\r\n",
             hostport);
    while (off < strlen(req)) {
        ssize_t n = send(fd, req + off, strlen(req) - off, MSG_NOSIGNAL);
        if (n < 0 && errno == EAGAIN) {
            if ((rc = ps__wait_fd(fd, POLLOUT, deadline)) < 0)
                goto fail_rc;
            continue;
        }
        if (n < 0)
            goto fail_errno;
        off += (size_t)n;
    }
    /* HTTP/1.0: the server closes the connection after the body. */
    for (;;) {
        ssize_t n;
        if (cap - len < 4096) {
            char *nb;
            cap = cap ? cap * 2 : 65536;
            if (cap > PS__TOP_MAX_BODY) {
                snprintf(err, errlen, "reply larger than %u bytes", PS__TOP_MAX_BODY);
                rc = -E2BIG;
                goto fail;
            }
            nb = realloc(buf, cap);
            if (nb == NULL) {
                rc = -ENOMEM;
                goto fail_rc;
            }
            buf = nb;
        }
        n = recv(fd, buf + len, cap - len - 1, 0);
        if (n < 0 && errno == EAGAIN) {
            if ((rc = ps__wait_fd(fd, POLLIN, deadline)) < 0)
                goto fail_rc;
            continue;
        }
        if (n < 0)
            goto fail_errno;
        if (n == 0)
            break;
        len += (size_t)n;
    }
    buf[len] = '\0';
    if (strncmp(buf, "HTTP/1.", 7) != 0 || len < 12 || strncmp(buf + 9, "200", 3) != 0) {
        snprintf(err, errlen, "HTTP reply '%.*s'", (int)strcspn(buf, "\r\n"), buf);
        rc = -EPROTO;
        goto fail;
    }
    hdr_end = strstr(buf, "\r\n\r\n");
    if (hdr_end == NULL) {
        snprintf(err, errlen, "reply without a header end");
        rc = -EPROTO;
        goto fail;
    }
    memmove(buf, hdr_end + 4, len - (size_t)(hdr_end + 4 - buf) + 1);
    close(fd);
    *body = buf;
    return 0;

fail_errno:
    rc = -errno;
fail_rc:
    snprintf(err, errlen, "%s", strerror(-rc));
fail:
    free(buf);
    if (fd >= 0)
        close(fd);
    return rc;
}

static ps__top_worker *ps__worker_slot(ps__top_server *s, int rank)
{
    for (int i = 0; i < s->n_workers; i++)
        if (s->workers[i].rank == rank)
            return &s->workers[i];
    if (s->n_workers == s->cap) {
        int cap = s->cap ? s->cap * 2 : 16;
        ps__top_worker *nw = realloc(s->workers, (size_t)cap * sizeof(*nw));
        if (nw == NULL)
            return NULL;
        s->workers = nw;
        s->cap = cap;
    }
    memset(&s->workers[s->n_workers], 0, sizeof(s->workers[0]));
    s->workers[s->n_workers].rank = rank;
    return &s->workers[s->n_workers++];
}

/* Takes one sample of a server's exposition into s. */
static void ps__on_sample(const ps_prom_sample *m, void *arg)
{
    static const struct {
        const char *name;
        size_t off;
    } server_fields[] = {
        {"shardps_server_live_workers", offsetof(ps__top_server, live)},
        {"shardps_server_expected_workers", offsetof(ps__top_server, expected)},
        {"shardps_server_pushes_total", offsetof(ps__top_server, pushes)},
        {"shardps_server_pulls_total", offsetof(ps__top_server, pulls)},
        {"shardps_server_bytes_received_total", offsetof(ps__top_server, bytes_in)},
        {"shardps_server_bytes_sent_total", offsetof(ps__top_server, bytes_out)},
        {"shardps_server_updates_total", offsetof(ps__top_server, updates)},
        {"shardps_server_dropped_pushes_total", offsetof(ps__top_server, dropped)},
        {"shardps_server_rejected_frames_total", offsetof(ps__top_server, rejected)},
        {"shardps_server_staleness_mean", offsetof(ps__top_server, st_mean)},
        {"shardps_server_staleness_p99", offsetof(ps__top_server, st_p99)},
        {"shardps_server_staleness_max", offsetof(ps__top_server, st_max)},
    };
    static const struct {
        const char *name;
        size_t off;
    } worker_fields[] = {
        {"shardps_server_worker_clock", offsetof(ps__top_worker, clock)},
        {"shardps_server_worker_pushes_total", offsetof(ps__top_worker, pushes)},
        {"shardps_server_worker_pulls_total", offsetof(ps__top_worker, pulls)},
        {"shardps_server_worker_bytes_received_total", offsetof(ps__top_worker, bytes_in)},
        {"shardps_server_worker_bytes_sent_total", offsetof(ps__top_worker, bytes_out)},
        {"shardps_server_worker_seconds_since_seen", offsetof(ps__top_worker, seen)},
    };
    ps__top_server *s = arg;
    const char *v;

    if (strcmp(m->name, "shardps_server_info") == 0) {
        if ((v = ps_prom_label(m, "mode")) != NULL)
            snprintf(s->mode, sizeof(s->mode), "%s", v);
        if ((v = ps_prom_label(m, "server")) != NULL)
            s->index = atof(v);
        return;
    }
    for (size_t i = 0; i < sizeof(server_fields) / sizeof(server_fields[0]); i++)
        if (strcmp(m->name, server_fields[i].name) == 0) {
            *(double *)((char *)s + server_fields[i].off) = m->value;
            return;
        }
    for (size_t i = 0; i < sizeof(worker_fields) / sizeof(worker_fields[0]); i++)
        if (strcmp(m->name, worker_fields[i].name) == 0 && (v = ps_prom_label(m, "rank")) != NULL) {
            ps__top_worker *w = ps__worker_slot(s, atoi(v));
            if (w != NULL)
                *(double *)((char *)w + worker_fields[i].off) = m->value;
            return;
        }
}

static void ps__scrape(ps__top_view *v, const char *const *addrs, int n, double timeout_s)
{
    v->t = ps_clock_now();
    v->n = n;
    for (int i = 0; i < n; i++) {
        ps__top_server *s = &v->servers[i];
        char *body;
        int bad = 0, rc;

        free(s->workers);
        memset(s, 0, sizeof(*s));
        s->addr = addrs[i];
        s->index = i;
        if (ps__http_get(addrs[i], timeout_s, &body, s->err, sizeof(s->err)) < 0)
            continue;
        rc = ps_prom_parse_text(body, strlen(body), ps__on_sample, s, &bad);
        free(body);
        if (rc < 0) {
            snprintf(s->err, sizeof(s->err), "malformed metrics at line %d", bad);
            continue;
        }
        s->ok = 1;
    }
}

/* Per-second rate of a counter between two views; NAN without a previous one. */
static double ps__rate(double now, double before, double dt)
{
    return dt > 0 ? (now - before) / dt : NAN;
}

static void ps__fmt_rate(char *buf, size_t len, double r, double scale)
{
    if (isnan(r))
        snprintf(buf, len, "-");
    else
        snprintf(buf, len, "%.1f", r / scale);
}

/* One worker as the job sees it: the lowest clock over the servers (the step
 * it has finished everywhere), its traffic summed, its freshest contact. */
typedef struct {
    int rank, n;
    double clock, pushes, bytes_in, bytes_out, seen;
} ps__top_row;

static int ps__worker_rows(const ps__top_view *v, ps__top_row **out)
{
    ps__top_row *rows = NULL;
    int n = 0, cap = 0;

    for (int i = 0; i < v->n; i++)
        for (int j = 0; j < v->servers[i].n_workers; j++) {
            const ps__top_worker *w = &v->servers[i].workers[j];
            ps__top_row *r = NULL;
            for (int k = 0; k < n; k++)
                if (rows[k].rank == w->rank)
                    r = &rows[k];
            if (r == NULL) {
                if (n == cap) {
                    ps__top_row *nr;
                    cap = cap ? cap * 2 : 16;
                    nr = realloc(rows, (size_t)cap * sizeof(*nr));
                    if (nr == NULL)
                        break;
                    rows = nr;
                }
                r = &rows[n++];
                memset(r, 0, sizeof(*r));
                r->rank = w->rank;
                r->clock = w->clock;
                r->seen = w->seen;
            }
            r->n++;
            r->clock = fmin(r->clock, w->clock);
            r->seen = fmin(r->seen, w->seen);
            r->pushes += w->pushes;
            r->bytes_in += w->bytes_in;
            r->bytes_out += w->bytes_out;
        }
    /* Rank order, whatever order the servers listed them in. */
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && rows[j - 1].rank > rows[j].rank; j--) {
            ps__top_row t = rows[j];
            rows[j] = rows[j - 1];
            rows[j - 1] = t;
        }
    *out = rows;
    return n;
}

static void ps__print(FILE *f, const ps__top_view *v, const ps__top_view *prev)
{
    double dt = prev && prev->n == v->n ? v->t - prev->t : 0;
    double top_clock = 0;
    ps__top_row *rows = NULL, *prev_rows = NULL;
    int n_rows, n_prev = 0, up = 0;
    char tbuf[16], mode[16] = "?";
    time_t now = time(NULL);
    struct tm tm;

    localtime_r(&now, &tm);
    strftime(tbuf, sizeof(tbuf), "%H:%M:%S", &tm);
    for (int i = 0; i < v->n; i++)
        if (v->servers[i].ok) {
            up++;
            snprintf(mode, sizeof(mode), "%s", v->servers[i].mode);
        }
    n_rows = ps__worker_rows(v, &rows);
    if (dt > 0)
        n_prev = ps__worker_rows(prev, &prev_rows);
    fprintf(f, "shardps-top  %s  mode %s  %d/%d servers answering  %d workers live\n\n", tbuf, mode,
            up, v->n, n_rows);
    fprintf(f, "%-6s %-22s %-7s %9s %8s %8s %10s %8s %8s %16s\n", "server", "address", "live",
            "pushes/s", "MB/s in", "MB/s out", "updates", "dropped", "rejected",
            "staleness m/p99/max");
    for (int i = 0; i < v->n; i++) {
        const ps__top_server *s = &v->servers[i];
        const ps__top_server *p = dt > 0 && prev->servers[i].ok ? &prev->servers[i] : NULL;
        char live[16], pr[16], bi[16], bo[16], st[32];
        if (!s->ok) {
            fprintf(f, "%-6d %-22s unreachable: %s\n", i, s->addr, s->err);
            continue;
        }
        snprintf(live, sizeof(live), "%.0f/%.0f", s->live, s->expected);
        ps__fmt_rate(pr, sizeof(pr), p ? ps__rate(s->pushes, p->pushes, dt) : NAN, 1);
        ps__fmt_rate(bi, sizeof(bi), p ? ps__rate(s->bytes_in, p->bytes_in, dt) : NAN, 1e6);
        ps__fmt_rate(bo, sizeof(bo), p ? ps__rate(s->bytes_out, p->bytes_out, dt) : NAN, 1e6);
        snprintf(st, sizeof(st), "%.2f/%.0f/%.0f", s->st_mean, s->st_p99, s->st_max);
        fprintf(f, "%-6.0f %-22s %-7s %9s %8s %8s %10.0f %8.0f %8.0f %16s\n", s->index, s->addr,
                live, pr, bi, bo, s->updates, s->dropped, s->rejected, st);
    }
    for (int i = 0; i < n_rows; i++)
        top_clock = fmax(top_clock, rows[i].clock);
    fprintf(f, "\n%-6s %10s %7s %9s %10s %9s %9s %9s\n", "worker", "clock", "behind", "steps/s",
            "pushes", "MB in", "MB out", "seen (s)");
    for (int i = 0; i < n_rows; i++) {
        const ps__top_row *r = &rows[i];
        char sr[16] = "-";
        for (int k = 0; k < n_prev; k++)
            if (prev_rows[k].rank == r->rank)
                ps__fmt_rate(sr, sizeof(sr), ps__rate(r->clock, prev_rows[k].clock, dt), 1);
        fprintf(f, "%-6d %10.0f %7.0f %9s %10.0f %9.1f %9.1f %9.1f\n", r->rank, r->clock,
                top_clock - r->clock, sr, r->pushes, r->bytes_in / 1e6, r->bytes_out / 1e6,
                r->seen);
    }
    if (n_rows == 0)
        fprintf(f, "(no live workers)\n");
    free(rows);
    free(prev_rows);
    fflush(f);
}

static void ps__view_free(ps__top_view *v)
{
    for (int i = 0; i < v->n; i++)
        free(v->servers[i].workers);
    v->n = 0;
}

static void ps__sleep(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - floor(s)) * 1e9)};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

/* The endpoint list may stand anywhere among the options, without a flag
 * (shardps-top h:p,h:p --once, or --once h:p,h:p): takes the one argument
 * that is neither an option nor an option's value out of argv. Returns 0, or
 * -EINVAL after a line on stderr when there are two. */
static int ps__take_endpoints(const ps_flag *flags, int n, int *argc, char **argv, const char **out)
{
    for (int a = 1; a < *argc; a++) {
        const char *arg = argv[a];

        if (strncmp(arg, "--", 2) == 0) {
            size_t len = strcspn(arg + 2, "=");
            for (int f = 0; f < n; f++)
                if (strlen(flags[f].name) == len && strncmp(flags[f].name, arg + 2, len) == 0 &&
                    arg[2 + len] == '\0' && flags[f].type != PS_FLAG_BOOL)
                    a++; /* its value follows */
            continue;
        }
        if (arg[0] == '-')
            continue; /* -h, or a mistake the parser names */
        if (*out) {
            fprintf(stderr,
                    "shardps-top: two endpoint lists ('%s' and '%s'); give one, its entries "
                    "separated by commas\n",
                    *out, arg);
            return -EINVAL;
        }
        *out = arg;
        memmove(argv + a, argv + a + 1, (size_t)(*argc - a) * sizeof(*argv));
        (*argc)--;
        a--;
    }
    return 0;
}

int main(int argc, char **argv)
{
    static ps__top_view views[2];
    const char *endpoints = NULL, *operand = NULL;
    char err[256];
    ps_server_list *list;
    double interval = 1, timeout = 2;
    int once = 0, n, cur = 0, tty, rc;
    const ps_flag flags[] = {
        {"metrics", PS_FLAG_STRING, &endpoints, "HOST:PORT,...",
         "the servers' metrics endpoints (or give them without the flag, before or after the "
         "options)",
         0, 0, NULL, NULL, NULL},
        {"once", PS_FLAG_BOOL, &once, NULL, "print one snapshot and exit", 0, 0, NULL, NULL, NULL},
        {"interval", PS_FLAG_DOUBLE, &interval, "SECONDS", "time between refreshes", 0.1, 3600,
         NULL, NULL, NULL},
        {"timeout", PS_FLAG_DOUBLE, &timeout, "SECONDS", "give up on a server after this long", 0.1,
         600, NULL, NULL, NULL},
    };

    signal(SIGPIPE, SIG_IGN);
    rc = ps__take_endpoints(flags, (int)(sizeof(flags) / sizeof(flags[0])), &argc, argv, &operand);
    if (rc < 0)
        return 2;
    rc = ps_flags_parse(
        flags, (int)(sizeof(flags) / sizeof(flags[0])), argc, argv, "shardps-top",
        "Shows a running job live from its servers' /metrics endpoints "
        "(shardps-server --metrics-port). Usage: shardps-top [OPTIONS] HOST:PORT[,...]");
    if (rc != 0)
        return rc > 0 ? 0 : 2;
    if (operand && endpoints) {
        fprintf(stderr,
                "shardps-top: endpoints given twice ('%s' and --metrics '%s'); give them "
                "once\n",
                operand, endpoints);
        return 2;
    }
    if (operand)
        endpoints = operand;
    if (endpoints == NULL) {
        fprintf(stderr, "shardps-top: name the servers' metrics endpoints, e.g. shardps-top "
                        "127.0.0.1:9100,127.0.0.1:9101 (see --help)\n");
        return 2;
    }
    rc = ps_server_list_parse(&list, endpoints, PS__TOP_MAX_SERVERS, 0, err, sizeof(err));
    if (rc < 0) {
        fprintf(stderr, "shardps-top: endpoints '%s': %s\n", endpoints, err);
        return rc == -ENOMEM ? 1 : 2;
    }
    n = ps_server_list_count(list);
    tty = isatty(STDOUT_FILENO);
    for (;;) {
        ps__top_view *v = &views[cur], *prev = &views[1 - cur];
        ps__scrape(v, ps_server_list_entries(list), n, timeout);
        if (tty && !once)
            fputs("\033[H\033[J", stdout); /* home, clear: redraw in place */
        ps__print(stdout, v, prev->n ? prev : NULL);
        if (once)
            break;
        if (!tty)
            putchar('\n');
        cur = 1 - cur;
        ps__sleep(interval);
    }
    /* --once: fail when no server answered, so scripts notice. */
    rc = 1;
    for (int i = 0; i < views[cur].n; i++)
        if (views[cur].servers[i].ok)
            rc = 0;
    ps__view_free(&views[0]);
    ps__view_free(&views[1]);
    ps_server_list_free(list);
    return rc;
}
