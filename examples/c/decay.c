/* One worker of a shardps job in plain C: pulls the MLP 784-32-16-10's weights,
 * pushes 0.01 * w as each tensor's gradient for N steps, and writes the last
 * weights it pulled to FILE (shardps-worker --dump-weights's layout). Any
 * servers do; a shardps-worker --hidden 32,16 may share the job.
 * Build: cc -o decay decay.c $(pkg-config --cflags --libs shardps)
 * Run:   ./decay --servers HOST:PORT[,HOST:PORT...] --rank R --workers W --steps N --out FILE */
#include "job_args.h"
#include <shardps.h>

#define CHECK(call)                                                                                \
    do {                                                                                           \
        if ((call) < 0)                                                                            \
            return fprintf(stderr, "%s\n", shardps_last_error(h)), 1;                              \
    } while (0)

int main(int argc, char **argv)
{
    job_args a;
    int sizes[] = {784, 32, 16, 10};
    static float wbuf[6][784 * 32], g[6][784 * 32]; /* the largest tensor: fc1.weight */
    float *w[6] = {wbuf[0], wbuf[1], wbuf[2], wbuf[3], wbuf[4], wbuf[5]};
    size_t numel[6];
    uint64_t clock;
    shardps *h = NULL;

    if (job_args_parse(&a, argc, argv, 10, 1) != 0)
        return 2;
    CHECK(shardps_new(&h, a.servers, a.n_servers, a.rank, a.workers));
    CHECK(shardps_declare_mlp(h, sizes, 4));
    CHECK(shardps_connect(h));
    for (int i = 0; i < 6; i++)
        shardps_tensor_info(h, i, NULL, 0, &numel[i]);
    CHECK(shardps_start_clock(h, &clock));
    CHECK(shardps_pull(h, clock, w, 6));
    CHECK(shardps_wait(h));
    for (int step = 0; step < a.steps; step++) {
        for (int i = 5; i >= 0; i--) { /* last layer first, as backward would */
            for (size_t k = 0; k < numel[i]; k++)
                g[i][k] = 0.01f * w[i][k];
            CHECK(shardps_push(h, i, g[i], numel[i]));
        }
        CHECK(shardps_pull(h, ++clock, w, 6)); /* travels with the pushes */
        CHECK(shardps_wait(h));
    }
    FILE *f = fopen(a.out, "wb");
    for (int i = 0; f && i < 6; i++)
        fwrite(w[i], sizeof(float), numel[i], f);
    if (f == NULL || fclose(f) != 0)
        return perror(a.out), 1;
    return shardps_close(h);
}
