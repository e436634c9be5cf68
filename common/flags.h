/* Table-driven options shared by every shardps binary, from four layers:
 * built-in default < cluster file < SHARDPS_<NAME> environment variable <
 * command-line flag.
 *
 * Each binary declares one table: name, type, bounds, help text and the
 * variable that holds the default (one entry: flag_table.h). The same table
 * parses argv, reads the environment (for containers), reads the cluster file
 * named by --cluster or SHARDPS_CLUSTER (an INI file that every process of a
 * job shares: flags_file.h), prints --help with bounds and defaults
 * (flags_usage.h) and the effective settings with where each came from
 * (--print-config: flags_help.h), and turns a bad value into one line that
 * names the option (or file:line and key), the problem and the accepted
 * range.
 *
 * The cluster file has sections. [cluster], [model] and [optimizer] hold the
 * settings every process of the job must agree on (server list, worker count,
 * mode, model shape, optimizer): the options whose table entry names that
 * section. Servers and workers build those entries from the one job-option
 * table (job_options.h), so both accept exactly the same file. [server] and
 * [worker] hold any other option of that program by its flag name; each
 * program reads its own section and skips the other's. A key that is in no
 * list is an error naming file:line, so a typo is never silently ignored. */
#ifndef PS_FLAGS_H
#define PS_FLAGS_H

#include <stddef.h>

#include "flag_table.h"

/* Where an option's effective value came from, weakest first. */
typedef enum {
    PS_FLAG_FROM_DEFAULT,
    PS_FLAG_FROM_FILE,
    PS_FLAG_FROM_ENV,
    PS_FLAG_FROM_ARGV,
    PS_FLAG_FROM_DERIVED, /* set by the program from other settings */
} ps_flag_origin;

/* One program's parse. The caller fills the first block; ps_flags_load fills
 * the rest, which the context owns until ps_flags_release (STRING and CHOICE
 * variables may point into it, so release only when done with them). */
typedef struct {
    const ps_flag *flags;
    int n;
    const char *prog;    /* "shardps-server" */
    const char *summary; /* one sentence for --help */
    /* The cluster file section of this program ("server" or "worker"), or
     * NULL when the program reads no cluster file. The file is read when the
     * table has a STRING option named "cluster" and it is set. */
    const char *section;
    /* '|'-separated options that are never read from the cluster file
     * because they differ between the processes sharing it ("rank"). */
    const char *per_process;
    /* '|'-separated keys of the shared sections that only other programs
     * of the job take ("hidden" for a server): skipped, not refused, so one
     * cluster file serves every program. */
    const char *others;

    const char *file;       /* the cluster file read, or NULL */
    ps_flag_origin *origin; /* n entries */
    int *line;              /* n entries: the file line of a FROM_FILE value */
    char **notes;           /* n entries: why a FROM_DERIVED value (owned), or NULL */
    char **strings;         /* values read from the file (owned) */
    int n_strings;
} ps_flags_ctx;

/* Applies the file, then the environment, then argv to the table's variables.
 * Returns 0 to go on, 1 when --help was printed (exit 0), or -PS_EUSAGE after
 * printing one line to stderr ("prog: --lr: '-1' is out of range (accepted:
 * 0 to 1000); see prog --help", "prog: cluster.ini:7: unknown key 'lrr' in
 * [optimizer]; ..."). Non-option arguments are refused. Call ps_flags_release
 * afterwards whatever it returned. */
int ps_flags_load(ps_flags_ctx *ctx, int argc, char **argv);
void ps_flags_release(ps_flags_ctx *ctx);

/* Where the option called name got its value (DEFAULT for an unknown name). */
ps_flag_origin ps_flags_origin(const ps_flags_ctx *ctx, const char *name);
/* Records that the program set option name from other settings; source
 * names them ("servers[1] (cluster.ini:2)"), is copied, and is shown by
 * --print-config as "derived from <source>". Returns 0, -ENOENT for an
 * unknown name, or -ENOMEM. */
int ps_flags_set_derived(ps_flags_ctx *ctx, const char *name, const char *source);
/* Where option name's value came from, as a phrase that reads after "from",
 * for messages that must say which setting is wrong: "cluster.ini:4",
 * "SHARDPS_WORKERS", "the command line", "the default", or a derived value's
 * source. Writes into buf and returns it. */
const char *ps_flags_describe_origin(const ps_flags_ctx *ctx, const char *name, char *buf,
                                     size_t len);
/* ps_flags_load without a cluster file or origins, for programs that need
 * neither; the same return values. */
int ps_flags_parse(const ps_flag *flags, int n, int argc, char **argv, const char *prog,
                   const char *summary);

#endif
