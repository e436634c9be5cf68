/* What protobuf-c does not check in an encoded message: a string field that
 * holds a NUL byte. protobuf-c hands strings to C NUL-terminated, so
 * "ab\0cd" would silently arrive as "ab" (a tensor declared under one name
 * and held under another). This walks the encoded bytes with the message's
 * descriptor, nested messages included, and refuses such a field by name.
 * The frame decoder runs it on every header; a checkpoint's stored tensor
 * table goes through it too (tensor_table.h's ps_tensor_table_unpack). */
#ifndef PS_PB_STRINGS_H
#define PS_PB_STRINGS_H

#include <protobuf-c/protobuf-c.h>
#include <stddef.h>
#include <stdint.h>

/* buf[0..len) encodes a message of desc (protobuf-c accepted it). Returns 0
 * when no string field in it, or in the messages nested in it, holds a NUL
 * byte; else -PS_EPROTO with "field Hello.table.tensors.name holds a NUL
 * byte" in why. Bytes that are not wire format are refused the same way.
 * Pure. */
int ps_pb_strings_check(const ProtobufCMessageDescriptor *desc, const uint8_t *buf, size_t len,
                        char *why, size_t why_len);

#endif
