/* plugins/backends/cpu/simd_pick.c — which simd_t.h build this CPU runs. */
#include "simd.h"

#include <stdlib.h>
#include <string.h>

static int has_avx512(void)
{
    return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
           __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512vl");
}

static int has_avx2(void)
{
    return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
}

const cpu_simd *cpu_simd_get(void)
{
    __builtin_cpu_init();
    const char *want = getenv("BORA_CPU_ISA");
    if (want && strcmp(want, "generic") == 0)
        return &cpu_simd_generic;
    if (want && strcmp(want, "avx2") == 0 && has_avx2())
        return &cpu_simd_avx2;
    if ((!want || strcmp(want, "avx512") == 0) && has_avx512())
        return &cpu_simd_avx512;
    return has_avx2() ? &cpu_simd_avx2 : &cpu_simd_generic;
}
