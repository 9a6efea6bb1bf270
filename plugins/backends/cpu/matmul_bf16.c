/* plugins/backends/cpu/matmul_bf16.c — bf16 × bf16 → f32 matmuls on oneDNN's matmul primitive,
 * and the fixed rule that says when the backend uses it instead of widening blocks to f32 for
 * sgemm (kernels.c).
 *
 * The rule is by CPU, never by timing, so a run and its resume take the same path:
 *   - AMX-BF16: the primitive (oneDNN runs it on the tile unit). Measured on a 2-core Xeon
 *     (family 6, model 207, AMX visible): GPT-2 124M's products at 420-910 GFLOP/s, sgemm at
 *     140-290 on the same machine;
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
 * threads itself, by the thread count and the shape, so the bits depend on both, as
 * docs/design.md §8 allows for bf16. */
#define _GNU_SOURCE
#include "cpu.h"
#include "kernels_fast.h"

#include <cpuid.h>
#include <dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

/* One product's primitive (its key: cpu_mm_key) */
typedef struct mm_entry {
    cpu_mm_key key;
    dnnl_primitive_t prim;    /* NULL: oneDNN has only reference loops for it; widen */
    dnnl_memory_desc_t md[5]; /* A, B, C, (CPU_MM_THREADED) the scratchpad, (CPU_MM_BIAS) bias */
    size_t pad_bytes;
} mm_entry;

/* A thread's stream, and the scratchpad its CPU_MM_THREADED products use. */
struct cpu_mm_stream {
    dnnl_stream_t stream;
    void *pad;
    size_t pad_bytes;
};

/* The kept entries, each allocated alone (a pointer to one stays good), found through an
 * open-addressing index of hashes. */
struct cpu_onednn {
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    mm_entry **mm;
    size_t n;
    size_t *index; /* slots: 0 empty, else entry + 1; a power of two, under half full */
    size_t slots;
};

static uint64_t key_hash(const cpu_mm_key *k)
{
    const unsigned char *p = (const unsigned char *)k;
    uint64_t h = 1469598103934665603ull; /* FNV-1a */
    for (size_t i = 0; i < sizeof *k; i++)
        h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

static int has_amx_bf16(void)
{
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d))
        return 0;
    return (d >> 22) & 1u; /* CPUID.(EAX=7,ECX=0):EDX[22] AMX-BF16 */
}

/* oneDNN's attributes for alpha and accumulate (NULL for neither); 0 when oneDNN refuses. */
static int make_attr(const cpu_mm_key *k, dnnl_primitive_attr_t *attr)
{
    *attr = NULL;
    if (k->alpha == 1.0f && !(k->flags & (CPU_MM_ADD | CPU_MM_THREADED)))
        return 1;
    if (dnnl_primitive_attr_create(attr) != dnnl_success)
        return 0;
    int ok = k->alpha == 1.0f ||
             dnnl_primitive_attr_set_output_scales(*attr, 1, 0, &k->alpha) == dnnl_success;
    if (ok && (k->flags & CPU_MM_THREADED)) /* each thread passes its own */
        ok = dnnl_primitive_attr_set_scratchpad_mode(*attr, dnnl_scratchpad_mode_user) ==
             dnnl_success;
    if (ok && (k->flags & CPU_MM_ADD)) {
        dnnl_post_ops_t po = NULL;
        ok = dnnl_post_ops_create(&po) == dnnl_success &&
             dnnl_post_ops_append_sum(po, 1.0f) == dnnl_success &&
             dnnl_primitive_attr_set_post_ops(*attr, po) == dnnl_success;
        if (po)
            dnnl_post_ops_destroy(po);
    }
    if (!ok) {
        dnnl_primitive_attr_destroy(*attr);
        *attr = NULL;
    }
    return ok;
}

/* The primitive for a (2-d or batched, strided) bf16 product, or NULL when oneDNN has only its
 * reference loops for it (or nothing); impl gets the implementation's name ("none" for
 * nothing). */
static dnnl_primitive_t make_primitive(cpu_onednn *d, const cpu_mm_key *k, dnnl_memory_desc_t md[5],
                                       size_t *pad_bytes, char *impl, size_t cap)
{
    int nd = k->batch ? 3 : 2, o = k->batch ? 0 : 1; /* 2-d: the descriptions' last two axes */
    dnnl_dims_t dims[3] = {{k->batch, k->M, k->K}, {k->batch, k->K, k->N}, {k->batch, k->M, k->N}};
    const int64_t *strides[3] = {k->sa, k->sb, k->sc};
    const dnnl_data_type_t types[3] = {dnnl_bf16, dnnl_bf16, dnnl_f32};
    snprintf(impl, cap, "none");
    for (int i = 0; i < 3; i++)
        if (dnnl_memory_desc_init_by_strides(&md[i], nd, dims[i] + o, types[i], strides[i] + o) !=
            dnnl_success)
            return NULL;
    /* the bias: one row of N, broadcast over the batch and the rows */
    dnnl_dims_t bias_dims = {1, 1, k->N}, bias_strides = {k->N, k->N, 1};
    const dnnl_memory_desc_t *bias = NULL;
    md[4] = (dnnl_memory_desc_t){0};
    if (k->flags & CPU_MM_BIAS) {
        if (dnnl_memory_desc_init_by_strides(&md[4], nd, bias_dims + o, dnnl_f32,
                                             bias_strides + o) != dnnl_success)
            return NULL;
        bias = &md[4];
    }
    dnnl_matmul_desc_t desc;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_attr_t attr;
    if (!make_attr(k, &attr))
        return NULL;
    int made = dnnl_matmul_desc_init(&desc, &md[0], &md[1], bias, &md[2]) == dnnl_success &&
               dnnl_primitive_desc_create(&pd, &desc, attr, d->engine, NULL) == dnnl_success;
    if (attr)
        dnnl_primitive_attr_destroy(attr);
    if (!made)
        return NULL;
    const char *name = NULL;
    if (dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &name) != dnnl_success || !name)
        name = "unknown";
    snprintf(impl, cap, "%s", name);
    const dnnl_memory_desc_t *pad = dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0);
    md[3] = pad ? *pad : (dnnl_memory_desc_t){0};
    *pad_bytes = pad ? dnnl_memory_desc_get_size(pad) : 0;
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
    const cpu_mm_key key = {.M = 64,
                            .N = 64,
                            .K = 64,
                            .sa = {0, 64, 1},
                            .sb = {0, 64, 1},
                            .sc = {0, 64, 1},
                            .alpha = 1.0f};
    dnnl_memory_desc_t md[5];
    size_t pad;
    dnnl_primitive_t p = make_primitive(d, &key, md, &pad, buf, cap);
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
    for (size_t i = 0; i < d->n; i++) {
        if (d->mm[i]->prim)
            dnnl_primitive_destroy(d->mm[i]->prim);
        free(d->mm[i]);
    }
    free(d->mm);
    free(d->index);
    if (d->stream)
        dnnl_stream_destroy(d->stream);
    if (d->engine)
        dnnl_engine_destroy(d->engine);
    free(d);
    b->dnnl = NULL;
}

/* The kept entry for key, made on first use (logged with when: building the graph or running
 * the product); NULL when out of memory. */
static mm_entry *entry_for(bora_backend *bk, const cpu_mm_key *key, int building)
{
    cpu_onednn *d = bk->dnnl;
    size_t at = 0;
    if (d->slots) {
        for (at = key_hash(key) & (d->slots - 1); d->index[at]; at = (at + 1) & (d->slots - 1))
            if (!memcmp(&d->mm[d->index[at] - 1]->key, key, sizeof *key))
                return d->mm[d->index[at] - 1];
    }
    if (2 * (d->n + 1) > d->slots) { /* grow: the entries' list and a rebuilt index */
        size_t slots = d->slots ? 2 * d->slots : 64;
        size_t *index = calloc(slots, sizeof *index);
        mm_entry **mm = realloc(d->mm, slots / 2 * sizeof *mm);
        if (!index || !mm) {
            free(index);
            if (mm)
                d->mm = mm;
            return NULL;
        }
        d->mm = mm;
        for (size_t i = 0; i < d->n; i++) {
            size_t j = key_hash(&mm[i]->key) & (slots - 1);
            while (index[j])
                j = (j + 1) & (slots - 1);
            index[j] = i + 1;
        }
        free(d->index);
        d->index = index, d->slots = slots;
        for (at = key_hash(key) & (slots - 1); index[at]; at = (at + 1) & (slots - 1))
            ;
    }
    mm_entry *e = calloc(1, sizeof *e);
    if (!e)
        return NULL;
    d->mm[d->n++] = e;
    d->index[at] = d->n;
    e->key = *key;
    char impl[64], batch[96] = "", extra[64] = "";
    e->prim = make_primitive(d, key, e->md, &e->pad_bytes, impl, sizeof impl);
    if (key->batch)
        snprintf(batch, sizeof batch, "%lld of ", (long long)key->batch);
    if (key->alpha != 1.0f || (key->flags & (CPU_MM_ADD | CPU_MM_BIAS)))
        snprintf(extra, sizeof extra, ", times %g%s%s", key->alpha,
                 key->flags & CPU_MM_ADD ? ", added to C" : "",
                 key->flags & CPU_MM_BIAS ? ", plus a bias" : "");
    bk->h->log(bk->h, BORA_LOG_DEBUG,
               "oneDNN bf16 matmul %s%lld x %lld x %lld (strides %lld,%lld %lld,%lld %lld,%lld%s): "
               "%s%s, made %s",
               batch, (long long)key->M, (long long)key->K, (long long)key->N,
               (long long)key->sa[1], (long long)key->sa[2], (long long)key->sb[1],
               (long long)key->sb[2], (long long)key->sc[1], (long long)key->sc[2], extra, impl,
               e->prim ? "" : " (refused: widened to sgemm)",
               building ? "while building the graph" : "on its first run");
    return e;
}

const cpu_mm *cpu_mm_get(bora_backend *bk, const cpu_mm_key *key, int building)
{
    if (!bk->bf16_onednn || !bk->dnnl)
        return NULL;
    mm_entry *e = entry_for(bk, key, building);
    return e && e->prim ? (const cpu_mm *)e : NULL;
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
 * last, partial one; n 1 when M is a multiple of XB); 0 for a product with a bias (a third
 * input) that would take the transposed route, which the caller runs without its bias. */
static int keys_of(const bora_kernel_args *a, cpu_mm_key key[2])
{
    const bora_tensor_desc *A = &a->inputs[0], *B = &a->inputs[1], *C = &a->outputs[0];
    int64_t M = C->dims[1], N = C->dims[2], K = A->dims[2];
    int bias = a->n_inputs == 3;
    memset(key, 0, 2 * sizeof *key);
    if (bias && transposed_route(a))
        return 0;
    if (!transposed_route(a)) {
        key[0] = (cpu_mm_key){.M = M,
                              .N = N,
                              .K = K,
                              .sa = {0, A->strides[1], A->strides[2]},
                              .sb = {0, B->strides[1], B->strides[2]},
                              .sc = {0, C->strides[1], C->strides[2]},
                              .alpha = 1.0f,
                              .flags = bias ? CPU_MM_BIAS : 0};
        return 1;
    }
    const int64_t widths[2] = {XB, M % XB};
    int n = 0;
    for (int i = 0; i < 2 && widths[i]; i++) {
        /* (N × K, B's strides swapped) · (K × mb, A's swapped) -> N × mb, dense */
        int64_t mb = widths[i];
        key[n++] = (cpu_mm_key){.M = N,
                                .N = mb,
                                .K = K,
                                .sa = {0, B->strides[2], B->strides[1]},
                                .sb = {0, A->strides[2], 1},
                                .sc = {0, mb, 1},
                                .alpha = 1.0f};
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
    cpu_mm_key key[2];
    int n = keys_of(a, key);
    if (!n)
        return 0;
    for (int i = 0; i < n; i++)
        if (!(e[i] = entry_for(bk, &key[i], building))) {
            *st = BORA_ERR_NOMEM;
            return 0;
        }
    for (int i = 0; i < n; i++)
        if (!e[i]->prim)
            return 0;
    return n;
}

bora_status cpu_prepare(bora_backend *bk, const bora_kernel_args *a)
{
    int st = 0;
    if (a->op == BORA_OP_MATMUL && (a->n_inputs == 2 || a->n_inputs == 3) && a->n_outputs == 1 &&
        a->inputs[0].dtype == BORA_DTYPE_BF16 && a->inputs[1].dtype == BORA_DTYPE_BF16 &&
        a->outputs[0].dtype == BORA_DTYPE_F32) {
        mm_entry *e[2];
        if (!entries_of(bk, a, 1, &st, e) && !st && a->n_inputs == 3) {
            bora_kernel_args product = *a; /* run without its bias (then added): make that */
            product.n_inputs = 2;
            entries_of(bk, &product, 1, &st, e);
        }
    }
    if (!st && (a->op == BORA_OP_ATTENTION || a->op == BORA_OP_ATTENTION_GRAD))
        return cpu_prepare_attention(bk, a);
    return st ? bk->h->fail(bk->h, st, "out of memory making oneDNN's primitives") : BORA_OK;
}

/* One primitive run over A, B, C and (CPU_MM_BIAS) the bias's data, on s (NULL: the backend's
 * stream). */
static int run_on(cpu_onednn *d, cpu_mm_stream *s, const mm_entry *e, void *const data[4])
{
    dnnl_memory_t mem[5] = {NULL, NULL, NULL, NULL, NULL};
    dnnl_exec_arg_t args[5] = {
        {DNNL_ARG_SRC, NULL}, {DNNL_ARG_WEIGHTS, NULL}, {DNNL_ARG_DST, NULL}};
    int st = 0, n = 3;
    void *ptr[5] = {data[0], data[1], data[2], NULL, NULL};
    const dnnl_memory_desc_t *md[5] = {&e->md[0], &e->md[1], &e->md[2], NULL, NULL};
    if ((e->key.flags & CPU_MM_THREADED) && e->pad_bytes) {
        if (!s)
            return BORA_ERR_INVALID;
        if (s->pad_bytes < e->pad_bytes) {
            free(s->pad);
            s->pad = aligned_alloc(64, (e->pad_bytes + 63) / 64 * 64);
            s->pad_bytes = s->pad ? e->pad_bytes : 0;
            if (!s->pad)
                return BORA_ERR_NOMEM;
        }
        args[n].arg = DNNL_ARG_SCRATCHPAD, md[n] = &e->md[3];
        ptr[n++] = s->pad;
    }
    if (e->key.flags & CPU_MM_BIAS) {
        args[n].arg = DNNL_ARG_BIAS, md[n] = &e->md[4];
        ptr[n++] = data[3];
    }
    for (int i = 0; i < n && !st; i++) {
        if (dnnl_memory_create(&mem[i], md[i], d->engine, ptr[i]) != dnnl_success)
            st = BORA_ERR_NOMEM;
        args[i].memory = mem[i];
    }
    dnnl_stream_t stream = s ? s->stream : d->stream;
    if (!st && (dnnl_primitive_execute(e->prim, stream, n, args) != dnnl_success ||
                dnnl_stream_wait(stream) != dnnl_success))
        st = BORA_ERR_DEVICE;
    for (int i = 0; i < n; i++)
        if (mem[i])
            dnnl_memory_destroy(mem[i]);
    return st;
}

cpu_mm_stream *cpu_mm_stream_new(bora_backend *bk)
{
    cpu_mm_stream *s = calloc(1, sizeof *s);
    if (s && (!bk->dnnl || dnnl_stream_create(&s->stream, bk->dnnl->engine,
                                              dnnl_stream_default_flags) != dnnl_success)) {
        free(s);
        s = NULL;
    }
    return s;
}

void cpu_mm_stream_free(cpu_mm_stream *s)
{
    if (!s)
        return;
    dnnl_stream_destroy(s->stream);
    free(s->pad);
    free(s);
}

int cpu_mm_run(bora_backend *bk, cpu_mm_stream *s, const cpu_mm *m, const void *a, const void *b,
               float *c)
{
    void *data[4] = {(void *)a, (void *)b, c, NULL};
    return run_on(bk->dnnl, s, (const mm_entry *)m, data);
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
        void *data[4] = {B->data, (uint16_t *)A->data + m0 * A->strides[1], t, NULL};
        int st = run_on(bk->dnnl, NULL, e[mb == XB ? 0 : 1], data);
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

/* C (B, M, N) f32 = A (B, M, K) bf16 · B (B, K, N) bf16 (+ a bias row, the third input, its
 * data N f32 in a row) on oneDNN: 0 done, 1 not taken (the caller widens, or with a bias runs the
 * product without it and adds it), negative a bora_status. The batch runs one 2-d product after
 * another. */
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
        void *data[4] = {NULL, NULL, NULL, a->n_inputs == 3 ? a->inputs[2].data : NULL};
        for (int i = 0; i < 3; i++) {
            size_t size = i == 2 ? sizeof(float) : sizeof(uint16_t);
            data[i] = (char *)t[i]->data + (size_t)(bi * t[i]->strides[0]) * size;
        }
        st = run_on(d, NULL, e[0], data);
    }
    return st;
}
