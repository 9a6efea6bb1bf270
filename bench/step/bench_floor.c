/* bench/step/bench_floor.c — the matmul floor of one training step of GPT-2 or (--llama) a Llama:
 * every matmul of the step (per layer its linears, and the LM head; forward, dx and dw; not
 * attention) timed alone on oneDNN, each at the best of dnnl_sgemm and a matmul primitive made
 * for its shape (oneDNN's own threads, OMP_NUM_THREADS), in the layouts the step uses. Prints one
 * line per shape and a total: the fastest the step could be if everything but its matmuls took
 * no time.
 * GPT-2: per layer c_attn, attn.c_proj, c_fc and mlp.c_proj, Conv1D weights (in, out), and the LM
 * head tied to wte (vocab, embed). Llama: per layer q_proj, k_proj and v_proj (k and v as wide as
 * the key/value heads, which grouped-query attention shares), o_proj, and SwiGLU's gate_proj,
 * up_proj and down_proj, nn.Linear weights (out, in); the LM head (vocab, embed) as GPT-2's.
 * With --bf16 (trainer.mp c=bf16), the same products of bf16 operands with an f32 result, each at
 * the best of oneDNN's bf16 matmul primitive and dnnl_sgemm on the operands widened to f32 (which
 * is exact, so both compute the same bf16 product; the widening is not timed). oneDNN 2.6 has
 * bf16 matmuls only with AVX512-BF16 or AMX; elsewhere sgemm alone is the floor, and it says so.
 * A product whose A is read transposed over 8192 rows or more (the head's dw) also counts
 * the way the CPU backend may run it: Cᵀ in 4096-column blocks, each a primitive reading both
 * operands in their stored order (the transposes back into C not timed).
 *
 * usage: bench_floor [--bf16] TOKENS [LAYERS EMBED VOCAB]
 *        bench_floor [--bf16] --llama TOKENS [LAYERS EMBED VOCAB HEADS KV_HEADS INTERMEDIATE]
 *        (GPT-2 defaults 12 768 50257; Llama 12 768 32000 12 4 2048) */
#define _POSIX_C_SOURCE 200809L
#include <dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* C (M×N) = op(A) op(B), op = transpose when ta / tb is 'T'; A, B, C row-major. */
typedef struct shape {
    const char *what;
    char ta, tb;
    int64_t M, N, K;
    int per_step; /* how many times the step runs it */
} shape;

static float *buffer(int64_t n)
{
    float *p = aligned_alloc(64, (size_t)((n * 4 + 63) / 64 * 64));
    if (!p) {
        fprintf(stderr, "bench_floor: out of memory\n");
        exit(1);
    }
    for (int64_t i = 0; i < n; i++)
        p[i] = (float)((i * 7919 % 1000) - 500) * 1e-3f;
    return p;
}

static double time_sgemm(const shape *s, const float *A, const float *B, float *C, int reps)
{
    int64_t lda = s->ta == 'N' ? s->K : s->M, ldb = s->tb == 'N' ? s->N : s->K;
    double best = 1e30;
    for (int r = 0; r < reps; r++) {
        double t = now_s();
        if (dnnl_sgemm(s->ta, s->tb, s->M, s->N, s->K, 1.0f, A, lda, B, ldb, 0.0f, C, s->N) !=
            dnnl_success)
            return 1e30;
        t = now_s() - t;
        best = t < best ? t : best;
    }
    return best;
}

/* One run of a product: which primitive, on which data. */
typedef struct call {
    int prim;
    void *a, *b, *c;
} call;

/* The best of reps runs of the calls in order, on primitives for the products dims[i] (M, N, K)
 * with A and B strided as strides[i] (A's row and column, then B's), operands of dtype dt and a
 * dense f32 C; -1 when oneDNN has no such matmul here. */
static double time_calls(dnnl_data_type_t dt, int n_prims, const int64_t dims[][3],
                         const int64_t strides[][4], int n_calls, const call *calls, int reps)
{
    dnnl_engine_t eng;
    dnnl_stream_t stream;
    if (dnnl_engine_create(&eng, dnnl_cpu, 0) != dnnl_success)
        return 1e30;
    dnnl_stream_create(&stream, eng, dnnl_stream_default_flags);
    dnnl_primitive_t prim[2] = {NULL, NULL};
    dnnl_memory_desc_t md[2][3];
    double best = 1e30;
    for (int i = 0; i < n_prims && best > 0; i++) {
        const int64_t M = dims[i][0], N = dims[i][1], K = dims[i][2];
        dnnl_dims_t ad = {M, K}, bd = {K, N}, cd = {M, N};
        dnnl_dims_t as = {strides[i][0], strides[i][1]}, bs = {strides[i][2], strides[i][3]};
        dnnl_dims_t cs = {N, 1};
        dnnl_matmul_desc_t mdesc;
        dnnl_primitive_desc_t pd;
        dnnl_memory_desc_init_by_strides(&md[i][0], 2, ad, dt, as);
        dnnl_memory_desc_init_by_strides(&md[i][1], 2, bd, dt, bs);
        dnnl_memory_desc_init_by_strides(&md[i][2], 2, cd, dnnl_f32, cs);
        if (dnnl_matmul_desc_init(&mdesc, &md[i][0], &md[i][1], NULL, &md[i][2]) != dnnl_success ||
            dnnl_primitive_desc_create(&pd, &mdesc, NULL, eng, NULL) != dnnl_success) {
            best = -1;
            break;
        }
        if (dnnl_primitive_create(&prim[i], pd) != dnnl_success)
            prim[i] = NULL;
        dnnl_primitive_desc_destroy(pd);
    }
    int made = best > 0; /* a primitive oneDNN describes but does not make: no time (1e30) */
    for (int i = 0; i < n_prims; i++)
        made &= prim[i] != NULL;
    for (int r = 0; r < reps && made; r++) {
        double t = now_s();
        for (int j = 0; j < n_calls; j++) {
            const call *c = &calls[j];
            dnnl_memory_t mem[3];
            dnnl_memory_create(&mem[0], &md[c->prim][0], eng, c->a);
            dnnl_memory_create(&mem[1], &md[c->prim][1], eng, c->b);
            dnnl_memory_create(&mem[2], &md[c->prim][2], eng, c->c);
            dnnl_exec_arg_t args[3] = {
                {DNNL_ARG_SRC, mem[0]}, {DNNL_ARG_WEIGHTS, mem[1]}, {DNNL_ARG_DST, mem[2]}};
            dnnl_primitive_execute(prim[c->prim], stream, 3, args);
            dnnl_stream_wait(stream);
            for (int k = 0; k < 3; k++)
                dnnl_memory_destroy(mem[k]);
        }
        t = now_s() - t;
        best = t < best ? t : best;
    }
    for (int i = 0; i < 2; i++)
        if (prim[i])
            dnnl_primitive_destroy(prim[i]);
    dnnl_stream_destroy(stream);
    dnnl_engine_destroy(eng);
    return best;
}

/* The best of reps runs of a matmul primitive with operands of dtype dt; -1 when oneDNN has no
 * such primitive here. */
static double time_primitive(const shape *s, float *A, float *B, float *C, int reps,
                             dnnl_data_type_t dt)
{
    const int64_t dims[1][3] = {{s->M, s->N, s->K}};
    const int64_t strides[1][4] = {{s->ta == 'N' ? s->K : 1, s->ta == 'N' ? 1 : s->M,
                                    s->tb == 'N' ? s->N : 1, s->tb == 'N' ? 1 : s->K}};
    const call c = {0, A, B, C};
    return time_calls(dt, 1, dims, strides, 1, &c, reps);
}

/* The best of reps runs of Cᵀ = op(B)ᵀ op(A)ᵀ for a 'T','N' shape, in blocks of xb of C's rows
 * (Cᵀ's columns), on primitives with operands of dtype dt; -1 when oneDNN has none. */
static double time_transposed(const shape *s, float *A, float *B, float *C, int reps,
                              dnnl_data_type_t dt, int64_t xb)
{
    /* (N × K: B (K × N) read across) · (K × mb: A's columns, row stride M) -> N × mb */
    int64_t tail = s->M % xb;
    const int64_t dims[2][3] = {{s->N, xb, s->K}, {s->N, tail, s->K}};
    const int64_t strides[2][4] = {{1, s->N, s->M, 1}, {1, s->N, s->M, 1}};
    int64_t n_calls = (s->M + xb - 1) / xb;
    call *calls = malloc(sizeof(call) * (size_t)n_calls);
    if (!calls)
        return -1;
    size_t esize = dt == dnnl_f32 ? 4 : 2;
    for (int64_t j = 0; j < n_calls; j++)
        calls[j] = (call){s->M - j * xb < xb, B, (char *)A + (size_t)(j * xb) * esize, C};
    double t = time_calls(dt, tail ? 2 : 1, dims, strides, (int)n_calls, calls, reps);
    free(calls);
    return t;
}

/* A positive integer argument, or 0. */
static int64_t arg(const char *text)
{
    char *end;
    long long v = strtoll(text, &end, 10);
    return *text && !*end && v > 0 ? (int64_t)v : 0;
}

int main(int argc, char **argv)
{
    int bf16 = argc > 1 && !strcmp(argv[1], "--bf16");
    if (bf16)
        argv++, argc--;
    int llama = argc > 1 && !strcmp(argv[1], "--llama");
    if (llama)
        argv++, argc--;
    if (llama ? argc != 2 && argc != 8 : argc != 2 && argc != 5) {
        fprintf(stderr, "usage: bench_floor [--bf16] TOKENS [LAYERS EMBED VOCAB]\n"
                        "       bench_floor [--bf16] --llama TOKENS [LAYERS EMBED VOCAB HEADS "
                        "KV_HEADS INTERMEDIATE]\n");
        return 2;
    }
    int64_t T = arg(argv[1]), L = argc > 2 ? arg(argv[2]) : 12;
    int64_t E = argc > 2 ? arg(argv[3]) : 768, V = argc > 2 ? arg(argv[4]) : llama ? 32000 : 50257;
    int64_t H = argc > 5 ? arg(argv[5]) : 12, KV = argc > 5 ? arg(argv[6]) : 4;
    int64_t F = argc > 5 ? arg(argv[7]) : 2048;
    if (!T || !L || !E || !V || !H || !KV || !F) {
        fprintf(stderr, "bench_floor: sizes must be positive integers\n");
        return 2;
    }
    if (llama && (E % H || H % KV)) {
        fprintf(stderr,
                "bench_floor: HEADS (%lld) must divide EMBED (%lld) and KV_HEADS (%lld) "
                "must divide HEADS\n",
                (long long)H, (long long)E, (long long)KV);
        return 2;
    }
    /* every matrix at most 2^31 floats, so no size product below overflows */
    const int64_t cap = (int64_t)1 << 31;
    int64_t widest = V > 4 * E ? V : 4 * E;
    widest = llama && F > widest ? F : widest;
    if (T > cap / widest || E > cap / widest || L > 1024) {
        fprintf(stderr,
                "bench_floor: TOKENS (%lld) or EMBED (%lld) times the widest side (%lld: "
                "VOCAB, INTERMEDIATE or 4 x EMBED) is past 2^31 floats, or LAYERS past "
                "1024: make them smaller\n",
                (long long)T, (long long)E, (long long)widest);
        return 2;
    }
    /* GPT-2's Conv1D weights are (in, out): y = x W; dx = dy Wᵀ; dW = xᵀ dy. Llama's nn.Linear
     * weights are (out, in): y = x Wᵀ; dx = dy W; dW = dyᵀ x. The LM head is (V, E) in both:
     * logits = x Wᵀ; dx = dlogits W; dW = dlogitsᵀ x. */
    const struct {
        const char *name;
        int64_t in, out;
    } gpt2[] = {{"attn.c_attn", E, 3 * E},
                {"attn.c_proj", E, E},
                {"mlp.c_fc", E, 4 * E},
                {"mlp.c_proj", 4 * E, E}},
      llama_lin[] = {{"q_proj", E, E},   {"k_proj", E, E / H * KV}, {"v_proj", E, E / H * KV},
                     {"o_proj", E, E},   {"gate_proj", E, F},       {"up_proj", E, F},
                     {"down_proj", F, E}};
    shape shapes[32];
    int n = 0;
    for (int i = 0; !llama && i < 4; i++) {
        shapes[n++] = (shape){gpt2[i].name, 'N', 'N', T, gpt2[i].out, gpt2[i].in, (int)L};
        shapes[n++] = (shape){gpt2[i].name, 'N', 'T', T, gpt2[i].in, gpt2[i].out, (int)L};
        shapes[n++] = (shape){gpt2[i].name, 'T', 'N', gpt2[i].in, gpt2[i].out, T, (int)L};
    }
    for (int i = 0; llama && i < 7; i++) {
        int64_t in = llama_lin[i].in, out = llama_lin[i].out;
        shapes[n++] = (shape){llama_lin[i].name, 'N', 'T', T, out, in, (int)L};
        shapes[n++] = (shape){llama_lin[i].name, 'N', 'N', T, in, out, (int)L};
        shapes[n++] = (shape){llama_lin[i].name, 'T', 'N', out, in, T, (int)L};
    }
    shapes[n++] = (shape){"lm_head", 'N', 'T', T, V, E, 1};
    shapes[n++] = (shape){"lm_head", 'N', 'N', T, E, V, 1};
    shapes[n++] = (shape){"lm_head", 'T', 'N', V, E, T, 1};
    const char *pass[] = {"forward", "dx", "dw"};
    double total = 0, flops = 0;
    int no_bf16 = 0;
    for (int i = 0; i < n; i++) {
        const shape *s = &shapes[i];
        float *A = buffer(s->M * s->K), *B = buffer(s->K * s->N), *C = buffer(s->M * s->N);
        int reps = 2 * s->M * s->N * s->K > 20e9 ? 2 : 5;
        time_sgemm(s, A, B, C, 1); /* warm */
        double ts = time_sgemm(s, A, B, C, reps);
        double tp = time_primitive(s, A, B, C, reps + 1, bf16 ? dnnl_bf16 : dnnl_f32);
        if (tp < 0 && bf16 && !no_bf16++) {
            const dnnl_version_t *v = dnnl_version();
            printf("bf16: oneDNN %d.%d has no bf16 matmul on this CPU (it needs AVX512-BF16 or "
                   "AMX): sgemm on the widened operands alone\n",
                   v->major, v->minor);
        }
        tp = tp < 0 ? 1e30 : tp;
        double tx = -1;
        if (s->ta == 'T' && s->tb == 'N' && s->M >= 8192)
            tx = time_transposed(s, A, B, C, reps, bf16 ? dnnl_bf16 : dnnl_f32, 4096);
        if (tx >= 0 && tx < tp)
            tp = tx;
        double best = ts < tp ? ts : tp, f = 2.0 * s->M * s->N * s->K;
        printf("%-12s %-7s %c%c M=%-6lld N=%-6lld K=%-6lld x%-2d sgemm %8.2f ms, %s %8.2f ms%s: "
               "%6.1f GFLOP/s\n",
               s->what, pass[i % 3], s->ta, s->tb, (long long)s->M, (long long)s->N,
               (long long)s->K, s->per_step, 1e3 * ts, bf16 ? "bf16 matmul" : "matmul",
               tp < 1e30 ? 1e3 * tp : 0.0, tx >= 0 && tx <= tp ? " (Cᵀ in blocks)" : "",
               f / best / 1e9);
        total += best * s->per_step;
        flops += f * s->per_step;
        free(A);
        free(B);
        free(C);
    }
    printf("floor_s=%.4f gflop=%.2f gflops=%.1f\n", total, flops / 1e9, flops / total / 1e9);
    return 0;
}
