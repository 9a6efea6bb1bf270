/* bora/graph.h — building computations: tensors with named axes, parameters, inputs, ops.
 *
 * A model plugin describes only its forward computation; the host differentiates it, plans its
 * memory and runs it on a backend. Every axis has a name, elementwise ops align operands by
 * name, and dot() contracts the names it is given (Haliax semantics: shared names that are not
 * contracted are batch axes). docs/design.md §3 describes what the host does with a graph. A
 * worked example, a linear layer with a bias and GELU:
 *
 *     #include <bora/graph.h>
 *
 *     // x: (batch, position, embed) -> (batch, position, mlp)
 *     static bora_tensor *mlp_up(bora_graph *g, bora_tensor *x, int64_t embed, int64_t mlp)
 *     {
 *         bora_axis w_axes[] = {{"embed", embed}, {"mlp", mlp}};
 *         bora_tensor *w = bora_param(g, "h.0.mlp.c_fc.weight", BORA_DTYPE_F32, 2, w_axes,
 *                                     bora_init_normal(0.02), 0);
 *         bora_tensor *b = bora_param(g, "h.0.mlp.c_fc.bias", BORA_DTYPE_F32, 1, w_axes + 1,
 *                                     bora_init_zeros(), BORA_PARAM_NO_DECAY);
 *         const char *contract[] = {"embed"};
 *         bora_tensor *h = bora_dot(g, x, w, 1, contract);   // (batch, position, mlp)
 *         return bora_unary(g, BORA_OP_GELU_TANH, bora_add(g, h, b));  // b broadcasts by name
 *     }
 *
 * Builders never fail silently: a bad call returns NULL and the graph remembers the first error
 * (it names the op, both tensors and their axes); every later call with a NULL argument returns
 * NULL too, so a build function can check once at the end, as build() returns
 * bora_graph_status(g).
 */
#ifndef BORA_GRAPH_H
#define BORA_GRAPH_H

#include <bora/host.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bora_graph bora_graph;   /* a graph under construction; owned by the host */
typedef struct bora_tensor bora_tensor; /* a value in a graph; owned by its graph */
typedef struct bora_graph_api bora_graph_api;

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

/* What a graph is built for (docs/design.md §3; sdk/bora/model.h lists each mode's inputs). */
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

/* One named axis of a shape. */
typedef struct bora_axis {
    const char *name;
    int64_t size;
} bora_axis;

/* How a parameter starts, computed on the host from Philox keyed by (seed, name, element). */
typedef enum bora_init_kind {
    BORA_INIT_ZEROS = 1,
    BORA_INIT_ONES = 2,
    BORA_INIT_CONSTANT = 3, /* value */
    BORA_INIT_NORMAL = 4,   /* mean 0, standard deviation value */
    /* (ABI 1.15) Whisper's sinusoids over a 2-d (length, channels) parameter, channels even and
     * at least 4: row t is sin(t·f_i) for i < channels/2, then cos(t·f_i), with f_i =
     * exp(-i·ln(value)/(channels/2 - 1)) and value the largest timescale (0: 10000). Each step is
     * rounded to f32 as transformers' sinusoids() computes it. */
    BORA_INIT_SINUSOIDS = 5
} bora_init_kind;

typedef struct bora_init {
    int32_t kind; /* a bora_init_kind */
    int32_t reserved;
    double value;
} bora_init;

static inline bora_init bora_init_zeros(void)
{
    return (bora_init){BORA_INIT_ZEROS, 0, 0.0};
}
static inline bora_init bora_init_ones(void)
{
    return (bora_init){BORA_INIT_ONES, 0, 0.0};
}
static inline bora_init bora_init_constant(double v)
{
    return (bora_init){BORA_INIT_CONSTANT, 0, v};
}
static inline bora_init bora_init_normal(double std)
{
    return (bora_init){BORA_INIT_NORMAL, 0, std};
}
static inline bora_init bora_init_sinusoids(void)
{
    return (bora_init){BORA_INIT_SINUSOIDS, 0, 10000.0};
}

/* Parameter flags. */
#define BORA_PARAM_NO_DECAY 1u /* excluded from weight decay (norms, biases, GPT-2's embeddings) */
/* ABI 1.11: a matrix stored (fan_in, fan_out), as GPT-2's Conv1D: its first axis is the input
 * (nn.Linear's weight, (fan_out, fan_in), has no flag) */
#define BORA_PARAM_IN_OUT 2u
/* ABI 1.15: a frozen parameter (PyTorch's requires_grad False: Whisper's sinusoidal encoder
 * positions). Autodiff gives it no gradient and optimizers never see it (no update, no state,
 * not in the gradient norm); it is saved in checkpoints, exported and imported like any other,
 * and counted among the parameters but not in the model FLOPs of throughput/mfu. */
#define BORA_PARAM_FROZEN 4u

/* Op ids: the index of a backend's kernel table. Only ever appended. */
typedef enum bora_op {
    BORA_OP_COPY = 1, /* out = in, any strides; also converts dtype (cast, contiguous) */
    BORA_OP_FILL = 2, /* out = value (bora_opt_scalar) */
    BORA_OP_ADD = 3,  /* elementwise, operands already aligned to the output's axes */
    BORA_OP_SUB = 4,
    BORA_OP_MUL = 5,
    BORA_OP_DIV = 6,
    BORA_OP_NEG = 7,
    BORA_OP_EXP = 8,
    BORA_OP_LOG = 9,
    BORA_OP_SQRT = 10,
    BORA_OP_RSQRT = 11,
    BORA_OP_TANH = 12,
    BORA_OP_SIGMOID = 13,
    BORA_OP_RELU = 14,
    BORA_OP_SILU = 15,
    BORA_OP_GELU_TANH = 16,      /* GPT-2's gelu_new */
    BORA_OP_GELU_EXACT = 17,     /* x·Φ(x) with erf */
    BORA_OP_SCALE = 18,          /* out = in · value (bora_opt_scalar) */
    BORA_OP_ACT_GRAD = 19,       /* (x, dy) -> dx for an activation (bora_opt_act) */
    BORA_OP_SUM = 20,            /* sum over the input's trailing axes (bora_opt_reduce) */
    BORA_OP_MAX = 21,            /* max over the input's trailing axes (bora_opt_reduce) */
    BORA_OP_MATMUL = 22,         /* (B, M, K) x (B, K, N) -> (B, M, N), any strides with one of
                                each operand's last two unit-stride; under trainer.mp c=bf16 the
                                operands are bf16 and the result f32 (accumulated in f32).
                                ABI 1.8: with a third input, a bias (..., N) of the result's dtype,
                                unit stride along its last axis and stride 0 along every other
                                (one row): each row of the result is the finished sum plus the
                                bias, in the result's dtype (the bits of the product then ADD).
                                Optional: the host asks for it by dtypes and adds the bias
                                itself where the backend has no such kernel */
    BORA_OP_LAYERNORM = 23,      /* (R, D), gamma (D), beta (D) -> y (R, D), mean (R), rstd (R) */
    BORA_OP_LAYERNORM_GRAD = 24, /* (x, gamma, mean, rstd, dy) -> dx, dgamma, dbeta */
    BORA_OP_SOFTMAX = 25,        /* over the last axis */
    BORA_OP_LOG_SOFTMAX = 26,    /* over the last axis */
    BORA_OP_XENT = 27,           /* logits (R, V), targets i32 (R) -> loss sum (), lse (R) */
    BORA_OP_XENT_GRAD = 28,      /* (logits, targets, lse, dloss ()) -> dlogits (R, V) */
    BORA_OP_GATHER = 29,         /* table (V, D), ids i32 (R) -> (R, D) */
    BORA_OP_SCATTER_ADD = 30,    /* ids i32 (R), rows (R, D) -> table (V, D), zeros elsewhere;
                                    ABI 1.7: with a third input init (V, D), dense like the
                                    table, the rows go onto init's values (init may be the
                                    output's own storage) */
    /* q (B,H,T,E), k (B,H,S,E), v (B,H,S,E), [seg_q (B,T), seg_k (B,S)], [key length ()]
     * -> out (B,H,T,E), lse (B,H,T) */
    BORA_OP_ATTENTION = 31,
    /* (q, k, v, out, lse, dout, [seg_q, seg_k], [key length]) -> dq, dk, dv */
    BORA_OP_ATTENTION_GRAD = 32,
    BORA_OP_PAD = 33,    /* out = zeros with in placed at start along axis (bora_opt_pad) */
    BORA_OP_CONCAT = 34, /* inputs joined along axis (bora_opt_pad.axis) */
    /* ids i32 (R) -> (R, V): 1 where v == id, else 0 (an ignored id gives a zero row); the
     * primitive cross-entropy's decomposition needs */
    BORA_OP_ONE_HOT = 35,
    /* ([seg_q (B,T), seg_k (B,S)], [key length ()]) -> (B, T, S): 0 where attention is allowed,
     * -inf elsewhere (bora_opt_attention); the primitive attention's decomposition needs */
    BORA_OP_ATTENTION_BIAS = 36,
    /* (dst, value, [start i32 ()]) -> dst: value written into dst from start along an axis
     * (bora_opt_pad.axis), in place; the rest of dst unchanged. A start that leaves value past
     * dst's end fails the kernel with BORA_ERR_INVALID. */
    BORA_OP_WRITE_SLICE = 37,
    /* (logits (R, V), targets i32 (R), dloss ()) -> loss sum (), lse (R), dlogits (R, V) (ABI
     * 1.4; options bora_opt_xent): XENT and XENT_GRAD in one pass over each row, with their
     * bits. dlogits may be logits' own storage: the host plans it so when nothing else reads the
     * logits, and the kernel then writes the gradient over them. Optional: without it the host
     * runs the two kernels. */
    BORA_OP_XENT_FUSED = 38,
    /* x -> Σ x·x over the input's trailing axes (ABI 1.5; bora_opt_reduce), each square rounded
     * to x's dtype first: the bits of MUL (x, x) then SUM, without the squares in memory (a
     * gradient norm). The host uses it for a dense x; optional: without it, the two kernels. */
    BORA_OP_SUM_SQUARES = 39,
    /* ABI 1.9: the elementwise family a modern decoder needs. The host asks only backends built
     * for 1.9 or later for these; on an older backend a graph using them fails to build, naming
     * the op. Every operand has the output's dtype (a float type), aligned to its axes. */
    BORA_OP_SIN = 40,
    BORA_OP_COS = 41,
    BORA_OP_ABS = 42,
    BORA_OP_SIGN = 43, /* 1 for x > 0, -1 for x < 0, x itself for ±0 and NaN */
    /* (a, b): b where b < a (MINIMUM) or b > a (MAXIMUM) or b is NaN, else a: a tie gives a,
     * and a NaN in either operand is the result */
    BORA_OP_MINIMUM = 44,
    BORA_OP_MAXIMUM = 45,
    /* (a, b) -> a mask: 1 where the comparison holds, else 0, in the operands' dtype (so it
     * multiplies, adds as a bias and selects without a cast, and the fused path takes it); any
     * comparison with NaN is false but NOT_EQUAL's */
    BORA_OP_LESS = 46,
    BORA_OP_LESS_EQUAL = 47,
    BORA_OP_EQUAL = 48,
    BORA_OP_NOT_EQUAL = 49,
    BORA_OP_WHERE = 50, /* (mask, a, b): a where mask != 0 (NaN included), else b */
    /* () -> (n): start + step·i for i in [0, n), computed in double and rounded once to the
     * output's dtype (f32, f64 or i32: exact; the host checks an i32 ramp fits) (bora_opt_iota) */
    BORA_OP_IOTA = 51,
    /* (x (R, D), [weight (D)]) -> y (R, D), rstd (R) (bora_opt_rms_norm): RMSNorm as Hugging
     * Face's LlamaRMSNorm and GemmaRMSNorm compute it, y = x · rstd · (weight + weight_offset),
     * rstd = 1 / sqrt(mean(x², over D) + eps); without the weight input, y = x · rstd. The mean
     * of squares, rstd and the scaling are computed in f32 or wider whatever x's dtype, and y is
     * rounded once to x's dtype at the end (see bora_graph_api.rms_norm). rstd is kept for the
     * backward. Every operand has x's dtype, rstd too (a backend taking a bf16 x keeps its
     * statistics wider inside the kernel, but the rstd it hands the backward is bf16). */
    BORA_OP_RMS_NORM = 52,
    /* (x, [weight], rstd, dy) -> dx, [dweight] (bora_opt_rms_norm): dweight = Σ over rows of
     * dy · x · rstd, the same whatever weight_offset */
    BORA_OP_RMS_NORM_GRAD = 53,
    /* (x, cos (P, D), sin (P, D), [offset i32 ()]) -> y like x (bora_opt_rope): rotary position
     * embeddings over x's head-dim axis, its first D dims rotated by the table row of each
     * position (its index along the position axis, plus the options' offset and the runtime
     * offset), the rest copied. Rotate-half pairs dim i with i + D/2, interleaved 2i with 2i+1;
     * y = x·cos + rot(x)·sin, each product rounded, then their sum: the bits of MUL, NEG, MUL,
     * ADD. With inverse set the sine is negated (the rotation's transpose, its gradient). A row
     * at or past P fails the kernel with BORA_ERR_INVALID. */
    BORA_OP_ROPE = 54,
    /* ABI 1.11. (logits (R, V) f32 or f64, counter i64 (2)) -> i32 (R) (bora_opt_sample): row r's
     * token drawn from softmax(logits[r]) by inverting its cumulative distribution. With step =
     * counter[0] and row = counter[1] + r (the index of the row among the step's rows, so a token
     * depends on (seed, stream, step, row) alone, not on micro-batching or threads):
     *   u = bora_philox_uniform(seed, row mod 2^32, row >> 32, stream, step), in [0, 1) with 53
     *       bits (sdk/bora/philox.h: Philox4x32-10, key seed, counter words in that order);
     *   w_v = exp(logits[r][v] - max_v logits[r][v]) and total = w_0 + .. + w_(V-1), in f64,
     *       summed in order v = 0 .. V-1;
     *   the token is the first v with w_0 + .. + w_v > u · total (should rounding leave none,
     *       the last v with w_v > 0).
     * A row with a non-finite logit (or none) gives -1. A step outside 0 .. 2^32-1 or a negative
     * counter[1] fails the kernel with BORA_ERR_INVALID; the stream is below 2^32. */
    BORA_OP_SAMPLE = 55,
    /* ABI 1.13: the ops a mixture-of-experts layer needs, asked only of backends built for 1.13
     * or later (on an older one a graph using them fails to build, naming the op).
     * x (R, D) of a float dtype -> indices i32 (R, k) (bora_opt_top_k): each row's k largest
     * entries, largest first; equal values in the order of their index (the lower first), NaN
     * above every number (NaNs among themselves by index), -0 equal to +0. With row_offsets set
     * each index of row r is plus r·D: the element's position in x taken as dense (R·D). */
    BORA_OP_TOP_K = 56,
    /* keys i32 (N) -> i32 (N): the permutation that sorts keys ascending, stably (equal keys in
     * the order of their index): keys[out[0]] <= keys[out[1]] <= .. */
    BORA_OP_ARGSORT = 57,
    /* keys i32 (N) -> counts i32 (E): how many keys equal each e in [0, E). A key outside
     * [0, E) fails the kernel with BORA_ERR_INVALID. */
    BORA_OP_BINCOUNT = 58,
    /* (x (R, K), w (E, K, N), sizes i32 (E)) -> y (R, N): rows in groups by order, group e the
     * sizes[e] rows after those of groups 0 .. e-1, each times its own w[e]; rows past the sum
     * of the sizes are zero. A negative size, or sizes summing past R, fails the kernel with
     * BORA_ERR_INVALID. Any strides with one of each operand's last two unit-stride (w read
     * transposed for x's gradient). Under trainer.mp c=bf16 x and w are bf16 and y f32, as
     * BORA_OP_MATMUL. */
    BORA_OP_GROUPED_MATMUL = 59,
    /* (x (R, K), dy (R, N), sizes i32 (E)) -> dw (E, K, N): w's gradient, dw[e] = x_eᵀ · dy_e
     * over group e's rows (zero for an empty group; rows past the sum count nothing). Sizes
     * fail as GROUPED_MATMUL's. Under c=bf16 x and dy are bf16 and dw f32. */
    BORA_OP_GROUPED_MATMUL_GRAD = 60,
    /* ABI 1.15: a 1-d convolution (Whisper's audio stem), asked only of backends built for 1.15
     * or later; an older one, or one without the kernels, gets the host's decomposition (zeros
     * concatenated at both ends, the length axis split by the stride, one product per kernel
     * tap). With s = stride >= 1, p = padding >= 0 and J = (L + 2p - K) / s + 1 >= 1, the padded
     * x_p[b, c, i] = x[b, c, i - p] for p <= i < L + p and 0 elsewhere (bora_opt_conv1d):
     * x (B, C, L), w (O, C, K) -> y (B, O, J), y[b, o, j] = Σ_c Σ_k w[o, c, k] · x_p[b, c, j·s + k]
     * (PyTorch's conv1d without bias). Any strides; under trainer.mp c=bf16 x and w are bf16 and
     * y f32, accumulated in f32, as BORA_OP_MATMUL. */
    BORA_OP_CONV1D = 61,
    /* (dy (B, O, J), w (O, C, K)) -> dx (B, C, L): x's gradient, dx[b, c, i - p] = Σ_o Σ_(j, k:
     * j·s + k = i) dy[b, o, j] · w[o, c, k] (the transposed convolution); positions no window
     * reaches get 0. Under c=bf16 dy and w are bf16 and dx f32. */
    BORA_OP_CONV1D_GRAD_INPUT = 62,
    /* (x (B, C, L), dy (B, O, J)) -> dw (O, C, K): w's gradient, dw[o, c, k] = Σ_b Σ_j dy[b, o, j]
     * · x_p[b, c, j·s + k]. Under c=bf16 x and dy are bf16 and dw f32. */
    BORA_OP_CONV1D_GRAD_WEIGHT = 63,
    BORA_OP_COUNT_ = 64 /* one past the last op id */
} bora_op;

/* Options structs; each begins with its own struct_size. */
typedef struct bora_opt_scalar {
    uint32_t struct_size;
    uint32_t reserved;
    double value;
} bora_opt_scalar;

typedef struct bora_opt_act {
    uint32_t struct_size;
    int32_t op; /* the activation's op id (BORA_OP_GELU_TANH, ...) */
} bora_opt_act;

typedef struct bora_opt_reduce {
    uint32_t struct_size;
    int32_t n_reduced; /* how many trailing input axes are reduced */
} bora_opt_reduce;

typedef struct bora_opt_norm {
    uint32_t struct_size;
    uint32_t reserved;
    double eps;
} bora_opt_norm;

/* BORA_OP_RMS_NORM and its gradient (ABI 1.9): the scale is weight + weight_offset (0 for
 * Llama's weight, 1 for Gemma's x·(1 + w)). */
typedef struct bora_opt_rms_norm {
    uint32_t struct_size;
    uint32_t reserved;
    double eps;
    double weight_offset;
} bora_opt_rms_norm;

typedef struct bora_opt_xent {
    uint32_t struct_size;
    int32_t ignore_index; /* targets equal to it contribute nothing */
    double z_loss;        /* weight of lse² added per counted position (0: none) */
} bora_opt_xent;

typedef struct bora_opt_attention {
    uint32_t struct_size;
    int32_t causal;     /* query t (at position L - T + t) sees keys s <= L - T + t */
    double scale;       /* applied to q·k, usually 1/sqrt(head_dim) */
    int32_t segments;   /* 1 when segment ids are given: attend only within a document */
    int32_t key_length; /* 1 when the last input is a 0-d i32 runtime key length L (else L = S) */
    /* (ABI 1.7) BORA_DTYPE_BF16 in a graph computing in bf16 (trainer.mp c=bf16): the backend
     * may round q, k, v, the output's gradient, the probabilities and their gradient to bf16 for
     * the products, accumulating in f32; softmax, inputs and results stay f32. 0: every product
     * in the inputs' dtype. */
    int32_t product_dtype;
    int32_t reserved;
    /* (ABI 1.9) W > 0: query t (at position p = L - T + t) sees only keys s > p - W, on top of the
     * other masks (Mistral's sliding window); 0: no window. The host sets it only for backends
     * built for 1.9 or later. Grouped-query attention needs no option here: k and v (B,H_kv,S,E)
     * have H_kv heads dividing q's H, and query head h reads kv head h / (H / H_kv). */
    int64_t sliding_window;
    /* (ABI 1.12) c > 0: each scaled score s = scale·q·k becomes c·tanh(s / c) before the masks
     * and the softmax (Gemma 2's attn_logit_softcapping); the gradient goes through the tanh
     * (ds = dc·(1 - tanh²)). 0: none. The host sets it only for backends built for 1.12 or later
     * and gives older ones the decomposition. */
    double softcap;
} bora_opt_attention;

typedef struct bora_opt_iota { /* ABI 1.9 */
    uint32_t struct_size;
    uint32_t reserved;
    double start;
    double step;
} bora_opt_iota;

typedef struct bora_opt_rope { /* ABI 1.9 */
    uint32_t struct_size;
    int32_t position_axis; /* x's axis whose index is the position */
    int32_t dim_axis;      /* x's head-dim axis */
    int32_t layout;        /* a bora_rope_layout: rotate-half or interleaved */
    int64_t rotary_dims;   /* D: the tables' width, even, at most the head dim */
    int64_t offset;        /* added to every position (with the runtime offset, if given) */
    int32_t inverse;       /* 1: the sine negated (the gradient) */
    int32_t reserved;
} bora_opt_rope;

typedef struct bora_opt_sample { /* ABI 1.11 */
    uint32_t struct_size;
    uint32_t reserved;
    uint64_t seed;   /* Philox's key */
    uint64_t stream; /* what the draws are for, so two uses of one seed never share numbers */
} bora_opt_sample;

typedef struct bora_opt_top_k { /* ABI 1.13 */
    uint32_t struct_size;
    int32_t row_offsets; /* 1: each index of row r plus r·D (a position in x as dense (R·D)) */
    int64_t k;           /* 1 <= k <= D */
} bora_opt_top_k;

typedef struct bora_opt_conv1d { /* ABI 1.15: BORA_OP_CONV1D and its gradients */
    uint32_t struct_size;
    int32_t stride;  /* s >= 1 */
    int64_t padding; /* p >= 0 zeros at both ends of the length axis */
} bora_opt_conv1d;

typedef struct bora_opt_pad {
    uint32_t struct_size;
    int32_t axis;
    int64_t start;
} bora_opt_pad;

/* ABI 1.9: rotary position embeddings (bora_graph_api.rope). */

/* rope_scaling.rope_type of a Hugging Face config (absent: default); the formulas are those of
 * transformers' modeling_rope_utils. */
typedef enum bora_rope_kind {
    BORA_ROPE_DEFAULT = 0, /* inv_freq[i] = theta^(-2i/dims) */
    BORA_ROPE_LINEAR,      /* default / factor (position interpolation) */
    BORA_ROPE_DYNAMIC,     /* NTK-aware: theta grows with the sequence past the original */
    BORA_ROPE_LLAMA3,      /* Llama 3.1: long wavelengths / factor, short kept, a smooth band */
    BORA_ROPE_YARN,        /* YaRN: a ramp between interpolation and extrapolation per dim */
} bora_rope_kind;

/* How the rotary dims pair up. Hugging Face's rotate-half pairs dim i with dim i + dims/2 (its
 * tables repeat over the two halves: [c0 .. c(h-1) c0 .. c(h-1)]); Meta's original layout
 * (interleaved) pairs dims 2i and 2i+1 ([c0 c0 c1 c1 ..]). COMPACT is the bare (position,
 * dims/2) table, for the host's table functions only. */
typedef enum bora_rope_layout {
    BORA_ROPE_COMPACT = 0,
    BORA_ROPE_ROTATE_HALF,
    BORA_ROPE_INTERLEAVED,
} bora_rope_layout;

/* A rope spec: the config keys the tables are computed from. Start from
 * bora_rope_spec_default() and set what the model's config says. */
typedef struct bora_rope_spec {
    uint32_t struct_size; /* sizeof(bora_rope_spec) as the caller was compiled */
    int32_t kind;         /* a bora_rope_kind: rope_scaling.rope_type */
    double theta;         /* rope_theta (> 0; yarn also needs != 1) */
    int64_t rotary_dims;  /* int(head_dim * partial_rotary_factor): even, >= 2 (dynamic: >= 4) */
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
    int32_t truncate; /* yarn: rope_scaling.truncate (default 1: floor/ceil the correction range) */
    int32_t reserved;
    /* dynamic: the current sequence length (0: not yet past the original); the base only grows
     * when it exceeds original_max_position_embeddings. bora_graph_api.rope sets it itself. */
    int64_t seq_len;
} bora_rope_spec;

/* transformers' defaults: kind default, theta 10000, factor 1, truncate 1, all else 0. */
static inline bora_rope_spec bora_rope_spec_default(void)
{
    bora_rope_spec s = {0};
    s.struct_size = (uint32_t)sizeof s;
    s.kind = BORA_ROPE_DEFAULT;
    s.theta = 10000.0;
    s.factor = 1.0;
    s.truncate = 1;
    return s;
}

/* Options of bora_graph_api.rope. */
typedef struct bora_rope_opts {
    uint32_t struct_size;
    int32_t layout;            /* BORA_ROPE_ROTATE_HALF (0 means it too) or BORA_ROPE_INTERLEAVED */
    const char *position_axis; /* NULL: "position" */
    const char *head_dim_axis; /* NULL: "head_dim" */
    /* The spec; its rotary_dims (at most the head dim) rotate, the rest of the head dim passes
     * through unchanged (partial_rotary_factor). */
    const bora_rope_spec *spec;
    int64_t offset;        /* the position of x's first row along the position axis */
    bora_tensor *position; /* NULL, or a runtime extent (bora_extent) added to offset: decode's
                              new token over a KV cache */
} bora_rope_opts;

/* Options of bora_dot: a fused bias and activation applied after the product. */
typedef struct bora_dot_opts {
    uint32_t struct_size;
    int32_t activation; /* 0, or BORA_OP_GELU_TANH / BORA_OP_GELU_EXACT / BORA_OP_RELU / ... */
    bora_tensor *bias;  /* NULL, or a tensor whose axes are among the result's */
} bora_dot_opts;

/* Options of bora_cross_entropy. */
typedef struct bora_xent_opts {
    uint32_t struct_size;
    int32_t ignore_index; /* default -100 when opts is NULL */
    double z_loss;
} bora_xent_opts;

/* Options of bora_attention. Axis names default to position / key_position / head_dim. */
typedef struct bora_attention_opts {
    uint32_t struct_size;
    int32_t causal;
    double scale;              /* 0: 1/sqrt(head_dim) */
    bora_tensor *segment_ids;  /* NULL, or i32 (batch, position): attend within a document */
    const char *query_axis;    /* the queries' position axis */
    const char *key_axis;      /* the keys' position axis (rename queries' to make it) */
    const char *head_dim_axis; /* contracted between q and k */
    bora_tensor *key_length;   /* NULL, or a runtime extent (bora_extent): keys at and past it
                                  are not attended, and queries are its last positions */
    int32_t upcast;            /* (ABI 1.7) 1: keep a backend's attention kernel in f32 when
                                  the graph computes in bf16 (trainer.mp c=bf16); 0: it may take
                                  bf16 products. (Where the backend has no attention kernel, the
                                  products are the graph's matmuls, bf16 under c=bf16.) */
    /* (ABI 1.9) Grouped-query attention: kv_head_axis names k's and v's head axis (H_kv heads),
     * which stands in them for q's head_axis (H heads; NULL: "head"); H_kv must divide H, and
     * query head h reads kv head h / (H / H_kv), Hugging Face's repeat_kv order (kv head j serves
     * query heads j·g .. j·g+g-1, g = H / H_kv). The two names differ because the axes differ in
     * size and meaning; K and V are never copied per group. NULL: k and v have q's head axis. */
    const char *head_axis;
    const char *kv_head_axis;
    /* (ABI 1.9) Mistral's sliding window, as transformers' masks compute it: W > 0 lets the query
     * at position i attend key j only where i - W < j <= i with causal (without causal, only the
     * lower bound i - W < j applies). It composes with segment_ids by both holding. With
     * key_length L the queries are the last T positions, query t at position i = L - T + t, so a
     * decode step (T = 1) at position L - 1 sees keys L - W .. L - 1 of the cache. 0: none. */
    int64_t sliding_window;
    /* (ABI 1.12) c > 0: each score s = scale·q·k is soft-capped to c·tanh(s / c) before the
     * masks and the softmax (Gemma 2's attn_logit_softcapping), forward and backward; 0: none. */
    double softcap;
} bora_attention_opts;

/* Options of bora_conv1d (ABI 1.15). */
typedef struct bora_conv1d_opts {
    uint32_t struct_size;
    int32_t stride;          /* 0 or 1: every position; 2: every second (Whisper's conv2) */
    int64_t padding;         /* zeros added at both ends of the length axis */
    const char *length_axis; /* x's axis the kernel slides along; the result keeps its name */
    const char *in_axis;     /* x's and w's input-channel axis, contracted */
    const char *kernel_axis; /* w's kernel axis */
} bora_conv1d_opts;

/* The builder's functions; reached through every graph, so call sites read bora_add(g, a, b). */
struct bora_graph_api {
    uint32_t struct_size;
    uint32_t reserved;

    /* What the graph is built for (a bora_mode). */
    int32_t (*mode)(bora_graph *g);
    /* The first error of the build, with its message kept by the host (BORA_OK if none). */
    bora_status (*status)(bora_graph *g);

    /* A trainable parameter, named as in the Hugging Face state dict; shared by name across the
     * run's graphs (the same name must have the same shape and dtype). */
    bora_tensor *(*param)(bora_graph *g, const char *name, int32_t dtype, int32_t ndim,
                          const bora_axis *axes, bora_init init, uint32_t flags);
    /* A tensor the host fills before each execution (token ids, targets, a 0-d learning rate). */
    bora_tensor *(*input)(bora_graph *g, const char *name, int32_t dtype, int32_t ndim,
                          const bora_axis *axes);
    /* Give t a name for messages and reports. Returns t. */
    bora_tensor *(*name)(bora_graph *g, bora_tensor *t, const char *name);

    /* Views: no copy, no kernel. */
    bora_tensor *(*slice)(bora_graph *g, bora_tensor *t, const char *axis, int64_t start,
                          int64_t length);
    bora_tensor *(*permute)(bora_graph *g, bora_tensor *t, int32_t n, const char *const *order);
    bora_tensor *(*rename)(bora_graph *g, bora_tensor *t, const char *from, const char *to);
    /* Split axis into n axes (sizes multiply to its size), in its place. */
    bora_tensor *(*split)(bora_graph *g, bora_tensor *t, const char *axis, int32_t n,
                          const bora_axis *parts);
    /* Merge n adjacent axes, in order, into one named into (copies first if strides demand). */
    bora_tensor *(*merge)(bora_graph *g, bora_tensor *t, int32_t n, const char *const *axes,
                          const char *into);
    /* Add an axis (first) along which t repeats. */
    bora_tensor *(*broadcast)(bora_graph *g, bora_tensor *t, bora_axis axis);

    /* Math. */
    bora_tensor *(*unary)(bora_graph *g, int32_t op, bora_tensor *x);
    bora_tensor *(*binary)(bora_graph *g, int32_t op, bora_tensor *a, bora_tensor *b);
    bora_tensor *(*scale)(bora_graph *g, bora_tensor *x, double factor);
    bora_tensor *(*dot)(bora_graph *g, bora_tensor *a, bora_tensor *b, int32_t n_contract,
                        const char *const *contract, const bora_dot_opts *opts);
    /* Reduce over the named axes: BORA_OP_SUM, BORA_OP_MAX, or 0 for the mean. */
    bora_tensor *(*reduce)(bora_graph *g, int32_t op, bora_tensor *x, int32_t n,
                           const char *const *axes);
    bora_tensor *(*layernorm)(bora_graph *g, bora_tensor *x, bora_tensor *gamma, bora_tensor *beta,
                              const char *axis, double eps);
    bora_tensor *(*softmax)(bora_graph *g, bora_tensor *x, const char *axis);
    bora_tensor *(*log_softmax)(bora_graph *g, bora_tensor *x, const char *axis);
    /* Masked sum over every position of -log softmax(logits)[target], a 0-d tensor; positions
     * whose target is ignore_index count nothing. targets are i32 with logits' axes but vocab. */
    bora_tensor *(*cross_entropy)(bora_graph *g, bora_tensor *logits, bora_tensor *targets,
                                  const char *vocab_axis, const bora_xent_opts *opts);
    /* Rows of table (vocab, ...) picked by i32 ids: the result has ids' axes then table's rest. */
    bora_tensor *(*embedding)(bora_graph *g, bora_tensor *table, bora_tensor *ids,
                              const char *vocab_axis);
    /* Scaled dot-product attention. q (batch..., position, head_dim), k and v with the key axis
     * in place of position; any other shared axes (heads) are batch axes. */
    bora_tensor *(*attention)(bora_graph *g, bora_tensor *q, bora_tensor *k, bora_tensor *v,
                              const bora_attention_opts *opts);
    bora_tensor *(*cast)(bora_graph *g, bora_tensor *x, int32_t dtype);
    bora_tensor *(*contiguous)(bora_graph *g, bora_tensor *x);
    bora_tensor *(*concat)(bora_graph *g, const char *axis, int32_t n, bora_tensor *const *xs);

    /* Introspection. */
    int32_t (*ndim)(const bora_tensor *t);
    bora_axis (*axis)(const bora_tensor *t, int32_t i);
    int32_t (*dtype)(const bora_tensor *t);

    /* Mark x as a block boundary for recomputation (gradient checkpointing; a model calls it
     * when its gradient_checkpointing key is on): the forward nodes between two boundaries are
     * recomputed during the backward pass instead of kept, with bitwise the same results.
     * Returns x. */
    bora_tensor *(*checkpoint)(bora_graph *g, bora_tensor *x);

    /* A runtime extent: a 0-d i32 input, filled each execution like any input, holding a length
     * within [0, max] of an axis whose static size is max (a decode position, the valid rows of
     * a last batch). Ops that take one read it at run time; shapes never change. */
    bora_tensor *(*extent)(bora_graph *g, const char *name, int64_t max);

    /* Sequences per execution (the micro-batch) the host builds this graph for; a model sizes
     * its "batch" axis with it. */
    int64_t (*batch)(bora_graph *g);

    /* Apply graphs only: write value into dst, a parameter or an optimizer state slot, when the
     * graph runs (in order: reads of dst built before the assignment see the old value). */
    bora_status (*assign)(bora_graph *g, bora_tensor *dst, bora_tensor *value);

    /* ABI 1.2. Model state: a buffer that keeps its contents between executions and is shared
     * by name across the run's graphs (the same name must have the same shape and dtype), zero
     * when allocated, neither trained nor checkpointed: a KV cache, an encoder's output. */
    bora_tensor *(*state)(bora_graph *g, const char *name, int32_t dtype, int32_t ndim,
                          const bora_axis *axes);
    /* ABI 1.2. Write value into state (a bora_state, or what an earlier write_slice returned)
     * along axis from start: NULL for 0, or a 0-d i32 runtime extent or input (a decode
     * position). value has state's axes, no longer along axis. Returns the state after the
     * write, the tensor later reads must use so that they run after it. Not in train graphs:
     * nothing is differentiated through state. */
    bora_tensor *(*write_slice)(bora_graph *g, bora_tensor *state, bora_tensor *value,
                                const char *axis, bora_tensor *start);

    /* ABI 1.6. Mark x, an f32 value, as the residual stream (the running sum a transformer's
     * blocks add to). Under trainer.mp r=bf16 the stream is kept in memory as bf16: x is rounded
     * once here, the ops that read the result read it widened to f32 (exactly), and gradients
     * stay f32, passing through the rounding unchanged. Otherwise it returns x. A model calls it
     * on every new value of the stream and uses what it returns (bora_residual below works with
     * older hosts too). */
    bora_tensor *(*residual)(bora_graph *g, bora_tensor *x);

    /* ABI 1.9. A constant: value in every element of a tensor of the given axes and dtype (any
     * dtype; value must be exactly representable in an integer dtype). A 0-d constant (ndim 0)
     * broadcasts by name against anything, at no cost: bora_add(g, x, bora_full(g, ...)). */
    bora_tensor *(*full)(bora_graph *g, int32_t dtype, int32_t ndim, const bora_axis *axes,
                         double value);
    /* ABI 1.9. A ramp along one named axis: start + step·i for i in [0, axis.size), f32, f64 or
     * i32 (an i32 ramp needs integer start and step, and every value within i32). It is 1-d:
     * broadcasting by name places it along that axis of any tensor (positions, rotary angles). */
    bora_tensor *(*iota)(bora_graph *g, bora_axis axis, int32_t dtype, double start, double step);
    /* ABI 1.9. a where mask != 0, else b: mask, a and b of one float dtype, broadcast by name
     * (one operand's axes must hold the others'). The gradient flows to the chosen side only;
     * the mask has none. */
    bora_tensor *(*where)(bora_graph *g, bora_tensor *mask, bora_tensor *a, bora_tensor *b);
    /* ABI 1.9. RMSNorm over one named axis: x · rsqrt(mean(x², over axis) + eps) · (weight +
     * weight_offset), weight (axis only, x's dtype) optional: NULL scales by nothing (and
     * weight_offset is then ignored). The statistics and the scaling are f32 or wider whatever
     * x's dtype (under trainer.mp c=bf16 too), and the result is rounded to x's dtype once, after
     * the scaling. That is GemmaRMSNorm's order, so Gemma's x·(1 + w) is weight_offset = 1.
     * LlamaRMSNorm rounds x · rstd to x's dtype before multiplying by its weight: for a bf16 x,
     * this op without a weight followed by bora_mul by the weight (an f32 or f64 x has no cast
     * between the two, so one op serves both). On a backend without the fused kernel (or built
     * before ABI 1.9) it is built from primitives, with the same result up to rounding; those
     * primitives compute in x's dtype, so there the statistics of a bf16 x are bf16's. The CPU
     * backend takes f32 and f64 x (a bf16 residual stream under r=bf16 is read by its kernel
     * directly); a bf16 x has no CPU kernel or primitives and fails the build. */
    bora_tensor *(*rms_norm)(bora_graph *g, bora_tensor *x, bora_tensor *weight, const char *axis,
                             double eps, double weight_offset);
    /* ABI 1.9. Rotary position embeddings over x (..., position, ..., head_dim), f32 or f64:
     * each position's first rotary_dims of the head dim rotated by its angles, the rest copied.
     * The cos/sin tables (attention factor folded in) are computed once on the host in double
     * from the spec, for every position the graph can reach (offset + the position axis's size,
     * plus the runtime position's max), and rounded once to x's dtype. Dynamic NTK takes that
     * count as its sequence length. The gradient is the same rotation transposed. */
    bora_tensor *(*rope)(bora_graph *g, bora_tensor *x, const bora_rope_opts *opts);
    /* ABI 1.11. A token per position drawn from softmax(logits) along axis (BORA_OP_SAMPLE):
     * logits of a float dtype (bf16 and f16 widened to f32), counter a 1-d i64 tensor of 2
     * (step, index of the first row), stream below 2^32; the result is i32 with logits' other
     * axes in their order (rows numbered row-major over them) and no gradient: autodiff treats
     * the tokens as constants. */
    bora_tensor *(*sample)(bora_graph *g, bora_tensor *logits, const char *axis,
                           bora_tensor *counter, uint64_t seed, uint64_t stream);

    /* ABI 1.13: mixture-of-experts routing. A dropless layer over tokens x (token, embed),
     * router logits (token, expert) and the experts' w (expert, embed, mlp), as
     * tests/graph/test_moe_ops.c builds it:
     *   weights = top_k(softmax(logits), "expert", 2, "choice", &chosen)  (token, choice)
     *   keys = merge(chosen, {token, choice}, "row"); order = argsort(keys); sizes =
     *   bincount(keys, {"expert", E}); xs = embedding(x broadcast over choice and merged to
     *   (row, embed), order, "row"); ys = grouped_matmul(xs, w, sizes, "embed") (row, mlp);
     *   back = embedding(ys, argsort(order), "row") split to (token, choice, mlp), times
     *   weights, summed over choice (Mixtral first divides the weights by their sum over
     *   choice). The gathers' gradients are scatter-adds. */

    /* The k largest entries of x (f32 or f64) along axis, largest first (BORA_OP_TOP_K): the
     * values, x's dtype, with axis replaced in place by a new axis k_axis of size k (1 <= k <=
     * axis's size), and, through indices (if not NULL), their i32 indices along axis, shaped
     * alike. Ties go to the lower index, NaN ranks above every number. The values' gradient goes
     * back to the chosen entries (a scatter along axis); the indices have none. x's elements must
     * number below 2^31. */
    bora_tensor *(*top_k)(bora_graph *g, bora_tensor *x, const char *axis, int64_t k,
                          const char *k_axis, bora_tensor **indices);
    /* The stable ascending permutation of 1-d i32 keys (BORA_OP_ARGSORT): i32 on keys' axis,
     * keys[p[0]] <= keys[p[1]] <= .., equal keys in index order. No gradient. Applied with
     * bora_graph_api.embedding (rows of a table picked by p: the sorted order) and undone by the
     * same ids as a scatter-add (gradient of that gather) or by gathering with argsort(p). */
    bora_tensor *(*argsort)(bora_graph *g, bora_tensor *keys);
    /* How many 1-d i32 keys equal each value in [0, bins.size) (BORA_OP_BINCOUNT): i32 along a
     * new axis bins; a key outside that range fails the run. No gradient. */
    bora_tensor *(*bincount)(bora_graph *g, bora_tensor *keys, bora_axis bins);
    /* Rows of x (rows, contract) in groups, each times its own matrix of w (group, contract,
     * out) (BORA_OP_GROUPED_MATMUL): group_sizes is 1-d i32 along w's group axis, filled at run
     * time (bora_graph_api.bincount of the sorted keys); group e is the group_sizes[e] rows after
     * groups 0 .. e-1. The result is (rows, out), f32 or f64 as the operands (under trainer.mp
     * c=bf16 the operands are rounded to bf16 and the result is f32, as dot's). Rows past the sum
     * of the sizes are zero; sizes summing past rows fail the run. Gradients to x (grouped with
     * wᵀ) and w (x_eᵀ·dy_e per group); group_sizes has none. */
    bora_tensor *(*grouped_matmul)(bora_graph *g, bora_tensor *x, bora_tensor *w,
                                   bora_tensor *group_sizes, const char *contract);

    /* ABI 1.14. Declare t as a metric the host logs: a value the model computes beside its
     * loss for people to watch (a router's balance, an expert's load). t is 0-d (a scalar) or
     * 1-d (a small vector, at most BORA_METRIC_MAX_ELEMENTS elements, logged per element as
     * name/<i>), of a float dtype; name is 1 to 100 characters of [A-Za-z0-9_./-], not starting
     * or ending with '/', not the trainer's own (loss, final_loss, steps, tokens, or those
     * followed by '/'), and unique in the graph. Returns t itself: the declaration adds
     * nothing to the loss, no gradient flows from it, and a graph whose metrics are left unused
     * computes the same bits as one without them. `bora train` reads a train graph's metrics
     * after each micro-batch, averages them over the step's micro-batches (in their order, in
     * double) and logs them as train/<name> with each step's train/loss (a scalar also on the
     * printed step line when there are at most three); eval, generation and Hessian graphs
     * ignore them. Use bora_graph_metric below, which does nothing on an older host. */
    bora_tensor *(*metric)(bora_graph *g, bora_tensor *t, const char *name);

    /* ABI 1.15. A 1-d convolution without bias, PyTorch's conv1d (BORA_OP_CONV1D): x (batch...,
     * in, length) in any axis order; w has exactly three axes: in_axis, kernel_axis and one
     * more, the output channels (Hugging Face's Conv1d weight is (out, in, kernel)). The result
     * has x's axes with in_axis replaced, in its place, by w's output axis, and length_axis of
     * size (L + 2·padding − K) / stride + 1 (rounded down, at least 1). x and w share one dtype,
     * f32 or f64 (under trainer.mp c=bf16 both are rounded to bf16 and the result is f32, as
     * dot's). stride 0 means 1; stride >= 1 and padding >= 0. Add the bias with bora_add.
     * Gradients to x (the transposed convolution) and w; a backend without the kernels (or
     * built before 1.15) gets it as primitives: zeros concatenated at both ends, the length axis
     * split by the stride, one dot per kernel tap, summed in tap order. */
    bora_tensor *(*conv1d)(bora_graph *g, bora_tensor *x, bora_tensor *w,
                           const bora_conv1d_opts *opts);
};

/* The most elements a metric (bora_graph_api.metric) may have. */
#define BORA_METRIC_MAX_ELEMENTS 1024

/* The public head of every graph: the builder's functions. Host-private state follows. */
struct bora_graph {
    const bora_graph_api *api;
};

/* Short call sites. */
static inline int32_t bora_graph_mode(bora_graph *g)
{
    return g->api->mode(g);
}
static inline bora_status bora_graph_status(bora_graph *g)
{
    return g->api->status(g);
}
static inline bora_tensor *bora_param(bora_graph *g, const char *name, int32_t dtype, int32_t ndim,
                                      const bora_axis *axes, bora_init init, uint32_t flags)
{
    return g->api->param(g, name, dtype, ndim, axes, init, flags);
}
static inline bora_tensor *bora_input(bora_graph *g, const char *name, int32_t dtype, int32_t ndim,
                                      const bora_axis *axes)
{
    return g->api->input(g, name, dtype, ndim, axes);
}
static inline bora_tensor *bora_add(bora_graph *g, bora_tensor *a, bora_tensor *b)
{
    return g->api->binary(g, BORA_OP_ADD, a, b);
}
static inline bora_tensor *bora_sub(bora_graph *g, bora_tensor *a, bora_tensor *b)
{
    return g->api->binary(g, BORA_OP_SUB, a, b);
}
static inline bora_tensor *bora_mul(bora_graph *g, bora_tensor *a, bora_tensor *b)
{
    return g->api->binary(g, BORA_OP_MUL, a, b);
}
static inline bora_tensor *bora_div(bora_graph *g, bora_tensor *a, bora_tensor *b)
{
    return g->api->binary(g, BORA_OP_DIV, a, b);
}
static inline bora_tensor *bora_unary(bora_graph *g, int32_t op, bora_tensor *x)
{
    return g->api->unary(g, op, x);
}
static inline bora_tensor *bora_dot(bora_graph *g, bora_tensor *a, bora_tensor *b, int32_t n,
                                    const char *const *contract)
{
    return g->api->dot(g, a, b, n, contract, NULL);
}
static inline bora_tensor *bora_rename(bora_graph *g, bora_tensor *t, const char *from,
                                       const char *to)
{
    return g->api->rename(g, t, from, to);
}
/* ABI 1.9 builders. Comparisons give a mask in the operands' dtype, 1 where the comparison
 * holds and 0 elsewhere: a float mask rather than a u8 one, because every elementwise kernel,
 * the fused path and autodiff work over one float dtype, and a mask is used as a factor, an
 * additive bias and where()'s selector alike. greater and greater_equal are less and less_equal
 * with the operands swapped. */
static inline bora_tensor *bora_minimum(bora_graph *g, bora_tensor *a, bora_tensor *b)
{
    return g->api->binary(g, BORA_OP_MINIMUM, a, b);
}
static inline bora_tensor *bora_maximum(bora_graph *g, bora_tensor *a, bora_tensor *b)
{
    return g->api->binary(g, BORA_OP_MAXIMUM, a, b);
}
static inline bora_tensor *bora_less(bora_graph *g, bora_tensor *a, bora_tensor *b)
{
    return g->api->binary(g, BORA_OP_LESS, a, b);
}
static inline bora_tensor *bora_less_equal(bora_graph *g, bora_tensor *a, bora_tensor *b)
{
    return g->api->binary(g, BORA_OP_LESS_EQUAL, a, b);
}
static inline bora_tensor *bora_greater(bora_graph *g, bora_tensor *a, bora_tensor *b)
{
    return g->api->binary(g, BORA_OP_LESS, b, a);
}
static inline bora_tensor *bora_greater_equal(bora_graph *g, bora_tensor *a, bora_tensor *b)
{
    return g->api->binary(g, BORA_OP_LESS_EQUAL, b, a);
}
static inline bora_tensor *bora_equal(bora_graph *g, bora_tensor *a, bora_tensor *b)
{
    return g->api->binary(g, BORA_OP_EQUAL, a, b);
}
static inline bora_tensor *bora_not_equal(bora_graph *g, bora_tensor *a, bora_tensor *b)
{
    return g->api->binary(g, BORA_OP_NOT_EQUAL, a, b);
}
static inline bora_tensor *bora_where(bora_graph *g, bora_tensor *mask, bora_tensor *a,
                                      bora_tensor *b)
{
    return g->api->where(g, mask, a, b);
}
/* A 0-d constant of x's dtype, which broadcasts against x by name. */
static inline bora_tensor *bora_scalar_like(bora_graph *g, bora_tensor *x, double value)
{
    return x ? g->api->full(g, g->api->dtype(x), 0, NULL, value) : NULL;
}
/* x limited to [lo, hi]: maximum then minimum with 0-d constants, not an op of its own, since
 * those two already carry kernels, fusion and gradients: x's gradient passes where lo <= x <= hi
 * (a bound that ties gives x, the first operand) and is 0 outside; lo > hi gives hi everywhere. */
static inline bora_tensor *bora_clamp(bora_graph *g, bora_tensor *x, double lo, double hi)
{
    return bora_minimum(g, bora_maximum(g, x, bora_scalar_like(g, x, lo)),
                        bora_scalar_like(g, x, hi));
}

/* x as the residual stream (bora_graph_api.residual); x itself on a host older than ABI 1.6. */
static inline bora_tensor *bora_residual(bora_graph *g, bora_tensor *x)
{
    if (g->api->struct_size < offsetof(bora_graph_api, residual) + sizeof g->api->residual)
        return x;
    return g->api->residual(g, x);
}

/* A 1-d convolution (bora_graph_api.conv1d; a plugin using it is built for ABI 1.15, which an
 * older host refuses to load). */
static inline bora_tensor *bora_conv1d(bora_graph *g, bora_tensor *x, bora_tensor *w,
                                       const bora_conv1d_opts *opts)
{
    return g->api->conv1d(g, x, w, opts);
}

/* Declare t as a logged metric (bora_graph_api.metric); on a host older than ABI 1.14, nothing.
 * Returns t. */
static inline bora_tensor *bora_graph_metric(bora_graph *g, bora_tensor *t, const char *name)
{
    if (g->api->struct_size < offsetof(bora_graph_api, metric) + sizeof g->api->metric)
        return t;
    return g->api->metric(g, t, name);
}

#ifdef __cplusplus
}
#endif
#endif /* BORA_GRAPH_H */
