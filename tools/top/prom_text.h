/* A reader for the Prometheus text exposition format (0.0.4), line by line:
 * what shardps-top reads the servers' /metrics with, and what the tests check
 * the endpoint's output against. It is strict where a scraper would be
 * (metric and label names, quoting and escapes, the value) and keeps no state
 * between lines, so a caller can stop at any line. */
#ifndef PS_PROM_TEXT_H
#define PS_PROM_TEXT_H

#include <stddef.h>

#define PS_PROM_MAX_LABELS 8

typedef struct {
    char name[128];
    int n_labels;
    struct {
        char key[64];
        char value[128]; /* unescaped */
    } labels[PS_PROM_MAX_LABELS];
    double value;
} ps_prom_sample;

/* Parses one line (without its newline; len bytes, no NUL needed). Returns 1
 * and fills out for a sample, 0 for a blank line or a comment (# HELP and
 * # TYPE lines must name a valid metric, and TYPE a known type), -EINVAL for
 * anything else, or -E2BIG when a name, label or label count exceeds the
 * limits above. */
int ps_prom_parse_line(const char *line, size_t len, ps_prom_sample *out);

/* The value of label key in s, or NULL (borrowed from s). */
const char *ps_prom_label(const ps_prom_sample *s, const char *key);

/* Calls fn for each sample of a whole exposition text, in order. Returns 0,
 * or the first malformed line's code with *bad_line set to its number
 * (1-based); fn has then seen the samples before it. */
int ps_prom_parse_text(const char *text, size_t len, void (*fn)(const ps_prom_sample *s, void *arg),
                       void *arg, int *bad_line);

#endif
