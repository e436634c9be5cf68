/* Helpers shared by the benchmark programs (see bench_util.h). */
#include "bench_util.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "child_env.h"
#include "ps_error.h"

extern char **environ;

int ps_bench_parse_sizes(const char *text, size_t *out, int max)
{
    const char *p = text;
    int n = 0;

    while (*p) {
        char *end;
        unsigned long long v = strtoull(p, &end, 10);
        if (end == p || n == max)
            return -EINVAL;
        if (*end == 'K' || *end == 'k')
            v <<= 10, end++;
        else if (*end == 'M' || *end == 'm')
            v <<= 20, end++;
        else if (*end == 'G' || *end == 'g')
            v <<= 30, end++;
        if (*end != ',' && *end != '\0')
            return -EINVAL;
        out[n++] = (size_t)v;
        p = *end ? end + 1 : end;
    }
    return n;
}

const char *ps_bench_size_text(size_t b, char *buf, size_t len)
{
    if (b >= (1u << 20) && b % (1u << 20) == 0)
        snprintf(buf, len, "%zu MiB", b >> 20);
    else if (b >= 1024 && b % 1024 == 0)
        snprintf(buf, len, "%zu KiB", b >> 10);
    else
        snprintf(buf, len, "%zu B", b);
    return buf;
}

static int ps__cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

void ps_bench_sort(double *v, size_t n)
{
    qsort(v, n, sizeof(double), ps__cmp_double);
}

double ps_bench_pct(const double *v, size_t n, double q)
{
    size_t k = (size_t)ceil(q * (double)n);

    return n == 0 ? NAN : v[k == 0 ? 0 : k - 1];
}

/* The child's side of ps_bench_spawn: descriptors, then exec. */
static void ps__exec_child(char *const *argv, char *const *env, int keep_logs, int ready_fd)
{
    int devnull = open("/dev/null", O_RDWR);

    if (ready_fd >= 0) {
        /* dup2 onto itself would keep close-on-exec set. */
        if (ready_fd == 3)
            fcntl(3, F_SETFD, 0);
        else
            dup2(ready_fd, 3);
    }
    dup2(devnull, 0);
    if (!keep_logs) {
        dup2(devnull, 1);
        dup2(devnull, 2);
    }
    execve(argv[0], argv, env);
    _exit(127);
}

/* Reads the first line the child writes on its ready pipe: its port. */
static int ps__read_port(int fd, int *port)
{
    char line[32];
    size_t got = 0;

    while (got < sizeof(line) - 1) {
        struct pollfd p = {fd, POLLIN, 0};
        ssize_t n;

        if (poll(&p, 1, 60000) <= 0)
            return -PS_ETIMEOUT;
        n = read(fd, line + got, sizeof(line) - 1 - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0)
            break;
        got += (size_t)n;
        if (memchr(line, '\n', got))
            break;
    }
    line[got] = '\0';
    *port = atoi(line);
    return *port > 0 && *port <= 65535 ? 0 : -PS_EPROTO;
}

int ps_bench_spawn(char *const *argv, int keep_logs, int want_port, ps_bench_child *out)
{
    int pfd[2] = {-1, -1}, rc = 0;
    char **env = ps_child_env(environ);
    pid_t pid;

    out->pid = 0;
    out->port = 0;
    if (env == NULL)
        return -ENOMEM;
    if (want_port && pipe2(pfd, O_CLOEXEC) < 0) {
        rc = -errno;
        free(env);
        return rc;
    }
    pid = fork();
    if (pid < 0) {
        rc = -errno;
        goto out;
    }
    if (pid == 0)
        ps__exec_child(argv, env, keep_logs, pfd[1]);
    out->pid = pid;
    if (!want_port)
        goto out;
    close(pfd[1]);
    pfd[1] = -1;
    rc = ps__read_port(pfd[0], &out->port);
    if (rc < 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
        out->pid = 0;
    }
out:
    free(env);
    if (pfd[0] >= 0)
        close(pfd[0]);
    if (pfd[1] >= 0)
        close(pfd[1]);
    return rc;
}

int ps_bench_start_servers(const char *bin, int n, const char *const *extra, int keep_logs,
                           ps_bench_child *kids)
{
    char a_index[16], a_num[16];
    char *argv[64] = {(char *)bin,      "--listen", "127.0.0.1:0",   "--ready-fd", "3",
                      "--server-index", a_index,    "--num-servers", a_num};
    int k = 9, rc = 0;

    for (int e = 0; extra[e] != NULL; e++) {
        if (k == 9 + 48)
            return -E2BIG;
        argv[k++] = (char *)extra[e];
    }
    argv[k] = NULL;
    snprintf(a_num, sizeof(a_num), "%d", n);
    for (int i = 0; i < n && rc == 0; i++) {
        snprintf(a_index, sizeof(a_index), "%d", i);
        rc = ps_bench_spawn(argv, keep_logs, 1, &kids[i]);
    }
    for (int i = 0; rc < 0 && i < n; i++) {
        if (kids[i].pid > 0) {
            kill(kids[i].pid, SIGKILL);
            waitpid(kids[i].pid, NULL, 0);
        }
        kids[i].pid = 0;
    }
    return rc;
}

static void ps__on_alarm(int sig)
{
    (void)sig;
}

pid_t ps_bench_wait(pid_t pid, int *status, unsigned timeout_s)
{
    struct sigaction sa, old;
    pid_t r;
    int err;

    /* A blocking wait on the exit itself, cut off by an alarm (no
     * SA_RESTART, so waitpid returns EINTR) rather than a polling loop. */
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = ps__on_alarm;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, &old);
    alarm(timeout_s);
    r = waitpid(pid, status, 0);
    err = errno;
    alarm(0);
    sigaction(SIGALRM, &old, NULL);
    if (r >= 0)
        return r;
    return err == EINTR ? -PS_ETIMEOUT : -err;
}

int ps_bench_reap(ps_bench_child *c, unsigned timeout_s)
{
    int status = 0;

    if (c->pid <= 0)
        return 0;
    if (ps_bench_wait(c->pid, &status, timeout_s) == c->pid) {
        c->pid = 0;
        return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -PS_EPROTO;
    }
    kill(c->pid, SIGKILL);
    waitpid(c->pid, NULL, 0);
    c->pid = 0;
    return -PS_ETIMEOUT;
}

static double ps__cpu_of(int who)
{
    struct rusage ru;

    getrusage(who, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

double ps_bench_own_cpu(void)
{
    return ps__cpu_of(RUSAGE_SELF) + ps__cpu_of(RUSAGE_CHILDREN);
}

int ps_bench_machine_busy(double *busy_s)
{
    unsigned long long user, nice, sys, idle, iowait, irq, softirq;
    FILE *f = fopen("/proc/stat", "r");
    int n;

    if (f == NULL)
        return -errno;
    n = fscanf(f, "cpu %llu %llu %llu %llu %llu %llu %llu", &user, &nice, &sys, &idle, &iowait,
               &irq, &softirq);
    fclose(f);
    if (n != 7)
        return -PS_EFORMAT;
    *busy_s = (double)(user + nice + sys + irq + softirq) / (double)sysconf(_SC_CLK_TCK);
    return 0;
}
