/* What the CUDA test programs share: ASan's setting for CUDA, random labels,
 * failure counting (CHECK), the "no usable GPU" skip (exit 77, which ctest's
 * SKIP_RETURN_CODE reports as Skipped under each test's name), and running
 * one named test or all of them. Header-only, like test_rng.h, because each program is one file. */
#ifndef PS_CUDA_TEST_H
#define PS_CUDA_TEST_H

#include <cuda_runtime_api.h>
#include <stdio.h>
#include <string.h>

#include "cuda_kernels.h"
#include "../test_rng.h"

#define SKIPPED 77

#ifndef PS_CUDA_TEST_LINKS_BACKEND
/* CUDA under ASan needs the shadow gap left unprotected. A program that
 * links the CUDA backend gets this from worker/backend_cuda.c (and defines
 * PS_CUDA_TEST_LINKS_BACKEND before including this header); the others get
 * it here. */
const char *__asan_default_options(void);
const char *__asan_default_options(void)
{
    return "protect_shadow_gap=0";
}
#endif

/* n labels uniform in [0, classes), malloc'd (freed by the caller); a failed
 * allocation aborts, which ctest reports as a failure. */
static inline uint8_t *rng_labels(int n, int classes)
{
    uint8_t *y = (uint8_t *)malloc((size_t)n + 1);
    if (!y)
        abort();
    for (int i = 0; i < n; i++)
        y[i] = (uint8_t)(rng_uniform() * classes);
    return y;
}

/* Failures of the test now running. */
static int failures;

/* Records a failure; only the first few of a test are printed. */
#define CHECK(cond, ...)                                                                           \
    do {                                                                                           \
        if (!(cond) && ++failures <= 10) {                                                         \
            fprintf(stderr, "  line %d: ", __LINE__);                                              \
            fprintf(stderr, __VA_ARGS__);                                                          \
            fputc('\n', stderr);                                                                   \
        }                                                                                          \
    } while (0)

typedef struct cuda_test {
    const char *name;
    void (*run)(void);
} cuda_test;

/* 0 when a GPU can run this build's kernels; otherwise prints why and
 * returns SKIPPED. only: the test asked for, named in the message. */
static inline int cuda_test_need_gpu(const char *only)
{
    int count = 0;
    cudaError_t err = cudaGetDeviceCount(&count);

    if (err == cudaSuccess && count > 0)
        err = ps_cuda_check_image();
    if (err == cudaSuccess && count > 0)
        return 0;
    printf("SKIPPED%s%s: no usable GPU (%s)\n", only ? " " : "", only ? only : "",
           err != cudaSuccess ? cudaGetErrorString(err) : "cudaGetDeviceCount found none");
    return SKIPPED;
}

/* Runs the test named only (every test when NULL), printing PASS or FAIL
 * for each. Returns 0 when all passed, 1 when one failed, 2 when no test
 * has that name. */
static inline int cuda_test_run(const char *prog, const cuda_test *tests, size_t n,
                                const char *only)
{
    int ran = 0, failed = 0;

    for (size_t i = 0; i < n; i++) {
        if (only && strcmp(only, tests[i].name) != 0)
            continue;
        failures = 0;
        tests[i].run();
        printf("%s %s\n", failures ? "FAIL" : "PASS", tests[i].name);
        failed += failures > 0;
        ran++;
    }
    if (ran == 0) {
        fprintf(stderr, "%s: no test named '%s'\n", prog, only);
        return 2;
    }
    return failed ? 1 : 0;
}

#endif
