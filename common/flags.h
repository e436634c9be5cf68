/* Table-driven command-line options shared by every shardps binary.
 *
 * Each binary declares one table: name, type, bounds, help text and the
 * variable that holds the default. The same table parses argv, reads
 * SHARDPS_<NAME> environment variables (for containers; flags win), prints
 * --help with the defaults, and turns a bad value into one line that names the
 * option, the problem and the accepted range. */
#ifndef PS_FLAGS_H
#define PS_FLAGS_H

#include <stdio.h>

typedef enum {
    PS_FLAG_INT,    /* int *, bounded by [min, max] */
    PS_FLAG_DOUBLE, /* double *, bounded by [min, max] */
    PS_FLAG_STRING, /* const char **, points into argv/environ (not copied) */
    PS_FLAG_BOOL,   /* int *, set to 1 by --name, no value */
    PS_FLAG_CHOICE, /* const char **, one of the '|'-separated words in choices */
} ps_flag_type;

typedef struct {
    const char *name; /* without the leading "--" */
    ps_flag_type type;
    void *dest;
    const char *metavar;
    const char *help;
    double min, max;     /* INT, DOUBLE */
    const char *choices; /* CHOICE: "sync|async|ssp" */
} ps_flag;

/* Parses env then argv into the table's variables. Returns 0 to go on, 1 when
 * --help was printed (exit 0), or -PS_EUSAGE after printing one line to stderr
 * ("prog: --lr: '-1' is below the minimum 0 (see --help)"). Non-option
 * arguments are refused. */
int ps_flags_parse(const ps_flag *flags, int n, int argc, char **argv, const char *prog,
                   const char *summary);
void ps_flags_usage(FILE *out, const ps_flag *flags, int n, const char *prog, const char *summary);

#endif
