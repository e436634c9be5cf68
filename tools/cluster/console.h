/* The launcher's terminal: the one writer of everything shardps-cluster
 * shows, its own log, its children's output and its progress.
 *
 * On a terminal the progress is one line redrawn in place. Anything else
 * printed while it shows (a log line of a worker, an epoch's accuracy)
 * clears it first and draws it again after, so no line is ever broken or
 * left behind half overwritten. The line holds the fields that fit the
 * terminal's width (read again on SIGWINCH), most important first, so it
 * never wraps (a wrapped line cannot be cleared in place) and the time left,
 * first on the line, stays in view. A window narrowed under a line already
 * drawn re-wraps it; the erase reaches every row of it where the terminal
 * keeps the cursor at the line's start (tmux does, between draws), but a
 * resize in the middle of a draw can leave one stale copy behind. Without a
 * terminal each progress report is one plain line, for logs and tests that
 * grep. */
#ifndef PS_CONSOLE_H
#define PS_CONSOLE_H

#include <stddef.h>
#include <uv.h>

typedef struct ps_console ps_console;

/* Writes to the process's stdout and stderr. On a terminal it watches
 * SIGWINCH on loop; ps_console_close releases that handle. Returns 0 or
 * -ENOMEM. */
int ps_console_init(ps_console **out, uv_loop_t *loop);
/* Stops watching the window (a handle close on the loop) and ends the
 * progress line; the console stays usable for plain output until freed.
 * NULL is allowed. */
void ps_console_close(ps_console *c);
/* After ps_console_close and the loop's last run. NULL is allowed. */
void ps_console_free(ps_console *c);

/* Whether stdout is a terminal. */
int ps_console_is_tty(const ps_console *c);

/* One line (len bytes, with or without its newline) to stderr or stdout
 * (to_stdout), around the progress line. */
void ps_console_line(ps_console *c, int to_stdout, const char *line, size_t len);
/* A formatted line to stdout, around the progress line. */
void ps_console_printf(ps_console *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A ps_log_sink: the launcher's own log lines to stderr. arg is the console. */
void ps_console_log_sink(void *arg, const char *line, size_t len);

/* The progress line on a terminal: fields[0..n), most important first; as
 * many whole fields as fit the width are drawn, separated by two spaces.
 * The texts are copied. Without a terminal, plain (one line, as given, to
 * stdout) is printed instead. */
void ps_console_progress(ps_console *c, const char *const *fields, int n, const char *plain);
/* Clears the progress line for good (until the next ps_console_progress). */
void ps_console_end_progress(ps_console *c);

#endif
