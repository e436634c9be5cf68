/* Tests for the frame codec (common/frame.c). A socket may split a stream of
 * frames anywhere, so the decoder is fed the same encoded bytes whole, one
 * byte at a time and cut at every possible point, and must hand back exactly
 * the frames that went in. Every limit is checked at the moment the decoder
 * can know it is broken: an oversized header right after the 4-byte prefix,
 * an oversized payload right after the header, before any buffer for it is
 * allocated. Each failure must give its exact code, stay failed, and leave a
 * readable explanation, because the transport logs it and closes. */
#include <criterion/criterion.h>

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "crc32c.h"
#include "frame.h"
#include "ps_error.h"

/* Up to this many frames are collected from one stream. */
#define MAX_FRAMES 16

/* A decoded frame copied out of the decoder, whose own copy only lives until
 * the next call on it. */
typedef struct {
    Shardps__MsgType type;
    uint64_t request_id, clock;
    uint32_t version, crc;
    uint64_t payload_bytes;
    size_t n_keys;
    uint64_t keys[8];
    uint8_t *payload;
    size_t payload_len;
} got_frame;

typedef struct {
    got_frame f[MAX_FRAMES];
    int n;
} got_frames;

/* What one test frame should carry; the payload is split into n_iov pieces. */
typedef struct {
    Shardps__MsgType type;
    uint64_t request_id, clock;
    size_t n_keys;
    uint64_t keys[8];
    const uint8_t *payload;
    size_t payload_len;
    int n_iov;
    Shardps__DType dtype; /* 0 (unset) unless a test needs one */
} want_frame;

static uint64_t rng_state;

static uint8_t rng_byte(void)
{
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint8_t)(rng_state >> 56);
}

static uint8_t *random_bytes(size_t len, uint64_t seed)
{
    uint8_t *buf = malloc(len ? len : 1);

    cr_assert_not_null(buf);
    rng_state = seed;
    for (size_t i = 0; i < len; i++)
        buf[i] = rng_byte();
    return buf;
}

/* Appends len bytes to a growing stream buffer. */
static void append(uint8_t **stream, size_t *len, const void *data, size_t n)
{
    uint8_t *p = realloc(*stream, *len + n + 1);

    cr_assert_not_null(p);
    if (n)
        memcpy(p + *len, data, n);
    *stream = p;
    *len += n;
}

/* Encodes w with ps_frame_encode, splitting its payload into w->n_iov pieces
 * of uneven sizes, and appends [prefix][header][payload] to the stream. */
static void encode_append(const want_frame *w, uint8_t **stream, size_t *len)
{
    Shardps__Header h = SHARDPS__HEADER__INIT;
    ps_iov iov[8];
    uint64_t keys[8];
    size_t off = 0;
    uint8_t *head;
    size_t head_len;

    cr_assert_leq(w->n_iov, 8);
    for (int i = 0; i < w->n_iov; i++) {
        /* Piece i takes a third of what is left; the last takes the rest, so
         * pieces differ in size and some may be empty. */
        size_t n = i == w->n_iov - 1 ? w->payload_len - off : (w->payload_len - off) / 3;
        iov[i].base = w->payload + off;
        iov[i].len = n;
        off += n;
    }
    memcpy(keys, w->keys, sizeof(keys));
    h.type = w->type;
    h.request_id = w->request_id;
    h.clock = w->clock;
    h.n_keys = w->n_keys;
    h.keys = keys;
    h.dtype = w->dtype;
    cr_assert_eq(ps_frame_encode(&h, iov, w->n_iov, &head, &head_len), 0);
    cr_assert_eq(h.version, PS_PROTOCOL_VERSION);
    cr_assert_eq(h.payload_bytes, w->payload_len);
    cr_assert_eq(h.payload_crc32c, ps_crc32c(0, w->payload, w->payload_len));
    append(stream, len, head, head_len);
    append(stream, len, w->payload, w->payload_len);
    free(head);
}

/* Packs h exactly as given (no version or CRC filled in), for frames the
 * encoder would refuse to make. */
static void raw_append(const Shardps__Header *h, const void *payload, size_t n, uint8_t **stream,
                       size_t *len)
{
    size_t hlen = shardps__header__get_packed_size(h);
    uint8_t prefix[4] = {(uint8_t)hlen, (uint8_t)(hlen >> 8), (uint8_t)(hlen >> 16),
                         (uint8_t)(hlen >> 24)};
    uint8_t *body = malloc(hlen + 1);

    cr_assert_not_null(body);
    shardps__header__pack(h, body);
    append(stream, len, prefix, 4);
    append(stream, len, body, hlen);
    append(stream, len, payload, n);
    free(body);
}

static void copy_out(got_frames *g, const ps_frame *f)
{
    got_frame *o;

    cr_assert_lt(g->n, MAX_FRAMES);
    o = &g->f[g->n++];
    o->type = f->hdr->type;
    o->request_id = f->hdr->request_id;
    o->clock = f->hdr->clock;
    o->version = f->hdr->version;
    o->crc = f->hdr->payload_crc32c;
    o->payload_bytes = f->hdr->payload_bytes;
    o->n_keys = f->hdr->n_keys;
    cr_assert_leq(o->n_keys, 8);
    if (o->n_keys)
        memcpy(o->keys, f->hdr->keys, o->n_keys * sizeof(uint64_t));
    o->payload_len = f->payload_len;
    o->payload = malloc(f->payload_len + 1);
    cr_assert_not_null(o->payload);
    if (f->payload_len)
        memcpy(o->payload, f->payload, f->payload_len);
}

static void got_free(got_frames *g)
{
    for (int i = 0; i < g->n; i++)
        free(g->f[i].payload);
    g->n = 0;
}

/* Collects every complete frame; returns what ps_frame_decoder_next ended
 * with (0: needs more bytes, or a negative error). */
static int drain(ps_frame_decoder *d, got_frames *g)
{
    ps_frame f;
    int rc;

    while ((rc = ps_frame_decoder_next(d, &f)) == 1)
        copy_out(g, &f);
    return rc;
}

/* Feeds data[0..len) as a socket reader would, handing over at most step
 * bytes per round and collecting frames after each. Returns the last result
 * of ps_frame_decoder_next; stops at the first error. */
static int feed_all(ps_frame_decoder *d, const uint8_t *data, size_t len, size_t step,
                    got_frames *g)
{
    size_t off = 0;
    int rc = drain(d, g);

    while (rc == 0 && off < len) {
        size_t want = len - off < step ? len - off : step;
        size_t took = ps_frame_decoder_feed(d, data + off, want);
        cr_assert_gt(took, 0, "decoder took nothing at offset %zu of %zu", off, len);
        off += took;
        rc = drain(d, g);
    }
    return rc;
}

static void check_frame(const got_frame *g, const want_frame *w, int i)
{
    cr_assert_eq(g->type, w->type, "frame %d type", i);
    cr_assert_eq(g->request_id, w->request_id, "frame %d request_id", i);
    cr_assert_eq(g->clock, w->clock, "frame %d clock", i);
    cr_assert_eq(g->version, PS_PROTOCOL_VERSION, "frame %d version", i);
    cr_assert_eq(g->n_keys, w->n_keys, "frame %d n_keys", i);
    for (size_t k = 0; k < w->n_keys; k++)
        cr_assert_eq(g->keys[k], w->keys[k], "frame %d key %zu", i, k);
    cr_assert_eq(g->payload_bytes, w->payload_len, "frame %d payload_bytes", i);
    cr_assert_eq(g->payload_len, w->payload_len, "frame %d payload_len", i);
    /* memcmp wants non-null pointers even for zero bytes. */
    if (w->payload_len)
        cr_assert(memcmp(g->payload, w->payload, w->payload_len) == 0, "frame %d payload differs",
                  i);
}

static ps_frame_decoder *new_decoder(size_t max_payload)
{
    ps_frame_decoder *d = NULL;

    cr_assert_eq(ps_frame_decoder_init(&d, max_payload), 0);
    cr_assert_not_null(d);
    return d;
}

/* After a failure the decoder must refuse every further byte and frame. */
static void check_stays_failed(ps_frame_decoder *d)
{
    static const uint8_t more[16] = {1, 0, 0, 0};
    ps_frame f;

    cr_assert_str_not_empty(ps_frame_decoder_error(d));
    for (int i = 0; i < 3; i++) {
        cr_assert_lt(ps_frame_decoder_next(d, &f), 0, "decoder recovered after a failure");
        cr_assert_eq(ps_frame_decoder_feed(d, more, sizeof(more)), 0,
                     "a failed decoder accepted bytes");
    }
}

/* Round trip of one frame per case, fed in one piece and byte by byte. */
static void round_trip(const want_frame *w)
{
    uint8_t *stream = NULL;
    size_t len = 0;
    got_frames g = {0};
    const size_t steps[] = {SIZE_MAX, 1, 7, 65536};

    encode_append(w, &stream, &len);
    cr_assert_eq(
        len,
        4 + (size_t)(stream[0] | stream[1] << 8 | stream[2] << 16 | (uint32_t)stream[3] << 24) +
            w->payload_len);
    for (size_t s = 0; s < sizeof(steps) / sizeof(steps[0]); s++) {
        ps_frame_decoder *d;

        /* Byte by byte over a multi-MiB payload is slow under ASan and proves
         * nothing that 7-byte steps do not. */
        if (steps[s] == 1 && len > 100000)
            continue;
        d = new_decoder(PS_DEFAULT_MAX_PAYLOAD);
        cr_assert_eq(feed_all(d, stream, len, steps[s], &g), 0, "step %zu: %s", steps[s],
                     ps_frame_decoder_error(d));
        cr_assert_eq(g.n, 1, "step %zu: %d frames", steps[s], g.n);
        check_frame(&g.f[0], w, 0);
        got_free(&g);
        ps_frame_decoder_free(d);
    }
    free(stream);
}

Test(frame, round_trip_empty_payload, .timeout = 30)
{
    want_frame w = {.type = SHARDPS__MSG_TYPE__PULL,
                    .request_id = 42,
                    .clock = 7,
                    .n_keys = 3,
                    .keys = {0, 1, (uint64_t)5 << 32 | 9},
                    .n_iov = 0};

    round_trip(&w);
}

Test(frame, round_trip_empty_iovs, .timeout = 30)
{
    /* Pieces that are present but empty must not disturb the CRC or length. */
    uint8_t none = 0;
    want_frame w = {.type = SHARDPS__MSG_TYPE__PUSH_REPLY, .payload = &none, .n_iov = 3};

    round_trip(&w);
}

Test(frame, round_trip_one_iov, .timeout = 30)
{
    uint8_t *p = random_bytes(1000, 1);
    want_frame w = {.type = SHARDPS__MSG_TYPE__PULL_REPLY,
                    .request_id = UINT64_MAX,
                    .clock = 123456789012ULL,
                    .n_keys = 1,
                    .keys = {(uint64_t)3 << 32},
                    .payload = p,
                    .payload_len = 1000,
                    .n_iov = 1};

    round_trip(&w);
    free(p);
}

Test(frame, round_trip_several_iovs, .timeout = 30)
{
    uint8_t *p = random_bytes(4099, 2);
    want_frame w = {.type = SHARDPS__MSG_TYPE__PUSH,
                    .request_id = 9,
                    .clock = 1,
                    .n_keys = 5,
                    .keys = {1, 2, 3, 4, 5},
                    .payload = p,
                    .payload_len = 4099,
                    .n_iov = 5};

    round_trip(&w);
    free(p);
}

Test(frame, round_trip_multi_mib_payload, .timeout = 30)
{
    /* Larger than the decoder's staging buffer many times over, so the payload
     * must go through its own buffer. */
    size_t n = ((size_t)5 << 20) + 13;
    uint8_t *p = random_bytes(n, 3);
    want_frame w = {.type = SHARDPS__MSG_TYPE__PUSH,
                    .request_id = 77,
                    .clock = 3,
                    .n_keys = 2,
                    .keys = {(uint64_t)1 << 32, (uint64_t)1 << 32 | 1},
                    .payload = p,
                    .payload_len = n,
                    .n_iov = 4};

    round_trip(&w);
    free(p);
}

Test(frame, every_split_point_of_two_frames, .timeout = 30)
{
    uint8_t *p1 = random_bytes(37, 4), *p2 = random_bytes(101, 5);
    want_frame w[2] = {
        {.type = SHARDPS__MSG_TYPE__PUSH,
         .request_id = 1,
         .clock = 2,
         .n_keys = 2,
         .keys = {10, 11},
         .payload = p1,
         .payload_len = 37,
         .n_iov = 2},
        {.type = SHARDPS__MSG_TYPE__PULL_REPLY,
         .request_id = 2,
         .clock = 3,
         .n_keys = 1,
         .keys = {12},
         .payload = p2,
         .payload_len = 101,
         .n_iov = 3},
    };
    uint8_t *stream = NULL;
    size_t len = 0, end0;

    encode_append(&w[0], &stream, &len);
    end0 = len;
    encode_append(&w[1], &stream, &len);

    for (size_t cut = 0; cut <= len; cut++) {
        ps_frame_decoder *d = new_decoder(PS_DEFAULT_MAX_PAYLOAD);
        got_frames g = {0};
        int expect_first = cut >= end0 ? 1 : 0;
        int expect_both = cut == len ? 2 : expect_first;

        /* The prefix up to the cut: only frames that end inside it. */
        cr_assert_eq(feed_all(d, stream, cut, SIZE_MAX, &g), 0, "cut %zu: %s", cut,
                     ps_frame_decoder_error(d));
        cr_assert_eq(g.n, expect_both, "cut %zu: %d frames before the rest arrived", cut, g.n);
        /* Asking again without new bytes must still say "need more". */
        if (cut < len)
            cr_assert_eq(drain(d, &g), 0, "cut %zu", cut);
        cr_assert_eq(g.n, expect_both);
        /* The rest, then exactly the two frames in order. */
        cr_assert_eq(feed_all(d, stream + cut, len - cut, SIZE_MAX, &g), 0, "cut %zu: %s", cut,
                     ps_frame_decoder_error(d));
        cr_assert_eq(g.n, 2, "cut %zu: %d frames", cut, g.n);
        check_frame(&g.f[0], &w[0], 0);
        check_frame(&g.f[1], &w[1], 1);
        got_free(&g);
        ps_frame_decoder_free(d);
    }
    free(stream);
    free(p1);
    free(p2);
}

Test(frame, two_frames_one_byte_at_a_time, .timeout = 30)
{
    uint8_t *p1 = random_bytes(64, 6), *p2 = random_bytes(3, 7);
    want_frame w[2] = {
        {.type = SHARDPS__MSG_TYPE__PUSH,
         .request_id = 5,
         .payload = p1,
         .payload_len = 64,
         .n_iov = 1},
        {.type = SHARDPS__MSG_TYPE__PUSH,
         .request_id = 6,
         .payload = p2,
         .payload_len = 3,
         .n_iov = 1},
    };
    uint8_t *stream = NULL;
    size_t len = 0, end0;
    ps_frame_decoder *d = new_decoder(PS_DEFAULT_MAX_PAYLOAD);
    got_frames g = {0};

    encode_append(&w[0], &stream, &len);
    end0 = len;
    encode_append(&w[1], &stream, &len);
    for (size_t i = 0; i < len; i++) {
        cr_assert_eq(ps_frame_decoder_feed(d, stream + i, 1), 1, "byte %zu", i);
        cr_assert_eq(drain(d, &g), 0, "byte %zu: %s", i, ps_frame_decoder_error(d));
        /* A frame appears exactly when its last byte arrives, not before. */
        cr_assert_eq(g.n, i + 1 >= len ? 2 : i + 1 >= end0 ? 1 : 0, "byte %zu", i);
    }
    check_frame(&g.f[0], &w[0], 0);
    check_frame(&g.f[1], &w[1], 1);
    got_free(&g);
    ps_frame_decoder_free(d);
    free(stream);
    free(p1);
    free(p2);
}

Test(frame, back_to_back_frames_in_one_feed, .timeout = 30)
{
    enum { N = 6 };
    uint8_t *p[N];
    want_frame w[N];
    uint8_t *stream = NULL;
    size_t len = 0;
    ps_frame_decoder *d = new_decoder(PS_DEFAULT_MAX_PAYLOAD);
    got_frames g = {0};

    for (int i = 0; i < N; i++) {
        /* Sizes 0, 1, 17, ... so empty and tiny payloads sit between others. */
        size_t n = i == 0 ? 0 : (size_t)(i * i * 17 - 16);
        p[i] = random_bytes(n, 100 + (uint64_t)i);
        w[i] = (want_frame){.type = i % 2 ? SHARDPS__MSG_TYPE__PUSH : SHARDPS__MSG_TYPE__PULL,
                            .request_id = (uint64_t)i + 1,
                            .clock = (uint64_t)i,
                            .n_keys = 1,
                            .keys = {(uint64_t)i},
                            .payload = p[i],
                            .payload_len = n,
                            .n_iov = i % 3 + 1};
        encode_append(&w[i], &stream, &len);
    }
    /* The whole stream fits the staging buffer, so one feed takes all of the
     * headers at once; payloads then come out of the stage as well. */
    cr_assert_eq(feed_all(d, stream, len, SIZE_MAX, &g), 0, "%s", ps_frame_decoder_error(d));
    cr_assert_eq(g.n, N);
    for (int i = 0; i < N; i++)
        check_frame(&g.f[i], &w[i], i);
    got_free(&g);
    ps_frame_decoder_free(d);
    free(stream);
    for (int i = 0; i < N; i++)
        free(p[i]);
}

Test(frame, zero_header_length_is_a_protocol_error, .timeout = 30)
{
    static const uint8_t zero[4] = {0, 0, 0, 0};
    ps_frame_decoder *d = new_decoder(PS_DEFAULT_MAX_PAYLOAD);
    ps_frame f;

    cr_assert_eq(ps_frame_decoder_feed(d, zero, 4), 4);
    cr_assert_eq(ps_frame_decoder_next(d, &f), -PS_EPROTO);
    check_stays_failed(d);
    ps_frame_decoder_free(d);
}

Test(frame, oversized_header_fails_right_after_prefix, .timeout = 30)
{
    const uint32_t lens[] = {PS_MAX_HEADER_BYTES + 1, 0x7fffffffu, 0xffffffffu};

    for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
        uint8_t prefix[4] = {(uint8_t)lens[i], (uint8_t)(lens[i] >> 8), (uint8_t)(lens[i] >> 16),
                             (uint8_t)(lens[i] >> 24)};
        ps_frame_decoder *d = new_decoder(PS_DEFAULT_MAX_PAYLOAD);
        ps_frame f;

        /* Three bytes of the prefix say nothing yet. */
        cr_assert_eq(ps_frame_decoder_feed(d, prefix, 3), 3);
        cr_assert_eq(ps_frame_decoder_next(d, &f), 0);
        /* The fourth settles it: no header byte is waited for (and so nothing
         * sized by the claimed length is allocated); the limit is refused now. */
        cr_assert_eq(ps_frame_decoder_feed(d, prefix + 3, 1), 1);
        cr_assert_eq(ps_frame_decoder_next(d, &f), -PS_ETOOBIG, "length %u", lens[i]);
        check_stays_failed(d);
        ps_frame_decoder_free(d);
    }
}

Test(frame, header_at_the_limit_is_accepted_up_to_prefix, .timeout = 30)
{
    /* Exactly PS_MAX_HEADER_BYTES is legal: the decoder waits for the header
     * rather than refusing it. */
    uint32_t n = PS_MAX_HEADER_BYTES;
    uint8_t prefix[4] = {(uint8_t)n, (uint8_t)(n >> 8), (uint8_t)(n >> 16), (uint8_t)(n >> 24)};
    ps_frame_decoder *d = new_decoder(PS_DEFAULT_MAX_PAYLOAD);
    ps_frame f;

    cr_assert_eq(ps_frame_decoder_feed(d, prefix, 4), 4);
    cr_assert_eq(ps_frame_decoder_next(d, &f), 0);
    ps_frame_decoder_free(d);
}

Test(frame, oversized_payload_fails_before_payload_arrives, .timeout = 30)
{
    const size_t max = 1000;
    uint8_t *p = random_bytes(max + 1, 8);
    want_frame ok = {.type = SHARDPS__MSG_TYPE__PUSH, .payload = p, .payload_len = max, .n_iov = 1};
    want_frame big = {
        .type = SHARDPS__MSG_TYPE__PUSH, .payload = p, .payload_len = max + 1, .n_iov = 1};
    uint8_t *stream = NULL;
    size_t len = 0;
    ps_frame_decoder *d = new_decoder(max);
    got_frames g = {0};

    /* At the limit: accepted. */
    encode_append(&ok, &stream, &len);
    cr_assert_eq(feed_all(d, stream, len, SIZE_MAX, &g), 0, "%s", ps_frame_decoder_error(d));
    cr_assert_eq(g.n, 1);
    check_frame(&g.f[0], &ok, 0);
    got_free(&g);
    free(stream);
    stream = NULL;
    len = 0;

    /* One byte over: refused as soon as the header is complete, without a
     * single payload byte fed. */
    encode_append(&big, &stream, &len);
    cr_assert_eq(feed_all(d, stream, len - big.payload_len, SIZE_MAX, &g), -PS_ETOOBIG);
    cr_assert_eq(g.n, 0);
    check_stays_failed(d);
    ps_frame_decoder_free(d);
    free(stream);
    free(p);
}

Test(frame, bad_crc_is_refused, .timeout = 30)
{
    uint8_t *p = random_bytes(300, 9);
    want_frame w = {.type = SHARDPS__MSG_TYPE__PUSH, .payload = p, .payload_len = 300, .n_iov = 2};
    uint8_t *stream = NULL;
    size_t len = 0;
    ps_frame_decoder *d = new_decoder(PS_DEFAULT_MAX_PAYLOAD);
    got_frames g = {0};

    encode_append(&w, &stream, &len);
    /* One flipped bit in the middle of the payload. */
    stream[len - 150] ^= 0x10;
    cr_assert_eq(feed_all(d, stream, len, 64, &g), -PS_ECRC);
    cr_assert_eq(g.n, 0);
    check_stays_failed(d);
    ps_frame_decoder_free(d);
    free(stream);
    free(p);
}

Test(frame, wrong_version_is_refused, .timeout = 30)
{
    Shardps__Header h = SHARDPS__HEADER__INIT;
    uint8_t *stream = NULL;
    size_t len = 0;
    ps_frame_decoder *d = new_decoder(PS_DEFAULT_MAX_PAYLOAD);
    got_frames g = {0};

    h.version = PS_PROTOCOL_VERSION + 1;
    h.type = SHARDPS__MSG_TYPE__HELLO;
    raw_append(&h, NULL, 0, &stream, &len);
    cr_assert_eq(feed_all(d, stream, len, SIZE_MAX, &g), -PS_EVERSION);
    cr_assert_eq(g.n, 0);
    check_stays_failed(d);
    ps_frame_decoder_free(d);
    free(stream);

    /* A header with no version field at all (an old or foreign peer) is
     * version 0, also refused. */
    stream = NULL;
    len = 0;
    d = new_decoder(PS_DEFAULT_MAX_PAYLOAD);
    h.version = 0;
    raw_append(&h, NULL, 0, &stream, &len);
    cr_assert_eq(feed_all(d, stream, len, SIZE_MAX, &g), -PS_EVERSION);
    check_stays_failed(d);
    ps_frame_decoder_free(d);
    free(stream);
}

Test(frame, garbage_header_is_a_protocol_error, .timeout = 30)
{
    /* An unterminated varint tag, and a field number 0 with an invalid wire
     * type: neither unpacks as a Header. */
    static const uint8_t bad[2][12] = {
        {8, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff},
        {8, 0, 0, 0, 0x07, 0x07, 0x07, 0x07, 0x07, 0x07, 0x07, 0x07},
    };

    for (int i = 0; i < 2; i++) {
        ps_frame_decoder *d = new_decoder(PS_DEFAULT_MAX_PAYLOAD);
        got_frames g = {0};

        cr_assert_eq(feed_all(d, bad[i], sizeof(bad[i]), SIZE_MAX, &g), -PS_EPROTO, "case %d", i);
        cr_assert_eq(g.n, 0);
        check_stays_failed(d);
        ps_frame_decoder_free(d);
    }
}

Test(frame, failure_after_good_frames_keeps_the_good_ones, .timeout = 30)
{
    /* Frames before the broken one are delivered; nothing after it is. */
    uint8_t *p = random_bytes(50, 10);
    want_frame w = {.type = SHARDPS__MSG_TYPE__PUSH,
                    .request_id = 3,
                    .payload = p,
                    .payload_len = 50,
                    .n_iov = 1};
    static const uint8_t huge[4] = {0xff, 0xff, 0xff, 0xff};
    uint8_t *stream = NULL;
    size_t len = 0;
    ps_frame_decoder *d = new_decoder(PS_DEFAULT_MAX_PAYLOAD);
    got_frames g = {0};

    encode_append(&w, &stream, &len);
    encode_append(&w, &stream, &len);
    append(&stream, &len, huge, 4);
    encode_append(&w, &stream, &len);
    cr_assert_eq(feed_all(d, stream, len, SIZE_MAX, &g), -PS_ETOOBIG);
    cr_assert_eq(g.n, 2);
    check_frame(&g.f[0], &w, 0);
    check_frame(&g.f[1], &w, 1);
    check_stays_failed(d);
    got_free(&g);
    ps_frame_decoder_free(d);
    free(stream);
    free(p);
}

Test(frame, encode_refuses_oversized_header, .timeout = 30)
{
    /* 10000 keys of 10-byte varints are about 100 KB of header. */
    enum { N = 10000 };
    uint64_t *keys = malloc(N * sizeof(*keys));
    Shardps__Header h = SHARDPS__HEADER__INIT;
    uint8_t *out = NULL;
    size_t out_len = 0;

    cr_assert_not_null(keys);
    for (int i = 0; i < N; i++)
        keys[i] = UINT64_MAX - (uint64_t)i;
    h.type = SHARDPS__MSG_TYPE__PULL;
    h.n_keys = N;
    h.keys = keys;
    cr_assert_eq(ps_frame_encode(&h, NULL, 0, &out, &out_len), -PS_ETOOBIG);
    cr_assert_null(out);
    free(keys);
}

Test(frame, fresh_decoder_needs_more_and_has_no_error, .timeout = 30)
{
    ps_frame_decoder *d = new_decoder(PS_DEFAULT_MAX_PAYLOAD);
    ps_frame f;
    uint8_t *buf;
    size_t room;

    cr_assert_eq(ps_frame_decoder_next(d, &f), 0);
    cr_assert_str_empty(ps_frame_decoder_error(d));
    ps_frame_decoder_buf(d, &buf, &room);
    cr_assert_not_null(buf);
    cr_assert_geq(room, 1);
    ps_frame_decoder_free(d);
    ps_frame_decoder_free(NULL);
}

/* The place callback of the tests below: scatters a payload into uneven
 * pieces of one destination buffer, in reverse order, so a byte written to
 * the wrong piece or offset cannot go unnoticed. */
typedef struct {
    uint8_t *dest;
    ps_frame_piece pieces[4];
    int n, calls;          /* n: pieces offered; all 4 add up to the payload */
    Shardps__MsgType only; /* place frames of this type, leave the rest */
} placer;

static int place_reversed(void *arg, const Shardps__Header *hdr, const ps_frame_piece **pieces)
{
    placer *pl = arg;
    size_t len = (size_t)hdr->payload_bytes, cut[5] = {0, 1, len / 3, len / 2, len};

    pl->calls++;
    if (hdr->type != pl->only)
        return 0;
    /* Piece i covers payload bytes [cut[i], cut[i+1]) and is stored at the
     * other end of dest: the first piece lands last. Piece 0 may be empty. */
    for (int i = 0; i < 4; i++) {
        pl->pieces[i].len = cut[i + 1] - cut[i];
        pl->pieces[i].base = pl->dest + (len - cut[i + 1]);
    }
    *pieces = pl->pieces;
    return pl->n;
}

/* Undoes place_reversed: the payload as it was sent. */
static void unplace(const placer *pl, size_t len, uint8_t *out)
{
    size_t off = 0;

    for (int i = 0; i < 4; i++) {
        memcpy(out + off, pl->pieces[i].base, pl->pieces[i].len);
        off += pl->pieces[i].len;
    }
    cr_assert_eq(off, len);
}

/* Decodes stream in steps of `step` bytes with pl installed; expects one
 * frame of each type in want, checking placed payloads through pl. */
static void decode_placed(placer *pl, const uint8_t *stream, size_t len, size_t step,
                          const want_frame *want, int n_want)
{
    ps_frame_decoder *d = new_decoder(PS_DEFAULT_MAX_PAYLOAD);
    size_t off = 0;
    int seen = 0;
    ps_frame f;
    int rc;

    ps_frame_decoder_set_place(d, place_reversed, pl);
    for (;;) {
        while ((rc = ps_frame_decoder_next(d, &f)) == 1) {
            const want_frame *w = &want[seen++];
            cr_assert_leq(seen, n_want);
            cr_assert_eq(f.payload_len, w->payload_len);
            if (f.hdr->type == pl->only && pl->n == 4 && w->payload_len > 0) {
                uint8_t *back = malloc(w->payload_len);
                cr_assert_not_null(back);
                cr_assert_null(f.payload, "a placed payload was also handed over");
                unplace(pl, w->payload_len, back);
                cr_assert(memcmp(back, w->payload, w->payload_len) == 0, "placed bytes differ");
                free(back);
            } else {
                cr_assert(w->payload_len == 0 ||
                          memcmp(f.payload, w->payload, w->payload_len) == 0);
            }
        }
        cr_assert_eq(rc, 0, "step %zu: %s", step, ps_frame_decoder_error(d));
        if (off == len)
            break;
        off += ps_frame_decoder_feed(d, stream + off, len - off < step ? len - off : step);
    }
    cr_assert_eq(seen, n_want);
    ps_frame_decoder_free(d);
}

Test(frame, placed_payload_lands_in_pieces_at_every_step_size, .timeout = 30)
{
    size_t n = 3 * 65536 + 17;
    uint8_t *p1 = random_bytes(n, 21), *p2 = random_bytes(999, 22);
    /* A placed reply between two frames kept in the decoder's buffer, so
     * leftover bytes of one frame must not leak into the next one's pieces. */
    want_frame w[3] = {
        {.type = SHARDPS__MSG_TYPE__PUSH, .payload = p2, .payload_len = 999, .n_iov = 1},
        {.type = SHARDPS__MSG_TYPE__PULL_REPLY, .payload = p1, .payload_len = n, .n_iov = 3},
        {.type = SHARDPS__MSG_TYPE__PUSH, .payload = p2, .payload_len = 999, .n_iov = 2},
    };
    const size_t steps[] = {SIZE_MAX, 7, 4096, 65536};
    uint8_t *stream = NULL, *dest = malloc(n);
    size_t len = 0;

    cr_assert_not_null(dest);
    for (int i = 0; i < 3; i++)
        encode_append(&w[i], &stream, &len);
    for (size_t s = 0; s < sizeof(steps) / sizeof(steps[0]); s++) {
        placer pl = {.dest = dest, .n = 4, .only = SHARDPS__MSG_TYPE__PULL_REPLY};
        memset(dest, 0, n);
        decode_placed(&pl, stream, len, steps[s], w, 3);
        cr_assert_eq(pl.calls, 3, "asked once per frame with a payload");
    }
    free(stream);
    free(dest);
    free(p1);
    free(p2);
}

Test(frame, pieces_that_do_not_add_up_are_ignored, .timeout = 30)
{
    uint8_t *p = random_bytes(5000, 23), *dest = calloc(1, 5000);
    want_frame w = {
        .type = SHARDPS__MSG_TYPE__PULL_REPLY, .payload = p, .payload_len = 5000, .n_iov = 1};
    uint8_t *stream = NULL;
    size_t len = 0;
    /* Three of the four pieces: short of the payload, so the decoder keeps
     * the payload itself rather than write past what it was given. */
    placer pl = {.dest = dest, .n = 3, .only = SHARDPS__MSG_TYPE__PULL_REPLY};

    cr_assert_not_null(dest);
    encode_append(&w, &stream, &len);
    decode_placed(&pl, stream, len, 1000, &w, 1);
    for (size_t i = 0; i < 5000; i++)
        cr_assert_eq(dest[i], 0, "byte %zu written into a refused piece", i);
    free(stream);
    free(dest);
    free(p);
}

Test(frame, placed_payload_with_bad_crc_is_refused, .timeout = 30)
{
    uint8_t *p = random_bytes(70000, 24), *dest = malloc(70000);
    want_frame w = {
        .type = SHARDPS__MSG_TYPE__PULL_REPLY, .payload = p, .payload_len = 70000, .n_iov = 1};
    uint8_t *stream = NULL;
    size_t len = 0, off = 0;
    placer pl = {.dest = dest, .n = 4, .only = SHARDPS__MSG_TYPE__PULL_REPLY};
    ps_frame_decoder *d = new_decoder(PS_DEFAULT_MAX_PAYLOAD);
    ps_frame f;
    int rc = 0;

    cr_assert_not_null(dest);
    encode_append(&w, &stream, &len);
    stream[len - 12345] ^= 0x01;
    ps_frame_decoder_set_place(d, place_reversed, &pl);
    while (rc == 0 && off < len) {
        off += ps_frame_decoder_feed(d, stream + off, len - off < 3000 ? len - off : 3000);
        rc = ps_frame_decoder_next(d, &f);
    }
    cr_assert_eq(rc, -PS_ECRC);
    check_stays_failed(d);
    ps_frame_decoder_free(d);
    free(stream);
    free(dest);
    free(p);
}

/* A place callback that refuses every payload, as the server does when a
 * frame's size does not fit its keys. */
static int place_refuse(void *arg, const Shardps__Header *hdr, const ps_frame_piece **pieces)
{
    int *calls = arg;

    (void)hdr;
    (void)pieces;
    ++*calls;
    return -PS_EPROTO;
}

/* A refused payload fails the decoder with the callback's code before any
 * payload byte is read (nothing past the first read is taken), so nobody
 * buffers a size a header merely announces. */
Test(frame, refused_payload_fails_before_it_is_buffered, .timeout = 30)
{
    uint8_t *p = random_bytes(70000, 25);
    want_frame w = {
        .type = SHARDPS__MSG_TYPE__PUSH, .payload = p, .payload_len = 70000, .n_iov = 1};
    uint8_t *stream = NULL;
    size_t len = 0;
    ps_frame_decoder *d = new_decoder(PS_DEFAULT_MAX_PAYLOAD);
    ps_frame f;
    int calls = 0, rc = 0;
    size_t off = 0;

    encode_append(&w, &stream, &len);
    ps_frame_decoder_set_place(d, place_refuse, &calls);
    while (rc == 0 && off < len) {
        off += ps_frame_decoder_feed(d, stream + off, len - off < 3000 ? len - off : 3000);
        rc = ps_frame_decoder_next(d, &f);
    }
    cr_assert_eq(rc, -PS_EPROTO);
    cr_assert_eq(calls, 1);
    cr_assert(strstr(ps_frame_decoder_error(d), "refused") != NULL, "%s",
              ps_frame_decoder_error(d));
    cr_assert_lt(off, 70000, "the decoder read the payload before refusing it");
    check_stays_failed(d);
    ps_frame_decoder_free(d);
    free(stream);
    free(p);
}

Test(frame, consecutive_placed_payloads, .timeout = 30)
{
    uint8_t *p1 = random_bytes(64, 31), *p2 = random_bytes(64, 32), *dest = malloc(64);
    want_frame w[4] = {
        {.type = SHARDPS__MSG_TYPE__PUSH, .payload = p1, .payload_len = 64, .n_iov = 1},
        {.type = SHARDPS__MSG_TYPE__PUSH, .payload = p2, .payload_len = 64, .n_iov = 1},
        {.type = SHARDPS__MSG_TYPE__PUSH, .payload = p1, .payload_len = 64, .n_iov = 1},
        {.type = SHARDPS__MSG_TYPE__PULL, .payload = NULL, .payload_len = 0, .n_iov = 0},
    };
    const size_t steps[] = {SIZE_MAX, 7, 100, 643};
    uint8_t *stream = NULL;
    size_t len = 0;

    for (int i = 0; i < 4; i++)
        encode_append(&w[i], &stream, &len);
    for (size_t s = 0; s < sizeof(steps) / sizeof(steps[0]); s++) {
        placer pl = {.dest = dest, .n = 4, .only = SHARDPS__MSG_TYPE__PUSH};
        decode_placed(&pl, stream, len, steps[s], w, 4);
    }
    free(stream);
    free(dest);
    free(p1);
    free(p2);
}

/* Decodes stream in steps of `step` bytes with the Inf/NaN scan set to scan,
 * through pl's uneven pieces when pl is given, and stores each frame's
 * nonfinite flag in flags. Returns the number of frames. */
static int decode_scanned(const uint8_t *stream, size_t len, size_t step, int scan, placer *pl,
                          int *flags, int max)
{
    ps_frame_decoder *d = new_decoder(PS_DEFAULT_MAX_PAYLOAD);
    size_t off = 0;
    int n = 0, rc;
    ps_frame f;

    ps_frame_decoder_set_scan_nonfinite(d, scan);
    if (pl != NULL)
        ps_frame_decoder_set_place(d, place_reversed, pl);
    for (;;) {
        while ((rc = ps_frame_decoder_next(d, &f)) == 1) {
            cr_assert_lt(n, max);
            flags[n++] = f.nonfinite;
        }
        cr_assert_eq(rc, 0, "step %zu: %s", step, ps_frame_decoder_error(d));
        if (off == len)
            break;
        off += ps_frame_decoder_feed(d, stream + off, len - off < step ? len - off : step);
    }
    ps_frame_decoder_free(d);
    return n;
}

/* The scan must see a bad value wherever it sits: first, last, or cut in
 * two by a read or a piece boundary (odd step sizes, pieces at len/3), in
 * float32, float16 and bfloat16, and must not report one that is not there.
 * Values whose exponent is all ones only in the other half of a float32 (the
 * bytes 0x7f80 in its low 16 bits) must not count: the scan reads whole
 * values. The bfloat16 values are finite but have float16's exponent bits all
 * set (0x7c12, 0xff7f: about 3e36 and the most negative bfloat16), so a scan
 * that picked its rule by value size, not dtype, fails here; float16's Inf
 * and NaN lack bfloat16's exponent bits, so the opposite mistake fails too. */
Test(frame, nonfinite_scan_finds_inf_and_nan_at_every_position, .timeout = 60)
{
    const size_t n_vals = 3001, steps[] = {SIZE_MAX, 1, 3, 7, 4096};
    const size_t where[] = {0, 1, 1000, 1500, 3000};
    const Shardps__DType types[] = {SHARDPS__DTYPE__DTYPE_F32, SHARDPS__DTYPE__DTYPE_F16,
                                    SHARDPS__DTYPE__DTYPE_BF16};

    for (int t = 0; t < 3; t++) {
        int bf16 = types[t] == SHARDPS__DTYPE__DTYPE_BF16;
        size_t elem = types[t] == SHARDPS__DTYPE__DTYPE_F32 ? 4 : 2;
        size_t bytes = n_vals * elem;
        uint8_t *clean = malloc(bytes), *bad = malloc(bytes), *dest = malloc(bytes);
        cr_assert(clean != NULL && bad != NULL && dest != NULL);
        for (size_t i = 0; i < n_vals; i++) {
            /* finite values: 1.0 (0x3f800000) and 1.0 half (0x3c00), with
             * 0x7f80 in the low bytes of every float32 */
            uint32_t w = 0x3f807f80u;
            uint16_t h = bf16 ? (i % 2 ? 0xff7fu : 0x7c12u) : 0x3c00u;
            if (elem == 4)
                memcpy(clean + 4 * i, &w, 4);
            else
                memcpy(clean + 2 * i, &h, 2);
        }
        for (size_t wi = 0; wi < sizeof(where) / sizeof(where[0]); wi++) {
            want_frame w[3] = {
                {.type = SHARDPS__MSG_TYPE__PUSH,
                 .payload = clean,
                 .payload_len = bytes,
                 .n_iov = 1,
                 .dtype = types[t]},
                {.type = SHARDPS__MSG_TYPE__PUSH,
                 .payload = bad,
                 .payload_len = bytes,
                 .n_iov = 2,
                 .dtype = types[t]},
                {.type = SHARDPS__MSG_TYPE__PUSH,
                 .payload = clean,
                 .payload_len = bytes,
                 .n_iov = 1,
                 .dtype = types[t]},
            };
            uint8_t *stream = NULL;
            size_t len = 0;
            uint32_t nan32 = 0x7fc00001u, inf32 = 0xff800000u;
            uint16_t nan16 = bf16 ? 0x7fc1u : 0x7e00u, inf16 = bf16 ? 0xff80u : 0xfc00u;

            memcpy(bad, clean, bytes);
            if (elem == 4)
                memcpy(bad + 4 * where[wi], wi % 2 ? &nan32 : &inf32, 4);
            else
                memcpy(bad + 2 * where[wi], wi % 2 ? &nan16 : &inf16, 2);
            for (int i = 0; i < 3; i++)
                encode_append(&w[i], &stream, &len);
            for (size_t st = 0; st < sizeof(steps) / sizeof(steps[0]); st++) {
                for (int placed = 0; placed < 2; placed++) {
                    placer pl = {.dest = dest, .n = 4, .only = SHARDPS__MSG_TYPE__PUSH};
                    int flags[3], off_flags[3];
                    cr_assert_eq(
                        decode_scanned(stream, len, steps[st], 1, placed ? &pl : NULL, flags, 3),
                        3);
                    cr_assert(flags[0] == 0 && flags[1] == 1 && flags[2] == 0,
                              "dtype %d, bad value %zu, step %zu, placed %d: flags %d %d %d",
                              types[t], where[wi], steps[st], placed, flags[0], flags[1], flags[2]);
                    decode_scanned(stream, len, steps[st], 0, placed ? &pl : NULL, off_flags, 3);
                    cr_assert(off_flags[1] == 0, "reported although the scan is off");
                }
            }
            free(stream);
        }
        free(clean);
        free(bad);
        free(dest);
    }
}

Test(frame, nonfinite_scan_ignores_payloads_without_a_float_dtype, .timeout = 30)
{
    uint32_t nan32 = 0x7fc00000u;
    want_frame w = {.type = SHARDPS__MSG_TYPE__PUSH,
                    .payload = (const uint8_t *)&nan32,
                    .payload_len = 4,
                    .n_iov = 1};
    uint8_t *stream = NULL;
    size_t len = 0;
    int flag = -1;

    encode_append(&w, &stream, &len);
    cr_assert_eq(decode_scanned(stream, len, SIZE_MAX, 1, NULL, &flag, 1), 1);
    cr_assert_eq(flag, 0);
    free(stream);
}

/* Another program's first bytes (an HTTP port given by mistake) are named
 * for what they look like; the same bytes after a frame are a broken stream,
 * not another program. */
Test(frame, foreign_first_bytes_are_named, .timeout = 30)
{
    static const struct {
        const char *bytes;
        size_t len;
        int code;
        const char *said;
    } cases[] = {
        {"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n", 47, -PS_ETOOBIG,
         "it answered like an HTTP server (\"HTTP/1.1 400 Bad Request\")"},
        {"GET /metrics HTTP/1.1\r\n", 23, -PS_ETOOBIG,
         "it spoke like an HTTP client (\"GET /metrics HTTP/1.1\")"},
        {"SSH-2.0-OpenSSH_9.2\r\n", 21, -PS_ETOOBIG,
         "it answered like an SSH server (\"SSH-2.0-OpenSSH_9.2\")"},
        {"\x16\x03\x01\x02\x00\x01", 6, -PS_ETOOBIG, "it spoke TLS"},
        {"+OK ready\r\n", 11, -PS_ETOOBIG, "it sent text, not a shardps frame (\"+OK ready\")"},
        {"\x00\x00\x00\x00\x07", 5, -PS_EPROTO, "its first bytes (00 00 00 00 07) are no shardps"},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        ps_frame_decoder *d = new_decoder(PS_DEFAULT_MAX_PAYLOAD);
        ps_frame f;

        ps_frame_decoder_feed(d, cases[i].bytes, cases[i].len);
        cr_assert_eq(ps_frame_decoder_next(d, &f), cases[i].code, "case %zu", i);
        cr_assert(strstr(ps_frame_decoder_error(d), cases[i].said), "case %zu: %s", i,
                  ps_frame_decoder_error(d));
        check_stays_failed(d);
        ps_frame_decoder_free(d);
    }
}

Test(frame, impossible_length_after_a_frame_is_a_broken_stream, .timeout = 30)
{
    static const char http[] = "HTTP/1.1 400 Bad Request\r\n";
    Shardps__Header h = SHARDPS__HEADER__INIT;
    ps_frame_decoder *d = new_decoder(PS_DEFAULT_MAX_PAYLOAD);
    uint8_t *head, *stream = NULL;
    size_t head_len, len = 0;
    ps_frame f;

    h.type = SHARDPS__MSG_TYPE__HEARTBEAT;
    cr_assert_eq(ps_frame_encode(&h, NULL, 0, &head, &head_len), 0);
    append(&stream, &len, head, head_len);
    append(&stream, &len, http, sizeof(http) - 1);
    ps_frame_decoder_feed(d, stream, len);
    cr_assert_eq(ps_frame_decoder_next(d, &f), 1);
    cr_assert_eq(ps_frame_decoder_next(d, &f), -PS_ETOOBIG);
    cr_assert(strstr(ps_frame_decoder_error(d), "exceeds the limit"), "%s",
              ps_frame_decoder_error(d));
    ps_frame_decoder_free(d);
    free(head);
    free(stream);
}

/* Issue 22, cause 8: protobuf-c hands strings to C NUL-terminated, so a
 * tensor named "ab\0cd" arrived as "ab". The decoder now refuses any header
 * whose string fields hold a NUL byte, naming the field; the same string
 * without the NUL passes. (A table's names travel in a TABLE payload now,
 * checked by ps_tensor_table_unpack: test_tensor_table.c.) */
Test(frame, string_field_with_a_nul_is_refused, .timeout = 30)
{
    Shardps__Header h = SHARDPS__HEADER__INIT;
    Shardps__Hello hello = SHARDPS__HELLO__INIT;
    uint8_t *buf, *at;
    size_t len;

    hello.role = SHARDPS__ROLE__ROLE_WORKER;
    hello.job_settings = "abXcd";
    h.type = SHARDPS__MSG_TYPE__HELLO;
    h.hello = &hello;
    cr_assert_eq(ps_frame_encode(&h, NULL, 0, &buf, &len), 0);
    at = memmem(buf, len, "abXcd", 5);
    cr_assert_not_null(at);
    for (int nul = 0; nul < 2; nul++) {
        ps_frame_decoder *dec = new_decoder(PS_DEFAULT_MAX_PAYLOAD);
        got_frames g = {0};

        at[2] = nul ? '\0' : 'X';
        if (!nul) {
            cr_assert_eq(feed_all(dec, buf, len, SIZE_MAX, &g), 0);
            cr_assert_eq(g.n, 1);
        } else {
            cr_assert_eq(feed_all(dec, buf, len, SIZE_MAX, &g), -PS_EPROTO);
            cr_assert_eq(g.n, 0);
            cr_assert(strstr(ps_frame_decoder_error(dec), "Header.hello.job_settings holds a NUL "
                                                          "byte"),
                      "%s", ps_frame_decoder_error(dec));
            check_stays_failed(dec);
        }
        got_free(&g);
        ps_frame_decoder_free(dec);
    }
    free(buf);
}

/* What a client reconnects after (the trainer rejoins, shardps-eval --follow
 * looks for the servers again): a connection that went away, however the
 * kernel said so (the evaluator once gave up on a broken pipe from a server
 * exiting at the job's end), but never a refusal, a protocol breach, another
 * model or its own fault. */
Test(frame, connection_loss_is_any_way_a_connection_ends, .timeout = 30)
{
    const int lost[] = {-PS_ECLOSED,   -PS_ETIMEOUT,  -EPIPE,    -ECONNRESET,
                        -ECONNREFUSED, -ECONNABORTED, -ETIMEDOUT};
    const int kept[] = {-PS_EREJECTED, -PS_EPROTO, -PS_EMISMATCH, -ENOMEM, -EINVAL, 0};

    for (size_t i = 0; i < sizeof(lost) / sizeof(lost[0]); i++)
        cr_assert(ps_error_is_connection_loss(lost[i]), "%s", ps_err_name(lost[i]));
    for (size_t i = 0; i < sizeof(kept) / sizeof(kept[0]); i++)
        cr_assert(!ps_error_is_connection_loss(kept[i]), "%s", ps_err_name(kept[i]));
}
