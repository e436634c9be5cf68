/* The metrics text: the Prometheus reader against good and broken lines, and
 * the server's rendering read back through it (every family declared before
 * its samples, labels escaped, values exact), plus the JSON line's shape. The
 * endpoint itself is exercised with real processes in it_metrics. */
#include <criterion/criterion.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "metrics_http.h"
#include "prom_text.h"

static int parse(const char *line, ps_prom_sample *s)
{
    return ps_prom_parse_line(line, strlen(line), s);
}

Test(prom_text, samples)
{
    ps_prom_sample s;

    cr_assert_eq(parse("up 1", &s), 1);
    cr_assert_str_eq(s.name, "up");
    cr_assert_eq(s.n_labels, 0);
    cr_assert_eq(s.value, 1.0);
    cr_assert_eq(parse("a_b:c{x=\"1\",y=\"two\"} -2.5e3 1700000000000", &s), 1);
    cr_assert_str_eq(s.name, "a_b:c");
    cr_assert_eq(s.n_labels, 2);
    cr_assert_str_eq(ps_prom_label(&s, "y"), "two");
    cr_assert_null(ps_prom_label(&s, "z"));
    cr_assert_eq(s.value, -2500.0);
    cr_assert_eq(parse("m{k=\"a\\\"b\\\\c\\nd\",} +Inf", &s), 1);
    cr_assert_str_eq(ps_prom_label(&s, "k"), "a\"b\\c\nd");
    cr_assert(isinf(s.value) && s.value > 0);
    cr_assert_eq(parse("m NaN", &s), 1);
    cr_assert(isnan(s.value));
    cr_assert_eq(parse("m{} 3", &s), 1);
}

Test(prom_text, comments_and_blanks)
{
    ps_prom_sample s;

    cr_assert_eq(parse("", &s), 0);
    cr_assert_eq(parse("   ", &s), 0);
    cr_assert_eq(parse("# a free comment", &s), 0);
    cr_assert_eq(parse("# HELP m Some help, with \\\\ escapes", &s), 0);
    cr_assert_eq(parse("# TYPE m counter", &s), 0);
    cr_assert_eq(parse("# TYPE m gauge", &s), 0);
    cr_assert_eq(parse("# TYPE m flavour", &s), -EINVAL);
    cr_assert_eq(parse("# TYPE 1m gauge", &s), -EINVAL);
}

Test(prom_text, refuses_malformed_lines)
{
    static const char *const bad[] = {
        "1m 1",
        "m",
        "m ",
        "m 1x",
        "m 0x10",
        "m{k=1} 1",
        "m{k=\"1} 1",
        "m{k=\"\\q\"} 1",
        "m{1k=\"v\"} 1",
        "m{k:x=\"v\"} 1",
        "m{k=\"v\"}1",
        "m 1 2.5",
        "m 1 2 3",
        "m{k=\"v\" 1",
        "m{k=\"v\"x} 1",
    };
    ps_prom_sample s;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        cr_assert_eq(parse(bad[i], &s), -EINVAL, "accepted '%s'", bad[i]);
}

Test(prom_text, limits)
{
    char line[400];
    ps_prom_sample s;

    memset(line, 'a', 200);
    strcpy(line + 200, " 1");
    cr_assert_eq(parse(line, &s), -E2BIG);
    cr_assert_eq(
        parse("m{a=\"1\",b=\"1\",c=\"1\",d=\"1\",e=\"1\",f=\"1\",g=\"1\",h=\"1\",i=\"1\"} 1", &s),
        -E2BIG);
}

Test(prom_text, whole_text_reports_the_bad_line)
{
    const char *text = "# TYPE m gauge\nm 1\n\nm{ 2\nm 3\n";
    int bad = 0;

    cr_assert_eq(ps_prom_parse_text(text, strlen(text), NULL, NULL, &bad), -EINVAL);
    cr_assert_eq(bad, 4);
}

/* A snapshot with two live workers, and a mode that needs escaping. */
static void fill(ps_metrics_snapshot *s, ps_kv_server_worker *w)
{
    memset(s, 0, sizeof(*s));
    memset(w, 0, 2 * sizeof(*w));
    s->server_index = 3;
    s->num_servers = 4;
    s->world = 5;
    snprintf(s->mode, sizeof(s->mode), "ss\"p");
    s->stats.pushes = 1234567890123ull;
    s->stats.pulls = 7;
    s->stats.bytes_in = 11;
    s->stats.bytes_out = 12;
    s->stats.updates = 13;
    s->stats.dropped = 14;
    s->stats.refused = 15;
    s->stats.nonfinite = 17;
    s->stats.live_workers = 2;
    s->stats.staleness_count = 16;
    s->stats.staleness_mean = 0.25;
    s->stats.staleness_p99 = 2;
    s->stats.staleness_max = 3;
    s->stats.rows_stored = 21;
    s->stats.rows_created = 22;
    s->stats.rows_admitted = 23;
    s->stats.rows_evicted = 24;
    w[0].rank = 1;
    w[0].clock = 40;
    w[0].pushes = 41;
    w[1].rank = 4;
    w[1].clock = 42;
    w[1].seconds_since_seen = 0.5;
    s->n_workers = 2;
    s->workers = w;
}

typedef struct {
    int samples, server_has_label, found_pushes, found_rank4_clock, found_info;
} ps__seen;

static void on_sample(const ps_prom_sample *m, void *arg)
{
    ps__seen *seen = arg;
    const char *rank = ps_prom_label(m, "rank");

    seen->samples++;
    seen->server_has_label +=
        ps_prom_label(m, "server") && strcmp(ps_prom_label(m, "server"), "3") == 0;
    if (strcmp(m->name, "shardps_server_pushes_total") == 0 && m->value == 1234567890123.0)
        seen->found_pushes = 1;
    if (strcmp(m->name, "shardps_server_worker_clock") == 0 && rank && strcmp(rank, "4") == 0 &&
        m->value == 42)
        seen->found_rank4_clock = 1;
    if (strcmp(m->name, "shardps_server_info") == 0 &&
        strcmp(ps_prom_label(m, "mode"), "ss\"p") == 0)
        seen->found_info = 1;
}

Test(metrics_render, prometheus_reads_back)
{
    ps_metrics_snapshot s;
    ps_kv_server_worker w[2];
    ps__seen seen = {0};
    char *text = NULL;
    size_t len = 0;
    int bad = 0;

    fill(&s, w);
    cr_assert_eq(ps_metrics_render_prometheus(&s, &text, &len), 0);
    cr_assert_eq(strlen(text), len);
    cr_assert_eq(ps_prom_parse_text(text, len, on_sample, &seen, &bad), 0, "line %d", bad);
    /* info + 16 server series + 7 of embedding rows + 6 per-worker
     * families x 2 workers */
    cr_assert_eq(seen.samples, 1 + 16 + 7 + 12);
    cr_assert_eq(seen.server_has_label, seen.samples);
    cr_assert(seen.found_pushes && seen.found_rank4_clock && seen.found_info);
    /* Every family is declared once, before its samples. */
    cr_assert_not_null(strstr(text, "# TYPE shardps_server_dropped_pushes_total counter\n"
                                    "shardps_server_dropped_pushes_total{server=\"3\"} 14\n"));
    cr_assert_not_null(strstr(text, "# TYPE shardps_server_rows_evicted_total counter\n"
                                    "shardps_server_rows_evicted_total{server=\"3\"} 24\n"));
    cr_assert_not_null(strstr(text, "# TYPE shardps_server_worker_seconds_since_seen gauge\n"
                                    "shardps_server_worker_seconds_since_seen{server=\"3\","
                                    "rank=\"1\"} 0\n"));
    free(text);
}

Test(metrics_render, json_line)
{
    ps_metrics_snapshot s;
    ps_kv_server_worker w[2];
    char *text = NULL;
    size_t len = 0;

    fill(&s, w);
    snprintf(s.mode, sizeof(s.mode), "ssp");
    cr_assert_eq(ps_metrics_render_json(&s, 1.5, 1, &text, &len), 0);
    cr_assert_null(strchr(text, '\n'));
    cr_assert_eq(text[0], '{');
    cr_assert_eq(text[len - 1], '}');
    cr_assert_not_null(
        strstr(text, "\"elapsed\":1.500,\"server\":3,\"mode\":\"ssp\",\"final\":true"));
    cr_assert_not_null(strstr(text, "\"pushes\":1234567890123,"));
    cr_assert_not_null(strstr(text, "\"rejected\":15,\"nonfinite\":17,"));
    cr_assert_not_null(strstr(text, "\"rows_stored\":21,\"rows_created\":22,\"rows_admitted\":23,"
                                    "\"rows_evicted\":24,\"workers\":["));
    cr_assert_not_null(strstr(text, "\"workers\":[{\"rank\":1,\"clock\":40,\"pushes\":41,"));
    cr_assert_not_null(strstr(text, "},{\"rank\":4,\"clock\":42,"));
    free(text);
}
