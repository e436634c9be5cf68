/* libshardps: the client of a shardps job, for any program.
 *
 * A job is a set of parameter servers holding a table of named float32
 * tensors; each worker pulls the weights, computes gradients on its data and
 * pushes them back, and the servers apply them in sync, async or ssp mode
 * (chosen on the servers). This is the same client, on the same wire
 * protocol, as shardps-worker's: C workers and library users can share one
 * job.
 *
 * Lifecycle of a handle:
 *   shardps_new            servers, rank, world size (nothing is sent yet)
 *   shardps_set_option     optional: "auth-token-file", "seed", "chunk-bytes", ...
 *   shardps_declare        each tensor of the table (or shardps_declare_mlp);
 *                          or nothing, to join the job's table as the servers hold it
 *   shardps_connect        handshake with every server; learns the start clock
 *                          (and, joining, the tensors: shardps_tensor_count/info/shape)
 *   loop: shardps_push (each tensor) / shardps_pull / shardps_wait
 *   shardps_close          leave the job (or shardps_abandon: come back later)
 *
 * Every function returns 0 (or a count) or a negative code: a negated errno
 * value or one of SHARDPS_E* below. shardps_strerror names a code;
 * shardps_last_error gives the sentence that explains the last failure on a
 * handle. No function exits or aborts on bad input. A handle is not
 * thread-safe: one thread at a time. Buffers passed to push and pull are
 * borrowed until shardps_wait returns (shardps_push_copy's: only during the
 * call); shardps_pull_into is the pull that is told its buffers' sizes. */
#ifndef SHARDPS_H
#define SHARDPS_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SHARDPS_VERSION_MAJOR 1
#define SHARDPS_VERSION_MINOR 6

/* Codes beyond errno's (values as in the servers' logs). */
#define SHARDPS_EPROTO    (-10001) /* a server broke the protocol or lied */
#define SHARDPS_EVERSION  (-10002) /* protocol version mismatch */
#define SHARDPS_ETOOBIG   (-10003) /* frame exceeds size limit */
#define SHARDPS_ECRC      (-10004) /* payload checksum mismatch */
#define SHARDPS_EFORMAT   (-10005) /* malformed file */
#define SHARDPS_EMISMATCH (-10006) /* model or job mismatch */
#define SHARDPS_EREJECTED (-10007) /* a server refused us */
#define SHARDPS_ECLOSED   (-10008) /* a server went away: reconnecting may help */
#define SHARDPS_ETIMEOUT  (-10009) /* a server was unreachable or silent */

/* Initial values, a pure function of (seed, tensor, element). */
#define SHARDPS_INIT_ZERO           0
#define SHARDPS_INIT_HE_UNIFORM     1 /* U(-b, b), b = sqrt(6 / fan_in) */
#define SHARDPS_INIT_XAVIER_UNIFORM 2 /* U(-b, b), b = sqrt(6 / (fan_in + fan_out)) */

/* What a tensor is (1.3): a parameter the servers' optimizer updates from
 * the pushed gradients; a buffer only rank 0 writes, every step
 * (shardps_write_buffers: a batch norm's running statistics); a frozen
 * tensor nobody changes (requires_grad=False). Buffers and frozen tensors
 * are never pushed, and take no part in a step's barrier. */
#define SHARDPS_KIND_PARAMETER 0
#define SHARDPS_KIND_BUFFER    1
#define SHARDPS_KIND_FROZEN    2
/* The element type of a tensor's values (1.3): parameters are float32;
 * buffers and frozen tensors may be int64 (a counter), carried exactly. */
#define SHARDPS_DTYPE_FLOAT32 0
#define SHARDPS_DTYPE_INT64   1

typedef struct shardps shardps;

typedef struct {
    uint64_t dropped;        /* chunks the servers dropped: late, or rejected */
    uint64_t bytes_sent;     /* payload bytes pushed */
    uint64_t bytes_received; /* payload bytes pulled */
    uint64_t staleness_max;  /* largest staleness a server reported */
    uint64_t staleness_sum;  /* over staleness_count acknowledged pushes */
    uint64_t staleness_count;
    uint64_t acked;    /* chunks the servers acknowledged */
    uint64_t rejected; /* of dropped, those refused as non-finite or over --max-grad-norm */
} shardps_stats;

/* The library's version, "1.6.0" (1.1 added joining and shardps_tensor_shape;
 * 1.2 shardps_set_stop_flag, and shardps_new_from_env and shardps_report for
 * programs a launcher starts; 1.3 shardps_pull_into and shardps_push_copy,
 * for callers such as a binding whose buffers are not theirs to keep, and
 * a model's own values, buffers and frozen tensors: shardps_declare_values,
 * shardps_write_buffers, shardps_tensor_kind); 1.4 the embedding tables, at
 * the end of this header; 1.5 shardps_push_unused; 1.6 the evaluator,
 * after them: shardps_new_evaluator, shardps_flush, shardps_snapshot_clocks,
 * shardps_table). */
const char *shardps_version(void);

/* A static description of code ("timed out"); never NULL. */
const char *shardps_strerror(int code);

/* A new handle for worker rank of world, to the n_servers servers
 * ("host:port", in the job's server order; copied). *out is NULL on failure.
 * Returns 0, -EINVAL (bad rank/world/address) or -ENOMEM. */
int shardps_new(shardps **out, const char *const *servers, int n_servers, int rank, int world);

/* Sets an option before shardps_connect; value is text (copied). The job
 * options are checked by the same table as shardps-worker's flags of the
 * same names (bounds, defaults and words as its --help shows them):
 *   auth-token-file PATH   prove to the servers we share this secret
 *   seed N                 the initial weights' seed of declared tensors (default 1)
 *   chunk-bytes N          the job's chunk size (default 1048576); a joiner too
 *                          must give the job's, or the servers refuse it
 *   connect-timeout S      keep trying to reach the servers, and joining, to
 *                          find the tensors declared (default 30)
 *   request-timeout S      a server owing an answer this long fails (0 or auto: auto)
 *   total-steps N          the steps this worker plans, at most 2^31-1: no
 *                          clock past it is believed; with job-settings given,
 *                          the servers' cosine schedule spans the most any
 *                          rank plans (without, it is theirs: --total-steps)
 *   compress none|fp16|bf16  how gradients travel
 *   max-payload N          the largest frame accepted
 *   progress-every N       shardps_report: a progress line every N steps (default 100)
 * and the library's own:
 *   job-settings TEXT      the job settings a shardps-worker sends (and
 *                          shardps_new_from_env takes from SHARDPS_JOB_SETTINGS);
 *                          when they say cosine with total-steps 0,
 *                          shardps_connect refuses a worker planning no steps
 *   log-level debug|info|warn|error|none   the library's lines on stderr
 *   report-fd FD           report to the launcher on this open descriptor
 *                          (shardps_report; default: SHARDPS_REPORT_FD when
 *                          it names one, else -1: to the log)
 * Returns 0, -EINVAL (unknown name, bad value; see shardps_last_error: "option
 * seed: '-1' is out of range (accepted: 0 to 2147483647)") or -EBUSY (already
 * connected). */
int shardps_set_option(shardps *h, const char *name, const char *value);

/* A way to stop a handle that waits on its servers (Ctrl-C while it
 * connects, or while the job waits for another worker): once *flag is
 * non-zero, shardps_connect and shardps_reconnect return -EINTR at once,
 * shardps_last_error saying what they waited for. shardps_wait (and so a
 * pull) lets the step end as it would, so that the program stops at the
 * step's boundary: every push is acknowledged first, and the pull is given
 * up (-EINTR) only when a server said it holds it for other workers, or it
 * has not come 5 s after the stop was seen. A program's SIGINT/SIGTERM
 * handler sets the flag; a signal does not wake the handle, so while it
 * waits it looks at the flag every 100 ms. Nothing is logged. After -EINTR
 * the handle is done: shardps_abandon (come back later) or shardps_close.
 * The flag is borrowed and must outlive h; NULL removes it. Any time.
 * Returns 0 or -EINVAL. (1.2) */
int shardps_set_stop_flag(shardps *h, const volatile sig_atomic_t *flag);

/* Declares the next tensor of the table: name (at most 31 bytes), shape
 * [shape[0], ..., shape[ndim-1]] row-major (ndim 1..4), initialisation
 * SHARDPS_INIT_* with the fans its bound comes from (for a dense weight
 * [out, in]: fan_in in, fan_out out; a conv2d weight [out, in, kh, kw]:
 * in*kh*kw and out*kh*kw). Every worker and server of a job must declare the
 * same table in the same order: its fingerprint is checked in the handshake.
 * Returns 0, -EINVAL (a bad name, shape, kind or fan), -E2BIG (table full)
 * or -EBUSY (connected). */
int shardps_declare(shardps *h, const char *name, int ndim, const int64_t *shape, int init,
                    int fan_in, int fan_out);

/* Declares the next tensor with the caller's own initial values (1.3): the
 * servers draw nothing for it. name and shape as shardps_declare (names up
 * to 255 bytes); kind SHARDPS_KIND_*, dtype SHARDPS_DTYPE_* (int64 only for
 * a buffer or a frozen tensor); values its elements in row-major order,
 * nbytes long (numel times 4 or 8, else -EINVAL naming the tensor),
 * borrowed until shardps_connect returns (a rank 0 that then reconnects
 * before the job has started, and so is asked for them again, is refused:
 * start it anew). Only rank 0's values are sent (to servers that ask for
 * them: one restored from a checkpoint does not), and
 * every rank's first pull holds them bit for bit, whichever rank connects
 * first (the others wait for them within the connect timeout). Every rank
 * must declare the same table; the other ranks' values are never read, but
 * must be given. Returns 0, -EINVAL, -E2BIG (table full) or -EBUSY
 * (connected). */
int shardps_declare_values(shardps *h, const char *name, int ndim, const int64_t *shape, int kind,
                           int dtype, const void *values, size_t nbytes);

/* Declares the table of an MLP: layer sizes (input, hidden..., classes),
 * tensors fc1.weight [sizes[1], sizes[0]], fc1.bias, fc2.weight, ... He
 * initialisation, Xavier for the last layer, zero biases, replacing what
 * was declared before. Returns 0 or -EINVAL. */
int shardps_declare_mlp(shardps *h, const int *sizes, int n_sizes);

/* Connects to every server and handshakes; the servers check the table's
 * fingerprint and refuse a mismatch. With nothing declared it joins: it
 * adopts the table the servers hold (its seed too), refusing servers that
 * hold different ones (SHARDPS_EMISMATCH), and waits, within the connect
 * timeout, for a worker to declare the tensors to servers that hold none yet
 * (then SHARDPS_ETIMEOUT, saying so). The chunks are laid out from the
 * table, the server count and chunk-bytes, which the servers check against
 * theirs: a joiner's layout is the declarer's. Returns 0 or a negative code. */
int shardps_connect(shardps *h);
/* Drops the connections without a goodbye and connects again (after
 * SHARDPS_ECLOSED): the servers kept our place. */
int shardps_reconnect(shardps *h);

/* The tensor table. shardps_tensor_count returns the count or a negative
 * code; shardps_tensor_info writes the name (NUL-terminated, cut to
 * name_len) and element count of tensor i. */
int shardps_tensor_count(const shardps *h);
int shardps_tensor_info(const shardps *h, int i, char *name, size_t name_len, size_t *numel);
/* Writes the first max_ndim dimensions of tensor i's shape (row-major) into
 * shape and returns its ndim (1..4), or -EINVAL. */
int shardps_tensor_shape(const shardps *h, int i, int64_t *shape, int max_ndim);

/* Writes tensor i's kind (SHARDPS_KIND_*) and dtype (SHARDPS_DTYPE_*);
 * either pointer may be NULL. Returns 0 or -EINVAL. (1.3) */
int shardps_tensor_kind(const shardps *h, int i, int *kind, int *dtype);

/* The clock the job welcomed us at, and the (oldest) clock of the weights of
 * the last pull. */
int shardps_start_clock(const shardps *h, uint64_t *clock);
int shardps_weights_clock(const shardps *h, uint64_t *clock);

/* Starts pushing tensor's gradient (numel floats, borrowed until wait),
 * computed on the weights of the last pull. Once per tensor per step.
 * Returns 0, -EINVAL, -EBUSY (already pushed this step) or a connection
 * error. */
int shardps_push(shardps *h, int tensor, const float *grad, size_t numel);
/* Starts pulling the weights of step clock of every tensor into dest[i]
 * (n_dest == tensor count; each the tensor's numel floats, borrowed until
 * wait). In sync mode a pull completes once every worker pushed clock - 1.
 * It cannot see a buffer shorter than its tensor, and writes past its end:
 * shardps_pull_into, told the sizes, refuses one. */
int shardps_pull(shardps *h, uint64_t clock, float *const *dest, int n_dest);
/* shardps_push, except that the gradient is copied into a buffer the handle
 * owns before the call returns: grad is only read during the call, and may
 * be changed or freed at once (a training loop that zeroes its gradients
 * while they travel). Costs one copy of numel floats (docs/torch.md
 * measures it); the handle keeps one buffer of numel floats per tensor
 * pushed this way, until it is freed. After a shardps_wait that failed, the
 * copies may still be sent from: -EBUSY until shardps_reconnect. (1.3) */
int shardps_push_copy(shardps *h, int tensor, const float *grad, size_t numel);
/* Instead of a gradient, tells the servers that no forward of this worker
 * used tensor this step (PyTorch's unused parameter, DDP's
 * find_unused_parameters=True): it counts as the tensor's push of the step
 * and carries no bytes. In sync mode the servers average it as a zero with
 * the other ranks' gradients, as DDP does for a parameter some ranks used;
 * when no rank used the tensor in a step, the servers leave it as it was:
 * weights, optimizer state (momentum, Adam's moments) and its update count
 * (Adam's bias correction), as torch.optim skips a parameter whose .grad is
 * None. In async and ssp mode nothing is applied for it. Once per tensor
 * per step, as shardps_push. Returns 0, -EINVAL (no such tensor), -EPERM (a
 * buffer or frozen tensor), -EBUSY (already pushed this step) or a
 * connection error. (1.5) */
int shardps_push_unused(shardps *h, int tensor);
/* shardps_pull, told the size of each destination: counts[i] is the number
 * of elements dest[i] holds and must be tensor i's numel (shardps_tensor_info),
 * else nothing is started or written and -EINVAL's sentence names the
 * tensor ("shardps_pull_into: the destination of fc1.bias holds 2 floats;
 * it needs 16"). An int64 tensor's destination (shardps_tensor_kind) is
 * an int64_t array of numel elements, cast to float *. counts is read during the call; dest and the
 * buffers it points to are borrowed until wait, as shardps_pull's. Returns 0, -EINVAL, -EBUSY (a
 * pull in flight) or a connection error. (1.3) */
int shardps_pull_into(shardps *h, uint64_t clock, float *const *dest, const size_t *counts,
                      int n_dest);
/* Rank 0, connected: writes the buffers whose values[t] is not NULL (one
 * entry per tensor of the table, n_values of them; nbytes[t] the bytes of
 * values[t]: the buffer's numel times 4 for float32, 8 for int64, else
 * -EINVAL naming it; a non-buffer entry must be NULL). Called before a
 * step's pushes, every rank's pull of the next step holds them, exactly
 * (DDP's broadcast of rank 0's buffers). The values are copied into the
 * outgoing frames during the call. Returns 0, -EINVAL (a wrong entry, a
 * rank other than 0, not connected) or a connection error. (1.3) */
int shardps_write_buffers(shardps *h, const void *const *values, const size_t *nbytes,
                          int n_values);
/* Moves what can move without blocking, and sends the heartbeats the
 * servers asked for (a worker silent for their --heartbeat-timeout leaves
 * the job): a loop that computes or tests for longer than that calls it now
 * and then. Returns 0 or the first error. */
int shardps_progress(shardps *h);
/* Blocks until every started push and pull completed (each wait has a
 * deadline: request-timeout). */
int shardps_wait(shardps *h);

int shardps_stats_get(const shardps *h, shardps_stats *out);

/* The sentence explaining the last error on h ("" if none); valid until the
 * next call on h. h NULL: the last shardps_new failure of this thread. */
const char *shardps_last_error(const shardps *h);

/* Completes the pushes and pulls still in flight (within their deadlines),
 * says goodbye (this worker finished: barriers stop counting it) and frees
 * h. Returns 0. NULL is allowed. */
int shardps_close(shardps *h);
/* Frees h without a goodbye: the servers keep waiting for this rank. */
void shardps_abandon(shardps *h);

/* Under a launcher (1.2). shardps-run starts each copy of a program with the
 * job in its environment (docs/run.md), as a person may set it by hand:
 *   SHARDPS_SERVERS   HOST:PORT,... in the job's server order
 *   SHARDPS_RANK      this worker's rank, 0..SHARDPS_WORKERS-1
 *   SHARDPS_WORKERS   the worker count (the world)
 *   SHARDPS_<NAME>    any option of shardps_set_option's job options by its
 *                     name (SHARDPS_AUTH_TOKEN_FILE: a file's path, never the
 *                     token; SHARDPS_CHUNK_BYTES, SHARDPS_SEED, ...)
 *   SHARDPS_REPORT_FD the launcher's report pipe
 *   SHARDPS_JOB_SETTINGS  the job's settings (job-settings), which make the
 *                     steps this worker plans (total-steps) count toward the
 *                     servers' cosine schedule
 * shardps_new_from_env is shardps_new with those, each option checked as
 * shardps-worker checks the same variable; the process's log lines name it
 * "worker R". Every handle, however made, reports to SHARDPS_REPORT_FD
 * (report-fd): "start" on connect, "done" on close, so the launcher knows
 * a worker that finished from one that left early. Returns 0, -EINVAL (a
 * variable missing or wrong: shardps_last_error(NULL) names it) or
 * -ENOMEM. */
int shardps_new_from_env(shardps **out);

/* Tells the launcher how training goes: the program has done step steps of
 * the job (a count that never goes back: the clock of the weights it will
 * pull next), with loss the training loss of the latest of them (NaN: not
 * known) over samples samples since its last call. Every progress-every
 * steps that becomes one progress line: the launcher shows the whole job's
 * (step, loss, samples/s) and sums them up at the end; without report-fd
 * the line goes to the log. After shardps_connect, which reports the start;
 * shardps_close reports the end (shardps_abandon does not: the launcher
 * then knows the program left without finishing). Returns 0 or -EINVAL
 * (not connected, or step before the last one reported). */
int shardps_report(shardps *h, uint64_t step, double loss, uint64_t samples);

/* Embedding tables (1.4): tables of rows of dim float32 addressed by any
 * 64-bit ID, held once, sharded by a hash of (table, ID) over the servers,
 * of which each step moves only the rows it touches. Declared with the
 * tensors (every worker the same, in the same order, before connecting;
 * a joiner learns them), a table's id is its position among the row tables.
 * A row never pushed reads as its initializer's values, a pure function
 * of (seed, table, ID). */
#define SHARDPS_ROW_INIT_ZEROS   0
#define SHARDPS_ROW_INIT_UNIFORM 1 /* uniform(lo, hi) */
#define SHARDPS_ROW_INIT_NORMAL  2 /* normal(mean, std) truncated to [lo, hi] */
typedef struct {
    const char *name;      /* as a tensor's name (copied) */
    uint32_t dim;          /* 1..65536 */
    int init;              /* SHARDPS_ROW_INIT_* */
    double lo, hi;         /* uniform's range; normal's bounds (-INFINITY, INFINITY: none) */
    double mean, std;      /* normal */
    const char *optimizer; /* NULL or "": the job's; else sgd, nesterov, adam, adamw,
                              adagrad or rowwise-adagrad with the job's hyper-parameters */
    uint32_t admit_after;  /* 0, 1: a row is stored at its first push; N: at its Nth */
    uint32_t expire_after; /* 0: never; T: a row untouched for T steps reads as new */
    uint64_t capacity;     /* 0: unbounded; else the most rows one server stores */
} shardps_row_table;
/* Declares the next row table; size is sizeof(shardps_row_table). Returns
 * 0, -EINVAL (a field out of range, named by shardps_last_error; a name
 * declared before) or -EBUSY (connected). */
int shardps_declare_rows(shardps *h, const shardps_row_table *t, size_t size);
/* The id of the row table named name and (dim may be NULL) its dim, or
 * -ENOENT. */
int shardps_row_table_find(const shardps *h, const char *name, uint32_t *dim);
/* Writes the rows of ids[0..n) as of step clock into out (out_len floats,
 * which must be n x dim). IDs may repeat: each server is asked once for
 * each unique ID it holds, in several requests when they are more than
 * the job's --max-row-ids. Blocks until answered (completing the pushes
 * and pulls started before); in sync mode it waits, as a pull does, for
 * every worker's rows push of step clock - 1 (the server says so, as for
 * a dense pull, and a timeout names the ranks it waits for). Returns 0,
 * -EINVAL (no such table, a NULL pointer, out_len not n x dim, n of 2^31
 * or more) or the error of the wait. */
int shardps_pull_rows(shardps *h, int table, uint64_t clock, const uint64_t *ids, size_t n,
                      float *out, size_t out_len);
/* Pushes the gradients grads[i x dim ..] (grads_len floats, n x dim) of
 * ids[i], computed on the weights of the last pull, its clock; repeated
 * IDs' gradients are summed. In sync mode call it once per row table per
 * step, n 0 if the batch touched none: every server needs each worker's
 * push of each table for the step to complete. A server takes one push
 * per table per step from a worker (in every mode), so a table used twice
 * in a step must have its gradients summed into one call: a second push
 * of a table on the same weights is refused (-EALREADY), as is a push
 * whose unique IDs for one server exceed --max-row-ids (-E2BIG; it cannot
 * be split), both before anything is sent. Blocks until acknowledged.
 * Returns as shardps_pull_rows. */
int shardps_push_rows(shardps *h, int table, const uint64_t *ids, size_t n, const float *grads,
                      size_t grads_len);

/* The evaluator (1.6): a handle that follows a running job without taking
 * part in it (docs/architecture.md, "The evaluator"), as shardps-eval
 * --follow does. It declares nothing and joins the job's table (declaring
 * is refused: -EINVAL), holds no rank (none is sent), never pushes or
 * writes (-EPERM), and each pull, whatever its clock, is a snapshot of the
 * weights as they are, answered at once without waiting for a step. The
 * servers give evaluators handshake slots of their own, so one never keeps
 * a worker out. It never reports to a launcher (SHARDPS_REPORT_FD is not
 * read; shardps_report returns -EINVAL). Otherwise a handle as any:
 * options, connect, pull, wait, close. Returns as shardps_new. */
int shardps_new_evaluator(shardps **out, const char *const *servers, int n_servers);
/* An evaluator's last snapshot: the lowest and highest steps applied among
 * the chunks it got, over every server; equal when every chunk had taken in
 * the same steps (always, in sync mode between steps). Returns 0, or
 * -EINVAL (not an evaluator, not connected, or no snapshot yet). */
int shardps_snapshot_clocks(const shardps *h, uint64_t *lo, uint64_t *hi);
/* Sends the pushes and pulls started so far at once, without waiting for
 * their answers (shardps_wait would send them first thing): a program can
 * then tell others that its request is on its way. Returns 0 or the first
 * error, as shardps_progress. */
int shardps_flush(shardps *h);
/* The tensor table h holds (what it declared, or once connected the
 * job's), serialized as proto/shardps.proto's TensorTable message, as a
 * TABLE frame carries it: the seed, each tensor's name, shape,
 * initialisation, fans, kind and dtype, and the row tables. Writes it into
 * buf (the caller's, len bytes) when len is at least its length, else
 * nothing (buf may then be NULL).
 * Returns its length in bytes (at most 2 MiB), or -EINVAL, -ENOMEM, -E2BIG
 * (a declared table too large to send). */
int shardps_table(const shardps *h, void *buf, size_t len);

#ifdef __cplusplus
}
#endif

#endif
