/* ps-weights-diff: compares two weight dumps (raw float32, as written by
 * shardps-worker --dump-weights) and fails when their relative difference
 * ||a - b|| / ||b|| exceeds the tolerance. Used by the sync-equivalence test. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char **argv)
{
    FILE *fa, *fb;
    double num = 0, den = 0, maxabs = 0, tol;
    size_t n = 0;
    float a, b;

    if (argc != 4) {
        fprintf(stderr, "usage: ps-weights-diff A B RELATIVE_TOLERANCE\n");
        return 2;
    }
    tol = atof(argv[3]);
    fa = fopen(argv[1], "rb");
    fb = fopen(argv[2], "rb");
    if (fa == NULL || fb == NULL) {
        fprintf(stderr, "ps-weights-diff: cannot open %s\n", fa ? argv[2] : argv[1]);
        return 2;
    }
    for (;;) {
        size_t ra = fread(&a, sizeof(a), 1, fa), rb = fread(&b, sizeof(b), 1, fb);
        if (ra != rb) {
            fprintf(stderr, "ps-weights-diff: files differ in length after %zu floats\n", n);
            return 1;
        }
        if (ra == 0)
            break;
        num += ((double)a - b) * ((double)a - b);
        den += (double)b * b;
        if (fabs((double)a - b) > maxabs)
            maxabs = fabs((double)a - b);
        n++;
    }
    if (n == 0 || den == 0) {
        fprintf(stderr, "ps-weights-diff: empty or all-zero weights\n");
        return 1;
    }
    printf("%zu weights, relative difference %.3g (tolerance %.3g), largest absolute %.3g\n", n,
           sqrt(num / den), tol, maxabs);
    return sqrt(num / den) <= tol ? 0 : 1;
}
