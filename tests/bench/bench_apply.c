/* bench-apply: the server's optimizer apply against plain C loops over the
 * same arrays, in bytes touched per second.
 *
 * For plain SGD, SGD with momentum and Adam it times ps_optimizer_apply_checked
 * (what the server runs for every pushed chunk since issue 18: the update
 * only if every weight and state value stays finite) and ps_optimizer_apply
 * (the same update unchecked) on weights of 1 MiB (in cache) and 64 MiB
 * (memory bound), and in the same run two loops compiled here: the
 * baseline, which reads and writes exactly the arrays the rule does with the
 * least arithmetic (for SGD that is the rule itself, w[i] -= lr*g[i]; for
 * momentum and Adam a streaming add over w, g and the state, the ceiling for
 * that memory traffic), and the rule written naively as one plain loop, which
 * tells the cost of the arithmetic apart from the cost of the code around it.
 * Bytes touched per element: SGD 12 (read w, g; write w), momentum 20 (read w,
 * g, v; write w, v), Adam 28 (read w, g, m, v; write w, m, v). Timed blocks of
 * the four alternate and each figure is the median over rounds, so load from
 * elsewhere hits all four alike. A second table times the other per-byte
 * work a push+pull does on the server and client (CRC32C as ps_crc32c picks
 * it and with the crc32 instruction, a copy into a reused buffer, and a copy
 * into a fresh malloc, as pull replies were once snapshotted), for the
 * analysis in docs/performance.md, and what --compress fp16 adds: narrowing
 * on the worker and widening on the server, the F16C copies and the plain C
 * references (docs/compression.md). */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "crc32c.h"
#include "bench_util.h"
#include "flags.h"
#include "half.h"
#include "optimizer.h"

#define PS__MAX_ROUNDS 99

typedef enum { PS__SGD, PS__MOMENTUM, PS__ADAM, PS__N_RULES } ps__rule;

static const char *const ps__rule_names[] = {"sgd", "momentum", "adam"};
/* Floats read plus floats written per element, and state floats per weight. */
static const int ps__words[] = {3, 5, 7};
static const int ps__state[] = {0, 1, 2};

typedef struct {
    float *w, *g, *s, *dst;
    size_t n;
    ps_optimizer_config cfg;
    float lr; /* the rate of every step, as the server's schedule would give it */
    uint64_t step;
    ps_optimizer_bounds bounds; /* kept across calls, as the server keeps one per chunk */
    ps__rule rule;
    uint32_t sink;
} ps__arrays;

typedef void (*ps__kernel)(ps__arrays *a);

/* ---- the kernels -------------------------------------------------------- */

static void ps__k_server(ps__arrays *a)
{
    ps_optimizer_apply(&a->cfg, a->lr, a->w, a->s, a->g, a->n, ++a->step);
}

/* What the server runs since issue 18: the update only if it stays finite
 * (proved from one more read of the gradient and the bounds kept from the
 * previous call). */
static void ps__k_checked(ps__arrays *a)
{
    a->sink ^= (uint32_t)ps_optimizer_apply_checked(&a->cfg, a->lr, a->w, a->s, a->g, a->n,
                                                    ++a->step, &a->bounds);
}

/* The baselines are kept out of line and without restrict, as a plain loop
 * somebody would write; GCC still vectorises them behind an alias check. */
__attribute__((noinline)) static void ps__k_base_sgd(ps__arrays *a)
{
    float *w = a->w, lr = a->lr;
    const float *g = a->g;

    for (size_t i = 0; i < a->n; i++)
        w[i] -= lr * g[i];
}

__attribute__((noinline)) static void ps__k_base_momentum(ps__arrays *a)
{
    float *w = a->w, *v = a->s;
    const float *g = a->g;

    for (size_t i = 0; i < a->n; i++) {
        v[i] += g[i];
        w[i] += v[i];
    }
}

__attribute__((noinline)) static void ps__k_base_adam(ps__arrays *a)
{
    float *w = a->w, *s = a->s;
    const float *g = a->g;

    for (size_t i = 0; i < a->n; i++) {
        s[2 * i] += g[i];
        s[2 * i + 1] += g[i];
        w[i] += g[i];
    }
}

/* The update rules as one naive loop each (torch.optim's formulas). */
__attribute__((noinline)) static void ps__k_naive_momentum(ps__arrays *a)
{
    float *w = a->w, *v = a->s, lr = a->lr, mu = a->cfg.momentum;
    const float *g = a->g;

    for (size_t i = 0; i < a->n; i++) {
        v[i] = mu * v[i] + g[i];
        w[i] -= lr * v[i];
    }
}

__attribute__((noinline)) static void ps__k_naive_adam(ps__arrays *a)
{
    float *w = a->w, *s = a->s;
    const float *g = a->g;
    float b1 = a->cfg.beta1, b2 = a->cfg.beta2, eps = a->cfg.eps;
    double t = (double)++a->step;
    float step_size = (float)(a->lr / (1.0 - pow(b1, t)));
    float bc2 = (float)(1.0 - pow(b2, t));

    for (size_t i = 0; i < a->n; i++) {
        float m = b1 * s[2 * i] + (1.0f - b1) * g[i];
        float v = b2 * s[2 * i + 1] + (1.0f - b2) * g[i] * g[i];
        s[2 * i] = m;
        s[2 * i + 1] = v;
        w[i] -= step_size * m / (sqrtf(v / bc2) + eps);
    }
}

/* Per-byte work of the push/pull path, for the second table. */
static void ps__k_crc(ps__arrays *a)
{
    a->sink ^= ps_crc32c(0, a->g, a->n * sizeof(float));
}

static void ps__k_crc_sse42(ps__arrays *a)
{
    a->sink ^= ps_crc32c_sse42(0, a->g, a->n * sizeof(float));
}

static void ps__k_copy(ps__arrays *a)
{
    memcpy(a->dst, a->g, a->n * sizeof(float));
}

/* --compress fp16, into and out of the dst array viewed as halves. */
static void ps__k_narrow(ps__arrays *a)
{
    ps_f32_to_f16((uint16_t *)a->dst, a->g, a->n);
}

static void ps__k_narrow_ref(ps__arrays *a)
{
    ps_f32_to_f16_ref((uint16_t *)a->dst, a->g, a->n);
}

static void ps__k_widen(ps__arrays *a)
{
    ps_f16_to_f32(a->w, (const uint16_t *)a->dst, a->n);
}

static void ps__k_widen_ref(ps__arrays *a)
{
    ps_f16_to_f32_ref(a->w, (const uint16_t *)a->dst, a->n);
}

/* What the server does for every pull reply: a fresh buffer, a copy, and a
 * free once sent. Large blocks come from mmap, so every page faults again. */
static void ps__k_snapshot(ps__arrays *a)
{
    uint8_t *p = malloc(a->n * sizeof(float));

    if (p == NULL)
        return;
    memcpy(p, a->g, a->n * sizeof(float));
    a->sink ^= p[a->n];
    free(p);
}

/* ---- timing ------------------------------------------------------------- */

/* Calls k repeatedly for at least min_s and min_calls calls and returns
 * seconds per call. */
static double ps__time(ps__kernel k, ps__arrays *a, double min_s, long min_calls)
{
    double t0 = ps_clock_now(), t;
    long calls = 0;

    do {
        k(a);
        calls++;
        t = ps_clock_now() - t0;
    } while (t < min_s || calls < min_calls);
    return t / (double)calls;
}

static double ps__median(double *v, int n)
{
    ps_bench_sort(v, (size_t)n);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* Gets the arrays ready for a timed block of k: the kernels share them, and
 * the baselines leave the state as no optimizer would (their adds make
 * Adam's second moments negative) and the weights unknown to the checked
 * apply's bounds, so the state is zeroed, the bounds forgotten, and k called
 * once untimed, as the server's first update after a restore reads the
 * values once. */
static void ps__prepare(ps__kernel k, ps__arrays *a)
{
    memset(a->s, 0, (size_t)ps__state[a->rule] * a->n * sizeof(float));
    a->bounds.known = 0;
    k(a);
}

/* Times up to four kernels in alternating blocks; writes the median seconds
 * per call of each (NULL kernels are skipped). */
static void ps__race(ps__kernel *k, int nk, ps__arrays *a, int rounds, double block_s, double *out)
{
    double t[4][PS__MAX_ROUNDS];

    for (int j = 0; j < nk; j++)
        /* Warm caches, TLB and clock. On this project's VM the first
         * pass over freshly faulted 64 MiB arrays runs at a fraction of
         * the speed of later ones (measured 0.3 vs 16-21 GB/s for a
         * memcpy), so a few whole passes come before any timing. */
        if (k[j]) {
            ps__prepare(k[j], a);
            ps__time(k[j], a, block_s / 4, 3);
        }
    for (int r = 0; r < rounds; r++)
        for (int j = 0; j < nk; j++)
            if (k[j]) {
                ps__prepare(k[j], a);
                t[j][r] = ps__time(k[j], a, block_s, 1);
            }
    for (int j = 0; j < nk; j++)
        out[j] = k[j] ? ps__median(t[j], rounds) : NAN;
}

/* ---- setup -------------------------------------------------------------- */

static void ps__free_arrays(ps__arrays *a)
{
    free(a->w);
    free(a->g);
    free(a->s);
    free(a->dst);
    memset(a, 0, sizeof(*a));
}

/* Allocates and touches every array, so no timed call takes a first-use
 * fault. Gradients are small and varied; weights O(1). */
static int ps__alloc_arrays(ps__arrays *a, size_t n, ps__rule rule)
{
    size_t ns = (size_t)ps__state[rule] * n;

    memset(a, 0, sizeof(*a));
    a->n = n;
    a->rule = rule;
    a->w = malloc(n * sizeof(float));
    a->g = malloc(n * sizeof(float));
    a->dst = malloc(n * sizeof(float));
    a->s = calloc(ns ? ns : 1, sizeof(float));
    if (a->w == NULL || a->g == NULL || a->s == NULL || a->dst == NULL) {
        ps__free_arrays(a);
        return -ENOMEM;
    }
    for (size_t i = 0; i < n; i++) {
        a->w[i] = (float)(i % 97) * 0.01f - 0.5f;
        a->g[i] = (float)(i % 89) * 1e-4f - 4e-3f;
    }
    memset(a->dst, 0, n * sizeof(float));
    ps_optimizer_defaults(&a->cfg, rule == PS__ADAM ? PS_OPT_ADAM : PS_OPT_SGD);
    /* Tiny steps keep the weights O(1) over thousands of repeated updates. */
    a->lr = 1e-6f;
    a->cfg.momentum = rule == PS__MOMENTUM ? 0.9f : 0.0f;
    return 0;
}

int main(int argc, char **argv)
{
    const char *sizes_text = "1M,64M";
    int rounds = 7, n_sizes, rc = 0;
    double block_s = 0.05;
    size_t sizes[8];
    /* JSON lines go after the tables, so the tables read as one block. */
    char json[8 * 13][384];
    int n_json = 0;
    const ps_flag flags[] = {
        {"sizes", PS_FLAG_STRING, &sizes_text, "LIST", "weight array sizes (suffix K, M)", 0, 0,
         NULL, NULL, NULL},
        {"rounds", PS_FLAG_INT, &rounds, "N", "alternating timed blocks; the median is reported", 1,
         PS__MAX_ROUNDS, NULL, NULL, NULL},
        {"block", PS_FLAG_DOUBLE, &block_s, "S", "seconds per timed block", 0.001, 10, NULL, NULL,
         NULL},
    };
    char sz[32];

    rc = ps_flags_parse(flags, (int)(sizeof(flags) / sizeof(flags[0])), argc, argv, "bench-apply",
                        "Optimizer apply and data-path work against plain C loops.");
    if (rc != 0)
        return rc > 0 ? 0 : 2;
    n_sizes = ps_bench_parse_sizes(sizes_text, sizes, 8);
    /* Whole blocks of 64 floats, so every kernel runs its vector loop only. */
    for (int i = 0; i < n_sizes; i++)
        if (sizes[i] < 1024 || sizes[i] % 256 != 0)
            n_sizes = -EINVAL;
    if (n_sizes <= 0) {
        fprintf(stderr, "bench-apply: --sizes takes a list like 1M,64M (multiples of 256 bytes, "
                        "at least 1K)\n");
        return 2;
    }

    printf("bench-apply: GB/s = bytes read + written per second (sgd 12, momentum 20, adam 28 "
           "per weight);\nchecked = ps_optimizer_apply_checked (what the server runs), unchecked = "
           "ps_optimizer_apply;\nbaseline: sgd = plain w[i] -= lr*g[i]; momentum, adam = streaming "
           "add over the same arrays;\nnaive = the rule as one plain loop; ratio = checked / "
           "baseline, unch. = unchecked / baseline,\ncheck = checked / unchecked; median of %d "
           "rounds of %.3g s\n\n",
           rounds, block_s);
    printf("%-9s %-9s | %8s %9s %9s %8s | %6s %6s %6s %11s\n", "rule", "size", "checked",
           "unchecked", "baseline", "naive", "ratio", "unch.", "check", "ns/element");
    for (int i = 0; i < n_sizes; i++) {
        for (int r = 0; r < PS__N_RULES; r++) {
            static const ps__kernel base[] = {ps__k_base_sgd, ps__k_base_momentum, ps__k_base_adam};
            static const ps__kernel naive[] = {NULL, ps__k_naive_momentum, ps__k_naive_adam};
            ps__kernel k[4] = {ps__k_checked, ps__k_server, base[r], naive[r]};
            size_t n = sizes[i] / sizeof(float);
            double t[4], bytes = (double)ps__words[r] * sizeof(float) * (double)n, gb[4];
            ps__arrays a;

            if (ps__alloc_arrays(&a, n, (ps__rule)r) < 0) {
                fprintf(stderr, "bench-apply: out of memory for %zu bytes\n", sizes[i]);
                return 1;
            }
            ps__race(k, 4, &a, rounds, block_s, t);
            for (int j = 0; j < 4; j++)
                gb[j] = bytes / t[j] / 1e9;
            /* For SGD the baseline is the naive rule itself. */
            if (naive[r] == NULL)
                gb[3] = gb[2];
            printf("%-9s %-9s | %8.2f %9.2f %9.2f %8.2f | %6.3f %6.3f %6.3f %11.3f\n",
                   ps__rule_names[r], ps_bench_size_text(sizes[i], sz, sizeof(sz)), gb[0], gb[1],
                   gb[2], gb[3], gb[0] / gb[2], gb[1] / gb[2], gb[0] / gb[1],
                   t[0] / (double)n * 1e9);
            snprintf(
                json[n_json++], sizeof(json[0]),
                "{\"bench\":\"apply\",\"rule\":\"%s\",\"size_bytes\":%zu,\"bytes_touched\":%.0f,"
                "\"gbps\":%.3f,\"unchecked_gbps\":%.3f,\"raw_gbps\":%.3f,\"ratio\":%.4f,"
                "\"unchecked_ratio\":%.4f,\"check_ratio\":%.4f,\"naive_gbps\":%.3f,"
                "\"ns_per_element\":%.4f}",
                ps__rule_names[r], sizes[i], bytes, gb[0], gb[1], gb[2], gb[0] / gb[2],
                gb[1] / gb[2], gb[0] / gb[1], gb[3], t[0] / (double)n * 1e9);
            ps__free_arrays(&a);
        }
    }

    printf("\nper-byte work of a push+pull (GB/s of float32 payload; crc32c = %s, crc32c-insn = "
           "crc32 instruction;\ncopy = memcpy into a reused buffer; snapshot = malloc + memcpy + "
           "free, as pull replies once were;\nf32>f16, f16>f32: --compress fp16, *-ref the plain C "
           "references)\n\n",
           ps_crc32c_impl());
    printf("%-11s %-9s | %8s %9s | %6s\n", "work", "size", "GB/s", "copy", "ratio");
    for (int i = 0; i < n_sizes; i++) {
        ps__kernel k[8] = {ps__k_crc,        ps__k_copy,      ps__k_narrow,    ps__k_widen,
                           ps__k_narrow_ref, ps__k_widen_ref, ps__k_crc_sse42, ps__k_snapshot};
        static const char *const names[] = {"crc32c",      "copy",        "f32>f16",
                                            "f16>f32",     "f32>f16-ref", "f16>f32-ref",
                                            "crc32c-insn", "snapshot"};
        size_t n = sizes[i] / sizeof(float);
        double t[8];
        ps__arrays a;

        if (ps__alloc_arrays(&a, n, PS__SGD) < 0) {
            fprintf(stderr, "bench-apply: out of memory for %zu bytes\n", sizes[i]);
            return 1;
        }
        /* The snapshot runs last and alone: on this project's VM a large
         * free (munmap) makes the next pass over any other memory slow too
         * (0.4-2 GB/s for a 64 MiB memcpy, then 16 GB/s), which would
         * otherwise land on whichever reference follows it. */
        ps__race(k, 2, &a, rounds, block_s, t);
        ps__race(k + 2, 2, &a, rounds, block_s, t + 2);
        ps__race(k + 4, 2, &a, rounds, block_s, t + 4);
        ps__race(k + 6, 1, &a, rounds, block_s, t + 6);
        ps__race(k + 7, 1, &a, rounds, block_s, t + 7);
        for (int j = 0; j < 8; j++) {
            double gb = (double)sizes[i] / t[j] / 1e9, copy = (double)sizes[i] / t[1] / 1e9;
            if (j == 1)
                continue;
            printf("%-11s %-9s | %8.2f %9.2f | %6.3f\n", names[j],
                   ps_bench_size_text(sizes[i], sz, sizeof(sz)), gb, copy, gb / copy);
            snprintf(json[n_json++], sizeof(json[0]),
                     "{\"bench\":\"datapath\",\"work\":\"%s\",\"size_bytes\":%zu,\"gbps\":%.3f,"
                     "\"raw_gbps\":%.3f,\"ratio\":%.4f}",
                     names[j], sizes[i], gb, copy, gb / copy);
        }
        if (a.sink == 0xdeadbeef)
            printf("(sink)\n");
        ps__free_arrays(&a);
    }
    printf("\n");
    for (int j = 0; j < n_json; j++)
        printf("%s\n", json[j]);
    return 0;
}
