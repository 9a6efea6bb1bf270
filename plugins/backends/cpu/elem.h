/* plugins/backends/cpu/elem.h — one element of ABI 1.9's unary and binary ops (sin, cos, abs,
 * sign, minimum, maximum and the comparisons), in f32 and f64. The plain kernel (kernels_t.h),
 * the dense loop and the fused path (kernels_fast.c) all call these, so every path gives the
 * same bits. */
#ifndef BORA_CPU_ELEM_H
#define BORA_CPU_ELEM_H

#include <bora/graph.h>
#include <math.h>

#define CPU_ELEM_DEFINE(T, name, SIN, COS, FABS)                    \
    static inline T name(int op, T x, T y)                          \
    {                                                               \
        switch (op) {                                               \
        case BORA_OP_SIN: return SIN(x);                            \
        case BORA_OP_COS: return COS(x);                            \
        case BORA_OP_ABS: return FABS(x);                           \
        case BORA_OP_SIGN: return x > 0 ? (T)1 : x < 0 ? (T)-1 : x; \
        case BORA_OP_MINIMUM: return y < x || y != y ? y : x;       \
        case BORA_OP_MAXIMUM: return y > x || y != y ? y : x;       \
        case BORA_OP_LESS: return x < y ? (T)1 : (T)0;              \
        case BORA_OP_LESS_EQUAL: return x <= y ? (T)1 : (T)0;       \
        case BORA_OP_EQUAL: return x == y ? (T)1 : (T)0;            \
        case BORA_OP_NOT_EQUAL: return x != y ? (T)1 : (T)0;        \
        default: return x;                                          \
        }                                                           \
    }                                                               \
    static inline int name##_has(int op)                            \
    {                                                               \
        return op >= BORA_OP_SIN && op <= BORA_OP_NOT_EQUAL;        \
    }

CPU_ELEM_DEFINE(float, elem_f32, sinf, cosf, fabsf)
CPU_ELEM_DEFINE(double, elem_f64, sin, cos, fabs)

#endif
