/* The value of an embedding row that does not exist yet: a pure function of
 * (seed, table id, row ID, element).
 *
 * A table declares one initializer; a server answers a pull of a row it
 * does not store with these values, and stores them as the row's starting
 * point when its first gradient arrives (server/rows/row_store). Because the
 * values depend on nothing else (not on which server holds the row, when it
 * is first touched, or in which order rows are asked for), runs repeat and
 * a restore onto a different number of servers reads exactly the rows the
 * old servers would have made.
 *
 * The values are bit-identical on every process and machine: they are
 * computed with IEEE double arithmetic only (+ - * / and sqrt, which are
 * exactly rounded, no fused multiply-adds in ISO C mode) and a logarithm
 * written here from those operations, never libm's transcendental
 * functions, whose last bit may differ between C libraries.
 *
 * Element e of row id draws 64-bit words from a SplitMix64 stream keyed by
 * (seed, table, id): word c is mix64(key + c * 0x9e3779b97f4a7c15) with
 * key = mix64(mix64(mix64(seed) ^ table) ^ id), and c = e + (attempt << 32)
 * (mix64: common/mix64.h). A uniform value in [0, 1) is the word's top 53
 * bits times 2^-53.
 *
 *   zeros             0.0f.
 *   uniform(lo, hi)   (float)(lo + (hi - lo) * u); in [lo, hi] after
 *                     rounding to float.
 *   normal(mean, std) mean + std * z, z the standard normal quantile of
 *   truncated to      u' = u + 2^-54 (so never 0 or 1), by Acklam's
 *   [lo, hi]          rational approximation (relative error below
 *                     1.2e-9; the float result is nearly always the exact
 *                     quantile's rounding). A draw outside [lo, hi] (as a
 *                     float) is drawn again from the next attempt's word:
 *                     the truncated normal by rejection, as
 *                     TensorFlow's truncated_normal does. The bounds must
 *                     hold the mean and be at least one std apart, so a
 *                     draw is accepted with probability at least 0.34;
 *                     after 128 refused attempts (probability below
 *                     1e-23) the element is the mean.
 *
 * ps_row_init_value_ref is the plain reference the tests hold the fast
 * path against: the same words, the quantile found by bisection on libm's
 * erfc instead of the rational approximation. */
#ifndef PS_ROW_INIT_H
#define PS_ROW_INIT_H

#include <stddef.h>
#include <stdint.h>

typedef enum { PS_ROW_INIT_ZEROS, PS_ROW_INIT_UNIFORM, PS_ROW_INIT_NORMAL } ps_row_init_kind;

/* A plain value, every field the caller's. */
typedef struct {
    ps_row_init_kind kind;
    uint64_t seed;
    double mean, std; /* normal */
    /* uniform: the range; normal: the truncation bounds (-INFINITY and
     * INFINITY for none). */
    double lo, hi;
} ps_row_init;

/* Parses "zeros", "uniform", "normal". Returns 0 or -EINVAL. */
int ps_row_init_parse(const char *name, ps_row_init_kind *kind);
const char *ps_row_init_name(ps_row_init_kind kind);

/* The rules a table's initializer must meet: a known kind; uniform bounds
 * finite, lo <= hi, within float range; normal mean finite and within float
 * range, std finite and >= 0, lo <= mean <= hi and, when std > 0,
 * hi - lo >= std (infinite bounds allowed). Returns 0, or -EINVAL with the
 * reason in why. */
int ps_row_init_check(const ps_row_init *init, char *why, size_t why_len);

/* Elements [first, first + n) of row id of table table_id into out (the
 * caller's, n floats). init must have passed ps_row_init_check; first + n
 * must not exceed 2^32. */
void ps_row_init_values(const ps_row_init *init, uint32_t table_id, uint64_t id, uint32_t first,
                        size_t n, float *out);

/* The reference: element e of the same row, computed plainly (see above). */
float ps_row_init_value_ref(const ps_row_init *init, uint32_t table_id, uint64_t id, uint32_t e);

#endif
