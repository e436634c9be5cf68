/* A checksumming file writer (see crc_writer.h). */
#include "crc_writer.h"

#include <errno.h>

#include "crc32c.h"
#include "le_bytes.h"

void ps_crc_writer_put(ps_crc_writer *w, const void *p, size_t n)
{
    if (w->err || n == 0)
        return;
    w->crc = ps_crc32c(w->crc, p, n);
    if (fwrite(p, 1, n, w->f) != n)
        w->err = errno ? -errno : -EIO;
}

void ps_crc_writer_put32(ps_crc_writer *w, uint32_t v)
{
    uint8_t b[4];

    ps_le_put32(b, v);
    ps_crc_writer_put(w, b, sizeof(b));
}

void ps_crc_writer_put64(ps_crc_writer *w, uint64_t v)
{
    uint8_t b[8];

    ps_le_put64(b, v);
    ps_crc_writer_put(w, b, sizeof(b));
}
