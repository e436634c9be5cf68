/* Loader for MNIST-format IDX files and the per-epoch sample order.
 *
 * Files are read through zlib, which passes plain files through unchanged, so
 * one code path serves both encodings. Headers are distrusted: dimensions are
 * capped, a plain file's size is checked against its header before the big
 * buffers are allocated, and a compressed one is checked by short reads. The
 * epoch order is a pure function of (seed, epoch) so every worker derives the
 * same shuffle without talking to the others. */
#include "dataset.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "ps_error.h"

#define PS__IMAGES_MAGIC 0x00000803u
#define PS__LABELS_MAGIC 0x00000801u
#define PS__MAX_SAMPLES  10000000u
#define PS__MAX_FEATURES (1u << 20)
#define PS__CLASSES      10
#define PS__PIXEL_MEAN   0.2860f
#define PS__PIXEL_STD    0.3530f
#define PS__HINT         "; check the file or --data-dir"
/* gzread takes an unsigned count; large bodies are read in pieces this big. */
#define PS__READ_CHUNK (1u << 30)

/* One IDX file being read. */
typedef struct {
    const char *path;
    gzFile gz;
    /* Size on disk when the content is not compressed and the file is
     * regular, so it can be checked before allocating; -1 otherwise. */
    long long plain_size;
} ps__idx;

static int ps__fail(int code, char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int ps__fail(int code, char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
    return code;
}

static uint32_t ps__be32(const unsigned char *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Reads up to len bytes into buf and stores the count in *got; fewer than len
 * means the data ended. */
static int ps__read(ps__idx *f, void *buf, size_t len, size_t *got, char *err, size_t errlen)
{
    *got = 0;
    while (*got < len) {
        size_t want = len - *got < PS__READ_CHUNK ? len - *got : PS__READ_CHUNK;
        int r;

        /* gzread reports a failed read(2) only through errno. */
        errno = 0;
        r = gzread(f->gz, (char *)buf + *got, (unsigned)want);

        if (r < 0) {
            int e = errno ? errno : EIO, zerr;
            const char *msg = gzerror(f->gz, &zerr);

            if (zerr == Z_ERRNO)
                return ps__fail(-e, err, errlen, "%s: read failed: %s", f->path, strerror(e));
            return ps__fail(-PS_EFORMAT, err, errlen, "%s: corrupt gzip data (%s)" PS__HINT,
                            f->path, msg);
        }
        if (r == 0)
            break;
        *got += (size_t)r;
    }
    return 0;
}

/* Opens path and reads its header: the magic, which must equal magic (what
 * names the kind of file for the message), and ndims big-endian dimensions. */
static int ps__idx_open(ps__idx *f, const char *path, uint32_t magic, const char *what,
                        uint32_t *dims, int ndims, char *err, size_t errlen)
{
    unsigned char hdr[16];
    size_t hlen = 4 + 4 * (size_t)ndims, got;
    struct stat st;
    uint32_t found;
    int fd, rc;

    f->path = path;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return ps__fail(-e, err, errlen, "%s: cannot open: %s" PS__HINT, path, strerror(e));
    }
    if (fstat(fd, &st) < 0) {
        int e = errno;
        close(fd);
        return ps__fail(-e, err, errlen, "%s: cannot stat: %s", path, strerror(e));
    }
    f->gz = gzdopen(fd, "rb");
    if (!f->gz) {
        close(fd);
        return ps__fail(-ENOMEM, err, errlen, "%s: out of memory opening the file", path);
    }
    rc = ps__read(f, hdr, hlen, &got, err, errlen);
    if (rc)
        return rc;
    if (got == 0)
        return ps__fail(-PS_EFORMAT, err, errlen, "%s: empty file" PS__HINT, path);
    if (got < hlen)
        return ps__fail(-PS_EFORMAT, err, errlen,
                        "%s: truncated header: %zu bytes, expected %zu" PS__HINT, path, got, hlen);
    found = ps__be32(hdr);
    if (found != magic)
        return ps__fail(-PS_EFORMAT, err, errlen,
                        "%s: wrong magic 0x%08x, expected 0x%08x (%s)" PS__HINT, path, found, magic,
                        what);
    for (int i = 0; i < ndims; i++)
        dims[i] = ps__be32(hdr + 4 + 4 * i);
    /* gzdirect() is only meaningful after the first read, hence here. */
    f->plain_size = gzdirect(f->gz) && S_ISREG(st.st_mode) ? (long long)st.st_size : -1;
    return 0;
}

static void ps__idx_close(ps__idx *f)
{
    if (f->gz)
        gzclose(f->gz);
    f->gz = NULL;
}

/* The message for a body of have bytes where the header promised len: short
 * means truncated, longer means something else follows the data. */
static int ps__size_mismatch(const ps__idx *f, size_t len, size_t have, char *err, size_t errlen)
{
    if (have < len)
        return ps__fail(
            -PS_EFORMAT, err, errlen,
            "%s: truncated: the header promises %zu data bytes but only %zu follow" PS__HINT,
            f->path, len, have);
    return ps__fail(-PS_EFORMAT, err, errlen,
                    "%s: the file continues past the %zu data bytes its header promises" PS__HINT,
                    f->path, len);
}

/* Checks a plain file's size against a header of hlen and a body of len
 * before anything is allocated for the body. */
static int ps__idx_check_size(const ps__idx *f, size_t hlen, size_t len, char *err, size_t errlen)
{
    size_t have;

    if (f->plain_size < 0 || (size_t)f->plain_size == hlen + len)
        return 0;
    have = (size_t)f->plain_size > hlen ? (size_t)f->plain_size - hlen : 0;
    return ps__size_mismatch(f, len, have, err, errlen);
}

/* Reads exactly len body bytes and insists the file ends right after them. */
static int ps__idx_read_body(ps__idx *f, void *buf, size_t len, char *err, size_t errlen)
{
    unsigned char extra;
    size_t got, more;
    int rc;

    rc = ps__read(f, buf, len, &got, err, errlen);
    if (rc)
        return rc;
    if (got < len)
        return ps__size_mismatch(f, len, got, err, errlen);
    rc = ps__read(f, &extra, 1, &more, err, errlen);
    if (rc)
        return rc;
    if (more)
        return ps__size_mismatch(f, len, len + more, err, errlen);
    return 0;
}

int ps_dataset_load(ps_dataset *ds, const char *images_path, const char *labels_path, char *err,
                    size_t errlen)
{
    ps__idx img = {0}, lab = {0};
    uint32_t idims[3] = {0}, ldims[1] = {0};
    size_t n, npix;
    int rc;

    memset(ds, 0, sizeof(*ds));
    if (errlen)
        err[0] = '\0';
    rc = ps__idx_open(&lab, labels_path, PS__LABELS_MAGIC, "an IDX label file", ldims, 1, err,
                      errlen);
    if (rc)
        goto fail;
    rc = ps__idx_open(&img, images_path, PS__IMAGES_MAGIC, "an IDX image file", idims, 3, err,
                      errlen);
    if (rc)
        goto fail;
    rc = -PS_EFORMAT;
    if (ldims[0] < 1 || ldims[0] > PS__MAX_SAMPLES) {
        ps__fail(rc, err, errlen, "%s: %u labels is outside 1..%u" PS__HINT, labels_path, ldims[0],
                 PS__MAX_SAMPLES);
        goto fail;
    }
    if (idims[0] != ldims[0]) {
        ps__fail(rc, err, errlen, "%s holds %u images but %s holds %u labels" PS__HINT, images_path,
                 idims[0], labels_path, ldims[0]);
        goto fail;
    }
    /* Each factor is checked first so the product cannot wrap. */
    if (idims[1] < 1 || idims[2] < 1 || idims[1] > PS__MAX_FEATURES ||
        idims[2] > PS__MAX_FEATURES || idims[1] * idims[2] > PS__MAX_FEATURES) {
        ps__fail(rc, err, errlen, "%s: image shape %ux%u is outside 1..%u pixels" PS__HINT,
                 images_path, idims[1], idims[2], PS__MAX_FEATURES);
        goto fail;
    }
    n = ldims[0];
    npix = n * idims[1] * idims[2];
    rc = ps__idx_check_size(&lab, 8, n, err, errlen);
    if (rc)
        goto fail;
    rc = ps__idx_check_size(&img, 16, npix, err, errlen);
    if (rc)
        goto fail;

    ds->labels = malloc(n);
    ds->pixels = malloc(npix);
    if (!ds->labels || !ds->pixels) {
        rc = ps__fail(-ENOMEM, err, errlen, "%s: out of memory for %zu bytes of pixels",
                      images_path, npix);
        goto fail;
    }
    rc = ps__idx_read_body(&lab, ds->labels, n, err, errlen);
    if (rc)
        goto fail;
    for (size_t i = 0; i < n; i++)
        if (ds->labels[i] >= PS__CLASSES) {
            rc = ps__fail(-PS_EFORMAT, err, errlen,
                          "%s: label %u of sample %zu is not a class 0..%d" PS__HINT, labels_path,
                          (unsigned)ds->labels[i], i, PS__CLASSES - 1);
            goto fail;
        }
    rc = ps__idx_read_body(&img, ds->pixels, npix, err, errlen);
    if (rc)
        goto fail;

    ps__idx_close(&img);
    ps__idx_close(&lab);
    ds->n = (int)n;
    ds->rows = (int)idims[1];
    ds->cols = (int)idims[2];
    return 0;

fail:
    ps__idx_close(&img);
    ps__idx_close(&lab);
    ps_dataset_free(ds);
    return rc;
}

/* Writes dir/split-kind.gz into out, or the plain name when only that exists;
 * when neither does, the .gz name stays so the error names the preferred file. */
static int ps__pick(char *out, size_t len, const char *dir, const char *split, const char *kind)
{
    int n = snprintf(out, len, "%s/%s-%s.gz", dir, split, kind);

    if (n < 0 || (size_t)n >= len)
        return -ENAMETOOLONG;
    if (access(out, F_OK) != 0) {
        out[n - 3] = '\0';
        if (access(out, F_OK) != 0)
            out[n - 3] = '.';
    }
    return 0;
}

int ps_dataset_load_dir(ps_dataset *ds, const char *dir, int train, char *err, size_t errlen)
{
    const char *split = train ? "train" : "t10k";
    char images[PATH_MAX], labels[PATH_MAX];

    if (ps__pick(images, sizeof(images), dir, split, "images-idx3-ubyte") ||
        ps__pick(labels, sizeof(labels), dir, split, "labels-idx1-ubyte")) {
        memset(ds, 0, sizeof(*ds));
        return ps__fail(-ENAMETOOLONG, err, errlen, "%s: directory path too long", dir);
    }
    return ps_dataset_load(ds, images, labels, err, errlen);
}

void ps_dataset_free(ps_dataset *ds)
{
    free(ds->pixels);
    free(ds->labels);
    memset(ds, 0, sizeof(*ds));
}

/* SplitMix64: tiny, statistically sound for shuffling, and trivially seeded
 * from any 64-bit value. */
static uint64_t ps__splitmix64(uint64_t *state)
{
    uint64_t z = (*state += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* Uniform integer in [0, bound) by Lemire's multiply-and-reject, which has no
 * modulo bias. */
static uint32_t ps__below(uint64_t *state, uint32_t bound)
{
    uint64_t m = (ps__splitmix64(state) >> 32) * bound;

    if ((uint32_t)m < bound) {
        uint32_t threshold = (0u - bound) % bound;
        while ((uint32_t)m < threshold)
            m = (ps__splitmix64(state) >> 32) * bound;
    }
    return (uint32_t)(m >> 32);
}

void ps_dataset_epoch_order(uint64_t seed, int epoch, int n, uint32_t *perm)
{
    /* The epoch goes through the mixer before meeting the seed so that
     * neighbouring epochs start from unrelated generator states. */
    uint64_t e = (uint64_t)(uint32_t)epoch;
    uint64_t state = seed ^ ps__splitmix64(&e);

    for (int i = 0; i < n; i++)
        perm[i] = (uint32_t)i;
    for (int i = n - 1; i > 0; i--) {
        uint32_t j = ps__below(&state, (uint32_t)i + 1);
        uint32_t t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
}

void ps_dataset_gather(const ps_dataset *ds, const uint32_t *idx, int B, float *x, uint8_t *y)
{
    size_t features = (size_t)ds->rows * (size_t)ds->cols;
    float lut[256];

    /* A table makes every pixel value normalise to the bit-identical float
     * the documented formula gives, at the cost of one load. */
    for (int p = 0; p < 256; p++)
        lut[p] = ((float)p / 255.0f - PS__PIXEL_MEAN) / PS__PIXEL_STD;
    for (int b = 0; b < B; b++) {
        const uint8_t *src = ds->pixels + (size_t)idx[b] * features;
        float *dst = x + (size_t)b * features;
        for (size_t k = 0; k < features; k++)
            dst[k] = lut[src[k]];
        y[b] = ds->labels[idx[b]];
    }
}
