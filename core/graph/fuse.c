/* core/graph/fuse.c — elementwise fusion and the multi-tensor pass (docs/design.md §3.3). After the
 * kernels are chosen, runs of consecutive f32 elementwise nodes over one element count become a
 * segment; consecutive segments with the same steps and wiring (an optimizer's update of one
 * parameter after another) become one group, which the backend runs tile by tile over all its
 * segments as one kernel. Values produced and consumed inside a segment and not used after it live
 * in the backend's scratch tiles, never in memory. Every step reads and writes element i only at
 * index i, so the results are the bits of the unfused run (tested); a group the backend declines
 * runs node by node. */
#include "graph.h"

#include <stdlib.h>
#include <string.h>

/* Operand kinds in a step's signature. */
enum { K_DENSE = 1, K_BCAST = 2 };

static int dense_of(const gval *v, int64_t n)
{
    if (g_numel(v) != n)
        return 0;
    int64_t stride = 1;
    for (int i = v->ndim - 1; i >= 0; i--) {
        if (v->dims[i] != 1 && v->strides[i] != stride)
            return 0;
        stride *= v->dims[i];
    }
    return 1;
}

static int bcast_of(const gval *v)
{
    for (int i = 0; i < v->ndim; i++)
        if (v->dims[i] != 1 && v->strides[i] != 0)
            return 0;
    return 1;
}

static int fusible_op(int op)
{
    switch (op) {
    case BORA_OP_FILL:
    case BORA_OP_ADD:
    case BORA_OP_SUB:
    case BORA_OP_MUL:
    case BORA_OP_DIV:
    case BORA_OP_NEG:
    case BORA_OP_EXP:
    case BORA_OP_SQRT:
    case BORA_OP_RSQRT:
    case BORA_OP_TANH:
    case BORA_OP_SIGMOID:
    case BORA_OP_RELU:
    case BORA_OP_SILU:
    case BORA_OP_GELU_TANH:
    case BORA_OP_SCALE:
    case BORA_OP_ACT_GRAD:
    case BORA_OP_SIN: /* ABI 1.9's unary and binary ops; WHERE has three inputs, too many */
    case BORA_OP_COS:
    case BORA_OP_ABS:
    case BORA_OP_SIGN:
    case BORA_OP_MINIMUM:
    case BORA_OP_MAXIMUM:
    case BORA_OP_LESS:
    case BORA_OP_LESS_EQUAL:
    case BORA_OP_EQUAL:
    case BORA_OP_NOT_EQUAL:
    case BORA_OP_COPY:
    case G_GRAD:
    case G_ASSIGN: return 1;
    default: return 0;
    }
}

/* The node's operands as the executor passes them: G_GRAD reads its own output first. */
static int operands(const gnode *n, const gval **ops)
{
    int k = 0;
    if (n->op == G_GRAD)
        ops[k++] = n->out[0];
    for (int i = 0; i < n->nin; i++)
        ops[k++] = n->in[i];
    return k;
}

/* The element count of a node that can join a segment, else -1. Every operand is f32, but for
 * casts where the backend takes them: an f32 value rounded into a dense bf16 output (a
 * parameter's bf16 copy, the residual stream under r=bf16; ABI 1.5) and a dense bf16 value in
 * memory widened to f32 (the residual stream read back; ABI 1.6). */
static int64_t fusible(const g_graph *g, const gnode *n)
{
    if (!n->kernel || !fusible_op(n->op) || n->nout != 1)
        return -1;
    const gval *o = n->out[0];
    int64_t count = g_numel(o);
    int copy = n->op == BORA_OP_COPY || (n->op == G_ASSIGN && o->storage == S_SHADOW);
    int round = copy && o->dtype == BORA_DTYPE_BF16 && g->store->fused_bf16;
    if ((o->dtype != BORA_DTYPE_F32 && !round) || !dense_of(o, count) || count == 0)
        return -1;
    if (n->op == BORA_OP_ACT_GRAD && n->opt.act.op == BORA_OP_MAX)
        return -1;
    const gval *ins[G_MAX_IN + 1];
    int nin = operands(n, ins);
    if (nin > 2)
        return -1;
    for (int k = 0; k < nin; k++) {
        int widen = copy && !round && ins[k]->dtype == BORA_DTYPE_BF16 && g->store->fused_bf16_in &&
                    dense_of(ins[k], count);
        if ((ins[k]->dtype != BORA_DTYPE_F32 && !widen) ||
            !(dense_of(ins[k], count) || (bcast_of(ins[k]) && !round)))
            return -1;
    }
    return count;
}

/* Where operand v comes from inside segment nodes[0..n): (step, output) or -1. */
static int produced_in(gnode *const *nodes, int n, const gval *v)
{
    for (int s = 0; s < n; s++)
        if (nodes[s]->out[0] == v->base)
            return s;
    return -1;
}

/* The length of the first run of steps that is closed under data flow: no step after it reads
 * a value produced in it, and every step in it is connected to the first (as an undirected
 * graph of produced-and-read values). Returns n when the steps do not split that way. */
static int first_chain_end(gnode *const *nodes, int n)
{
    if (n < 2)
        return n;
    int comp[256];
    for (int i = 0; i < n; i++)
        comp[i] = i;
    /* union the producer and reader of every value produced inside */
    for (int i = 0; i < n; i++) {
        const gval *ins[G_MAX_IN + 1];
        int nin = operands(nodes[i], ins);
        for (int k = 0; k < nin; k++) {
            int from = produced_in(nodes, i, ins[k]);
            if (from < 0)
                continue;
            int a = comp[from], b = comp[i];
            if (a == b)
                continue;
            int lo = a < b ? a : b, hi = a < b ? b : a;
            for (int j = 0; j < n; j++)
                if (comp[j] == hi)
                    comp[j] = lo;
        }
    }
    int end = 0;
    while (end < n && comp[end] == comp[0])
        end++;
    for (int j = end; j < n; j++)
        if (comp[j] == comp[0])
            return n; /* the first chain is interleaved with another: keep them together */
    return end;
}

typedef struct seg {
    gnode **nodes; /* the kernel nodes, in order */
    int n;
    int64_t count;
    int *sig; /* per step: op, nin, then per operand a code; then option bytes compared apart */
    int n_sig;
    int last;     /* index of the last node */
    int adjacent; /* no kernel runs between the previous segment and this one */
} seg;

/* Whether step i's output lives only inside the segment (then in a scratch tile, which holds
 * f32: a bf16 output is always written to memory). */
static int internal(const g_graph *g, const seg *s, int i)
{
    const gval *o = s->nodes[i]->out[0];
    return o->base == o && o->storage == S_ARENA && o->dtype == BORA_DTYPE_F32 &&
           o != g->output->base && o->last_use <= s->last;
}

static int seg_signature(g_graph *g, seg *s)
{
    s->sig = malloc(sizeof(int) * (size_t)s->n * (4 + 2 * (G_MAX_IN + 1)));
    if (!s->sig)
        return -1;
    int w = 0;
    for (int i = 0; i < s->n; i++) {
        const gnode *nd = s->nodes[i];
        const gval *ins[G_MAX_IN + 1];
        int nin = operands(nd, ins);
        s->sig[w++] = nd->op;
        s->sig[w++] = nd->out[0]->dtype;
        s->sig[w++] = nin;
        s->sig[w++] = internal(g, s, i);
        for (int k = 0; k < nin; k++) {
            int from = produced_in(s->nodes, i, ins[k]);
            int dense = dense_of(ins[k], s->count);
            s->sig[w++] = from >= 0 ? 100 + from * 2 + dense : dense ? K_DENSE : K_BCAST;
            s->sig[w++] = ins[k]->dtype;
        }
    }
    s->n_sig = w;
    return 0;
}

static int same_steps(const seg *a, const seg *b)
{
    if (a->n != b->n || a->n_sig != b->n_sig || memcmp(a->sig, b->sig, sizeof(int) * a->n_sig))
        return 0;
    for (int i = 0; i < a->n; i++)
        if (memcmp(&a->nodes[i]->opt, &b->nodes[i]->opt, sizeof a->nodes[i]->opt))
            return 0;
    return 1;
}

/* Inside a segment, a base some step writes is only ever seen at that same offset, densely, so
 * that element i of every step touches element i of it alone. */
static int seg_hazard_free(const seg *s)
{
    for (int i = 0; i < s->n; i++) {
        const gval *w = s->nodes[i]->out[0];
        for (int j = 0; j < s->n; j++) {
            const gval *ins[G_MAX_IN + 1];
            int nin = operands(s->nodes[j], ins);
            for (int k = 0; k < nin; k++)
                if (ins[k]->base == w->base &&
                    (ins[k]->offset != w->offset || !dense_of(ins[k], s->count)))
                    return 0;
            const gval *o = s->nodes[j]->out[0];
            if (j != i && o->base == w->base && o->offset != w->offset)
                return 0;
        }
    }
    return 1;
}

/* No base segment a writes is read or written by segment b (checked both ways for a group). */
static int segs_disjoint(const seg *a, const seg *b)
{
    for (int i = 0; i < a->n; i++) {
        const gval *wa = a->nodes[i]->out[0]->base;
        for (int j = 0; j < b->n; j++) {
            const gval *ins[G_MAX_IN + 1];
            int nin = operands(b->nodes[j], ins);
            if (b->nodes[j]->out[0]->base == wa)
                return 0;
            for (int k = 0; k < nin; k++)
                if (ins[k]->base == wa)
                    return 0;
        }
    }
    return 1;
}

static void fused_free(g_fused *f)
{
    free(f->nodes);
    free(f->count);
    free(f->args);
    free(f->descs);
    free(f->scratch);
}

int g_fused_in_tile(const g_fused *f, int j)
{
    const gval *ins[G_MAX_IN + 1];
    int nin = operands(f->nodes[j], ins);
    return f->scratch[(j % f->n_steps) * BORA_FUSED_OPERANDS + nin] >= 0;
}

void g_fused_free_all(g_graph *g)
{
    for (size_t i = 0; i < g->n_fused; i++)
        fused_free(&g->fused[i]);
    free(g->fused);
    g->fused = NULL;
    g->n_fused = 0;
}

/* Make the group of segments segs[0..n). */
static int make_group(g_graph *g, seg *segs, int n)
{
    g_fused *grown = realloc(g->fused, (g->n_fused + 1) * sizeof *grown);
    if (!grown)
        return -1;
    g->fused = grown;
    g_fused *f = &g->fused[g->n_fused];
    memset(f, 0, sizeof *f);
    int steps = segs[0].n;
    f->n_steps = steps;
    f->n_segments = n;
    f->nodes = malloc(sizeof(gnode *) * (size_t)(steps * n));
    f->count = malloc(sizeof(int64_t) * (size_t)n);
    f->args = calloc((size_t)(steps * n), sizeof *f->args);
    f->descs = calloc((size_t)(steps * n) * BORA_FUSED_OPERANDS, sizeof *f->descs);
    f->scratch = malloc(sizeof(int32_t) * (size_t)steps * BORA_FUSED_OPERANDS);
    if (!f->nodes || !f->count || !f->args || !f->descs || !f->scratch) {
        fused_free(f);
        return -1;
    }
    for (int s = 0; s < n; s++) {
        f->count[s] = segs[s].count;
        for (int i = 0; i < steps; i++)
            f->nodes[s * steps + i] = segs[s].nodes[i];
    }
    /* Scratch tiles for the internal values of segment 0 (the others have the same wiring):
     * a tile is taken by its producer and given back after its last reader in the segment. */
    int owner[64], n_tiles = 0; /* the step whose output holds each tile, -1 free */
    int tile_of_step[256];
    const seg *s0 = &segs[0];
    for (int i = 0; i < steps * BORA_FUSED_OPERANDS; i++)
        f->scratch[i] = -1;
    for (int i = 0; i < steps; i++) {
        tile_of_step[i] = -1;
        const gnode *nd = s0->nodes[i];
        const gval *ins[G_MAX_IN + 1];
        int nin = operands(nd, ins);
        for (int k = 0; k < nin; k++) {
            int from = produced_in(s0->nodes, i, ins[k]);
            if (from >= 0 && tile_of_step[from] >= 0)
                f->scratch[i * BORA_FUSED_OPERANDS + k] = tile_of_step[from];
        }
        /* tiles whose value has no reader from step i on are free again */
        for (int t = 0; t < n_tiles; t++) {
            if (owner[t] < 0)
                continue;
            int used_later = 0;
            for (int j = i; j < steps && !used_later; j++) {
                const gval *jn[G_MAX_IN + 1];
                int jk = operands(s0->nodes[j], jn);
                for (int k = 0; k < jk; k++)
                    used_later |= jn[k]->base == s0->nodes[owner[t]]->out[0];
            }
            if (!used_later)
                owner[t] = -1;
        }
        if (!internal(g, s0, i))
            continue;
        int t = 0;
        while (t < n_tiles && owner[t] >= 0)
            t++;
        if (t == n_tiles) {
            if (n_tiles == 64)
                continue; /* out of tiles: this value stays in memory */
            n_tiles++;
        }
        owner[t] = i;
        tile_of_step[i] = t;
        f->scratch[i * BORA_FUSED_OPERANDS + nin] = t;
    }
    f->n_scratch = n_tiles;
    g->n_fused++;
    for (int s = 0; s < n; s++)
        for (int i = 0; i < steps; i++)
            segs[s].nodes[i]->fused = (int)g->n_fused; /* 1-based */
    f->head = segs[0].nodes[0]->id;
    return 0;
}

int g_plan_fusion(g_graph *g, const char *needed)
{
    seg *segs = NULL;
    size_t n_segs = 0, cap = 0;
    int failed = 0, dirty = 1;
    for (size_t i = 0; i < g->n_nodes && !failed;) {
        gnode *n = g->nodes[i];
        int64_t count = needed[i] ? fusible(g, n) : -1;
        if (count < 0) {
            dirty |= needed[i] && n->kernel;
            i++;
            continue;
        }
        seg s = {0};
        s.nodes = malloc(sizeof(gnode *) * 256);
        if (!s.nodes) {
            failed = 1;
            break;
        }
        s.count = count;
        s.adjacent = !dirty;
        dirty = 0;
        size_t j = i;
        for (; j < g->n_nodes && s.n < 256; j++) {
            gnode *m = g->nodes[j];
            if (!needed[j] || (!m->kernel && (m->op == G_VIEW || m->op == G_PARAM ||
                                              m->op == G_INPUT || m->op == G_CONST)))
                continue; /* no kernel: nothing runs between the steps */
            if (fusible(g, m) != count)
                break;
            s.nodes[s.n++] = m;
            s.last = (int)j;
        }
        /* the segment must not change what it reads midway */
        while (s.n > 1 && !seg_hazard_free(&s)) {
            s.n--;
            s.last = s.nodes[s.n - 1]->id;
        }
        /* independent chains (one parameter's update after another's) are segments of their
         * own, so that the same chain over many parameters makes one group */
        int cut = first_chain_end(s.nodes, s.n);
        if (cut < s.n) {
            s.n = cut;
            s.last = s.nodes[s.n - 1]->id;
        }
        i = (size_t)s.last + 1;
        if (n_segs == cap) {
            cap = cap ? 2 * cap : 64;
            seg *grown = realloc(segs, cap * sizeof *segs);
            if (!grown) {
                free(s.nodes);
                failed = 1;
                break;
            }
            segs = grown;
        }
        if (seg_signature(g, &s)) {
            free(s.nodes);
            failed = 1;
            break;
        }
        segs[n_segs++] = s;
    }
    /* groups: consecutive segments with the same steps, disjoint from each other */
    for (size_t a = 0; a < n_segs && !failed;) {
        size_t b = a + 1;
        while (b < n_segs && segs[b].adjacent && same_steps(&segs[a], &segs[b])) {
            int ok = 1;
            for (size_t c = a; c < b && ok; c++)
                ok = segs_disjoint(&segs[c], &segs[b]) && segs_disjoint(&segs[b], &segs[c]);
            if (!ok)
                break;
            b++;
        }
        /* a lone single step gains nothing from a group */
        if ((b - a > 1 || segs[a].n > 1) && make_group(g, &segs[a], (int)(b - a)))
            failed = 1;
        a = b;
    }
    for (size_t s = 0; s < n_segs; s++) {
        free(segs[s].nodes);
        free(segs[s].sig);
    }
    free(segs);
    return failed ? -1 : 0;
}
