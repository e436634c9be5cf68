/* HOST:PORT lists (see server_list.h). */
#include "server_list.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ps_error.h"

struct ps_server_list {
    char *text;           /* the copy the entries point into */
    const char **entries; /* n of them */
    int n;
};

/* Checks one entry; i is its index for the message, or -1 for an address
 * that is not part of a list. */
static int ps__check_entry(const char *e, int i, int allow_zero, char *err, size_t errlen)
{
    const char *colon = strrchr(e, ':');
    char what[32] = "address";
    char *end;
    long port;

    if (i >= 0)
        snprintf(what, sizeof(what), "entry %d", i);
    if (e[0] == '\0')
        return ps_err_printf(err, errlen, -EINVAL, "%s is empty", what);
    /* A list written with spaces, as people do in INI files, would
     * otherwise be read as one odd host name and fail much later. */
    if (strpbrk(e, " \t") != NULL)
        return ps_err_printf(err, errlen, -EINVAL,
                             "%s '%s' contains a space; separate addresses with commas "
                             "(HOST:PORT,HOST:PORT)",
                             what, e);
    /* An IPv6 address has colons of its own: only "[addr]:port" has a port. */
    if (colon == NULL || (e[0] == '[' && colon[-1] != ']'))
        return ps_err_printf(err, errlen, -EINVAL,
                             "%s '%s' has no port (HOST:PORT, e.g. 10.0.0.1:7000)", what, e);
    if (colon == e || (e[0] == '[' && colon == e + 2))
        return ps_err_printf(err, errlen, -EINVAL, "%s '%s' has no host", what, e);
    if (colon[1] == '\0')
        return ps_err_printf(err, errlen, -EINVAL, "%s '%s' has no port after ':'", what, e);
    errno = 0;
    port = strtol(colon + 1, &end, 10);
    if (*end != '\0' || colon[1] < '0' || colon[1] > '9')
        return ps_err_printf(err, errlen, -EINVAL, "%s '%s': port '%s' is not a number", what, e,
                             colon + 1);
    if (errno != 0 || port < (allow_zero ? 0 : 1) || port > 65535)
        return ps_err_printf(err, errlen, -EINVAL, "%s '%s': port %s is out of range %d..65535",
                             what, e, colon + 1, allow_zero ? 0 : 1);
    return 0;
}

int ps_hostport_check(const char *text, int allow_zero, char *err, size_t errlen)
{
    if (errlen > 0)
        err[0] = '\0';
    return ps__check_entry(text, -1, allow_zero, err, errlen);
}

int ps_server_list_parse(ps_server_list **out, const char *text, int max, int allow_zero, char *err,
                         size_t errlen)
{
    ps_server_list *l = calloc(1, sizeof(*l));
    int cap = 1, rc;

    *out = NULL;
    if (errlen > 0)
        err[0] = '\0';
    for (const char *p = text; *p; p++)
        cap += *p == ',';
    if (l == NULL || (l->text = strdup(text)) == NULL ||
        (l->entries = calloc((size_t)cap, sizeof(*l->entries))) == NULL) {
        rc = -ENOMEM;
        snprintf(err, errlen, "out of memory");
        goto fail;
    }
    if (cap > max) {
        rc = ps_err_printf(err, errlen, -EINVAL, "%d entries, more than the %d allowed", cap, max);
        goto fail;
    }
    /* Split by hand: strtok would merge ",," and hide an empty entry. */
    for (char *p = l->text;;) {
        char *comma = strchr(p, ',');
        if (comma)
            *comma = '\0';
        rc = ps__check_entry(p, l->n, allow_zero, err, errlen);
        if (rc < 0)
            goto fail;
        l->entries[l->n++] = p;
        if (comma == NULL)
            break;
        p = comma + 1;
    }
    *out = l;
    return 0;

fail:
    ps_server_list_free(l);
    return rc;
}

void ps_server_list_free(ps_server_list *l)
{
    if (l == NULL)
        return;
    free(l->entries);
    free(l->text);
    free(l);
}

int ps_server_list_count(const ps_server_list *l)
{
    return l->n;
}

const char *const *ps_server_list_entries(const ps_server_list *l)
{
    return l->entries;
}
