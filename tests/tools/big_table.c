/* ps-big-table: a worker of a synthetic model the size of a real one, through
 * libshardps's public API alone: 4,096 tensors (the most a table holds) of 4
 * float32 values each, every name 255 bytes (the longest allowed), drawn
 * from zero. Each step pushes a gradient of 1 for every tensor (last tensor
 * first, as backward would) and pulls the next step's weights. At the end
 * every value of every tensor must be equal and negative (each step moved
 * them all the same way), and the weights are written to --out, so ranks can
 * be compared byte for byte (big_table.sh). Takes the C examples' options
 * (examples/c/job_args.h). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "job_args.h"
#include "shardps.h"

#define BT_TENSORS 4096
#define BT_NAME    255
#define BT_NUMEL   4

static float bt_w[BT_TENSORS][BT_NUMEL];
static float *bt_dest[BT_TENSORS];

static int bt_fail(shardps *h, const char *what)
{
    fprintf(stderr, "ps-big-table: %s: %s\n", what, shardps_last_error(h));
    shardps_abandon(h);
    return 1;
}

/* Tensor i's name: a dotted prefix, then padding to exactly BT_NAME bytes. */
static void bt_name(int i, char *name)
{
    int k = snprintf(name, BT_NAME + 1, "blocks.%d.attention.output.dense.weight.", i);

    memset(name + k, 'p', (size_t)(BT_NAME - k));
    name[BT_NAME] = '\0';
}

int main(int argc, char **argv)
{
    static const float g[BT_NUMEL] = {1, 1, 1, 1};
    char name[BT_NAME + 1];
    job_args a;
    uint64_t clock;
    shardps *h;
    FILE *f;

    if (job_args_parse(&a, argc, argv, 10, 1) != 0)
        return 2;
    if (shardps_new(&h, a.servers, a.n_servers, a.rank, a.workers) < 0) {
        fprintf(stderr, "ps-big-table: cannot create the handle\n");
        return 1;
    }
    for (int i = 0; i < BT_TENSORS; i++) {
        bt_name(i, name);
        bt_dest[i] = bt_w[i];
        if (shardps_declare(h, name, 1, (int64_t[]){BT_NUMEL}, SHARDPS_INIT_ZERO, 1, 1) < 0)
            return bt_fail(h, "declare");
    }
    if (shardps_connect(h) < 0 || shardps_start_clock(h, &clock) < 0)
        return bt_fail(h, "connect");
    if (shardps_pull(h, clock, bt_dest, BT_TENSORS) < 0 || shardps_wait(h) < 0)
        return bt_fail(h, "first pull");
    for (int step = 0; step < a.steps; step++) {
        for (int i = BT_TENSORS - 1; i >= 0; i--)
            if (shardps_push(h, i, g, BT_NUMEL) < 0)
                return bt_fail(h, "push");
        if (shardps_pull(h, ++clock, bt_dest, BT_TENSORS) < 0 || shardps_wait(h) < 0)
            return bt_fail(h, "pull");
    }
    for (int i = 0; i < BT_TENSORS; i++)
        for (int k = 0; k < BT_NUMEL; k++)
            if (memcmp(&bt_w[i][k], &bt_w[0][0], sizeof(float)) != 0 || !(bt_w[0][0] < 0)) {
                fprintf(stderr, "ps-big-table: tensor %d [%d] is %g, tensor 0 [0] %g\n", i, k,
                        (double)bt_w[i][k], (double)bt_w[0][0]);
                shardps_abandon(h);
                return 1;
            }
    f = fopen(a.out, "wb");
    if (f == NULL || fwrite(bt_w, sizeof(bt_w), 1, f) != 1 || fclose(f) != 0) {
        fprintf(stderr, "ps-big-table: cannot write %s\n", a.out);
        shardps_abandon(h);
        return 1;
    }
    printf("%d steps of %d tensors with %d-byte names: every weight %g\n", a.steps, BT_TENSORS,
           BT_NAME, (double)bt_w[0][0]);
    return shardps_close(h) < 0;
}
