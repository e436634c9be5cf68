/* --print-config (see flags_help.h): text only, from the table's entries
 * (flag_table.h) and a parse's origins (flags.h). */
#include "flags_help.h"

#include <limits.h>
#include <string.h>

#include "flag_table.h"

void ps_flags_print_config(const ps_flags_ctx *ctx, FILE *out)
{
    fprintf(out,
            "# %s: effective settings (flag > SHARDPS_* environment > cluster file %s > "
            "default)\n",
            ctx->prog, ctx->file ? ctx->file : "(none)");
    for (int i = 0; i < ctx->n; i++) {
        const ps_flag *f = &ctx->flags[i];
        char buf[64], from[PATH_MAX + 32];

        if (strcmp(f->name, "print-config") == 0)
            continue;
        fprintf(out, "%-20s = %-24s # %s%s\n", f->name, ps_flag_value_text(f, buf, sizeof(buf)),
                ctx->origin[i] == PS_FLAG_FROM_DERIVED ? "derived from " : "",
                ps_flags_describe_origin(ctx, f->name, from, sizeof(from)));
    }
}
