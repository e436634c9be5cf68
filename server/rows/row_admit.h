/* Admission of new embedding rows: how many times has this ID been pushed?
 *
 * A table may ask that a row be stored only once its ID has been pushed N
 * times, so that IDs seen once or twice (most of a Zipf tail) never take
 * memory. Exact counts for every ID ever pushed would take the memory the
 * rule is meant to save, so they are estimated by a count-min sketch
 * (Cormode and Muthukrishnan 2005) of fixed size: depth rows of width
 * 16-bit counters, each row indexed by its own hash of the ID; an ID's
 * estimate is the least of its depth counters, which never undercounts and
 * overcounts only by collisions (by at most e * pushes / width with
 * probability 1 - e^-depth for the plain sketch; less here, as a push only
 * raises the counters that hold the minimum, the "conservative update").
 * Counters saturate at 65535, so thresholds go up to 65535.
 *
 * The sketch is part of a table's durable state: ps_row_admit_save writes it
 * as a little-endian blob (the checkpoint stores it), ps_row_admit_load
 * checks one completely before it is used, and ps_row_admit_merge adds one
 * sketch into another of the same shape, which is how the sketches of S
 * servers become those of S' servers on a restore (every ID was counted on
 * one server only, so the sum over servers counts it fully; each new server
 * may take the sum of all). */
#ifndef PS_ROW_ADMIT_H
#define PS_ROW_ADMIT_H

#include <stddef.h>
#include <stdint.h>

#define PS_ROW_ADMIT_MAX_DEPTH 8
#define PS_ROW_ADMIT_MAX_WIDTH (1u << 28)

typedef struct ps_row_admit ps_row_admit;

/* A sketch for threshold (1 .. 65535) of depth (1 .. PS_ROW_ADMIT_MAX_DEPTH)
 * rows of width (a power of two, 64 .. PS_ROW_ADMIT_MAX_WIDTH) counters,
 * all zero; seed picks the rows' hashes (the same seed on every server of a
 * table, so their sketches can be merged). Memory: 2 * depth * width bytes.
 * Returns 0, -EINVAL for a parameter out of range, or -ENOMEM. */
int ps_row_admit_create(ps_row_admit **out, uint32_t threshold, uint32_t depth, uint32_t width,
                        uint64_t seed);
void ps_row_admit_free(ps_row_admit *a);

/* Counts one push of id and returns 1 when id has now been pushed at least
 * threshold times (by the estimate), else 0. */
int ps_row_admit_push(ps_row_admit *a, uint64_t id);

/* The estimated number of pushes of id (at least the true number, unless
 * saturated at 65535). */
uint32_t ps_row_admit_estimate(const ps_row_admit *a, uint64_t id);

uint32_t ps_row_admit_threshold(const ps_row_admit *a);
/* Bytes allocated. */
size_t ps_row_admit_bytes(const ps_row_admit *a);

/* The saved form's exact size, and the sketch written into buf[0..len):
 * "PSAD", version, threshold, depth, width, seed, then the counters, all
 * little-endian. Returns the bytes written or -ENOSPC when len is short. */
size_t ps_row_admit_saved_size(const ps_row_admit *a);
long ps_row_admit_save(const ps_row_admit *a, void *buf, size_t len);

/* A sketch from a saved form of exactly len bytes, every field checked (the
 * magic, the version, parameters in range, the length) before anything is
 * allocated. Returns 0, -PS_EFORMAT with the reason in why, or -ENOMEM. */
int ps_row_admit_load(ps_row_admit **out, const void *buf, size_t len, char *why, size_t why_len);

/* dst += src, counter by counter (saturating). Returns 0, or -PS_EMISMATCH
 * when their depth, width or seed differ (dst unchanged). */
int ps_row_admit_merge(ps_row_admit *dst, const ps_row_admit *src);

#endif
