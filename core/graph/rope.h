/* core/graph/rope.h — rotary position embedding tables, computed once on the host in double
 * precision from a rope spec, with the formulas of Hugging Face transformers'
 * modeling_rope_utils (default, linear, dynamic NTK, llama3, yarn), then rounded to f32 for the
 * graph.
 *
 *     bora_rope_spec s = bora_rope_spec_default();
 *     s.kind = BORA_ROPE_LLAMA3;
 *     s.theta = 500000;
 *     s.rotary_dims = 128;          // head_dim * partial_rotary_factor
 *     s.factor = 8;
 *     s.low_freq_factor = 1;
 *     s.high_freq_factor = 4;
 *     s.original_max_position_embeddings = 8192;
 *     size_t n;
 *     if (bora_rope_table_elems(&s, 4096, BORA_ROPE_ROTATE_HALF, &n) != BORA_OK) ...
 *     float *cos = malloc(n * sizeof *cos), *sin = malloc(n * sizeof *sin);
 *     bora_rope_table_f32(&s, 0, 4096, BORA_ROPE_ROTATE_HALF, cos, sin);   // (position, 128)
 *
 * Errors are status-plus-message (bora_error_get) and name the spec field together with the
 * Hugging Face config key it comes from. */
#ifndef BORA_GRAPH_ROPE_H
#define BORA_GRAPH_ROPE_H

#include <bora/graph.h>
#include <bora/host.h>
#include <stddef.h>
#include <stdint.h>

/* bora_rope_kind, bora_rope_layout, bora_rope_spec and bora_rope_spec_default() are the SDK's
 * (sdk/bora/graph.h), so a model plugin passes a spec to bora_graph_api.rope. */

/* The kind's rope_type name ("default", "linear", ..) and back (-1 when unknown). */
const char *bora_rope_kind_name(bora_rope_kind kind);
int bora_rope_kind_parse(const char *name);

/* Check a spec; an error names the field and its Hugging Face key and says what is allowed. */
bora_status bora_rope_check(const bora_rope_spec *s);

/* inv_freq (rotary_dims/2) and the attention factor transformers multiplies cos and sin by
 * (1 except for yarn). Either output may be NULL. */
bora_status bora_rope_inv_freq(const bora_rope_spec *s, double *inv_freq, double *attention_factor);

/* Elements of one table (cos or sin) for `positions` rows in a layout: positions * dims/2
 * (COMPACT) or positions * dims, checked for overflow. */
bora_status bora_rope_table_elems(const bora_rope_spec *s, int64_t positions,
                                  bora_rope_layout layout, size_t *elems);

/* The compact tables for positions first .. first+positions-1, in double:
 * cos[p][i] = attention_factor * cos(p * inv_freq[i]), sin likewise; (positions, dims/2). */
bora_status bora_rope_table(const bora_rope_spec *s, int64_t first, int64_t positions,
                            double *cos_out, double *sin_out);

/* The same rounded to f32 and laid out as `layout` says: (positions, dims/2) or
 * (positions, dims). */
bora_status bora_rope_table_f32(const bora_rope_spec *s, int64_t first, int64_t positions,
                                bora_rope_layout layout, float *cos_out, float *sin_out);

#endif
