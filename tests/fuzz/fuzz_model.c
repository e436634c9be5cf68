/* libFuzzer target: the saved-model loader (common/model_file.c, and the
 * model-text parser and shape inference of common/model_desc.c behind it),
 * on a file made of the input's bytes, as shardps-eval reads one. Invariants
 * for a file it accepts: the model it describes resolves again to the very
 * table it lists (same fingerprint), and every tensor's values lie inside
 * the data read. Also replayed by make test (fuzz_replay_model). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "model_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The scratch file, removed at exit. */
static char path[64];

static void fm_cleanup(void)
{
    unlink(path);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    ps_saved_model m;
    ps_model_spec again;
    char err[512];
    FILE *f;

    if (path[0] == '\0') {
        int fd;
        snprintf(path, sizeof(path), "%s/fuzz_model.XXXXXX",
                 access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
        fd = mkstemp(path);
        if (fd < 0)
            abort();
        close(fd);
        atexit(fm_cleanup);
    }
    f = fopen(path, "wb");
    if (f == NULL || fwrite(data, 1, size, f) != size || fclose(f) != 0)
        abort();
    if (ps_model_file_read(path, &m, err, sizeof(err)) == 0) {
        ps_model_desc d = m.desc;
        size_t off = 0;
        if (ps_model_desc_resolve(&d, &m.desc.input, m.desc.classes, m.table.seed, &again, err,
                                  sizeof(err)) != 0 ||
            ps_model_spec_fingerprint(&again) != ps_model_spec_fingerprint(&m.table))
            abort();
        for (int i = 0; i < m.table.n_tensors; i++) {
            if (m.tensor[i] != m.data + off)
                abort();
            off += m.table.tensors[i].numel;
        }
        if (off != m.table.total_numel)
            abort();
        ps_model_spec_free(&again);
    }
    ps_saved_model_free(&m);
    return 0;
}
