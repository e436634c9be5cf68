/* A comma-separated list of HOST:PORT addresses: the job's servers in index
 * order (--servers of the worker and the server, the cluster file), or the
 * metrics endpoints shardps-top watches. Parsed once, here, so every program
 * accepts the same lists and says the same thing about a wrong one. Only the
 * syntax is checked; names are resolved when they are used. */
#ifndef PS_SERVER_LIST_H
#define PS_SERVER_LIST_H

#include <stddef.h>

/* The most servers a job may have. */
#define PS_MAX_SERVERS 4096

typedef struct ps_server_list ps_server_list;

/* Parses text (copied) into at most max entries. Each entry is HOST:PORT,
 * with HOST a name, an IPv4 address or a bracketed IPv6 address, and PORT in
 * 1..65535, or 0..65535 with allow_zero (a server's own entry, where 0 lets
 * the OS choose). Returns 0, -ENOMEM, or -EINVAL with one line in err (always
 * NUL-terminated) naming the entry and what is wrong with it: empty, no
 * host, no port, a port that is not a number or out of range, a space
 * (a list separated by spaces rather than commas), too many. */
int ps_server_list_parse(ps_server_list **out, const char *text, int max, int allow_zero, char *err,
                         size_t errlen);
/* The same checks for one address that is not part of a list (--listen, a
 * metrics endpoint): 0, or -EINVAL with one line in err saying what is wrong
 * (a space, no port, no host, a port not a number or out of range). */
int ps_hostport_check(const char *text, int allow_zero, char *err, size_t errlen);

/* NULL is allowed. */
void ps_server_list_free(ps_server_list *l);

/* The number of entries (at least 1). */
int ps_server_list_count(const ps_server_list *l);
/* The entries, "HOST:PORT" each, in order; owned by the list and valid until
 * ps_server_list_free. */
const char *const *ps_server_list_entries(const ps_server_list *l);

#endif
