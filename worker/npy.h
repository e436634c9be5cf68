/* The header of a NumPy .npy file (format versions 1 to 3): what the data
 * that follows it is, so the dataset can read arrays saved with np.save.
 *
 * A file is the magic "\x93NUMPY", a major and minor version byte, the header
 * length (u16 LE in version 1, u32 LE in 2 and 3), and the header: a Python
 * dict literal such as {'descr': '<f4', 'fortran_order': False, 'shape': (60000,
 * 28, 28), } padded with spaces and a newline. The data follows, row-major
 * unless fortran_order is True. Only what np.save writes for plain numeric
 * arrays is accepted; anything else is refused with the reason. */
#ifndef PS_NPY_H
#define PS_NPY_H

#include <stddef.h>
#include <stdint.h>

#define PS_NPY_PREAMBLE 12 /* enough bytes to know the header's length */
#define PS_NPY_MAX_DIMS 8

typedef struct {
    char kind;      /* 'u' unsigned integer, 'i' signed integer, 'f' floating point */
    int elem_size;  /* bytes per element: 1, 2, 4 or 8 */
    int big_endian; /* '>' in the descr (never for 1-byte types) */
    char descr[16]; /* as written, for messages */
    int fortran_order;
    int ndim;
    uint64_t shape[PS_NPY_MAX_DIMS];
    size_t count;    /* product of shape (1 for a 0-d array) */
    size_t data_off; /* bytes before the data: preamble and header */
} ps_npy_header;

/* From the first PS_NPY_PREAMBLE bytes of a file (fewer if it is shorter),
 * the total length of preamble plus header. Returns 0 and *total, or
 * -PS_EFORMAT with a reason in why (not a .npy file, unknown version, a header
 * over 1 MiB). */
int ps_npy_header_size(const uint8_t *pre, size_t len, size_t *total, char *why, size_t whylen);

/* Parses the whole preamble and header (the *total bytes above) into h.
 * Returns 0, or -PS_EFORMAT with a reason in why: a malformed dict, a missing
 * or unknown key, a dtype that is not a plain integer or float of 1, 2, 4 or 8
 * bytes (structured, object, string, complex, bool, float16), more than
 * PS_NPY_MAX_DIMS dimensions, or a shape whose element count overflows. */
int ps_npy_parse_header(const uint8_t *buf, size_t len, ps_npy_header *h, char *why, size_t whylen);

#endif
