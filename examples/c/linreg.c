/* Least-squares linear regression y = x.w + b, trained by a shardps job. Each
 * rank makes its own N samples (seeded by its rank); rank 0 declares w and b,
 * the others join its tensors. Each step pulls the weights, computes the mean
 * squared error and its gradient, and pushes that; last, it prints the loss.
 * Build: cc linreg.c $(pkg-config --cflags --libs shardps)
 * Run:   ./a.out RANK WORLD STEPS HOST:PORT... (the job's servers, in order) */
#include <shardps.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define N 256 /* samples per rank */
#define D 4   /* features */
#define CHECK(call)                                                                                \
    if ((call) < 0)                                                                                \
    return fprintf(stderr, "%s\n", shardps_last_error(h)), 1

int main(int argc, char **argv)
{
    int rank = argc > 4 ? atoi(argv[1]) : 0;
    unsigned s = 1 + (unsigned)rank;
    float x[N][D], y[N], w[D], b, gw[D], gb, loss, *params[] = {w, &b};
    uint64_t clock;
    shardps *h = NULL;

    if (argc < 5)
        return fprintf(stderr, "usage: %s RANK WORLD STEPS HOST:PORT...\n", argv[0]), 2;
    for (int i = 0; i < N; i++) { /* x uniform in [-1, 1), y = x.(1, -2, 3, 0.5) + 0.25 */
        y[i] = 0.25f;
        for (int j = 0; j < D; j++) {
            s = s * 1103515245u + 12345u;
            x[i][j] = (float)(s >> 8) / (1 << 23) - 1;
            y[i] += x[i][j] * (float[]){1, -2, 3, 0.5f}[j];
        }
    }
    CHECK(shardps_new(&h, (const char *const *)argv + 4, argc - 4, rank, atoi(argv[2])));
    if (rank == 0) { /* the others join these tensors (connect waits for them) */
        CHECK(shardps_declare(h, "w", 1, (int64_t[]){D}, SHARDPS_INIT_HE_UNIFORM, D, 1));
        CHECK(shardps_declare(h, "b", 1, (int64_t[]){1}, SHARDPS_INIT_ZERO, D, 1));
    }
    CHECK(shardps_connect(h));
    CHECK(shardps_start_clock(h, &clock));
    for (int step = 0;; step++) {
        CHECK(shardps_pull(h, clock + step, params, 2)); /* leaves with the pushes */
        CHECK(shardps_wait(h));
        loss = gb = 0, memset(gw, 0, sizeof(gw));
        for (int i = 0; i < N; i++) {
            float e = b - y[i];
            for (int j = 0; j < D; j++)
                e += x[i][j] * w[j];
            for (int j = 0; j < D; j++)
                gw[j] += 2 * e * x[i][j] / N;
            gb += 2 * e / N, loss += e * e / N;
        }
        if (step == atoi(argv[3]))
            break;
        CHECK(shardps_push(h, 0, gw, D));
        CHECK(shardps_push(h, 1, &gb, 1));
    }
    printf("rank %d: loss %.6f, w %.3f %.3f %.3f %.3f, b %.3f\n", rank, loss, w[0], w[1], w[2],
           w[3], b);
    return shardps_close(h);
}
