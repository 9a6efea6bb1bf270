/* plugins/backends/cuda/matmul.c — BORA_OP_MATMUL on cuBLASLt: descriptors made once per shape
 * and kept, the algorithm chosen by a fixed rule (the heuristic's first answer, never a timing),
 * so a shape always runs the same algorithm on the same device and library. Layouts cuBLASLt
 * cannot express (no unit stride in an operand, a result not in rows) and shapes for which the
 * heuristic offers nothing run on kernels.cu's plain kernel.
 *
 * cuBLASLt is column-major; a row-major (M, N) result is the column-major (N, M) matrix C^T, so
 * the product is computed as C^T = B^T A^T with cuBLASLt's A being our B and its B our A. */
#include "cuda.h"

#include <cublasLt.h>
#include <string.h>

/* What fixes a descriptor set: dtypes, shape, strides and the operands' pointer alignment. */
typedef struct mm_key {
    int64_t dtype, batch, M, N, K;
    int64_t sa[3], sb[3], sc[3];
    int64_t align[3];
} mm_key;

struct cuda_mm {
    mm_key key;
    int plain; /* 1: cuBLASLt takes no part (layout or no algorithm): the plain kernel */
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
    cublasLtMatmulAlgo_t algo;
};

/* X (r, c) with strides (sr, sc) as cuBLASLt's op(L) = X^T: L is X^T, a column-major (c, r),
 * untransposed when X's columns have unit stride; X, a column-major (r, c), transposed when its
 * rows have. 0 when neither holds. */
static int lt_view(int64_t r, int64_t c, int64_t sr, int64_t sc, cublasOperation_t *op,
                   uint64_t *rows, uint64_t *cols, int64_t *ld)
{
    if (sc == 1 || c == 1) {
        *op = CUBLAS_OP_N;
        *rows = (uint64_t)c;
        *cols = (uint64_t)r;
        *ld = r == 1 ? (c > 1 ? c : 1) : sr;
        return *ld >= (c > 1 ? c : 1);
    }
    if (sr == 1 || r == 1) {
        *op = CUBLAS_OP_T;
        *rows = (uint64_t)r;
        *cols = (uint64_t)c;
        *ld = c == 1 ? (r > 1 ? r : 1) : sc;
        return *ld >= (r > 1 ? r : 1);
    }
    return 0;
}

static int64_t alignment(const void *p)
{
    uintptr_t u = (uintptr_t)p;
    int64_t a = 1;
    while (a < 256 && !(u & (uintptr_t)a))
        a <<= 1;
    return a;
}

static cudaDataType_t lt_type(int64_t dtype)
{
    return dtype == BORA_DTYPE_F64    ? CUDA_R_64F
           : dtype == BORA_DTYPE_BF16 ? CUDA_R_16BF
                                      : CUDA_R_32F;
}

static void mm_free(cuda_mm *m)
{
    if (m->desc)
        cublasLtMatmulDescDestroy(m->desc);
    if (m->la)
        cublasLtMatrixLayoutDestroy(m->la);
    if (m->lb)
        cublasLtMatrixLayoutDestroy(m->lb);
    if (m->lc)
        cublasLtMatrixLayoutDestroy(m->lc);
}

static int set_batch(cublasLtMatrixLayout_t l, int32_t count, int64_t stride)
{
    return cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &count,
                                            sizeof count) == CUBLAS_STATUS_SUCCESS &&
           cublasLtMatrixLayoutSetAttribute(l, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride,
                                            sizeof stride) == CUBLAS_STATUS_SUCCESS;
}

/* The descriptors and algorithm for key; m->plain when cuBLASLt does not take it. */
static void mm_make(bora_backend *b, cuda_mm *m)
{
    const mm_key *k = &m->key;
    cublasOperation_t op_a, op_b, op_c;
    uint64_t ra, ca, rb, cb, rc, cc;
    int64_t lda, ldb, ldc;
    m->plain = 1;
    /* cuBLASLt's A is our B (K, N) seen as B^T; its B is our A (M, K) seen as A^T; C^T is
     * column-major (N, M) when C's columns have unit stride. */
    if (!lt_view(k->K, k->N, k->sb[1], k->sb[2], &op_a, &ra, &ca, &lda) ||
        !lt_view(k->M, k->K, k->sa[1], k->sa[2], &op_b, &rb, &cb, &ldb) ||
        !lt_view(k->M, k->N, k->sc[1], k->sc[2], &op_c, &rc, &cc, &ldc) || op_c != CUBLAS_OP_N ||
        k->K == 0 || k->batch > INT32_MAX)
        return;
    int f64 = k->dtype == BORA_DTYPE_F64;
    cudaDataType_t in = lt_type(k->dtype), out = f64 ? CUDA_R_64F : CUDA_R_32F;
    if (cublasLtMatmulDescCreate(&m->desc, f64 ? CUBLAS_COMPUTE_64F : CUBLAS_COMPUTE_32F,
                                 f64 ? CUDA_R_64F : CUDA_R_32F) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulDescSetAttribute(m->desc, CUBLASLT_MATMUL_DESC_TRANSA, &op_a, sizeof op_a) !=
            CUBLAS_STATUS_SUCCESS ||
        cublasLtMatmulDescSetAttribute(m->desc, CUBLASLT_MATMUL_DESC_TRANSB, &op_b, sizeof op_b) !=
            CUBLAS_STATUS_SUCCESS ||
        cublasLtMatrixLayoutCreate(&m->la, in, ra, ca, lda) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatrixLayoutCreate(&m->lb, in, rb, cb, ldb) != CUBLAS_STATUS_SUCCESS ||
        cublasLtMatrixLayoutCreate(&m->lc, out, rc, cc, ldc) != CUBLAS_STATUS_SUCCESS)
        return;
    if (k->batch > 1 && (!set_batch(m->la, (int32_t)k->batch, k->sb[0]) ||
                         !set_batch(m->lb, (int32_t)k->batch, k->sa[0]) ||
                         !set_batch(m->lc, (int32_t)k->batch, k->sc[0])))
        return;
    cublasLtMatmulPreference_t pref;
    if (cublasLtMatmulPreferenceCreate(&pref) != CUBLAS_STATUS_SUCCESS)
        return;
    uint64_t ws = b->lt_workspace_bytes;
    uint32_t al_a = (uint32_t)k->align[1], al_b = (uint32_t)k->align[0],
             al_c = (uint32_t)k->align[2];
    cublasLtMatmulHeuristicResult_t res;
    int found = 0;
    memset(&res, 0, sizeof res);
    if (cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                             sizeof ws) == CUBLAS_STATUS_SUCCESS &&
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES,
                                             &al_a, sizeof al_a) == CUBLAS_STATUS_SUCCESS &&
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                                             &al_b, sizeof al_b) == CUBLAS_STATUS_SUCCESS &&
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES,
                                             &al_c, sizeof al_c) == CUBLAS_STATUS_SUCCESS &&
        cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES,
                                             &al_c, sizeof al_c) == CUBLAS_STATUS_SUCCESS)
        cublasLtMatmulAlgoGetHeuristic((cublasLtHandle_t)b->lt, m->desc, m->la, m->lb, m->lc, m->lc,
                                       pref, 1, &res, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (found < 1 || res.state != CUBLAS_STATUS_SUCCESS)
        return;
    m->algo = res.algo;
    m->plain = 0;
}

/* The kept set for key, made now if new; NULL out of memory. */
static cuda_mm *mm_get(bora_backend *b, const mm_key *key)
{
    for (size_t i = 0; i < b->n_mm; i++)
        if (!memcmp(&b->mm[i]->key, key, sizeof *key))
            return b->mm[i];
    if (b->n_mm == b->cap_mm) {
        size_t cap = b->cap_mm ? 2 * b->cap_mm : 32;
        cuda_mm **grown = b->h->alloc(b->h, cap * sizeof *grown, 16);
        if (!grown)
            return NULL;
        if (b->mm) {
            memcpy(grown, b->mm, b->n_mm * sizeof *grown);
            b->h->free(b->h, b->mm);
        }
        b->mm = grown;
        b->cap_mm = cap;
    }
    cuda_mm *m = b->h->alloc(b->h, sizeof *m, 16);
    if (!m)
        return NULL;
    memset(m, 0, sizeof *m);
    m->key = *key;
    mm_make(b, m);
    BORA_DEBUG(b->h, "matmul %lldx(%lld,%lld,%lld) dtype %lld: %s", (long long)key->batch,
               (long long)key->M, (long long)key->N, (long long)key->K, (long long)key->dtype,
               m->plain ? "plain kernel" : "cuBLASLt");
    b->mm[b->n_mm++] = m;
    return m;
}

bora_status cuda_matmul(bora_backend *b, const bora_kernel_args *a)
{
    const bora_tensor_desc *A = &a->inputs[0], *B = &a->inputs[1], *C = &a->outputs[0];
    mm_key key;
    memset(&key, 0, sizeof key);
    key.dtype = A->dtype;
    key.batch = C->dims[0];
    key.M = C->dims[1];
    key.N = C->dims[2];
    key.K = A->dims[2];
    for (int i = 0; i < 3; i++) {
        key.sa[i] = A->strides[i];
        key.sb[i] = B->strides[i];
        key.sc[i] = C->strides[i];
    }
    if (key.batch == 1) /* one product: the batch strides mean nothing */
        key.sa[0] = key.sb[0] = key.sc[0] = 0;
    key.align[0] = alignment(A->data);
    key.align[1] = alignment(B->data);
    key.align[2] = alignment(C->data);
    if (key.batch * key.M * key.N == 0)
        return BORA_OK;
    cuda_mm *m = mm_get(b, &key);
    if (!m)
        return b->h->fail(b->h, BORA_ERR_NOMEM, "matmul: out of memory");
    if (m->plain)
        return cuda_check(b, cuk_matmul_naive(b->stream, a), "matmul (plain kernel)");
    if (key.dtype == BORA_DTYPE_F64) {
        double one = 1, zero = 0;
        cublasStatus_t st = cublasLtMatmul(
            (cublasLtHandle_t)b->lt, m->desc, &one, B->data, m->la, A->data, m->lb, &zero, C->data,
            m->lc, C->data, m->lc, &m->algo, b->lt_workspace, b->lt_workspace_bytes, b->stream);
        if (st != CUBLAS_STATUS_SUCCESS)
            return b->h->fail(b->h, BORA_ERR_DEVICE, "matmul: cublasLtMatmul failed: %s",
                              cublasLtGetStatusString(st));
        return BORA_OK;
    }
    float one = 1, zero = 0;
    cublasStatus_t st = cublasLtMatmul((cublasLtHandle_t)b->lt, m->desc, &one, B->data, m->la,
                                       A->data, m->lb, &zero, C->data, m->lc, C->data, m->lc,
                                       &m->algo, b->lt_workspace, b->lt_workspace_bytes, b->stream);
    if (st != CUBLAS_STATUS_SUCCESS)
        return b->h->fail(b->h, BORA_ERR_DEVICE, "matmul: cublasLtMatmul failed: %s",
                          cublasLtGetStatusString(st));
    return BORA_OK;
}

void cuda_matmul_free(bora_backend *b)
{
    for (size_t i = 0; i < b->n_mm; i++) {
        mm_free(b->mm[i]);
        b->h->free(b->h, b->mm[i]);
    }
    if (b->mm)
        b->h->free(b->h, b->mm);
    b->mm = NULL;
    b->n_mm = b->cap_mm = 0;
}
