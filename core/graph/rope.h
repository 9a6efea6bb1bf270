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

#include <bora/host.h>
#include <stddef.h>
#include <stdint.h>

/* rope_scaling.rope_type (absent: default). */
typedef enum bora_rope_kind {
    BORA_ROPE_DEFAULT = 0, /* inv_freq[i] = theta^(-2i/dims) */
    BORA_ROPE_LINEAR,      /* default / factor (position interpolation) */
    BORA_ROPE_DYNAMIC,     /* NTK-aware: theta grows with the sequence past the original */
    BORA_ROPE_LLAMA3,      /* Llama 3.1: long wavelengths / factor, short kept, a smooth band */
    BORA_ROPE_YARN,        /* YaRN: a ramp between interpolation and extrapolation per dim */
} bora_rope_kind;

/* How a table's half-width row is laid over the rotary dims. Hugging Face's rotate-half pairs
 * dim i with dim i + dims/2, so cos/sin repeat over the two halves: [c0 .. c(h-1) c0 .. c(h-1)].
 * Meta's original layout (interleaved) pairs dims 2i and 2i+1, so each value repeats over its
 * pair: [c0 c0 c1 c1 ..]. COMPACT is the bare (position, dims/2) table. */
typedef enum bora_rope_layout {
    BORA_ROPE_COMPACT = 0,
    BORA_ROPE_ROTATE_HALF,
    BORA_ROPE_INTERLEAVED,
} bora_rope_layout;

typedef struct bora_rope_spec {
    bora_rope_kind kind; /* rope_scaling.rope_type */
    double theta;        /* rope_theta (> 0; yarn also needs != 1) */
    int64_t rotary_dims; /* int(head_dim * partial_rotary_factor): even, >= 2 (dynamic: >= 4) */
    /* rope_scaling.factor (> 0; linear, dynamic, llama3, yarn). A yarn config that has none
     * means max_position_embeddings / original_max_position_embeddings, as in transformers; the
     * config's reader passes that ratio. */
    double factor;
    /* rope_scaling.original_max_position_embeddings (llama3, yarn); for dynamic, the model's
     * max_position_embeddings, past which the base grows. */
    int64_t original_max_position_embeddings;
    double low_freq_factor;  /* llama3: rope_scaling.low_freq_factor (> 0, < high) */
    double high_freq_factor; /* llama3: rope_scaling.high_freq_factor */
    /* yarn: 0 means unset, as transformers' `or 32` / `or 1` (defaults 32 and 1). */
    double beta_fast, beta_slow;
    /* yarn: 0 means unset. Unset attention_factor is m(factor, mscale) /
     * m(factor, mscale_all_dim) when both are set, else m(factor, 1), where
     * m(s, k) = 0.1 k ln(s) + 1 (1 for s <= 1). */
    double mscale, mscale_all_dim, attention_factor;
    int truncate; /* yarn: rope_scaling.truncate (default 1: floor/ceil the correction range) */
    /* dynamic: the current sequence length (0: not yet past the original); the base only grows
     * when it exceeds original_max_position_embeddings. */
    int64_t seq_len;
} bora_rope_spec;

/* transformers' defaults: kind default, theta 10000, factor 1, truncate 1, all else 0. */
bora_rope_spec bora_rope_spec_default(void);

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
