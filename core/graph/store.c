/* core/graph/store.c — the parameter store: one flat, 64-byte aligned block of parameters and
 * one of gradients, in declaration order, shared by every graph of a run; and parameter
 * initialisation from Philox keyed by (seed, name, element index), so a parameter's initial
 * value never depends on creation order, backend or device count. */
#include "graph.h"

#include "../util/log.h"
#include "../util/str.h"

#include <bora/philox.h>

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- initial values: Philox4x32-10 (sdk/bora/philox.h) --------------------------------- */

/* FNV-1a, 64-bit: the name's part of the key. */
static uint64_t hash_name(const char *s)
{
    uint64_t h = 1469598103934665603ull;
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211ull;
    return h;
}

/* A parameter's Philox key: its name's hash and the seed. */
void g_philox_key(uint64_t seed, const char *name, uint32_t key[2])
{
    uint64_t h = hash_name(name) ^ (seed * 0x9E3779B97F4A7C15ull);
    key[0] = (uint32_t)h, key[1] = (uint32_t)(h >> 32);
}

static double init_at(uint64_t seed, const uint32_t key[2], bora_init init, uint64_t i)
{
    switch (init.kind) {
    case BORA_INIT_ZEROS: return 0.0;
    case BORA_INIT_ONES: return 1.0;
    case BORA_INIT_CONSTANT: return init.value;
    default: break;
    }
    /* One counter per element: (index, seed) -> two uniforms -> one normal (Box-Muller). */
    uint32_t ctr[4] = {(uint32_t)i, (uint32_t)(i >> 32), (uint32_t)seed, (uint32_t)(seed >> 32)};
    bora_philox4x32(ctr, key);
    double u1 = ((double)(((uint64_t)ctr[0] << 21) ^ ctr[1]) + 0.5) / 9007199254740992.0;
    double u2 = (double)ctr[2] / 4294967296.0;
    u1 = fmod(u1, 1.0);
    if (u1 <= 0)
        u1 = 0x1p-53;
    return init.value * sqrt(-2.0 * log(u1)) * cos(2.0 * M_PI * u2);
}

/* Whisper's sinusoids(length, channels) as transformers computes them, every step rounded to
 * f32 as torch's float32 tensors round it: the increment ln(max)/(C/2 - 1) in double (numpy),
 * the exponent -inc·i, its exp, the angle t·f and its sine or cosine each rounded to f32. */
double g_init_sinusoid(bora_init init, int64_t channels, uint64_t i)
{
    int64_t half = channels / 2, t = (int64_t)(i / (uint64_t)channels),
            c = (int64_t)(i % (uint64_t)channels), k = c < half ? c : c - half;
    double max_timescale = init.value > 0 ? init.value : 10000.0;
    double inc = log(max_timescale) / (double)(half - 1);
    float expo = (float)-inc * (float)k;
    float f = (float)exp((double)expo);
    float angle = (float)t * f;
    return c < half ? (double)(float)sin((double)angle) : (double)(float)cos((double)angle);
}

double g_init_value(uint64_t seed, const char *name, bora_init init, uint64_t i)
{
    uint32_t key[2];
    g_philox_key(seed, name, key);
    return init_at(seed, key, init, i);
}

/* ---- the store ---------------------------------------------------------------------------- */

g_store *g_store_new(const bora_backend_ops *ops, bora_backend *backend, const char *name,
                     uint64_t seed)
{
    g_store *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->ops = ops;
    s->backend = backend;
    s->backend_name = name;
    s->seed = seed;
    /* until g_store_mixed says otherwise, a backend as new as the host (tests' own rigs) */
    s->elem_ops = 1;
    s->attn_softcap = 1;
    s->abi_minor = BORA_ABI_MINOR;
    return s;
}

void g_store_free(g_store *s)
{
    if (!s)
        return;
    g_graph_free(s->refresh);
    for (size_t i = 0; i < s->n_slots; i++)
        free(s->slots[i].name);
    free(s->slots);
    free(s->slot_index);
    for (size_t i = 0; i < s->n_mstates; i++)
        free(s->mstates[i].name);
    free(s->mstates);
    if (s->mstate)
        s->ops->buffer_free(s->backend, s->mstate);
    if (s->params)
        s->ops->buffer_free(s->backend, s->params);
    if (s->grads)
        s->ops->buffer_free(s->backend, s->grads);
    if (s->arena)
        s->ops->buffer_free(s->backend, s->arena);
    if (s->states)
        s->ops->buffer_free(s->backend, s->states);
    if (s->shadow)
        s->ops->buffer_free(s->backend, s->shadow);
    if (s->tangents)
        s->ops->buffer_free(s->backend, s->tangents);
    if (s->hvps)
        s->ops->buffer_free(s->backend, s->hvps);
    free(s);
}

static size_t slot_hash(const char *s)
{
    uint64_t h = 1469598103934665603u; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211u;
    return (size_t)h;
}

/* By hash, not a search of every slot: a model declares its parameters one by one, and a
 * search of those before each made building quadratic in the number of layers. */
long g_store_find(const g_store *s, const char *name)
{
    if (!s->cap_slot_index)
        return -1;
    size_t mask = s->cap_slot_index - 1;
    for (size_t j = slot_hash(name) & mask; s->slot_index[j]; j = (j + 1) & mask)
        if (!strcmp(s->slots[s->slot_index[j] - 1].name, name))
            return s->slot_index[j] - 1;
    return -1;
}

int g_store_index(g_store *s, long at)
{
    if (2 * s->n_slots > s->cap_slot_index) {
        size_t cap = s->cap_slot_index ? s->cap_slot_index * 2 : 256;
        long *t = calloc(cap, sizeof *t);
        if (!t)
            return -1;
        free(s->slot_index);
        s->slot_index = t;
        s->cap_slot_index = cap;
        for (size_t i = 0; i < s->n_slots; i++)
            if ((long)i != at)
                for (size_t j = slot_hash(s->slots[i].name) & (cap - 1);; j = (j + 1) & (cap - 1))
                    if (!t[j]) {
                        t[j] = (long)i + 1;
                        break;
                    }
    }
    size_t mask = s->cap_slot_index - 1, j = slot_hash(s->slots[at].name) & mask;
    while (s->slot_index[j])
        j = (j + 1) & mask;
    s->slot_index[j] = at + 1;
    return 0;
}

static void store_value(void *dst, int dtype, double v)
{
    if (dtype == BORA_DTYPE_F64)
        *(double *)dst = v;
    else
        *(float *)dst = (float)v;
}

/* Elements [from, to) of one parameter's initial values, on the host. */
typedef struct init_part {
    uint64_t seed;
    const g_slot *p;
    char *host;
    size_t from, to;
} init_part;

static void *init_run(void *arg)
{
    const init_part *w = arg;
    size_t esz = bora_dtype_size(w->p->dtype);
    uint32_t key[2];
    g_philox_key(w->seed, w->p->name, key);
    int64_t channels = w->p->ndim ? w->p->dims[w->p->ndim - 1] : 1;
    for (size_t e = w->from; e < w->to; e++)
        store_value(w->host + e * esz, w->p->dtype,
                    w->p->init.kind == BORA_INIT_SINUSOIDS
                        ? g_init_sinusoid(w->p->init, channels, e)
                        : init_at(w->seed, key, w->p->init, e));
    return NULL;
}

/* A parameter's n initial values: every element depends on (seed, name, index) alone, so a large
 * parameter is split among the CPU's cores (GPT-2 124M's 124 M normals take seconds on one). */
static void init_fill(uint64_t seed, const g_slot *p, char *host, size_t n)
{
    enum { MOST = 16, LEAST = 1 << 20 };
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    size_t parts = n / LEAST, most = cpus < 1 ? 1 : cpus > MOST ? MOST : (size_t)cpus;
    parts = parts > most ? most : parts < 1 ? 1 : parts;
    init_part w[MOST];
    pthread_t th[MOST];
    int started[MOST] = {0};
    for (size_t k = 0; k < parts; k++)
        w[k] = (init_part){seed, p, host, n * k / parts, n * (k + 1) / parts};
    for (size_t k = 1; k < parts; k++)
        started[k] = pthread_create(&th[k], NULL, init_run, &w[k]) == 0;
    init_run(&w[0]);
    for (size_t k = 1; k < parts; k++) {
        if (started[k])
            pthread_join(th[k], NULL);
        else
            init_run(&w[k]); /* no thread to be had: this one does the part */
    }
}

/* Fill bytes of a backend buffer with zeros. */
static bora_status zero_buffer(g_store *s, bora_buffer *b, size_t bytes)
{
    char *zeros = calloc(1, bytes);
    if (!zeros)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    bora_status st = s->ops->copy_in(s->backend, b, 0, zeros, bytes);
    free(zeros);
    return st;
}

/* The arena buffer's bytes once allocated: the largest graph's need (64 where none needs any). */
static size_t arena_held(const g_store *s)
{
    return s->arena_bytes ? s->arena_bytes : 64;
}

bora_status g_store_fit_arena(g_store *s, size_t bytes)
{
    if (!s->arena) { /* only planned so far: materialize allocates the largest need */
        if (bytes > s->arena_bytes)
            s->arena_bytes = bytes;
        return BORA_OK;
    }
    if (bytes <= arena_held(s))
        return BORA_OK;
    /* A graph finalized after materialize needs more: a larger buffer replaces the arena. This
     * is sound because no address in the arena outlives a call: g_run and g_read take every
     * value's address from s->arena (arena_ptr) as they go, fused groups fill their arguments at
     * run time, and a backend's prepare sees no data. What the old arena held (the last run's
     * output) is not carried over, as when another graph runs. The new buffer is had before the
     * old one goes, so a failure leaves the store and its graphs as they were. */
    bora_buffer *grown = NULL;
    if (s->ops->buffer_alloc(s->backend, bytes, 64, &grown) != BORA_OK)
        return bora_error_set(BORA_ERR_NOMEM,
                              "cannot grow the graphs' arena from %zu to %zu bytes on %s for a "
                              "graph built after the store was allocated (%s); build every "
                              "graph before allocating the store, so that the arena is sized "
                              "once for the largest",
                              arena_held(s), bytes, s->backend_name, bora_error_get());
    s->ops->buffer_free(s->backend, s->arena);
    s->arena = grown;
    s->arena_ptr = s->ops->buffer_ptr(s->backend, grown);
    s->arena_bytes = bytes;
    bora_log(BORA_LOG_DEBUG, "store: the graphs' arena grown to %zu bytes", bytes);
    return BORA_OK;
}

bora_status g_store_materialize(g_store *s)
{
    size_t bytes = s->param_bytes ? s->param_bytes : 64, state_bytes;
    if (s->ops->buffer_alloc(s->backend, bytes, 64, &s->params) != BORA_OK)
        return bora_error_set(BORA_ERR_NOMEM, "cannot allocate %zu bytes of parameters on %s",
                              bytes, s->backend_name);
    if (s->ops->buffer_alloc(s->backend, bytes, 64, &s->grads) != BORA_OK)
        return bora_error_set(BORA_ERR_NOMEM, "cannot allocate %zu bytes of gradients on %s", bytes,
                              s->backend_name);
    if (s->ops->buffer_alloc(s->backend, arena_held(s), 64, &s->arena) != BORA_OK)
        return bora_error_set(BORA_ERR_NOMEM,
                              "cannot allocate the graphs' arena, %zu bytes, on %s (its size "
                              "grows with the micro-batch and the model's sizes)",
                              s->arena_bytes, s->backend_name);
    size_t block = s->state_sharded ? (s->state_span ? s->state_span : 64) : bytes;
    if (__builtin_mul_overflow(block, s->n_states ? s->n_states : 1, &state_bytes) ||
        s->ops->buffer_alloc(s->backend, state_bytes, 64, &s->states) != BORA_OK)
        return bora_error_set(BORA_ERR_NOMEM, "cannot allocate optimizer state on %s",
                              s->backend_name);
    s->state_ptr = s->ops->buffer_ptr(s->backend, s->states);
    bora_status zst = zero_buffer(s, s->states, state_bytes);
    if (zst != BORA_OK)
        return zst;
    if (s->ops->buffer_alloc(s->backend, s->mstate_bytes ? s->mstate_bytes : 64, 64, &s->mstate) !=
        BORA_OK)
        return bora_error_set(BORA_ERR_NOMEM, "cannot allocate %zu bytes of model state on %s",
                              s->mstate_bytes, s->backend_name);
    s->mstate_ptr = s->ops->buffer_ptr(s->backend, s->mstate);
    if ((zst = g_store_zero_model_state(s)) != BORA_OK)
        return zst;
    if (s->shadows) {
        if (s->ops->buffer_alloc(s->backend, bytes / 2, 64, &s->shadow) != BORA_OK)
            return bora_error_set(BORA_ERR_NOMEM,
                                  "cannot allocate %zu bytes of bf16 weight copies on %s",
                                  bytes / 2, s->backend_name);
        s->shadow_ptr = s->ops->buffer_ptr(s->backend, s->shadow);
    }
    if (s->hessian) {
        if (s->ops->buffer_alloc(s->backend, bytes, 64, &s->tangents) != BORA_OK ||
            s->ops->buffer_alloc(s->backend, bytes, 64, &s->hvps) != BORA_OK)
            return bora_error_set(BORA_ERR_NOMEM,
                                  "cannot allocate 2 x %zu bytes of Hessian-vector product "
                                  "buffers on %s",
                                  bytes, s->backend_name);
        s->tangent_ptr = s->ops->buffer_ptr(s->backend, s->tangents);
        s->hvp_ptr = s->ops->buffer_ptr(s->backend, s->hvps);
        if ((zst = zero_buffer(s, s->tangents, bytes)) != BORA_OK ||
            (zst = zero_buffer(s, s->hvps, bytes)) != BORA_OK)
            return zst;
    }
    s->param_ptr = s->ops->buffer_ptr(s->backend, s->params);
    s->grad_ptr = s->ops->buffer_ptr(s->backend, s->grads);
    s->arena_ptr = s->ops->buffer_ptr(s->backend, s->arena);
    /* Initial values on the host, then one copy per parameter. */
    for (size_t i = 0; i < s->n_slots; i++) {
        g_slot *p = &s->slots[i];
        size_t esz = bora_dtype_size(p->dtype), n = p->nbytes / esz;
        char *host = malloc(p->nbytes ? p->nbytes : 1);
        if (!host)
            return bora_error_set(BORA_ERR_NOMEM, "out of memory");
        init_fill(s->seed, p, host, n);
        bora_status st = s->ops->copy_in(s->backend, s->params, p->offset, host, p->nbytes);
        free(host);
        if (st != BORA_OK)
            return st;
    }
    g_store_params_changed(s);
    return g_store_zero_grads(s);
}

void g_store_mixed(g_store *s, int compute, int residual, uint32_t backend_abi_minor)
{
    s->compute_dtype = compute;
    s->residual_dtype = residual;
    s->shadows = compute == BORA_DTYPE_BF16;
    s->fused_bf16 = backend_abi_minor >= 5;
    s->fused_bf16_in = backend_abi_minor >= 6;
    s->attention_bf16 = compute == BORA_DTYPE_BF16 && backend_abi_minor >= 7;
    s->scatter_init = backend_abi_minor >= 7;
    s->matmul_bias = backend_abi_minor >= 8;
    g_store_backend_abi(s, backend_abi_minor);
}

void g_store_backend_abi(g_store *s, uint32_t backend_abi_minor)
{
    s->elem_ops = backend_abi_minor >= 9;
    s->attn_softcap = backend_abi_minor >= 12;
    s->abi_minor = backend_abi_minor;
}

void g_store_params_changed(g_store *s)
{
    s->shadows_stale = s->shadows;
}

/* One apply graph: every f32 parameter's shadow = bf16(parameter). */
static bora_status build_refresh(g_store *s)
{
    g_graph *g = g_graph_new(s, BORA_MODE_APPLY);
    if (!g)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    for (size_t i = 0; i < s->n_slots && !g->status; i++)
        if (s->slots[i].dtype == BORA_DTYPE_F32) {
            gval *p = g_param_leaf(g, (long)i);
            if (p && g_assign_shadow(g, (long)i, p) == BORA_OK)
                g->output = p;
        }
    if (!g->output && !g->status)
        g_fail(g, "no f32 parameters to keep bf16 copies of");
    if (g->status || g_finalize(g) != BORA_OK) {
        bora_status st = bora_error_set(g->status ? g->status : BORA_ERR_INTERNAL,
                                        "the bf16 weight copies' graph: %s", g->error);
        g_graph_free(g);
        return st;
    }
    s->refresh = g;
    return BORA_OK;
}

bora_status g_store_refresh_shadows(g_store *s)
{
    if (!s->shadows_stale)
        return BORA_OK;
    if (!s->refresh) {
        bora_status st = build_refresh(s);
        if (st != BORA_OK)
            return st;
    }
    bora_status st = g_run(s->refresh);
    if (st == BORA_OK)
        s->shadows_stale = 0;
    return st;
}

bora_status g_store_zero_model_state(g_store *s)
{
    if (!s->mstate)
        return bora_error_set(BORA_ERR_INVALID, "the store is not allocated");
    return zero_buffer(s, s->mstate, s->mstate_bytes ? s->mstate_bytes : 64);
}

bora_status g_store_zero_grads(g_store *s)
{
    return zero_buffer(s, s->grads, s->param_bytes ? s->param_bytes : 64);
}

void g_store_hessian(g_store *s)
{
    s->hessian = 1;
}

int g_store_need_hessian(g_graph *g)
{
    if (!g->store->hessian && g->store->params) {
        g_fail(g, "the store was materialized without Hessian-vector product buffers (call "
                  "g_store_hessian before g_store_materialize)");
        return -1;
    }
    g->store->hessian = 1;
    return 0;
}

bora_status g_store_zero_hvp(g_store *s)
{
    if (!s->hvps)
        return bora_error_set(BORA_ERR_INVALID, "the store keeps no Hessian-vector products "
                                                "(g_store_hessian before materializing)");
    return zero_buffer(s, s->hvps, s->param_bytes ? s->param_bytes : 64);
}

/* The buffer of a block (*out), or the error naming the slot. */
static bora_status block_of(g_store *s, int block, long slot, size_t nbytes, const char *verb,
                            bora_buffer **out)
{
    static const char *const what[] = {
        [S_PARAM] = "parameter", [S_GRAD] = "gradient", [S_TANGENT] = "tangent", [S_HVP] = "hvp"};
    bora_buffer *b = block == S_PARAM     ? s->params
                     : block == S_GRAD    ? s->grads
                     : block == S_TANGENT ? s->tangents
                     : block == S_HVP     ? s->hvps
                                          : NULL;
    if (block != S_PARAM && block != S_GRAD && block != S_TANGENT && block != S_HVP)
        return bora_error_set(BORA_ERR_INVALID, "cannot %s store block %d", verb, block);
    if (slot < 0 || (size_t)slot >= s->n_slots)
        return bora_error_set(BORA_ERR_INVALID, "cannot %s %s slot %ld: the store has %zu", verb,
                              what[block], slot, s->n_slots);
    const g_slot *p = &s->slots[slot];
    if (!b)
        return bora_error_set(
            BORA_ERR_INVALID, "cannot %s the %s of '%s': %s", verb, what[block], p->name,
            block == S_TANGENT || block == S_HVP ? "the store keeps no Hessian-vector products "
                                                   "(g_store_hessian before materializing)"
                                                 : "the store is not materialized");
    if (nbytes != p->nbytes)
        return bora_error_set(BORA_ERR_INVALID,
                              "cannot %s the %s of '%s': %zu bytes given, it has %zu", verb,
                              what[block], p->name, nbytes, p->nbytes);
    *out = b;
    return BORA_OK;
}

bora_status g_store_write(g_store *s, int block, long slot, const void *data, size_t nbytes)
{
    bora_buffer *b = NULL;
    bora_status st = block_of(s, block, slot, nbytes, "write", &b);
    if (st != BORA_OK)
        return st;
    st = s->ops->copy_in(s->backend, b, s->slots[slot].offset, data, nbytes);
    if (st == BORA_OK && block == S_PARAM)
        g_store_params_changed(s);
    return st;
}

bora_status g_store_read(g_store *s, int block, long slot, void *dst, size_t nbytes)
{
    bora_buffer *b = NULL;
    bora_status st = block_of(s, block, slot, nbytes, "read", &b);
    if (st != BORA_OK)
        return st;
    return s->ops->copy_out(s->backend, dst, b, s->slots[slot].offset, nbytes);
}

/* f32 <-> a parameter's dtype (f32, f64, bf16 rounded to nearest even) through a host copy. */
static bora_status convert_f32(g_store *s, int block, long slot, float *f, size_t n, int in)
{
    if (slot < 0 || (size_t)slot >= s->n_slots)
        return bora_error_set(BORA_ERR_INVALID, "no parameter slot %ld (the store has %zu)", slot,
                              s->n_slots);
    const g_slot *p = &s->slots[slot];
    size_t esz = bora_dtype_size(p->dtype);
    if (!esz || n != p->nbytes / esz)
        return bora_error_set(BORA_ERR_INVALID, "'%s' has %zu elements, %zu given", p->name,
                              p->nbytes / esz, n);
    if (p->dtype == BORA_DTYPE_F32)
        return in ? g_store_write(s, block, slot, f, p->nbytes)
                  : g_store_read(s, block, slot, f, p->nbytes);
    if (p->dtype != BORA_DTYPE_F64 && p->dtype != BORA_DTYPE_BF16)
        return bora_error_set(BORA_ERR_UNSUPPORTED, "'%s' is not a floating-point parameter",
                              p->name);
    char *host = malloc(p->nbytes ? p->nbytes : 1);
    if (!host)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    bora_status st = in ? BORA_OK : g_store_read(s, block, slot, host, p->nbytes);
    for (size_t i = 0; st == BORA_OK && i < n; i++) {
        if (p->dtype == BORA_DTYPE_F64 && in) {
            ((double *)host)[i] = f[i];
        } else if (p->dtype == BORA_DTYPE_F64) {
            f[i] = (float)((double *)host)[i];
        } else if (in) {
            uint32_t u;
            memcpy(&u, &f[i], 4);
            ((uint16_t *)host)[i] = (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
        } else {
            uint32_t u = (uint32_t)((uint16_t *)host)[i] << 16;
            memcpy(&f[i], &u, 4);
        }
    }
    if (st == BORA_OK && in)
        st = g_store_write(s, block, slot, host, p->nbytes);
    free(host);
    return st;
}

bora_status g_store_write_tangent(g_store *s, long slot, const float *data, size_t n)
{
    return convert_f32(s, S_TANGENT, slot, (float *)data, n, 1);
}

bora_status g_store_read_hvp(g_store *s, long slot, float *dst, size_t n)
{
    return convert_f32(s, S_HVP, slot, dst, n, 0);
}
