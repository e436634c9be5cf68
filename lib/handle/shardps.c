/* libshardps (include/shardps.h): the public face of the worker's key-value
 * client. Checks every argument and the handle's state before the client
 * sees them, and keeps the sentence behind each failure on the handle. */
#include "shardps_handle.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"
#include "partition.h"
#include "ps_error.h"
#include "ps_log.h"
#include "server_list.h"
#include "tensor_table.h"
#include "transport.h"

_Static_assert(SHARDPS_EPROTO == -PS_EPROTO && SHARDPS_ETIMEOUT == -PS_ETIMEOUT &&
                   SHARDPS_ECLOSED == -PS_ECLOSED && SHARDPS_EMISMATCH == -PS_EMISMATCH,
               "the public codes are ps_error.h's");
_Static_assert(SHARDPS_INIT_ZERO == PS_INIT_ZERO && SHARDPS_INIT_HE_UNIFORM == PS_INIT_HE_UNIFORM &&
                   SHARDPS_INIT_XAVIER_UNIFORM == PS_INIT_XAVIER_UNIFORM,
               "the public init kinds are model_spec.h's");

/* shardps_new's failures have no handle to carry their sentence. */
static _Thread_local char ps__new_error[512];

int ps_shardps_err(shardps *h, int code, const char *fmt, ...)
{
    va_list ap;
    char *buf = h ? h->error : ps__new_error;
    size_t len = h ? sizeof(h->error) : sizeof(ps__new_error);

    va_start(ap, fmt);
    vsnprintf(buf, len, fmt, ap);
    va_end(ap);
    return code;
}

/* A failure of the client: its own sentence when it has one. */
int ps_shardps_kv_err(shardps *h, int rc, const char *doing)
{
    const char *why = h->kv ? ps_kv_client_last_error(h->kv) : "";

    if (*why)
        return ps_shardps_err(h, rc, "%s: %s", doing, why);
    return ps_shardps_err(h, rc, "%s: %s", doing, ps_strerror(rc));
}

const char *shardps_version(void)
{
    return "1.6.0";
}

const char *shardps_strerror(int code)
{
    return ps_strerror(code);
}

const char *shardps_last_error(const shardps *h)
{
    return h ? h->error : ps__new_error;
}

/* The client's numbers from the job options the handle holds: one place,
 * after every option set (the texts, the auth token file and compress, are
 * taken the moment they are set). */
static void ps__client_config(shardps *h)
{
    h->cfg.spec.seed = (uint64_t)h->opts.seed;
    h->cfg.chunk_bytes = (size_t)h->opts.chunk_bytes;
    h->cfg.max_payload = (size_t)h->opts.max_payload;
    h->cfg.max_row_ids = (uint64_t)h->opts.max_row_ids;
    h->cfg.connect_timeout_s = h->opts.connect_timeout;
    h->cfg.request_timeout_s = h->opts.request_timeout;
    h->cfg.total_steps = (uint64_t)h->opts.total_steps;
}

/* A text option just set through its row: taken now, since value is only
 * borrowed. Returns 0 or a negative code with the sentence. */
static int ps__take_text(shardps *h, const char *name, const char *value, const char *origin)
{
    static const char *const names[] = {"none", "fp16", "bf16"};
    static const ps_compress kinds[] = {PS_COMPRESS_NONE, PS_COMPRESS_FP16, PS_COMPRESS_BF16};
    char why[512];
    int loose = 0, rc;

    if (strcmp(name, "compress") == 0) {
        for (int i = 0; i < 3; i++)
            if (strcmp(value, names[i]) == 0)
                h->cfg.compress = kinds[i];
        h->opts.compress = NULL;
        return 0;
    }
    h->opts.auth_token_file = NULL;
    rc = ps_auth_load_key(value, h->auth_key, &loose, why, sizeof(why));
    if (rc < 0)
        return ps_shardps_err(h, rc, "%s: %s", origin, why);
    if (loose)
        ps_warn("%s is readable by other users; chmod 600 it", value);
    h->cfg.auth_key = h->auth_key;
    return 0;
}

/* report-fd: the launcher's pipe (job_report.h); it must be open now.
 * origin names how it was given. */
static int ps__shardps_report_fd(shardps *h, const char *value, const char *origin)
{
    char *end;
    long fd = strtol(value, &end, 10);

    if (end == value || *end != '\0' || fd < -1 || fd > 1 << 20)
        return ps_shardps_err(h, -EINVAL, "%s: '%s' is not a descriptor (accepted: -1 to %d)",
                              origin, value, 1 << 20);
    if (fd >= 0 && fcntl((int)fd, F_GETFD) < 0)
        return ps_shardps_err(h, -EINVAL, "%s: descriptor %ld is not open (%s)", origin, fd,
                              strerror(errno));
    h->report.fd = (int)fd;
    return 0;
}

/* Under a launcher (shardps-run, shardps-cluster) every handle reports to
 * it, whatever made it: the launcher tells a worker that finished from one
 * that left early by these lines. A descriptor that is not open (a child
 * process of the worker's, which did not inherit it) means no reports, said
 * once; a program that reports by itself sets report-fd -1. */
static void ps__report_to_launcher(shardps *h)
{
    const char *v = getenv("SHARDPS_REPORT_FD");

    if (v && *v && ps__shardps_report_fd(h, v, "SHARDPS_REPORT_FD") < 0) {
        ps_warn("%s; not reporting to a launcher", h->error);
        h->error[0] = '\0';
    }
}

/* shardps_new and shardps_new_evaluator (rank and world unused): fn names
 * the caller in the sentences. */
static int ps__shardps_make(shardps **out, const char *const *servers, int n_servers, int rank,
                            int world, int evaluator, const char *fn)
{
    shardps *h;

    if (out == NULL)
        return ps_shardps_err(NULL, -EINVAL, "%s: out is NULL", fn);
    *out = NULL;
    if (servers == NULL || n_servers < 1 || n_servers > PS__HANDLE_MAX_SERVERS)
        return ps_shardps_err(NULL, -EINVAL, "%s: need 1 to %d server addresses, got %d", fn,
                              PS__HANDLE_MAX_SERVERS, servers == NULL ? 0 : n_servers);
    if (!evaluator && (world < 1 || rank < 0 || rank >= world))
        return ps_shardps_err(NULL, -EINVAL, "%s: rank %d is not in 0..world-1 (world %d)", fn,
                              rank, world);
    for (int s = 0; s < n_servers; s++) {
        struct sockaddr_storage addr;
        char why[256] = "longer than any address";
        if (servers[s] == NULL || strlen(servers[s]) >= PS__ADDR_MAX ||
            ps_parse_hostport(servers[s], &addr, 0, why, sizeof(why)) < 0)
            return ps_shardps_err(NULL, -EINVAL, "%s: server address %d ('%s'): %s", fn, s,
                                  servers[s] ? servers[s] : "(null)",
                                  servers[s] ? why : "not HOST:PORT");
    }
    h = calloc(1, sizeof(*h));
    if (h == NULL || (h->servers = calloc((size_t)n_servers, sizeof(char *))) == NULL)
        goto fail;
    for (int s = 0; s < n_servers; s++)
        if ((h->servers[s] = strdup(servers[s])) == NULL)
            goto fail;
    h->cfg.servers = (const char *const *)h->servers;
    h->cfg.n_servers = n_servers;
    h->cfg.rank = rank;
    h->cfg.world = world;
    h->cfg.evaluator = evaluator;
    ps_job_report_init(&h->report, -1, rank);
    /* An evaluator says what it follows by itself: the launcher's lines
     * are a worker's. */
    if (!evaluator)
        ps__report_to_launcher(h);
    ps_job_options_defaults(&h->opts);
    h->n_options = ps_job_options_flags(&h->opts, PS_JOB_LIBRARY, h->options, PS__MAX_OPTIONS);
    if (h->n_options < 0)
        goto fail;
    ps__client_config(h);
    *out = h;
    return 0;
fail:
    if (h)
        h->cfg.n_servers = n_servers;
    shardps_abandon(h);
    return ps_shardps_err(NULL, -ENOMEM, "%s: out of memory", fn);
}

int shardps_new(shardps **out, const char *const *servers, int n_servers, int rank, int world)
{
    return ps__shardps_make(out, servers, n_servers, rank, world, 0, "shardps_new");
}

int shardps_new_evaluator(shardps **out, const char *const *servers, int n_servers)
{
    return ps__shardps_make(out, servers, n_servers, 0, 0, 1, "shardps_new_evaluator");
}

static int ps__log_level(shardps *h, const char *value)
{
    static const char *const names[] = {"debug", "info", "warn", "error"};

    for (int i = 0; i < 4; i++)
        if (strcmp(value, names[i]) == 0) {
            ps_log_set_level((ps_log_level)i);
            return 0;
        }
    if (strcmp(value, "none") == 0) {
        ps_log_set_level(PS_LOG_OFF);
        return 0;
    }
    return ps_shardps_err(h, -EINVAL,
                          "option log-level: '%s' is not debug, info, warn, error or none", value);
}

int ps_shardps_set_row(shardps *h, const ps_flag *f, const char *value, const char *origin)
{
    if (strcmp(f->name, "seed") == 0 && h->declared)
        return ps_shardps_err(h, -EBUSY, "%s: set the seed before declaring the tensors", origin);
    if (ps_flag_check_set(f, value, origin, h->error, sizeof(h->error)) < 0)
        return -EINVAL;
    if (f->type == PS_FLAG_STRING || f->type == PS_FLAG_CHOICE)
        return ps__take_text(h, f->name, value, origin);
    ps__client_config(h);
    return 0;
}

int shardps_set_option(shardps *h, const char *name, const char *value)
{
    char origin[64];
    int i;

    if (h == NULL)
        return -EINVAL;
    if (name == NULL || value == NULL)
        return ps_shardps_err(h, -EINVAL, "shardps_set_option: name or value is NULL");
    if (h->kv)
        return ps_shardps_err(h, -EBUSY, "option %s: set options before shardps_connect", name);
    snprintf(origin, sizeof(origin), "option %.40s", name);
    /* The library's own three; every other option is a job option. */
    if (strcmp(name, "job-settings") == 0) {
        char *copy = strdup(value);
        if (copy == NULL)
            return ps_shardps_err(h, -ENOMEM, "option job-settings: out of memory");
        free(h->job_settings);
        h->job_settings = copy;
        h->cfg.job_settings = copy;
        return 0;
    }
    if (strcmp(name, "log-level") == 0)
        return ps__log_level(h, value);
    if (strcmp(name, "report-fd") == 0)
        return ps__shardps_report_fd(h, value, origin);
    i = ps_flag_find(h->options, h->n_options, name);
    if (i < 0)
        return ps_shardps_err(h, -EINVAL, "unknown option '%s'", name);
    return ps_shardps_set_row(h, &h->options[i], value, origin);
}

int shardps_set_stop_flag(shardps *h, const volatile sig_atomic_t *flag)
{
    if (h == NULL)
        return -EINVAL;
    /* Kept for the clients a reconnect creates, and given to this one. */
    h->cfg.stop = flag;
    if (h->kv)
        ps_kv_client_set_stop_flag(h->kv, flag);
    return 0;
}

int shardps_declare_mlp(shardps *h, const int *sizes, int n_sizes)
{
    int rc = ps_shardps_may_declare(h, "shardps_declare_mlp");
    uint64_t seed;

    if (rc < 0)
        return rc;
    if (sizes == NULL)
        return ps_shardps_err(h, -EINVAL, "shardps_declare_mlp: sizes is NULL");
    seed = h->cfg.spec.seed;
    ps_model_spec_free(&h->cfg.spec);
    free(h->values);
    h->values = NULL;
    h->n_values = 0;
    if (ps_model_spec_init_mlp(&h->cfg.spec, sizes, n_sizes, seed) < 0) {
        h->cfg.spec.seed = seed;
        h->declared = 0;
        return ps_shardps_err(
            h, -EINVAL,
            "shardps_declare_mlp: need 2 to %d sizes (input, hidden..., classes), "
            "each 1..%d",
            PS_MAX_LAYERS + 1, 1 << 20);
    }
    h->declared = 1;
    return 0;
}

int shardps_declare(shardps *h, const char *name, int ndim, const int64_t *shape, int init,
                    int fan_in, int fan_out)
{
    int dims[PS_MAX_DIMS];
    int rc;

    if ((rc = ps_shardps_may_declare(h, "shardps_declare")) < 0)
        return rc;
    if (name == NULL || shape == NULL || ndim < 1 || ndim > PS_MAX_DIMS)
        return ps_shardps_err(h, -EINVAL, "shardps_declare: need a name and 1 to %d dimensions",
                              PS_MAX_DIMS);
    if (init < SHARDPS_INIT_ZERO || init > SHARDPS_INIT_XAVIER_UNIFORM)
        return ps_shardps_err(h, -EINVAL, "shardps_declare %s: no initialisation kind %d", name,
                              init);
    for (int d = 0; d < ndim; d++) {
        if (shape[d] < 1 || shape[d] > INT32_MAX)
            return ps_shardps_err(h, -EINVAL, "shardps_declare %s: dimension %d is %lld", name, d,
                                  (long long)shape[d]);
        dims[d] = (int)shape[d];
    }
    rc = ps_model_spec_add_tensor(&h->cfg.spec, name, ndim, dims, (ps_init_kind)init, fan_in,
                                  fan_out);
    if (rc == -E2BIG)
        return ps_shardps_err(h, rc,
                              "shardps_declare %s: the table is full (%d tensors) or the tensor "
                              "exceeds 2^31 elements",
                              name, PS_MAX_TENSORS);
    if (rc < 0)
        return ps_shardps_err(
            h, rc,
            "shardps_declare %s: a bad name (1..255 bytes of printable ASCII but the "
            "space) or fan (%d, %d)",
            name, fan_in, fan_out);
    h->declared = 1;
    return 0;
}

static int ps__shardps_connect(shardps *h)
{
    int rc = 0;

    /* One entry per tensor, whichever way each was declared. */
    if (h->values && h->n_values < h->cfg.spec.n_tensors) {
        const void **v = realloc(h->values, (size_t)h->cfg.spec.n_tensors * sizeof(*v));
        if (v == NULL)
            return ps_shardps_err(h, -ENOMEM, "out of memory");
        memset(v + h->n_values, 0, (size_t)(h->cfg.spec.n_tensors - h->n_values) * sizeof(*v));
        h->values = v;
        h->n_values = h->cfg.spec.n_tensors;
    }
    h->cfg.values = h->values;
    /* An evaluator joins the job's table afresh at every connect: the one
     * it learnt before may have been withdrawn and declared anew. */
    if (h->cfg.evaluator)
        ps_model_spec_free(&h->cfg.spec);
    rc = ps_kv_client_init(&h->kv, &h->cfg);

    if (rc < 0) {
        h->kv = NULL;
        return ps_shardps_err(h, rc, "cannot create the client: %s", ps_strerror(rc));
    }
    rc = ps_kv_client_connect(h->kv, &h->start_clock);
    if (rc < 0)
        return ps_shardps_kv_err(h, rc, "cannot join the job");
    /* A joiner now holds the job's table: the calls that follow, and a
     * reconnect (which declares it), use it. */
    if (h->cfg.spec.n_tensors == 0 &&
        (rc = ps_model_spec_copy(&h->cfg.spec, ps_kv_client_spec(h->kv))) < 0)
        return ps_shardps_err(h, rc, "out of memory");
    h->declared = 1;
    /* The caller's values were lent until now (shardps_declare_values):
     * nothing keeps a pointer to them that a reconnect could read after
     * they are freed. A rank 0 asked for them again (it left before the
     * table was filled, and the servers forgot them) is refused by name. */
    free(h->values);
    h->values = NULL;
    h->n_values = 0;
    /* Once per handle: a reconnect goes on with the same run. An
     * evaluator is no worker of the run. */
    if (!h->report.started && !h->cfg.evaluator)
        ps_job_report_start(&h->report, h->start_clock, (uint64_t)h->opts.total_steps,
                            h->opts.progress_every);
    return 0;
}

int shardps_connect(shardps *h)
{
    if (h == NULL)
        return -EINVAL;
    if (h->kv)
        return ps_shardps_err(h, -EBUSY, "shardps_connect: already connected (shardps_reconnect?)");
    /* The servers' cosine schedule spans the steps the workers plan when
     * the job does not fix it: without a plan it would never decay. */
    if (h->job_settings && ps_job_settings_unspanned(h->job_settings, h->cfg.total_steps))
        return ps_shardps_err(h, -EINVAL,
                              "shardps_connect: the job's cosine schedule has no span: tell this "
                              "worker the steps it plans (option total-steps: "
                              "Client(total_steps=N), attach(model, total_steps=N)), or give "
                              "shardps-run --total-steps N or --lr-schedule constant");
    return ps__shardps_connect(h);
}

int shardps_reconnect(shardps *h)
{
    if (h == NULL)
        return -EINVAL;
    if (!h->declared)
        return ps_shardps_err(h, -EINVAL, "shardps_reconnect: connect first (nothing is declared)");
    ps_kv_client_abandon(h->kv);
    h->kv = NULL;
    memset(h->pushed, 0, sizeof(h->pushed));
    ps_push_copies_reset(&h->copies);
    /* Our old connection may still hold the rank on a server: retry. */
    h->cfg.rejoining = 1;
    return ps__shardps_connect(h);
}

/* The calls that move data need a live client. */
int ps_shardps_ready(shardps *h, const char *fn)
{
    if (h == NULL)
        return -EINVAL;
    if (h->kv == NULL)
        return ps_shardps_err(h, -EINVAL, "%s: not connected (shardps_connect first)", fn);
    return 0;
}

int ps_shardps_may_declare(shardps *h, const char *fn)
{
    if (h == NULL)
        return -EINVAL;
    if (h->kv)
        return ps_shardps_err(h, -EBUSY, "%s: already connected", fn);
    if (h->cfg.evaluator)
        return ps_shardps_err(h, -EINVAL, "%s: an evaluator declares nothing: it joins", fn);
    return 0;
}

int ps_shardps_may_write(shardps *h, const char *fn)
{
    int rc = ps_shardps_ready(h, fn);

    if (rc == 0 && h->cfg.evaluator)
        return ps_shardps_err(h, -EPERM, "%s: an evaluator reads the job; it never writes", fn);
    return rc;
}

int shardps_tensor_count(const shardps *h)
{
    if (h == NULL)
        return -EINVAL;
    return h->cfg.spec.n_tensors;
}

int shardps_tensor_info(const shardps *h, int i, char *name, size_t name_len, size_t *numel)
{
    if (h == NULL || i < 0 || i >= h->cfg.spec.n_tensors)
        return -EINVAL;
    if (name && name_len > 0)
        snprintf(name, name_len, "%s", h->cfg.spec.tensors[i].name);
    if (numel)
        *numel = h->cfg.spec.tensors[i].numel;
    return 0;
}

int shardps_tensor_shape(const shardps *h, int i, int64_t *shape, int max_ndim)
{
    const ps_tensor_spec *t;

    if (h == NULL || i < 0 || i >= h->cfg.spec.n_tensors || max_ndim < 0 ||
        (shape == NULL && max_ndim > 0))
        return -EINVAL;
    t = &h->cfg.spec.tensors[i];
    for (int d = 0; d < t->ndim && d < max_ndim; d++)
        shape[d] = t->shape[d];
    return t->ndim;
}

int shardps_table(const shardps *h, void *buf, size_t len)
{
    uint8_t *packed;
    size_t n;
    int rc;

    if (h == NULL)
        return -EINVAL;
    rc = ps_tensor_table_pack(h->kv ? ps_kv_client_spec(h->kv) : &h->cfg.spec, &packed, &n);
    if (rc < 0)
        return rc;
    if (buf && len >= n)
        memcpy(buf, packed, n);
    free(packed);
    return (int)n;
}

int shardps_start_clock(const shardps *h, uint64_t *clock)
{
    if (h == NULL || clock == NULL || h->kv == NULL)
        return -EINVAL;
    *clock = h->start_clock;
    return 0;
}

int shardps_weights_clock(const shardps *h, uint64_t *clock)
{
    if (h == NULL || clock == NULL || h->kv == NULL)
        return -EINVAL;
    *clock = ps_kv_client_weights_clock(h->kv);
    return 0;
}

int shardps_snapshot_clocks(const shardps *h, uint64_t *lo, uint64_t *hi)
{
    if (h == NULL || lo == NULL || hi == NULL || h->kv == NULL)
        return -EINVAL;
    return ps_kv_client_snapshot_clocks(h->kv, lo, hi);
}

/* shardps_pull and shardps_pull_into (counts NULL: the caller vouches for
 * the sizes). Nothing is written before every destination is checked. */
static int ps__shardps_pull(shardps *h, uint64_t clock, float *const *dest, const size_t *counts,
                            int n_dest, const char *fn)
{
    int rc = ps_shardps_ready(h, fn);

    if (rc < 0)
        return rc;
    if (dest == NULL || n_dest != h->cfg.spec.n_tensors)
        return ps_shardps_err(h, -EINVAL, "%s: need %d destinations, got %d", fn,
                              h->cfg.spec.n_tensors, dest == NULL ? 0 : n_dest);
    for (int i = 0; i < n_dest; i++) {
        const ps_tensor_spec *t = &h->cfg.spec.tensors[i];
        if (dest[i] == NULL)
            return ps_shardps_err(h, -EINVAL, "%s: the destination of %s is NULL", fn, t->name);
        if (counts && counts[i] != t->numel)
            return ps_shardps_err(h, -EINVAL,
                                  "%s: the destination of %s holds %zu floats; it needs %zu", fn,
                                  t->name, counts[i], t->numel);
    }
    h->started = 1;
    rc = ps_kv_client_pull(h->kv, clock, dest);
    if (rc == -EBUSY)
        return ps_shardps_err(h, rc, "%s: a pull is already in flight (wait first)", fn);
    return rc < 0 ? ps_shardps_kv_err(h, rc, fn) : 0;
}

int shardps_pull(shardps *h, uint64_t clock, float *const *dest, int n_dest)
{
    return ps__shardps_pull(h, clock, dest, NULL, n_dest, "shardps_pull");
}

int shardps_pull_into(shardps *h, uint64_t clock, float *const *dest, const size_t *counts,
                      int n_dest)
{
    if (h != NULL && counts == NULL)
        return ps_shardps_err(h, -EINVAL, "shardps_pull_into: counts is NULL");
    return ps__shardps_pull(h, clock, dest, counts, n_dest, "shardps_pull_into");
}

int shardps_progress(shardps *h)
{
    int rc = ps_shardps_ready(h, "shardps_progress");

    if (rc == 0 && (rc = ps_kv_client_progress(h->kv)) < 0)
        return ps_shardps_kv_err(h, rc, "shardps_progress");
    return rc;
}

int shardps_flush(shardps *h)
{
    int rc = ps_shardps_ready(h, "shardps_flush");

    if (rc == 0 && (rc = ps_kv_client_flush(h->kv)) < 0)
        return ps_shardps_kv_err(h, rc, "shardps_flush");
    return rc;
}

int shardps_wait(shardps *h)
{
    int rc = ps_shardps_ready(h, "shardps_wait");

    if (rc < 0)
        return rc;
    memset(h->pushed, 0, sizeof(h->pushed));
    h->started = 0;
    rc = ps_kv_client_wait(h->kv);
    ps_push_copies_waited(&h->copies, rc);
    return rc < 0 ? ps_shardps_kv_err(h, rc, "shardps_wait") : 0;
}

int shardps_stats_get(const shardps *h, shardps_stats *out)
{
    ps_kv_client_stats s;

    if (h == NULL || out == NULL || h->kv == NULL)
        return -EINVAL;
    ps_kv_client_stats_get(h->kv, &s);
    *out = (shardps_stats){s.dropped,       s.bytes_sent,      s.bytes_received, s.staleness_max,
                           s.staleness_sum, s.staleness_count, s.acked,          s.rejected};
    return 0;
}

static void ps__shardps_free(shardps *h, int goodbye)
{
    if (h == NULL)
        return;
    if (goodbye)
        ps_kv_client_close(h->kv);
    else
        ps_kv_client_abandon(h->kv);
    /* After the client: its sends read the copies until it is gone. */
    ps_push_copies_free(&h->copies);
    for (int s = 0; h->servers && s < h->cfg.n_servers; s++)
        free(h->servers[s]);
    free(h->servers);
    free(h->job_settings);
    ps_model_spec_free(&h->cfg.spec);
    free(h->values);
    free(h);
}

int shardps_close(shardps *h)
{
    shardps_stats st;

    /* Requests still in flight complete first (within their deadlines):
     * a server answering a push after our goodbye would find the connection
     * gone and count us as lost, not finished. */
    if (h && h->kv && h->started)
        ps_kv_client_wait(h->kv);
    if (h && shardps_stats_get(h, &st) == 0)
        ps_job_report_done(&h->report, &st);
    ps__shardps_free(h, 1);
    return 0;
}

void shardps_abandon(shardps *h)
{
    ps__shardps_free(h, 0);
}

int shardps_report(shardps *h, uint64_t step, double loss, uint64_t samples)
{
    shardps_stats st;
    int rc = ps_shardps_ready(h, "shardps_report");

    if (rc < 0)
        return rc;
    if (h->cfg.evaluator)
        return ps_shardps_err(h, -EINVAL, "shardps_report: an evaluator is no worker of the run");
    shardps_stats_get(h, &st);
    return ps_job_report_step(&h->report, step, loss, samples, &st, h->error, sizeof(h->error));
}
