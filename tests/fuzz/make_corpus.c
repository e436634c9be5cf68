/* ps-fuzz-corpus DIR: writes the seed corpus of the fuzz targets into
 * DIR/frame, DIR/handshake and DIR/client (all must exist), and DIR/table,
 * DIR/checkpoint and DIR/model (corpus_files.c). The seeds committed under
 * tests/fuzz/corpus were made with it; rerun it when the protocol changes:
 *   build-fuzz/tests/fuzz/ps-fuzz-corpus tests/fuzz/corpus
 * Seeds are a few valid frames of each kind (HELLO, PULL, PUSH with its
 * payload, the server's replies) and a few broken ones (truncated, wrong
 * version, bad CRC, impossible lengths), in the input format of each target:
 * fuzz_frame takes [max-payload selector][split seed][stream], fuzz_handshake
 * [mode][stream or records] (fuzz_common.h), fuzz_client the records a
 * server answers with. Starting from frames that pass
 * the decoder lets the fuzzer spend its time on the checks behind it. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fuzz_common.h"
#include "ps_error.h"
#include "tensor_table.h"

/* fuzz_frame's selector for a 1 MiB payload limit (see ff_max_payloads). */
#define MC_FRAME_LIMIT_1MIB 5
#define MC_MAX_KEYS         (PS_MAX_TENSORS * 64)

typedef struct {
    const char *dir;
    ps_model_spec spec;
    uint64_t keys[MC_MAX_KEYS];
    size_t n_keys;
    float grad[1024];
    size_t grad_len; /* bytes of grad a push of every key carries */
    int failed;
} mc_ctx;

static void mc_write(mc_ctx *m, const char *target, const char *name, const uint8_t *head,
                     size_t head_len, const psf_buf *body)
{
    char path[4096];
    FILE *f;

    snprintf(path, sizeof(path), "%s/%s/%s", m->dir, target, name);
    f = fopen(path, "wb");
    if (f == NULL || fwrite(head, 1, head_len, f) != head_len ||
        (body->len && fwrite(body->p, 1, body->len, f) != body->len) || fclose(f) != 0) {
        fprintf(stderr, "ps-fuzz-corpus: cannot write %s: %s\n", path, strerror(errno));
        m->failed = 1;
    }
}

/* A frame seed: 1 MiB limit, split seed 7, then the stream. */
static void mc_frame_seed(mc_ctx *m, const char *name, const psf_buf *stream)
{
    const uint8_t head[2] = {MC_FRAME_LIMIT_1MIB, 7};

    mc_write(m, "frame", name, head, sizeof(head), stream);
}

static void mc_handshake_seed(mc_ctx *m, const char *name, uint8_t mode, const psf_buf *body)
{
    mc_write(m, "handshake", name, &mode, 1, body);
}

static void mc_pull(mc_ctx *m, Shardps__Header *h, uint64_t clock)
{
    shardps__header__init(h);
    h->type = SHARDPS__MSG_TYPE__PULL;
    h->request_id = 2 + clock;
    h->clock = clock;
    h->n_keys = m->n_keys;
    h->keys = m->keys;
}

static void mc_push(mc_ctx *m, Shardps__Header *h, uint64_t clock)
{
    shardps__header__init(h);
    h->type = SHARDPS__MSG_TYPE__PUSH;
    h->request_id = 100 + clock;
    h->clock = clock;
    h->dtype = SHARDPS__DTYPE__DTYPE_F32;
    h->n_keys = m->n_keys;
    h->keys = m->keys;
}

static int mc_frames(mc_ctx *m)
{
    Shardps__Header h;
    Shardps__Hello hello;
    psf_buf b = {0};
    int rc = 0;

    psf_hello(&h, &hello, &m->spec);
    rc |= psf_hello_frames(&b, &h);
    mc_frame_seed(m, "hello", &b);
    mc_pull(m, &h, 0);
    rc |= psf_frame(&b, &h, NULL, 0);
    mc_push(m, &h, 0);
    rc |= psf_frame(&b, &h, m->grad, m->grad_len);
    mc_frame_seed(m, "hello-pull-push", &b);
    b.len = 0;

    /* The server's side of the conversation. */
    {
        Shardps__Welcome w = SHARDPS__WELCOME__INIT;
        shardps__header__init(&h);
        h.type = SHARDPS__MSG_TYPE__WELCOME;
        w.mode = "sync";
        w.heartbeat_ms = 2500;
        h.welcome = &w;
        rc |= psf_frame(&b, &h, NULL, 0);
        shardps__header__init(&h);
        h.type = SHARDPS__MSG_TYPE__PULL_REPLY;
        h.n_keys = m->n_keys;
        h.keys = m->keys;
        h.dtype = SHARDPS__DTYPE__DTYPE_F32;
        rc |= psf_frame(&b, &h, m->grad, m->grad_len);
        shardps__header__init(&h);
        h.type = SHARDPS__MSG_TYPE__REJECT;
        h.status = -PS_EMISMATCH;
        h.reason = "model mismatch";
        rc |= psf_frame(&b, &h, NULL, 0);
        mc_frame_seed(m, "welcome-reply-reject", &b);
        b.len = 0;
    }

    /* Broken: half a PUSH, a PUSH whose CRC is off by one bit, an empty and
     * an oversized length prefix. */
    mc_push(m, &h, 0);
    rc |= psf_frame(&b, &h, m->grad, m->grad_len);
    b.len /= 2;
    mc_frame_seed(m, "truncated-push", &b);
    b.len = 0;
    rc |= psf_frame(&b, &h, m->grad, m->grad_len);
    b.p[b.len - 1] ^= 1;
    mc_frame_seed(m, "bad-crc-push", &b);
    b.len = 0;
    {
        static const uint8_t zero[4] = {0, 0, 0, 0}, huge[4] = {1, 0, 1, 0};
        rc |= psf_buf_put(&b, zero, sizeof(zero));
        mc_frame_seed(m, "empty-header", &b);
        b.len = 0;
        rc |= psf_buf_put(&b, huge, sizeof(huge));
        mc_frame_seed(m, "header-over-limit", &b);
        b.len = 0;
    }
    psf_buf_free(&b);
    return rc;
}

static int mc_handshakes(mc_ctx *m)
{
    Shardps__Header h;
    Shardps__Hello hello;
    psf_buf b = {0};
    int rc = 0;

    /* Raw streams, as a peer would send them. */
    psf_hello(&h, &hello, &m->spec);
    rc |= psf_hello_frames(&b, &h);
    mc_handshake_seed(m, "raw-hello", 0, &b);
    b.len = 0;
    {
        ps_model_spec other;
        rc |= ps_model_spec_copy(&other, &m->spec);
        other.seed ^= 1;
        psf_hello(&h, &hello, &other);
        rc |= psf_hello_frames(&b, &h);
        mc_handshake_seed(m, "raw-wrong-model", 0, &b);
        b.len = 0;
        ps_model_spec_free(&other);
    }
    mc_pull(m, &h, 0);
    rc |= psf_frame(&b, &h, NULL, 0);
    mc_handshake_seed(m, "raw-pull-before-hello", 0, &b);
    mc_handshake_seed(m, "hello-then-pull", PSF_MODE_HELLO, &b);
    b.len = 0;
    mc_push(m, &h, 0);
    rc |= psf_frame(&b, &h, m->grad, m->grad_len);
    mc_handshake_seed(m, "hello-then-push", PSF_MODE_HELLO, &b);
    b.len = 0;

    /* Records: a whole step, then requests that break the rules. */
    psf_hello(&h, &hello, &m->spec);
    rc |= psf_hello_records(&b, &h);
    mc_pull(m, &h, 0);
    rc |= psf_record(&b, &h, NULL, 0);
    mc_push(m, &h, 0);
    rc |= psf_record(&b, &h, m->grad, m->grad_len);
    mc_pull(m, &h, 1);
    rc |= psf_record(&b, &h, NULL, 0);
    shardps__header__init(&h);
    h.type = SHARDPS__MSG_TYPE__HEARTBEAT;
    rc |= psf_record(&b, &h, NULL, 0);
    h.type = SHARDPS__MSG_TYPE__BYE;
    rc |= psf_record(&b, &h, NULL, 0);
    mc_handshake_seed(m, "records-one-step", PSF_MODE_RECORDS, &b);
    b.len = 0;

    mc_push(m, &h, 0);
    m->grad[3] = NAN;
    rc |= psf_record(&b, &h, m->grad, m->grad_len);
    m->grad[3] = 0.5f;
    mc_handshake_seed(m, "hello-records-nan-push", PSF_MODE_HELLO | PSF_MODE_RECORDS, &b);
    b.len = 0;
    mc_push(m, &h, 0);
    h.n_keys = 2;
    h.keys[1] = h.keys[0];
    rc |= psf_record(&b, &h, m->grad, m->grad_len);
    mc_handshake_seed(m, "hello-records-dup-key", PSF_MODE_HELLO | PSF_MODE_RECORDS, &b);
    b.len = 0;
    /* A step whose push is marked unused (no payload, no dtype), then the
     * next step's pull: the step applies nothing. */
    mc_push(m, &h, 0);
    h.n_keys = 1;
    h.unused = 1;
    h.dtype = SHARDPS__DTYPE__DTYPE_UNKNOWN;
    rc |= psf_record(&b, &h, NULL, 0);
    mc_pull(m, &h, 1);
    rc |= psf_record(&b, &h, NULL, 0);
    mc_handshake_seed(m, "hello-records-unused-push", PSF_MODE_HELLO | PSF_MODE_RECORDS, &b);
    b.len = 0;
    /* Restore the key list the duplicate overwrote. */
    rc |= psf_keys(&m->spec, m->keys, MC_MAX_KEYS) < 0;
    mc_pull(m, &h, 5);
    rc |= psf_record(&b, &h, NULL, 0);
    mc_push(m, &h, 0);
    rc |= psf_record(&b, &h, m->grad, m->grad_len - 4);
    mc_handshake_seed(m, "hello-records-future-pull-short-push", PSF_MODE_HELLO | PSF_MODE_RECORDS,
                      &b);
    psf_buf_free(&b);
    return rc;
}

/* fuzz_client: the answers of a server, one record per request of the
 * client (fuzz_client.c: HELLO 1, PULL 2, PUSHes 3-12, PULL 13, PUSHes
 * 14-23, PULL 24). lie picks the one answer that lies, as in
 * tests/integration/lying_server.sh. */
enum {
    MC_HONEST,
    MC_WELCOME_CLOCK,
    MC_WELCOME_MODE,
    MC_PULL_DTYPE,
    MC_PULL_CLOCK,
    MC_PULL_NAN,
    MC_PUSH_STATUS,
    MC_ERROR,
    MC_ASYNC
};

static int mc_client_seed(mc_ctx *m, const char *name, int lie)
{
    Shardps__Header h;
    Shardps__Welcome w = SHARDPS__WELCOME__INIT;
    uint8_t digest[PS_TABLE_DIGEST_BYTES];
    psf_buf b = {0};
    uint64_t id = 1;
    int rc = 0;

    shardps__header__init(&h);
    h.type = SHARDPS__MSG_TYPE__WELCOME;
    h.request_id = id++;
    w.mode = lie == MC_WELCOME_MODE ? "bogus" : lie == MC_ASYNC ? "async" : "sync";
    w.staleness = lie == MC_ASYNC ? UINT32_MAX : 0;
    w.clock = lie == MC_WELCOME_CLOCK ? UINT64_MAX : 0;
    w.heartbeat_ms = 2500;
    /* The table the client declared: it checks the WELCOME's digest. */
    ps_model_spec_digest(&m->spec, digest);
    w.table_digest.len = sizeof(digest);
    w.table_digest.data = digest;
    h.welcome = &w;
    rc |= psf_record(&b, &h, NULL, 0);
    for (uint64_t step = 0; step <= 2; step++) {
        shardps__header__init(&h);
        h.type = SHARDPS__MSG_TYPE__PULL_REPLY;
        h.request_id = id++;
        h.clock = lie == MC_PULL_CLOCK ? UINT64_MAX : step;
        h.dtype = lie == MC_PULL_DTYPE ? 99 : SHARDPS__DTYPE__DTYPE_F32;
        h.n_keys = m->n_keys;
        h.keys = m->keys;
        if (lie == MC_ERROR && step == 1) {
            h.type = SHARDPS__MSG_TYPE__ERROR;
            h.status = -ECONNRESET;
            h.reason = "reset\033[2J";
            h.n_keys = 0;
        }
        m->grad[5] = lie == MC_PULL_NAN ? NAN : 0.5f;
        rc |= psf_record(&b, &h, m->grad, h.n_keys ? m->grad_len : 0);
        m->grad[5] = 0.5f;
        for (size_t k = 0; step < 2 && k < m->n_keys; k++) {
            shardps__header__init(&h);
            h.type = SHARDPS__MSG_TYPE__PUSH_REPLY;
            h.request_id = id++;
            h.clock = step;
            h.status = lie == MC_PUSH_STATUS ? INT32_MAX : 0;
            h.staleness = lie == MC_ASYNC ? 1 : 0;
            rc |= psf_record(&b, &h, NULL, 0);
        }
    }
    mc_write(m, "client", name, NULL, 0, &b);
    psf_buf_free(&b);
    return rc;
}

static int mc_clients(mc_ctx *m)
{
    return mc_client_seed(m, "honest-two-steps", MC_HONEST) |
           mc_client_seed(m, "async-two-steps", MC_ASYNC) |
           mc_client_seed(m, "welcome-clock-max", MC_WELCOME_CLOCK) |
           mc_client_seed(m, "welcome-mode-bogus", MC_WELCOME_MODE) |
           mc_client_seed(m, "pull-dtype-99", MC_PULL_DTYPE) |
           mc_client_seed(m, "pull-clock-max", MC_PULL_CLOCK) |
           mc_client_seed(m, "pull-nan", MC_PULL_NAN) |
           mc_client_seed(m, "push-status-max", MC_PUSH_STATUS) |
           mc_client_seed(m, "error-reset", MC_ERROR);
}

int main(int argc, char **argv)
{
    mc_ctx m;
    int n;

    if (argc != 2) {
        fprintf(stderr, "usage: ps-fuzz-corpus DIR (writes DIR/frame/*, DIR/handshake/*, "
                        "DIR/client/*, DIR/table/*, DIR/checkpoint/* and DIR/model/*)\n");
        return 2;
    }
    memset(&m, 0, sizeof(m));
    m.dir = argv[1];
    psf_spec(&m.spec);
    n = psf_keys(&m.spec, m.keys, MC_MAX_KEYS);
    if (n < 0 || m.spec.total_numel > sizeof(m.grad) / sizeof(m.grad[0])) {
        fprintf(stderr, "ps-fuzz-corpus: the fuzz model does not fit\n");
        return 1;
    }
    m.n_keys = (size_t)n;
    m.grad_len = m.spec.total_numel * sizeof(float);
    for (size_t i = 0; i < m.spec.total_numel; i++)
        m.grad[i] = (float)((int)(i % 7) - 3) * 0.125f;
    if (mc_frames(&m) != 0 || mc_handshakes(&m) != 0 || mc_clients(&m) != 0 || m.failed ||
        psf_file_seeds(m.dir) != 0) {
        fprintf(stderr, "ps-fuzz-corpus: could not build every seed\n");
        ps_model_spec_free(&m.spec);
        return 1;
    }
    ps_model_spec_free(&m.spec);
    return 0;
}
