/* core/graph/build.h — what the graph builder's files (build.c: leaves, views, elementwise,
 * reductions, the table; build_ops.c: dot, norms, losses, attention, store leaves; build_elem.c:
 * constants, ramps and where; build_rope.c; build_sample.c: tokens drawn from logits;
 * build_moe.c: top_k, routing and grouped products; build_conv.c: conv1d) share and no one else
 * needs. */
#ifndef BORA_GRAPH_BUILD_H
#define BORA_GRAPH_BUILD_H

#include "graph.h"

/* Return NULL from an api_ entry point when the graph already failed or an argument is NULL;
 * the error names the entry point (its name without "api_"). */
#define NEED(g, ...)                                                  \
    do {                                                              \
        if ((g)->status)                                              \
            return NULL;                                              \
        const void *args_[] = {__VA_ARGS__};                          \
        for (size_t i_ = 0; i_ < sizeof args_ / sizeof *args_; i_++)  \
            if (!args_[i_]) {                                         \
                g_fail((g), "%s: an argument is NULL", __func__ + 4); \
                return NULL;                                          \
            }                                                         \
    } while (0)

/* build.c */
int g_axes_size(g_graph *g, const char *what, const char *name, int dtype, int ndim,
                const bora_axis *axes, size_t *bytes);
int g_is_float(int dtype);
int g_check_axes(g_graph *g, const char *what, const char *name, int32_t ndim,
                 const bora_axis *axes);
gval *g_leaf(g_graph *g, int kind, const char *name, int32_t dtype, int32_t ndim,
             const bora_axis *axes);
gval *g_copy_as(g_graph *g, gval *x, int dtype);
bora_tensor *api_binary(bora_graph *gp, int32_t op, bora_tensor *a, bora_tensor *b);
bora_tensor *api_broadcast(bora_graph *gp, bora_tensor *t, bora_axis axis);
bora_tensor *api_input(bora_graph *gp, const char *name, int32_t dtype, int32_t ndim,
                       const bora_axis *axes);
bora_tensor *api_merge(bora_graph *gp, bora_tensor *t, int32_t n, const char *const *axes,
                       const char *into);
bora_tensor *api_rename(bora_graph *gp, bora_tensor *t, const char *from, const char *to);
bora_tensor *api_split(bora_graph *gp, bora_tensor *t, const char *axis, int32_t n,
                       const bora_axis *parts);
bora_tensor *api_unary(bora_graph *gp, int32_t op, bora_tensor *x);
/* build_ops.c */
bora_tensor *api_dot(bora_graph *gp, bora_tensor *a, bora_tensor *b, int32_t n_contract,
                     const char *const *contract, const bora_dot_opts *opts);
bora_tensor *api_rms_norm(bora_graph *gp, bora_tensor *x, bora_tensor *weight, const char *axis,
                          double eps, double weight_offset);
bora_tensor *api_layernorm(bora_graph *gp, bora_tensor *x, bora_tensor *gamma, bora_tensor *beta,
                           const char *axis, double eps);
bora_tensor *api_softmax(bora_graph *gp, bora_tensor *x, const char *axis);
bora_tensor *api_log_softmax(bora_graph *gp, bora_tensor *x, const char *axis);
bora_tensor *api_cross_entropy(bora_graph *gp, bora_tensor *logits, bora_tensor *targets,
                               const char *vocab_axis, const bora_xent_opts *opts);
bora_tensor *api_embedding(bora_graph *gp, bora_tensor *table, bora_tensor *ids,
                           const char *vocab_axis);
bora_tensor *api_attention(bora_graph *gp, bora_tensor *q, bora_tensor *k, bora_tensor *v,
                           const bora_attention_opts *opts);
bora_tensor *api_concat(bora_graph *gp, const char *axis, int32_t n, bora_tensor *const *xs);
bora_status api_assign(bora_graph *gp, bora_tensor *dst, bora_tensor *value);
bora_tensor *api_extent(bora_graph *gp, const char *name, int64_t max);
bora_tensor *api_state(bora_graph *gp, const char *name, int32_t dtype, int32_t ndim,
                       const bora_axis *axes);
bora_tensor *api_write_slice(bora_graph *gp, bora_tensor *dst, bora_tensor *value, const char *axis,
                             bora_tensor *start);
bora_tensor *api_checkpoint(bora_graph *gp, bora_tensor *x);
/* build_elem.c */
bora_tensor *api_full(bora_graph *gp, int32_t dtype, int32_t ndim, const bora_axis *axes,
                      double value);
bora_tensor *api_iota(bora_graph *gp, bora_axis axis, int32_t dtype, double start, double step);
bora_tensor *api_where(bora_graph *gp, bora_tensor *mask, bora_tensor *a, bora_tensor *b);
/* build_rope.c */
bora_tensor *api_rope(bora_graph *gp, bora_tensor *x, const bora_rope_opts *opts);
/* build_sample.c */
bora_tensor *api_sample(bora_graph *gp, bora_tensor *logits, const char *axis, bora_tensor *counter,
                        uint64_t seed, uint64_t stream);
/* build_moe.c */
bora_tensor *api_top_k(bora_graph *gp, bora_tensor *x, const char *axis, int64_t k,
                       const char *k_axis, bora_tensor **indices);
bora_tensor *api_argsort(bora_graph *gp, bora_tensor *keys);
bora_tensor *api_bincount(bora_graph *gp, bora_tensor *keys, bora_axis bins);
bora_tensor *api_grouped_matmul(bora_graph *gp, bora_tensor *x, bora_tensor *w,
                                bora_tensor *group_sizes, const char *contract);
/* build_conv.c */
bora_tensor *api_conv1d(bora_graph *gp, bora_tensor *x, bora_tensor *w,
                        const bora_conv1d_opts *opts);

#endif
