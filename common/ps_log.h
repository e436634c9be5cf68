/* Human-readable logging for daemons and tools.
 *
 * One line per event on stderr: wall-clock time, level, the process's role
 * (set once at start-up, e.g. "server 1" or "worker 0") and the message, so
 * interleaved output of a local cluster can still be read at 3 a.m. */
#ifndef PS_LOG_H
#define PS_LOG_H

#include <stddef.h>

/* PS_LOG_OFF, as a minimum level only: nothing is logged (a library user's
 * choice). */
typedef enum { PS_LOG_DEBUG, PS_LOG_INFO, PS_LOG_WARN, PS_LOG_ERROR, PS_LOG_OFF } ps_log_level;

/* Where a program that shares the terminal with a line it redraws (the
 * launcher's console) wants its log lines: each whole line, newline
 * included, instead of a write to stderr. */
typedef void (*ps_log_sink)(void *arg, const char *line, size_t len);

/* role is copied; call before any other thread logs. */
void ps_log_set_role(const char *role);
void ps_log_set_level(ps_log_level level);
/* NULL: stderr again. Call before any other thread logs. */
void ps_log_set_sink(ps_log_sink sink, void *arg);
void ps_log(ps_log_level level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#define ps_debug(...) ps_log(PS_LOG_DEBUG, __VA_ARGS__)
#define ps_info(...)  ps_log(PS_LOG_INFO, __VA_ARGS__)
#define ps_warn(...)  ps_log(PS_LOG_WARN, __VA_ARGS__)
#define ps_error(...) ps_log(PS_LOG_ERROR, __VA_ARGS__)

#endif
