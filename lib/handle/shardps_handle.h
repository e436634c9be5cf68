/* The inside of a libshardps handle (include/shardps.h), shared by the files
 * of lib/handle/ that implement its entries: shardps.c (the lifecycle, the
 * options, declaring tensors, pulls and waits, the evaluator's calls, the
 * table), shardps_push.c (a step's pushes), shardps_values.c (declared
 * values and buffers) and shardps_rows.c (the embedding tables), over the
 * key-value client (lib/core/kv_client.h), the push copies (push_copies.h)
 * and the launcher's reports (job_report.h). Not installed; nothing outside
 * lib/handle/ includes it. */
#ifndef PS_SHARDPS_HANDLE_H
#define PS_SHARDPS_HANDLE_H

#include <stdint.h>

#include "auth.h"
#include "flag_table.h"
#include "job_options.h"
#include "job_report.h"
#include "kv_client.h"
#include "model_spec.h"
#include "push_copies.h"
#include "shardps.h"

#define PS__HANDLE_MAX_SERVERS 4096
#define PS__ADDR_MAX           256

/* Room for the rows of the job options the library takes. */
#define PS__MAX_OPTIONS 16

struct shardps {
    ps_kv_client_config cfg;
    /* The job options the library takes (PS_JOB_LIBRARY), checked and set
     * through their rows of the one table; cfg is built from them. */
    ps_job_options opts;
    ps_flag options[PS__MAX_OPTIONS];
    int n_options;
    ps_kv_client *kv; /* NULL until connected */
    char **servers;   /* owned copies; cfg.servers points here */
    uint8_t auth_key[PS_AUTH_KEY_BYTES];
    char *job_settings; /* owned; cfg.job_settings points here */
    int declared;       /* tensors declared, or adopted by joining */
    /* Per tensor: the caller's initial values of one declared with them
     * (shardps_declare_values), NULL for the others; borrowed until
     * shardps_connect returns. Owned array, n_values long; cfg.values. */
    const void **values;
    int n_values;
    /* Tensors pushed since the last wait: the client's own check is per
     * server (its ring of acks), so a second push of one tensor would
     * otherwise send some of its chunks twice. */
    unsigned char pushed[PS_MAX_TENSORS];
    int started;           /* a push or pull was started since the last wait */
    ps_push_copies copies; /* shardps_push_copy's, owned */
    uint64_t start_clock;
    ps_job_report report; /* to the launcher that started us, if one did */
    char error[512];
};

/* Keeps the sentence of a failure on h (NULL: shardps_new's, per thread)
 * and returns code. */
__attribute__((format(printf, 3, 4))) int ps_shardps_err(shardps *h, int code, const char *fmt,
                                                         ...);
/* A failure rc of the client while doing (a function's name): the client's
 * own sentence when it has one. Returns rc. */
int ps_shardps_kv_err(shardps *h, int rc, const char *doing);
/* 0 when h is connected, else -EINVAL with fn's sentence. */
int ps_shardps_ready(shardps *h, const char *fn);
/* Sets the job option of row f (a row of h->options) from value, given as
 * origin ("option seed", "SHARDPS_SEED"). Returns 0 or a negative code with
 * the sentence on h. */
int ps_shardps_set_row(shardps *h, const ps_flag *f, const char *value, const char *origin);
/* 0 when h may still declare tensors (fn): -EINVAL (h NULL, or an
 * evaluator, which joins) or -EBUSY (connected) with fn's sentence. */
int ps_shardps_may_declare(shardps *h, const char *fn);
/* 0 when h is connected and may change the job (fn: a push or a write),
 * else -EINVAL (not connected) or -EPERM (an evaluator) with the sentence. */
int ps_shardps_may_write(shardps *h, const char *fn);

#endif
