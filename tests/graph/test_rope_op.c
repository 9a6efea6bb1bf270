/* tests/graph/test_rope_op.c — bora_graph_api.rope as a model meets it, on the CPU backend:
 *   decoding one position at a runtime position gives, bit for bit, the row of the whole
 *   window's forward at that position (both layouts, partial rotary dims, an offset), with the
 *   kernel and with the decomposition a backend without it gets;
 *   the kernel's bits are the decomposition's (MUL, NEG, MUL, ADD), both layouts, yarn's
 *   attention factor folded into the tables;
 *   every rope over one spec in a graph reads one pair of constant tables;
 *   bad calls fail the build with a message naming the tensor and the fix.
 * (Values and gradients against a double reference are test_ops' "rope" case.)
 *
 * usage: test_rope_op PLUGIN_DIR */
#include "../test.h"
#include "rig.h"

#include <math.h>

static const char *plugin_dir;
static bora_kernel_fn (*cpu_kernel)(bora_backend *, uint32_t, const int32_t *, uint32_t);
static bora_backend_ops no_rope_ops;

static bora_kernel_fn without_rope(bora_backend *b, uint32_t op, const int32_t *dt, uint32_t n)
{
    return op == BORA_OP_ROPE ? NULL : cpu_kernel(b, op, dt, n);
}

static void open_rig(rig *r, int kernel)
{
    rig_open(r, plugin_dir, 1, 1);
    if (!kernel) {
        no_rope_ops = *r->ops;
        cpu_kernel = r->ops->kernel;
        no_rope_ops.kernel = without_rope;
        r->store->ops = &no_rope_ops;
    }
}

typedef struct call {
    int kernel; /* the backend has the rope kernel */
    int T, H;   /* positions and head dim of x (batch 2, heads 2) */
    int layout; /* a bora_rope_layout */
    int64_t offset;
    int64_t runtime_max; /* > 0: a runtime position of at most this */
    int32_t position;    /* its value */
    int twice;           /* rope x twice, adding the results */
    int dtype;
    const bora_rope_spec *spec;
    const char *head_dim_axis;
    int opts_size_delta; /* bora_rope_opts.struct_size past (or short of) this SDK's */
} call;

/* Build and run one rope over x (batch=2, position=T, heads=2, head_dim=H) f32 into y; the
 * status of the build or run, with the graph's error in err and its constants in *n_consts. */
static bora_status run(const call *c, const float *x, float *y, char *err, size_t n_consts[1])
{
    rig r;
    open_rig(&r, c->kernel);
    g_graph *g = g_graph_new(r.store, BORA_MODE_EVAL);
    const bora_graph_api *A = g->pub.api;
    bora_axis ax[4] = {{"batch", 2}, {"position", c->T}, {"heads", 2}, {"head_dim", c->H}};
    bora_tensor *xt = A->input(&g->pub, "x", c->dtype ? c->dtype : BORA_DTYPE_F32, 4, ax);
    bora_rope_opts o = {.struct_size = (uint32_t)((int)sizeof o + c->opts_size_delta),
                        .layout = c->layout,
                        .spec = c->spec,
                        .offset = c->offset,
                        .head_dim_axis = c->head_dim_axis};
    if (c->runtime_max)
        o.position = A->extent(&g->pub, "position", c->runtime_max);
    bora_tensor *out = A->rope(&g->pub, xt, &o);
    if (c->twice)
        out = bora_add(&g->pub, out, A->rope(&g->pub, xt, &o));
    if (out && out->base != out)
        out = A->contiguous(&g->pub, out);
    g->output = out;
    bora_status st = out ? g_finalize(g) : BORA_ERR_INVALID;
    memcpy(err, g->error, sizeof g->error);
    if (st == BORA_OK)
        st = g_store_materialize(r.store);
    size_t n = (size_t)(4 * c->T * c->H);
    if (st == BORA_OK)
        st = g_set_input(g, "x", x, n * sizeof *x);
    if (st == BORA_OK && c->runtime_max)
        st = g_set_input(g, "position", &c->position, sizeof c->position);
    if (st == BORA_OK)
        st = g_run(g);
    if (st == BORA_OK)
        st = g_read(g, out, y, n * sizeof *y);
    n_consts[0] = g->n_consts;
    g_graph_free(g);
    rig_close(&r);
    return st;
}

static float value(int i)
{
    return (float)sin(0.37 * i + 0.1) * 2.0f;
}

/* Decode at p against the whole window's row p, bitwise. */
static void check_decode(int kernel, int layout, const bora_rope_spec *s)
{
    enum { T = 6, H = 10 };
    float x[2 * T * 2 * H], full[2 * T * 2 * H], one[4 * H], row[4 * H];
    for (int i = 0; i < 2 * T * 2 * H; i++)
        x[i] = value(i);
    char err[1024];
    size_t nc;
    call whole = {1, T, H, layout, 2, 0, 0, 0, 0, s, NULL, 0};
    CHECK(run(&whole, x, full, err, &nc) == BORA_OK);
    for (int p = 0; p < T; p++) {
        /* x's rows at position p, (batch, heads, head_dim) */
        for (int b = 0; b < 2; b++)
            memcpy(row + b * 2 * H, x + (b * T + p) * 2 * H, sizeof(float) * 2 * H);
        call dec = {kernel, 1, H, layout, 2, T - 1, (int32_t)p, 0, 0, s, NULL, 0};
        bora_status st = run(&dec, row, one, err, &nc);
        if (st != BORA_OK)
            fprintf(stderr, "decode: %s\n", err);
        CHECK(st == BORA_OK);
        for (int b = 0; b < 2; b++)
            if (memcmp(one + b * 2 * H, full + (b * T + p) * 2 * H, sizeof(float) * 2 * H)) {
                fprintf(stderr, "decode at %d (layout %d, %s) differs from the window's row\n", p,
                        layout, kernel ? "kernel" : "decomposed");
                test_failures++;
                return;
            }
    }
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: test_rope_op PLUGIN_DIR\n");
        return 2;
    }
    plugin_dir = argv[1];
    bora_rope_spec def = bora_rope_spec_default();
    def.rotary_dims = 6; /* of a head dim of 10 */
    bora_rope_spec yarn = def;
    yarn.kind = BORA_ROPE_YARN;
    yarn.factor = 4;
    yarn.original_max_position_embeddings = 4;

    for (int layout = BORA_ROPE_ROTATE_HALF; layout <= BORA_ROPE_INTERLEAVED; layout++)
        for (int kernel = 1; kernel >= 0; kernel--) {
            check_decode(kernel, layout, &def);
            check_decode(kernel, layout, &yarn);
        }

    /* the kernel's bits are the decomposition's */
    enum { T = 5, H = 10 };
    float x[4 * T * H], yk[4 * T * H], yd[4 * T * H];
    for (int i = 0; i < 4 * T * H; i++)
        x[i] = value(i);
    char err[1024];
    size_t nk, nd;
    for (int layout = BORA_ROPE_ROTATE_HALF; layout <= BORA_ROPE_INTERLEAVED; layout++) {
        call k = {1, T, H, layout, 3, 0, 0, 0, 0, &yarn, NULL, 0}, d = k;
        d.kernel = 0;
        CHECK(run(&k, x, yk, err, &nk) == BORA_OK && run(&d, x, yd, err, &nd) == BORA_OK);
        CHECK(!memcmp(yk, yd, sizeof yk));
        CHECK(nk == 2 && nd == 2); /* the cos and sin tables, once each */
    }

    /* two ropes over one spec share the tables */
    call twice = {1, T, H, BORA_ROPE_ROTATE_HALF, 0, 0, 0, 1, 0, &def, NULL, 0};
    CHECK(run(&twice, x, yk, err, &nk) == BORA_OK);
    CHECK(nk == 2);

    /* bad calls: the build fails naming the tensor and the fix */
    bora_rope_spec wide = def, no_theta = def;
    wide.rotary_dims = 12;
    no_theta.theta = 0;
    call bad = {1, T, H, BORA_ROPE_ROTATE_HALF, 0, 0, 0, 0, 0, &wide, NULL, 0};
    CHECK(run(&bad, x, yk, err, &nk) != BORA_OK);
    CHECK_CONTAINS(err, "rotary_dims 12 is more than 'head_dim' (10)");
    bad.spec = &no_theta;
    CHECK(run(&bad, x, yk, err, &nk) != BORA_OK);
    CHECK_CONTAINS(err, "rope_theta");
    bad.spec = &def;
    bad.head_dim_axis = "hd";
    CHECK(run(&bad, x, yk, err, &nk) != BORA_OK);
    CHECK_CONTAINS(err, "a head-dim axis 'hd'");
    bad.head_dim_axis = NULL;
    bad.spec = NULL;
    CHECK(run(&bad, x, yk, err, &nk) != BORA_OK);
    CHECK_CONTAINS(err, "bora_rope_spec_default()");
    bad.spec = &def;
    /* A plugin built against a later SDK passes a larger struct_size (members appended since):
     * taken. One smaller than ABI 1.9's is not a bora_rope_opts: refused. */
    bad.opts_size_delta = 16;
    CHECK(run(&bad, x, yk, err, &nk) == BORA_OK);
    bad.opts_size_delta = -8;
    CHECK(run(&bad, x, yk, err, &nk) != BORA_OK);
    CHECK_CONTAINS(err, "smaller than ABI 1.9's");
    bad.opts_size_delta = 0;
    bad.dtype = BORA_DTYPE_BF16;
    CHECK(run(&bad, x, yk, err, &nk) != BORA_OK);
    CHECK_CONTAINS(err, "rope takes f32 or f64");
    bad.dtype = 0;
    bad.kernel = 0; /* a runtime position over several positions needs the kernel */
    bad.runtime_max = 4;
    CHECK(run(&bad, x, yk, err, &nk) != BORA_OK);
    CHECK_CONTAINS(err, "needs backend 'cpu' to have the rope kernel");
    bad.kernel = 1; /* which has it */
    CHECK(run(&bad, x, yk, err, &nk) == BORA_OK);
    return test_summary("test_rope_op");
}
