/* The server's configuration from the checked job: the one place where
 * shardps-server turns the job's options (job_options.h) and what the check
 * worked out (job_check.h) into the configuration of its key-value server
 * (kv_server.h): the update rule, the rate and its schedule, consistency,
 * limits, deadlines, checkpoints, the auth key, the job's settings. */
#ifndef PS_SERVER_CONFIG_H
#define PS_SERVER_CONFIG_H

#include <stddef.h>

#include "job_check.h"
#include "job_options.h"
#include "kv_server.h"

/* Fills cfg (zeroed first) for server server_index of the job o as checked
 * into plan; cfg borrows strings from o and the settings from plan, which
 * must outlive the server. --apply-threads auto is settled here from the
 * cores (and sizes libuv's pool, which reads its size on first use).
 * Returns 0, or -PS_EUSAGE with one line in err (the auth token file went
 * bad since the check). */
int ps_server_config_build(ps_kv_server_config *cfg, const ps_job_options *o,
                           const ps_job_plan *plan, int server_index, char *err, size_t len);

#endif
