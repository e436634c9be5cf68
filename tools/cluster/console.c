/* The launcher's terminal (see console.h). Single-threaded: everything runs
 * on the launcher's loop. */
#include "console.h"

#include <errno.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <unistd.h>

/* Room for one progress line, whatever the terminal's width. */
#define PS__PROGRESS_MAX 512

struct ps_console {
    int tty;
    int width;    /* columns of the terminal, read on SIGWINCH */
    int shown;    /* the progress line is on the screen now */
    int watching; /* winch is started */
    uv_signal_t winch;
    char line[PS__PROGRESS_MAX]; /* the fields, joined and cut to the width */
    char fields[PS__PROGRESS_MAX];
    size_t field_end[16]; /* where each field of fields ends */
    int n_fields;
};

static void ps__write_all(FILE *f, const char *s, size_t len)
{
    fwrite(s, 1, len, f);
    fflush(f);
}

/* The terminal's width; 80 when it will not say. */
static int ps__read_width(void)
{
    struct winsize ws;

    if (ioctl(STDOUT_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
        return ws.ws_col;
    return 80;
}

/* The fields that fit in one column less than the width (a line that
 * reaches the last column makes some terminals wrap at once), in order of
 * importance: one too wide is left out and a shorter one after it may
 * still go in. */
static void ps__fit(ps_console *c)
{
    size_t used = 0, room = c->width > 1 ? (size_t)c->width - 1 : 1, start = 0;

    c->line[0] = '\0';
    for (int i = 0; i < c->n_fields; start = c->field_end[i++]) {
        size_t flen = c->field_end[i] - start, need = flen + (used ? 2 : 0);
        if (used + need > room || used + need >= sizeof(c->line))
            continue;
        if (used)
            memcpy(c->line + used, "  ", 2);
        memcpy(c->line + used + (used ? 2 : 0), c->fields + start, flen);
        used += need;
        c->line[used] = '\0';
    }
}

/* The cursor is left at the start of the line, and the line is erased from
 * there to the end of the screen: a terminal that narrows re-wraps the line
 * onto more rows (tmux, VTE, kitty do), and where it keeps the cursor at the
 * line's start the erase takes every row of it, and nothing else, since the
 * progress line is always the last thing on the screen. */
static void ps__draw(ps_console *c)
{
    char buf[PS__PROGRESS_MAX + 16];
    int n = snprintf(buf, sizeof(buf), "\r\033[J%s\r", c->line);

    ps__write_all(stdout, buf, (size_t)n);
    c->shown = 1;
}

static void ps__clear(ps_console *c)
{
    if (c->shown)
        ps__write_all(stdout, "\r\033[J", 4);
    c->shown = 0;
}

static void ps__on_winch(uv_signal_t *h, int signum)
{
    ps_console *c = h->data;

    (void)signum;
    c->width = ps__read_width();
    if (c->shown) {
        ps__fit(c);
        ps__draw(c);
    }
}

int ps_console_init(ps_console **out, uv_loop_t *loop)
{
    ps_console *c = calloc(1, sizeof(*c));

    *out = NULL;
    if (c == NULL)
        return -ENOMEM;
    c->tty = isatty(STDOUT_FILENO);
    c->width = ps__read_width();
    if (c->tty) {
        uv_signal_init(loop, &c->winch);
        c->winch.data = c;
        uv_signal_start(&c->winch, ps__on_winch, SIGWINCH);
        c->watching = 1;
    }
    *out = c;
    return 0;
}

void ps_console_close(ps_console *c)
{
    if (c == NULL)
        return;
    ps__clear(c);
    c->n_fields = 0;
    if (c->watching)
        uv_close((uv_handle_t *)&c->winch, NULL);
    c->watching = 0;
}

void ps_console_free(ps_console *c)
{
    free(c);
}

int ps_console_is_tty(const ps_console *c)
{
    return c->tty;
}

void ps_console_line(ps_console *c, int to_stdout, const char *line, size_t len)
{
    int redraw = c->shown;

    ps__clear(c);
    ps__write_all(to_stdout ? stdout : stderr, line, len);
    if (len == 0 || line[len - 1] != '\n')
        ps__write_all(to_stdout ? stdout : stderr, "\n", 1);
    if (redraw)
        ps__draw(c);
}

void ps_console_printf(ps_console *c, const char *fmt, ...)
{
    char buf[1024];
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    if (n < 0)
        return;
    ps_console_line(c, 1, buf, (size_t)n < sizeof(buf) ? (size_t)n : sizeof(buf) - 1);
}

void ps_console_log_sink(void *arg, const char *line, size_t len)
{
    ps_console_line(arg, 0, line, len);
}

void ps_console_progress(ps_console *c, const char *const *fields, int n, const char *plain)
{
    size_t used = 0;

    if (!c->tty) {
        ps_console_line(c, 1, plain, strlen(plain));
        return;
    }
    c->n_fields = 0;
    for (int i = 0; i < n && i < (int)(sizeof(c->field_end) / sizeof(c->field_end[0])); i++) {
        size_t len = strlen(fields[i]);
        if (used + len >= sizeof(c->fields))
            break;
        memcpy(c->fields + used, fields[i], len);
        used += len;
        c->field_end[c->n_fields++] = used;
    }
    ps__fit(c);
    ps__draw(c);
}

void ps_console_end_progress(ps_console *c)
{
    ps__clear(c);
    c->n_fields = 0;
}
