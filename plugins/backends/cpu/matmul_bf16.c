/* plugins/backends/cpu/matmul_bf16.c — bf16 × bf16 → f32 matmuls on oneDNN's matmul primitive,
 * and the fixed rule that says when the backend uses it instead of widening blocks to f32 for
 * sgemm (kernels.c).
 *
 * The rule is by CPU, never by timing, so a run and its resume take the same path:
 *   - AMX-BF16: the primitive (oneDNN runs it on the tile unit);
 *   - AMD with AVX512-BF16 (Zen 4 and later): the primitive. Measured on a 2-core EPYC (family
 *     25): GPT-2 124M's products at 340-440 GFLOP/s, against 190-210 for sgemm;
 *   - Intel with AVX512-BF16 and no AMX: widened. Measured on a 2-core Xeon (family 6, model 207,
 *     AMX hidden): the primitive at 157-175 GFLOP/s, sgemm at 310-345;
 *   - anything else: widened (oneDNN 2.6 has no bf16 matmul there but its reference loops).
 * BORA_CPU_BF16_MATMUL=onednn or =widen overrides the rule (onednn fails where oneDNN has no bf16
 * matmul). The choice is part of the backend's description, which checkpoints record.
 *
 * A product's primitive (its shape and strides are the key) is made when the graph is built
 * (bora_backend_ops.prepare), or else on the product's first run, and kept for the backend's
 * life; `-v` logs each one made, and when. An implementation oneDNN only has as reference loops
 * is refused, and that product is widened instead. oneDNN splits the work among the OpenMP
 * threads itself, by the thread count and the shape, so the bits depend on both, as DESIGN §8
 * allows for bf16. */
#define _GNU_SOURCE
#include "cpu.h"

#include <cpuid.h>
#include <dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* One product's primitive: M, N, K and the three operands' row and column strides. */
typedef struct mm_entry {
    int64_t key[9];
    dnnl_primitive_t prim; /* NULL: oneDNN has only reference loops for it; widen */
    dnnl_memory_desc_t md[3];
} mm_entry;

struct cpu_onednn {
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    mm_entry *mm;
    size_t n, cap;
};

static int has_amx_bf16(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return 0;
    return (d >> 22) & 1u; /* CPUID.(EAX=7,ECX=0):EDX[22] AMX-BF16 */
}

/* The primitive for a (2-d, strided) bf16 product, or NULL when oneDNN has only its reference
 * loops for it (or nothing); impl gets the implementation's name ("none" for nothing). */
static dnnl_primitive_t make_primitive(cpu_onednn *d, const int64_t key[9],
                                       dnnl_memory_desc_t md[3], char *impl, size_t cap)
{
    dnnl_dims_t dims[3] = {{key[0], key[2]}, {key[2], key[1]}, {key[0], key[1]}};
    dnnl_dims_t strides[3] = {{key[3], key[4]}, {key[5], key[6]}, {key[7], key[8]}};
    const dnnl_data_type_t types[3] = {dnnl_bf16, dnnl_bf16, dnnl_f32};
    snprintf(impl, cap, "none");
    for (int i = 0; i < 3; i++)
        if (dnnl_memory_desc_init_by_strides(&md[i], 2, dims[i], types[i], strides[i]) !=
            dnnl_success)
            return NULL;
    dnnl_matmul_desc_t desc;
    dnnl_primitive_desc_t pd;
    if (dnnl_matmul_desc_init(&desc, &md[0], &md[1], NULL, &md[2]) != dnnl_success ||
        dnnl_primitive_desc_create(&pd, &desc, NULL, d->engine, NULL) != dnnl_success)
        return NULL;
    const char *name = NULL;
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &name) != dnnl_success || !name)
        name = "unknown";
    snprintf(impl, cap, "%s", name);
    dnnl_primitive_t prim = NULL;
    if (strncmp(name, "ref", 3) != 0 && dnnl_primitive_create(&prim, pd) != dnnl_success)
        prim = NULL;
    dnnl_primitive_desc_destroy(pd);
    return prim;
}

/* oneDNN's implementation for a plain 64 × 64 × 64 bf16 product: "brg:avx512_core_bf16",
 * "brg:avx512_core_bf16_amx_bf16", ..., or "ref..." / "none" where it has no fast one. */
static void probe_impl(cpu_onednn *d, char *buf, size_t cap)
{
    const int64_t key[9] = {64, 64, 64, 64, 1, 64, 1, 64, 1};
    dnnl_memory_desc_t md[3];
    dnnl_primitive_t p = make_primitive(d, key, md, buf, cap);
    if (!p)
        snprintf(buf, cap, "none");
    else
        dnnl_primitive_destroy(p);
}

bora_status cpu_bf16_setup(bora_backend *b)
{
    const bora_host *h = b->h;
    cpu_onednn *d = calloc(1, sizeof *d);
    if (!d)
        return h->fail(h, BORA_ERR_NOMEM, "out of memory");
    b->dnnl = d;
    if (dnnl_engine_create(&d->engine, dnnl_cpu, 0) != dnnl_success ||
        dnnl_stream_create(&d->stream, d->engine, dnnl_stream_default_flags) != dnnl_success)
        return h->fail(h, BORA_ERR_DEVICE, "oneDNN: cannot create a CPU engine and stream");
    int amx = has_amx_bf16();
#ifdef SYS_arch_prctl
    /* Linux (5.16 on) grants a process AMX's tile state only when asked: ask before oneDNN looks
     * (ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA). */
    if (amx && syscall(SYS_arch_prctl, 0x1023, 18) != 0)
        amx = 0;
#endif
    char impl[64];
    probe_impl(d, impl, sizeof impl);
    int have = strcmp(impl, "none") != 0;
    __builtin_cpu_init();
    int bf16 = __builtin_cpu_supports("avx512bf16");
    int amd = __builtin_cpu_is("amd");
    const char *want = getenv("BORA_CPU_BF16_MATMUL");
    if (want && *want && strcmp(want, "onednn") != 0 && strcmp(want, "widen") != 0)
        return h->fail(h, BORA_ERR_CONFIG, "BORA_CPU_BF16_MATMUL=%s: say onednn or widen", want);
    if (want && !strcmp(want, "onednn") && !have)
        return h->fail(h, BORA_ERR_UNSUPPORTED,
                       "BORA_CPU_BF16_MATMUL=onednn: oneDNN has no bf16 matmul on this CPU (it "
                       "needs AVX512-BF16 or AMX); unset it to widen bf16 to f32 for sgemm");
    if (want && *want) {
        b->bf16_onednn = !strcmp(want, "onednn");
        snprintf(b->bf16_why, sizeof b->bf16_why, "BORA_CPU_BF16_MATMUL=%s", want);
    } else if (have && (amx || (amd && bf16))) {
        b->bf16_onednn = 1;
        snprintf(b->bf16_why, sizeof b->bf16_why, "%s",
                 amx ? "this CPU has AMX-BF16" : "an AMD CPU with AVX512-BF16");
    } else {
        snprintf(b->bf16_why, sizeof b->bf16_why, "%s",
                 have ? "without AMX, oneDNN's bf16 matmul is half sgemm's speed on Intel"
                      : "this CPU lacks AVX512-BF16 and AMX");
    }
    snprintf(b->bf16_impl, sizeof b->bf16_impl, "%s", b->bf16_onednn ? impl : "widened to sgemm");
    return BORA_OK;
}

void cpu_bf16_teardown(bora_backend *b)
{
    cpu_onednn *d = b->dnnl;
    if (!d)
        return;
    for (size_t i = 0; i < d->n; i++)
        if (d->mm[i].prim)
            dnnl_primitive_destroy(d->mm[i].prim);
    free(d->mm);
    if (d->stream)
        dnnl_stream_destroy(d->stream);
    if (d->engine)
        dnnl_engine_destroy(d->engine);
    free(d);
    b->dnnl = NULL;
}

/* The kept entry for key, made on first use (logged with when: building the graph or running
 * the product); NULL when out of memory. */
static mm_entry *entry_for(bora_backend *bk, const int64_t key[9], int building)
{
    cpu_onednn *d = bk->dnnl;
    for (size_t i = 0; i < d->n; i++)
        if (!memcmp(d->mm[i].key, key, sizeof d->mm[i].key))
            return &d->mm[i];
    if (d->n == d->cap) {
        size_t cap = d->cap ? 2 * d->cap : 16;
        mm_entry *mm = realloc(d->mm, cap * sizeof *mm);
        if (!mm)
            return NULL;
        d->mm = mm, d->cap = cap;
    }
    mm_entry *e = &d->mm[d->n++];
    memset(e, 0, sizeof *e);
    memcpy(e->key, key, sizeof e->key);
    char impl[64];
    e->prim = make_primitive(d, key, e->md, impl, sizeof impl);
    bk->h->log(bk->h, BORA_LOG_DEBUG,
               "oneDNN bf16 matmul %lld x %lld x %lld (strides %lld,%lld %lld,%lld %lld,%lld): "
               "%s%s, made %s",
               (long long)key[0], (long long)key[2], (long long)key[1], (long long)key[3],
               (long long)key[4], (long long)key[5], (long long)key[6], (long long)key[7],
               (long long)key[8], impl, e->prim ? "" : " (refused: widened to sgemm)",
               building ? "while building the graph" : "on its first run");
    return e;
}

/* A product whose A is read transposed and has many rows (a tied LM head's weight gradient,
 * dlogitsᵀ · x, M the vocabulary) runs transposed instead, in blocks of XB rows of C: each block
 * Cᵀ[:, m0:m0+XB] = Bᵀ · Aᵀ[:, m0:m0+XB] reads both operands in their stored order, then is
 * transposed into C. Measured on a 2-core EPYC (family 26), 50257 × 768 over K = 1024: 85 ms
 * for the products and 14 for the transposes, against 119-137 in A's transposed order (over
 * K = 4096, 345 ms for the products against 610). A fixed rule, by shape only. */
#define XB 4096

static int transposed_route(const bora_kernel_args *a)
{
    const bora_tensor_desc *A = &a->inputs[0], *C = &a->outputs[0];
    int64_t M = C->dims[1], N = C->dims[2], K = A->dims[2];
    return C->dims[0] == 1 && M >= 2 * XB && K >= 256 && A->strides[1] == 1 && A->strides[2] >= M &&
           C->strides[2] == 1 && C->strides[1] == N;
}

/* The keys of a product's primitives: one, or the transposed route's two (full blocks and the
 * last, partial one; n 1 when M is a multiple of XB). */
static int keys_of(const bora_kernel_args *a, int64_t key[2][9])
{
    const bora_tensor_desc *A = &a->inputs[0], *B = &a->inputs[1], *C = &a->outputs[0];
    int64_t M = C->dims[1], N = C->dims[2], K = A->dims[2];
    if (!transposed_route(a)) {
        const int64_t k[9] = {M,
                              N,
                              K,
                              A->strides[1],
                              A->strides[2],
                              B->strides[1],
                              B->strides[2],
                              C->strides[1],
                              C->strides[2]};
        memcpy(key[0], k, sizeof k);
        return 1;
    }
    const int64_t widths[2] = {XB, M % XB};
    int n = 0;
    for (int i = 0; i < 2 && widths[i]; i++) {
        /* (N × K, B's strides swapped) · (K × mb, A's swapped) -> N × mb, dense */
        int64_t mb = widths[i];
        const int64_t k[9] = {N, mb, K, B->strides[2], B->strides[1], A->strides[2], 1, mb, 1};
        memcpy(key[n++], k, sizeof k);
    }
    return n;
}

/* The kept entries for a bf16 product's arguments, made now if new; 0 when oneDNN does not take
 * the product (*st 0: widen it) or out of memory (*st BORA_ERR_NOMEM), else how many. */
static int entries_of(bora_backend *bk, const bora_kernel_args *a, int building, int *st,
                      mm_entry *e[2])
{
    const bora_tensor_desc *A = &a->inputs[0], *C = &a->outputs[0];
    *st = 0;
    if (!bk->bf16_onednn || !bk->dnnl || C->dims[1] == 0 || C->dims[2] == 0 || A->dims[2] == 0)
        return 0;
    int64_t key[2][9];
    int n = keys_of(a, key);
    /* made first, then looked up: making one may move the others (the table grows) */
    for (int i = 0; i < n; i++)
        if (!entry_for(bk, key[i], building)) {
            *st = BORA_ERR_NOMEM;
            return 0;
        }
    for (int i = 0; i < n; i++) {
        e[i] = entry_for(bk, key[i], building);
        if (!e[i]->prim)
            return 0;
    }
    return n;
}

bora_status cpu_prepare(bora_backend *bk, const bora_kernel_args *a)
{
    int st = 0;
    if (a->op == BORA_OP_MATMUL && a->n_inputs == 2 && a->n_outputs == 1 &&
        a->inputs[0].dtype == BORA_DTYPE_BF16 && a->inputs[1].dtype == BORA_DTYPE_BF16 &&
        a->outputs[0].dtype == BORA_DTYPE_F32) {
        mm_entry *e[2];
        entries_of(bk, a, 1, &st, e);
    }
    return st ? bk->h->fail(bk->h, st, "out of memory making oneDNN's primitives") : BORA_OK;
}

/* One primitive run over the three operands' data. */
static int run_entry(cpu_onednn *d, const mm_entry *e, void *const data[3])
{
    dnnl_memory_t mem[3] = {NULL, NULL, NULL};
    int st = 0;
    for (int i = 0; i < 3 && !st; i++)
        if (dnnl_memory_create(&mem[i], &e->md[i], d->engine, data[i]) != dnnl_success)
            st = BORA_ERR_NOMEM;
    dnnl_exec_arg_t args[3] = {
        {DNNL_ARG_SRC, mem[0]}, {DNNL_ARG_WEIGHTS, mem[1]}, {DNNL_ARG_DST, mem[2]}};
    if (!st && (dnnl_primitive_execute(e->prim, d->stream, 3, args) != dnnl_success ||
                dnnl_stream_wait(d->stream) != dnnl_success))
        st = BORA_ERR_DEVICE;
    for (int i = 0; i < 3; i++)
        if (mem[i])
            dnnl_memory_destroy(mem[i]);
    return st;
}

/* The transposed route (transposed_route): block after block of C's rows. */
static int run_transposed(bora_backend *bk, mm_entry *const e[2], const bora_kernel_args *a)
{
    const bora_tensor_desc *A = &a->inputs[0], *B = &a->inputs[1], *C = &a->outputs[0];
    int64_t M = C->dims[1], N = C->dims[2];
    float *t = cpu_scratch(bk, sizeof(float) * (size_t)(N * XB));
    if (!t)
        return BORA_ERR_NOMEM;
    for (int64_t m0 = 0; m0 < M; m0 += XB) {
        int64_t mb = M - m0 < XB ? M - m0 : XB;
        void *data[3] = {B->data, (uint16_t *)A->data + m0 * A->strides[1], t};
        int st = run_entry(bk->dnnl, e[mb == XB ? 0 : 1], data);
        if (st)
            return st;
        float *c = (float *)C->data + m0 * N;
        /* C[m0 + m][n] = t[n][m], in 16 × 16 tiles read along t's rows */
#pragma omp parallel for collapse(2) schedule(static)
        for (int64_t m1 = 0; m1 < mb; m1 += 16)
            for (int64_t n1 = 0; n1 < N; n1 += 16) {
                int64_t me = m1 + 16 < mb ? m1 + 16 : mb, ne = n1 + 16 < N ? n1 + 16 : N;
                for (int64_t n = n1; n < ne; n++)
                    for (int64_t m = m1; m < me; m++)
                        c[m * N + n] = t[n * mb + m];
            }
    }
    return 0;
}

/* C (B, M, N) f32 = A (B, M, K) bf16 · B (B, K, N) bf16 on oneDNN: 0 done, 1 not taken (the
 * caller widens), negative a bora_status. The batch runs one 2-d product after another. */
int cpu_matmul_bf16_onednn(bora_backend *bk, const bora_kernel_args *a)
{
    const bora_tensor_desc *A = &a->inputs[0], *B = &a->inputs[1], *C = &a->outputs[0];
    cpu_onednn *d = bk->dnnl;
    int st = 0;
    mm_entry *e[2] = {NULL, NULL};
    if (!entries_of(bk, a, 0, &st, e))
        return st ? st : 1;
    if (transposed_route(a))
        return run_transposed(bk, e, a);
    const bora_tensor_desc *t[3] = {A, B, C};
    for (int64_t bi = 0; bi < C->dims[0] && !st; bi++) {
        void *data[3];
        for (int i = 0; i < 3; i++) {
            size_t size = i == 2 ? sizeof(float) : sizeof(uint16_t);
            data[i] = (char *)t[i]->data + (size_t)(bi * t[i]->strides[0]) * size;
        }
        st = run_entry(d, e[0], data);
    }
    return st;
}
