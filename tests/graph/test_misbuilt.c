/* tests/graph/test_misbuilt.c — graphs built wrong: each refused at build time with a message
 * that names the op, the tensors and their axes; and the first error sticks.
 *
 * usage: test_misbuilt PLUGIN_DIR */
#include "../test.h"
#include "rig.h"

#define AX(n, s) ((bora_axis){(n), (s)})
static const char *plugin_dir;
static int cases;

typedef bora_tensor *(*builder)(bora_graph *g);

/* Build with f, expect it to fail with a message containing expect. */
static void refused(const char *what, builder f, const char *expect)
{
    rig r;
    rig_open(&r, plugin_dir, 1, 1);
    g_graph *g = g_graph_new(r.store, BORA_MODE_TRAIN);
    bora_tensor *out = f(&g->pub);
    bora_status st = bora_graph_status(&g->pub);
    if (st == BORA_OK && out) { /* some mistakes show only when differentiating or planning */
        g->output = out;
        st = g_autodiff(g, out);
        if (st == BORA_OK)
            st = g_finalize(g);
    }
    if (st == BORA_OK) {
        fprintf(stderr, "%s: built without an error\n", what);
        test_failures++;
    } else if (!strstr(g->error, expect)) {
        fprintf(stderr, "%s: expected \"%s\" in \"%s\"\n", what, expect, g->error);
        test_failures++;
    }
    cases++;
    g_graph_free(g);
    rig_close(&r);
}

static bora_tensor *F(bora_graph *g, const char *name, int n, const bora_axis *ax)
{
    return bora_param(g, name, BORA_DTYPE_F32, n, ax, bora_init_normal(1), 0);
}

static bora_tensor *pred_minus_target(bora_graph *g)
{
    bora_axis p[2] = {AX("batch", 8), AX("out", 1)};
    bora_tensor *pred = F(g, "pred", 2, p), *target = F(g, "target", 1, p);
    return bora_sub(g, pred, target);
}
static bora_tensor *disjoint(bora_graph *g)
{
    bora_axis a[1] = {AX("x", 3)}, b[1] = {AX("y", 3)};
    return bora_add(g, F(g, "a", 1, a), F(g, "b", 1, b));
}
static bora_tensor *size_mismatch(bora_graph *g)
{
    bora_axis a[2] = {AX("batch", 2), AX("embed", 4)}, b[1] = {AX("embed", 5)};
    return bora_mul(g, F(g, "a", 2, a), F(g, "b", 1, b));
}
static bora_tensor *dtype_mismatch(bora_graph *g)
{
    bora_axis a[1] = {AX("x", 3)};
    bora_tensor *d = bora_param(g, "d", BORA_DTYPE_F64, 1, a, bora_init_zeros(), 0);
    return bora_add(g, F(g, "a", 1, a), d);
}
static bora_tensor *repeated_name(bora_graph *g)
{
    bora_axis a[2] = {AX("position", 4), AX("position", 4)};
    return F(g, "scores", 2, a);
}
static bora_tensor *dot_missing(bora_graph *g)
{
    bora_axis a[2] = {AX("m", 2), AX("k", 3)}, b[2] = {AX("j", 3), AX("n", 4)};
    const char *k[] = {"k"};
    return bora_dot(g, F(g, "a", 2, a), F(g, "b", 2, b), 1, k);
}
static bora_tensor *dot_sizes(bora_graph *g)
{
    bora_axis a[2] = {AX("m", 2), AX("k", 3)}, b[2] = {AX("k", 4), AX("n", 4)};
    const char *k[] = {"k"};
    return bora_dot(g, F(g, "a", 2, a), F(g, "b", 2, b), 1, k);
}
static bora_tensor *layernorm_gamma(bora_graph *g)
{
    bora_axis x[2] = {AX("batch", 2), AX("embed", 4)}, w[1] = {AX("mlp", 4)};
    return g->api->layernorm(g, F(g, "x", 2, x), F(g, "w", 1, w), F(g, "b", 1, w), "embed", 1e-5);
}
static bora_tensor *xent_float_targets(bora_graph *g)
{
    bora_axis l[2] = {AX("batch", 2), AX("vocab", 5)};
    return g->api->cross_entropy(g, F(g, "logits", 2, l), F(g, "t", 1, l), "vocab", NULL);
}
static bora_tensor *embedding_float_ids(bora_graph *g)
{
    bora_axis t[2] = {AX("vocab", 5), AX("embed", 3)}, i[1] = {AX("position", 4)};
    return g->api->embedding(g, F(g, "wte", 2, t), F(g, "ids", 1, i), "vocab");
}
static bora_tensor *attention_no_head_dim(bora_graph *g)
{
    bora_axis q[2] = {AX("position", 4), AX("embed", 3)},
              k[2] = {AX("key_position", 4), AX("embed", 3)};
    return g->api->attention(g, F(g, "q", 2, q), F(g, "k", 2, k), F(g, "v", 2, k), NULL);
}
static bora_tensor *slice_out_of_range(bora_graph *g)
{
    bora_axis a[1] = {AX("position", 4)};
    return g->api->slice(g, F(g, "a", 1, a), "position", 2, 3);
}
static bora_tensor *loss_not_scalar(bora_graph *g)
{
    bora_axis a[1] = {AX("batch", 4)};
    return g->api->unary(g, BORA_OP_TANH, F(g, "a", 1, a));
}
static bora_tensor *no_kernel(bora_graph *g)
{
    bora_axis a[1] = {AX("x", 4)};
    const char *x[] = {"x"};
    bora_tensor *t = g->api->cast(g, F(g, "a", 1, a), BORA_DTYPE_BF16);
    t = g->api->reduce(g, BORA_OP_SUM, g->api->unary(g, BORA_OP_EXP, t), 1, x);
    return g->api->cast(g, t, BORA_DTYPE_F32);
}
static bora_tensor *sticky(bora_graph *g)
{
    bora_axis a[1] = {AX("x", 3)}, b[1] = {AX("y", 3)};
    bora_tensor *bad = bora_add(g, F(g, "a", 1, a), F(g, "b", 1, b)); /* the first error */
    bora_tensor *later = bora_unary(g, BORA_OP_EXP, bad);             /* NULL in, NULL out */
    bora_axis c[1] = {AX("z", 2)};
    bora_tensor *fine = F(g, "c", 1, c); /* even a valid call now returns NULL */
    return later || fine ? F(g, "c2", 1, c) : NULL;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_misbuilt PLUGIN_DIR\n");
        return 2;
    }
    plugin_dir = argv[1];
    refused("(pred - target), (batch, 1) against (batch)", pred_minus_target,
            "sub: 'pred' (batch=8, out=1) has a trailing size-1 axis 'out' that 'target' (batch=8) "
            "lacks; it would broadcast silently");
    refused("disjoint axes", disjoint,
            "add: 'a' (x=3) and 'b' (y=3) each have axes the other lacks; broadcast one "
            "explicitly");
    refused("size mismatch", size_mismatch,
            "mul: axis 'embed' is 4 in 'a' (batch=2, embed=4) but 5 in 'b' (embed=5)");
    refused("dtype mismatch", dtype_mismatch,
            "add: 'a' (x=3) and 'd' (x=3) have different dtypes; cast one");
    refused("repeated axis name", repeated_name,
            "parameter 'scores': axis name 'position' repeats; rename one (e.g. key_position)");
    refused("dot on a missing axis", dot_missing,
            "dot: cannot contract 'k': 'b' (j=3, n=4) lacks it");
    refused("dot sizes", dot_sizes, "dot: 'k' is 3 in 'a' (m=2, k=3) but 4 in 'b' (k=4, n=4)");
    refused("layernorm weight axes", layernorm_gamma,
            "layernorm: 'w' (mlp=4) must have exactly the axis 'embed' of 'x' (batch=2, embed=4)");
    refused("cross-entropy float targets", xent_float_targets,
            "cross_entropy: targets 't' (batch=2) must be i32 token ids");
    refused("embedding float ids", embedding_float_ids,
            "embedding: needs a table with axis 'vocab' and more, and i32 ids");
    refused("attention without head_dim", attention_no_head_dim,
            "attention: q 'q' (position=4, embed=3) needs 'position' and 'head_dim'");
    refused("slice out of range", slice_out_of_range,
            "slice: 'a' (position=4) has no range 2..5 along 'position'");
    refused("loss not 0-d", loss_not_scalar, "the loss 'tanh#");
    refused("no kernel for a dtype", no_kernel, "backend 'cpu' has no kernel for 'exp' on bf16");
    refused("first error sticks", sticky, "add: 'a' (x=3) and 'b' (y=3) each have axes");

    /* The same parameter name with another shape in a second graph of the run. */
    rig r;
    rig_open(&r, plugin_dir, 1, 1);
    g_graph *g1 = g_graph_new(r.store, BORA_MODE_TRAIN), *g2 = g_graph_new(r.store, BORA_MODE_EVAL);
    bora_axis a4[1] = {AX("x", 4)}, a5[1] = {AX("x", 5)};
    CHECK(F(&g1->pub, "w", 1, a4) != NULL);
    CHECK(F(&g2->pub, "w", 1, a5) == NULL);
    CHECK_CONTAINS(g2->error, "parameter 'w' is declared again with another shape or dtype");
    cases++;
    g_graph_free(g1);
    g_graph_free(g2);
    rig_close(&r);

    printf("test_misbuilt: %d mis-built graphs refused\n", cases);
    return test_summary("test_misbuilt");
}
