/* bora/backend.h — compute backends: buffers, kernels, synchronisation, collectives.
 *
 * A backend owns device memory and runs kernels that the host's executor calls in a graph's
 * node order. Every kernel has one signature and receives one frozen argument block, so adding
 * an op never changes the ABI of the others (docs/design.md §4). A worked example, a complete
 * backend plugin with one kernel:
 *
 *     #include <bora/backend.h>
 *
 *     #include <string.h>
 *
 *     typedef struct toy { const bora_host *h; } toy;
 *
 *     static bora_status toy_add_f32(bora_backend *b, const bora_kernel_args *a)
 *     {
 *         (void)b;
 *         const float *x = a->inputs[0].data, *y = a->inputs[1].data;
 *         float *z = a->outputs[0].data;
 *         int64_t n = bora_tensor_desc_numel(&a->outputs[0]);  // dense tensors assumed here
 *         for (int64_t i = 0; i < n; i++)
 *             z[i] = x[i] + y[i];
 *         return BORA_OK;
 *     }
 *     static int32_t toy_probe(const bora_host *h) { (void)h; return 1; }
 *     static bora_status toy_create(const bora_host *h, const bora_config *cfg, bora_backend **out)
 *     {
 *         (void)cfg;
 *         toy *t = h->alloc(h, sizeof *t, 16);
 *         if (!t)
 *             return h->fail(h, BORA_ERR_NOMEM, "out of memory");
 *         t->h = h;
 *         *out = (bora_backend *)t;
 *         return BORA_OK;
 *     }
 *     static void toy_destroy(bora_backend *b) { toy *t = (toy *)b; t->h->free(t->h, t); }
 *     // Host memory: a buffer is its own address.
 *     static bora_status toy_alloc(bora_backend *b, size_t size, size_t align, bora_buffer **out)
 *     {
 *         toy *t = (toy *)b;
 *         *out = t->h->alloc(t->h, size ? size : 1, align);
 *         return *out ? BORA_OK : t->h->fail(t->h, BORA_ERR_NOMEM, "out of memory");
 *     }
 *     static void toy_free(bora_backend *b, bora_buffer *buf)
 *     {
 *         toy *t = (toy *)b;
 *         t->h->free(t->h, buf);
 *     }
 *     static void *toy_ptr(bora_backend *b, bora_buffer *buf) { (void)b; return buf; }
 *     static bora_status toy_copy_in(bora_backend *b, bora_buffer *dst, size_t offset,
 *                                    const void *src, size_t size)
 *     {
 *         (void)b;
 *         memcpy((char *)dst + offset, src, size);
 *         return BORA_OK;
 *     }
 *     static bora_status toy_copy_out(bora_backend *b, void *dst, bora_buffer *src, size_t offset,
 *                                     size_t size)
 *     {
 *         (void)b;
 *         memcpy(dst, (char *)src + offset, size);
 *         return BORA_OK;
 *     }
 *     // op id -> kernel, NULL when unsupported (the host decomposes the op or reports it)
 *     static bora_kernel_fn toy_kernel(bora_backend *b, uint32_t op, const int32_t *dtypes,
 *                                      uint32_t n)
 *     {
 *         (void)b;
 *         int f32 = n == 3 && dtypes[0] == BORA_DTYPE_F32 && dtypes[1] == BORA_DTYPE_F32 &&
 *                   dtypes[2] == BORA_DTYPE_F32;
 *         return op == BORA_OP_ADD && f32 ? toy_add_f32 : NULL;
 *     }
 *     static const bora_backend_ops toy_ops = {
 *         .hdr = BORA_COMPONENT(bora_backend_ops, BORA_KIND_BACKEND, "toy", "an example"),
 *         .probe = toy_probe,       // 0 = cannot run here; higher wins for backend: auto
 *         .create = toy_create,
 *         .destroy = toy_destroy,
 *         .buffer_alloc = toy_alloc,
 *         .buffer_free = toy_free,
 *         .buffer_ptr = toy_ptr,
 *         .copy_in = toy_copy_in,
 *         .copy_out = toy_copy_out,
 *         .kernel = toy_kernel,
 *     };
 *     static bora_status toy_init(const bora_host *h) { return h->add(h, &toy_ops.hdr); }
 *     BORA_PLUGIN_DEFINE("toy", "1.0.0", toy_init, NULL)
 *
 * Backends must be deterministic: no floating-point atomics, no arrival-order reductions, and
 * kernel choices from fixed tables (never by timing), so a run and its resume agree bitwise.
 */
#ifndef BORA_BACKEND_H
#define BORA_BACKEND_H

#include <bora/graph.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct bora_backend bora_backend; /* a backend instance; owned by its plugin */
typedef struct bora_buffer bora_buffer;   /* a device allocation; owned by its backend */

/* A tensor as a kernel sees it: data pointer, element type and strided shape (in elements). */
typedef struct bora_tensor_desc {
    void *data;
    int32_t dtype; /* a bora_dtype */
    int32_t ndim;
    int64_t dims[BORA_MAX_DIMS];
    int64_t strides[BORA_MAX_DIMS];
} bora_tensor_desc;

static inline int64_t bora_tensor_desc_numel(const bora_tensor_desc *t)
{
    int64_t n = 1;
    for (int32_t i = 0; i < t->ndim; i++)
        n *= t->dims[i];
    return n;
}

/* The frozen argument block every kernel receives. */
typedef struct bora_kernel_args {
    uint32_t struct_size;
    uint32_t op;         /* the op id (graph.h enumerates ops once the graph API lands) */
    const void *options; /* the op's options struct, which begins with its own struct_size */
    uint32_t n_inputs;
    uint32_t n_outputs;
    const bora_tensor_desc *inputs;
    const bora_tensor_desc *outputs;
    void *workspace; /* scratch the executor reserved for this node (may be NULL) */
    size_t workspace_size;
} bora_kernel_args;

typedef bora_status (*bora_kernel_fn)(bora_backend *b, const bora_kernel_args *args);

/* A fused elementwise chain (docs/design.md §3.3): the same steps over one or more segments, run
 * tile by tile so that the intermediates stay in cache. args holds n_segments × n_steps argument
 * blocks (segment-major) whose every operand is f32 and either dense with count[segment] elements
 * or a broadcast of one element (every stride 0); since ABI 1.5 the output of a COPY step may also
 * be bf16 (dense, never scratch: round to nearest even), the parameters' bf16 copies written by the
 * optimizer's pass under trainer.mp c=bf16 and the residual stream under r=bf16; since ABI 1.6 the
 * input of a COPY step may be bf16 (dense, in memory, never scratch: widened exactly), the residual
 * stream read back. An operand whose scratch entry is not -1 lives only inside a tile: its data
 * pointer is NULL and the backend gives it scratch tile scratch[step * BORA_FUSED_OPERANDS +
 * operand] (operands: the inputs, then the outputs). Every step reads and writes element i only at
 * index i, so any tiling gives the unfused results. */
#define BORA_FUSED_OPERANDS 16
typedef struct bora_fused {
    uint32_t struct_size;
    uint32_t n_steps;
    uint32_t n_segments;
    uint32_t n_scratch;           /* distinct scratch tiles a thread needs */
    const int64_t *count;         /* elements per segment */
    const bora_kernel_args *args; /* n_segments × n_steps */
    const int32_t *scratch;       /* n_steps × BORA_FUSED_OPERANDS, -1: the tensor itself */
} bora_fused;

/* Reduction operators for collectives. */
typedef enum bora_reduce_op { BORA_REDUCE_SUM = 1, BORA_REDUCE_MAX = 2 } bora_reduce_op;

/* The process group the host bootstrapped (ABI 1.16): `mpirun -np N bora train` or `srun`
 * (docs/design.md, "Data parallel"). Collectives combine ranks in rank order, each element a
 * left fold (((x_0 + x_1) + x_2) + ...) rounded in the dtype at every step, so their bits never
 * depend on arrival order, and a collective that waits longer than timeout_s for a rank fails
 * naming that rank (the host then ends the group). Slices: a collective over count elements
 * gives rank r elements [r·s, min((r + 1)·s, count)) with s = ceil(count / size), the last
 * slices shorter or empty. */
typedef struct bora_group {
    uint32_t struct_size;
    int32_t rank, size;
    double timeout_s; /* > 0 */
    /* the host's MPI communicator, an MPI_Comm * of the MPI the host was built with; NULL when
     * the group is not over MPI */
    void *mpi_comm;
} bora_group;

typedef struct bora_backend_ops {
    bora_component hdr;

    /* How well this backend fits this machine: 0 when it cannot run here (no device, missing
     * instruction set); the highest score wins `trainer.backend: auto`. Must be cheap. */
    int32_t (*probe)(const bora_host *h);
    /* Create an instance from the backend's configuration subtree. */
    bora_status (*create)(const bora_host *h, const bora_config *cfg, bora_backend **out);
    void (*destroy)(bora_backend *b);

    /* Device memory. buffer_ptr gives the address kernels use for a buffer. */
    bora_status (*buffer_alloc)(bora_backend *b, size_t size, size_t align, bora_buffer **out);
    void (*buffer_free)(bora_backend *b, bora_buffer *buf);
    void *(*buffer_ptr)(bora_backend *b, bora_buffer *buf); /* (optional) NULL: not mappable */
    bora_status (*copy_in)(bora_backend *b, bora_buffer *dst, size_t offset, const void *src,
                           size_t size);
    bora_status (*copy_out)(bora_backend *b, void *dst, bora_buffer *src, size_t offset,
                            size_t size);

    /* The kernel for an op and the dtypes of its operands (inputs, then outputs; n of them), or
     * NULL when unsupported (the host then uses the op's decomposition, or reports at build
     * time). The host asks for optional operands this way (MATMUL's bias, SCATTER_ADD's initial
     * values): return NULL for an operand count the kernel does not take. */
    bora_kernel_fn (*kernel)(bora_backend *b, uint32_t op, const int32_t *dtypes, uint32_t n);

    /* (optional) Wait until all queued work is done. NULL: kernels run synchronously. */
    bora_status (*synchronize)(bora_backend *b);

    /* (optional) Collectives over the process group joined with group_join (ABI 1.16); NULL:
     * single process. all_reduce combines every rank's data in place, in rank order; broadcast
     * copies root's data to every rank. data are device addresses (buffer_ptr). */
    bora_status (*all_reduce)(bora_backend *b, void *data, size_t count, int32_t dtype, int32_t op);
    bora_status (*broadcast)(bora_backend *b, void *data, size_t count, int32_t dtype,
                             int32_t root);

    /* (optional) One line naming what this instance's results depend on besides the inputs,
     * e.g. "2 threads, oneDNN 2.6.3"; recorded in checkpoints, where a resume that differs is
     * refused. Writes a NUL-terminated string of at most cap bytes. */
    void (*describe)(bora_backend *b, char *buf, size_t cap);

    /* (optional, ABI 1.3) Run a fused elementwise chain; NULL: the host runs its kernels one
     * by one. The backend may decline a chain (BORA_ERR_UNSUPPORTED, nothing written). */
    bora_status (*run_fused)(bora_backend *b, const bora_fused *f);
    /* (optional, ABI 1.6) Called at graph build time for each node a kernel will run, with its
     * argument block as the kernel will get it but every data pointer NULL (shapes, strides,
     * dtypes, options): the backend may make ahead of the first run what the kernel needs
     * (oneDNN's primitives). An error fails the build. */
    bora_status (*prepare)(bora_backend *b, const bora_kernel_args *args);

    /* (optional, ABI 1.16) Join the host's process group (bora_group); the collectives below
     * and all_reduce/broadcast run over it. BORA_ERR_UNSUPPORTED: this build has no transport
     * for it (the host refuses to run on several processes). */
    bora_status (*group_join)(bora_backend *b, const bora_group *g);
    /* (optional, ABI 1.16) Reduce-scatter into a running sum: recv (this rank's slice of count
     * elements, s of them, see bora_group) becomes recv + send_0[slice] + send_1[slice] + ...,
     * added left to right in rank order, each add rounded in dtype (f32 or f64; op SUM or MAX).
     * Zero recv first for a plain sum. send holds count elements on every rank. */
    bora_status (*reduce_scatter)(bora_backend *b, const void *send, void *recv, size_t count,
                                  int32_t dtype, int32_t op);
    /* (optional, ABI 1.16) All-gather: recv (count elements) gets every rank's slice; this
     * rank's comes from send (its slice's length; it may be recv's own slice, in place). */
    bora_status (*all_gather)(bora_backend *b, const void *send, void *recv, size_t count,
                              int32_t dtype);
} bora_backend_ops;

#ifdef __cplusplus
}
#endif
#endif /* BORA_BACKEND_H */
