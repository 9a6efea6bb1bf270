/* plugins/backends/cpu/kernels_fast.h — f32 kernels for dense layouts (kernels_fast.c). Each
 * returns 0 when done, -1 when the layout is not its own (nothing written), -2 out of memory. */
#ifndef BORA_CPU_KERNELS_FAST_H
#define BORA_CPU_KERNELS_FAST_H

#include "cpu.h"

/* a dense f32 -> bf16 or bf16 -> f32 copy */
int fast_cast_f32(bora_backend *b, const bora_kernel_args *a);
int fast_elementwise_f32(bora_backend *b, const bora_kernel_args *a);
int fast_xent_f32(bora_backend *b, const bora_kernel_args *a, int *bad_target);
int fast_xent_grad_f32(bora_backend *b, const bora_kernel_args *a);
/* both in one pass per row; the gradient may be written over the logits */
int fast_xent_fused_f32(bora_backend *b, const bora_kernel_args *a, int *bad_target);
int fast_sum_f32(bora_backend *b, const bora_kernel_args *a);
int fast_sum_squares_f32(bora_backend *b, const bora_kernel_args *a);
/* the embedding's gradient: zero the table (or copy a third input's values, none in place), then
 * each fixed block of columns adds the rows in order (the reference's order per element) */
int fast_scatter_add_f32(bora_backend *b, const bora_kernel_args *a);
/* LayerNorm and its gradient over rows dense in their last axis (16 double lanes per row sum,
 * parameter gradients by fixed blocks of columns, rows in order) */
int fast_layernorm_f32(bora_backend *b, const bora_kernel_args *a);
int fast_layernorm_grad_f32(bora_backend *b, const bora_kernel_args *a);
/* RMSNorm and its gradient over rows dense in their last axis (Σx² in 16 double lanes per row,
 * dweight by fixed blocks of columns, rows in order) */
int fast_rms_norm_f32(bora_backend *b, const bora_kernel_args *a);
int fast_rms_norm_grad_f32(bora_backend *b, const bora_kernel_args *a);
/* A fused elementwise group, tile by tile (BORA_ERR_UNSUPPORTED for a step it has no loop for). */
bora_status cpu_run_fused(bora_backend *b, const bora_fused *f);
/* attention.c: blocks of query rows on sgemm; -3 when oneDNN fails */
int fast_attention_f32(bora_backend *b, const bora_kernel_args *a);
int fast_attention_grad_f32(bora_backend *b, const bora_kernel_args *a);
/* bora_backend_ops.prepare for attention: its bf16 products' primitives (trainer.mp c=bf16) */
bora_status cpu_prepare_attention(bora_backend *b, const bora_kernel_args *a);

#endif
