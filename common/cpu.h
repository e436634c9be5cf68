/* What the CPU this process runs on can do, asked once: CPUID traps to the
 * hypervisor on a VM, so it must never be asked per call. For the modules
 * that keep a faster copy of a hot loop beside the portable one (crc32c,
 * half, frame). A flag is set only when the OS also saves the registers the
 * instructions need (XCR0), and never off x86-64. */
#ifndef PS_CPU_H
#define PS_CPU_H

typedef struct {
    int sse42;             /* the crc32 instruction */
    int avx2;              /* 256-bit integer vectors */
    int f16c;              /* half <-> float conversion (with AVX) */
    int avx512f;           /* 512-bit vectors and mask registers */
    int avx512_vpclmulqdq; /* AVX-512F and 512-bit carry-less multiply */
} ps_cpu_features;

/* Detected on first use, thread-safely; the struct lives for the process. */
const ps_cpu_features *ps_cpu_features_get(void);

#endif
