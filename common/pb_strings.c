/* NUL bytes in protobuf string fields (see pb_strings.h): a walk over the
 * wire format (tag varint, then a varint, 8 bytes, 4 bytes or a
 * length-delimited field), recursing into nested messages by their
 * descriptors. Every length is checked against the bytes left. */
#include "pb_strings.h"

#include <stdio.h>
#include <string.h>

#include "ps_error.h"

/* Deeper than any message of proto/shardps.proto nests (Header, Hello,
 * TensorTable, TensorDecl). */
#define PS__MAX_DEPTH 16

/* Reads a varint at *p (at most 10 bytes, before end); 0 or -1. */
static int ps__varint(const uint8_t **p, const uint8_t *end, uint64_t *v)
{
    *v = 0;
    for (int shift = 0; shift < 64 && *p < end; shift += 7) {
        uint8_t b = *(*p)++;
        *v |= (uint64_t)(b & 0x7f) << shift;
        if (!(b & 0x80))
            return 0;
    }
    return -1;
}

static int ps__walk(const ProtobufCMessageDescriptor *desc, const uint8_t *p, const uint8_t *end,
                    int depth, char *path, size_t path_len, char *why, size_t why_len)
{
    size_t used = strlen(path);

    if (depth > PS__MAX_DEPTH) {
        snprintf(why, why_len, "messages nested deeper than %d", PS__MAX_DEPTH);
        return -PS_EPROTO;
    }
    while (p < end) {
        const ProtobufCFieldDescriptor *field;
        uint64_t key, len;
        int rc;

        if (ps__varint(&p, end, &key) < 0)
            goto malformed;
        field = key >> 3 <= UINT32_MAX
                    ? protobuf_c_message_descriptor_get_field(desc, (unsigned)(key >> 3))
                    : NULL;
        switch (key & 7) {
        case 0:
            if (ps__varint(&p, end, &len) < 0)
                goto malformed;
            continue;
        case 1:
        case 5:
            if ((size_t)(end - p) < ((key & 7) == 1 ? 8u : 4u))
                goto malformed;
            p += (key & 7) == 1 ? 8 : 4;
            continue;
        case 2:
            if (ps__varint(&p, end, &len) < 0 || len > (uint64_t)(end - p))
                goto malformed;
            break;
        default:
            goto malformed;
        }
        if (field &&
            (field->type == PROTOBUF_C_TYPE_STRING || field->type == PROTOBUF_C_TYPE_MESSAGE))
            snprintf(path + used, path_len - used, ".%s", field->name);
        if (field && field->type == PROTOBUF_C_TYPE_STRING && memchr(p, '\0', (size_t)len)) {
            snprintf(why, why_len, "field %s holds a NUL byte", path);
            return -PS_EPROTO;
        }
        if (field && field->type == PROTOBUF_C_TYPE_MESSAGE) {
            rc = ps__walk(field->descriptor, p, p + len, depth + 1, path, path_len, why, why_len);
            if (rc < 0)
                return rc;
        }
        path[used] = '\0';
        p += len;
    }
    return 0;
malformed:
    snprintf(why, why_len, "%s is not protobuf wire format", path);
    return -PS_EPROTO;
}

int ps_pb_strings_check(const ProtobufCMessageDescriptor *desc, const uint8_t *buf, size_t len,
                        char *why, size_t why_len)
{
    char path[256];

    snprintf(path, sizeof(path), "%s", desc->short_name);
    return ps__walk(desc, buf, buf + len, 0, path, sizeof(path), why, why_len);
}
