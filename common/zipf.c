/* Rejection-inversion sampling of Zipf ranks (see zipf.h).
 *
 * The hat is the continuous density h(x) = x^-s on [0.5, n + 0.5], whose
 * integral H can be inverted in closed form. A uniform point u of the hat's
 * area gives x = H^-1(u) and the candidate k = round(x); k is accepted when
 * u falls in the part of k's strip of area that has exactly the mass
 * h(k) = k^-s, which holds for nearly every point (the squeeze test
 * k - x <= cut accepts most without evaluating H again). Rank 1's strip is
 * started at H(1.5) - h(1) rather than H(0.5), which would be infinite for
 * s >= 1, so k = 1 is always accepted. Ranks here are 1-based; the
 * interface returns k - 1. */
#include "zipf.h"

#include <errno.h>
#include <math.h>

#include "mix64.h"

/* log1p(t) / t, continuous at t = 0. */
static double ps__log1p_over(double t)
{
    return fabs(t) > 1e-8 ? log1p(t) / t : 1.0 - t * (0.5 - t / 3.0);
}

/* expm1(t) / t, continuous at t = 0. */
static double ps__expm1_over(double t)
{
    return fabs(t) > 1e-8 ? expm1(t) / t : 1.0 + t * (0.5 + t / 6.0);
}

/* h(x) = x^-s. */
static double ps__h(const ps_zipf *z, double x)
{
    return exp(-z->s * log(x));
}

/* H(x) = (x^(1-s) - 1) / (1 - s), which is log x at s = 1, written so that
 * s near 1 loses no precision. */
static double ps__big_h(const ps_zipf *z, double x)
{
    double lx = log(x);
    return ps__expm1_over((1.0 - z->s) * lx) * lx;
}

/* The inverse of H. */
static double ps__big_h_inv(const ps_zipf *z, double y)
{
    double t = (1.0 - z->s) * y;
    /* Rounding can put t a hair below -1, where log1p has no value. */
    if (t < -1.0)
        t = -1.0;
    return exp(ps__log1p_over(t) * y);
}

int ps_zipf_init(ps_zipf *z, uint64_t n, double s, uint64_t seed)
{
    if (n == 0 || n > (1ULL << 53) || !(s > 0.0 && s <= 100.0))
        return -EINVAL;
    *z = (ps_zipf){.n = n, .s = s, .state = ps_mix64(seed)};
    z->h_x1 = ps__big_h(z, 1.5) - 1.0;
    z->h_n = ps__big_h(z, (double)n + 0.5);
    z->cut = 2.0 - ps__big_h_inv(z, ps__big_h(z, 2.5) - ps__h(z, 2.0));
    return 0;
}

uint64_t ps_zipf_bits(ps_zipf *z)
{
    z->state += 0x9e3779b97f4a7c15ULL;
    return ps_mix64(z->state);
}

uint64_t ps_zipf_next(ps_zipf *z)
{
    for (;;) {
        /* u runs over (h_x1, h_n]: from the top of the hat down. */
        double u = z->h_n + ps_mix64_unit(ps_zipf_bits(z)) * (z->h_x1 - z->h_n);
        double x = ps__big_h_inv(z, u);
        double k = floor(x + 0.5);

        if (k < 1.0)
            k = 1.0;
        else if (k > (double)z->n)
            k = (double)z->n;
        if (k - x <= z->cut || u >= ps__big_h(z, k + 0.5) - ps__h(z, k))
            return (uint64_t)k - 1;
    }
}

uint64_t ps_zipf_scramble(uint64_t rank, uint64_t salt)
{
    return ps_mix64(rank ^ ps_mix64(salt));
}
