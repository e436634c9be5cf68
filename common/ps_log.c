/* Logging: formats the whole line first and writes it with one write() so
 * lines from several processes sharing a terminal never interleave. */
#include "ps_log.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

static char ps__log_role[48] = "shardps";
static ps_log_level ps__log_min = PS_LOG_INFO;
static ps_log_sink ps__log_sink;
static void *ps__log_sink_arg;

void ps_log_set_role(const char *role)
{
    snprintf(ps__log_role, sizeof(ps__log_role), "%s", role);
}

void ps_log_set_level(ps_log_level level)
{
    ps__log_min = level;
}

void ps_log_set_sink(ps_log_sink sink, void *arg)
{
    ps__log_sink = sink;
    ps__log_sink_arg = arg;
}

void ps_log(ps_log_level level, const char *fmt, ...)
{
    static const char *names[] = {"debug", "info", "WARN", "ERROR"};
    char line[1024];
    struct timeval tv;
    struct tm tm;
    va_list ap;
    int n;

    if (level < ps__log_min)
        return;
    gettimeofday(&tv, NULL);
    localtime_r(&tv.tv_sec, &tm);
    n = snprintf(line, sizeof(line), "%02d:%02d:%02d.%03ld %-5s [%s] ", tm.tm_hour, tm.tm_min,
                 tm.tm_sec, (long)(tv.tv_usec / 1000), names[level], ps__log_role);
    va_start(ap, fmt);
    n += vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    if (n > (int)sizeof(line) - 2)
        n = (int)sizeof(line) - 2;
    line[n++] = '\n';
    if (ps__log_sink) {
        ps__log_sink(ps__log_sink_arg, line, (size_t)n);
        return;
    }
    if (write(STDERR_FILENO, line, (size_t)n) < 0)
        return;
}
