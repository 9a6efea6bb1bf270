/* core/graph/plan.c — from a built graph to a run: which nodes are needed, where every
 * intermediate lives in the arena (offsets from liveness, the largest placed first), which
 * kernel runs each node, and the executor that calls them in order. */
#include "graph.h"

#include "../util/log.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static int node_args(g_graph *g, const gnode *n, bora_kernel_args *a, bora_tensor_desc *in,
                     bora_tensor_desc *out, int bound);

static size_t value_bytes(const gval *v)
{
    return (size_t)g_numel(v) * bora_dtype_size(v->dtype);
}

static const char *dtype_name(int dtype)
{
    static const char *const names[] = {"?", "f32", "bf16", "f16", "f64", "i32", "i64", "u8"};
    return dtype > 0 && dtype <= 7 ? names[dtype] : "?";
}

/* Mark the nodes the roots depend on. */
static void mark_needed(g_graph *g, char *needed)
{
    for (size_t i = g->n_nodes; i-- > 0;) {
        gnode *n = g->nodes[i];
        int root = n->op == G_GRAD || n->op == G_ASSIGN || n->op == BORA_OP_WRITE_SLICE;
        for (int o = 0; o < n->nout; o++) /* the output, or a gradient written in place */
            root |= n->out[o] == g->output || n->out[o]->base->storage == S_GRAD ||
                    n->out[o]->base->storage == S_HVP;
        if (root)
            needed[i] = 1;
        if (!needed[i])
            continue;
        for (int k = 0; k < n->nin; k++)
            if (n->in[k] && n->in[k]->node)
                needed[n->in[k]->node->id] = 1;
    }
}

/* Whether the backend has a kernel for op over these operands' dtypes. */
static int has_kernel(g_graph *g, int op, gval *const *operands, int n)
{
    if (op < BORA_OP_COUNT_ && g_op_since(op) > g->store->abi_minor) /* not on older backends */
        return 0;
    int32_t dtypes[G_MAX_IN + G_MAX_OUT];
    for (int k = 0; k < n; k++)
        dtypes[k] = operands[k]->dtype;
    return g->store->ops->kernel(g->store->backend, (uint32_t)op, dtypes, (uint32_t)n) != NULL;
}

/* The rewrites below ask whether a value's storage has readers other than the nodes they
 * rewrite; each base's count of reading inputs (g->readers, by value id) answers that without a
 * pass over every node per question, which made the rewrites quadratic in the graph's size. A
 * rewrite that changes who reads what counts again (once per graph) or adjusts the counts. */
static void count_readers(g_graph *g)
{
    memset(g->readers, 0, g->n_vals * sizeof *g->readers);
    for (size_t i = 0; i < g->n_nodes; i++) {
        const gnode *n = g->nodes[i];
        if (n->op != G_VIEW)
            for (int k = 0; k < n->nin; k++)
                g->readers[n->in[k]->base->id]++;
    }
}

/* How many of n's inputs read base's storage (views are not readers; their readers are). */
static int reads_of(const gnode *n, const gval *base)
{
    int r = 0;
    if (n->op != G_VIEW)
        for (int k = 0; k < n->nin; k++)
            r += n->in[k]->base == base;
    return r;
}

/* Whether no node but a and b reads base's storage. */
static int read_only_by(const g_graph *g, const gval *base, const gnode *a, const gnode *b)
{
    return g->readers[base->id] == reads_of(a, base) + (b != a ? reads_of(b, base) : 0);
}

/* Whether y's gradient may be written over x's storage: x is the whole of a dense arena base
 * that no node but a and b reads and that is not the output. */
static int may_overwrite(const g_graph *g, const gval *x, const gnode *a, const gnode *b)
{
    const gval *base = x->base;
    if (base->storage != S_ARENA || base == g->output->base || x->offset != 0 || x->ndim != 2 ||
        g_numel(x) != g_numel(base) || (x->dims[1] > 1 && x->strides[1] != 1) ||
        (x->dims[0] > 1 && x->strides[0] != x->dims[1]))
        return 0;
    return read_only_by(g, base, a, b);
}

/* Whether a and b are the same elements in the same order (one value, or two views alike). */
static int same_elements(const gval *a, const gval *b)
{
    if (a == b)
        return 1;
    if (a->base != b->base || a->offset != b->offset || a->ndim != b->ndim)
        return 0;
    for (int i = 0; i < a->ndim; i++)
        if (a->dims[i] != b->dims[i] || (a->dims[i] > 1 && a->strides[i] != b->strides[i]))
            return 0;
    return 1;
}

/* Σ x·x (a gradient norm's term) as one node, BORA_OP_SUM_SQUARES, where a SUM reads only a
 * MUL of a dense x by itself and nothing else reads the squares: one pass over x, no squares in
 * memory. The MUL is then read by nothing and drops out. BORA_NO_FUSION turns it off. */
static void fuse_sum_squares(g_graph *g)
{
    for (size_t si = 0; si < g->n_nodes; si++) {
        gnode *S = g->nodes[si];
        if (S->op != BORA_OP_SUM || S->nin != 1 || S->nout != 1)
            continue;
        gval *m = S->in[0], *x;
        gnode *M = m->node;
        if (!M || M->op != BORA_OP_MUL || M->nin != 2 || !same_elements(M->in[0], M->in[1]) ||
            M->nout != 1 || M->out[0] != m || m->base != m || m == g->output->base)
            continue;
        x = M->in[0];
        int ok = x->dtype == m->dtype && x->ndim == m->ndim;
        int64_t stride = 1;
        for (int i = x->ndim - 1; i >= 0 && ok; i--) {
            ok = x->dims[i] == m->dims[i] && x->names[i] == m->names[i] &&
                 (x->dims[i] == 1 || x->strides[i] == stride);
            stride *= x->dims[i];
        }
        ok = ok && read_only_by(g, m, S, S);
        gval *operands[2] = {x, S->out[0]};
        if (!ok || !has_kernel(g, BORA_OP_SUM_SQUARES, operands, 2))
            continue;
        S->op = BORA_OP_SUM_SQUARES;
        S->in[0] = x;
        g->readers[m->id]--;
        g->readers[x->base->id]++;
    }
}

/* Cross-entropy and its gradient as one node, BORA_OP_XENT_FUSED, at the forward node's place,
 * writing the gradient over the logits: one pass over them instead of three, and no second
 * buffer the size of the logits. Done where the backend has the kernel, nothing else reads the
 * logits, and the upstream gradient (dloss) does not depend on the loss — the nodes computing it
 * (a fill and a scale, from inputs) move before the forward node. BORA_NO_FUSION turns it off.
 * 0, or -1 out of memory. */
static int fuse_xent(g_graph *g)
{
    for (size_t yi = 0; yi < g->n_nodes; yi++) {
        gnode *Y = g->nodes[yi];
        if (Y->op != BORA_OP_XENT_GRAD || Y->nin != 4 || Y->nout != 1)
            continue;
        gval *x = Y->in[0], *lse = Y->in[2], *dloss = Y->in[3], *dl = Y->out[0];
        gnode *X = lse->node;
        if (!X || X->op != BORA_OP_XENT || X->nin != 2 || X->nout != 2 || X->out[1] != lse ||
            X->in[0] != x || X->in[1] != Y->in[1] ||
            memcmp(&X->opt.xent, &Y->opt.xent, sizeof X->opt.xent) || dl->base != dl ||
            dl->storage != S_ARENA || dl->dtype != x->dtype || !may_overwrite(g, x, X, Y))
            continue;
        gval *operands[6] = {x, X->in[1], dloss, X->out[0], lse, dl};
        if (!has_kernel(g, BORA_OP_XENT_FUSED, operands, 6))
            continue;
        /* the nodes after X that dloss depends on; none may be X */
        char *move = calloc(g->n_nodes, 1);
        gnode **stack = malloc(g->n_nodes * sizeof *stack);
        gnode **order = malloc(g->n_nodes * sizeof *order);
        if (!move || !stack || !order) {
            free(move);
            free(stack);
            free(order);
            return -1;
        }
        size_t top = 0;
        int loops = dloss->node == X;
        if (dloss->node && dloss->node->id > X->id) {
            move[dloss->node->id] = 1;
            stack[top++] = dloss->node;
        }
        while (top && !loops) { /* each node is pushed once, when first marked */
            gnode *n = stack[--top];
            for (int k = 0; k < n->nin; k++) {
                gnode *m = n->in[k]->node;
                loops |= m == X;
                if (m && m->id > X->id && !move[m->id]) {
                    move[m->id] = 1;
                    stack[top++] = m;
                }
            }
        }
        if (!loops) {
            size_t k = 0;
            for (size_t i = 0; i < (size_t)X->id; i++)
                order[k++] = g->nodes[i];
            for (size_t i = (size_t)X->id + 1; i < g->n_nodes; i++)
                if (move[i])
                    order[k++] = g->nodes[i];
            order[k++] = X;
            for (size_t i = (size_t)X->id + 1; i < g->n_nodes; i++)
                if (!move[i] && g->nodes[i] != Y)
                    order[k++] = g->nodes[i];
            memcpy(g->nodes, order, k * sizeof *order);
            g->n_nodes = k;
            for (size_t i = 0; i < k; i++)
                g->nodes[i]->id = (int)i;
            free(Y);
            X->op = BORA_OP_XENT_FUSED;
            X->in[X->nin++] = dloss;
            X->out[X->nout++] = dl;
            /* dl and its views move onto the logits' storage, whose layout dl's is (x is the
             * whole dense base, offset 0) */
            dl->node = X;
            for (size_t v = 0; v < g->n_vals; v++)
                if (g->vals[v]->base == dl && g->vals[v] != dl)
                    g->vals[v]->base = x->base;
            dl->base = x->base;
            count_readers(g);
            yi = 0; /* ids moved: look again from the start */
        }
        free(move);
        free(stack);
        free(order);
    }
    return 0;
}

/* Whether v is a dense row-major 2-d view of its elements: dims (V, D), strides (D, 1). */
static int dense_2d(const gval *v)
{
    return v->ndim == 2 && (v->dims[1] <= 1 || v->strides[1] == 1) &&
           (v->dims[0] <= 1 || v->strides[0] == v->dims[1]);
}

/* Take node i out of the graph's order (the caller frees it). */
static void drop_node(g_graph *g, size_t i)
{
    memmove(&g->nodes[i], &g->nodes[i + 1], sizeof *g->nodes * (g->n_nodes - i - 1));
    g->n_nodes--;
    for (size_t j = i; j < g->n_nodes; j++)
        g->nodes[j]->id = (int)j;
}

/* Whether v is dense in its own axes' order (axes of one element aside). */
static int dense_any(const gval *v)
{
    int64_t stride = 1;
    for (int i = v->ndim - 1; i >= 0; i--) {
        if (v->dims[i] > 1 && v->strides[i] != stride)
            return 0;
        stride *= v->dims[i];
    }
    return 1;
}

/* Whether v's elements are the whole of its base, dense, in v's order. */
static int whole_base(const gval *v)
{
    return v->offset == 0 && g_numel(v) == g_numel(v->base) && dense_2d(v) && dense_any(v->base);
}

/* Base z and its views become views of base onto's storage, at the same element offsets (onto
 * holds z's elements in z's order). */
static void rebase(g_graph *g, gval *z, gval *onto)
{
    for (size_t v = 0; v < g->n_vals; v++)
        if (g->vals[v]->base == z && g->vals[v] != z)
            g->vals[v]->base = onto;
    z->base = onto;
}

/* An embedding's gradient added to another gradient of the same table (a tied LM head's),
 * ADD(x, SCATTER_ADD(ids, rows)), as one SCATTER_ADD(ids, rows, x): the rows added into x's
 * values, in place where x's whole dense base is read by the ADD alone (the head's product then
 * writes the gradient's buffer itself, or the sum moves onto x's storage), else into a copy. No
 * table of zeros, no pass adding two tables: only the rows named are touched. Each element is
 * x's value plus its rows in order: a different order of the same sums, so it is done with or
 * without BORA_NO_FUSION (fused and unfused runs keep the same bits). Only for backends built
 * for ABI 1.7 or later (an older one would take the third input for nothing). */
static void scatter_into(g_graph *g)
{
    if (!g->store->scatter_init)
        return;
    for (size_t ai = 0; ai < g->n_nodes; ai++) {
        gnode *A = g->nodes[ai];
        if (A->op != BORA_OP_ADD || A->nin != 2 || A->nout != 1)
            continue;
        for (int k = 0; k < 2; k++) {
            gval *y = A->in[k], *x = A->in[1 - k], *z = A->out[0], *yb = y->base;
            gnode *S = yb->node;
            if (!S || S->op != BORA_OP_SCATTER_ADD || S->nin != 2 || S->nout != 1 ||
                S->out[0] != yb || yb->storage != S_ARENA || yb == g->output->base ||
                !read_only_by(g, yb, A, A) || !whole_base(y) || !dense_2d(yb) ||
                y->dims[0] != yb->dims[0] || y->dims[1] != yb->dims[1] || x->base == yb ||
                z->base != z || z == g->output->base || !dense_2d(z) || !dense_2d(x) ||
                x->dtype != z->dtype || x->base == z || x->dims[0] != z->dims[0] ||
                x->dims[1] != z->dims[1])
                continue;
            gval *operands[4] = {S->in[0], S->in[1], x, z};
            if (!has_kernel(g, BORA_OP_SCATTER_ADD, operands, 4))
                continue;
            gval *xb = x->base;
            if (whole_base(x) && xb->storage == S_ARENA && xb != g->output->base &&
                read_only_by(g, xb, A, A)) {
                if (z->storage == S_GRAD || z->storage == S_HVP) {
                    /* x's producer writes the gradient's buffer */
                    xb->storage = z->storage;
                    xb->slot = z->slot;
                } else if (z->storage == S_ARENA) { /* z and its views onto x's storage */
                    rebase(g, z, xb);
                }
            }
            /* S, reading x too and writing z, takes A's place (x and S's inputs are made by
             * then) */
            S->in[S->nin++] = x;
            S->out[0] = z;
            z->node = S;
            yb->node = NULL;
            size_t si = (size_t)S->id;
            g->nodes[ai] = S;
            drop_node(g, si);
            free(A);
            count_readers(g);
            ai = si; /* go on from S's old place */
            break;
        }
    }
}

/* Whether b is one row broadcast: unit stride along its last axis, stride 0 along the rest. */
static int bias_row(const gval *b)
{
    if (b->ndim < 1 || (b->dims[b->ndim - 1] > 1 && b->strides[b->ndim - 1] != 1))
        return 0;
    for (int i = 0; i < b->ndim - 1; i++)
        if (b->dims[i] > 1 && b->strides[i] != 0)
            return 0;
    return 1;
}

/* A linear layer's bias, ADD(MATMUL(a, w), bias broadcast over the rows), as one
 * MATMUL(a, w, bias) (ABI 1.8) where the backend has that kernel: it adds the bias to each
 * finished sum as the product writes it (oneDNN's epilogue on the CPU), the bits of the ADD, and
 * the pass that read and wrote the whole result again is gone. The product must be read by the
 * ADD alone and in the ADD's own order; the ADD's result then becomes a view of the product's
 * storage. The bias must be stored outside the arena (a parameter, an input): one the graph
 * computes may be made after the product, and its producer would not be marked needed through
 * the product's reading it. BORA_NO_FUSION turns it off. */
static void bias_into_matmul(g_graph *g)
{
    if (!g->store->matmul_bias)
        return;
    size_t dropped = 0;
    for (size_t ai = 0; ai < g->n_nodes; ai++) {
        gnode *A = g->nodes[ai];
        if (!A || A->op != BORA_OP_ADD || A->nin != 2 || A->nout != 1)
            continue;
        gval *z = A->out[0];
        if (z->base != z || z->storage != S_ARENA || z == g->output->base || z->ndim < 1 ||
            !dense_any(z))
            continue;
        for (int k = 0; k < 2; k++) {
            gval *y = A->in[k], *b = A->in[1 - k], *c = y->base;
            gnode *M = c->node;
            if (!M || M->op != BORA_OP_MATMUL || M->nin != 2 || M->nout != 1 || M->out[0] != c ||
                c->storage != S_ARENA || c == g->output->base || c->ndim != 3 || !dense_any(c) ||
                y->offset != 0 || g_numel(y) != g_numel(c) || !dense_any(y) || y->ndim != z->ndim ||
                memcmp(y->dims, z->dims, sizeof *y->dims * (size_t)z->ndim) ||
                y->dims[y->ndim - 1] != c->dims[2] || c->dtype != z->dtype ||
                b->dtype != z->dtype || b->base->storage == S_ARENA || b->ndim != y->ndim ||
                b->dims[b->ndim - 1] != c->dims[2] || !bias_row(b) || !read_only_by(g, c, A, A))
                continue;
            gval *operands[4] = {M->in[0], M->in[1], b, c};
            if (!has_kernel(g, BORA_OP_MATMUL, operands, 4))
                continue;
            g->readers[c->id] += g->readers[z->id] - 1; /* A's read of c gone, z's readers c's */
            g->readers[z->id] = 0;                      /* (and b's read moved from A to M) */
            z->base = c; /* the same elements in the same order; z's views follow below */
            z->node = M;
            M->in[M->nin++] = b;
            g->nodes[ai] = NULL;
            free(A);
            dropped++;
            break;
        }
    }
    if (!dropped)
        return;
    /* the ADDs out of the order, and the views of their results onto the products' storage, in
     * one pass each (one at a time, they made this rewrite quadratic in the graph's size) */
    size_t k = 0;
    for (size_t i = 0; i < g->n_nodes; i++)
        if (g->nodes[i]) {
            g->nodes[k] = g->nodes[i];
            g->nodes[k]->id = (int)k;
            k++;
        }
    g->n_nodes = k;
    for (size_t v = 0; v < g->n_vals; v++)
        while (g->vals[v]->base->base != g->vals[v]->base)
            g->vals[v]->base = g->vals[v]->base->base;
}

/* Under trainer.mp c=bf16 the fused cross-entropy's gradient (written over the logits) reaches
 * the LM head's bf16 products through one rounding COPY. Where the backend takes a bf16
 * gradient, the fused node writes the COPY's bf16 value itself, each row's f32 gradient rounded
 * as the COPY rounds it (the same bits), and the COPY drops out: the logits' bytes are read
 * once and half as many written. BORA_NO_FUSION turns it off. */
static void xent_writes_bf16(g_graph *g)
{
    for (size_t xi = 0; xi < g->n_nodes; xi++) {
        gnode *X = g->nodes[xi];
        if (X->op != BORA_OP_XENT_FUSED || X->nin != 3 || X->nout != 3)
            continue;
        gval *x = X->in[0], *dl = X->out[2];
        if (dl->dtype != BORA_DTYPE_F32 || dl->base != x->base || dl->offset != 0 ||
            !dense_2d(dl) || g_numel(dl) != g_numel(x->base))
            continue;
        gnode *C = NULL; /* the first node after X reading the logits' storage: the only one */
        for (size_t i = xi + 1; i < g->n_nodes && !C; i++)
            for (int k = 0; k < g->nodes[i]->nin && !C; k++)
                if (g->nodes[i]->op != G_VIEW && g->nodes[i]->in[k]->base == x->base)
                    C = g->nodes[i];
        if (!C || C->op != BORA_OP_COPY || C->nin != 1 || C->nout != 1 ||
            !read_only_by(g, x->base, X, C))
            continue;
        gval *r = C->in[0], *c = C->out[0];
        if (!c->mp_cast || c->dtype != BORA_DTYPE_BF16 || c->base != c || c->storage != S_ARENA ||
            c == g->output->base || r->offset != 0 || g_numel(r) != g_numel(dl) ||
            g_numel(c) != g_numel(dl) || !dense_any(r) || !dense_any(c))
            continue;
        gval *operands[6] = {x, X->in[1], X->in[2], X->out[0], X->out[1], c};
        if (!has_kernel(g, BORA_OP_XENT_FUSED, operands, 6))
            continue;
        /* dl becomes the bf16 value's 2-d view (the same elements in the same order) */
        dl->dtype = BORA_DTYPE_BF16;
        dl->base = c;
        c->node = X;
        drop_node(g, (size_t)C->id);
        free(C);
        count_readers(g);
    }
}

/* Under trainer.mp r=bf16 the residual stream is kept in bf16 and widened (a COPY to f32) for
 * the ops that read it. A reader whose kernel takes the bf16 value itself (LayerNorm and its
 * gradient on the CPU backend) reads that instead, with the same bits, and the widening moves to
 * just before its first remaining reader, where the fusion can take it into that reader's
 * elementwise chain (widened in a scratch tile, never in memory); with no reader left it drops
 * out. BORA_NO_FUSION turns it off. 0, or -1 out of memory. */
static int read_bf16_directly(g_graph *g)
{
    /* Each base's reading inputs (nodes and views alike), listed once: a scan of every later
     * node per widening made this rewrite quadratic in the graph's size. The rewrite moves
     * nodes (ids kept current) and turns inputs to r (entries that no longer read w skipped). */
    size_t *first_at = calloc(g->n_vals + 1, sizeof *first_at), n_reads = 0;
    for (size_t i = 0; first_at && i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i]->nin; k++, n_reads++)
            first_at[g->nodes[i]->in[k]->base->id + 1]++;
    for (size_t v = 0; first_at && v < g->n_vals; v++)
        first_at[v + 1] += first_at[v];
    struct read {
        gnode *n;
        int k;
    } *reads = malloc((n_reads ? n_reads : 1) * sizeof *reads);
    size_t *fill = malloc((g->n_vals ? g->n_vals : 1) * sizeof *fill);
    if (!first_at || !reads || !fill) {
        free(first_at);
        free(reads);
        free(fill);
        return -1;
    }
    memcpy(fill, first_at, g->n_vals * sizeof *fill);
    for (size_t i = 0; i < g->n_nodes; i++)
        for (int k = 0; k < g->nodes[i]->nin; k++)
            reads[fill[g->nodes[i]->in[k]->base->id]++] = (struct read){g->nodes[i], k};
    free(fill);
    int rc = 0;
    for (size_t wi = 0; wi < g->n_nodes && !rc; wi++) {
        gnode *W = g->nodes[wi];
        if (W->op != BORA_OP_COPY || W->nin != 1 || W->nout != 1)
            continue;
        gval *w = W->out[0], *r = W->in[0];
        if (!w->mp_cast || w->dtype != BORA_DTYPE_F32 || r->dtype != BORA_DTYPE_BF16 ||
            !r->mp_cast || w->base != w || w == g->output->base)
            continue;
        size_t first = g->n_nodes; /* the first node still reading w (or a view of it) */
        for (size_t e = first_at[w->id]; e < first_at[w->id + 1]; e++) {
            gnode *n = reads[e].n;
            int k = reads[e].k;
            size_t i = (size_t)n->id;
            if (n->in[k]->base != w || i <= wi)
                continue;
            if (n->in[k] != w) {
                first = i < first ? i : first;
                continue;
            }
            gval *operands[G_MAX_IN + G_MAX_OUT];
            int m = 0;
            for (int q = 0; q < n->nin; q++)
                operands[m++] = q == k ? r : n->in[q];
            for (int q = 0; q < n->nout; q++)
                operands[m++] = n->out[q];
            if (n->op < G_PARAM && has_kernel(g, n->op, operands, m))
                n->in[k] = r;
            else
                first = i < first ? i : first;
        }
        if (first == g->n_nodes || first == wi + 1)
            continue;
        gnode **moved = malloc(sizeof *moved * (first - wi));
        if (!moved) {
            rc = -1;
            break;
        }
        memcpy(moved, &g->nodes[wi + 1], sizeof *moved * (first - wi - 1));
        moved[first - wi - 1] = W;
        memcpy(&g->nodes[wi], moved, sizeof *moved * (first - wi));
        free(moved);
        for (size_t i = wi; i < first; i++)
            g->nodes[i]->id = (int)i;
        wi--; /* the node now at wi is another one */
    }
    free(first_at);
    free(reads);
    return rc;
}

typedef struct interval {
    gval *v;
    size_t bytes;
} interval;

/* Placement: values are taken in the order they come into use (the largest first among those
 * starting at one node), each put in the smallest free gap that holds it (the lowest such), and
 * its bytes freed after its last use, neighbouring gaps joined. Each value costs a scan of the
 * free gaps, not of every value placed before it: the greedy this replaced (the largest value
 * first, each at the lowest offset free over its lifetime, checked against all placed values
 * until none moved it) took cubic time in the number of layers. */
static int by_first_use(const void *a, const void *b)
{
    const interval *x = a, *y = b;
    if (x->v->first_use != y->v->first_use)
        return x->v->first_use < y->v->first_use ? -1 : 1;
    if (x->bytes != y->bytes)
        return x->bytes > y->bytes ? -1 : 1;
    return x->v->id < y->v->id ? -1 : 1;
}

static int by_last_use(const void *a, const void *b)
{
    const interval *x = *(const interval *const *)a, *y = *(const interval *const *)b;
    if (x->v->last_use != y->v->last_use)
        return x->v->last_use < y->v->last_use ? -1 : 1;
    return x->v->id < y->v->id ? -1 : 1;
}

typedef struct gap {
    size_t at, bytes;
} gap;

typedef struct free_list {
    gap *gaps; /* free bytes below top, by offset, none touching another */
    size_t n, cap;
    size_t top; /* the arena's end so far */
} free_list;

/* The offset of bytes taken from the smallest gap that holds them, or from the top. */
static size_t fl_take(free_list *fl, size_t bytes)
{
    size_t best = fl->n;
    for (size_t i = 0; i < fl->n; i++)
        if (fl->gaps[i].bytes >= bytes &&
            (best == fl->n || fl->gaps[i].bytes < fl->gaps[best].bytes))
            best = i;
    if (best == fl->n) { /* the last gap, where it ends at the top, grows into it */
        if (fl->n && fl->gaps[fl->n - 1].at + fl->gaps[fl->n - 1].bytes == fl->top) {
            size_t at = fl->gaps[--fl->n].at;
            fl->top = at + bytes;
            return at;
        }
        fl->top += bytes;
        return fl->top - bytes;
    }
    size_t at = fl->gaps[best].at;
    fl->gaps[best].at += bytes;
    fl->gaps[best].bytes -= bytes;
    if (!fl->gaps[best].bytes) {
        memmove(&fl->gaps[best], &fl->gaps[best + 1], (fl->n - best - 1) * sizeof *fl->gaps);
        fl->n--;
    }
    return at;
}

/* Give [at, at + bytes) back, joined with the gaps it touches. 0, or -1 out of memory. */
static int fl_give(free_list *fl, size_t at, size_t bytes)
{
    size_t lo = 0, hi = fl->n; /* the first gap above at */
    while (lo < hi) {
        size_t mid = (lo + hi) / 2;
        if (fl->gaps[mid].at < at)
            lo = mid + 1;
        else
            hi = mid;
    }
    int join_prev = lo > 0 && fl->gaps[lo - 1].at + fl->gaps[lo - 1].bytes == at;
    int join_next = lo < fl->n && at + bytes == fl->gaps[lo].at;
    if (join_prev && join_next) {
        fl->gaps[lo - 1].bytes += bytes + fl->gaps[lo].bytes;
        memmove(&fl->gaps[lo], &fl->gaps[lo + 1], (fl->n - lo - 1) * sizeof *fl->gaps);
        fl->n--;
    } else if (join_prev) {
        fl->gaps[lo - 1].bytes += bytes;
    } else if (join_next) {
        fl->gaps[lo].at = at;
        fl->gaps[lo].bytes += bytes;
    } else {
        gap *gaps = g_grow(fl->gaps, &fl->cap, fl->n, sizeof *gaps);
        if (!gaps)
            return -1;
        fl->gaps = gaps;
        memmove(&fl->gaps[lo + 1], &fl->gaps[lo], (fl->n - lo) * sizeof *fl->gaps);
        fl->gaps[lo] = (gap){at, bytes};
        fl->n++;
    }
    return 0;
}

/* Offsets for the n values of iv (sorted here) and the arena's size. 0, -1 out of memory, or 1
 * when the arena would pass G_MAX_BYTES. */
static int place(interval *iv, size_t n, size_t *arena_bytes)
{
    free_list fl = {0};
    interval **ends = malloc((n ? n : 1) * sizeof *ends);
    if (!ends)
        return -1;
    qsort(iv, n, sizeof *iv, by_first_use);
    for (size_t i = 0; i < n; i++)
        ends[i] = &iv[i];
    qsort(ends, n, sizeof *ends, by_last_use);
    size_t e = 0;
    int rc = 0;
    for (size_t i = 0; i < n && !rc; i++) {
        for (; e < n && ends[e]->v->last_use < iv[i].v->first_use && !rc; e++)
            rc = fl_give(&fl, (size_t)ends[e]->v->arena_offset, ends[e]->bytes);
        iv[i].v->arena_offset = (int64_t)fl_take(&fl, iv[i].bytes);
        if (fl.top > (size_t)G_MAX_BYTES) /* (each value is at most that: no sum wraps) */
            rc = 1;
    }
    *arena_bytes = fl.top;
    free(fl.gaps);
    free(ends);
    return rc;
}

bora_status g_finalize(g_graph *g)
{
    if (g->status)
        return g->status;
    if (!g->output)
        return g_fail(g, "the graph has no output");
    const bora_backend_ops *ops = g->store->ops;
    char *needed = calloc(g->n_nodes ? g->n_nodes : 1, 1);
    interval *iv = calloc(g->n_vals ? g->n_vals : 1, sizeof *iv);
    if (!needed || !iv) {
        free(needed);
        free(iv);
        return g_fail(g, "out of memory");
    }
    g->readers = calloc(g->n_vals ? g->n_vals : 1, sizeof *g->readers);
    if (!g->readers) {
        free(needed);
        free(iv);
        return g_fail(g, "out of memory");
    }
    count_readers(g);
    const char *nf = getenv("BORA_NO_FUSION");
    int fusion = !(nf && *nf && strcmp(nf, "0"));
    if (fusion && fuse_xent(g)) {
        free(needed);
        free(iv);
        return g_fail(g, "out of memory");
    }
    if (fusion)
        fuse_sum_squares(g);
    scatter_into(g); /* (its sums, so fused or not) */
    if (fusion)
        xent_writes_bf16(g);
    if (fusion)
        bias_into_matmul(g);
    if (fusion && read_bf16_directly(g)) {
        free(needed);
        free(iv);
        return g_fail(g, "out of memory");
    }
    free(g->readers);
    g->readers = NULL;
    mark_needed(g, needed);

    /* Liveness of arena values: from the producing node to the last node reading the value or
     * any view of it; the output lives to the end. */
    for (size_t i = 0; i < g->n_vals; i++) {
        g->vals[i]->first_use = -1;
        g->vals[i]->last_use = -1;
    }
    for (size_t i = 0; i < g->n_nodes; i++) {
        gnode *n = g->nodes[i];
        if (!needed[i])
            continue;
        for (int o = 0; o < n->nout; o++) { /* (a view's base too: xent_writes_bf16's) */
            gval *v = n->out[o]->base;
            if (v->first_use < 0)
                v->first_use = v->last_use = (int)i;
        }
        for (int k = 0; k < n->nin; k++)
            if (n->in[k]->base->last_use < (int)i)
                n->in[k]->base->last_use = (int)i;
    }
    g->output->base->last_use = (int)g->n_nodes;

    /* Kernels: chosen now, so a missing one is a build-time error. */
    for (size_t i = 0; i < g->n_nodes && !g->status; i++) {
        gnode *n = g->nodes[i];
        if (!needed[i] || n->op == G_VIEW || n->op == G_PARAM || n->op == G_INPUT ||
            n->op == G_CONST)
            continue;
        int op = n->op == G_GRAD ? BORA_OP_ADD : n->op == G_ASSIGN ? BORA_OP_COPY : n->op;
        int32_t dtypes[G_MAX_IN + G_MAX_OUT];
        uint32_t nd = 0;
        for (int k = 0; k < n->nin; k++)
            dtypes[nd++] = n->in[k]->dtype;
        for (int k = 0; k < n->nout; k++)
            dtypes[nd++] = n->out[k]->dtype;
        if (op < BORA_OP_COUNT_ && g_op_since(op) > g->store->abi_minor) {
            g_fail(g,
                   "backend '%s' was built for ABI 1.%u, which has no op '%s' (ABI 1.%u); "
                   "rebuild the backend against this SDK",
                   g->store->backend_name, g->store->abi_minor, g_op_name(op), g_op_since(op));
            continue;
        }
        n->kernel = ops->kernel(g->store->backend, (uint32_t)op, dtypes, nd);
        if (!n->kernel) {
            char types[128];
            size_t w = 0;
            for (uint32_t k = 0; k < nd && w < sizeof types; k++)
                w += (size_t)snprintf(types + w, sizeof types - w, "%s%s",
                                      k == 0                  ? ""
                                      : k == (uint32_t)n->nin ? " -> "
                                                              : ", ",
                                      dtype_name(dtypes[k]));
            g_fail(g, "backend '%s' has no kernel for '%s' on %s (%s)", g->store->backend_name,
                   g_op_name(op), dtype_name(dtypes[0]), types);
        }
    }
    /* Fused groups, where the backend runs them and fusion is not turned off. */
    if (!g->status && ops->run_fused && fusion && g_plan_fusion(g, needed))
        g_fail(g, "out of memory");
    /* A group runs its nodes tile by tile at once: everything it touches in memory lives in
     * the arena from its first node to its last. A value held in a scratch tile is never in
     * memory while the group runs; it keeps its own lifetime, which is all the node-by-node
     * run of a declined group needs (an optimizer's chain over every parameter would otherwise
     * hold all its intermediates at once). */
    int *tiled = g->n_fused ? calloc(g->n_nodes, sizeof *tiled) : NULL;
    if (g->n_fused && !tiled)
        g_fail(g, "out of memory");
    for (size_t k = 0; k < g->n_fused && !g->status; k++) {
        const g_fused *f = &g->fused[k];
        for (int j = 0; j < f->n_steps * f->n_segments; j++)
            tiled[f->nodes[j]->id] = g_fused_in_tile(f, j);
    }
    for (size_t k = 0; k < g->n_fused && !g->status; k++) {
        const g_fused *f = &g->fused[k];
        int lo = f->head, hi = f->head;
        for (int j = 0; j < f->n_steps * f->n_segments; j++)
            hi = f->nodes[j]->id > hi ? f->nodes[j]->id : hi;
        for (int j = 0; j < f->n_steps * f->n_segments; j++) {
            const gnode *n = f->nodes[j];
            for (int q = 0; q < n->nin + n->nout; q++) {
                gval *b = (q < n->nin ? n->in[q] : n->out[q - n->nin])->base;
                if (b->node && tiled[b->node->id])
                    continue;
                if (b->first_use >= lo && b->first_use <= hi)
                    b->first_use = lo;
                if (b->first_use >= 0 && b->last_use < hi)
                    b->last_use = hi;
            }
        }
    }
    free(tiled);
    /* Each value is placed in order of first use, into the smallest free gap that holds it. */
    size_t n_iv = 0;
    g->naive_bytes = 0;
    for (size_t i = 0; i < g->n_vals; i++) {
        gval *v = g->vals[i];
        if (v->base != v || v->storage != S_ARENA || v->first_use < 0)
            continue;
        iv[n_iv++] = (interval){v, (value_bytes(v) + 63) & ~(size_t)63};
        g->naive_bytes = g->naive_bytes > SIZE_MAX - iv[n_iv - 1].bytes
                             ? SIZE_MAX
                             : g->naive_bytes + iv[n_iv - 1].bytes;
    }
    int placed = place(iv, n_iv, &g->arena_bytes);
    if (placed < 0)
        g_fail(g, "out of memory");
    else if (placed > 0)
        g_fail(g, "the graph's intermediate values would take more than 2^62 bytes at once");
    free(iv);
    /* The store's arena holds every graph's: planned to the largest before it is allocated,
     * grown for a graph built after. */
    bora_status fit = g->status ? BORA_OK : g_store_fit_arena(g->store, g->arena_bytes);
    if (fit != BORA_OK) {
        g_fail(g, "%s", bora_error_get());
        g->status = fit; /* out of memory, not a misbuilt graph */
        bora_error_set(fit, "%s", g->error);
    }

    free(needed);
    /* (Inputs are allocated when first written or run: a caller states what the graphs need,
     * and refuses, before anything large is allocated.) */
    /* What a kernel needs ahead of its first run, made now (the backend's prepare). */
    for (size_t i = 0; i < g->n_nodes && !g->status && ops->prepare; i++) {
        gnode *n = g->nodes[i];
        if (!n->kernel)
            continue;
        bora_kernel_args a;
        bora_tensor_desc in[G_MAX_IN + 1], out[G_MAX_OUT];
        node_args(g, n, &a, in, out, 0);
        if (ops->prepare(g->store->backend, &a) != BORA_OK)
            g_fail(g, "backend '%s' cannot prepare '%s': %s", g->store->backend_name,
                   g_op_name(n->op), bora_error_get());
    }
    g->finalized = !g->status;
    bora_log(BORA_LOG_DEBUG, "graph: %zu nodes, arena %zu bytes (naive %zu)", g->n_nodes,
             g->arena_bytes, g->naive_bytes);
    return g->status;
}

/* Inputs live outside the arena, one buffer each, allocated on first use. */
static bora_status alloc_inputs(g_graph *g)
{
    const bora_backend_ops *ops = g->store->ops;
    for (size_t i = 0; i < g->n_inputs; i++) {
        g_input *in = &g->inputs[i];
        if (in->buf)
            continue;
        if (ops->buffer_alloc(g->store->backend, in->nbytes ? in->nbytes : 1, 64, &in->buf) !=
            BORA_OK)
            return bora_error_set(BORA_ERR_NOMEM, "cannot allocate %zu bytes for input '%s'",
                                  in->nbytes, in->value->label);
        in->ptr = ops->buffer_ptr(g->store->backend, in->buf);
    }
    return BORA_OK;
}

/* Constants get their buffers and bytes once, before the first run; the host copy goes then. */
static bora_status alloc_consts(g_graph *g)
{
    const bora_backend_ops *ops = g->store->ops;
    for (size_t i = 0; i < g->n_consts; i++) {
        g_const *c = &g->consts[i];
        if (c->buf)
            continue;
        bora_buffer *buf = NULL;
        if (ops->buffer_alloc(g->store->backend, c->nbytes ? c->nbytes : 1, 64, &buf) != BORA_OK)
            return bora_error_set(BORA_ERR_NOMEM, "cannot allocate %zu bytes for constant '%s'",
                                  c->nbytes, c->value->label);
        /* Kept only once its bytes are in: a failed copy leaves the constant to make again at
         * the next run, never a buffer of whatever the allocator held. */
        bora_status st = ops->copy_in(g->store->backend, buf, 0, c->data, c->nbytes);
        if (st != BORA_OK) {
            ops->buffer_free(g->store->backend, buf);
            return st;
        }
        c->buf = buf;
        c->ptr = ops->buffer_ptr(g->store->backend, buf);
        free(c->data);
        c->data = NULL;
    }
    return BORA_OK;
}

size_t g_input_bytes(const g_graph *g)
{
    size_t total = 0;
    for (size_t i = 0; i < g->n_inputs; i++)
        total += (g->inputs[i].nbytes + 63) & ~(size_t)63;
    return total;
}

bora_status g_set_input(g_graph *g, const char *name, const void *data, size_t nbytes)
{
    for (size_t i = 0; i < g->n_inputs; i++) {
        g_input *in = &g->inputs[i];
        if (strcmp(in->value->label, name))
            continue;
        if (nbytes != in->nbytes)
            return bora_error_set(BORA_ERR_INVALID, "input '%s' takes %zu bytes, not %zu", name,
                                  in->nbytes, nbytes);
        if (!g->finalized)
            return bora_error_set(BORA_ERR_INVALID, "graph is not finalized");
        bora_status st = alloc_inputs(g);
        if (st != BORA_OK)
            return st;
        if (in->value->extent_max) {
            int32_t e;
            memcpy(&e, data, sizeof e);
            if (e < 0 || e > in->value->extent_max)
                return bora_error_set(BORA_ERR_INVALID, "extent '%s' is %d, outside 0..%lld", name,
                                      e, (long long)in->value->extent_max);
        }
        return g->store->ops->copy_in(g->store->backend, in->buf, 0, data, nbytes);
    }
    return bora_error_set(BORA_ERR_NOT_FOUND, "the graph has no input '%s'", name);
}

static char *storage_of(g_graph *g, const gval *base)
{
    g_store *s = g->store;
    switch (base->storage) {
    case S_PARAM: return s->param_ptr + s->slots[base->slot].offset;
    case S_GRAD: return s->grad_ptr + s->slots[base->slot].offset;
    case S_TANGENT: return s->tangent_ptr + s->slots[base->slot].offset;
    case S_HVP: return s->hvp_ptr + s->slots[base->slot].offset;
    case S_INPUT: return g->inputs[base->slot].ptr;
    case S_CONST: return g->consts[base->slot].ptr;
    case S_MODEL: return s->mstate_ptr + s->mstates[base->slot].offset;
    case S_STATE:
        return s->state_ptr + (size_t)base->state * g_store_state_block(s) +
               s->slots[base->slot].offset - s->state_lo;
    case S_SHADOW: return s->shadow_ptr + s->slots[base->slot].offset / 2;
    default: return s->arena_ptr + base->arena_offset;
    }
}

/* v as a kernel sees it; its data pointer NULL unless bound (storage may not exist yet). */
static void describe(g_graph *g, const gval *v, bora_tensor_desc *d, int bound)
{
    d->data =
        bound ? storage_of(g, v->base) + v->offset * (int64_t)bora_dtype_size(v->dtype) : NULL;
    d->dtype = v->dtype;
    d->ndim = v->ndim;
    for (int i = 0; i < v->ndim; i++) {
        d->dims[i] = v->dims[i];
        d->strides[i] = v->strides[i];
    }
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* BORA_PROFILE=1: each node's time is added up, and g_profile_print reports them by op and by
 * node (the heaviest first: 40, or BORA_PROFILE's value where it is larger) when the graph is
 * freed. */
static int profile_on(void)
{
    static int on = -1;
    if (on < 0) {
        const char *e = getenv("BORA_PROFILE");
        on = e && *e && strcmp(e, "0") != 0;
    }
    return on;
}

static int by_time_desc(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? 1 : x > y ? -1 : 0;
}

void g_profile_print(g_graph *g)
{
    if (!g->prof_s || !g->prof_runs)
        return;
    static const char *const extra[] = {"grad+=", "assign", "fused groups"};
    double by_op[BORA_OP_COUNT_ + 3] = {0}, total = 0;
    for (size_t i = 0; i < g->n_nodes; i++) {
        int op = g->nodes[i]->op;
        int k = g->nodes[i]->fused    ? BORA_OP_COUNT_ + 2
                : op < BORA_OP_COUNT_ ? op
                : op == G_GRAD        ? BORA_OP_COUNT_
                                      : BORA_OP_COUNT_ + 1;
        by_op[k] += g->prof_s[i];
        total += g->prof_s[i];
    }
    double runs = (double)g->prof_runs;
    fprintf(stderr, "profile: graph mode %d, %llu runs, %.2f ms per run in kernels\n", g->mode,
            (unsigned long long)g->prof_runs, 1e3 * total / runs);
    for (int k = 0; k < BORA_OP_COUNT_ + 3; k++)
        if (by_op[k] > 0)
            fprintf(stderr, "profile:   %-16s %9.2f ms %5.1f%%\n",
                    k < BORA_OP_COUNT_ ? g_op_name(k) : extra[k - BORA_OP_COUNT_],
                    1e3 * by_op[k] / runs, 100 * by_op[k] / total);
    /* The heaviest nodes, with their output shapes. */
    double(*top)[2] = malloc(g->n_nodes * sizeof *top);
    if (!top)
        return;
    for (size_t i = 0; i < g->n_nodes; i++)
        top[i][0] = g->prof_s[i], top[i][1] = (double)i;
    qsort(top, g->n_nodes, sizeof *top, by_time_desc);
    const char *e = getenv("BORA_PROFILE");
    long limit = e ? strtol(e, NULL, 10) : 0;
    if (limit < 40)
        limit = 40;
    for (size_t j = 0; j < g->n_nodes && j < (size_t)limit && top[j][0] > 0; j++) {
        const gnode *n = g->nodes[(size_t)top[j][1]];
        char d[256];
        g_describe(n->out[0], d, sizeof d);
        const char *what =
            n->op < BORA_OP_COUNT_ ? g_op_name(n->op) : extra[n->op == G_GRAD ? 0 : 1];
        if (n->fused) {
            const g_fused *f = &g->fused[n->fused - 1];
            snprintf(d, sizeof d, "%d steps over %d segments, %lld elements in the first",
                     f->n_steps, f->n_segments, (long long)f->count[0]);
            what = "fused";
        }
        fprintf(stderr, "profile:   %8.3f ms  #%d %s %s\n", 1e3 * top[j][0] / runs, n->id, what, d);
    }
    free(top);
}

/* The executor's view of a node's operands: G_GRAD adds into its own output. */
static int node_args(g_graph *g, const gnode *n, bora_kernel_args *a, bora_tensor_desc *in,
                     bora_tensor_desc *out, int bound)
{
    *a = (bora_kernel_args){.struct_size = sizeof *a, .op = (uint32_t)n->op, .options = &n->opt};
    int nin = 0;
    if (n->op == G_GRAD) { /* grad buffer += contribution */
        a->op = BORA_OP_ADD;
        describe(g, n->out[0], &in[nin++], bound);
    } else if (n->op == G_ASSIGN) {
        a->op = BORA_OP_COPY;
    }
    for (int k = 0; k < n->nin; k++)
        describe(g, n->in[k], &in[nin++], bound);
    for (int k = 0; k < n->nout; k++)
        describe(g, n->out[k], &out[k], bound);
    a->n_inputs = (uint32_t)nin;
    a->n_outputs = (uint32_t)n->nout;
    a->inputs = in;
    a->outputs = out;
    return nin;
}

static uint64_t desc_bytes(const bora_tensor_desc *d)
{
    return d->data ? (uint64_t)bora_tensor_desc_numel(d) * bora_dtype_size(d->dtype) : 0;
}

static bora_status run_node(g_graph *g, gnode *n)
{
    bora_tensor_desc in[G_MAX_IN + 1], out[G_MAX_OUT];
    bora_kernel_args a;
    int nin = node_args(g, n, &a, in, out, 1);
    bora_status st = n->kernel(g->store->backend, &a);
    if (st != BORA_OK)
        return bora_error_set(st, "kernel '%s' failed: %s", g_op_name((int)a.op), bora_error_get());
    g->kernels_run++;
    if (a.op < BORA_OP_COUNT_)
        g->op_runs[a.op]++;
    for (int k = 0; k < nin; k++)
        g->bytes_moved += desc_bytes(&in[k]);
    for (int k = 0; k < n->nout; k++)
        g->bytes_moved += desc_bytes(&out[k]);
    return BORA_OK;
}

/* A fused group: one call to the backend over all its segments; node by node if declined. */
static bora_status run_group(g_graph *g, g_fused *f)
{
    int steps = f->n_steps;
    for (int s = 0; s < f->n_segments; s++)
        for (int i = 0; i < steps; i++) {
            int at = s * steps + i;
            bora_tensor_desc *d = &f->descs[(size_t)at * BORA_FUSED_OPERANDS];
            const gnode *n = f->nodes[at];
            int nin = node_args(g, n, &f->args[at], d, d + G_MAX_IN + 1, 1);
            /* outputs right after the inputs, as the scratch table counts them */
            for (int k = 0; k < n->nout; k++)
                d[nin + k] = d[G_MAX_IN + 1 + k];
            f->args[at].outputs = d + nin;
            for (int k = 0; k < nin + n->nout; k++)
                if (f->scratch[i * BORA_FUSED_OPERANDS + k] >= 0)
                    d[k].data = NULL;
        }
    bora_fused fu = {
        sizeof fu, (uint32_t)steps, (uint32_t)f->n_segments, (uint32_t)f->n_scratch, f->count,
        f->args,   f->scratch};
    bora_status st = g->store->ops->run_fused(g->store->backend, &fu);
    if (st == BORA_ERR_UNSUPPORTED) {
        for (int at = 0; at < steps * f->n_segments; at++)
            if ((st = run_node(g, f->nodes[at])) != BORA_OK)
                return st;
        return BORA_OK;
    }
    if (st != BORA_OK)
        return bora_error_set(st, "a fused group of %d steps over %d segments failed: %s", steps,
                              f->n_segments, bora_error_get());
    g->kernels_run++;
    g->fused_runs++;
    g->fused_nodes += (uint64_t)(steps * f->n_segments);
    for (int at = 0; at < steps * f->n_segments; at++) {
        const bora_kernel_args *a = &f->args[at];
        if (a->op < BORA_OP_COUNT_)
            g->op_runs[a->op]++;
        for (uint32_t k = 0; k < a->n_inputs; k++)
            g->bytes_moved += desc_bytes(&a->inputs[k]);
        g->bytes_moved += desc_bytes(&a->outputs[0]);
    }
    return BORA_OK;
}

bora_status g_run(g_graph *g)
{
    if (!g->finalized || !g->store->param_ptr)
        return bora_error_set(BORA_ERR_INVALID, "graph run before it was finalized and the "
                                                "store allocated");
    bora_status ast = alloc_inputs(g);
    if (ast == BORA_OK)
        ast = alloc_consts(g);
    if (ast != BORA_OK)
        return ast;
    if (g->reads_shadows) {
        bora_status st = g_store_refresh_shadows(g->store);
        if (st != BORA_OK)
            return st;
    }
    if (profile_on() && !g->prof_s && g->n_nodes)
        g->prof_s = calloc(g->n_nodes, sizeof *g->prof_s);
    g->kernels_run = 0;
    g->bytes_moved = 0;
    g->fused_runs = 0;
    g->fused_nodes = 0;
    for (size_t i = 0; i < g->n_nodes; i++) {
        gnode *n = g->nodes[i];
        if (!n->kernel || (n->fused && g->fused[n->fused - 1].head != n->id))
            continue;
        double t0 = g->prof_s ? now_s() : 0;
        bora_status st = n->fused ? run_group(g, &g->fused[n->fused - 1]) : run_node(g, n);
        if (g->prof_s)
            g->prof_s[i] += now_s() - t0;
        if (st != BORA_OK)
            return st;
    }
    if (g->prof_s)
        g->prof_runs++;
    if (g->store->ops->synchronize)
        return g->store->ops->synchronize(g->store->backend);
    return BORA_OK;
}

bora_status g_read_part(g_graph *g, const gval *v, size_t at, void *dst, size_t nbytes)
{
    if (v->base != v || at > value_bytes(v) || nbytes > value_bytes(v) - at)
        return bora_error_set(BORA_ERR_INVALID, "cannot read '%s' (%zu bytes at %zu asked)",
                              v->label, nbytes, at);
    g_store *s = g->store;
    bora_buffer *buf;
    size_t off;
    switch (v->storage) {
    case S_PARAM: buf = s->params, off = s->slots[v->slot].offset; break;
    case S_GRAD: buf = s->grads, off = s->slots[v->slot].offset; break;
    case S_TANGENT: buf = s->tangents, off = s->slots[v->slot].offset; break;
    case S_HVP: buf = s->hvps, off = s->slots[v->slot].offset; break;
    case S_STATE:
        buf = s->states,
        off = (size_t)v->state * g_store_state_block(s) + s->slots[v->slot].offset - s->state_lo;
        break;
    case S_SHADOW: buf = s->shadow, off = s->slots[v->slot].offset / 2; break;
    case S_INPUT: buf = g->inputs[v->slot].buf, off = 0; break;
    case S_CONST: buf = g->consts[v->slot].buf, off = 0; break;
    case S_MODEL: buf = s->mstate, off = s->mstates[v->slot].offset; break;
    default: buf = s->arena, off = (size_t)v->arena_offset;
    }
    if (!buf) /* an input before its first write or run, or a graph never materialised */
        return bora_error_set(BORA_ERR_INVALID, "cannot read '%s': it holds nothing yet", v->label);
    return s->ops->copy_out(s->backend, dst, buf, off + at, nbytes);
}

bora_status g_read(g_graph *g, const gval *v, void *dst, size_t nbytes)
{
    if (v->base != v || nbytes != value_bytes(v))
        return bora_error_set(BORA_ERR_INVALID, "cannot read '%s' (%zu bytes asked)", v->label,
                              nbytes);
    return g_read_part(g, v, 0, dst, nbytes);
}
