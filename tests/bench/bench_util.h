/* Small helpers the benchmark programs share: size lists
 * on the command line ("4K,256K,4M"), sizes printed for people, the
 * comparison and percentile used on timing samples, and starting and reaping
 * the shardps processes a bench drives. Nothing here is part of shardps
 * itself; it exists so each bench states only what it measures. */
#ifndef PS_BENCH_UTIL_H
#define PS_BENCH_UTIL_H

#include <stddef.h>
#include <sys/types.h>

/* Parses "4K,256K,4M,1G" (suffixes K, M, G are powers of 1024; none is
 * bytes) into out[0..max). Returns the count, or -EINVAL for anything else
 * or more than max entries. */
int ps_bench_parse_sizes(const char *text, size_t *out, int max);

/* "4 KiB", "64 MiB", or "1000 B" into buf; returns buf. */
const char *ps_bench_size_text(size_t bytes, char *buf, size_t len);

/* Sorts v[0..n) ascending. */
void ps_bench_sort(double *v, size_t n);
/* Nearest-rank percentile (q in [0, 1]) of sorted v[0..n); NaN when n is 0. */
double ps_bench_pct(const double *v, size_t n, double q);

/* A child process and the port it reported on its ready pipe (0 if none). */
typedef struct {
    pid_t pid;
    int port;
} ps_bench_child;

/* Starts argv[0] with stdin (and, unless keep_logs, stdout and stderr) on
 * /dev/null, and without SHARDPS_* variables (ps_child_env). With want_port, the child gets a pipe
 * on descriptor 3 and this waits (up to 60 s) for the port it writes there, as shardps-cluster
 * does, so nothing polls for a listening socket. Returns 0 or a negative code
 * (-PS_ETIMEOUT, or -PS_EPROTO when it wrote no port); a failure leaves no
 * child behind. */
int ps_bench_spawn(char *const *argv, int keep_logs, int want_port, ps_bench_child *out);

/* Starts n shardps-server processes from bin on 127.0.0.1, server i with
 * --listen 127.0.0.1:0 --ready-fd 3 --server-index i --num-servers n and then
 * the flags in extra (NULL-terminated, at most 48), and reads back the port
 * each chose into kids[i]. Returns 0, -E2BIG, or ps_bench_spawn's error,
 * in which case the servers already started have been killed. */
int ps_bench_start_servers(const char *bin, int n, const char *const *extra, int keep_logs,
                           ps_bench_child *kids);

/* waitpid(pid, status, 0), pid -1 for any child, cut off after timeout_s
 * seconds. Returns the pid that exited, -PS_ETIMEOUT, or -errno. */
pid_t ps_bench_wait(pid_t pid, int *status, unsigned timeout_s);

/* Waits up to timeout_s for a child that should be exiting on its own, then
 * kills it; c->pid becomes 0 either way (0 already: nothing to do). Returns
 * 0 for a clean exit (status 0), -PS_ETIMEOUT or -PS_EPROTO otherwise. */
int ps_bench_reap(ps_bench_child *c, unsigned timeout_s);

/* Seconds of CPU time used so far by this process and by every child it has
 * waited for (getrusage SELF + CHILDREN), user and system. */
double ps_bench_own_cpu(void);

/* Seconds of CPU time the whole machine has spent busy (user, nice, system,
 * irq, softirq: every core, every process) since boot, from /proc/stat.
 * Returns 0 or a negative code. With ps_bench_own_cpu over the same window
 * it tells how much of the machine other processes took during a
 * measurement. */
int ps_bench_machine_busy(double *busy_s);

#endif
