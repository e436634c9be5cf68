/* Saved model files (see model_file.h). Writing streams through stdio while
 * the CRC accumulates; reading checks the magic and version from the first
 * bytes, then loads the whole file, checks the CRC over it, and only then
 * parses, every length checked against the bytes left. */
#include "model_file.h"

#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "crc32c.h"
#include "crc_writer.h"
#include "le_bytes.h"
#include "ps_error.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "model files are written with the host's float32 layout, which must be little-endian"
#endif

static const char ps__model_file_magic[8] = {'S', 'H', 'P', 'S', 'M', 'O', 'D', 'L'};

#define PS__MAX_TEXT (1u << 20)
/* Refuse to load anything bigger than 64 GiB rather than trust a size. */
#define PS__MODEL_FILE_MAX (64ull << 30)

static int ps__model_file_fail(int code, char *err, size_t errlen, const char *path,
                               const char *fmt, ...) __attribute__((format(printf, 5, 6)));

static int ps__model_file_fail(int code, char *err, size_t errlen, const char *path,
                               const char *fmt, ...)
{
    va_list ap;
    int n;

    if (errlen == 0)
        return code;
    n = snprintf(err, errlen, "%s: ", path);
    if (n >= 0 && (size_t)n < errlen) {
        va_start(ap, fmt);
        vsnprintf(err + n, errlen - (size_t)n, fmt, ap);
        va_end(ap);
    }
    return code;
}

static void ps__put_body(ps_crc_writer *w, const ps_model_desc *desc, const ps_model_spec *table,
                         const char *text, size_t text_len, const float *const *tensors)
{
    ps_crc_writer_put(w, ps__model_file_magic, sizeof(ps__model_file_magic));
    ps_crc_writer_put32(w, PS_MODEL_FILE_VERSION);
    ps_crc_writer_put32(w, 0);
    ps_crc_writer_put32(w, (uint32_t)text_len);
    ps_crc_writer_put(w, text, text_len);
    ps_crc_writer_put32(w, (uint32_t)desc->input.ndim);
    for (int i = 0; i < 3; i++)
        ps_crc_writer_put32(w, i < desc->input.ndim ? (uint32_t)desc->input.d[i] : 0);
    ps_crc_writer_put32(w, (uint32_t)desc->classes);
    ps_crc_writer_put64(w, table->seed);
    ps_crc_writer_put32(w, (uint32_t)table->n_tensors);
    for (int i = 0; i < table->n_tensors; i++) {
        const ps_tensor_spec *t = &table->tensors[i];
        size_t len = strlen(t->name);

        ps_crc_writer_put32(w, (uint32_t)len);
        ps_crc_writer_put(w, t->name, len);
        ps_crc_writer_put32(w, (uint32_t)t->ndim);
        for (int d = 0; d < t->ndim; d++)
            ps_crc_writer_put32(w, (uint32_t)t->shape[d]);
    }
    ps_crc_writer_put64(w, table->total_numel);
    for (int i = 0; i < table->n_tensors; i++)
        ps_crc_writer_put(w, tensors[i], table->tensors[i].numel * sizeof(float));
}

/* fsyncs the directory holding path, so the rename survives a crash. */
static int ps__fsync_parent(const char *path)
{
    char copy[PATH_MAX];
    int fd, rc = 0;

    if (snprintf(copy, sizeof(copy), "%s", path) >= (int)sizeof(copy))
        return -ENAMETOOLONG;
    fd = open(dirname(copy), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    if (fsync(fd) < 0)
        rc = -errno;
    close(fd);
    return rc;
}

int ps_model_file_write(const char *path, const ps_model_desc *desc, const ps_model_spec *table,
                        const float *const *tensors, char *err, size_t errlen)
{
    ps_crc_writer w = {NULL, 0, 0};
    ps_model_desc check = *desc;
    ps_model_spec want;
    char tmp[PATH_MAX], *text = NULL, why[256];
    size_t text_len;
    int rc;

    if (errlen)
        err[0] = '\0';
    if (!desc->resolved)
        return ps__model_file_fail(-EINVAL, err, errlen, path,
                                   "the model description is not resolved");
    /* The file must load back into this very table. */
    if (ps_model_desc_resolve(&check, &desc->input, desc->classes, table->seed, &want, why,
                              sizeof(why)) != 0 ||
        ps_model_spec_fingerprint(&want) != ps_model_spec_fingerprint(table)) {
        ps_model_spec_free(&want);
        return ps__model_file_fail(-EINVAL, err, errlen, path,
                                   "the tensor table is not the one the model description makes");
    }
    ps_model_spec_free(&want);
    if (snprintf(tmp, sizeof(tmp), "%s.tmp", path) >= (int)sizeof(tmp))
        return ps__model_file_fail(-ENAMETOOLONG, err, errlen, path, "path too long");
    text_len = ps_model_desc_format(desc, NULL, 0);
    if (text_len > PS__MAX_TEXT)
        return ps__model_file_fail(-EINVAL, err, errlen, path, "model text over %u bytes",
                                   PS__MAX_TEXT);
    text = malloc(text_len + 1);
    if (!text)
        return ps__model_file_fail(-ENOMEM, err, errlen, path, "out of memory");
    ps_model_desc_format(desc, text, text_len + 1);

    w.f = fopen(tmp, "wb");
    if (!w.f) {
        rc = -errno;
        free(text);
        return ps__model_file_fail(rc, err, errlen, tmp, "cannot create: %s", strerror(-rc));
    }
    ps__put_body(&w, desc, table, text, text_len, tensors);
    ps_crc_writer_put32(&w, w.crc);
    free(text);
    rc = w.err;
    if (rc == 0 && fflush(w.f) != 0)
        rc = -errno;
    if (rc == 0 && fsync(fileno(w.f)) < 0)
        rc = -errno;
    if (fclose(w.f) != 0 && rc == 0)
        rc = -errno;
    if (rc == 0 && rename(tmp, path) < 0)
        rc = -errno;
    if (rc < 0) {
        unlink(tmp);
        return ps__model_file_fail(rc, err, errlen, path, "cannot write: %s", strerror(-rc));
    }
    rc = ps__fsync_parent(path);
    if (rc < 0)
        return ps__model_file_fail(rc, err, errlen, path, "cannot sync its directory: %s",
                                   strerror(-rc));
    return 0;
}

/* A cursor over the file's bytes; every take is checked against the end. */
typedef struct {
    const uint8_t *p, *end;
} ps__reader;

static const uint8_t *ps__model_file_take(ps__reader *r, size_t n)
{
    const uint8_t *at = r->p;

    if ((size_t)(r->end - r->p) < n)
        return NULL;
    r->p += n;
    return at;
}

static int ps__get32(ps__reader *r, uint32_t *v)
{
    const uint8_t *p = ps__model_file_take(r, sizeof(*v));

    if (!p)
        return -1;
    *v = ps_le_get32(p);
    return 0;
}

static int ps__get64(ps__reader *r, uint64_t *v)
{
    const uint8_t *p = ps__model_file_take(r, sizeof(*v));

    if (!p)
        return -1;
    *v = ps_le_get64(p);
    return 0;
}

/* The magic and format version from the first bytes of fd, before anything
 * else is read: a file that is not a model file of this version costs no
 * more than that, whatever its size. */
static int ps__check_magic(int fd, const char *path, char *err, size_t errlen)
{
    uint8_t head[sizeof(ps__model_file_magic) + sizeof(uint32_t)];
    ssize_t n;
    uint32_t version;

    do
        n = pread(fd, head, sizeof(head), 0);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return ps__model_file_fail(-errno, err, errlen, path, "read failed: %s", strerror(errno));
    if ((size_t)n < sizeof(head))
        return ps__model_file_fail(-PS_EFORMAT, err, errlen, path, "too short for a model file");
    if (memcmp(head, ps__model_file_magic, sizeof(ps__model_file_magic)) != 0)
        return ps__model_file_fail(-PS_EFORMAT, err, errlen, path,
                                   "not a shardps model file (wrong magic)");
    version = ps_le_get32(head + sizeof(ps__model_file_magic));
    if (version != PS_MODEL_FILE_VERSION)
        return ps__model_file_fail(-PS_EVERSION, err, errlen, path,
                                   "format version %u; this build reads version %d", version,
                                   PS_MODEL_FILE_VERSION);
    return 0;
}

/* Reads the whole file into *buf (caller frees), once its magic and version
 * are known to be right. */
static int ps__slurp(const char *path, uint8_t **buf, size_t *len, char *err, size_t errlen)
{
    struct stat st;
    int fd = open(path, O_RDONLY | O_CLOEXEC), rc = 0;
    size_t got = 0;

    *buf = NULL;
    if (fd < 0) {
        rc = -errno;
        return ps__model_file_fail(rc, err, errlen, path, "cannot open: %s", strerror(-rc));
    }
    if (fstat(fd, &st) < 0) {
        rc = -errno;
        ps__model_file_fail(rc, err, errlen, path, "cannot stat: %s", strerror(-rc));
        goto out;
    }
    if (!S_ISREG(st.st_mode) || (unsigned long long)st.st_size > PS__MODEL_FILE_MAX) {
        rc = ps__model_file_fail(-PS_EFORMAT, err, errlen, path,
                                 "not a regular file of at most 64 GiB");
        goto out;
    }
    rc = ps__check_magic(fd, path, err, errlen);
    if (rc < 0)
        goto out;
    *len = (size_t)st.st_size;
    *buf = malloc(*len ? *len : 1);
    if (!*buf) {
        rc = ps__model_file_fail(-ENOMEM, err, errlen, path, "out of memory for %zu bytes", *len);
        goto out;
    }
    while (got < *len) {
        ssize_t n = read(fd, *buf + got, *len - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {
            rc = n < 0 ? -errno : -PS_EFORMAT;
            ps__model_file_fail(rc, err, errlen, path, "read failed: %s",
                                n < 0 ? strerror(-rc) : "file shrank");
            goto out;
        }
        got += (size_t)n;
    }
out:
    close(fd);
    return rc;
}

/* Parses the header after the magic, version and flags, up to the float
 * count, into out->desc and out->table, and checks the stored tensor list
 * against the table the text makes. */
static int ps__parse_header(ps__reader *r, const char *path, ps_saved_model *out, char *err,
                            size_t errlen)
{
    uint32_t text_len, ndim, dims[3], classes, n_tensors;
    uint64_t seed, count;
    const uint8_t *text;
    ps_act_shape input = {0, {0, 0, 0}};
    char *copy, source[160];
    int rc;

    if (ps__get32(r, &text_len) || text_len > PS__MAX_TEXT ||
        !(text = ps__model_file_take(r, text_len)))
        return ps__model_file_fail(-PS_EFORMAT, err, errlen, path,
                                   "truncated or oversized model text");
    copy = malloc(text_len + 1);
    if (!copy)
        return ps__model_file_fail(-ENOMEM, err, errlen, path, "out of memory");
    memcpy(copy, text, text_len);
    copy[text_len] = '\0';
    snprintf(source, sizeof(source), "%s (model text)", path);
    rc = ps_model_desc_parse(&out->desc, copy, source, err, errlen);
    free(copy);
    if (rc)
        return -PS_EFORMAT;
    if (ps__get32(r, &ndim) || ps__get32(r, &dims[0]) || ps__get32(r, &dims[1]) ||
        ps__get32(r, &dims[2]) || ps__get32(r, &classes) || ps__get64(r, &seed) ||
        ps__get32(r, &n_tensors))
        return ps__model_file_fail(-PS_EFORMAT, err, errlen, path, "truncated header");
    if ((ndim != 1 && ndim != 3) || classes > INT_MAX)
        return ps__model_file_fail(-PS_EFORMAT, err, errlen, path,
                                   "bad input shape or class count");
    input.ndim = (int)ndim;
    for (uint32_t i = 0; i < ndim; i++) {
        if (dims[i] > INT_MAX)
            return ps__model_file_fail(-PS_EFORMAT, err, errlen, path, "bad input shape");
        input.d[i] = (int)dims[i];
    }
    rc = ps_model_desc_resolve(&out->desc, &input, (int)classes, seed, &out->table, err, errlen);
    if (rc)
        return -PS_EFORMAT;
    if (n_tensors != (uint32_t)out->table.n_tensors)
        return ps__model_file_fail(-PS_EFORMAT, err, errlen, path,
                                   "lists %u tensors but its model has %d", n_tensors,
                                   out->table.n_tensors);
    for (int i = 0; i < out->table.n_tensors; i++) {
        const ps_tensor_spec *t = &out->table.tensors[i];
        uint32_t len, nd, dim;
        const uint8_t *name;

        if (ps__get32(r, &len) || !(name = ps__model_file_take(r, len)) || ps__get32(r, &nd))
            return ps__model_file_fail(-PS_EFORMAT, err, errlen, path, "truncated tensor list");
        if (len != strlen(t->name) || memcmp(name, t->name, len) != 0 || nd != (uint32_t)t->ndim)
            return ps__model_file_fail(-PS_EFORMAT, err, errlen, path,
                                       "tensor %d is not %s as its model says", i, t->name);
        for (uint32_t d = 0; d < nd; d++)
            if (ps__get32(r, &dim) || dim != (uint32_t)t->shape[d])
                return ps__model_file_fail(-PS_EFORMAT, err, errlen, path,
                                           "tensor %s has another shape than its model says",
                                           t->name);
    }
    if (ps__get64(r, &count) || count != out->table.total_numel)
        return ps__model_file_fail(-PS_EFORMAT, err, errlen, path,
                                   "float count differs from its tensors");
    return 0;
}

int ps_model_file_read(const char *path, ps_saved_model *out, char *err, size_t errlen)
{
    uint8_t *buf = NULL;
    ps__reader r;
    uint32_t flags, crc;
    size_t len = 0, bytes;
    const uint8_t *data;
    int rc;

    memset(out, 0, sizeof(*out));
    if (errlen)
        err[0] = '\0';
    rc = ps__slurp(path, &buf, &len, err, errlen);
    if (rc)
        goto fail;
    if (len < sizeof(ps__model_file_magic) + 2 * sizeof(uint32_t) + sizeof(crc)) {
        rc = ps__model_file_fail(-PS_EFORMAT, err, errlen, path, "too short for a model file");
        goto fail;
    }
    /* Magic and version were checked before the file was read (ps__slurp). */
    r.p = buf + sizeof(ps__model_file_magic) + sizeof(uint32_t);
    r.end = buf + len - sizeof(crc);
    ps__get32(&r, &flags);
    crc = ps_le_get32(buf + len - sizeof(crc));
    if (ps_crc32c(0, buf, len - sizeof(crc)) != crc) {
        rc = ps__model_file_fail(-PS_ECRC, err, errlen, path,
                                 "checksum mismatch: the file is damaged");
        goto fail;
    }
    if (flags != 0) {
        rc = ps__model_file_fail(-PS_EFORMAT, err, errlen, path, "unknown flags 0x%x", flags);
        goto fail;
    }
    rc = ps__parse_header(&r, path, out, err, errlen);
    if (rc)
        goto fail;
    bytes = out->table.total_numel * sizeof(float);
    if ((size_t)(r.end - r.p) != bytes) {
        rc = ps__model_file_fail(-PS_EFORMAT, err, errlen, path,
                                 "holds %zu bytes of values where its tensors need %zu",
                                 (size_t)(r.end - r.p), bytes);
        goto fail;
    }
    data = ps__model_file_take(&r, bytes);
    out->data = malloc(bytes ? bytes : 1);
    if (!out->data) {
        rc = ps__model_file_fail(-ENOMEM, err, errlen, path, "out of memory for %zu bytes", bytes);
        goto fail;
    }
    memcpy(out->data, data, bytes);
    for (size_t i = 0, off = 0; i < (size_t)out->table.n_tensors; i++) {
        out->tensor[i] = out->data + off;
        off += out->table.tensors[i].numel;
    }
    free(buf);
    return 0;
fail:
    free(buf);
    ps_saved_model_free(out);
    return rc;
}

void ps_saved_model_free(ps_saved_model *m)
{
    free(m->data);
    ps_model_spec_free(&m->table);
    memset(m, 0, sizeof(*m));
}
