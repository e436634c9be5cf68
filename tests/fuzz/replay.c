/* Replays a fuzz target's corpus without libFuzzer (make test's
 * fuzz_replay_* entries): each file named, or each file in each directory
 * named (in name order), is handed to the target's LLVMFuzzerTestOneInput
 * once. Built with the project's own compiler and sanitizers, so a seed
 * that crashes, leaks, trips UBSan or breaks one of the target's invariants
 * (it aborts) fails the test. Exits 1 when there was nothing to replay. */
#include <dirent.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Hands one file to the target. Returns 0 or -1 when it cannot be read. */
static int replay_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    uint8_t *buf = NULL;
    long len;
    int rc = -1;

    if (f == NULL || fseek(f, 0, SEEK_END) != 0 || (len = ftell(f)) < 0 ||
        fseek(f, 0, SEEK_SET) != 0)
        goto out;
    buf = malloc(len ? (size_t)len : 1);
    if (buf == NULL || fread(buf, 1, (size_t)len, f) != (size_t)len)
        goto out;
    LLVMFuzzerTestOneInput(buf, (size_t)len);
    rc = 0;
out:
    if (rc < 0)
        fprintf(stderr, "replay: cannot read %s: %s\n", path, strerror(errno));
    free(buf);
    if (f)
        fclose(f);
    return rc;
}

static int by_name(const struct dirent **a, const struct dirent **b)
{
    return strcmp((*a)->d_name, (*b)->d_name);
}

int main(int argc, char **argv)
{
    int replayed = 0, failed = 0;

    for (int a = 1; a < argc; a++) {
        struct dirent **names;
        struct stat st;
        int n;

        if (stat(argv[a], &st) == 0 && !S_ISDIR(st.st_mode)) {
            failed |= replay_file(argv[a]) < 0;
            replayed++;
            continue;
        }
        n = scandir(argv[a], &names, NULL, by_name);
        if (n < 0) {
            fprintf(stderr, "replay: cannot list %s: %s\n", argv[a], strerror(errno));
            return 1;
        }
        for (int i = 0; i < n; i++) {
            char path[4096];
            snprintf(path, sizeof(path), "%s/%s", argv[a], names[i]->d_name);
            if (names[i]->d_name[0] != '.' && stat(path, &st) == 0 && S_ISREG(st.st_mode)) {
                failed |= replay_file(path) < 0;
                replayed++;
            }
            free(names[i]);
        }
        free(names);
    }
    printf("replayed %d inputs\n", replayed);
    return replayed == 0 || failed ? 1 : 0;
}
