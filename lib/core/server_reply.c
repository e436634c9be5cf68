/* Checks on server frames (see server_reply.h). */
#include "server_reply.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "ps_error.h"

static int ps__bad(char *why, size_t len, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int ps__bad(char *why, size_t len, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(why, len, fmt, ap);
    va_end(ap);
    return -PS_EPROTO;
}

const char *ps_reply_type_name(int type, char *buf, size_t len)
{
    const ProtobufCEnumValue *v =
        protobuf_c_enum_descriptor_get_value(&shardps__msg_type__descriptor, type);

    if (v != NULL)
        return v->name;
    snprintf(buf, len, "type %d", type);
    return buf;
}

/* Frames other than a PULL_REPLY carry no payload. */
static int ps__no_payload(const ps_frame *f, const char *what, char *why, size_t len)
{
    if (f->payload_len != 0)
        return ps__bad(why, len, "sent a %s with a %zu-byte payload; it carries none", what,
                       f->payload_len);
    return 0;
}

int ps_reply_check_welcome(const ps_frame *f, uint64_t hello_id, uint64_t max_clock,
                           ps_reply_welcome *out, char *why, size_t why_len)
{
    const Shardps__Header *h = f->hdr;
    const Shardps__Welcome *w = h->welcome;
    uint32_t st;

    if (w == NULL)
        return ps__bad(why, why_len, "sent a WELCOME without details");
    if (h->request_id != hello_id)
        return ps__bad(why, why_len,
                       "sent a WELCOME for request %" PRIu64 "; our HELLO was %" PRIu64,
                       h->request_id, hello_id);
    if (ps__no_payload(f, "WELCOME", why, why_len) < 0)
        return -PS_EPROTO;
    st = w->staleness;
    if (w->mode == NULL || !((strcmp(w->mode, "sync") == 0 && st == 0) ||
                             (strcmp(w->mode, "async") == 0 && st == UINT32_MAX) ||
                             (strcmp(w->mode, "ssp") == 0 && st < UINT32_MAX)))
        return ps__bad(why, why_len,
                       "sent a WELCOME with mode '%.32s' and staleness %" PRIu32
                       "; known are sync (0), async (2^32-1) and ssp (below 2^32-1)",
                       w->mode ? w->mode : "", st);
    if (w->clock > max_clock)
        return ps__bad(why, why_len,
                       "sent a WELCOME at clock %" PRIu64 ", past the %" PRIu64
                       " steps this worker plans",
                       w->clock, max_clock);
    if (w->heartbeat_ms != 0 && (w->heartbeat_ms < PS_REPLY_MIN_HEARTBEAT_MS ||
                                 w->heartbeat_ms > PS_REPLY_MAX_HEARTBEAT_MS))
        return ps__bad(why, why_len,
                       "sent a WELCOME asking for a heartbeat every %" PRIu32
                       " ms; 0 or %u to %u are allowed",
                       w->heartbeat_ms, PS_REPLY_MIN_HEARTBEAT_MS, PS_REPLY_MAX_HEARTBEAT_MS);
    out->sync = st == 0;
    out->staleness = st;
    out->clock = w->clock;
    out->heartbeat_ms = w->heartbeat_ms;
    out->values_wanted = w->values_wanted;
    return 0;
}

int ps_reply_check_pull_header(const Shardps__Header *h, const ps_reply_pull *e, char *why,
                               size_t why_len)
{
    uint64_t top;

    if (e == NULL || h->request_id != e->request_id)
        return ps__bad(why, why_len, "answered a pull we did not make (request %" PRIu64 ")",
                       h->request_id);
    if (h->dtype != SHARDPS__DTYPE__DTYPE_F32)
        return ps__bad(why, why_len,
                       "sent a PULL_REPLY with dtype %d; only float32 weights are pulled",
                       (int)h->dtype);
    if (h->status != 0)
        return ps__bad(why, why_len, "sent a PULL_REPLY with status %" PRId32 "; it carries none",
                       h->status);
    if (h->n_keys != e->n_keys || h->payload_bytes != e->bytes ||
        memcmp(h->keys, e->keys, e->n_keys * sizeof(uint64_t)) != 0)
        return ps__bad(why, why_len,
                       "answered with other keys or sizes than requested (%zu keys, %" PRIu64
                       " bytes; we asked for %zu keys, %zu bytes)",
                       h->n_keys, h->payload_bytes, e->n_keys, e->bytes);
    if (e->snapshot) {
        if (h->clock > e->max_clock || h->staleness > e->max_clock - h->clock)
            return ps__bad(why, why_len,
                           "sent a snapshot of step %" PRIu64 " (newest chunk %" PRIu32
                           " steps ahead), past the last step %" PRIu64,
                           h->clock, h->staleness, e->max_clock);
        return 0;
    }
    top = e->clock > e->max_clock ? e->clock : e->max_clock;
    if (e->sync ? h->clock < e->clock || h->clock > top : h->clock != e->clock)
        return ps__bad(
            why, why_len, "sent weights of clock %" PRIu64 " for a pull of step %" PRIu64 " (%s)",
            h->clock, e->clock,
            e->sync ? "sync: from that step to the last planned one" : "async and ssp: that step");
    return 0;
}

int ps_reply_check_pull(const ps_frame *f, const ps_reply_pull *e, int placed, char *why,
                        size_t why_len)
{
    if (ps_reply_check_pull_header(f->hdr, e, why, why_len) < 0)
        return -PS_EPROTO;
    if (!placed)
        return ps__bad(why, why_len, "sent a PULL_REPLY that could not be placed");
    if (f->nonfinite)
        return ps__bad(why, why_len, "sent weights that are not all finite (Inf or NaN)");
    return 0;
}

int ps_reply_check_push(const ps_frame *f, const ps_reply_push *e, char *why, size_t why_len)
{
    const Shardps__Header *h = f->hdr;

    if (e == NULL || h->request_id != e->request_id)
        return ps__bad(why, why_len, "acknowledged a push we did not make (request %" PRIu64 ")",
                       h->request_id);
    if (ps__no_payload(f, "PUSH_REPLY", why, why_len) < 0)
        return -PS_EPROTO;
    if (h->clock != e->clock)
        return ps__bad(why, why_len, "acknowledged our push of step %" PRIu64 " as step %" PRIu64,
                       e->clock, h->clock);
    if (h->status < 0 || (uint32_t)h->status > e->n_keys)
        return ps__bad(why, why_len, "says it dropped %" PRId32 " chunks of a push of %" PRIu32,
                       h->status, e->n_keys);
    if (h->staleness > e->max_staleness)
        return ps__bad(why, why_len,
                       "reports staleness %" PRIu32 " for a push of step %" PRIu64
                       "; at most %" PRIu64 " is possible",
                       h->staleness, e->clock, e->max_staleness);
    return 0;
}

int ps_reply_check_rows(const ps_frame *f, const ps_reply_rows *e, char *why, size_t why_len)
{
    const Shardps__Header *h = f->hdr;
    Shardps__MsgType want =
        e && e->push ? SHARDPS__MSG_TYPE__PUSH_ROWS_REPLY : SHARDPS__MSG_TYPE__PULL_ROWS_REPLY;

    if (e == NULL || h->request_id != e->request_id || h->type != want)
        return ps__bad(why, why_len,
                       "answered a rows request we did not make (request %" PRIu64 ")",
                       h->request_id);
    if (h->row_table != e->table)
        return ps__bad(why, why_len,
                       "answered our request of row table %" PRIu32 " for row table %" PRIu32,
                       e->table, h->row_table);
    if (e->push) {
        if (ps__no_payload(f, "PUSH_ROWS_REPLY", why, why_len) < 0)
            return -PS_EPROTO;
        if (h->clock != e->clock)
            return ps__bad(why, why_len,
                           "acknowledged our rows push of step %" PRIu64 " as step %" PRIu64,
                           e->clock, h->clock);
        if (h->status < 0 || (uint64_t)h->status > e->count || h->rejected > (uint32_t)h->status)
            return ps__bad(why, why_len,
                           "says it dropped %" PRId32 " (rejected %" PRIu32
                           ") rows of a push of %" PRIu64,
                           h->status, h->rejected, e->count);
        if (e->sync && h->staleness != 0)
            return ps__bad(why, why_len, "reports staleness %" PRIu32 " in sync mode",
                           h->staleness);
        return 0;
    }
    if (h->status != 0 || h->row_count != e->count || h->dtype != SHARDPS__DTYPE__DTYPE_F32 ||
        f->payload_len != e->count * e->dim * sizeof(float))
        return ps__bad(why, why_len,
                       "answered a pull of %" PRIu64 " rows of dim %" PRIu32 " with %" PRIu64
                       " rows, dtype %d, %zu bytes, status %" PRId32,
                       e->count, e->dim, h->row_count, h->dtype, f->payload_len, h->status);
    if (h->clock < e->clock ||
        h->clock > (e->sync ? (e->max_clock > e->clock ? e->max_clock : e->clock) : e->clock))
        return ps__bad(why, why_len,
                       "answered our rows pull of step %" PRIu64 " with step %" PRIu64, e->clock,
                       h->clock);
    if (!f->nonfinite)
        return 0;
    /* The decoder found one; name it when the payload is at hand. */
    for (size_t i = 0; f->payload && i < f->payload_len / sizeof(float); i++) {
        float v;
        memcpy(&v, f->payload + i * sizeof(float), sizeof(v));
        if (!isfinite(v))
            return ps__bad(why, why_len, "sent a row value that is not finite (value %zu)", i);
    }
    return ps__bad(why, why_len, "sent a row value that is not finite");
}

/* A reason goes into our log: escape sequences and line breaks of a hostile
 * server are kept out of it. Returns the characters copied. */
static size_t ps__copy_reason(const Shardps__Header *h, char *reason, size_t reason_len)
{
    const char *r = h->reason ? h->reason : "";
    size_t n = 0;

    for (; r[n] != '\0' && n + 1 < reason_len; n++)
        reason[n] = r[n] >= 0x20 && r[n] < 0x7f ? r[n] : '?';
    if (reason_len > 0)
        reason[n] = '\0';
    return n;
}

int ps_reply_check_waiting(const ps_frame *f, const ps_reply_pull *e, char *reason,
                           size_t reason_len, char *why, size_t why_len)
{
    const Shardps__Header *h = f->hdr;

    if (e == NULL || h->request_id != e->request_id || h->clock != e->clock)
        return ps__bad(why, why_len,
                       "says a pull we are not waiting for is held (request %" PRIu64
                       ", step %" PRIu64 ")",
                       h->request_id, h->clock);
    if (ps__no_payload(f, "WAITING", why, why_len) < 0)
        return -PS_EPROTO;
    if (ps__copy_reason(h, reason, reason_len) == 0)
        return ps__bad(why, why_len, "says our pull is held without saying why");
    return 0;
}

int ps_reply_refusal(const ps_frame *f, char *reason, size_t reason_len)
{
    static const int known[] = {-PS_EPROTO,  -PS_EMISMATCH, -PS_EREJECTED, -PS_EVERSION,
                                -PS_ETOOBIG, -PS_ECRC,      -EINVAL};
    const Shardps__Header *h = f->hdr;

    if (ps__copy_reason(h, reason, reason_len) == 0)
        snprintf(reason, reason_len, "(no reason given)");
    if (h->type == SHARDPS__MSG_TYPE__REJECT)
        return -PS_EREJECTED;
    for (size_t i = 0; i < sizeof(known) / sizeof(known[0]); i++)
        if (h->status == known[i])
            return h->status;
    return -PS_EPROTO;
}
