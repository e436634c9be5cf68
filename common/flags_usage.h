/* --help, built from the table that parses (types, bounds, words, defaults,
 * the cluster file's sections). It reads the table alone, never a parse, so
 * the parser (flags.c) prints it when it meets --help and nothing here
 * calls back up into the parser. */
#ifndef PS_FLAGS_USAGE_H
#define PS_FLAGS_USAGE_H

#include <stdio.h>

#include "flag_table.h"

/* Prints --help: usage, summary, one line per option with its bounds and
 * default (the variable's current value), and the cluster file's sections
 * when the table has a "cluster" option. */
void ps_flags_usage(FILE *out, const ps_flag *flags, int n, const char *prog, const char *summary);

#endif
