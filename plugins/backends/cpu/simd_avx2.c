/* plugins/backends/cpu/simd_avx2.c — simd_t.h compiled for avx2 (flags in CMakeLists.txt). */
#define SIMD_ISA "avx2"
#define SIMD_BYTES 32
#define SIMD_TABLE cpu_simd_avx2
#define SIMD_FN(name) simd_avx2_##name
#include "simd_t.h"
