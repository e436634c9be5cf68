/* Error codes shared by every shardps module.
 *
 * Functions return 0 on success or a negative code: either a negated errno
 * value (-ENOMEM, -EINVAL, ...) or one of the PS_E* codes below, which live
 * above the errno range so the two never collide. One X-macro table generates
 * the enum, ps_strerror() and ps_err_name(), so a new code is one line. */
#ifndef PS_ERROR_H
#define PS_ERROR_H

#include <stddef.h>

#define PS_ERRNO_MAP(X)                                                                            \
    X(PROTO, "protocol violation")                                                                 \
    X(VERSION, "protocol version mismatch")                                                        \
    X(TOOBIG, "frame exceeds size limit")                                                          \
    X(CRC, "payload checksum mismatch")                                                            \
    X(FORMAT, "malformed file")                                                                    \
    X(MISMATCH, "model or cluster mismatch")                                                       \
    X(REJECTED, "peer refused the connection")                                                     \
    X(CLOSED, "connection closed")                                                                 \
    X(TIMEOUT, "timed out")                                                                        \
    X(USAGE, "invalid command-line usage")

enum {
    PS__ERR_BASE = 10000,
#define PS__ERR_ENUM(name, msg) PS_E##name,
    PS_ERRNO_MAP(PS__ERR_ENUM)
#undef PS__ERR_ENUM
};

/* Returns a static string describing err (negative or positive); never NULL. */
const char *ps_strerror(int err);
/* Returns the symbolic name ("PS_EPROTO", "ENOMEM"), static; never NULL. */
const char *ps_err_name(int err);

/* Whether a client that met err (negative) has lost its connection, so that
 * connecting again may find the peer back: closed, reset, a broken pipe,
 * timed out. Not a peer that refused us, broke the protocol or holds another
 * model, and not our own fault (-ENOMEM, -EINVAL): a new connection would
 * meet those again. Pure. */
int ps_error_is_connection_loss(int err);

/* For functions that explain a refusal in a caller's buffer: formats the
 * message into buf[len] (always NUL-terminated when len > 0) and returns
 * code, so "return ps_err_printf(err, errlen, -EINVAL, ...)" is one line. */
int ps_err_printf(char *buf, size_t len, int code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif
