/* The handle's parts that libshardps's files besides lib/shardps.c need
 * (lib/shardps_rows.c); internal to lib/, never installed, and none of its
 * names is exported (lib/shardps.map exports shardps_* only). */
#ifndef PS_SHARDPS_INTERNAL_H
#define PS_SHARDPS_INTERNAL_H

#include "kv_client.h"
#include "shardps.h"

/* The client configuration the handle builds (its spec holds what was
 * declared); owned by h. */
ps_kv_client_config *ps__shardps_config(shardps *h);
/* The connected client, NULL before shardps_connect; owned by h. */
ps_kv_client *ps__shardps_client(const shardps *h);
/* Sets h's sentence (shardps_last_error) and returns code. */
__attribute__((format(printf, 3, 4))) int ps__shardps_fail(shardps *h, int code, const char *fmt,
                                                           ...);
/* The client's failure rc while doing what doing says, with its sentence. */
int ps__shardps_kv_fail(shardps *h, int rc, const char *doing);

#endif
