/* bora/graph.h — tensors, named axes and graph building (the types other headers need).
 *
 * The graph API proper (views, op builders, parameters, inputs) is not in this version of the
 * ABI: model and optimizer plugins can be registered and configured, but not yet built. What is
 * here is what every other header refers to: the graph and tensor handles, element types, and
 * the build modes. A worked example of the part that exists:
 *
 *     size_t bytes = (size_t)n * bora_dtype_size(BORA_DTYPE_BF16);     // 2 bytes per element
 *     if (mode == BORA_MODE_EVAL) { ... return logits instead of the loss ... }
 */
#ifndef BORA_GRAPH_H
#define BORA_GRAPH_H

#include <bora/host.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bora_graph bora_graph;   /* a graph under construction; owned by the host */
typedef struct bora_tensor bora_tensor; /* a view into a graph value; owned by its graph */

/* Element types. */
typedef enum bora_dtype {
    BORA_DTYPE_F32 = 1,
    BORA_DTYPE_BF16 = 2,
    BORA_DTYPE_F16 = 3,
    BORA_DTYPE_F64 = 4,
    BORA_DTYPE_I32 = 5,
    BORA_DTYPE_I64 = 6,
    BORA_DTYPE_U8 = 7
} bora_dtype;

/* Size in bytes of one element, 0 for an unknown dtype. */
static inline size_t bora_dtype_size(int32_t dtype)
{
    switch (dtype) {
    case BORA_DTYPE_F32:
    case BORA_DTYPE_I32: return 4;
    case BORA_DTYPE_BF16:
    case BORA_DTYPE_F16: return 2;
    case BORA_DTYPE_F64:
    case BORA_DTYPE_I64: return 8;
    case BORA_DTYPE_U8: return 1;
    default: return 0;
    }
}

/* What a graph is built for (DESIGN §4). */
typedef enum bora_mode {
    BORA_MODE_TRAIN = 1,   /* one micro-step: forward and backward into the gradient buffers */
    BORA_MODE_APPLY = 2,   /* clip, optimizer update, weight casts: once per global batch */
    BORA_MODE_EVAL = 3,    /* forward only, returns logits */
    BORA_MODE_PREFILL = 4, /* generation: fill the KV cache from a prompt */
    BORA_MODE_DECODE = 5,  /* generation: one position over the KV cache */
    BORA_MODE_HESSIAN = 6  /* Sophia's Hessian estimate */
} bora_mode;

/* The most axes a tensor has. */
#define BORA_MAX_DIMS 6

#ifdef __cplusplus
}
#endif
#endif /* BORA_GRAPH_H */
