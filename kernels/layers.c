/* The layer library's CPU fast paths and geometry (see layers.h).
 *
 * Convolution is im2col + one OpenBLAS sgemm per sample: the sample's input
 * windows are unrolled into a [in_c*k_h*k_w][out_h*out_w] matrix in the
 * workspace, and W[out_c][in_c*k_h*k_w] times that matrix is the sample's
 * NCHW output as it lies, so nothing is transposed. Backward unrolls the same
 * windows again (cheaper than keeping B of them) for dW += dy_n col^T, then
 * reuses the matrix for dcol = W^T dy_n, folded back into dx by col2im. One
 * sample at a time keeps the workspace at one matrix (a few hundred KiB for
 * the CNN's layers, in L2), and each product is already large enough for
 * sgemm's packed kernels on the layers that cost anything. */
#include "layers.h"

#include <cblas.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <string.h>

#include "cpu_kernels.h"
#include "dropout_mask.h"

size_t ps_shape_count(ps_shape s)
{
    return (size_t)s.c * (size_t)s.h * (size_t)s.w;
}

/* The shape is positive and its count fits an int (the GEMMs take ints). */
static int ps__shape_ok(ps_shape s)
{
    return s.c > 0 && s.h > 0 && s.w > 0 && ps_shape_count(s) <= INT_MAX;
}

int ps_dense_init(ps_dense *g, ps_shape in, int out, ps_shape *out_shape)
{
    if (!ps__shape_ok(in) || out <= 0 || (size_t)out * ps_shape_count(in) > INT_MAX)
        return -EINVAL;
    g->in = (int)ps_shape_count(in);
    g->out = out;
    *out_shape = (ps_shape){out, 1, 1};
    return 0;
}

size_t ps_dense_weight_count(const ps_dense *g)
{
    return (size_t)g->out * g->in;
}

void ps_dense_forward(const ps_dense *g, int B, const float *x, const float *w, const float *b,
                      float *y)
{
    ps_k_linear_fwd(x, w, b, y, B, g->in, g->out);
}

void ps_dense_backward(const ps_dense *g, int B, const float *x, const float *w, const float *dy,
                       float *dx, float *dw, float *db)
{
    ps_k_linear_bwd(x, w, dy, dx, dw, db, B, g->in, g->out);
}

int ps_conv2d_init(ps_conv2d *g, ps_shape in, int out_c, int k_h, int k_w, int stride, int pad,
                   ps_shape *out_shape)
{
    ps_shape out;

    if (!ps__shape_ok(in) || out_c <= 0 || k_h <= 0 || k_w <= 0 || stride <= 0 || pad < 0 ||
        pad > INT_MAX / 4 || k_h > in.h + 2 * pad || k_w > in.w + 2 * pad)
        return -EINVAL;
    out =
        (ps_shape){out_c, (in.h + 2 * pad - k_h) / stride + 1, (in.w + 2 * pad - k_w) / stride + 1};
    /* The im2col matrix and the weights must be indexable by int too. */
    if (!ps__shape_ok(out) || (size_t)in.c * k_h * k_w * out.h * out.w > INT_MAX ||
        (size_t)out_c * in.c * k_h * k_w > INT_MAX)
        return -EINVAL;
    *g = (ps_conv2d){in, out_c, k_h, k_w, stride, pad, out.h, out.w};
    *out_shape = out;
    return 0;
}

size_t ps_conv2d_weight_count(const ps_conv2d *g)
{
    return (size_t)g->out_c * g->in.c * g->k_h * g->k_w;
}

size_t ps_conv2d_workspace(const ps_conv2d *g)
{
    return (size_t)g->in.c * g->k_h * g->k_w * g->out_h * g->out_w;
}

/* The output columns ox whose input column ox*stride + off lies inside the
 * input: [*lo, *hi), empty when none does. */
static void ps__valid_cols(const ps_conv2d *g, int off, int *lo, int *hi)
{
    *lo = off < 0 ? (-off + g->stride - 1) / g->stride : 0;
    *hi = g->in.w - 1 - off < 0 ? 0 : (g->in.w - 1 - off) / g->stride + 1;
    *hi = *hi < g->out_w ? *hi : g->out_w;
    *lo = *lo < *hi ? *lo : *hi;
}

/* One sample's windows: col[(c*k_h + i)*k_w + j][oy*out_w + ox] =
 * x[c][oy*stride - pad + i][ox*stride - pad + j], 0 outside. The valid ox of
 * a row are one interval, so each row is zeros, a strided copy, zeros. */
static void ps__layers_im2col(const ps_conv2d *g, const float *x, float *col)
{
    int ow = g->out_w, P = g->out_h * g->out_w;

    for (int c = 0; c < g->in.c; c++)
        for (int i = 0; i < g->k_h; i++)
            for (int j = 0; j < g->k_w; j++) {
                float *row = col + ((size_t)(c * g->k_h + i) * g->k_w + j) * P;
                /* ox is valid when 0 <= ox*stride - pad + j < in.w. */
                int off = j - g->pad, lo, hi;
                ps__valid_cols(g, off, &lo, &hi);
                for (int oy = 0; oy < g->out_h; oy++) {
                    int iy = oy * g->stride - g->pad + i;
                    float *r = row + (size_t)oy * ow;
                    if (iy < 0 || iy >= g->in.h) {
                        memset(r, 0, sizeof(float) * (size_t)ow);
                        continue;
                    }
                    const float *src = x + ((size_t)c * g->in.h + iy) * g->in.w;
                    memset(r, 0, sizeof(float) * (size_t)lo);
                    if (g->stride == 1)
                        memcpy(r + lo, src + lo + off, sizeof(float) * (size_t)(hi - lo));
                    else
                        for (int ox = lo; ox < hi; ox++)
                            r[ox] = src[ox * g->stride + off];
                    memset(r + hi, 0, sizeof(float) * (size_t)(ow - hi));
                }
            }
}

/* The adjoint of ps__layers_im2col: dx[c][iy][ix] += every col entry read from it.
 * dx must be zeroed by the caller. */
static void ps__layers_col2im(const ps_conv2d *g, const float *col, float *dx)
{
    int ow = g->out_w, P = g->out_h * g->out_w;

    for (int c = 0; c < g->in.c; c++)
        for (int i = 0; i < g->k_h; i++)
            for (int j = 0; j < g->k_w; j++) {
                const float *row = col + ((size_t)(c * g->k_h + i) * g->k_w + j) * P;
                int off = j - g->pad, lo, hi;
                ps__valid_cols(g, off, &lo, &hi);
                for (int oy = 0; oy < g->out_h; oy++) {
                    int iy = oy * g->stride - g->pad + i;
                    if (iy < 0 || iy >= g->in.h)
                        continue;
                    const float *r = row + (size_t)oy * ow;
                    float *dst = dx + ((size_t)c * g->in.h + iy) * g->in.w;
                    for (int ox = lo; ox < hi; ox++)
                        dst[ox * g->stride + off] += r[ox];
                }
            }
}

void ps_conv2d_forward(const ps_conv2d *g, int B, const float *x, const float *w, const float *b,
                       float *y, float *ws)
{
    int K = g->in.c * g->k_h * g->k_w, P = g->out_h * g->out_w;
    size_t in_n = ps_shape_count(g->in), out_n = (size_t)g->out_c * P;

    for (int n = 0; n < B; n++) {
        float *yn = y + n * out_n;
        /* Seeding y with the bias lets sgemm add it with beta = 1. */
        for (int o = 0; o < g->out_c; o++)
            for (int p = 0; p < P; p++)
                yn[(size_t)o * P + p] = b[o];
        ps__layers_im2col(g, x + n * in_n, ws);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, g->out_c, P, K, 1.0f, w, K, ws, P,
                    1.0f, yn, P);
    }
}

void ps_conv2d_backward(const ps_conv2d *g, int B, const float *x, const float *w, const float *dy,
                        float *dx, float *dw, float *db, float *ws)
{
    int K = g->in.c * g->k_h * g->k_w, P = g->out_h * g->out_w;
    size_t in_n = ps_shape_count(g->in), out_n = (size_t)g->out_c * P;

    memset(db, 0, sizeof(float) * (size_t)g->out_c);
    if (B == 0)
        memset(dw, 0, sizeof(float) * ps_conv2d_weight_count(g));
    for (int n = 0; n < B; n++) {
        const float *dyn = dy + n * out_n;
        for (int o = 0; o < g->out_c; o++) {
            float s = 0.0f;
            for (int p = 0; p < P; p++)
                s += dyn[(size_t)o * P + p];
            db[o] += s;
        }
        ps__layers_im2col(g, x + n * in_n, ws);
        /* The first sample overwrites dw, the rest add to it. */
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, g->out_c, K, P, 1.0f, dyn, P, ws, P,
                    n == 0 ? 0.0f : 1.0f, dw, K);
        if (!dx)
            continue;
        /* The windows are no longer needed: the same space takes their gradient. */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, K, P, g->out_c, 1.0f, w, K, dyn, P,
                    0.0f, ws, P);
        memset(dx + n * in_n, 0, sizeof(float) * in_n);
        ps__layers_col2im(g, ws, dx + n * in_n);
    }
}

int ps_maxpool2d_init(ps_maxpool2d *g, ps_shape in, int k, int stride, ps_shape *out_shape)
{
    if (!ps__shape_ok(in) || k <= 0 || stride <= 0 || k > in.h || k > in.w)
        return -EINVAL;
    *g = (ps_maxpool2d){in, k, stride, (in.h - k) / stride + 1, (in.w - k) / stride + 1};
    *out_shape = (ps_shape){in.c, g->out_h, g->out_w};
    return 0;
}

void ps_maxpool2d_forward(const ps_maxpool2d *g, int B, const float *x, float *y, int32_t *argmax)
{
    size_t planes = (size_t)B * g->in.c, in_p = (size_t)g->in.h * g->in.w;

    for (size_t pl = 0; pl < planes; pl++) {
        const float *xp = x + pl * in_p;
        for (int oy = 0; oy < g->out_h; oy++)
            for (int ox = 0; ox < g->out_w; ox++) {
                int first = oy * g->stride * g->in.w + ox * g->stride, best = first;
                for (int i = 0; i < g->k; i++)
                    for (int j = 0; j < g->k; j++) {
                        int at = first + i * g->in.w + j;
                        if (xp[at] > xp[best])
                            best = at;
                    }
                size_t o = (pl * g->out_h + oy) * g->out_w + ox;
                y[o] = xp[best];
                argmax[o] = best;
            }
    }
}

void ps_maxpool2d_backward(const ps_maxpool2d *g, int B, const float *dy, const int32_t *argmax,
                           float *dx)
{
    size_t planes = (size_t)B * g->in.c, in_p = (size_t)g->in.h * g->in.w;
    size_t out_p = (size_t)g->out_h * g->out_w;

    memset(dx, 0, sizeof(float) * planes * in_p);
    for (size_t pl = 0; pl < planes; pl++)
        for (size_t o = 0; o < out_p; o++)
            dx[pl * in_p + (size_t)argmax[pl * out_p + o]] += dy[pl * out_p + o];
}

void ps_relu_forward(size_t n, const float *x, float *y)
{
    for (size_t i = 0; i < n; i++)
        y[i] = x[i] > 0.0f ? x[i] : 0.0f;
}

void ps_relu_backward(size_t n, const float *y, const float *dy, float *dx)
{
    for (size_t i = 0; i < n; i++)
        dx[i] = y[i] > 0.0f ? dy[i] : 0.0f;
}

int ps_dropout_init(ps_dropout *g, float rate, uint64_t seed)
{
    if (!(rate >= 0.0f && rate < 1.0f))
        return -EINVAL;
    /* Rounded so that rate 0 keeps all 2^24 values. */
    g->keep_threshold = (uint32_t)lround((1.0 - (double)rate) * (double)(1u << PS_DROPOUT_BITS));
    g->scale = (float)(1.0 / (1.0 - (double)rate));
    g->seed = seed;
    return 0;
}

/* y = x * scale where kept, else 0: forward and backward are the same map. */
static void ps__layers_dropout_apply(const ps_dropout *g, uint64_t step, int training, size_t n,
                                     const float *x, float *y)
{
    uint64_t key = ps_dropout_key(g->seed, step);

    if (!training) {
        if (y != x)
            memcpy(y, x, sizeof(float) * n);
        return;
    }
    for (size_t i = 0; i < n; i++)
        y[i] = ps_dropout_keep(key, i, g->keep_threshold) ? x[i] * g->scale : 0.0f;
}

void ps_dropout_forward(const ps_dropout *g, uint64_t step, int training, size_t n, const float *x,
                        float *y)
{
    ps__layers_dropout_apply(g, step, training, n, x, y);
}

void ps_dropout_backward(const ps_dropout *g, uint64_t step, int training, size_t n,
                         const float *dy, float *dx)
{
    ps__layers_dropout_apply(g, step, training, n, dy, dx);
}

ps_shape ps_flatten_shape(ps_shape in)
{
    return (ps_shape){(int)ps_shape_count(in), 1, 1};
}

void ps_flatten_forward(size_t n, const float *x, float *y)
{
    if (y != x)
        memcpy(y, x, sizeof(float) * n);
}

void ps_flatten_backward(size_t n, const float *dy, float *dx)
{
    ps_flatten_forward(n, dy, dx);
}

int ps_softmax_xent(int B, int C, const float *logits, const uint8_t *labels, float *dlogits,
                    float *loss, int *correct)
{
    if (B <= 0 || C <= 0)
        return -EINVAL;
    for (int i = 0; i < B; i++)
        if (labels[i] >= C)
            return -EINVAL;
    *loss = ps_k_softmax_xent(logits, labels, dlogits, B, C);
    if (correct)
        *correct = ps_k_count_correct(logits, labels, B, C);
    return 0;
}

void ps_predict(int B, int C, const float *logits, uint8_t *pred)
{
    for (int i = 0; i < B; i++) {
        const float *s = logits + (size_t)i * C;
        int best = 0;
        for (int c = 1; c < C; c++)
            if (s[c] > s[best])
                best = c;
        pred[i] = (uint8_t)best;
    }
}

void ps_clip_norm(size_t n, float *g, float max_norm)
{
    double sq = 0;

    for (size_t i = 0; i < n; i++)
        sq += (double)g[i] * g[i];
    if (sq > (double)max_norm * max_norm) {
        float scale = (float)(max_norm / sqrt(sq));
        for (size_t i = 0; i < n; i++)
            g[i] *= scale;
    }
}
