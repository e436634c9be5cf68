/* Frame encoder and incremental decoder (see frame.h). The decoder keeps a
 * staging buffer big enough for a length prefix and the largest legal header;
 * once a header is accepted, the payload gets its own buffer (reused across
 * frames) and the transport reads into it directly. */
#include "frame.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crc32c.h"
#include "ps_error.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "shardps sends tensors as raw little-endian bytes and needs a little-endian host"
#endif

#define PS__STAGE_BYTES (2 * (PS_MAX_HEADER_BYTES + PS_FRAME_PREFIX_BYTES))

typedef enum {
    PS__DEC_PREFIX,
    PS__DEC_HEADER,
    PS__DEC_PAYLOAD,
    PS__DEC_DELIVERED, /* a frame was handed out; release it on the next call */
    PS__DEC_FAILED,
} ps__dec_state;

struct ps_frame_decoder {
    ps__dec_state state;
    size_t max_payload;
    uint8_t *stage;
    size_t stage_pos, stage_end; /* unparsed bytes are stage[pos, end) */
    uint32_t header_len;
    Shardps__Header *hdr;
    uint8_t *payload;
    size_t payload_cap, payload_len, payload_got;
    char error[160];
};

int ps_frame_encode(Shardps__Header *hdr, const ps_iov *payload, int n, uint8_t **out,
                    size_t *out_len)
{
    uint64_t total = 0;
    uint32_t crc = 0;

    for (int i = 0; i < n; i++) {
        total += payload[i].len;
        crc = ps_crc32c(crc, payload[i].base, payload[i].len);
    }
    hdr->version = PS_PROTOCOL_VERSION;
    hdr->payload_bytes = total;
    hdr->payload_crc32c = crc;
    if (shardps__header__get_packed_size(hdr) > PS_MAX_HEADER_BYTES)
        return -PS_ETOOBIG;
    return ps_frame_pack_header(hdr, out, out_len);
}

int ps_frame_pack_header(const Shardps__Header *hdr, uint8_t **out, size_t *out_len)
{
    size_t hlen = shardps__header__get_packed_size(hdr);
    uint8_t *buf = malloc(PS_FRAME_PREFIX_BYTES + hlen);

    if (buf == NULL)
        return -ENOMEM;
    buf[0] = (uint8_t)hlen;
    buf[1] = (uint8_t)(hlen >> 8);
    buf[2] = (uint8_t)(hlen >> 16);
    buf[3] = (uint8_t)(hlen >> 24);
    shardps__header__pack(hdr, buf + PS_FRAME_PREFIX_BYTES);
    *out = buf;
    *out_len = PS_FRAME_PREFIX_BYTES + hlen;
    return 0;
}

int ps_frame_decoder_init(ps_frame_decoder **out, size_t max_payload)
{
    ps_frame_decoder *d = calloc(1, sizeof(*d));

    if (d == NULL)
        goto fail;
    d->stage = malloc(PS__STAGE_BYTES);
    if (d->stage == NULL)
        goto fail;
    d->max_payload = max_payload;
    d->state = PS__DEC_PREFIX;
    *out = d;
    return 0;
fail:
    free(d);
    return -ENOMEM;
}

void ps_frame_decoder_free(ps_frame_decoder *d)
{
    if (d == NULL)
        return;
    if (d->hdr)
        shardps__header__free_unpacked(d->hdr, NULL);
    free(d->payload);
    free(d->stage);
    free(d);
}

void ps_frame_decoder_set_max_payload(ps_frame_decoder *d, size_t max_payload)
{
    d->max_payload = max_payload;
}

static void ps__dec_compact(ps_frame_decoder *d)
{
    if (d->stage_pos == 0)
        return;
    memmove(d->stage, d->stage + d->stage_pos, d->stage_end - d->stage_pos);
    d->stage_end -= d->stage_pos;
    d->stage_pos = 0;
}

void ps_frame_decoder_buf(ps_frame_decoder *d, uint8_t **buf, size_t *len)
{
    if (d->state == PS__DEC_PAYLOAD && d->payload_got < d->payload_len) {
        *buf = d->payload + d->payload_got;
        *len = d->payload_len - d->payload_got;
        return;
    }
    ps__dec_compact(d);
    *buf = d->stage + d->stage_end;
    *len = PS__STAGE_BYTES - d->stage_end;
}

void ps_frame_decoder_commit(ps_frame_decoder *d, size_t n)
{
    if (d->state == PS__DEC_PAYLOAD && d->payload_got < d->payload_len)
        d->payload_got += n;
    else
        d->stage_end += n;
}

static int ps__dec_fail(ps_frame_decoder *d, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int ps__dec_fail(ps_frame_decoder *d, int err, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(d->error, sizeof(d->error), fmt, ap);
    va_end(ap);
    d->state = PS__DEC_FAILED;
    return err;
}

/* Validates the freshly unpacked header and prepares the payload buffer. */
static int ps__dec_accept_header(ps_frame_decoder *d)
{
    size_t avail, take;

    if (d->hdr->version != PS_PROTOCOL_VERSION)
        return ps__dec_fail(d, -PS_EVERSION, "protocol version %u, this build speaks %u",
                            d->hdr->version, PS_PROTOCOL_VERSION);
    if (d->hdr->payload_bytes > d->max_payload)
        return ps__dec_fail(d, -PS_ETOOBIG, "payload of %llu bytes exceeds the limit of %zu",
                            (unsigned long long)d->hdr->payload_bytes, d->max_payload);
    d->payload_len = (size_t)d->hdr->payload_bytes;
    d->payload_got = 0;
    if (d->payload_len > d->payload_cap) {
        uint8_t *p = realloc(d->payload, d->payload_len);
        if (p == NULL)
            return ps__dec_fail(d, -ENOMEM, "no memory for a payload of %zu bytes", d->payload_len);
        d->payload = p;
        d->payload_cap = d->payload_len;
    }
    avail = d->stage_end - d->stage_pos;
    take = avail < d->payload_len ? avail : d->payload_len;
    if (take) {
        memcpy(d->payload, d->stage + d->stage_pos, take);
        d->stage_pos += take;
        d->payload_got = take;
    }
    d->state = PS__DEC_PAYLOAD;
    return 0;
}

int ps_frame_decoder_next(ps_frame_decoder *d, ps_frame *f)
{
    const uint8_t *p;
    int rc;

    for (;;) {
        switch (d->state) {
        case PS__DEC_DELIVERED:
            shardps__header__free_unpacked(d->hdr, NULL);
            d->hdr = NULL;
            d->state = PS__DEC_PREFIX;
            break;
        case PS__DEC_PREFIX:
            if (d->stage_end - d->stage_pos < PS_FRAME_PREFIX_BYTES)
                return 0;
            p = d->stage + d->stage_pos;
            d->header_len =
                (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
            if (d->header_len == 0)
                return ps__dec_fail(d, -PS_EPROTO, "empty header");
            if (d->header_len > PS_MAX_HEADER_BYTES)
                return ps__dec_fail(d, -PS_ETOOBIG, "header of %u bytes exceeds the limit of %u",
                                    d->header_len, PS_MAX_HEADER_BYTES);
            d->stage_pos += PS_FRAME_PREFIX_BYTES;
            d->state = PS__DEC_HEADER;
            break;
        case PS__DEC_HEADER:
            if (d->stage_end - d->stage_pos < d->header_len)
                return 0;
            d->hdr = shardps__header__unpack(NULL, d->header_len, d->stage + d->stage_pos);
            if (d->hdr == NULL)
                return ps__dec_fail(d, -PS_EPROTO, "header of %u bytes is not a valid Header",
                                    d->header_len);
            d->stage_pos += d->header_len;
            rc = ps__dec_accept_header(d);
            if (rc < 0)
                return rc;
            break;
        case PS__DEC_PAYLOAD: {
            uint32_t crc;
            if (d->payload_got < d->payload_len)
                return 0;
            crc = ps_crc32c(0, d->payload, d->payload_len);
            if (crc != d->hdr->payload_crc32c)
                return ps__dec_fail(d, -PS_ECRC, "payload CRC32C 0x%08x, header says 0x%08x", crc,
                                    d->hdr->payload_crc32c);
            f->hdr = d->hdr;
            f->payload = d->payload;
            f->payload_len = d->payload_len;
            d->state = PS__DEC_DELIVERED;
            return 1;
        }
        case PS__DEC_FAILED:
            return -PS_EPROTO;
        }
    }
}

const char *ps_frame_decoder_error(const ps_frame_decoder *d)
{
    return d->error;
}

size_t ps_frame_decoder_feed(ps_frame_decoder *d, const void *data, size_t len)
{
    uint8_t *buf;
    size_t room, n;

    if (d->state == PS__DEC_FAILED)
        return 0;
    ps_frame_decoder_buf(d, &buf, &room);
    n = len < room ? len : room;
    memcpy(buf, data, n);
    ps_frame_decoder_commit(d, n);
    return n;
}
