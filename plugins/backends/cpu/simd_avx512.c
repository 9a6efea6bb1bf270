/* plugins/backends/cpu/simd_avx512.c — simd_t.h compiled for avx512 (flags in CMakeLists.txt). */
#define SIMD_ISA "avx512"
#define SIMD_BYTES 64
#define SIMD_TABLE cpu_simd_avx512
#define SIMD_FN(name) simd_avx512_##name
#include "simd_t.h"
