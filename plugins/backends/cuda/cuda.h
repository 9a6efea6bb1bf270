/* plugins/backends/cuda/cuda.h — what the CUDA backend's files share: the backend object (one
 * device, one stream, cuBLASLt's handle and workspace, a scratch buffer, an error flag) and the
 * launchers in kernels.cu. */
#ifndef BORA_CUDA_BACKEND_H
#define BORA_CUDA_BACKEND_H

#include <bora/backend.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cuda_mm cuda_mm; /* matmul.c: a kept cuBLASLt descriptor set, one per shape */

struct bora_backend {
    const bora_host *h;
    int device;          /* the CUDA device index (always 0: CUDA_VISIBLE_DEVICES picks) */
    cudaStream_t stream; /* every kernel, copy and matmul runs here, in order */
    void *lt;            /* cublasLtHandle_t */
    void *lt_workspace;  /* cuBLASLt's workspace, lt_workspace_bytes of device memory */
    size_t lt_workspace_bytes;
    cuda_mm **mm; /* kept descriptors, n_mm of them */
    size_t n_mm, cap_mm;
    void *scratch; /* device scratch for one kernel at a time (cuda_scratch) */
    size_t scratch_bytes;
    int *flag;              /* device int: set by a kernel that met a bad id or target */
    char name[320];         /* the device's name and SM count */
    int cc_major, cc_minor; /* compute capability */
    int runtime_version;
    int sync_each; /* BORA_PROFILE: wait for each kernel (true per-node times) */
};

/* A device buffer of at least bytes for one kernel's use until the next (kernels run in stream
 * order), kept and grown as needed; NULL out of memory (the message set). */
void *cuda_scratch(bora_backend *b, size_t bytes);

/* A CUDA error as a failed call naming what was running: BORA_OK for cudaSuccess. */
bora_status cuda_check(bora_backend *b, cudaError_t err, const char *what);

/* matmul.c: BORA_OP_MATMUL through cuBLASLt (f32, f64, bf16 operands with an f32 result), or
 * through the plain kernel for layouts cuBLASLt does not take. */
bora_status cuda_matmul(bora_backend *b, const bora_kernel_args *a);
void cuda_matmul_free(bora_backend *b);

/* moe.cu: the kernels of TOP_K, ARGSORT, BINCOUNT, GROUPED_MATMUL(_GRAD) and SAMPLE for those
 * dtypes it takes, else NULL. */
bora_kernel_fn cuda_moe_kernel(uint32_t op, const int32_t *dt, uint32_t n);

/* ---- kernels.cu: each launcher queues its kernels on the stream and returns the launch's
 * cudaError_t (cudaSuccess: queued). Float kernels take f32 or f64 (the output's dtype). */

/* COPY between any of f32, f64, bf16, i32, i64; any strides. */
cudaError_t cuk_copy(cudaStream_t s, const bora_kernel_args *a);
/* FILL of any dtype (u8 included), any strides. */
cudaError_t cuk_fill(cudaStream_t s, const bora_kernel_args *a);
/* IOTA: start + step·i in double, rounded once (f32, f64, i32). */
cudaError_t cuk_iota(cudaStream_t s, const bora_kernel_args *a);
/* Every elementwise op (unary, binary, SCALE, ACT_GRAD, WHERE, comparisons), broadcast strides. */
cudaError_t cuk_elementwise(cudaStream_t s, const bora_kernel_args *a);
/* SUM, MAX and SUM_SQUARES over trailing axes, in double, in an order fixed by the shape; the
 * scratch it needs (bytes of device memory; 0: none). */
size_t cuk_reduce_scratch(const bora_kernel_args *a);
cudaError_t cuk_reduce(cudaStream_t s, const bora_kernel_args *a, double *scratch);
/* SOFTMAX and LOG_SOFTMAX over the last axis. */
cudaError_t cuk_softmax(cudaStream_t s, const bora_kernel_args *a);
/* LAYERNORM and LAYERNORM_GRAD; the gradient's column sums (runs of rows, then the runs, in
 * order) need cuk_layernorm_grad_scratch bytes. */
cudaError_t cuk_layernorm(cudaStream_t s, const bora_kernel_args *a);
size_t cuk_layernorm_grad_scratch(const bora_kernel_args *a);
cudaError_t cuk_layernorm_grad(cudaStream_t s, const bora_kernel_args *a, double *scratch);
/* XENT (per_row: rows doubles of scratch; flag set on a target out of range) and XENT_GRAD. */
cudaError_t cuk_xent(cudaStream_t s, const bora_kernel_args *a, double *per_row, int *flag);
cudaError_t cuk_xent_grad(cudaStream_t s, const bora_kernel_args *a);
/* GATHER (flag set on an id out of range), SCATTER_ADD (columns in parallel, rows in order). */
cudaError_t cuk_gather(cudaStream_t s, const bora_kernel_args *a, int *flag);
cudaError_t cuk_scatter_add(cudaStream_t s, const bora_kernel_args *a);
/* ONE_HOT and ATTENTION_BIAS, the primitive decompositions' helpers. */
cudaError_t cuk_one_hot(cudaStream_t s, const bora_kernel_args *a);
cudaError_t cuk_attention_bias(cudaStream_t s, const bora_kernel_args *a);
/* PAD, CONCAT, and WRITE_SLICE (flag set when a runtime start leaves the slice past the end). */
cudaError_t cuk_pad(cudaStream_t s, const bora_kernel_args *a);
cudaError_t cuk_concat(cudaStream_t s, const bora_kernel_args *a);
cudaError_t cuk_write_slice(cudaStream_t s, const bora_kernel_args *a, int *flag);
/* MATMUL with a double accumulator per element, any strides (the layouts cuBLASLt refuses). */
cudaError_t cuk_matmul_naive(cudaStream_t s, const bora_kernel_args *a);

/* ---- attention.cu: ATTENTION and ATTENTION_GRAD (f32, f64), head dims up to
 * cuk_attention_max_head_dim(); the gradient needs cuk_attention_grad_scratch bytes (dsum), and
 * each kernel cuk_attention_smem bytes of shared memory per block (past 48 KiB it opts in). */
int64_t cuk_attention_max_head_dim(void);
size_t cuk_attention_smem(const bora_kernel_args *a);
size_t cuk_attention_grad_scratch(const bora_kernel_args *a);
cudaError_t cuk_attention(cudaStream_t s, const bora_kernel_args *a, void *dsum);

/* ---- rows.cu: RMS_NORM, RMS_NORM_GRAD (the weight's column sums need
 * cuk_rms_norm_grad_scratch bytes), ROPE (flag set on a position past the table) and
 * XENT_FUSED (per_row: rows doubles; flag set on a target out of range; an f32 or bf16
 * gradient over f32 logits). */
cudaError_t cuk_rms_norm(cudaStream_t s, const bora_kernel_args *a);
size_t cuk_rms_norm_grad_scratch(const bora_kernel_args *a);
cudaError_t cuk_rms_norm_grad(cudaStream_t s, const bora_kernel_args *a, double *scratch);
cudaError_t cuk_rope(cudaStream_t s, const bora_kernel_args *a, int *flag);
cudaError_t cuk_xent_fused(cudaStream_t s, const bora_kernel_args *a, double *per_row, int *flag);

#ifdef __cplusplus
}
#endif
#endif
