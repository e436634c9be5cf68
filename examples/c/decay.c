/* One worker of a shardps job in plain C: pulls the MLP 784-32-16-10's weights,
 * pushes 0.01 * w as each tensor's gradient for STEPS steps, and writes the
 * last weights it pulled to OUT. Build: cc decay.c $(pkg-config --cflags --libs shardps)
 * Run:   ./a.out HOST:PORT[,HOST:PORT...] RANK WORLD STEPS OUT */
#include <shardps.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CHECK(call)                                                                                \
    do {                                                                                           \
        if ((call) < 0)                                                                            \
            return fprintf(stderr, "%s\n", shardps_last_error(h)), 1;                              \
    } while (0)

int main(int argc, char **argv)
{
    const char *servers[16];
    int n = 0, sizes[] = {784, 32, 16, 10};
    static float wbuf[6][784 * 32], g[6][784 * 32]; /* the largest tensor: fc1.weight */
    float *w[6] = {wbuf[0], wbuf[1], wbuf[2], wbuf[3], wbuf[4], wbuf[5]};
    size_t numel[6];
    uint64_t clock;
    shardps *h = NULL;

    if (argc != 6)
        return fprintf(stderr, "usage: %s SERVERS RANK WORLD STEPS OUT\n", argv[0]), 2;
    for (char *s = strtok(argv[1], ","); s && n < 16; s = strtok(NULL, ","))
        servers[n++] = s;
    CHECK(shardps_new(&h, servers, n, atoi(argv[2]), atoi(argv[3])));
    CHECK(shardps_set_option(h, "chunk-bytes", "65536"));
    CHECK(shardps_declare_mlp(h, sizes, 4));
    CHECK(shardps_connect(h));
    for (int i = 0; i < 6; i++)
        shardps_tensor_info(h, i, NULL, 0, &numel[i]);
    CHECK(shardps_start_clock(h, &clock));
    CHECK(shardps_pull(h, clock, w, 6));
    CHECK(shardps_wait(h));
    for (int step = 0; step < atoi(argv[4]); step++) {
        for (int i = 5; i >= 0; i--) { /* last layer first, as backward would */
            for (size_t k = 0; k < numel[i]; k++)
                g[i][k] = 0.01f * w[i][k];
            CHECK(shardps_push(h, i, g[i], numel[i]));
        }
        CHECK(shardps_pull(h, ++clock, w, 6)); /* travels with the pushes */
        CHECK(shardps_wait(h));
    }
    FILE *f = fopen(argv[5], "wb");
    for (int i = 0; f && i < 6; i++)
        fwrite(w[i], sizeof(float), numel[i], f);
    if (f == NULL || fclose(f) != 0)
        return perror(argv[5]), 1;
    return shardps_close(h);
}
