/* CPU feature detection (see cpu.h). CPUID directly rather than
 * __builtin_cpu_supports, which clang (the fuzzing build) does not know all
 * of these names for. */
#include "cpu.h"

#include <pthread.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>
#define PS__CPU_X86 1
#else
#define PS__CPU_X86 0
#endif

static pthread_once_t ps__cpu_once = PTHREAD_ONCE_INIT;
static ps_cpu_features ps__features;

#if PS__CPU_X86
/* XCR0 bits: SSE and AVX state (1, 2); opmask and both halves of the ZMM
 * registers (5, 6, 7). */
#define PS__XCR0_AVX    0x06u
#define PS__XCR0_AVX512 0xe6u

static void ps__detect(void)
{
    unsigned a, b, c, d, xcr0 = 0, xcr0_hi;
    int leaf7;

    if (!__get_cpuid(1, &a, &b, &c, &d))
        return;
    ps__features.sse42 = (c & bit_SSE4_2) != 0;
    if (c & bit_OSXSAVE) {
        __asm__("xgetbv" : "=a"(xcr0), "=d"(xcr0_hi) : "c"(0));
        (void)xcr0_hi;
    }
    if ((xcr0 & PS__XCR0_AVX) != PS__XCR0_AVX || !(c & bit_AVX))
        return;
    ps__features.f16c = (c & bit_F16C) != 0;
    leaf7 = __get_cpuid_count(7, 0, &a, &b, &c, &d);
    if (!leaf7)
        return;
    ps__features.avx2 = (b & bit_AVX2) != 0;
    ps__features.avx512f = (xcr0 & PS__XCR0_AVX512) == PS__XCR0_AVX512 && (b & bit_AVX512F);
    ps__features.avx512_vpclmulqdq = ps__features.avx512f && (c & bit_VPCLMULQDQ);
}
#else
static void ps__detect(void) {}
#endif

const ps_cpu_features *ps_cpu_features_get(void)
{
    pthread_once(&ps__cpu_once, ps__detect);
    return &ps__features;
}
