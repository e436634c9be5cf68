/* What a parse says about its options: --print-config, the effective
 * settings with where each came from. It reads a parse's context (flags.h),
 * so it sits above the parser; --help, which the parser itself prints, is
 * flags_usage.h, below it. */
#ifndef PS_FLAGS_HELP_H
#define PS_FLAGS_HELP_H

#include <stdio.h>

#include "flags.h"

/* Prints every option as "name = value  # origin", one per line. */
void ps_flags_print_config(const ps_flags_ctx *ctx, FILE *out);

#endif
