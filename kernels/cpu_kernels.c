/* CPU kernels of the MLP: the linear layer on OpenBLAS for speed, with a
 * plain-loop twin of each that serves as the reference in tests, plus ReLU,
 * the fused softmax cross-entropy and the accuracy count. Every other backend
 * (CUDA included) is checked against these functions. */
#include "cpu_kernels.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

void ps_k_linear_fwd(const float *x, const float *w, const float *b, float *y, int B, int in,
                     int out)
{
    /* Seeding y with the bias lets one sgemm with beta = 1 do the add. */
    for (int i = 0; i < B; i++)
        memcpy(y + (size_t)i * out, b, sizeof(float) * (size_t)out);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, B, out, in, 1.0f, x, in, w, in, 1.0f, y,
                out);
}

void ps_k_linear_fwd_ref(const float *x, const float *w, const float *b, float *y, int B, int in,
                         int out)
{
    /* Double accumulation keeps the reference's own rounding far below the
     * tolerance the optimised kernels are held to. */
    for (int i = 0; i < B; i++)
        for (int o = 0; o < out; o++) {
            double s = b[o];
            for (int k = 0; k < in; k++)
                s += (double)x[(size_t)i * in + k] * w[(size_t)o * in + k];
            y[(size_t)i * out + o] = (float)s;
        }
}

void ps_k_linear_bwd(const float *x, const float *w, const float *dy, float *dx, float *dw,
                     float *db, int B, int in, int out)
{
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, B, 1.0f, dy, out, x, in, 0.0f, dw,
                in);
    memset(db, 0, sizeof(float) * (size_t)out);
    for (int i = 0; i < B; i++)
        for (int o = 0; o < out; o++)
            db[o] += dy[(size_t)i * out + o];
    if (dx)
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, B, in, out, 1.0f, dy, out, w, in,
                    0.0f, dx, in);
}

void ps_k_linear_bwd_ref(const float *x, const float *w, const float *dy, float *dx, float *dw,
                         float *db, int B, int in, int out)
{
    for (int o = 0; o < out; o++) {
        double sb = 0.0;
        for (int i = 0; i < B; i++)
            sb += dy[(size_t)i * out + o];
        db[o] = (float)sb;
        for (int k = 0; k < in; k++) {
            double s = 0.0;
            for (int i = 0; i < B; i++)
                s += (double)dy[(size_t)i * out + o] * x[(size_t)i * in + k];
            dw[(size_t)o * in + k] = (float)s;
        }
    }
    if (!dx)
        return;
    for (int i = 0; i < B; i++)
        for (int k = 0; k < in; k++) {
            double s = 0.0;
            for (int o = 0; o < out; o++)
                s += (double)dy[(size_t)i * out + o] * w[(size_t)o * in + k];
            dx[(size_t)i * in + k] = (float)s;
        }
}

void ps_k_relu_fwd(float *y, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = y[i] > 0.0f ? y[i] : 0.0f;
}

void ps_k_relu_bwd(const float *y, float *dy, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!(y[i] > 0.0f))
            dy[i] = 0.0f;
}

float ps_k_softmax_xent(const float *logits, const uint8_t *labels, float *dlogits, int B, int C)
{
    double total = 0.0;

    for (int i = 0; i < B; i++) {
        const float *l = logits + (size_t)i * C;
        float *d = dlogits ? dlogits + (size_t)i * C : NULL;
        float max = l[0];
        double sum = 0.0;

        for (int c = 1; c < C; c++)
            max = l[c] > max ? l[c] : max;
        for (int c = 0; c < C; c++) {
            float e = expf(l[c] - max);
            sum += e;
            /* Park the exponentials in the gradient row so they are not
             * recomputed when it is normalised below. */
            if (d)
                d[c] = e;
        }
        total += log(sum) - (double)(l[labels[i]] - max);
        if (d) {
            float scale = (float)(1.0 / (sum * B));
            for (int c = 0; c < C; c++)
                d[c] *= scale;
            d[labels[i]] -= 1.0f / (float)B;
        }
    }
    return (float)(total / B);
}

int ps_k_count_correct(const float *logits, const uint8_t *labels, int B, int C)
{
    int correct = 0;

    for (int i = 0; i < B; i++) {
        const float *l = logits + (size_t)i * C;
        int best = 0;
        for (int c = 1; c < C; c++)
            if (l[c] > l[best])
                best = c;
        correct += best == labels[i];
    }
    return correct;
}
