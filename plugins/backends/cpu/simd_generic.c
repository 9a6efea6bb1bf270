/* plugins/backends/cpu/simd_generic.c — simd_t.h compiled for generic (flags in CMakeLists.txt). */
#define SIMD_ISA "generic"
#define SIMD_BYTES 16
#define SIMD_TABLE cpu_simd_generic
#define SIMD_FN(name) simd_generic_##name
#include "simd_t.h"
