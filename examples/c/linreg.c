/* y = 3x + 1 fitted by least squares as one worker of a shardps job: rank 0
 * declares the tensor w = (slope, intercept), the other ranks join it. The
 * step is the servers' plain SGD at the rate this fit is written for:
 *   shardps-server --listen 127.0.0.1:7000 --workers 2 \
 *                  --optimizer sgd --momentum 0 --lr 0.2 --lr-schedule constant
 * (the default Adam at 0.001 would need thousands of steps; this example
 * says so and fails when its loss is not below 0.001 at the end).
 * Build: cc -o linreg linreg.c $(pkg-config --cflags --libs shardps)
 * Run:   ./linreg --servers 127.0.0.1:7000 --rank R --workers 2 --steps 100 */
#include "job_args.h"
#include <shardps.h>

#define CHECK(call)                                                                                \
    if ((call) < 0)                                                                                \
    return fprintf(stderr, "%s\n", shardps_last_error(h)), 1

int main(int argc, char **argv)
{
    job_args a;
    float w[2], g[2], loss = 0, *dest[] = {w};
    uint64_t clock;
    shardps *h = NULL;

    if (job_args_parse(&a, argc, argv, 100, 0) != 0)
        return 2;
    CHECK(shardps_new(&h, a.servers, a.n_servers, a.rank, a.workers));
    if (a.rank == 0) /* the others join this table (connect waits for it) */
        CHECK(shardps_declare(h, "w", 1, (int64_t[]){2}, SHARDPS_INIT_ZERO, 1, 1));
    CHECK(shardps_connect(h));
    CHECK(shardps_start_clock(h, &clock));
    for (int step = 0; step <= a.steps; step++) {
        CHECK(shardps_pull(h, clock + step, dest, 1)); /* leaves with the push */
        CHECK(shardps_wait(h));
        g[0] = g[1] = loss = 0;
        for (int i = 0; i < 100; i++) { /* this rank's x: 100 points of [-1, 1) */
            float x = (float)((a.rank * 100 + i) % 200) / 100 - 1, e = w[0] * x + w[1] - 3 * x - 1;
            g[0] += e * x / 50, g[1] += e / 50, loss += e * e / 100;
        }
        if (step < a.steps)
            CHECK(shardps_push(h, 0, g, 2));
    }
    printf("rank %d: loss %.6f, w %.4f b %.4f\n", a.rank, loss, w[0], w[1]);
    if (loss > 1e-3)
        fprintf(stderr,
                "linreg: loss %g after %d steps, not below 0.001: the fit needs about 100 "
                "steps on servers started with --optimizer sgd --momentum 0 --lr 0.2 "
                "--lr-schedule constant\n",
                loss, a.steps);
    return shardps_close(h) < 0 || loss > 1e-3;
}
