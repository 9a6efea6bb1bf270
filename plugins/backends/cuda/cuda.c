/* plugins/backends/cuda — the CUDA backend: device memory (the host reaches it only through
 * copy_in and copy_out), one stream on which every kernel, copy and matmul runs in graph order,
 * matmuls on cuBLASLt (matmul.c) and the other kernels in kernels.cu, attention.cu and rows.cu.
 * Ops it has no kernel for return NULL from the table: the host decomposes them or names them at
 * build time. */
#include "cuda.h"

#include <cublasLt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* cuBLASLt's workspace: enough for its split-K and stream-K algorithms on GPT-2's shapes. */
#define CUDA_LT_WORKSPACE (32u << 20)

static const bora_key cuda_keys[] = {
    {NULL, 0, 0, NULL, NULL},
};

bora_status cuda_check(bora_backend *b, cudaError_t err, const char *what)
{
    if (err == cudaSuccess)
        return BORA_OK;
    /* a failure that is not sticky stays the last error until read: clear it, so that the next
     * call's check does not blame the next kernel for it */
    cudaGetLastError();
    return b->h->fail(b->h, BORA_ERR_DEVICE, "%s: %s (%s)", what, cudaGetErrorString(err),
                      cudaGetErrorName(err));
}

void *cuda_scratch(bora_backend *b, size_t bytes)
{
    if (bytes <= b->scratch_bytes)
        return b->scratch;
    void *p = NULL;
    cudaError_t err = cudaMalloc(&p, bytes);
    if (err != cudaSuccess) {
        char what[96];
        snprintf(what, sizeof what, "scratch of %zu bytes", bytes);
        cuda_check(b, err, what);
        return NULL;
    }
    if (b->scratch) {
        /* the stream is non-blocking: cudaFree does not wait for the kernels queued on it */
        cudaError_t sync = cudaStreamSynchronize(b->stream);
        if (sync != cudaSuccess) {
            cudaFree(p);
            cuda_check(b, sync, "scratch (waiting for the kernels that used the old buffer)");
            return NULL;
        }
        cudaFree(b->scratch);
    }
    b->scratch = p;
    b->scratch_bytes = bytes;
    return p;
}

/* Why this machine cannot run the backend (in why), or NULL when it can: device 0 must exist
 * and have compute capability 9.0 or newer, as the plugin carries sm_90 code and compute_90 PTX
 * only. */
static const char *no_device(char *why, size_t cap)
{
    int count = 0, major = 0, minor = 0;
    cudaError_t err = cudaGetDeviceCount(&count);
    if (err == cudaSuccess && count > 0)
        err = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0);
    if (err == cudaSuccess && count > 0)
        err = cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, 0);
    if (err != cudaSuccess) {
        cudaGetLastError(); /* clear the state of a failed query */
        snprintf(why, cap, "%s", cudaGetErrorString(err));
        return why;
    }
    if (count == 0) {
        snprintf(why, cap, "no CUDA device");
        return why;
    }
    if (major < 9) {
        snprintf(why, cap,
                 "device 0 has compute capability %d.%d; this build runs on 9.0 or newer (build "
                 "with other CMAKE_CUDA_ARCHITECTURES for it)",
                 major, minor);
        return why;
    }
    return NULL;
}

/* 0 where no_device() says why not, so that backend: auto falls back to the CPU. */
static int32_t cuda_probe(const bora_host *h)
{
    char buf[256];
    const char *why = no_device(buf, sizeof buf);
    if (why) {
        BORA_DEBUG(h, "cannot run here: %s", why);
        return 0;
    }
    return 100; /* above the CPU backend's 10: backend: auto picks the GPU */
}

static void cuda_destroy(bora_backend *b)
{
    if (b->stream)
        cudaStreamSynchronize(b->stream);
    cuda_matmul_free(b);
    if (b->lt)
        cublasLtDestroy((cublasLtHandle_t)b->lt);
    if (b->lt_workspace)
        cudaFree(b->lt_workspace);
    if (b->scratch)
        cudaFree(b->scratch);
    if (b->flag)
        cudaFree(b->flag);
    if (b->stream)
        cudaStreamDestroy(b->stream);
    b->h->free(b->h, b);
}

static bora_status cuda_create(const bora_host *h, const bora_config *cfg, bora_backend **out)
{
    (void)cfg;
    char buf[256];
    const char *why = no_device(buf, sizeof buf);
    if (why)
        return h->fail(h, BORA_ERR_UNSUPPORTED,
                       "no usable GPU: %s (trainer.backend: cpu runs without one)", why);
    bora_backend *b = h->alloc(h, sizeof *b, 64);
    if (!b)
        return h->fail(h, BORA_ERR_NOMEM, "out of memory");
    memset(b, 0, sizeof *b);
    b->h = h;
    b->device = 0;
    const char *prof = getenv("BORA_PROFILE");
    b->sync_each = prof && *prof && strcmp(prof, "0") != 0;
    struct cudaDeviceProp prop;
    bora_status st = cuda_check(b, cudaSetDevice(b->device), "cudaSetDevice");
    if (st == BORA_OK)
        st = cuda_check(b, cudaGetDeviceProperties(&prop, b->device), "cudaGetDeviceProperties");
    if (st == BORA_OK) {
        snprintf(b->name, sizeof b->name, "%.256s, %d SMs", prop.name, prop.multiProcessorCount);
        b->cc_major = prop.major;
        b->cc_minor = prop.minor;
        cudaRuntimeGetVersion(&b->runtime_version);
    }
    if (st == BORA_OK)
        st = cuda_check(b, cudaStreamCreateWithFlags(&b->stream, cudaStreamNonBlocking),
                        "cudaStreamCreate");
    if (st == BORA_OK)
        st = cuda_check(b, cudaMalloc((void **)&b->flag, sizeof(int)),
                        "cudaMalloc of the kernels' error flag (4 bytes)");
    if (st == BORA_OK) {
        b->lt_workspace_bytes = CUDA_LT_WORKSPACE;
        st = cuda_check(b, cudaMalloc(&b->lt_workspace, b->lt_workspace_bytes),
                        "cudaMalloc of cuBLASLt's workspace (32 MiB)");
    }
    if (st == BORA_OK) {
        cublasLtHandle_t lt;
        cublasStatus_t cs = cublasLtCreate(&lt);
        if (cs != CUBLAS_STATUS_SUCCESS)
            st = h->fail(h, BORA_ERR_DEVICE, "cublasLtCreate: %s", cublasLtGetStatusString(cs));
        else
            b->lt = lt;
    }
    if (st != BORA_OK) {
        cuda_destroy(b);
        return st;
    }
    BORA_DEBUG(h, "%s (compute capability %d.%d), CUDA runtime %d, cuBLASLt %zu", b->name,
               b->cc_major, b->cc_minor, b->runtime_version, cublasLtGetVersion());
    *out = b;
    return BORA_OK;
}

static bora_status cuda_alloc(bora_backend *b, size_t size, size_t align, bora_buffer **out)
{
    void *p = NULL;
    (void)align; /* cudaMalloc's 256 bytes cover every alignment the host asks */
    cudaError_t err = cudaMalloc(&p, size ? size : 1);
    if (err != cudaSuccess) {
        cudaGetLastError();
        return b->h->fail(b->h, BORA_ERR_NOMEM, "cannot allocate %zu bytes on the GPU: %s", size,
                          cudaGetErrorString(err));
    }
    *out = (bora_buffer *)p;
    return BORA_OK;
}

static void cuda_free(bora_backend *b, bora_buffer *buf)
{
    cudaStreamSynchronize(b->stream); /* no kernel still reads it */
    cudaFree(buf);
}

/* A buffer is its device address: kernels get it, the host never dereferences it. */
static void *cuda_ptr(bora_backend *b, bora_buffer *buf)
{
    (void)b;
    return buf;
}

/* Copies wait for the stream: the host's memory may change or go once they return, and a copy
 * out must see every kernel queued before it. */
static bora_status cuda_copy_in(bora_backend *b, bora_buffer *dst, size_t offset, const void *src,
                                size_t size)
{
    if (!size)
        return BORA_OK;
    bora_status st = cuda_check(
        b, cudaMemcpyAsync((char *)dst + offset, src, size, cudaMemcpyHostToDevice, b->stream),
        "copy to the GPU");
    return st != BORA_OK ? st : cuda_check(b, cudaStreamSynchronize(b->stream), "copy to the GPU");
}

static bora_status cuda_copy_out(bora_backend *b, void *dst, bora_buffer *src, size_t offset,
                                 size_t size)
{
    if (!size)
        return BORA_OK;
    bora_status st = cuda_check(
        b,
        cudaMemcpyAsync(dst, (const char *)src + offset, size, cudaMemcpyDeviceToHost, b->stream),
        "copy from the GPU");
    return st != BORA_OK ? st
                         : cuda_check(b, cudaStreamSynchronize(b->stream), "copy from the GPU");
}

static bora_status cuda_synchronize(bora_backend *b)
{
    return cuda_check(b, cudaStreamSynchronize(b->stream), "a kernel of this run");
}

/* What the bits depend on: the device (its architecture and SM count fix cuBLASLt's choices)
 * and the CUDA and cuBLASLt versions. */
static void cuda_describe(bora_backend *b, char *buf, size_t cap)
{
    snprintf(buf, cap, "%s, sm_%d%d, CUDA runtime %d, cuBLASLt %zu", b->name, b->cc_major,
             b->cc_minor, b->runtime_version, cublasLtGetVersion());
}

/* ---- kernels: each queues its launches and reports a launch error with the op's name -------- */

/* A queued kernel's status; under BORA_PROFILE it is also waited for, so that the host's
 * per-node times (which it reads on the CPU) are the GPU's. */
static bora_status queued(bora_backend *b, bora_status st, const char *what)
{
    if (st == BORA_OK && b->sync_each)
        st = cuda_check(b, cudaStreamSynchronize(b->stream), what);
    return st;
}

#define CUDA_KERNEL(fn, launcher, what)                                      \
    static bora_status fn(bora_backend *b, const bora_kernel_args *a)        \
    {                                                                        \
        return queued(b, cuda_check(b, launcher(b->stream, a), what), what); \
    }

CUDA_KERNEL(k_copy, cuk_copy, "copy")
CUDA_KERNEL(k_fill, cuk_fill, "fill")
CUDA_KERNEL(k_iota, cuk_iota, "iota")
CUDA_KERNEL(k_elementwise, cuk_elementwise, "elementwise")
CUDA_KERNEL(k_softmax, cuk_softmax, "softmax")
CUDA_KERNEL(k_layernorm, cuk_layernorm, "layernorm")
CUDA_KERNEL(k_xent_grad, cuk_xent_grad, "cross-entropy gradient")
CUDA_KERNEL(k_scatter_add, cuk_scatter_add, "scatter_add")
CUDA_KERNEL(k_one_hot, cuk_one_hot, "one_hot")
CUDA_KERNEL(k_attention_bias, cuk_attention_bias, "attention bias")
CUDA_KERNEL(k_pad, cuk_pad, "pad")
CUDA_KERNEL(k_concat, cuk_concat, "concat")
CUDA_KERNEL(k_rms_norm, cuk_rms_norm, "rms_norm")

/* The error flag cleared before a kernel that may set it, read back after (a wait). */
static bora_status flag_clear(bora_backend *b, const char *what)
{
    return cuda_check(b, cudaMemsetAsync(b->flag, 0, sizeof(int), b->stream), what);
}

static bora_status flag_read(bora_backend *b, const char *what, int *set)
{
    bora_status st = cuda_check(
        b, cudaMemcpyAsync(set, b->flag, sizeof(int), cudaMemcpyDeviceToHost, b->stream), what);
    return st != BORA_OK ? st : cuda_check(b, cudaStreamSynchronize(b->stream), what);
}

static bora_status k_xent(bora_backend *b, const bora_kernel_args *a)
{
    int64_t rows = a->inputs[0].dims[0];
    double *per_row = cuda_scratch(b, sizeof(double) * (size_t)(rows > 0 ? rows : 1));
    if (!per_row)
        return BORA_ERR_NOMEM;
    int bad = 0;
    bora_status st = flag_clear(b, "cross-entropy");
    if (st == BORA_OK)
        st = cuda_check(b, cuk_xent(b->stream, a, per_row, b->flag), "cross-entropy");
    if (st == BORA_OK)
        st = flag_read(b, "cross-entropy", &bad);
    if (st == BORA_OK && bad)
        return b->h->fail(b->h, BORA_ERR_INVALID,
                          "cross-entropy: a target is outside 0..%lld (and not the ignore index)",
                          (long long)a->inputs[0].dims[1] - 1);
    return st;
}

static bora_status k_gather(bora_backend *b, const bora_kernel_args *a)
{
    int bad = 0;
    bora_status st = flag_clear(b, "gather");
    if (st == BORA_OK)
        st = cuda_check(b, cuk_gather(b->stream, a, b->flag), "gather");
    if (st == BORA_OK)
        st = flag_read(b, "gather", &bad);
    if (st == BORA_OK && bad)
        return b->h->fail(b->h, BORA_ERR_INVALID, "gather: an id is outside 0..%lld",
                          (long long)a->inputs[0].dims[0] - 1);
    return st;
}

static bora_status k_write_slice(bora_backend *b, const bora_kernel_args *a)
{
    int bad = 0;
    bora_status st = flag_clear(b, "write_slice");
    if (st == BORA_OK)
        st = cuda_check(b, cuk_write_slice(b->stream, a, b->flag), "write_slice");
    if (st == BORA_OK && a->n_inputs > 2)
        st = flag_read(b, "write_slice", &bad);
    if (st == BORA_OK && bad) {
        const bora_opt_pad *p = a->options;
        return b->h->fail(b->h, BORA_ERR_INVALID,
                          "write_slice: %lld rows from the start given do not fit in %lld",
                          (long long)a->inputs[1].dims[p->axis],
                          (long long)a->outputs[0].dims[p->axis]);
    }
    return st;
}

static bora_status k_reduce(bora_backend *b, const bora_kernel_args *a)
{
    size_t bytes = cuk_reduce_scratch(a);
    double *scratch = bytes ? cuda_scratch(b, bytes) : NULL;
    if (bytes && !scratch)
        return BORA_ERR_NOMEM;
    return queued(b, cuda_check(b, cuk_reduce(b->stream, a, scratch), "reduce"), "reduce");
}

static bora_status k_layernorm_grad(bora_backend *b, const bora_kernel_args *a)
{
    size_t bytes = cuk_layernorm_grad_scratch(a);
    double *scratch = bytes ? cuda_scratch(b, bytes) : NULL;
    if (bytes && !scratch)
        return BORA_ERR_NOMEM;
    return queued(b, cuda_check(b, cuk_layernorm_grad(b->stream, a, scratch), "layernorm gradient"),
                  "layernorm gradient");
}

/* ---- attention, RMSNorm, RoPE, the fused cross-entropy (attention.cu, rows.cu) ---- */

/* Both attention ops: a shape the kernels do not take fails naming it (the table sees dtypes
 * only, so the host cannot be sent to the decomposition by shape). */
static bora_status k_attention(bora_backend *b, const bora_kernel_args *a)
{
    const char *what = a->op == BORA_OP_ATTENTION ? "attention" : "attention gradient";
    const bora_tensor_desc *q = &a->inputs[0], *k = &a->inputs[1];
    int64_t E = q->dims[3], H = q->dims[1], Hk = k->dims[1];
    if (E > cuk_attention_max_head_dim() || Hk < 1 || H % Hk)
        return b->h->fail(b->h, BORA_ERR_UNSUPPORTED,
                          "%s: q (batch %lld, heads %lld, positions %lld, head_dim %lld) over %lld "
                          "kv heads: the CUDA kernel takes head_dim up to %lld and query heads a "
                          "multiple of the kv heads",
                          what, (long long)q->dims[0], (long long)H, (long long)q->dims[2],
                          (long long)E, (long long)Hk, (long long)cuk_attention_max_head_dim());
    int optin = 0;
    bora_status st = cuda_check(
        b, cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, b->device),
        what);
    if (st != BORA_OK)
        return st;
    size_t smem = cuk_attention_smem(a);
    if (smem > (size_t)optin)
        return b->h->fail(b->h, BORA_ERR_UNSUPPORTED,
                          "%s: head_dim %lld in %s needs %zu bytes of shared memory per block; "
                          "the device allows %d",
                          what, (long long)E, q->dtype == BORA_DTYPE_F64 ? "f64" : "f32", smem,
                          optin);
    void *dsum = NULL;
    if (a->op == BORA_OP_ATTENTION_GRAD) {
        size_t bytes = cuk_attention_grad_scratch(a);
        if (!(dsum = cuda_scratch(b, bytes ? bytes : 1)))
            return BORA_ERR_NOMEM;
    }
    return queued(b, cuda_check(b, cuk_attention(b->stream, a, dsum), what), what);
}

static bora_status k_rms_norm_grad(bora_backend *b, const bora_kernel_args *a)
{
    size_t bytes = cuk_rms_norm_grad_scratch(a);
    double *scratch = bytes ? cuda_scratch(b, bytes) : NULL;
    if (bytes && !scratch)
        return BORA_ERR_NOMEM;
    return queued(b, cuda_check(b, cuk_rms_norm_grad(b->stream, a, scratch), "rms_norm gradient"),
                  "rms_norm gradient");
}

/* Positions past the table fail: checked here for a fixed offset, by the kernel's flag for a
 * runtime one (a wait). */
static bora_status k_rope(bora_backend *b, const bora_kernel_args *a)
{
    const bora_opt_rope *o = a->options;
    const bora_tensor_desc *x = &a->inputs[0];
    int64_t P = a->inputs[1].dims[0], T = x->dims[o->position_axis];
    int runtime = a->n_inputs > 3, bad = 0;
    if (bora_tensor_desc_numel(x) == 0)
        return BORA_OK;
    if (!runtime && (o->offset < 0 || o->offset + T > P))
        return b->h->fail(b->h, BORA_ERR_INVALID,
                          "rope: positions %lld..%lld are past the table's %lld",
                          (long long)o->offset, (long long)(o->offset + T - 1), (long long)P);
    bora_status st = runtime ? flag_clear(b, "rope") : BORA_OK;
    if (st == BORA_OK)
        st = cuda_check(b, cuk_rope(b->stream, a, b->flag), "rope");
    if (st == BORA_OK && runtime)
        st = flag_read(b, "rope", &bad);
    if (st == BORA_OK && bad)
        return b->h->fail(b->h, BORA_ERR_INVALID,
                          "rope: the runtime position plus offset %lld puts %lld positions past "
                          "the table's %lld",
                          (long long)o->offset, (long long)T, (long long)P);
    return queued(b, st, "rope");
}

static bora_status k_xent_fused(bora_backend *b, const bora_kernel_args *a)
{
    int64_t rows = a->inputs[0].dims[0];
    double *per_row = cuda_scratch(b, sizeof(double) * (size_t)(rows > 0 ? rows : 1));
    if (!per_row)
        return BORA_ERR_NOMEM;
    int bad = 0;
    bora_status st = flag_clear(b, "cross-entropy");
    if (st == BORA_OK)
        st = cuda_check(b, cuk_xent_fused(b->stream, a, per_row, b->flag), "cross-entropy");
    if (st == BORA_OK)
        st = flag_read(b, "cross-entropy", &bad);
    if (st == BORA_OK && bad)
        return b->h->fail(b->h, BORA_ERR_INVALID,
                          "cross-entropy: a target is outside 0..%lld (and not the ignore index)",
                          (long long)a->inputs[0].dims[1] - 1);
    return st;
}

static bora_status k_matmul(bora_backend *b, const bora_kernel_args *a)
{
    return queued(b, cuda_matmul(b, a), "matmul");
}

static int is_float(int32_t dt)
{
    return dt == BORA_DTYPE_F32 || dt == BORA_DTYPE_F64;
}

/* The kernel table: f32 and f64 for every op here (f64 is what the gradient checks run), casts
 * and constants of the other dtypes, and bf16 matmuls with an f32 result. */
static bora_kernel_fn cuda_kernel(bora_backend *b, uint32_t op, const int32_t *dt, uint32_t n)
{
    (void)b;
    if (n == 0)
        return NULL;
    if (op == BORA_OP_SAMPLE || (op >= BORA_OP_TOP_K && op <= BORA_OP_GROUPED_MATMUL_GRAD))
        return cuda_moe_kernel(op, dt, n); /* moe.cu */
    if (op == BORA_OP_COPY) {
        for (uint32_t i = 0; i < n; i++)
            if (!is_float(dt[i]) && dt[i] != BORA_DTYPE_I32 && dt[i] != BORA_DTYPE_I64 &&
                dt[i] != BORA_DTYPE_BF16)
                return NULL;
        return n == 2 ? k_copy : NULL;
    }
    if (op == BORA_OP_ONE_HOT || op == BORA_OP_ATTENTION_BIAS) {
        for (uint32_t i = 0; i + 1 < n; i++)
            if (dt[i] != BORA_DTYPE_I32)
                return NULL;
        if (!is_float(dt[n - 1]))
            return NULL;
        return op == BORA_OP_ONE_HOT ? k_one_hot : k_attention_bias;
    }
    if (op == BORA_OP_MATMUL && n == 3 && dt[0] == BORA_DTYPE_BF16 && dt[1] == BORA_DTYPE_BF16)
        return dt[2] == BORA_DTYPE_F32 ? k_matmul : NULL;
    if (op == BORA_OP_FILL && n == 1 &&
        (dt[0] == BORA_DTYPE_I32 || dt[0] == BORA_DTYPE_I64 || dt[0] == BORA_DTYPE_BF16 ||
         dt[0] == BORA_DTYPE_U8))
        return k_fill;
    if (op == BORA_OP_IOTA)
        return n == 1 && (is_float(dt[0]) || dt[0] == BORA_DTYPE_I32) ? k_iota : NULL;
    /* the fused cross-entropy with a bf16 gradient (trainer.mp c=bf16): logits, targets (i32),
     * dloss -> loss, lse, dlogits (bf16) */
    if (op == BORA_OP_XENT_FUSED && n == 6 && dt[5] == BORA_DTYPE_BF16) {
        for (uint32_t i = 0; i < 5; i++)
            if (dt[i] != (i == 1 ? BORA_DTYPE_I32 : BORA_DTYPE_F32))
                return NULL;
        return k_xent_fused;
    }
    int32_t ft = op == BORA_OP_SCATTER_ADD ? dt[n > 1 ? 1 : 0] : dt[0];
    if (!is_float(ft))
        return NULL;
    /* Integer operands where an op takes them; every other operand is the float type. */
    for (uint32_t i = 0; i < n; i++) {
        int int_ok = (op == BORA_OP_XENT || op == BORA_OP_XENT_GRAD || op == BORA_OP_XENT_FUSED ||
                      op == BORA_OP_GATHER) &&
                     i == 1;
        int_ok |= op == BORA_OP_SCATTER_ADD && i == 0;
        /* attention: 3 (grad: 6) float inputs, then i32 segment ids and key length, then
         * 2 (grad: 3) float outputs */
        int_ok |= op == BORA_OP_ATTENTION && i >= 3 && i + 2 < n;
        int_ok |= op == BORA_OP_ATTENTION_GRAD && i >= 6 && i + 3 < n;
        int_ok |= op == BORA_OP_ROPE && n == 5 && i == 3;        /* x, cos, sin, offset -> y */
        int_ok |= op == BORA_OP_WRITE_SLICE && n == 4 && i == 2; /* dst, value, start -> dst */
        if (int_ok ? dt[i] != BORA_DTYPE_I32 : dt[i] != ft)
            return NULL;
    }
    switch (op) {
    case BORA_OP_FILL: return n == 1 ? k_fill : NULL;
    case BORA_OP_ADD: /* 2: a gradient buffer's add, whose own value the executor passes first */
        return n == 3 || n == 2 ? k_elementwise : NULL;
    case BORA_OP_SUB:
    case BORA_OP_MUL:
    case BORA_OP_DIV:
    case BORA_OP_MINIMUM:
    case BORA_OP_MAXIMUM:
    case BORA_OP_LESS:
    case BORA_OP_LESS_EQUAL:
    case BORA_OP_EQUAL:
    case BORA_OP_NOT_EQUAL: return n == 3 ? k_elementwise : NULL;
    case BORA_OP_ACT_GRAD: return n == 3 || n == 4 ? k_elementwise : NULL; /* 4: max's (x, y, dy) */
    case BORA_OP_WHERE: return n == 4 ? k_elementwise : NULL;
    case BORA_OP_NEG:
    case BORA_OP_EXP:
    case BORA_OP_LOG:
    case BORA_OP_SQRT:
    case BORA_OP_RSQRT:
    case BORA_OP_TANH:
    case BORA_OP_SIGMOID:
    case BORA_OP_RELU:
    case BORA_OP_SILU:
    case BORA_OP_GELU_TANH:
    case BORA_OP_GELU_EXACT:
    case BORA_OP_SCALE:
    case BORA_OP_SIN:
    case BORA_OP_COS:
    case BORA_OP_ABS:
    case BORA_OP_SIGN: return n == 2 ? k_elementwise : NULL;
    case BORA_OP_SUM:
    case BORA_OP_MAX:
    case BORA_OP_SUM_SQUARES: return n == 2 ? k_reduce : NULL;
    case BORA_OP_MATMUL: return n == 3 ? k_matmul : NULL; /* no bias: the host adds it */
    case BORA_OP_LAYERNORM: return n == 6 ? k_layernorm : NULL;
    case BORA_OP_LAYERNORM_GRAD: return n == 8 ? k_layernorm_grad : NULL;
    case BORA_OP_SOFTMAX:
    case BORA_OP_LOG_SOFTMAX: return n == 2 ? k_softmax : NULL;
    case BORA_OP_XENT: return n == 4 ? k_xent : NULL;
    case BORA_OP_XENT_GRAD: return n == 5 ? k_xent_grad : NULL;
    case BORA_OP_GATHER: return n == 3 ? k_gather : NULL;
    case BORA_OP_SCATTER_ADD: return n == 3 || n == 4 ? k_scatter_add : NULL;
    case BORA_OP_PAD: return n == 2 ? k_pad : NULL;
    case BORA_OP_CONCAT: return k_concat;
    case BORA_OP_WRITE_SLICE: return n == 3 || n == 4 ? k_write_slice : NULL;
    case BORA_OP_RMS_NORM: return n == 3 || n == 4 ? k_rms_norm : NULL; /* (x, [w]) -> y, rstd */
    case BORA_OP_RMS_NORM_GRAD: /* (x, [w], rstd, dy) -> dx, [dw] */
        return n == 4 || n == 6 ? k_rms_norm_grad : NULL;
    case BORA_OP_ROPE: return n == 4 || n == 5 ? k_rope : NULL;
    case BORA_OP_XENT_FUSED: return n == 6 ? k_xent_fused : NULL;
    case BORA_OP_ATTENTION: return n >= 5 && n <= 8 ? k_attention : NULL;
    case BORA_OP_ATTENTION_GRAD: return n >= 9 && n <= 12 ? k_attention : NULL;
    default: return NULL;
    }
}

static const bora_backend_ops cuda_ops = {
    .hdr = {sizeof(bora_backend_ops), BORA_KIND_BACKEND, "cuda",
            "NVIDIA GPU: CUDA kernels, f32/bf16 matmuls on cuBLASLt", cuda_keys},
    .probe = cuda_probe,
    .create = cuda_create,
    .destroy = cuda_destroy,
    .buffer_alloc = cuda_alloc,
    .buffer_free = cuda_free,
    .buffer_ptr = cuda_ptr,
    .copy_in = cuda_copy_in,
    .copy_out = cuda_copy_out,
    .kernel = cuda_kernel,
    .synchronize = cuda_synchronize,
    .describe = cuda_describe,
};

static bora_status cuda_init(const bora_host *h)
{
    return h->add(h, &cuda_ops.hdr);
}

BORA_PLUGIN_DEFINE("cuda", "0.1.0", cuda_init, NULL)
