/* The shardps frame: [u32 little-endian header_len][Header (protobuf-c)]
 * [payload_bytes raw bytes].
 *
 * Encoding packs the header and computes the payload's length and CRC32C from
 * a scatter/gather list, so tensor bytes are never copied into a message.
 * Decoding is an incremental state machine fed by the transport: every limit
 * (header length, payload length, protocol version) is checked before any
 * allocation that depends on it, and a payload is read straight into its own
 * buffer rather than through a staging copy. */
#ifndef PS_FRAME_H
#define PS_FRAME_H

#include <stddef.h>
#include <stdint.h>

#include "shardps.pb-c.h"

/* 3: WAITING (a server says why a pull is held). 4: the tensor table in a
 * TABLE frame of its own, the HELLO and WELCOME carrying its digest; WRITE
 * (rank 0's initial values and buffers). An older peer would send its table
 * where a digest is expected and be taken for a joiner: refused by version
 * instead. 5: a PUSH marked unused, without a payload (a tensor no forward
 * used); a version 4 server would take it for a short push mid-run, so the
 * handshake refuses the pair instead. */
#define PS_PROTOCOL_VERSION    5
#define PS_MAX_HEADER_BYTES    (64u * 1024u)
#define PS_DEFAULT_MAX_PAYLOAD ((size_t)1 << 30)
#define PS_FRAME_PREFIX_BYTES  4

/* One piece of a payload; the bytes are borrowed, not owned. */
typedef struct {
    const void *base;
    size_t len;
} ps_iov;

/* Somewhere payload bytes may be written; borrowed, not owned. */
typedef struct {
    void *base;
    size_t len;
} ps_frame_piece;

/* A decoded frame. Both pointers belong to the decoder and stay valid until
 * the next call on it. payload is NULL (payload_len still set) when the
 * payload was written into pieces named by the decoder's place callback. */
typedef struct {
    Shardps__Header *hdr;
    uint8_t *payload;
    size_t payload_len;
    /* Only with ps_frame_decoder_set_scan_nonfinite on and hdr->dtype float32,
     * float16 or bfloat16: 1 when some value of the payload is Inf or NaN. Else 0. */
    int nonfinite;
} ps_frame;

/* Asked once per frame, after its header passed every check and before any
 * payload byte is stored: return how many pieces (*pieces, borrowed by the
 * decoder until that frame is delivered) the payload should be scattered
 * into, or 0 to keep it in the decoder's own buffer. Pieces whose lengths do
 * not add up to hdr->payload_bytes are ignored, as if 0 was returned. A
 * negative return refuses the frame before any payload byte is stored: the
 * decoder fails with that code. This is how a pull reply lands straight in
 * the parameters it answers, and how a server judges a payload's size. */
typedef int (*ps_frame_place_cb)(void *arg, const Shardps__Header *hdr,
                                 const ps_frame_piece **pieces);

/* Sets hdr->version, payload_bytes and payload_crc32c from payload[0..n), then
 * packs [prefix][header] into a new buffer that the caller frees with free().
 * Returns 0, -PS_ETOOBIG (header over PS_MAX_HEADER_BYTES) or -ENOMEM. */
int ps_frame_encode(Shardps__Header *hdr, const ps_iov *payload, int n, uint8_t **out,
                    size_t *out_len);
/* Packs [prefix][header] exactly as hdr says, filling in nothing (tools that
 * build deliberately wrong frames use this). Caller frees *out with free().
 * Returns 0 or -ENOMEM. */
int ps_frame_pack_header(const Shardps__Header *hdr, uint8_t **out, size_t *out_len);

typedef struct ps_frame_decoder ps_frame_decoder;

/* max_payload: frames announcing more are refused with -PS_ETOOBIG.
 * Returns 0 and a decoder freed with ps_frame_decoder_free, or -ENOMEM. */
int ps_frame_decoder_init(ps_frame_decoder **out, size_t max_payload);
void ps_frame_decoder_free(ps_frame_decoder *d);
/* Changes the payload limit for frames whose header has not arrived yet. */
void ps_frame_decoder_set_max_payload(ps_frame_decoder *d, size_t max_payload);
/* Installs (or, with NULL, removes) the callback that may place payloads. */
void ps_frame_decoder_set_place(ps_frame_decoder *d, ps_frame_place_cb cb, void *arg);

/* With on, float32, float16 and bfloat16 payloads (by hdr->dtype) are searched for Inf
 * and NaN as they arrive, block by block right after the CRC while the bytes
 * are in cache, and ps_frame.nonfinite says what was found. A server that
 * refuses such gradients then needs no pass of its own over each push. */
void ps_frame_decoder_set_scan_nonfinite(ps_frame_decoder *d, int on);
/* Where the next bytes from the peer should be written, and how many fit
 * (always at least 1). Valid until the next call on the decoder. */
void ps_frame_decoder_buf(ps_frame_decoder *d, uint8_t **buf, size_t *len);
/* n bytes (at most the length ps_frame_decoder_buf gave) were written there.
 * Payload bytes are checksummed (and scanned, if asked) here, piece by piece
 * while they are still in cache, so neither is a separate walk over the whole
 * payload. */
void ps_frame_decoder_commit(ps_frame_decoder *d, size_t n);

/* Returns 1 and the next complete frame, 0 when more bytes are needed, or a
 * negative code (-PS_ETOOBIG, -PS_EPROTO, -PS_EVERSION, -PS_ECRC, -ENOMEM)
 * after which the decoder refuses everything and the connection must close;
 * ps_frame_decoder_error() then says why in words. */
int ps_frame_decoder_next(ps_frame_decoder *d, ps_frame *f);
const char *ps_frame_decoder_error(const ps_frame_decoder *d);

/* A peer's first n (at least 4) bytes that are no shardps frame (their
 * length prefix is impossible), in words for a log line: "it answered like
 * an HTTP server (\"HTTP/1.1 400 Bad Request\")", "it spoke like an HTTP
 * client (...)", "it answered like an SSH server (...)", "it spoke TLS", "it
 * sent text, ..." or the bytes in hex. The decoder fails a first frame with
 * these words (its code is as for any impossible length). Pure. */
void ps_frame_describe_foreign(const uint8_t *p, size_t n, char *out, size_t len);

/* For tests and tools: one buf/commit round over a copy of data. Returns the
 * bytes taken (<= len, 0 once failed); the caller collects frames with
 * ps_frame_decoder_next and feeds the rest, exactly as a socket reader would. */
size_t ps_frame_decoder_feed(ps_frame_decoder *d, const void *data, size_t len);

#endif
