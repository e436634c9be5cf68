/* Helpers of the fuzz targets and corpus generator (see fuzz_common.h). */
#include "fuzz_common.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "partition.h"
#include "ps_error.h"
#include "tensor_table.h"

int psf_buf_put(psf_buf *b, const void *data, size_t n)
{
    if (n == 0)
        return 0;
    if (b->len + n > b->cap) {
        size_t cap = (b->len + n) * 2;
        uint8_t *p = realloc(b->p, cap);
        if (p == NULL)
            return -ENOMEM;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, data, n);
    b->len += n;
    return 0;
}

void psf_buf_free(psf_buf *b)
{
    free(b->p);
    b->p = NULL;
    b->len = b->cap = 0;
}

void psf_spec(ps_model_spec *spec)
{
    static const int sizes[] = {5, 16, 3};

    /* Cannot fail: the sizes are valid constants. */
    ps_model_spec_init_mlp(spec, sizes, 3, 1234);
}

/* The table of the HELLO made last, packed, and its digest; the fuzz
 * targets are single-threaded. */
static uint8_t *psf_packed;
static size_t psf_packed_len;
static uint8_t psf_digest[PS_TABLE_DIGEST_BYTES];

void psf_hello(Shardps__Header *h, Shardps__Hello *hello, const ps_model_spec *spec)
{
    shardps__header__init(h);
    shardps__hello__init(hello);
    hello->role = SHARDPS__ROLE__ROLE_WORKER;
    hello->rank = 0;
    hello->world = 1;
    free(psf_packed);
    psf_packed = NULL;
    /* Cannot fail for the tables the targets declare, short of memory. */
    if (ps_tensor_table_pack(spec, &psf_packed, &psf_packed_len) < 0)
        abort();
    ps_model_spec_digest(spec, psf_digest);
    hello->table_digest.len = sizeof(psf_digest);
    hello->table_digest.data = psf_digest;
    hello->num_servers = 1;
    hello->chunk_bytes = PSF_CHUNK_BYTES;
    hello->server_index = 0;
    h->type = SHARDPS__MSG_TYPE__HELLO;
    h->request_id = 1;
    h->hello = hello;
}

/* The TABLE frame that follows the last psf_hello's HELLO h. */
static void psf_table_header(Shardps__Header *t, const Shardps__Header *h)
{
    shardps__header__init(t);
    t->type = SHARDPS__MSG_TYPE__TABLE;
    t->request_id = h->request_id;
}

int psf_hello_frames(psf_buf *b, Shardps__Header *h)
{
    Shardps__Header t;
    int rc = psf_frame(b, h, NULL, 0);

    psf_table_header(&t, h);
    return rc < 0 ? rc : psf_frame(b, &t, psf_packed, psf_packed_len);
}

int psf_hello_records(psf_buf *b, const Shardps__Header *h)
{
    Shardps__Header t;
    int rc = psf_record(b, h, NULL, 0);

    psf_table_header(&t, h);
    return rc < 0 ? rc : psf_record(b, &t, psf_packed, psf_packed_len);
}

int psf_keys(const ps_model_spec *spec, uint64_t *keys, size_t max_keys)
{
    ps_partition *part;
    int n, rc = ps_partition_init(&part, spec, 1, PSF_CHUNK_BYTES);

    if (rc < 0)
        return rc;
    n = ps_partition_chunk_count(part);
    for (int i = 0; i < n && (size_t)i < max_keys; i++)
        keys[i] = ps_partition_chunk(part, i)->key;
    ps_partition_free(part);
    return (size_t)n <= max_keys ? n : -ENOSPC;
}

static int psf_put_u16(psf_buf *b, size_t v)
{
    uint8_t le[2] = {(uint8_t)v, (uint8_t)(v >> 8)};

    return psf_buf_put(b, le, sizeof(le));
}

int psf_record(psf_buf *b, const Shardps__Header *h, const void *payload, size_t len)
{
    size_t hlen = shardps__header__get_packed_size(h);
    uint8_t *packed;
    int rc = -EINVAL;

    if (hlen > UINT16_MAX || len > UINT16_MAX)
        return -EINVAL;
    packed = malloc(hlen ? hlen : 1);
    if (packed == NULL)
        return -ENOMEM;
    shardps__header__pack(h, packed);
    rc = psf_put_u16(b, hlen);
    if (rc == 0)
        rc = psf_buf_put(b, packed, hlen);
    if (rc == 0)
        rc = psf_put_u16(b, len);
    if (rc == 0)
        rc = psf_buf_put(b, payload, len);
    free(packed);
    return rc;
}

int psf_frame(psf_buf *b, Shardps__Header *h, const void *payload, size_t len)
{
    ps_iov iov = {payload, len};
    uint8_t *head;
    size_t head_len;
    int rc = ps_frame_encode(h, &iov, len ? 1 : 0, &head, &head_len);

    if (rc < 0)
        return rc;
    rc = psf_buf_put(b, head, head_len);
    free(head);
    if (rc == 0)
        rc = psf_buf_put(b, payload, len);
    return rc;
}

/* Reads a little-endian u16 length, or what is left when fewer than two
 * bytes remain (then the record is cut short, as a socket may cut it). */
static size_t psf_take_len(const uint8_t **p, size_t *left)
{
    size_t v;

    if (*left < 2) {
        *p += *left;
        *left = 0;
        return 0;
    }
    v = (size_t)(*p)[0] | (size_t)(*p)[1] << 8;
    *p += 2;
    *left -= 2;
    return v < *left ? v : *left;
}

/* One record: a header that unpacks is re-encoded with a correct version,
 * length and CRC; one that does not is sent as it is behind a length prefix,
 * so the decoder's own refusal is exercised too. */
static int psf_put_record(psf_buf *out, const uint8_t *hdr, size_t hlen, const uint8_t *payload,
                          size_t plen)
{
    Shardps__Header *h = shardps__header__unpack(NULL, hlen, hdr);
    uint8_t prefix[4] = {(uint8_t)hlen, (uint8_t)(hlen >> 8), 0, 0};
    int rc;

    if (h != NULL) {
        rc = psf_frame(out, h, payload, plen);
        shardps__header__free_unpacked(h, NULL);
        /* Repacked past the header limit (a negative int32 sent in 5 bytes
         * repacks in 10): send the original bytes instead. */
        if (rc != -PS_ETOOBIG)
            return rc;
    }
    rc = psf_buf_put(out, prefix, sizeof(prefix));
    if (rc == 0)
        rc = psf_buf_put(out, hdr, hlen);
    if (rc == 0)
        rc = psf_buf_put(out, payload, plen);
    return rc;
}

int psf_next_record(const uint8_t **data, size_t *len, psf_buf *out)
{
    const uint8_t *hdr, *payload;
    size_t hlen, plen;

    hlen = psf_take_len(data, len);
    hdr = *data;
    *data += hlen;
    *len -= hlen;
    plen = psf_take_len(data, len);
    payload = *data;
    *data += plen;
    *len -= plen;
    return psf_put_record(out, hdr, hlen, payload, plen);
}

int psf_stream(const uint8_t *data, size_t len, psf_buf *out)
{
    ps_model_spec spec;
    Shardps__Header h;
    Shardps__Hello hello;
    uint8_t mode;
    int rc;

    if (len == 0)
        return 0;
    mode = data[0];
    data++;
    len--;
    if (mode & PSF_MODE_HELLO) {
        psf_spec(&spec);
        psf_hello(&h, &hello, &spec);
        rc = psf_hello_frames(out, &h);
        ps_model_spec_free(&spec);
        if (rc < 0)
            return rc;
    }
    if (!(mode & PSF_MODE_RECORDS))
        return psf_buf_put(out, data, len);
    while (len > 0) {
        rc = psf_next_record(&data, &len, out);
        if (rc < 0)
            return rc;
    }
    return 0;
}
