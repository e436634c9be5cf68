/* y = 3x + 1 fitted by least squares as one worker of a shardps job: rank 0
 * declares the tensor w = (slope, intercept), the other ranks join it.
 * Build: cc linreg.c $(pkg-config --cflags --libs shardps)
 * Run:   ./a.out RANK WORLD STEPS HOST:PORT... (the job's servers, in order) */
#include <shardps.h>
#include <stdio.h>
#include <stdlib.h>

#define CHECK(call)                                                                                \
    if ((call) < 0)                                                                                \
    return fprintf(stderr, "%s\n", shardps_last_error(h)), 1

int main(int argc, char **argv)
{
    int rank = argc > 4 ? atoi(argv[1]) : 0, steps = argc > 4 ? atoi(argv[3]) : 0;
    float w[2], g[2], loss = 0, *dest[] = {w};
    uint64_t clock;
    shardps *h = NULL;

    if (argc < 5)
        return fprintf(stderr, "usage: %s RANK WORLD STEPS HOST:PORT...\n", argv[0]), 2;
    CHECK(shardps_new(&h, (const char *const *)argv + 4, argc - 4, rank, atoi(argv[2])));
    if (rank == 0) /* the others join this table (connect waits for it) */
        CHECK(shardps_declare(h, "w", 1, (int64_t[]){2}, SHARDPS_INIT_ZERO, 1, 1));
    CHECK(shardps_connect(h));
    CHECK(shardps_start_clock(h, &clock));
    for (int step = 0; step <= steps; step++) {
        CHECK(shardps_pull(h, clock + step, dest, 1)); /* leaves with the push */
        CHECK(shardps_wait(h));
        g[0] = g[1] = loss = 0;
        for (int i = 0; i < 100; i++) { /* this rank's x: 100 points of [-1, 1) */
            float x = (float)((rank * 100 + i) % 200) / 100 - 1, e = w[0] * x + w[1] - 3 * x - 1;
            g[0] += e * x / 50, g[1] += e / 50, loss += e * e / 100;
        }
        if (step < steps)
            CHECK(shardps_push(h, 0, g, 2));
    }
    printf("rank %d: loss %.6f, w %.4f b %.4f\n", rank, loss, w[0], w[1]);
    return shardps_close(h);
}
