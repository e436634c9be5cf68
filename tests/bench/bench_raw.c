/* The raw loopback TCP baseline of the network benches (bench_raw.h). */
#include <errno.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "bench_raw.h"
#include "ps_error.h"

/* CPU seconds and minor faults of another process so far, from
 * /proc/PID/stat (fields 10, 14 and 15). */
int ps_bench_proc_usage(pid_t pid, double *cpu_s, uint64_t *minflt)
{
    char path[64], buf[1024], *p;
    unsigned long long flt, ut, st;
    FILE *f;
    size_t n;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    f = fopen(path, "r");
    if (f == NULL)
        return -errno;
    n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* The command name may hold spaces and parentheses; fields resume after
     * the last ')'. */
    p = strrchr(buf, ')');
    if (p == NULL || sscanf(p + 1, " %*c %*d %*d %*d %*d %*d %*u %llu %*u %*u %*u %llu %llu", &flt,
                            &ut, &st) != 3)
        return -PS_EFORMAT;
    *cpu_s = (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
    *minflt = flt;
    return 0;
}

static int ps__write_full(int fd, const struct iovec *iov_in, int n)
{
    struct iovec iov[2];

    memcpy(iov, iov_in, (size_t)n * sizeof(*iov));
    while (n > 0) {
        ssize_t w = writev(fd, iov, n);
        if (w < 0 && errno == EINTR)
            continue;
        if (w < 0)
            return -errno;
        while (n > 0 && (size_t)w >= iov[0].iov_len) {
            w -= (ssize_t)iov[0].iov_len;
            memmove(iov, iov + 1, (size_t)(n - 1) * sizeof(*iov));
            n--;
        }
        if (n > 0) {
            iov[0].iov_base = (uint8_t *)iov[0].iov_base + w;
            iov[0].iov_len -= (size_t)w;
        }
    }
    return 0;
}

/* Returns 0, 1 at a clean end of stream before the first byte, or -errno. */
static int ps__read_full(int fd, void *buf, size_t len)
{
    size_t got = 0;

    while (got < len) {
        ssize_t r = read(fd, (uint8_t *)buf + got, len - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            return -errno;
        if (r == 0)
            return got == 0 ? 1 : -PS_ECLOSED;
        got += (size_t)r;
    }
    return 0;
}

static void ps__nodelay(int fd)
{
    int one = 1;

    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

int ps_bench_raw_serve(int ready_fd)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t alen = sizeof(a);
    int lfd, fd = -1, rc;
    uint8_t *buf = NULL;
    size_t cap = 0;
    char line[16];

    lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (lfd < 0)
        return -errno;
    if (bind(lfd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(lfd, 1) < 0 ||
        getsockname(lfd, (struct sockaddr *)&a, &alen) < 0) {
        rc = -errno;
        goto out;
    }
    snprintf(line, sizeof(line), "%d\n", ntohs(a.sin_port));
    if (write(ready_fd, line, strlen(line)) < 0) {
        rc = -errno;
        goto out;
    }
    close(ready_fd);
    fd = accept(lfd, NULL, NULL);
    if (fd < 0) {
        rc = -errno;
        goto out;
    }
    ps__nodelay(fd);
    for (;;) {
        uint64_t lens[2], len;
        struct iovec iov;

        rc = ps__read_full(fd, lens, sizeof(lens));
        if (rc != 0)
            break;
        len = lens[0] > lens[1] ? lens[0] : lens[1];
        if (len > cap) {
            uint8_t *p = realloc(buf, len);
            if (p == NULL) {
                rc = -ENOMEM;
                break;
            }
            /* Touch it now so page faults are not charged to the first steps. */
            memset(p, 0, len);
            buf = p;
            cap = len;
        }
        rc = ps__read_full(fd, buf, lens[0]);
        if (rc != 0)
            break;
        iov.iov_base = buf;
        iov.iov_len = lens[1];
        rc = ps__write_full(fd, &iov, 1);
        if (rc < 0)
            break;
    }
    rc = rc == 1 ? 0 : rc;
out:
    if (fd >= 0)
        close(fd);
    close(lfd);
    free(buf);
    return rc;
}

int ps_bench_raw_connect(int port)
{
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    if (fd < 0)
        return -errno;
    a.sin_port = htons((uint16_t)port);
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
        int err = -errno;
        close(fd);
        return err;
    }
    ps__nodelay(fd);
    return fd;
}

int ps_bench_raw_step(void *ctx)
{
    ps_bench_raw *r = ctx;
    size_t off = 0;
    int rc;

    for (int s = 0; s < r->n; s++) {
        uint64_t lens[2] = {r->req[s], r->reply[s]};
        struct iovec iov[2] = {{lens, sizeof(lens)}, {r->send + off, r->req[s]}};
        rc = ps__write_full(r->fds[s], iov, 2);
        if (rc < 0)
            return rc;
        off += r->req[s];
    }
    off = 0;
    for (int s = 0; s < r->n; s++) {
        rc = ps__read_full(r->fds[s], r->recv + off, r->reply[s]);
        if (rc != 0)
            return rc < 0 ? rc : -PS_ECLOSED;
        off += r->reply[s];
    }
    return 0;
}

int ps_bench_raw_start(const char *self_bin, int n, ps_bench_child *kids)
{
    char *argv[] = {(char *)self_bin, "--raw-server", NULL};

    for (int s = 0; s < n; s++) {
        int rc = ps_bench_spawn(argv, 1, 1, &kids[s]);
        if (rc < 0)
            return rc;
    }
    return 0;
}
