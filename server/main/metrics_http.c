/* Server metrics: the Prometheus endpoint and the JSON-lines file.
 *
 * Threads. libmicrohttpd runs with its own internal polling thread rather than
 * being driven by the libuv loop (MHD_USE_NO_THREAD_SAFETY with its fds in
 * uv_poll handles): MHD's external mode hands out a new fd set on every turn,
 * which would mean re-registering poll handles per connection on every loop
 * iteration, whereas one extra thread costs nothing while idle. That thread
 * never reads the kv server. A request records the number of snapshots
 * published so far, wakes the loop with uv_async_send, and waits on a
 * condition variable until the loop has published a newer one (or 1 s has
 * passed, when it serves the last one: the loop may be busy or stopping).
 *
 * Why this is free of data races (and TSan-clean): the kv server and the
 * file are touched only on the loop thread. The published snapshot (`pub`,
 * `pub_workers`, `gen`) and `closing` are read and written only with `mu`
 * held. The HTTP thread copies the snapshot into `scratch`, which only it
 * uses (one internal thread serves every connection in turn), and renders
 * from that copy without the lock. uv_async_send is libuv's one thread-safe
 * call, and it is made with `mu` held and `closing` clear; ps_metrics_stop
 * sets `closing` under `mu` before it joins the HTTP thread
 * (MHD_stop_daemon) and before it closes the async handle, so no send can
 * reach a closing handle. */
#include "metrics_http.h"

#include <errno.h>
#include <inttypes.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "clock.h"
#include "ps_log.h"

/* How long a scrape waits for the loop to publish a fresh snapshot. */
#define PS__METRICS_FRESH_WAIT_S 1.0

struct ps_metrics {
    uv_loop_t *loop;
    const ps_kv_server *srv; /* borrowed */
    uv_async_t async;        /* the HTTP thread asks for a fresh snapshot */
    uv_timer_t timer;        /* file lines */
    int async_open, timer_open;
    struct MHD_Daemon *httpd;
    FILE *file;
    uint64_t t0_ms; /* loop time at start, for "elapsed" */
    int world;

    /* Loop thread only. */
    ps_kv_server_worker *take_workers;

    /* Guarded by mu. */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    uint64_t gen;
    int closing;
    ps_metrics_snapshot pub;
    ps_kv_server_worker *pub_workers;

    /* HTTP thread only. */
    ps_metrics_snapshot scratch;
    ps_kv_server_worker *scratch_workers;
};

static double ps__unix_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Fills snap from the server; workers must hold `world` entries. Loop thread. */
static void ps__metrics_take(const ps_metrics *m, ps_metrics_snapshot *snap,
                             ps_kv_server_worker *workers)
{
    const ps_kv_server_config *cfg = ps_kv_server_config_get(m->srv);

    memset(snap, 0, sizeof(*snap));
    snap->unix_time = ps__unix_now();
    snap->server_index = cfg->server_index;
    snap->num_servers = cfg->num_servers;
    snap->world = cfg->world;
    snprintf(snap->mode, sizeof(snap->mode), "%s", ps_mode_name(cfg->mode));
    ps_kv_server_stats_get(m->srv, &snap->stats);
    snap->workers = workers;
    for (int r = 0; r < m->world; r++)
        if (ps_kv_server_worker_get(m->srv, r, &workers[snap->n_workers]) == 0)
            snap->n_workers++;
}

static void ps__metrics_copy(ps_metrics_snapshot *dst, ps_kv_server_worker *dst_workers,
                             const ps_metrics_snapshot *src)
{
    *dst = *src;
    dst->workers = dst_workers;
    memcpy(dst_workers, src->workers, (size_t)src->n_workers * sizeof(*dst_workers));
}

/* Publishes a fresh snapshot for the HTTP thread. Loop thread. */
static void ps__publish(ps_metrics *m)
{
    ps_metrics_snapshot snap;

    ps__metrics_take(m, &snap, m->take_workers);
    pthread_mutex_lock(&m->mu);
    ps__metrics_copy(&m->pub, m->pub_workers, &snap);
    m->gen++;
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&m->mu);
}

static void ps__on_async(uv_async_t *h)
{
    ps__publish(h->data);
}

/* ---- rendering ---- */

/* Label values here are digits and mode names, but escape as the format
 * requires anyway so a future label cannot break a scraper. */
static void ps__metrics_label_value(FILE *f, const char *v)
{
    for (; *v; v++) {
        if (*v == '\\' || *v == '"')
            fprintf(f, "\\%c", *v);
        else if (*v == '\n')
            fputs("\\n", f);
        else
            fputc(*v, f);
    }
}

static void ps__family(FILE *f, const char *name, const char *type, const char *help)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* Prometheus values are floats; every counter here stays far below 2^53, where
 * a double still holds each integer exactly. */
typedef struct {
    const char *name, *type, *help;
    double value;
} ps__series;

/* The per-worker families: a field of ps_kv_server_worker each. */
typedef struct {
    const char *name, *type, *help;
    size_t off;
    int is_double; /* else uint64_t */
} ps__worker_series;

static const ps__worker_series ps__worker_families[] = {
    {"shardps_server_worker_clock", "gauge",
     "Steps the worker has pushed to this server (or joined at).",
     offsetof(ps_kv_server_worker, clock), 0},
    {"shardps_server_worker_pushes_total", "counter",
     "Push requests from the worker on its current connection.",
     offsetof(ps_kv_server_worker, pushes), 0},
    {"shardps_server_worker_pulls_total", "counter",
     "Pull requests of the worker answered on its current connection.",
     offsetof(ps_kv_server_worker, pulls), 0},
    {"shardps_server_worker_bytes_received_total", "counter",
     "Payload bytes received from the worker on its current connection.",
     offsetof(ps_kv_server_worker, bytes_in), 0},
    {"shardps_server_worker_bytes_sent_total", "counter",
     "Payload bytes sent to the worker on its current connection.",
     offsetof(ps_kv_server_worker, bytes_out), 0},
    {"shardps_server_worker_seconds_since_seen", "gauge", "Seconds since the worker's last frame.",
     offsetof(ps_kv_server_worker, seconds_since_seen), 1},
};

int ps_metrics_render_prometheus(const ps_metrics_snapshot *s, char **out, size_t *len)
{
    const ps_kv_server_stats *st = &s->stats;
    const ps__series server[] = {
        {"shardps_server_pushes_total", "counter", "Push requests accepted from workers.",
         (double)st->pushes},
        {"shardps_server_pulls_total", "counter", "Pull requests answered to workers.",
         (double)st->pulls},
        {"shardps_server_bytes_received_total", "counter",
         "Gradient payload bytes received in pushes.", (double)st->bytes_in},
        {"shardps_server_bytes_sent_total", "counter", "Weight payload bytes sent in pull replies.",
         (double)st->bytes_out},
        {"shardps_server_updates_total", "counter",
         "Optimizer steps applied to chunks (one per chunk and step in sync mode, one per chunk "
         "and push otherwise).",
         (double)st->updates},
        {"shardps_server_dropped_pushes_total", "counter",
         "Pushed chunks dropped because their step was already applied.", (double)st->dropped},
        {"shardps_server_nonfinite_pushes_total", "counter",
         "Pushes refused because their gradient held NaN or Inf.", (double)st->nonfinite},
        {"shardps_server_unstable_updates_total", "counter",
         "Chunk updates refused because they would have made a weight or optimizer state "
         "non-finite.",
         (double)st->unstable},
        {"shardps_server_large_gradients_total", "counter",
         "Pushed chunks refused for a gradient norm over --max-grad-norm.", (double)st->too_large},
        {"shardps_server_rejected_frames_total", "counter",
         "Connections refused or closed for a malformed or disallowed frame.", (double)st->refused},
        {"shardps_server_live_workers", "gauge", "Workers connected and taking part now.",
         (double)st->live_workers},
        {"shardps_server_expected_workers", "gauge", "Workers the job was started for.",
         (double)s->world},
        {"shardps_server_staleness_samples_total", "counter",
         "Applied gradients whose staleness was measured.", (double)st->staleness_count},
        {"shardps_server_staleness_mean", "gauge",
         "Mean staleness (steps) of applied gradients since the start.", st->staleness_mean},
        {"shardps_server_staleness_p99", "gauge",
         "99th percentile of the staleness (steps) of applied gradients.", st->staleness_p99},
        {"shardps_server_staleness_max", "gauge",
         "Largest staleness (steps) of an applied gradient.", (double)st->staleness_max},
        {"shardps_server_row_pulls_total", "counter", "Rows pulls answered (all row tables).",
         (double)st->row_pulls},
        {"shardps_server_row_pushes_total", "counter", "Rows pushes accepted (all row tables).",
         (double)st->row_pushes},
        {"shardps_server_rows_refused_total", "counter",
         "Rows requests refused for an ID named twice or a NaN or Inf gradient.",
         (double)st->rows_refused},
        {"shardps_server_rows_stored", "gauge", "Embedding rows this server stores now.",
         (double)st->rows_stored},
        {"shardps_server_rows_created_total", "counter",
         "Embedding rows stored by a first applied gradient (restored with a checkpoint; "
         "after a restore onto another number of servers, server 0 counts the job's before it).",
         (double)st->rows_created},
        {"shardps_server_rows_admitted_total", "counter",
         "Of the rows created, those that waited for admission (restored as created).",
         (double)st->rows_admitted},
        {"shardps_server_rows_evicted_total", "counter",
         "Embedding rows removed by expiry or capacity (restored as created).",
         (double)st->rows_evicted},
    };
    FILE *f = open_memstream(out, len);

    if (f == NULL)
        return -ENOMEM;
    ps__family(f, "shardps_server_info", "gauge",
               "Always 1; the labels describe the server's configuration.");
    fprintf(f, "shardps_server_info{server=\"%d\",mode=\"", s->server_index);
    ps__metrics_label_value(f, s->mode);
    fprintf(f, "\",num_servers=\"%d\",workers=\"%d\"} 1\n", s->num_servers, s->world);
    for (size_t i = 0; i < sizeof(server) / sizeof(server[0]); i++) {
        ps__family(f, server[i].name, server[i].type, server[i].help);
        fprintf(f, "%s{server=\"%d\"} %.17g\n", server[i].name, s->server_index, server[i].value);
    }
    for (size_t i = 0; i < sizeof(ps__worker_families) / sizeof(ps__worker_families[0]); i++) {
        const ps__worker_series *ws = &ps__worker_families[i];
        ps__family(f, ws->name, ws->type, ws->help);
        for (int k = 0; k < s->n_workers; k++) {
            const char *field = (const char *)&s->workers[k] + ws->off;
            double v = ws->is_double ? *(const double *)field : (double)*(const uint64_t *)field;
            fprintf(f, "%s{server=\"%d\",rank=\"%" PRIu32 "\"} %.17g\n", ws->name, s->server_index,
                    s->workers[k].rank, v);
        }
    }
    if (fclose(f) != 0) {
        free(*out);
        *out = NULL;
        return -ENOMEM;
    }
    return 0;
}

int ps_metrics_render_json(const ps_metrics_snapshot *s, double elapsed, int final, char **out,
                           size_t *len)
{
    const ps_kv_server_stats *st = &s->stats;
    FILE *f = open_memstream(out, len);

    if (f == NULL)
        return -ENOMEM;
    fprintf(f,
            "{\"time\":%.3f,\"elapsed\":%.3f,\"server\":%d,\"mode\":\"%s\",\"final\":%s"
            ",\"pushes\":%" PRIu64 ",\"pulls\":%" PRIu64 ",\"bytes_in\":%" PRIu64
            ",\"bytes_out\":%" PRIu64 ",\"updates\":%" PRIu64 ",\"dropped\":%" PRIu64
            ",\"rejected\":%" PRIu64 ",\"nonfinite\":%" PRIu64
            ",\"live_workers\":%d,\"staleness_count\":%" PRIu64
            ",\"staleness_mean\":%.4f,\"staleness_p99\":%.0f,\"staleness_max\":%" PRIu64
            ",\"rows_stored\":%" PRIu64 ",\"rows_created\":%" PRIu64 ",\"rows_admitted\":%" PRIu64
            ",\"rows_evicted\":%" PRIu64 ",\"workers\":[",
            s->unix_time, elapsed, s->server_index, s->mode, final ? "true" : "false", st->pushes,
            st->pulls, st->bytes_in, st->bytes_out, st->updates, st->dropped, st->refused,
            st->nonfinite, st->live_workers, st->staleness_count, st->staleness_mean,
            st->staleness_p99, st->staleness_max, st->rows_stored, st->rows_created,
            st->rows_admitted, st->rows_evicted);
    for (int i = 0; i < s->n_workers; i++) {
        const ps_kv_server_worker *w = &s->workers[i];
        fprintf(f,
                "%s{\"rank\":%" PRIu32 ",\"clock\":%" PRIu64 ",\"pushes\":%" PRIu64
                ",\"pulls\":%" PRIu64 ",\"bytes_in\":%" PRIu64 ",\"bytes_out\":%" PRIu64
                ",\"seconds_since_seen\":%.3f}",
                i ? "," : "", w->rank, w->clock, w->pushes, w->pulls, w->bytes_in, w->bytes_out,
                w->seconds_since_seen);
    }
    fputs("]}", f);
    if (fclose(f) != 0) {
        free(*out);
        *out = NULL;
        return -ENOMEM;
    }
    return 0;
}

/* ---- the file ---- */

static void ps__write_line(ps_metrics *m, int final)
{
    ps_metrics_snapshot snap;
    char *text = NULL;
    size_t len;

    ps__metrics_take(m, &snap, m->take_workers);
    if (ps_metrics_render_json(&snap, (double)(uv_now(m->loop) - m->t0_ms) / 1000, final, &text,
                               &len) < 0)
        return;
    /* A full disk must not stop the server: warn once and give up the file. */
    if (fprintf(m->file, "%s\n", text) < 0 || fflush(m->file) != 0) {
        ps_warn("cannot write the metrics file: %s; no more lines will be written",
                strerror(errno));
        fclose(m->file);
        m->file = NULL;
        uv_timer_stop(&m->timer);
    }
    free(text);
}

static void ps__on_timer(uv_timer_t *t)
{
    ps__write_line(t->data, 0);
}

/* ---- the HTTP thread ---- */

static void ps__mhd_log(void *cls, const char *fmt, va_list ap)
{
    char msg[256];

    (void)cls;
    vsnprintf(msg, sizeof(msg), fmt, ap);
    msg[strcspn(msg, "\n")] = '\0';
    ps_warn("metrics endpoint: %s", msg);
}

/* Copies a snapshot no older than this call into m->scratch. HTTP thread. */
static void ps__fresh_snapshot(ps_metrics *m)
{
    struct timespec deadline = ps_clock_after(PS__METRICS_FRESH_WAIT_S);
    uint64_t seen;

    pthread_mutex_lock(&m->mu);
    seen = m->gen;
    if (!m->closing)
        uv_async_send(&m->async);
    while (m->gen == seen && !m->closing)
        if (pthread_cond_timedwait(&m->cv, &m->mu, &deadline) == ETIMEDOUT)
            break;
    ps__metrics_copy(&m->scratch, m->scratch_workers, &m->pub);
    pthread_mutex_unlock(&m->mu);
}

static enum MHD_Result ps__reply(struct MHD_Connection *conn, unsigned int status, const char *type,
                                 char *body, size_t len, int must_free)
{
    struct MHD_Response *r;
    enum MHD_Result ret;

    r = MHD_create_response_from_buffer(len, body,
                                        must_free ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    if (r == NULL) {
        if (must_free)
            free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    ret = MHD_queue_response(conn, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result ps__on_request(void *cls, struct MHD_Connection *conn, const char *url,
                                      const char *method, const char *version,
                                      const char *upload_data, size_t *upload_size, void **req_cls)
{
    static char not_found[] = "not found: metrics are at /metrics\n";
    static char bad_method[] = "only GET and HEAD are served\n";
    ps_metrics *m = cls;
    char *text = NULL;
    size_t len;

    (void)version;
    (void)upload_data;
    (void)upload_size;
    (void)req_cls;
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
        return ps__reply(conn, MHD_HTTP_METHOD_NOT_ALLOWED, "text/plain", bad_method,
                         sizeof(bad_method) - 1, 0);
    if (strcmp(url, "/metrics") != 0)
        return ps__reply(conn, MHD_HTTP_NOT_FOUND, "text/plain", not_found, sizeof(not_found) - 1,
                         0);
    ps__fresh_snapshot(m);
    if (ps_metrics_render_prometheus(&m->scratch, &text, &len) < 0)
        return MHD_NO;
    return ps__reply(conn, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", text, len, 1);
}

/* ---- life cycle ---- */

static void ps__metrics_free(ps_metrics *m)
{
    pthread_cond_destroy(&m->cv);
    pthread_mutex_destroy(&m->mu);
    free(m->take_workers);
    free(m->pub_workers);
    free(m->scratch_workers);
    free(m);
}

static void ps__metrics_on_close(uv_handle_t *h)
{
    ps_metrics *m = h->data;

    if (h == (uv_handle_t *)&m->async)
        m->async_open = 0;
    else
        m->timer_open = 0;
    if (!m->async_open && !m->timer_open)
        ps__metrics_free(m);
}

static int ps__start_http(ps_metrics *m, const ps_metrics_config *cfg, int *bound_port)
{
    struct sockaddr_storage addr;
    socklen_t alen = sizeof(addr);
    const union MHD_DaemonInfo *info;
    unsigned int flags = MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ERROR_LOG;

    memset(&addr, 0, sizeof(addr));
    if (cfg->bind != NULL)
        memcpy(&addr, cfg->bind,
               cfg->bind->sa_family == AF_INET6 ? sizeof(struct sockaddr_in6)
                                                : sizeof(struct sockaddr_in));
    else {
        struct sockaddr_in *in = (struct sockaddr_in *)&addr;
        in->sin_family = AF_INET;
        in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    }
    if (addr.ss_family == AF_INET6) {
        ((struct sockaddr_in6 *)&addr)->sin6_port = htons((uint16_t)cfg->port);
        flags |= MHD_USE_IPv6;
    } else {
        ((struct sockaddr_in *)&addr)->sin_port = htons((uint16_t)cfg->port);
    }
    errno = 0;
    m->httpd = MHD_start_daemon(flags, (uint16_t)cfg->port, NULL, NULL, ps__on_request, m,
                                MHD_OPTION_EXTERNAL_LOGGER, ps__mhd_log, NULL, MHD_OPTION_SOCK_ADDR,
                                (struct sockaddr *)&addr, MHD_OPTION_CONNECTION_TIMEOUT, 10u,
                                MHD_OPTION_CONNECTION_LIMIT, 64u, MHD_OPTION_END);
    if (m->httpd == NULL)
        return errno ? -errno : -EADDRINUSE;
    info = MHD_get_daemon_info(m->httpd, MHD_DAEMON_INFO_LISTEN_FD);
    if (info == NULL || getsockname(info->listen_fd, (struct sockaddr *)&addr, &alen) < 0)
        return -EINVAL;
    *bound_port = ntohs(addr.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&addr)->sin6_port
                                                   : ((struct sockaddr_in *)&addr)->sin_port);
    return 0;
}

int ps_metrics_start(ps_metrics **out, uv_loop_t *loop, const ps_kv_server *srv,
                     const ps_metrics_config *cfg, int *bound_port)
{
    ps_metrics *m = calloc(1, sizeof(*m));
    size_t n;
    int rc = -ENOMEM;

    *out = NULL;
    *bound_port = -1;
    if (m == NULL)
        return -ENOMEM;
    m->loop = loop;
    m->srv = srv;
    m->world = ps_kv_server_config_get(srv)->world;
    n = m->world > 0 ? (size_t)m->world : 1;
    m->take_workers = calloc(n, sizeof(ps_kv_server_worker));
    m->pub_workers = calloc(n, sizeof(ps_kv_server_worker));
    m->scratch_workers = calloc(n, sizeof(ps_kv_server_worker));
    if (m->take_workers == NULL || m->pub_workers == NULL || m->scratch_workers == NULL)
        goto fail_alloc;
    {
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        /* Waits measure elapsed time, so the wall clock must not move them. */
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&m->cv, &ca);
        pthread_condattr_destroy(&ca);
    }
    pthread_mutex_init(&m->mu, NULL);
    m->t0_ms = uv_now(loop);
    if (cfg->file != NULL && (m->file = fopen(cfg->file, "a")) == NULL) {
        rc = -errno;
        ps_error("cannot open --metrics-file %s: %s", cfg->file, strerror(errno));
        goto fail_sync;
    }
    uv_async_init(loop, &m->async, ps__on_async);
    uv_timer_init(loop, &m->timer);
    m->async.data = m->timer.data = m;
    m->async_open = m->timer_open = 1;
    /* Neither handle should keep the loop alive once the server is done. */
    uv_unref((uv_handle_t *)&m->async);
    uv_unref((uv_handle_t *)&m->timer);
    /* The first snapshot is published before the endpoint exists, so a scrape
     * always has something to serve; the async handle it wakes already exists. */
    ps__publish(m);
    if (cfg->port >= 0 && (rc = ps__start_http(m, cfg, bound_port)) < 0) {
        ps_error("cannot serve metrics on port %d: %s", cfg->port, strerror(-rc));
        goto fail_http;
    }
    if (m->file != NULL) {
        uint64_t every = (uint64_t)((cfg->interval_s > 0 ? cfg->interval_s : 1.0) * 1000);
        ps__write_line(m, 0);
        uv_timer_start(&m->timer, ps__on_timer, every ? every : 1, every ? every : 1);
    }
    *out = m;
    return 0;

fail_http:
    /* Handles are freed only in their close callbacks, which free m too. */
    if (m->httpd != NULL)
        MHD_stop_daemon(m->httpd);
    if (m->file != NULL)
        fclose(m->file);
    uv_close((uv_handle_t *)&m->async, ps__metrics_on_close);
    uv_close((uv_handle_t *)&m->timer, ps__metrics_on_close);
    return rc;
fail_sync:
    pthread_cond_destroy(&m->cv);
    pthread_mutex_destroy(&m->mu);
fail_alloc:
    free(m->take_workers);
    free(m->pub_workers);
    free(m->scratch_workers);
    free(m);
    return rc;
}

void ps_metrics_stop(ps_metrics *m)
{
    if (m == NULL)
        return;
    if (m->file != NULL) {
        ps__write_line(m, 1);
        if (m->file != NULL)
            fclose(m->file);
        m->file = NULL;
    }
    pthread_mutex_lock(&m->mu);
    m->closing = 1;
    pthread_cond_broadcast(&m->cv);
    pthread_mutex_unlock(&m->mu);
    /* Joins the HTTP thread: after this nothing but the loop thread runs here. */
    if (m->httpd != NULL)
        MHD_stop_daemon(m->httpd);
    m->httpd = NULL;
    uv_timer_stop(&m->timer);
    uv_close((uv_handle_t *)&m->async, ps__metrics_on_close);
    uv_close((uv_handle_t *)&m->timer, ps__metrics_on_close);
}
