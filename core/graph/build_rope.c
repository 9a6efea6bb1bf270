/* core/graph/build_rope.c — rotary position embeddings (bora_graph_api.rope): the cos/sin
 * tables computed once on the host in double (rope.c) and held as constant leaves, the op
 * BORA_OP_ROPE where the backend has its kernel, else its decomposition into slices, products,
 * a negation, sums and concatenations with the same bits. The gradient (autodiff.c) is the same
 * op with the sine negated: a rotation's transpose. */
#include "build.h"
#include "rope.h"

#include "../util/log.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

gval *g_const_leaf(g_graph *g, const char *label, const char *key, int dtype, int ndim,
                   const int64_t *dims, const char *const *names, void *data, size_t nbytes)
{
    for (size_t i = 0; i < g->n_consts; i++)
        if (!strcmp(g->consts[i].key, key)) {
            free(data);
            return g->consts[i].value;
        }
    g_const *consts = g_grow(g->consts, &g->cap_consts, g->n_consts, sizeof *consts);
    if (!consts) {
        free(data);
        g_fail(g, "out of memory");
        return NULL;
    }
    g->consts = consts;
    bora_axis axes[BORA_MAX_DIMS];
    for (int i = 0; i < ndim; i++)
        axes[i] = (bora_axis){names[i], dims[i]};
    gval *v = g_leaf(g, G_CONST, label, dtype, ndim, axes);
    if (!v) {
        free(data);
        return NULL;
    }
    v->storage = S_CONST;
    v->slot = (int)g->n_consts;
    g_const *c = &g->consts[g->n_consts++];
    memset(c, 0, sizeof *c);
    c->value = v;
    c->data = data;
    c->nbytes = nbytes;
    snprintf(c->key, sizeof c->key, "%s", key);
    return v;
}

/* The (positions, dims) table of one layout in double, from the compact (positions, dims/2). */
static void lay_out(const double *compact, int64_t positions, int64_t dims, int layout, double *out)
{
    int64_t half = dims / 2;
    for (int64_t p = 0; p < positions; p++)
        for (int64_t d = 0; d < dims; d++)
            out[p * dims + d] = compact[p * half + (layout == BORA_ROPE_INTERLEAVED ? d / 2
                                                    : d < half                      ? d
                                                                                    : d - half)];
}

/* The cos and sin tables (positions, dims) of x's dtype as constant leaves, axes named as x's
 * position and head-dim axes; the status is the graph's. */
static int rope_tables(g_graph *g, const bora_rope_spec *s, int layout, int64_t positions,
                       int dtype, const char *pos_name, const char *dim_name, gval **cos_t,
                       gval **sin_t)
{
    size_t n, nc;
    if (bora_rope_table_elems(s, positions, layout, &n) != BORA_OK ||
        bora_rope_table_elems(s, positions, BORA_ROPE_COMPACT, &nc) != BORA_OK) {
        g_fail(g, "rope: %s", bora_error_get());
        return -1;
    }
    int64_t dims[2] = {positions, s->rotary_dims};
    const char *names[2] = {pos_name, dim_name};
    size_t bytes;
    if (g_size_check(g, "rope table", NULL, dtype, 2, dims, names, &bytes))
        return -1;
    void *tab[2] = {malloc(bytes ? bytes : 1), malloc(bytes ? bytes : 1)};
    double *cd = NULL, *sd = NULL;
    if (dtype == BORA_DTYPE_F64) {
        cd = malloc(nc * sizeof *cd + 1), sd = malloc(nc * sizeof *sd + 1);
    }
    bora_status st = BORA_ERR_NOMEM;
    if (tab[0] && tab[1] && (dtype != BORA_DTYPE_F64 || (cd && sd))) {
        if (dtype == BORA_DTYPE_F32) {
            st = bora_rope_table_f32(s, 0, positions, (bora_rope_layout)layout, tab[0], tab[1]);
        } else {
            st = bora_rope_table(s, 0, positions, cd, sd);
            if (st == BORA_OK) {
                lay_out(cd, positions, s->rotary_dims, layout, tab[0]);
                lay_out(sd, positions, s->rotary_dims, layout, tab[1]);
            }
        }
    }
    free(cd);
    free(sd);
    if (st != BORA_OK) {
        free(tab[0]);
        free(tab[1]);
        g_fail(g, "rope: %s", st == BORA_ERR_NOMEM ? "out of memory" : bora_error_get());
        return -1;
    }
    /* equal specs, layouts, lengths, dtypes and axis names share one table (every layer's
     * rope); a key too long to hold whole (axis names past 64 characters) shares nothing */
    gval *t[2] = {NULL, NULL};
    for (int k = 0; k < 2; k++) {
        if (k == 1 && !t[0]) { /* the graph failed making the first */
            free(tab[1]);
            break;
        }
        char key[sizeof g->consts->key];
        int w =
            snprintf(key, sizeof key,
                     "rope %s %d %a %lld %a %lld %a %a %a %a %a %a %a %d %lld %d %lld %d "
                     "%.64s %.64s",
                     k ? "sin" : "cos", (int)s->kind, s->theta, (long long)s->rotary_dims,
                     s->factor, (long long)s->original_max_position_embeddings, s->low_freq_factor,
                     s->high_freq_factor, s->beta_fast, s->beta_slow, s->mscale, s->mscale_all_dim,
                     s->attention_factor, (int)s->truncate, (long long)s->seq_len, layout,
                     (long long)positions, dtype, pos_name, dim_name);
        if (w < 0 || (size_t)w >= sizeof key || strlen(pos_name) > 64 || strlen(dim_name) > 64)
            snprintf(key, sizeof key, "unshared %zu", g->n_consts);
        t[k] =
            g_const_leaf(g, k ? "rope.sin" : "rope.cos", key, dtype, 2, dims, names, tab[k], bytes);
    }
    *cos_t = t[0], *sin_t = t[1];
    return t[0] && t[1] ? 0 : -1;
}

/* rot(x) along the head dim: (-x2, x1) by halves (rotate-half), or (-x[2i+1], x[2i]) by pairs
 * (interleaved) — the dims x·sin multiplies. */
static gval *rotated(g_graph *g, gval *x, const char *dim, int64_t dims, int layout)
{
    const bora_graph_api *A = &g_api;
    if (layout != BORA_ROPE_INTERLEAVED) {
        gval *parts[2] = {
            A->unary(&g->pub, BORA_OP_NEG, A->slice(&g->pub, x, dim, dims / 2, dims / 2)),
            A->slice(&g->pub, x, dim, 0, dims / 2)};
        return parts[0] && parts[1] ? A->concat(&g->pub, dim, 2, parts) : NULL;
    }
    const char *pair = g_intern("rope.pair"), *two = g_intern("rope.two");
    bora_axis split[2] = {{pair, dims / 2}, {two, 2}};
    gval *xs = A->split(&g->pub, x, dim, 2, split);
    gval *parts[2] = {A->unary(&g->pub, BORA_OP_NEG, A->slice(&g->pub, xs, two, 1, 1)),
                      A->slice(&g->pub, xs, two, 0, 1)};
    gval *r = parts[0] && parts[1] ? A->concat(&g->pub, two, 2, parts) : NULL;
    const char *both[2] = {pair, two};
    return r ? A->merge(&g->pub, r, 2, both, dim) : NULL;
}

/* The op as primitives: x_r·cos + rot(x_r)·sin, then the untouched dims. A runtime position
 * picks its table row with a gather, which covers one position (decode); more need the
 * kernel. */
static gval *rope_decomposed(g_graph *g, gval *x, gval *cos_t, gval *sin_t, const char *pos,
                             const char *dim, const bora_opt_rope *o, gval *position)
{
    const bora_graph_api *A = &g_api;
    int64_t T = x->dims[o->position_axis], H = x->dims[o->dim_axis], D = o->rotary_dims;
    gval *c, *s;
    if (position) {
        if (T != 1) {
            char d[256];
            g_describe(x, d, sizeof d);
            g_fail(g,
                   "rope over %s: a runtime position over %lld positions needs backend '%s' "
                   "to have the rope kernel (its decomposition covers one position)",
                   d, (long long)T, g->store->backend_name);
            return NULL;
        }
        /* row offset + position: drop the first offset rows, gather; then a position axis of 1 */
        c = A->slice(&g->pub, cos_t, pos, o->offset, cos_t->dims[0] - o->offset);
        s = A->slice(&g->pub, sin_t, pos, o->offset, sin_t->dims[0] - o->offset);
        c = c ? A->embedding(&g->pub, c, position, pos) : NULL;
        s = s ? A->embedding(&g->pub, s, position, pos) : NULL;
    } else {
        c = A->slice(&g->pub, cos_t, pos, o->offset, T);
        s = A->slice(&g->pub, sin_t, pos, o->offset, T);
    }
    gval *xr = D < H ? A->slice(&g->pub, x, dim, 0, D) : x;
    gval *rot = xr ? rotated(g, xr, dim, D, o->layout) : NULL;
    gval *y =
        g_binary(g, BORA_OP_ADD, g_binary(g, BORA_OP_MUL, xr, c), g_binary(g, BORA_OP_MUL, rot, s));
    if (y && D < H) {
        gval *parts[2] = {g_align_to(g, y, xr), A->slice(&g->pub, x, dim, D, H - D)};
        y = parts[0] && parts[1] ? A->concat(&g->pub, dim, 2, parts) : NULL;
    }
    return y ? g_align_to(g, y, x) : NULL;
}

bora_tensor *api_rope(bora_graph *gp, bora_tensor *x, const bora_rope_opts *opts)
{
    g_graph *g = (g_graph *)gp;
    NEED(g, x, opts);
    char d[256];
    g_describe(x, d, sizeof d);
    /* The sizes of ABI 1.9, where both structs begin: a plugin built against a later SDK passes
     * larger ones (members appended since, read only where struct_size covers them); a smaller
     * one is not a bora_rope_opts. opts->spec is read only once opts is known to hold it. */
    const size_t opts_1_9 = offsetof(bora_rope_opts, position) + sizeof(bora_tensor *);
    const size_t spec_1_9 = offsetof(bora_rope_spec, seq_len) + sizeof(int64_t);
    if (opts->struct_size < opts_1_9) {
        g_fail(g,
               "rope over %s: bora_rope_opts.struct_size is %u, smaller than ABI 1.9's %zu "
               "(fill it with sizeof(bora_rope_opts))",
               d, (unsigned)opts->struct_size, opts_1_9);
        return NULL;
    }
    if (!opts->spec || opts->spec->struct_size < spec_1_9) {
        g_fail(g, "rope over %s: %s", d,
               !opts->spec ? "no spec (bora_rope_opts.spec); start from bora_rope_spec_default()"
                           : "bora_rope_spec.struct_size is smaller than ABI 1.9's (start from "
                             "bora_rope_spec_default())");
        return NULL;
    }
    if (x->dtype != BORA_DTYPE_F32 && x->dtype != BORA_DTYPE_F64) {
        g_fail(g, "rope over %s: dtype %d; rope takes f32 or f64 (cast first)", d, x->dtype);
        return NULL;
    }
    const char *pos = g_intern(opts->position_axis ? opts->position_axis : "position");
    const char *dim = g_intern(opts->head_dim_axis ? opts->head_dim_axis : "head_dim");
    int pa = g_axis_index(x, pos), da = g_axis_index(x, dim);
    if (pa < 0 || da < 0 || pa == da) {
        g_fail(g, "rope over %s: it needs a position axis '%s' and a head-dim axis '%s'", d, pos,
               dim);
        return NULL;
    }
    int layout = opts->layout ? opts->layout : BORA_ROPE_ROTATE_HALF;
    if (layout != BORA_ROPE_ROTATE_HALF && layout != BORA_ROPE_INTERLEAVED) {
        g_fail(g, "rope over %s: layout %d; it is BORA_ROPE_ROTATE_HALF or BORA_ROPE_INTERLEAVED",
               d, opts->layout);
        return NULL;
    }
    bora_rope_spec s = *opts->spec;
    s.struct_size = sizeof s;
    if (s.rotary_dims > x->dims[da]) {
        g_fail(g, "rope over %s: rotary_dims %lld is more than '%s' (%lld); lower it", d,
               (long long)s.rotary_dims, dim, (long long)x->dims[da]);
        return NULL;
    }
    gval *position = opts->position;
    if (position && (position->ndim != 0 || position->dtype != BORA_DTYPE_I32 ||
                     position->storage != S_INPUT || !position->extent_max)) {
        char dp[256];
        g_describe(position, dp, sizeof dp);
        g_fail(g, "rope over %s: position %s is not a runtime extent (declare it with extent)", d,
               dp);
        return NULL;
    }
    /* every row the graph can reach; positions past 2^53 the table refuses itself */
    int64_t reach = position ? position->extent_max : 0;
    if (opts->offset < 0 || opts->offset > ((int64_t)1 << 53)) {
        g_fail(g, "rope over %s: offset %lld is outside 0..2^53", d, (long long)opts->offset);
        return NULL;
    }
    int64_t positions = opts->offset + reach + x->dims[pa];
    /* dynamic NTK: HF grows the base with the sequence it is run on; one graph's table is
     * computed once, for the longest sequence it can address */
    if (s.kind == BORA_ROPE_DYNAMIC)
        s.seq_len = positions;
    if (bora_rope_check(&s) != BORA_OK) {
        g_fail(g, "rope over %s: %s", d, bora_error_get());
        return NULL;
    }
    gval *cos_t, *sin_t;
    if (rope_tables(g, &s, layout, positions, x->dtype, pos, dim, &cos_t, &sin_t))
        return NULL;
    bora_opt_rope o = {sizeof o, pa, da, layout, s.rotary_dims, opts->offset, 0, 0};
    gval *ins[4] = {x, cos_t, sin_t, position};
    int nin = position ? 4 : 3;
    int32_t types[5] = {x->dtype, x->dtype, x->dtype, BORA_DTYPE_I32, x->dtype};
    if (!position)
        types[3] = x->dtype;
    if (!g->store->elem_ops || g->mode == BORA_MODE_HESSIAN ||
        !g->store->ops->kernel(g->store->backend, BORA_OP_ROPE, types, (uint32_t)nin + 1))
        return rope_decomposed(g, x, cos_t, sin_t, pos, dim, &o, position);
    gval *y = g_op1(g, BORA_OP_ROPE, nin, ins, x->dtype, x->ndim, x->dims, x->names);
    if (y)
        y->node->opt.rope = o;
    return y;
}
