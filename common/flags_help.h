/* What a program says about its options: --help, built from the table
 * (types, bounds, words, defaults, the cluster file's sections), and
 * --print-config, the effective settings of a parse with where each came
 * from. Both only read the table and the context (flags.h). */
#ifndef PS_FLAGS_HELP_H
#define PS_FLAGS_HELP_H

#include <stdio.h>

#include "flags.h"

/* Prints every option as "name = value  # origin", one per line. */
void ps_flags_print_config(const ps_flags_ctx *ctx, FILE *out);

/* Prints --help: usage, summary, one line per option with its bounds and
 * default (the variable's current value), and the cluster file's sections
 * when the table has a "cluster" option. */
void ps_flags_usage(FILE *out, const ps_flag *flags, int n, const char *prog, const char *summary);

#endif
