/* The raw loopback TCP baseline the network benches measure shardps
 * against: an echo-like server (the bench binary re-executed with
 * --raw-server) and the blocking client side, with the same socket option
 * shardps uses (TCP_NODELAY). A request is [u64 length][u64 reply
 * length][length bytes]; the server answers with reply-length bytes from the
 * buffer it read into (zeros past what it read). Nothing here is part of
 * shardps itself. */
#ifndef PS_BENCH_RAW_H
#define PS_BENCH_RAW_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "bench_util.h"

#define PS_BENCH_RAW_MAX 8

/* A client's connections to n raw servers and what one step moves to and
 * from each; send and recv (owned by the caller) hold the sum of req and of
 * reply bytes, server after server. */
typedef struct {
    int fds[PS_BENCH_RAW_MAX];
    size_t req[PS_BENCH_RAW_MAX], reply[PS_BENCH_RAW_MAX];
    int n;
    uint8_t *send, *recv;
} ps_bench_raw;

/* The raw server's main: listens on 127.0.0.1:0, writes its port and a
 * newline to ready_fd, serves one client until it closes. Returns 0 or
 * -errno. */
int ps_bench_raw_serve(int ready_fd);

/* Starts n raw servers (self_bin --raw-server), reading back their ports into kids.
 * Returns 0 or ps_bench_spawn's error (those started are left in kids). */
int ps_bench_raw_start(const char *self_bin, int n, ps_bench_child *kids);

/* A blocking TCP_NODELAY connection to 127.0.0.1:port; the fd or -errno. */
int ps_bench_raw_connect(int port);

/* One step: every server's request goes out (blocking writes, in server
 * order), then every reply is read back. ctx is a ps_bench_raw. Returns 0
 * or a negative code. */
int ps_bench_raw_step(void *ctx);

/* CPU seconds and minor faults of another process so far (/proc/PID/stat). */
int ps_bench_proc_usage(pid_t pid, double *cpu_s, uint64_t *minflt);

#endif
