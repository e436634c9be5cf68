/* libFuzzer target for the frame decoder (common/frame.c), the first code to
 * touch every byte a peer sends. The input is [max-payload selector][split
 * seed][stream]: the stream is fed to a ps_frame_decoder in pieces whose sizes
 * come from the seed (one byte at a time, a prefix's worth, a header's worth,
 * everything at once), exactly as a socket reader would. Each decoded frame
 * must respect the limits (version, payload length within max_payload, CRC
 * matching its payload) and is re-encoded with ps_frame_encode. The same
 * stream fed whole must give the same frames, byte for byte, and end in the
 * same state as the split one, since where TCP cuts a stream must not change
 * what it means; and the re-encoded frames, decoded again, must come back as
 * exactly themselves (a canonical encoding is a fixed point). The split pass
 * also places every payload into three pieces of a separate buffer, stored
 * out of order, as a pull reply is placed into the parameters: gathered back,
 * it must equal what the whole pass kept in the decoder's own buffer. Both
 * passes scan float payloads for Inf/NaN as they arrive, and what the
 * decoder reports must equal a plain scan of the whole payload, however the
 * reads and pieces cut its values. A broken invariant aborts, which libFuzzer
 * reports as a crash with its input. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "crc32c.h"
#include "frame.h"
#include "fuzz_common.h"
#include "ps_error.h"

#define FF_CHECK(cond)                                                                             \
    do {                                                                                           \
        if (!(cond)) {                                                                             \
            fprintf(stderr, "fuzz_frame: %s:%d: check failed: %s\n", __FILE__, __LINE__, #cond);   \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

/* What a pass over the stream produced, to compare the two ways of feeding:
 * the canonical encoding (ps_frame_encode) of every frame, one after another,
 * and how the pass ended. */
typedef struct {
    psf_buf enc;
    int frames;
    int skipped; /* frames left out of the round trip (see ff_take) */
    int rc;      /* 0: waiting for more bytes at the end, or the error */
} ff_result;

/* Small limits make the payload checks reachable with small inputs; the
 * largest is the default's spirit at a size a fuzzer can afford. */
static const size_t ff_max_payloads[] = {0, 1, 16, 600, 4096, (size_t)1 << 20};

static uint64_t ff_next(uint64_t *s)
{
    *s = *s * 6364136223846793005ULL + 1442695040888963407ULL;
    return *s >> 33;
}

/* The next piece size: often the awkward ones around a prefix and a header
 * boundary, sometimes all that is left; NULL: all that is left. */
static size_t ff_piece(uint64_t *s, size_t left)
{
    static const size_t sizes[] = {1, 2, 3, 4, 5, 7, 13, 64, 1000, 65540};
    uint64_t r;
    size_t n;

    if (s == NULL || (r = ff_next(s)) % 11 == 10)
        return left;
    n = sizes[r % 10];
    return n < left ? n : left;
}

/* Whether protobuf-c kept fields it does not know. They are left out of the
 * round trip: protobuf-c accepts field number 0 spelled as an overlong
 * varint, keeps it as an unknown field and packs it back as a plain 0 tag,
 * which its own parser then refuses. Nothing in shardps forwards a received
 * header, so this is a library quirk, not a protocol hole. */
static int ff_has_unknown(const Shardps__Header *h)
{
    return h->base.n_unknown_fields > 0 || (h->hello && h->hello->base.n_unknown_fields > 0) ||
           (h->welcome && h->welcome->base.n_unknown_fields > 0);
}

/* Where the split pass places payloads: pieces [0, a), [a, b), [b, len) of
 * the payload, stored in dest as [b, len) [a, b) [0, a). */
typedef struct {
    uint8_t *dest, *gathered;
    ps_frame_piece pieces[3];
    int placed; /* the frame being decoded was placed */
} ff_placer;

static int ff_place(void *arg, const Shardps__Header *hdr, const ps_frame_piece **pieces)
{
    ff_placer *pl = arg;
    size_t len = (size_t)hdr->payload_bytes, a = len / 3, b = len - len / 4;

    free(pl->dest);
    pl->dest = malloc(len);
    FF_CHECK(pl->dest != NULL);
    pl->pieces[0] = (ps_frame_piece){pl->dest + (len - a), a};
    pl->pieces[1] = (ps_frame_piece){pl->dest + (len - b), b - a};
    pl->pieces[2] = (ps_frame_piece){pl->dest, len - b};
    pl->placed = 1;
    *pieces = pl->pieces;
    return 3;
}

/* The payload of a placed frame, gathered back in order (owned by pl). */
static const uint8_t *ff_gather(ff_placer *pl, size_t len)
{
    size_t off = 0;

    free(pl->gathered);
    pl->gathered = malloc(len + 1);
    FF_CHECK(pl->gathered != NULL);
    for (int i = 0; i < 3; i++) {
        memcpy(pl->gathered + off, pl->pieces[i].base, pl->pieces[i].len);
        off += pl->pieces[i].len;
    }
    FF_CHECK(off == len);
    pl->placed = 0;
    return pl->gathered;
}

/* The Inf/NaN answer for a payload, value by value: what the decoder's
 * block-wise scan must agree with. */
static int ff_nonfinite(const Shardps__Header *h, const uint8_t *p, size_t len)
{
    int bf16 = h->dtype == SHARDPS__DTYPE__DTYPE_BF16;
    size_t e = h->dtype == SHARDPS__DTYPE__DTYPE_F32           ? 4
               : h->dtype == SHARDPS__DTYPE__DTYPE_F16 || bf16 ? 2
                                                               : 0;

    for (size_t i = 0; e > 0 && i + e <= len; i += e) {
        uint32_t v = e == 4 ? (uint32_t)p[i] | (uint32_t)p[i + 1] << 8 | (uint32_t)p[i + 2] << 16 |
                                  (uint32_t)p[i + 3] << 24
                            : (uint32_t)p[i] | (uint32_t)p[i + 1] << 8;
        uint32_t exp = e == 4 ? 0x7f800000u : bf16 ? 0x7f80u : 0x7c00u;
        if ((v & exp) == exp)
            return 1;
    }
    return 0;
}

/* Checks one decoded frame against the limits and appends its canonical
 * encoding (prefix, header, payload) to res->enc. pl: the placer, when the
 * pass places payloads. */
static void ff_take(const ps_frame *f, size_t max_payload, ff_placer *pl, ff_result *res)
{
    const uint8_t *payload = f->payload;
    ps_iov iov;
    uint8_t *enc;
    size_t enc_len, hlen;
    int rc;

    FF_CHECK(f->hdr != NULL && f->hdr->version == PS_PROTOCOL_VERSION);
    FF_CHECK(f->payload_len == f->hdr->payload_bytes && f->payload_len <= max_payload);
    if (pl && f->payload_len > 0) {
        /* Placed: nothing in the decoder's buffer, everything in the pieces. */
        FF_CHECK(f->payload == NULL && pl->placed);
        payload = ff_gather(pl, f->payload_len);
    }
    FF_CHECK(f->payload_len == 0 || payload != NULL);
    FF_CHECK(ps_crc32c(0, payload, f->payload_len) == f->hdr->payload_crc32c);
    FF_CHECK(f->nonfinite == ff_nonfinite(f->hdr, payload, f->payload_len));
    iov.base = payload;
    iov.len = f->payload_len;
    res->frames++;
    if (ff_has_unknown(f->hdr)) {
        res->skipped++;
        return;
    }
    /* Packing may grow a header (a negative int32 sent in 5 bytes takes 10
     * canonically), so a refusal that names the size is acceptable. */
    rc = ps_frame_encode(f->hdr, &iov, 1, &enc, &enc_len);
    if (rc == -PS_ETOOBIG) {
        FF_CHECK(shardps__header__get_packed_size(f->hdr) > PS_MAX_HEADER_BYTES);
        res->skipped++;
        return;
    }
    FF_CHECK(rc == 0);
    hlen = enc_len - PS_FRAME_PREFIX_BYTES;
    FF_CHECK(hlen > 0 && hlen <= PS_MAX_HEADER_BYTES);
    FF_CHECK(enc[0] == (uint8_t)hlen && enc[1] == (uint8_t)(hlen >> 8) && enc[2] == 0 &&
             enc[3] == 0);
    FF_CHECK(f->hdr->payload_bytes == f->payload_len);
    FF_CHECK(psf_buf_put(&res->enc, enc, enc_len) == 0);
    FF_CHECK(psf_buf_put(&res->enc, payload, f->payload_len) == 0);
    free(enc);
}

/* Feeds data in pieces drawn from *split (NULL: as much as fits each time)
 * and checks every frame that comes out. */
static void ff_pass(const uint8_t *data, size_t len, size_t max_payload, uint64_t *split,
                    ff_result *res)
{
    ps_frame_decoder *d;
    ff_placer placer = {0}, *pl = split ? &placer : NULL;
    size_t off = 0;
    ps_frame f;

    memset(res, 0, sizeof(*res));
    FF_CHECK(ps_frame_decoder_init(&d, max_payload) == 0);
    ps_frame_decoder_set_scan_nonfinite(d, 1);
    if (pl)
        ps_frame_decoder_set_place(d, ff_place, pl);
    while (off < len && res->rc == 0) {
        size_t want = ff_piece(split, len - off);
        size_t took = ps_frame_decoder_feed(d, data + off, want);
        int rc;

        /* A decoder that has not failed always has room for a byte. */
        FF_CHECK(took > 0 && took <= want);
        off += took;
        while ((rc = ps_frame_decoder_next(d, &f)) == 1)
            ff_take(&f, max_payload, pl, res);
        if (rc < 0) {
            res->rc = rc;
            /* Failed for good, with a reason for the log, taking nothing. */
            FF_CHECK(rc == -PS_ETOOBIG || rc == -PS_EPROTO || rc == -PS_EVERSION || rc == -PS_ECRC);
            FF_CHECK(ps_frame_decoder_error(d)[0] != '\0');
            FF_CHECK(ps_frame_decoder_next(d, &f) < 0);
            FF_CHECK(ps_frame_decoder_feed(d, data, len) == 0);
        }
    }
    ps_frame_decoder_free(d);
    free(placer.dest);
    free(placer.gathered);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t n_limits = sizeof(ff_max_payloads) / sizeof(ff_max_payloads[0]);
    size_t max_payload;
    uint64_t seed;
    ff_result split, whole, again;

    if (size < 2)
        return 0;
    max_payload = ff_max_payloads[data[0] % n_limits];
    seed = data[1];
    ff_pass(data + 2, size - 2, max_payload, &seed, &split);
    ff_pass(data + 2, size - 2, max_payload, NULL, &whole);
    FF_CHECK(split.frames == whole.frames && split.skipped == whole.skipped);
    FF_CHECK(split.rc == whole.rc);
    FF_CHECK(split.enc.len == whole.enc.len &&
             (split.enc.len == 0 || memcmp(split.enc.p, whole.enc.p, split.enc.len) == 0));
    /* Canonical frames decode cleanly to themselves: a fixed point. (Only
     * when there are any: each decoder costs an mmap under ASan.) */
    memset(&again, 0, sizeof(again));
    if (split.enc.len > 0)
        ff_pass(split.enc.p, split.enc.len, max_payload, NULL, &again);
    FF_CHECK(again.rc == 0 && again.skipped == 0);
    FF_CHECK(again.frames == split.frames - split.skipped);
    FF_CHECK(again.enc.len == split.enc.len &&
             (again.enc.len == 0 || memcmp(again.enc.p, split.enc.p, again.enc.len) == 0));
    psf_buf_free(&split.enc);
    psf_buf_free(&whole.enc);
    psf_buf_free(&again.enc);
    return 0;
}
