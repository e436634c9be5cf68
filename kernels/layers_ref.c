/* Plain-loop references of the layer library's fast paths (see layers.h):
 * each computes its output straight from the definition, one output element
 * at a time, accumulating in double so that its own rounding stays far below
 * the tolerance the fast paths and the CUDA versions are held to. Slow on
 * purpose; used only by tests. */
#include <math.h>
#include <string.h>

#include "cpu_kernels.h"
#include "layers.h"

void ps_dense_forward_ref(const ps_dense *g, int B, const float *x, const float *w, const float *b,
                          float *y)
{
    ps_k_linear_fwd_ref(x, w, b, y, B, g->in, g->out);
}

void ps_dense_backward_ref(const ps_dense *g, int B, const float *x, const float *w,
                           const float *dy, float *dx, float *dw, float *db)
{
    ps_k_linear_bwd_ref(x, w, dy, dx, dw, db, B, g->in, g->out);
}

/* x[n][c][iy][ix], or 0 in the padding. */
static double ps__conv_in(const ps_conv2d *g, const float *x, int n, int c, int iy, int ix)
{
    if (iy < 0 || iy >= g->in.h || ix < 0 || ix >= g->in.w)
        return 0.0;
    return x[(((size_t)n * g->in.c + c) * g->in.h + iy) * g->in.w + ix];
}

static size_t ps__w_at(const ps_conv2d *g, int o, int c, int i, int j)
{
    return (((size_t)o * g->in.c + c) * g->k_h + i) * g->k_w + j;
}

static size_t ps__y_at(const ps_conv2d *g, int n, int o, int oy, int ox)
{
    return (((size_t)n * g->out_c + o) * g->out_h + oy) * g->out_w + ox;
}

void ps_conv2d_forward_ref(const ps_conv2d *g, int B, const float *x, const float *w,
                           const float *b, float *y)
{
    for (int n = 0; n < B; n++)
        for (int o = 0; o < g->out_c; o++)
            for (int oy = 0; oy < g->out_h; oy++)
                for (int ox = 0; ox < g->out_w; ox++) {
                    double s = b[o];
                    for (int c = 0; c < g->in.c; c++)
                        for (int i = 0; i < g->k_h; i++)
                            for (int j = 0; j < g->k_w; j++)
                                s += w[ps__w_at(g, o, c, i, j)] *
                                     ps__conv_in(g, x, n, c, oy * g->stride - g->pad + i,
                                                 ox * g->stride - g->pad + j);
                    y[ps__y_at(g, n, o, oy, ox)] = (float)s;
                }
}

void ps_conv2d_backward_ref(const ps_conv2d *g, int B, const float *x, const float *w,
                            const float *dy, float *dx, float *dw, float *db)
{
    for (int o = 0; o < g->out_c; o++) {
        double s = 0.0;
        for (int n = 0; n < B; n++)
            for (int oy = 0; oy < g->out_h; oy++)
                for (int ox = 0; ox < g->out_w; ox++)
                    s += dy[ps__y_at(g, n, o, oy, ox)];
        db[o] = (float)s;
    }
    for (int o = 0; o < g->out_c; o++)
        for (int c = 0; c < g->in.c; c++)
            for (int i = 0; i < g->k_h; i++)
                for (int j = 0; j < g->k_w; j++) {
                    double s = 0.0;
                    for (int n = 0; n < B; n++)
                        for (int oy = 0; oy < g->out_h; oy++)
                            for (int ox = 0; ox < g->out_w; ox++)
                                s += dy[ps__y_at(g, n, o, oy, ox)] *
                                     ps__conv_in(g, x, n, c, oy * g->stride - g->pad + i,
                                                 ox * g->stride - g->pad + j);
                    dw[ps__w_at(g, o, c, i, j)] = (float)s;
                }
    if (!dx)
        return;
    /* dx[n][c][iy][ix] sums, over the outputs whose window covers it, the
     * weight that multiplied it: oy*stride - pad + i = iy for some kernel row i. */
    for (int n = 0; n < B; n++)
        for (int c = 0; c < g->in.c; c++)
            for (int iy = 0; iy < g->in.h; iy++)
                for (int ix = 0; ix < g->in.w; ix++) {
                    double s = 0.0;
                    for (int i = 0; i < g->k_h; i++)
                        for (int j = 0; j < g->k_w; j++) {
                            int ty = iy + g->pad - i, tx = ix + g->pad - j;
                            if (ty < 0 || tx < 0 || ty % g->stride || tx % g->stride ||
                                ty / g->stride >= g->out_h || tx / g->stride >= g->out_w)
                                continue;
                            for (int o = 0; o < g->out_c; o++)
                                s += (double)w[ps__w_at(g, o, c, i, j)] *
                                     dy[ps__y_at(g, n, o, ty / g->stride, tx / g->stride)];
                        }
                    dx[(((size_t)n * g->in.c + c) * g->in.h + iy) * g->in.w + ix] = (float)s;
                }
}

/* The index in its plane of the first maximum of window (oy, ox) of plane xp
 * (NaN never compares greater, so it never wins over the first element). */
static int ps__window_max(const ps_maxpool2d *g, const float *xp, int oy, int ox)
{
    int best_y = oy * g->stride, best_x = ox * g->stride;

    for (int i = 0; i < g->k; i++)
        for (int j = 0; j < g->k; j++) {
            int iy = oy * g->stride + i, ix = ox * g->stride + j;
            if (xp[iy * g->in.w + ix] > xp[best_y * g->in.w + best_x]) {
                best_y = iy;
                best_x = ix;
            }
        }
    return best_y * g->in.w + best_x;
}

void ps_maxpool2d_forward_ref(const ps_maxpool2d *g, int B, const float *x, float *y)
{
    size_t in_p = (size_t)g->in.h * g->in.w;

    for (int n = 0; n < B; n++)
        for (int c = 0; c < g->in.c; c++) {
            const float *xp = x + ((size_t)n * g->in.c + c) * in_p;
            for (int oy = 0; oy < g->out_h; oy++)
                for (int ox = 0; ox < g->out_w; ox++)
                    y[(((size_t)n * g->in.c + c) * g->out_h + oy) * g->out_w + ox] =
                        xp[ps__window_max(g, xp, oy, ox)];
        }
}

void ps_maxpool2d_backward_ref(const ps_maxpool2d *g, int B, const float *x, const float *dy,
                               float *dx)
{
    size_t in_p = (size_t)g->in.h * g->in.w;

    /* Each input element gathers the outputs whose window it won, in output
     * order (the fast path scatters instead). */
    for (int n = 0; n < B; n++)
        for (int c = 0; c < g->in.c; c++) {
            size_t plane = (size_t)n * g->in.c + c;
            const float *xp = x + plane * in_p;
            for (size_t at = 0; at < in_p; at++) {
                double s = 0.0;
                for (int oy = 0; oy < g->out_h; oy++)
                    for (int ox = 0; ox < g->out_w; ox++)
                        if ((size_t)ps__window_max(g, xp, oy, ox) == at)
                            s += dy[(plane * g->out_h + oy) * g->out_w + ox];
                dx[plane * in_p + at] = (float)s;
            }
        }
}
