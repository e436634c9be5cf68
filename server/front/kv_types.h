/* The server's handle and its callback, apart from the API (kv_server.h)
 * so that the front's own files (front.h) hold the handle's struct without
 * including the API's room. */
#ifndef PS_KV_TYPES_H
#define PS_KV_TYPES_H

typedef struct ps_kv_server ps_kv_server;

/* Called once every rank has said goodbye (finished) or is lost, and none is
 * live. A rank that disappeared without a goodbye may still rejoin, so the
 * server waits for it, but only for rejoin_timeout_ms: then it counts as
 * lost (logged, and in the summary) and the job ends without it. A lost
 * rank that comes back while the job still runs is taken back. */
typedef void (*ps_kv_server_done_cb)(ps_kv_server *s, void *arg);

#endif
