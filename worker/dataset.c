/* Loader for IDX and .npy data files and the per-epoch sample order.
 *
 * Files are read through zlib, which passes plain files through unchanged, so
 * one code path serves both encodings. A file's header, IDX or .npy (told
 * apart by its first bytes), becomes one array description (ps_npy_header),
 * so checks and reading do not care which format it was. Headers are
 * distrusted: dimensions are capped, a plain file's size is checked against
 * its header before the big buffers are allocated, and a compressed one is
 * checked by short reads. The
 * epoch order is a pure function of (seed, epoch) so every worker derives the
 * same shuffle without talking to the others. */
#include "dataset.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include "npy.h"
#include "ps_error.h"

#if !defined(__BYTE_ORDER__) || __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "the data path assumes a little-endian host"
#endif

#define PS__MAX_SAMPLES  10000000u
#define PS__MAX_FEATURES (1u << 20)
#define PS__IDX_MAX_DIMS 4
#define PS__PIXEL_MEAN   0.2860f
#define PS__PIXEL_STD    0.3530f
#define PS__HINT         "; check the file or --data"
/* gzread takes an unsigned count; large bodies are read in pieces this big. */
#define PS__READ_CHUNK (1u << 30)

/* One data file being read. */
typedef struct {
    const char *path;
    gzFile gz;
    /* Size on disk when the content is not compressed and the file is
     * regular, so it can be checked before allocating; -1 otherwise. */
    long long plain_size;
} ps__idx;

static int ps__dataset_fail(int code, char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static int ps__dataset_fail(int code, char *err, size_t errlen, const char *fmt, ...)
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
static int ps__dataset_read(ps__idx *f, void *buf, size_t len, size_t *got, char *err,
                            size_t errlen)
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
                return ps__dataset_fail(-e, err, errlen, "%s: read failed: %s", f->path,
                                        strerror(e));
            return ps__dataset_fail(-PS_EFORMAT, err, errlen, "%s: corrupt gzip data (%s)" PS__HINT,
                                    f->path, msg);
        }
        if (r == 0)
            break;
        *got += (size_t)r;
    }
    return 0;
}

/* IDX type bytes → the .npy descriptor of the same data (IDX is big-endian). */
static int ps__idx_type(uint8_t type, ps_npy_header *h)
{
    static const struct {
        uint8_t type;
        char kind;
        int size;
        const char *descr;
    } types[] = {
        {0x08, 'u', 1, "uint8"}, {0x09, 'i', 1, "int8"},    {0x0B, 'i', 2, "int16"},
        {0x0C, 'i', 4, "int32"}, {0x0D, 'f', 4, "float32"}, {0x0E, 'f', 8, "float64"},
    };

    for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++)
        if (types[i].type == type) {
            h->kind = types[i].kind;
            h->elem_size = types[i].size;
            h->big_endian = types[i].size > 1;
            snprintf(h->descr, sizeof(h->descr), "%s", types[i].descr);
            return 0;
        }
    return -1;
}

/* Reads the rest of an IDX header after its 4-byte magic m. */
static int ps__idx_header(ps__idx *f, const unsigned char *m, ps_npy_header *h, char *err,
                          size_t errlen)
{
    unsigned char dims[4 * PS__IDX_MAX_DIMS];
    size_t got, want = 4 * (size_t)m[3];
    int rc;

    memset(h, 0, sizeof(*h));
    if (m[0] != 0 || m[1] != 0 || ps__idx_type(m[2], h) != 0 || m[3] < 1 || m[3] > PS__IDX_MAX_DIMS)
        return ps__dataset_fail(
            -PS_EFORMAT, err, errlen,
            "%s: wrong magic 0x%08x: neither an IDX file (0x0000TTDD with a known "
            "type TT and 1..%d dimensions DD) nor a .npy file" PS__HINT,
            f->path, ps__be32(m), PS__IDX_MAX_DIMS);
    rc = ps__dataset_read(f, dims, want, &got, err, errlen);
    if (rc)
        return rc;
    if (got < want)
        return ps__dataset_fail(-PS_EFORMAT, err, errlen,
                                "%s: truncated header: %zu bytes, expected %zu" PS__HINT, f->path,
                                4 + got, 4 + want);
    h->ndim = m[3];
    h->count = 1;
    for (int i = 0; i < h->ndim; i++) {
        h->shape[i] = ps__be32(dims + 4 * i);
        /* Saturate rather than wrap; the caller's limits refuse it. */
        if (h->shape[i] && h->count > SIZE_MAX / h->shape[i])
            h->count = SIZE_MAX;
        else
            h->count *= (size_t)h->shape[i];
    }
    h->data_off = 4 + want;
    return 0;
}

/* Reads the rest of a .npy preamble and header after its first 4 bytes. */
static int ps__npy_header(ps__idx *f, const unsigned char *m, ps_npy_header *h, char *err,
                          size_t errlen)
{
    unsigned char pre[PS_NPY_PREAMBLE], *buf = NULL;
    size_t got, total;
    char why[160];
    int rc;

    memcpy(pre, m, 4);
    rc = ps__dataset_read(f, pre + 4, sizeof(pre) - 4, &got, err, errlen);
    if (rc)
        return rc;
    if (ps_npy_header_size(pre, 4 + got, &total, why, sizeof(why)) != 0)
        return ps__dataset_fail(-PS_EFORMAT, err, errlen, "%s: %s" PS__HINT, f->path, why);
    buf = malloc(total);
    if (!buf)
        return ps__dataset_fail(-ENOMEM, err, errlen, "%s: out of memory", f->path);
    memcpy(buf, pre, 4 + got);
    if (total > 4 + got) {
        size_t more;
        rc = ps__dataset_read(f, buf + 4 + got, total - 4 - got, &more, err, errlen);
        got += rc ? 0 : more;
    }
    if (rc == 0 && ps_npy_parse_header(buf, 4 + got, h, why, sizeof(why)) != 0)
        rc = ps__dataset_fail(-PS_EFORMAT, err, errlen, "%s: %s" PS__HINT, f->path, why);
    free(buf);
    return rc;
}

/* Opens path and reads its header, IDX or .npy, into h. */
static int ps__open(ps__idx *f, const char *path, ps_npy_header *h, char *err, size_t errlen)
{
    unsigned char m[4];
    size_t got;
    struct stat st;
    int fd, rc;

    f->path = path;
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        return ps__dataset_fail(-e, err, errlen, "%s: cannot open: %s" PS__HINT, path, strerror(e));
    }
    if (fstat(fd, &st) < 0) {
        int e = errno;
        close(fd);
        return ps__dataset_fail(-e, err, errlen, "%s: cannot stat: %s", path, strerror(e));
    }
    f->gz = gzdopen(fd, "rb");
    if (!f->gz) {
        close(fd);
        return ps__dataset_fail(-ENOMEM, err, errlen, "%s: out of memory opening the file", path);
    }
    rc = ps__dataset_read(f, m, sizeof(m), &got, err, errlen);
    if (rc)
        return rc;
    if (got == 0)
        return ps__dataset_fail(-PS_EFORMAT, err, errlen, "%s: empty file" PS__HINT, path);
    if (got < sizeof(m))
        return ps__dataset_fail(-PS_EFORMAT, err, errlen,
                                "%s: truncated header: %zu bytes, expected at least 4" PS__HINT,
                                path, got);
    rc = m[0] == 0x93 ? ps__npy_header(f, m, h, err, errlen) : ps__idx_header(f, m, h, err, errlen);
    if (rc)
        return rc;
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
        return ps__dataset_fail(
            -PS_EFORMAT, err, errlen,
            "%s: truncated: the header promises %zu data bytes but only %zu follow" PS__HINT,
            f->path, len, have);
    return ps__dataset_fail(
        -PS_EFORMAT, err, errlen,
        "%s: the file continues past the %zu data bytes its header promises" PS__HINT, f->path,
        len);
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

    rc = ps__dataset_read(f, buf, len, &got, err, errlen);
    if (rc)
        return rc;
    if (got < len)
        return ps__size_mismatch(f, len, got, err, errlen);
    rc = ps__dataset_read(f, &extra, 1, &more, err, errlen);
    if (rc)
        return rc;
    if (more)
        return ps__size_mismatch(f, len, len + more, err, errlen);
    return 0;
}

/* The sample shape from a samples array's dimensions after the first. */
static int ps__sample_shape(const ps__idx *f, const ps_npy_header *h, ps_dataset *ds, char *err,
                            size_t errlen)
{
    const uint64_t *d = h->shape + 1;
    int extra = h->ndim - 1;
    uint64_t features = 1;

    if (h->ndim < 1 || extra > 3)
        return ps__dataset_fail(
            -PS_EFORMAT, err, errlen,
            "%s: samples need 1 to 4 dimensions (samples first), not %d" PS__HINT, f->path,
            h->ndim);
    for (int i = 0; i < extra; i++) {
        if (d[i] < 1 || d[i] > PS__MAX_FEATURES || features * d[i] > PS__MAX_FEATURES)
            return ps__dataset_fail(-PS_EFORMAT, err, errlen,
                                    "%s: a sample of this shape is outside 1..%u values" PS__HINT,
                                    f->path, PS__MAX_FEATURES);
        features *= d[i];
    }
    ds->features = (int)features;
    ds->shape.ndim = extra >= 2 ? 3 : 1;
    if (extra <= 1) {
        ds->shape.d[0] = (int)features;
    } else {
        ds->shape.d[0] = extra == 3 ? (int)d[0] : 1;
        ds->shape.d[1] = (int)d[extra - 2];
        ds->shape.d[2] = (int)d[extra - 1];
    }
    return 0;
}

/* The sample count of an array: its first dimension, within limits. */
static int ps__count(const ps__idx *f, const ps_npy_header *h, const char *what, char *err,
                     size_t errlen)
{
    if (h->ndim < 1 || h->shape[0] < 1 || h->shape[0] > PS__MAX_SAMPLES)
        return ps__dataset_fail(-PS_EFORMAT, err, errlen, "%s: %s count is outside 1..%u" PS__HINT,
                                f->path, what, PS__MAX_SAMPLES);
    if (h->fortran_order && h->ndim > 1)
        return ps__dataset_fail(
            -PS_EFORMAT, err, errlen,
            "%s: Fortran-ordered array; save np.ascontiguousarray(a) instead" PS__HINT, f->path);
    return 0;
}

static void ps__swap(uint8_t *p, size_t n, int size)
{
    for (size_t i = 0; i < n; i++, p += size)
        for (int a = 0, b = size - 1; a < b; a++, b--) {
            uint8_t t = p[a];
            p[a] = p[b];
            p[b] = t;
        }
}

/* Reads the samples' body into ds. */
static int ps__load_samples(ps__idx *f, const ps_npy_header *h, ps_dataset *ds, char *err,
                            size_t errlen)
{
    size_t n = h->shape[0], count = n * (size_t)ds->features, bytes;
    int rc;

    ds->is_float = h->kind == 'f' && h->elem_size == 4;
    if (!ds->is_float && !(h->kind == 'u' && h->elem_size == 1))
        return ps__dataset_fail(-PS_EFORMAT, err, errlen,
                                "%s: samples are %s; they must be uint8 or float32" PS__HINT,
                                f->path, h->descr);
    bytes = count * (size_t)h->elem_size;
    rc = ps__idx_check_size(f, h->data_off, bytes, err, errlen);
    if (rc)
        return rc;
    if (ds->is_float)
        ds->values = malloc(bytes);
    else
        ds->pixels = malloc(bytes);
    if (!ds->values && !ds->pixels)
        return ps__dataset_fail(-ENOMEM, err, errlen, "%s: out of memory for %zu bytes of samples",
                                f->path, bytes);
    rc = ps__idx_read_body(f, ds->is_float ? (void *)ds->values : ds->pixels, bytes, err, errlen);
    if (rc || !ds->is_float)
        return rc;
    if (h->big_endian)
        ps__swap((uint8_t *)ds->values, count, 4);
    for (size_t i = 0; i < count; i++)
        if (!isfinite(ds->values[i]))
            return ps__dataset_fail(-PS_EFORMAT, err, errlen,
                                    "%s: value %zu of sample %zu is not finite" PS__HINT, f->path,
                                    i % (size_t)ds->features, i / (size_t)ds->features);
    return 0;
}

/* Element i of an integer array of the given layout, widened. Unsigned
 * 64-bit values beyond INT64_MAX come back negative, and are refused as such. */
static int64_t ps__int_at(const uint8_t *p, const ps_npy_header *h)
{
    uint64_t u = 0;

    for (int b = 0; b < h->elem_size; b++)
        u |= (uint64_t)p[h->big_endian ? h->elem_size - 1 - b : b] << (8 * b);
    if (h->kind == 'i' && h->elem_size < 8 && (u >> (8 * h->elem_size - 1)) & 1)
        u |= ~0ULL << (8 * h->elem_size);
    return (int64_t)u;
}

/* Reads the labels' body, converts them to uint8 and sets ds->classes. */
static int ps__load_labels(ps__idx *f, const ps_npy_header *h, ps_dataset *ds, char *err,
                           size_t errlen)
{
    size_t n = h->shape[0], bytes = n * (size_t)h->elem_size;
    uint8_t *raw;
    int rc, top = -1;

    if (h->kind == 'f')
        return ps__dataset_fail(-PS_EFORMAT, err, errlen,
                                "%s: labels are %s; they must be integers" PS__HINT, f->path,
                                h->descr);
    if (h->ndim > 2 || (h->ndim == 2 && h->shape[1] != 1))
        return ps__dataset_fail(
            -PS_EFORMAT, err, errlen,
            "%s: labels must have shape (n,) or (n, 1), one per sample" PS__HINT, f->path);
    rc = ps__idx_check_size(f, h->data_off, bytes, err, errlen);
    if (rc)
        return rc;
    ds->labels = malloc(n);
    raw = malloc(bytes);
    if (!raw || !ds->labels) {
        free(raw);
        return ps__dataset_fail(-ENOMEM, err, errlen, "%s: out of memory for %zu labels", f->path,
                                n);
    }
    rc = ps__idx_read_body(f, raw, bytes, err, errlen);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        int64_t v = ps__int_at(raw + i * (size_t)h->elem_size, h);

        if (v < 0 || v >= PS_DATASET_MAX_CLASSES)
            rc = ps__dataset_fail(-PS_EFORMAT, err, errlen,
                                  "%s: label %lld of sample %zu is not a class 0..%d" PS__HINT,
                                  f->path, (long long)v, i, PS_DATASET_MAX_CLASSES - 1);
        else
            ds->labels[i] = (uint8_t)v;
        top = v > top ? (int)v : top;
    }
    free(raw);
    ds->classes = top + 1;
    return rc;
}

int ps_dataset_load(ps_dataset *ds, const char *samples_path, const char *labels_path, char *err,
                    size_t errlen)
{
    ps__idx xf = {0}, yf = {0};
    ps_npy_header xh, yh;
    int rc;

    memset(ds, 0, sizeof(*ds));
    if (errlen)
        err[0] = '\0';
    rc = ps__open(&yf, labels_path, &yh, err, errlen);
    if (rc == 0)
        rc = ps__count(&yf, &yh, "label", err, errlen);
    if (rc == 0)
        rc = ps__open(&xf, samples_path, &xh, err, errlen);
    if (rc == 0)
        rc = ps__count(&xf, &xh, "sample", err, errlen);
    if (rc)
        goto fail;
    if (xh.shape[0] != yh.shape[0]) {
        rc = ps__dataset_fail(-PS_EFORMAT, err, errlen,
                              "%s holds %llu samples but %s holds %llu labels" PS__HINT,
                              samples_path, (unsigned long long)xh.shape[0], labels_path,
                              (unsigned long long)yh.shape[0]);
        goto fail;
    }
    rc = ps__sample_shape(&xf, &xh, ds, err, errlen);
    if (rc == 0)
        rc = ps__load_labels(&yf, &yh, ds, err, errlen);
    if (rc == 0)
        rc = ps__load_samples(&xf, &xh, ds, err, errlen);
    if (rc)
        goto fail;
    ps__idx_close(&xf);
    ps__idx_close(&yf);
    ds->n = (int)xh.shape[0];
    return 0;

fail:
    ps__idx_close(&xf);
    ps__idx_close(&yf);
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

/* With dir/classes.txt, the class count is its number of non-empty lines
 * (class names), which the labels must stay below; without one, nothing
 * changes. */
static int ps__class_names(ps_dataset *ds, const char *dir, char *err, size_t errlen)
{
    char path[PATH_MAX], line[512];
    int names = 0, blank = 1;
    FILE *f;

    if (snprintf(path, sizeof(path), "%s/classes.txt", dir) >= (int)sizeof(path))
        return ps__dataset_fail(-ENAMETOOLONG, err, errlen, "%s: directory path too long", dir);
    f = fopen(path, "r");
    if (!f)
        return errno == ENOENT ? 0
                               : ps__dataset_fail(-errno, err, errlen, "%s: cannot open: %s", path,
                                                  strerror(errno));
    /* A line longer than the buffer arrives in pieces; only its end counts. */
    while (fgets(line, sizeof(line), f)) {
        for (const char *c = line; *c; c++)
            if (*c != ' ' && *c != '\t' && *c != '\r' && *c != '\n')
                blank = 0;
        if (strchr(line, '\n') || feof(f)) {
            names += !blank;
            blank = 1;
        }
    }
    fclose(f);
    if (names < 1 || names > PS_DATASET_MAX_CLASSES)
        return ps__dataset_fail(-PS_EFORMAT, err, errlen, "%s: %d class names; 1..%d are supported",
                                path, names, PS_DATASET_MAX_CLASSES);
    ds->named_classes = 1;
    if (ds->classes > names)
        return ps__dataset_fail(-PS_EFORMAT, err, errlen,
                                "%s names %d classes but the labels go up to %d" PS__HINT, path,
                                names, ds->classes - 1);
    ds->classes = names;
    return 0;
}

int ps_dataset_load_dir(ps_dataset *ds, const char *dir, int train, char *err, size_t errlen)
{
    const char *split = train ? "train" : "t10k", *npy = train ? "train" : "test";
    char samples[PATH_MAX], labels[PATH_MAX], npx[PATH_MAX], npl[PATH_MAX];
    struct stat st;
    int rc;

    memset(ds, 0, sizeof(*ds));
    /* A folder that is not there is the mistake, not its first file. */
    if (stat(dir, &st) < 0) {
        int e = errno;
        return ps__dataset_fail(-e, err, errlen, "--data %s: %s", dir,
                                e == ENOENT ? "no such folder" : strerror(e));
    }
    if (!S_ISDIR(st.st_mode))
        return ps__dataset_fail(-ENOTDIR, err, errlen, "--data %s: not a folder", dir);
    if (ps__pick(samples, sizeof(samples), dir, split, "images-idx3-ubyte") ||
        ps__pick(labels, sizeof(labels), dir, split, "labels-idx1-ubyte") ||
        snprintf(npx, sizeof(npx), "%s/%s_x.npy", dir, npy) >= (int)sizeof(npx) ||
        snprintf(npl, sizeof(npl), "%s/%s_y.npy", dir, npy) >= (int)sizeof(npl))
        return ps__dataset_fail(-ENAMETOOLONG, err, errlen, "%s: directory path too long", dir);
    /* IDX files first, as always; the NumPy pair when there is no IDX one. */
    if (access(samples, F_OK) != 0 && access(npx, F_OK) == 0)
        rc = ps_dataset_load(ds, npx, npl, err, errlen);
    else
        rc = ps_dataset_load(ds, samples, labels, err, errlen);
    if (rc == 0)
        rc = ps__class_names(ds, dir, err, errlen);
    if (rc)
        ps_dataset_free(ds);
    return rc;
}

int ps_dataset_match(ps_dataset *train, ps_dataset *test, char *err, size_t errlen)
{
    char a[48], b[48];
    int classes = train->classes > test->classes ? train->classes : test->classes;

    if (memcmp(&train->shape, &test->shape, sizeof(train->shape)) != 0 ||
        train->is_float != test->is_float)
        return ps__dataset_fail(
            -PS_EFORMAT, err, errlen,
            "the training samples are %s %s but the test samples are %s %s" PS__HINT,
            ps_act_shape_str(&train->shape, a, sizeof(a)), train->is_float ? "float32" : "uint8",
            ps_act_shape_str(&test->shape, b, sizeof(b)), test->is_float ? "float32" : "uint8");
    train->classes = test->classes = classes;
    return 0;
}

void ps_dataset_free(ps_dataset *ds)
{
    free(ds->pixels);
    free(ds->values);
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
    size_t features = (size_t)ds->features;
    float lut[256];

    if (ds->is_float) {
        for (int b = 0; b < B; b++) {
            memcpy(x + (size_t)b * features, ds->values + (size_t)idx[b] * features,
                   features * sizeof(float));
            y[b] = ds->labels[idx[b]];
        }
        return;
    }

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
