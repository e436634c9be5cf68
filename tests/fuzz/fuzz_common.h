/* Shared by the libFuzzer targets and the seed-corpus generator: the small
 * model the fuzzed server holds, a HELLO it accepts, and the input format of
 * fuzz_handshake. That target's first input byte is a mode: PSF_MODE_HELLO
 * puts a valid HELLO in front of the rest, so the fuzzer starts past the
 * handshake; PSF_MODE_RECORDS reads the rest as records [u16 header length]
 * [header][u16 payload length][payload], each re-encoded with the right
 * version, length and CRC32C, so mutated requests get past the frame decoder
 * and reach the server's own checks. Without it the rest is sent as it is.
 * Keeping the format here lets make_corpus.c write seeds the target reads
 * exactly as it will read the fuzzer's mutations of them. */
#ifndef PS_FUZZ_COMMON_H
#define PS_FUZZ_COMMON_H

#include <stddef.h>
#include <stdint.h>

#include "frame.h"
#include "model_spec.h"

/* A chunk of 16 floats: every tensor spans one or more chunks, so requests
 * name several keys and the key checks have something to work on. */
#define PSF_CHUNK_BYTES  64
#define PSF_MODE_HELLO   1
#define PSF_MODE_RECORDS 2

/* A growable byte buffer; p is owned and freed with psf_buf_free. */
typedef struct {
    uint8_t *p;
    size_t len, cap;
} psf_buf;

/* Returns 0 or -ENOMEM (the buffer is unchanged then). */
int psf_buf_put(psf_buf *b, const void *data, size_t n);
void psf_buf_free(psf_buf *b);

/* The model: an MLP 5-16-3 with seed 1234 (147 floats in 10 chunks). */
void psf_spec(ps_model_spec *spec);
/* A HELLO for rank 0 of 1 worker and 1 server declaring spec by digest;
 * hello must outlive h, which points into storage reused by the next
 * psf_hello (the packed table too). */
void psf_hello(Shardps__Header *h, Shardps__Hello *hello, const ps_model_spec *spec);
/* Appends the HELLO h of the last psf_hello and the TABLE frame with its
 * table, as frames or as records. Return 0 or a negative code. */
int psf_hello_frames(psf_buf *b, Shardps__Header *h);
int psf_hello_records(psf_buf *b, const Shardps__Header *h);
/* Every key of spec on a single server, in partition order, into keys
 * (room for its chunks); returns how many, or a negative code. */
int psf_keys(const ps_model_spec *spec, uint64_t *keys, size_t max_keys);

/* Appends h and its payload as one record. Returns 0 or a negative code. */
int psf_record(psf_buf *b, const Shardps__Header *h, const void *payload, size_t len);
/* Appends h as a correct frame (ps_frame_encode) followed by its payload. */
int psf_frame(psf_buf *b, Shardps__Header *h, const void *payload, size_t len);
/* Takes one record [u16 len][header][u16 len][payload] off *data (advancing
 * it) and appends it to out as a frame: re-encoded with the right version,
 * length and CRC when the header unpacks, else as it is behind a length
 * prefix. A record cut short takes what is left. Returns 0 or -ENOMEM. */
int psf_next_record(const uint8_t **data, size_t *len, psf_buf *out);
/* Turns a fuzz_handshake input into the bytes sent to the server. Returns 0
 * or -ENOMEM. */
int psf_stream(const uint8_t *data, size_t len, psf_buf *out);

/* corpus_files.c, for ps-fuzz-corpus: the seeds of fuzz_table,
 * fuzz_checkpoint and fuzz_model into DIR/table, DIR/checkpoint and
 * DIR/model (made if need be). Returns 0 or a negative code. */
int psf_file_seeds(const char *dir);

#endif
