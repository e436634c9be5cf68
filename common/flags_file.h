/* The cluster file (see flags.h for its sections and why they exist): an INI
 * file every process of a job shares, read with inih. This module adds what
 * inih leaves to its caller: line numbers, unknown sections and keys refused
 * by file:line, a key given twice refused, long lists continued on indented
 * lines, and the keys another program of the job takes skipped. */
#ifndef PS_FLAGS_FILE_H
#define PS_FLAGS_FILE_H

#include "flags.h"

/* Reads ctx->file and sets, through the table, every option of the shared
 * sections and of ctx->section that it gives; each one set is marked
 * PS_FLAG_FROM_FILE with its line. The values are copied into ctx->strings
 * (which this allocates; the context owns them until ps_flags_release), so
 * STRING and CHOICE variables may point at them. ctx->origin and ctx->line
 * must be allocated (ps_flags_load does). Returns 0, or -PS_EUSAGE after one
 * line to stderr ("prog: cluster.ini:7: unknown key 'lrr' in [optimizer];
 * ..."). */
int ps_flags_file_load(ps_flags_ctx *ctx);

#endif
