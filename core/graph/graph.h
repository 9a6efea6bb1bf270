/* core/graph/graph.h — the graph engine's internals: values (tensors and views), nodes, the
 * parameter store shared by a run's graphs, autodiff, the memory plan and the executor.
 *
 * A graph is a list of nodes in creation order; each node produces values. A value is a strided
 * view (offset, dims, strides) into the storage of a base value: views share their base's
 * storage and cost nothing. Every axis has an interned name. Leaves are parameters (persistent,
 * in the store) and inputs (persistent per graph); everything else lives in one arena whose
 * offsets come from liveness. */
#ifndef BORA_CORE_GRAPH_H
#define BORA_CORE_GRAPH_H

#include <bora/backend.h>
#include <stdio.h>

#define G_MAX_IN 8
#define G_MAX_OUT 4

/* Node kinds beyond the SDK's op ids. */
enum {
    G_PARAM = 1000, /* a parameter leaf */
    G_INPUT,        /* an input leaf */
    G_VIEW,         /* a view of its input: no kernel */
    G_GRAD,         /* a parameter's persistent gradient: the buffer (out) += in[0] */
    G_ASSIGN,       /* apply graphs: a parameter, gradient or state slot (out) = in[0] */
    G_CONST         /* a constant leaf: bytes the host computed at build time (rope tables) */
};

/* What a view node did, for its backward rule. */
enum { V_PERMUTE = 1, V_RENAME, V_SLICE, V_BROADCAST, V_SPLIT, V_MERGE };

/* Where a value's bytes live. */
enum {
    S_ARENA = 0,
    S_PARAM,
    S_GRAD,
    S_INPUT,
    S_STATE,
    S_MODEL,
    S_SHADOW,
    S_CONST,
    S_TANGENT,
    S_HVP
};

typedef struct gnode gnode;
typedef struct bora_tensor gval;
typedef struct g_store g_store;

struct bora_tensor {
    int id;
    int dtype;
    int ndim;
    int64_t dims[BORA_MAX_DIMS];
    int64_t strides[BORA_MAX_DIMS];   /* in elements */
    const char *names[BORA_MAX_DIMS]; /* interned */
    int64_t offset;                   /* in elements, into base's storage */
    gval *base;                       /* the value owning the storage (itself if not a view) */
    gnode *node;                      /* producer */
    const char *label;                /* for messages */
    int storage;                      /* S_*, for bases */
    int slot;                         /* store slot (params, grads), input index */
    int state;                        /* optimizer state slot, for S_STATE */
                                      /* (S_MODEL: slot is the model-state slot) */
    int requires_grad;
    int64_t extent_max; /* a runtime extent: the largest value an input may hold (else 0) */
    gval *grad;         /* during autodiff: the gradient accumulated so far */
    gval *lowp;         /* mixed precision: this value's copy in the compute dtype, once made */
    int mp_cast;        /* made by mixed precision's cast: its gradient goes to the source */
    gval *mp_src;       /* a parameter's bf16 shadow (or a view of it): that source, else NULL */
    /* plan */
    int64_t arena_offset; /* bytes */
    int first_use, last_use;
};

struct gnode {
    int id;
    int op;
    int nin, nout;
    gval *in[G_MAX_IN];
    gval *out[G_MAX_OUT];
    union {
        bora_opt_scalar scalar;
        bora_opt_act act;
        bora_opt_reduce reduce;
        bora_opt_norm norm;
        bora_opt_rms_norm rms;
        bora_opt_xent xent;
        bora_opt_attention attn;
        bora_opt_pad pad;
        bora_opt_iota iota;
        bora_opt_rope rope;
        bora_opt_sample sample;
        bora_opt_top_k top_k;
        bora_opt_conv1d conv;
    } opt;
    /* views */
    int view;
    const char *vname[BORA_MAX_DIMS];
    int vn;
    int64_t vstart;
    bora_axis vparts[BORA_MAX_DIMS];
    int recompute; /* part of a recomputed block's clone */
    bora_kernel_fn kernel;
    int fused; /* 1 + the fused group this node runs in, or 0 */
};

/* A fused group (fuse.c): n_segments runs of the same n_steps elementwise nodes. */
typedef struct g_fused {
    int head; /* the id of the first node: the group runs there */
    int n_steps, n_segments, n_scratch;
    gnode **nodes;           /* segment-major */
    int64_t *count;          /* elements per segment */
    bora_kernel_args *args;  /* filled at run time */
    bora_tensor_desc *descs; /* BORA_FUSED_OPERANDS per step and segment */
    int32_t *scratch;        /* per step and operand of a segment: a scratch tile or -1 */
} g_fused;

/* One parameter of the store. */
typedef struct g_slot {
    char *name;
    int dtype, ndim;
    int64_t dims[BORA_MAX_DIMS];
    const char *names[BORA_MAX_DIMS];
    bora_init init;
    uint32_t flags;
    size_t offset, nbytes; /* in the parameter block, and the same in the gradient block */
    uint64_t declared_in;  /* the serial of the last graph with a leaf over this parameter */
} g_slot;

/* One model-state buffer (bora_graph_api.state): a KV cache. */
typedef struct g_mstate {
    char *name;
    int dtype, ndim;
    int64_t dims[BORA_MAX_DIMS];
    const char *names[BORA_MAX_DIMS];
    size_t offset, nbytes; /* in the model-state block */
} g_mstate;

/* Parameters and gradients of a run, shared by its graphs, on one backend. */
struct g_store {
    const bora_backend_ops *ops;
    bora_backend *backend;
    const char *backend_name;
    g_slot *slots;
    size_t n_slots, cap_slots;
    long *slot_index; /* slot + 1 by name hash, open-addressed, at most half full (0: empty) */
    size_t cap_slot_index;
    size_t param_bytes;
    bora_buffer *params, *grads, *arena, *states;
    char *param_ptr, *grad_ptr, *arena_ptr, *state_ptr;
    size_t n_states; /* optimizer state slots per parameter (each a copy of the layout) */
    /* A sharded optimizer (trainer.shard_optimizer): this process keeps the state of the
     * parameters in bytes [state_lo, state_lo + state_span) of their layout only, each state
     * block state_span bytes long (not sharded: every parameter's, blocks of param_bytes). */
    int state_sharded;
    size_t state_lo, state_span;
    /* A sharded run's whole state in host memory around a checkpoint (n_states blocks laid out
     * like the parameters): checkpoints write and read it in place of the backend's. */
    char *state_host;
    size_t arena_bytes; /* the most any graph needs (g_store_fit_arena): the arena's size */
    uint64_t seed;
    int compute_dtype; /* trainer.mp's c: the dtype of model graphs' matmul operands (0: as built) */
    /* Under c=bf16, every f32 parameter's bf16 copy (its shadow), at half its parameter offset:
     * model graphs multiply the shadows, apply graphs write them with the parameters (one pass),
     * and a host-side write to the parameters (initial values, a checkpoint) marks them stale,
     * to be recomputed before a graph next reads them. */
    int shadows;         /* whether the store keeps shadows (set before graphs are built) */
    int fused_bf16;      /* the backend's fused groups take bf16 COPY outputs (ABI 1.5) */
    int fused_bf16_in;   /* and bf16 COPY inputs (ABI 1.6) */
    int attention_bf16;  /* attention's products may be bf16 under c=bf16 (ABI 1.7) */
    int scatter_init;    /* SCATTER_ADD may add into a third input's values (ABI 1.7) */
    int matmul_bias;     /* MATMUL may add a third input, a bias row (ABI 1.8) */
    int elem_ops;        /* the backend may be asked for the ops from BORA_OP_SIN on (ABI 1.9) */
    int attn_softcap;    /* its attention kernels read bora_opt_attention.softcap (ABI 1.12) */
    uint32_t abi_minor;  /* the ABI minor the backend was built for (for messages) */
    int residual_dtype;  /* trainer.mp's r: the residual stream's dtype in memory (0: f32) */
    int shadows_stale;   /* the parameters changed outside an apply graph */
    bora_buffer *shadow; /* param_bytes / 2 */
    char *shadow_ptr;
    struct g_graph *refresh;       /* the apply graph recomputing every shadow, once needed */
    int grad_writers, grad_adders; /* train graphs built that write / add the gradients */
    g_mstate *mstates;             /* model state: outside the arena, zeroed when allocated */
    size_t n_mstates, cap_mstates, mstate_bytes;
    bora_buffer *mstate;
    char *mstate_ptr;
    /* Hessian-vector products (g_store_hessian): two more blocks laid out like the parameters,
     * the direction v (tangent, written by the host) and the products H·v (hvp). */
    int hessian;
    bora_buffer *tangents, *hvps;
    char *tangent_ptr, *hvp_ptr;
};

typedef struct g_input {
    gval *value;
    bora_buffer *buf;
    char *ptr;
    size_t nbytes;
} g_input;

/* A constant leaf (S_CONST): its bytes are computed on the host when the graph is built and
 * copied to the backend once, before the first run; key tells equal constants apart so that a
 * graph holds each once (every layer's rope reads one table). */
typedef struct g_const {
    gval *value;
    void *data; /* owned; freed once copied */
    size_t nbytes;
    char key[512];
    bora_buffer *buf;
    char *ptr;
} g_const;

/* A value the model declared as a metric: 0-d or 1-d, of a float dtype (ABI 1.14). */
typedef struct g_metric {
    char *name; /* owned */
    gval *value;
} g_metric;

typedef struct g_graph {
    bora_graph pub;  /* the api pointer, first */
    uint64_t serial; /* one per graph made in the process */
    int mode;
    g_store *store;
    gnode **nodes;
    size_t n_nodes, cap_nodes;
    gval **vals;
    size_t n_vals, cap_vals;
    g_input *inputs;
    size_t n_inputs, cap_inputs;
    g_const *consts; /* constant leaves (S_CONST), by slot */
    size_t n_consts, cap_consts;
    gval *output;         /* the loss (train) or logits */
    int recompute;        /* recompute between checkpoints in the backward pass */
    int grads_write;      /* run once a step (one micro-batch): autodiff writes each gradient
                        * instead of adding it to its buffer, which then needs no zeroing */
    int grads_to_hvp;     /* autodiff puts the gradients into the store's hvp block instead of the
                        * gradient block (a second loss's gradient kept apart: Sophia-G) */
    int hvp_write;        /* g_hvp writes each product instead of adding it to its buffer */
    int64_t batch;        /* sequences per execution, for models (default 1) */
    int sample_labels;    /* cross_entropy reads labels drawn from the logits' softmax (Sophia-G) */
    gval *sample_counter; /* their Philox counter input (step, first row), made when first used */
    int compute;          /* matmul operands' dtype under mixed precision (0: the operands' own) */
    int residual;         /* the residual stream's dtype in memory (bora_residual; 0: as built) */
    int residuals;        /* values the model marked as the residual stream and kept in bf16 */
    int reads_shadows;    /* a model graph multiplying the store's bf16 shadows */
    g_metric *metrics;    /* what the model declared as metrics (bora_graph_api.metric) */
    size_t n_metrics, cap_metrics;
    int *checkpoints; /* node ids producing checkpointed values, ascending */
    size_t n_checkpoints, cap_checkpoints;
    bora_status status;
    char error[1024];
    /* The error is a tensor too large to address, of these sizes and element bytes (callers
     * name the keys behind them). */
    int too_large, too_large_ndim, too_large_elem;
    int64_t too_large_dims[BORA_MAX_DIMS];
    int finalized;
    size_t arena_bytes, naive_bytes;
    /* per-run report */
    uint64_t kernels_run, bytes_moved;
    uint64_t op_runs[BORA_OP_COUNT_]; /* kernels run per op id, since the graph was made */
    g_fused *fused;                   /* the fused groups (fuse.c) */
    size_t n_fused;
    uint64_t fused_runs, fused_nodes; /* per run: groups run, and nodes they stood for */
    double *prof_s;                   /* BORA_PROFILE: seconds per node, over prof_runs runs */
    uint64_t prof_runs;
    struct g_mem *mem;
    int *readers; /* during g_finalize's rewrites: inputs reading each base (by value id) */
} g_graph;

/* ---- the store ---------------------------------------------------------------------------- */

g_store *g_store_new(const bora_backend_ops *ops, bora_backend *backend, const char *name,
                     uint64_t seed);
void g_store_free(g_store *s);
/* Allocate the parameter and gradient blocks and initialise parameters (after every graph
 * declared its parameters). */
bora_status g_store_materialize(g_store *s);
/* Make the arena hold bytes (g_finalize, for each graph): before g_store_materialize, the most
 * any graph needs so far; after, a larger buffer replaces the arena where bytes exceed it (what it
 * held is lost). BORA_OK, or BORA_ERR_NOMEM naming the arena, the old one kept. */
bora_status g_store_fit_arena(g_store *s, size_t bytes);
/* Zero every gradient. */
bora_status g_store_zero_grads(g_store *s);
/* Before g_store_materialize: also keep, per parameter, a tangent (the direction v of a
 * Hessian-vector product, written by the host) and an hvp buffer (H·v, or a gradient under
 * grads_to_hvp), each shaped and typed like the parameter and zero at materialize. */
void g_store_hessian(g_store *s);
/* A graph reading or writing those blocks asks for them (as g_store_hessian does) while the store
 * is not yet materialized; afterwards, without them, it fails. 0 or -1. */
int g_store_need_hessian(g_graph *g);
/* Copy a parameter slot's bytes in or out of one of the store's blocks (S_PARAM, S_GRAD,
 * S_TANGENT, S_HVP): nbytes must be the slot's, in the parameter's dtype. */
bora_status g_store_write(g_store *s, int block, long slot, const void *data, size_t nbytes);
bora_status g_store_read(g_store *s, int block, long slot, void *dst, size_t nbytes);
/* The tangent of slot from n f32 values (converted to the parameter's dtype), and H·v read back
 * as f32: n must be the slot's element count. */
bora_status g_store_write_tangent(g_store *s, long slot, const float *data, size_t n);
bora_status g_store_read_hvp(g_store *s, long slot, float *dst, size_t n);
/* Zero every hvp buffer (before a step's first micro-batch adds into them). */
bora_status g_store_zero_hvp(g_store *s);
/* Mixed precision (trainer.mp's c and r) before any graph is built: under c=bf16, model graphs
 * multiply bf16 operands and the store keeps the parameters' bf16 copies, which the optimizer's
 * fused pass writes where the backend was built for ABI 1.5 or later; under r=bf16 the residual
 * stream is kept in bf16 (bora_residual), rounded and read back inside fused chains where the
 * backend was built for ABI 1.6 or later; attention nodes let the backend take its products in
 * bf16 (bora_opt_attention.product_dtype) where it was built for ABI 1.7 or later and the model
 * did not ask for f32 (bora_attention_opts.upcast). 0 for either means f32. A backend built
 * before ABI 1.9 is never asked for the ops from BORA_OP_SIN on: a graph using them fails to
 * build, naming the op (but for rms_norm and rope, which such a backend gets as primitives). */
void g_store_mixed(g_store *s, int compute, int residual, uint32_t backend_abi_minor);
/* The ABI minor the backend was built for, where g_store_mixed is not called: the ops it may be
 * asked for (until then, those of this host's ABI). g_store_mixed sets it too. */
void g_store_backend_abi(g_store *s, uint32_t backend_abi_minor);
/* The parameters were written outside an apply graph: recompute the shadows before they are
 * next read. */
void g_store_params_changed(g_store *s);
/* The bytes of one optimizer state block as the store holds it (state_span when sharded). */
static inline size_t g_store_state_block(const g_store *s)
{
    return s->state_sharded ? s->state_span : s->param_bytes;
}
/* Recompute every shadow now, if stale. */
bora_status g_store_refresh_shadows(g_store *s);
/* Zero every model-state buffer (a new generation). */
bora_status g_store_zero_model_state(g_store *s);
/* Find a slot by name, or -1. */
long g_store_find(const g_store *s, const char *name);
/* Index slot at (just added) for g_store_find. 0, or -1 out of memory. */
int g_store_index(g_store *s, long at);
/* A parameter's Philox key: its name's FNV-1a hash mixed with the seed (initial values use the
 * run's seed; other draws per parameter, Hutchinson's z, a seed of their own). */
void g_philox_key(uint64_t seed, const char *name, uint32_t key[2]);
/* The Philox-derived initial value of element i of a parameter (f64). */
double g_init_value(uint64_t seed, const char *name, bora_init init, uint64_t i);
/* Element i of BORA_INIT_SINUSOIDS over a (length, channels) parameter. */
double g_init_sinusoid(bora_init init, int64_t channels, uint64_t i);

/* ---- graphs ------------------------------------------------------------------------------- */

g_graph *g_graph_new(g_store *store, int mode);
void g_graph_free(g_graph *g);
const char *g_intern(const char *s);
bora_status g_fail(g_graph *g, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The most bytes one tensor (or the store's block of parameters) may take: 2^62, far above any
 * memory, low enough that no size product or offset sum of a checked tensor overflows int64. */
#define G_MAX_BYTES ((int64_t)1 << 62)
/* Whether ndim dims of dtype fit G_MAX_BYTES (their bytes in *bytes, if given); else the graph
 * fails naming what (and name, when given) with its axes, and records the sizes. 0 or -1. */
int g_size_check(g_graph *g, const char *what, const char *name, int dtype, int ndim,
                 const int64_t *dims, const char *const *names, size_t *bytes);
/* Describe a tensor for messages: "'logits' (batch=2, position=8, vocab=50)". */
void g_describe(const gval *v, char *buf, size_t cap);

/* Builder internals shared with autodiff. */
gval *g_new_value(g_graph *g, int dtype, int ndim, const int64_t *dims, const char *const *names);
gnode *g_new_node(g_graph *g, int op, int nin, gval *const *in);
gval *g_view(g_graph *g, gval *src, int kind);
/* A view of src's storage with like's geometry (axes, strides, offset). */
gval *g_view_like(g_graph *g, gval *src, int kind, const gval *like);
gval *g_binary(g_graph *g, int op, gval *a, gval *b);
gval *g_permute(g_graph *g, gval *t, int n, const char *const *order);
gval *g_pad(g_graph *g, gval *x, const gval *like, int axis, int64_t start);
gval *g_reduce_sum_to(g_graph *g, gval *x, const gval *like);
gval *g_fill(g_graph *g, const gval *like, double value);
/* A constant leaf holding data (nbytes, malloc'd; the graph owns it from here, failed or not),
 * or the one already made under the same key (build_rope.c). */
gval *g_const_leaf(g_graph *g, const char *label, const char *key, int dtype, int ndim,
                   const int64_t *dims, const char *const *names, void *data, size_t nbytes);
/* where(mask, a, b) over values of one float dtype, broadcast by name (build_elem.c). */
gval *g_where(g_graph *g, gval *mask, gval *a, gval *b);
int g_axis_index(const gval *v, const char *name);
gval *g_op1(g_graph *g, int op, int nin, gval *const *in, int dtype, int ndim, const int64_t *dims,
            const char *const *names);
void g_add_out(gnode *n, gval *v);
gval *g_align_to(g_graph *g, gval *x, const gval *like);
gval *g_contiguous(g_graph *g, gval *x);
gval *g_matmul3(g_graph *g, gval *a, gval *b);
/* GROUPED_MATMUL over x (rows, K), w (group, K, N), sizes i32 (group) -> (rows, N), and its
 * weight gradient (x, dy (rows, N), sizes) -> shaped like w; operands rounded to bf16 under mixed
 * precision (build_moe.c). */
gval *g_grouped_matmul(g_graph *g, gval *x, gval *w, gval *sizes);
gval *g_grouped_matmul_grad(g_graph *g, gval *x, gval *dy, gval *sizes, const gval *w);
/* CONV1D over x (batch, in, length), w (out, in, kernel) -> (batch, out, J), and its gradients
 * (dy, w) -> shaped like x and (x, dy) -> shaped like w; operands rounded to bf16 under mixed
 * precision (build_conv.c). */
gval *g_conv1d(g_graph *g, gval *x, gval *w, int64_t stride, int64_t padding);
gval *g_conv1d_grad_input(g_graph *g, gval *dy, gval *w, int64_t stride, int64_t padding,
                          const gval *x);
gval *g_conv1d_grad_weight(g_graph *g, gval *x, gval *dy, int64_t stride, int64_t padding,
                           const gval *w);
/* Under mixed precision, v's bf16 copy (made once); else v. */
gval *g_lowp(g_graph *g, gval *v);
gval *g_reduce_last(g_graph *g, int op, gval *x, int n, const char *const *axes);
/* Leaves over the store: parameter slot's gradient, and state slot k of a parameter. */
gval *g_grad_leaf(g_graph *g, long slot);
/* Leaves over parameter slot's tangent (v) and Hessian-vector product (H·v) (g_store_hessian). */
gval *g_tangent_leaf(g_graph *g, long slot);
gval *g_hvp_leaf(g_graph *g, long slot);
gval *g_state_leaf(g_graph *g, long slot, int k);
/* A leaf over parameter slot's storage. */
gval *g_param_leaf(g_graph *g, long slot);
/* Apply graphs: parameter slot's shadow = bf16(value). */
bora_status g_assign_shadow(g_graph *g, long slot, gval *value);

extern const bora_graph_api g_api;

/* Philox's stream for the labels cross_entropy draws under sample_labels. */
#define G_STREAM_LABELS 0x4C41424Cu /* "LABL" */

/* The loss's gradient into every parameter's persistent gradient (train graphs; the hvp buffers
 * under grads_to_hvp). */
bora_status g_autodiff(g_graph *g, gval *loss);
/* The reverse pass alone: every parameter leaf's gradient in its grad field, no buffer written. */
bora_status g_backward(g_graph *g, gval *loss);
/* Hessian graphs (BORA_MODE_HESSIAN; hvp.c): H·v of the loss, v read from the tangent leaves,
 * added into the hvp buffers (written under hvp_write); the gradient buffers are not touched
 * and the loss stays the graph's output. The forward-over-reverse pass: the reverse graph as
 * g_autodiff builds it, then each value's tangent along v in creation order. */
bora_status g_hvp(g_graph *g, gval *loss);

/* Order, plan memory and bind kernels; reports arena against naive sizes. */
bora_status g_finalize(g_graph *g);
/* The bytes a finalized graph's inputs take (allocated when first written or run). */
size_t g_input_bytes(const g_graph *g);
/* Copy an input's data in (the byte size must match). */
bora_status g_set_input(g_graph *g, const char *name, const void *data, size_t nbytes);
/* Run every node; kernels_run and bytes_moved report what it did. */
bora_status g_run(g_graph *g);
/* Copy a value out (it must be a base with storage: the output, a parameter, a gradient). The
 * graphs of a store share one arena, so a graph's output is valid until another graph runs or
 * one finalized after g_store_materialize grows the arena. */
bora_status g_read(g_graph *g, const gval *v, void *dst, size_t nbytes);
/* nbytes of such a value from byte at: a part of it (one row of logits). */
bora_status g_read_part(g_graph *g, const gval *v, size_t at, void *dst, size_t nbytes);
/* The number of elements of a value. */
int64_t g_numel(const gval *v);
const char *g_op_name(int op);
/* The ABI minor that added op (0: 1.0): a backend built for an older one is never asked for it. */
uint32_t g_op_since(int op);
/* arr with room for at least n + 1 elements of elem bytes (cap doubled), or NULL. */
void *g_grow(void *arr, size_t *cap, size_t n, size_t elem);
/* Plan fused groups over the chosen kernels (fuse.c); -1 out of memory. */
int g_plan_fusion(g_graph *g, const char *needed);
void g_fused_free_all(g_graph *g);
/* Whether node j of group f (segment-major) keeps its output in a scratch tile, never in memory. */
int g_fused_in_tile(const g_fused *f, int j);
/* With BORA_PROFILE set: print where this graph's runs spent their time (stderr). */
void g_profile_print(g_graph *g);

#endif
