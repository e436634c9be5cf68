/* Error-code strings: generated from the PS_ERRNO_MAP table so names and
 * messages can never drift apart from the enum. */
#include "ps_error.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

const char *ps_strerror(int err)
{
    int e = err < 0 ? -err : err;
    switch (e) {
#define PS__ERR_MSG(name, msg)                                                                     \
    case PS_E##name:                                                                               \
        return msg;
        PS_ERRNO_MAP(PS__ERR_MSG)
#undef PS__ERR_MSG
    default:
        return strerror(e);
    }
}

const char *ps_err_name(int err)
{
    int e = err < 0 ? -err : err;
    switch (e) {
#define PS__ERR_NAME(name, msg)                                                                    \
    case PS_E##name:                                                                               \
        return "PS_E" #name;
        PS_ERRNO_MAP(PS__ERR_NAME)
#undef PS__ERR_NAME
    default:
        return strerrorname_np(e) ? strerrorname_np(e) : "EUNKNOWN";
    }
}

int ps_error_is_connection_loss(int err)
{
    return err < 0 && err != -PS_EREJECTED && err != -PS_EPROTO && err != -PS_EMISMATCH &&
           err != -ENOMEM && err != -EINVAL;
}

int ps_err_printf(char *buf, size_t len, int code, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(buf, len, fmt, ap);
    va_end(ap);
    return code;
}
