/* The shape rules of a worker's frames, as pure functions of what the frame
 * says and what this server holds: which types a session state accepts,
 * which carry a payload and exactly how many bytes, which dtypes, how
 * large a gradient may be, and what a read-only evaluator may send and how
 * many are let in. The server calls these before any frame changes
 * its state (the clock rules are consistency.h's); the tests call them
 * directly (tests/unit/test_consistency.c). Each returns 0, or a negative
 * code with the reason written to why. */
#ifndef PS_VALIDATE_H
#define PS_VALIDATE_H

#include <stddef.h>
#include <stdint.h>

#include "shardps.pb-c.h"

/* Whether an admitted worker may send this type at all. */
int ps_validate_worker_type(Shardps__MsgType type, char *why, size_t why_len);
/* Whether an admitted evaluator may: it reads the weights (PULL) and keeps
 * its connection (HEARTBEAT, BYE), and nothing else; a PUSH is refused. */
int ps_validate_evaluator_type(Shardps__MsgType type, char *why, size_t why_len);
/* Whether one more evaluator fits beside `evaluators` admitted ones: the
 * workers keep their `world` connections of max_connections whatever else
 * comes, and evaluators hold at most half of the rest (at least one), so
 * connections in their handshake always keep the other half. -EAGAIN (come
 * back) when none is free. */
int ps_validate_evaluator_slot(int max_connections, int world, int evaluators, char *why,
                               size_t why_len);
/* A frame of this type announcing payload_bytes: PUSH must carry exactly its
 * keys' values (f32_bytes in float32, half that in float16 or bfloat16) in a supported
 * dtype, unless it is marked unused (the header's `unused`: a tensor no
 * forward used), when it carries neither payload nor dtype; every other type
 * carries nothing (and ignores `unused`). Checked on the header alone,
 * before any payload byte is buffered. */
int ps_validate_payload(Shardps__MsgType type, Shardps__DType dtype, int unused, size_t f32_bytes,
                        uint64_t payload_bytes, char *why, size_t why_len);
/* A declarer's frame after its HELLO (and proof): a TABLE, no keys, a
 * payload of 1 to PS_TABLE_MAX_BYTES bytes; checked on the header alone,
 * before any payload byte is buffered. */
int ps_validate_table_frame(Shardps__MsgType type, size_t n_keys, uint64_t payload_bytes, char *why,
                            size_t why_len);
/* A chunk's gradient g[0..n) against max_norm (0: no limit): refused when
 * its L2 norm is larger (or not a number). */
int ps_validate_grad_norm(const float *g, size_t n, double max_norm, char *why, size_t why_len);

#endif
