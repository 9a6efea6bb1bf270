/* core/graph/build.c — the graph builder behind bora_graph_api: leaves, views, elementwise ops
 * and reductions, and the table (build_ops.c holds the compound ops). Every op checks its
 * operands' names and sizes and either appends nodes or records one error that names the op,
 * the tensors and their axes. */
#include "build.h"

#include "../util/log.h"
#include "../util/str.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ---- names ------------------------------------------------------------------------------- */

/* Every name a graph uses, each stored once for the process's life: names compare by pointer.
 * An open-addressed hash table (at most half full), since each node's label is a new name: a
 * list searched from the start made building quadratic in the graph's size. */
static char **g_interned;
static size_t g_n_interned, g_cap_interned;

static size_t name_hash(const char *s)
{
    uint64_t h = 1469598103934665603u; /* FNV-1a */
    for (; *s; s++)
        h = (h ^ (unsigned char)*s) * 1099511628211u;
    return (size_t)h;
}

const char *g_intern(const char *s)
{
    if (!s)
        return NULL;
    if (2 * (g_n_interned + 1) > g_cap_interned) {
        size_t cap = g_cap_interned ? g_cap_interned * 2 : 1024;
        char **t = calloc(cap, sizeof *t);
        if (!t)
            return NULL;
        for (size_t i = 0; i < g_cap_interned; i++)
            if (g_interned[i])
                for (size_t j = name_hash(g_interned[i]) & (cap - 1);; j = (j + 1) & (cap - 1))
                    if (!t[j]) {
                        t[j] = g_interned[i];
                        break;
                    }
        free(g_interned);
        g_interned = t;
        g_cap_interned = cap;
    }
    size_t j = name_hash(s) & (g_cap_interned - 1);
    for (; g_interned[j]; j = (j + 1) & (g_cap_interned - 1))
        if (!strcmp(g_interned[j], s))
            return g_interned[j];
    char *copy = bora_strdup(s);
    if (copy) {
        g_interned[j] = copy;
        g_n_interned++;
    }
    return copy;
}

/* ---- errors ------------------------------------------------------------------------------ */

bora_status g_fail(g_graph *g, const char *fmt, ...)
{
    if (g->status == BORA_OK) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(g->error, sizeof g->error, fmt, ap);
        va_end(ap);
        g->status = BORA_ERR_INVALID;
    }
    bora_error_set(g->status, "%s", g->error);
    return g->status;
}

void g_describe(const gval *v, char *buf, size_t cap)
{
    size_t w = (size_t)snprintf(buf, cap, "'%s' (", v->label ? v->label : "?");
    for (int i = 0; i < v->ndim && w < cap; i++)
        w += (size_t)snprintf(buf + w, cap - w, "%s%s=%lld", i ? ", " : "", v->names[i],
                              (long long)v->dims[i]);
    if (w < cap)
        snprintf(buf + w, cap - w, ")");
}

/* Sizes come from models, and models from the user's keys: every product is checked here, at the
 * tensor, so that an impossible size is an error naming the tensor (and, in the trainer, the
 * keys) rather than a wrapped count that allocates too little or crashes. */
int g_size_check(g_graph *g, const char *what, const char *name, int dtype, int ndim,
                 const int64_t *dims, const char *const *names, size_t *bytes)
{
    size_t elem = bora_dtype_size(dtype);
    int64_t n = elem ? (int64_t)elem : 8;
    int over = 0;
    for (int i = 0; i < ndim; i++)
        over |= dims[i] < 0 || __builtin_mul_overflow(n, dims[i], &n) || n > G_MAX_BYTES;
    if (!over) {
        if (bytes)
            *bytes = (size_t)n;
        return 0;
    }
    char d[512];
    size_t w = 0;
    for (int i = 0; i < ndim && w < sizeof d; i++)
        w += (size_t)snprintf(d + w, sizeof d - w, "%s%s=%lld", i ? ", " : "",
                              names && names[i] ? names[i] : "?", (long long)dims[i]);
    if (!g->status) {
        g->too_large = 1;
        g->too_large_ndim = ndim;
        g->too_large_elem = elem ? (int)elem : 8;
        for (int i = 0; i < ndim; i++)
            g->too_large_dims[i] = dims[i];
    }
    g_fail(g, "%s%s%s%s (%s) would take more than 2^62 bytes", what, name ? " '" : "",
           name ? name : "", name ? "'" : "", ndim ? d : "");
    return -1;
}

/* Whether a leaf's axes (sizes checked >= 1) fit, as g_size_check. */
int g_axes_size(g_graph *g, const char *what, const char *name, int dtype, int ndim,
                const bora_axis *axes, size_t *bytes)
{
    int64_t dims[BORA_MAX_DIMS];
    const char *names[BORA_MAX_DIMS];
    for (int i = 0; i < ndim; i++)
        dims[i] = axes[i].size, names[i] = axes[i].name;
    return g_size_check(g, what, name, dtype, ndim, dims, names, bytes);
}

/* ---- values and nodes -------------------------------------------------------------------- */

int64_t g_numel(const gval *v)
{
    int64_t n = 1;
    for (int i = 0; i < v->ndim; i++)
        n *= v->dims[i];
    return n;
}

int g_axis_index(const gval *v, const char *name)
{
    for (int i = 0; i < v->ndim; i++)
        if (v->names[i] == name || !strcmp(v->names[i], name))
            return i;
    return -1;
}

void *g_grow(void *arr, size_t *cap, size_t n, size_t elem)
{
    if (n < *cap)
        return arr;
    size_t ncap = *cap ? *cap * 2 : 64;
    void *p = realloc(arr, ncap * elem);
    if (p)
        *cap = ncap;
    return p;
}

gval *g_new_value(g_graph *g, int dtype, int ndim, const int64_t *dims, const char *const *names)
{
    if (g_size_check(g, "a tensor", NULL, dtype, ndim, dims, names, NULL))
        return NULL;
    gval **vals = g_grow(g->vals, &g->cap_vals, g->n_vals, sizeof *vals);
    gval *v = calloc(1, sizeof *v);
    if (!vals || !v) {
        free(v);
        g_fail(g, "out of memory");
        return NULL;
    }
    g->vals = vals;
    v->id = (int)g->n_vals;
    v->dtype = dtype;
    v->ndim = ndim;
    int64_t stride = 1;
    for (int i = ndim - 1; i >= 0; i--) {
        v->dims[i] = dims[i];
        v->names[i] = g_intern(names[i]);
        v->strides[i] = stride;
        stride *= dims[i];
    }
    v->base = v;
    v->slot = -1;
    g->vals[g->n_vals++] = v;
    return v;
}

gnode *g_new_node(g_graph *g, int op, int nin, gval *const *in)
{
    gnode **nodes = g_grow(g->nodes, &g->cap_nodes, g->n_nodes, sizeof *nodes);
    gnode *n = calloc(1, sizeof *n);
    if (!nodes || !n) {
        free(n);
        g_fail(g, "out of memory");
        return NULL;
    }
    g->nodes = nodes;
    n->id = (int)g->n_nodes;
    n->op = op;
    n->nin = nin;
    for (int i = 0; i < nin; i++)
        n->in[i] = in[i];
    g->nodes[g->n_nodes++] = n;
    return n;
}

void g_add_out(gnode *n, gval *v)
{
    n->out[n->nout++] = v;
    v->node = n;
    for (int i = 0; i < n->nin; i++)
        if (n->in[i] && n->in[i]->requires_grad)
            v->requires_grad = 1;
}

int g_is_float(int dtype)
{
    return dtype == BORA_DTYPE_F32 || dtype == BORA_DTYPE_F64 || dtype == BORA_DTYPE_BF16 ||
           dtype == BORA_DTYPE_F16;
}

/* A node of op over inputs producing one fresh value of the given shape. */
gval *g_op1(g_graph *g, int op, int nin, gval *const *in, int dtype, int ndim, const int64_t *dims,
            const char *const *names)
{
    if (g_size_check(g, g_op_name(op), NULL, dtype, ndim, dims, names, NULL))
        return NULL;
    gnode *n = g_new_node(g, op, nin, in);
    gval *v = n ? g_new_value(g, dtype, ndim, dims, names) : NULL;
    if (!v)
        return NULL;
    g_add_out(n, v);
    v->requires_grad = v->requires_grad && g_is_float(dtype);
    char label[64];
    snprintf(label, sizeof label, "%s#%d", g_op_name(op), v->id);
    v->label = g_intern(label);
    return v;
}

/* A view of src: same storage, shape set by the caller. */
gval *g_view(g_graph *g, gval *src, int kind)
{
    gnode *n = g_new_node(g, G_VIEW, 1, &src);
    gval **vals = n ? g_grow(g->vals, &g->cap_vals, g->n_vals, sizeof *vals) : NULL;
    gval *v = vals ? calloc(1, sizeof *v) : NULL;
    if (!v) {
        g_fail(g, "out of memory");
        return NULL;
    }
    g->vals = vals;
    *v = *src;
    v->id = (int)g->n_vals;
    v->grad = NULL;
    v->lowp = NULL;
    v->mp_cast = 0;
    v->mp_src = NULL;
    v->node = NULL;
    v->slot = -1;
    g->vals[g->n_vals++] = v;
    n->view = kind;
    g_add_out(n, v);
    v->requires_grad = src->requires_grad;
    return v;
}

gval *g_view_like(g_graph *g, gval *src, int kind, const gval *like)
{
    gval *v = g_view(g, src, kind);
    if (!v)
        return NULL;
    v->ndim = like->ndim;
    v->offset = like->offset;
    memcpy(v->dims, like->dims, sizeof v->dims);
    memcpy(v->strides, like->strides, sizeof v->strides);
    memcpy(v->names, like->names, sizeof v->names);
    v->base = src->base;
    return v;
}

/* ---- leaves ------------------------------------------------------------------------------ */

int g_check_axes(g_graph *g, const char *what, const char *name, int32_t ndim,
                 const bora_axis *axes)
{
    if (ndim < 0 || ndim > BORA_MAX_DIMS) {
        g_fail(g, "%s '%s': %d axes; at most %d", what, name, ndim, BORA_MAX_DIMS);
        return -1;
    }
    for (int i = 0; i < ndim; i++) {
        if (!axes[i].name || !*axes[i].name || axes[i].size < 1) {
            g_fail(g, "%s '%s': axis %d needs a name and a size >= 1", what, name, i);
            return -1;
        }
        for (int j = 0; j < i; j++)
            if (!strcmp(axes[i].name, axes[j].name)) {
                g_fail(g, "%s '%s': axis name '%s' repeats; rename one (e.g. key_position)", what,
                       name, axes[i].name);
                return -1;
            }
    }
    return 0;
}

gval *g_leaf(g_graph *g, int kind, const char *name, int32_t dtype, int32_t ndim,
             const bora_axis *axes)
{
    int64_t dims[BORA_MAX_DIMS];
    const char *names[BORA_MAX_DIMS];
    for (int i = 0; i < ndim; i++)
        dims[i] = axes[i].size, names[i] = axes[i].name;
    gnode *n = g_new_node(g, kind, 0, NULL);
    gval *v = n ? g_new_value(g, dtype, ndim, dims, names) : NULL;
    if (!v)
        return NULL;
    g_add_out(n, v);
    v->label = g_intern(name);
    return v;
}

static bora_tensor *api_param(bora_graph *gp, const char *name, int32_t dtype, int32_t ndim,
                              const bora_axis *axes, bora_init init, uint32_t flags)
{
    g_graph *g = (g_graph *)gp;
    if (g->status)
        return NULL;
    if (!name || !*name || g_check_axes(g, "parameter", name, ndim, axes))
        return name ? NULL : (g_fail(g, "a parameter needs a name"), NULL);
    if (dtype != BORA_DTYPE_F32 && dtype != BORA_DTYPE_F64) {
        g_fail(g, "parameter '%s': dtype %d; parameters are f32 or f64", name, dtype);
        return NULL;
    }
    size_t nbytes = 0;
    if (g_axes_size(g, "parameter", name, dtype, ndim, axes, &nbytes))
        return NULL;
    if (init.kind == BORA_INIT_SINUSOIDS && (ndim != 2 || axes[1].size % 2 || axes[1].size < 4 ||
                                             !(init.value >= 0 && isfinite(init.value)))) {
        g_fail(g,
               "parameter '%s': sinusoids (BORA_INIT_SINUSOIDS) fill a (length, channels) table "
               "with an even number of channels, at least 4, and a largest timescale of 0 "
               "(10000) or more",
               name);
        return NULL;
    }
    g_store *s = g->store;
    long at = g_store_find(s, name);
    if (at >= 0) {
        g_slot *p = &s->slots[at];
        int same = p->dtype == dtype && p->ndim == ndim;
        for (int i = 0; same && i < ndim; i++)
            same = p->dims[i] == axes[i].size && !strcmp(p->names[i], axes[i].name);
        if (!same) {
            g_fail(g, "parameter '%s' is declared again with another shape or dtype", name);
            return NULL;
        }
        if (p->declared_in == g->serial) {
            g_fail(g, "parameter '%s' is declared twice in one graph", name);
            return NULL;
        }
    } else {
        if (s->params) {
            g_fail(g, "parameter '%s' is new after the store was allocated", name);
            return NULL;
        }
        if (s->param_bytes + ((nbytes + 63) & ~(size_t)63) > (size_t)G_MAX_BYTES) {
            g_fail(g, "parameter '%s': the parameters would take more than 2^62 bytes", name);
            g->too_large = 1;
            g->too_large_elem = 1;
            g->too_large_ndim = ndim;
            for (int i = 0; i < ndim; i++)
                g->too_large_dims[i] = axes[i].size;
            return NULL;
        }
        g_slot *slots = g_grow(s->slots, &s->cap_slots, s->n_slots, sizeof *slots);
        if (!slots) {
            g_fail(g, "out of memory");
            return NULL;
        }
        s->slots = slots;
        g_slot *p = &s->slots[s->n_slots];
        memset(p, 0, sizeof *p);
        p->name = bora_strdup(name);
        p->dtype = dtype;
        p->ndim = ndim;
        for (int i = 0; i < ndim; i++) {
            p->dims[i] = axes[i].size;
            p->names[i] = g_intern(axes[i].name);
        }
        p->init = init;
        p->flags = flags;
        p->offset = s->param_bytes;
        p->nbytes = nbytes;
        s->param_bytes += (p->nbytes + 63) & ~(size_t)63; /* each parameter 64-byte aligned */
        at = (long)s->n_slots++;
        if (g_store_index(s, at)) {
            g_fail(g, "out of memory");
            return NULL;
        }
    }
    gval *v = g_leaf(g, G_PARAM, name, dtype, ndim, axes);
    if (v) {
        v->storage = S_PARAM;
        v->slot = (int)at;
        /* a frozen parameter is a constant to autodiff: it gets no gradient */
        v->requires_grad = !(s->slots[at].flags & BORA_PARAM_FROZEN);
        s->slots[at].declared_in = g->serial;
    }
    return v;
}

bora_tensor *api_input(bora_graph *gp, const char *name, int32_t dtype, int32_t ndim,
                       const bora_axis *axes)
{
    g_graph *g = (g_graph *)gp;
    if (g->status)
        return NULL;
    if (!name || !*name) {
        g_fail(g, "an input needs a name");
        return NULL;
    }
    if (g_check_axes(g, "input", name, ndim, axes))
        return NULL;
    if (!bora_dtype_size(dtype)) {
        g_fail(g, "input '%s': unknown dtype %d", name, dtype);
        return NULL;
    }
    if (g_axes_size(g, "input", name, dtype, ndim, axes, NULL))
        return NULL;
    for (size_t i = 0; i < g->n_inputs; i++)
        if (!strcmp(g->inputs[i].value->label, name)) {
            g_fail(g, "input '%s' is declared twice", name);
            return NULL;
        }
    g_input *inputs = g_grow(g->inputs, &g->cap_inputs, g->n_inputs, sizeof *inputs);
    if (!inputs) {
        g_fail(g, "out of memory");
        return NULL;
    }
    g->inputs = inputs;
    gval *v = g_leaf(g, G_INPUT, name, dtype, ndim, axes);
    if (!v)
        return NULL;
    v->storage = S_INPUT;
    v->slot = (int)g->n_inputs;
    g->inputs[g->n_inputs++] =
        (g_input){v, NULL, NULL, (size_t)g_numel(v) * bora_dtype_size(dtype)};
    return v;
}

static bora_tensor *api_name(bora_graph *gp, bora_tensor *t, const char *name)
{
    (void)gp;
    if (t && name)
        t->label = g_intern(name);
    return t;
}

/* ---- views ------------------------------------------------------------------------------- */

static bora_tensor *api_slice(bora_graph *gp, bora_tensor *t, const char *axis, int64_t start,
                              int64_t length)
{
    g_graph *g = (g_graph *)gp;
    NEED(g, t, axis);
    int i = g_axis_index(t, axis);
    char d[256];
    if (i < 0 || start < 0 || length < 1 || start + length > t->dims[i]) {
        g_describe(t, d, sizeof d);
        g_fail(g, "slice: %s has no range %lld..%lld along '%s'", d, (long long)start,
               (long long)(start + length), axis);
        return NULL;
    }
    gval *v = g_view(g, t, V_SLICE);
    if (!v)
        return NULL;
    v->offset += start * t->strides[i];
    v->dims[i] = length;
    v->node->vname[0] = t->names[i];
    v->node->vstart = start;
    return v;
}

gval *g_permute(g_graph *g, gval *t, int n, const char *const *order)
{
    char d[256];
    if (n != t->ndim) {
        g_describe(t, d, sizeof d);
        g_fail(g, "permute: %s has %d axes but %d were given", d, t->ndim, n);
        return NULL;
    }
    int idx[BORA_MAX_DIMS];
    for (int i = 0; i < n; i++) {
        idx[i] = g_axis_index(t, order[i]);
        for (int j = 0; j < i && idx[i] >= 0; j++)
            if (idx[j] == idx[i])
                idx[i] = -1;
        if (idx[i] < 0) {
            g_describe(t, d, sizeof d);
            g_fail(g, "permute: %s has no axis '%s' (or it is named twice)", d, order[i]);
            return NULL;
        }
    }
    int identity = 1;
    for (int i = 0; i < n; i++)
        identity &= idx[i] == i;
    if (identity)
        return t;
    gval *v = g_view(g, t, V_PERMUTE);
    if (!v)
        return NULL;
    for (int i = 0; i < n; i++) {
        v->dims[i] = t->dims[idx[i]];
        v->strides[i] = t->strides[idx[i]];
        v->names[i] = t->names[idx[i]];
        v->node->vname[i] = t->names[i]; /* the source's order, for the inverse */
    }
    v->node->vn = n;
    return v;
}

static bora_tensor *api_permute(bora_graph *gp, bora_tensor *t, int32_t n, const char *const *order)
{
    g_graph *g = (g_graph *)gp;
    NEED(g, t, order);
    return g_permute(g, t, n, order);
}

bora_tensor *api_rename(bora_graph *gp, bora_tensor *t, const char *from, const char *to)
{
    g_graph *g = (g_graph *)gp;
    NEED(g, t, from, to);
    int i = g_axis_index(t, from);
    char d[256];
    if (i < 0 || (g_axis_index(t, to) >= 0 && strcmp(from, to))) {
        g_describe(t, d, sizeof d);
        g_fail(g, i < 0 ? "rename: %s has no axis '%s'" : "rename: %s already has an axis '%s'", d,
               i < 0 ? from : to);
        return NULL;
    }
    gval *v = g_view(g, t, V_RENAME);
    if (!v)
        return NULL;
    v->names[i] = g_intern(to);
    v->node->vname[0] = t->names[i];
    v->node->vname[1] = v->names[i];
    return v;
}

bora_tensor *api_split(bora_graph *gp, bora_tensor *t, const char *axis, int32_t n,
                       const bora_axis *parts)
{
    g_graph *g = (g_graph *)gp;
    NEED(g, t, axis);
    int i = g_axis_index(t, axis);
    char d[256];
    int64_t prod = 1;
    int over = 0;
    for (int k = 0; k < n && parts; k++)
        over |= parts[k].size < 1 || __builtin_mul_overflow(prod, parts[k].size, &prod);
    if (i < 0 || n < 0 || t->ndim - 1 + n > BORA_MAX_DIMS || over || prod != t->dims[i] ||
        (n == 0 && t->dims[i] != 1)) {
        g_describe(t, d, sizeof d);
        g_fail(g, "split: %s cannot split '%s' into %d axes of product %lld", d, axis, n,
               (long long)prod);
        return NULL;
    }
    for (int k = 0; k < n; k++) {
        int clash = g_axis_index(t, parts[k].name);
        if ((clash >= 0 && clash != i) || parts[k].size < 1) {
            g_describe(t, d, sizeof d);
            g_fail(g, "split: %s already has an axis '%s'", d, parts[k].name);
            return NULL;
        }
    }
    gval *v = g_view(g, t, V_SPLIT);
    if (!v)
        return NULL;
    v->ndim = t->ndim - 1 + n;
    for (int k = 0; k < t->ndim - 1 - i; k++) { /* the axes after i move right */
        v->dims[i + n + k] = t->dims[i + 1 + k];
        v->strides[i + n + k] = t->strides[i + 1 + k];
        v->names[i + n + k] = t->names[i + 1 + k];
    }
    int64_t stride = t->strides[i];
    for (int k = n - 1; k >= 0; k--) {
        v->dims[i + k] = parts[k].size;
        v->strides[i + k] = stride;
        v->names[i + k] = g_intern(parts[k].name);
        stride *= parts[k].size;
        v->node->vname[k] = v->names[i + k];
    }
    v->node->vn = n;
    v->node->vparts[0] = (bora_axis){t->names[i], t->dims[i]};
    return v;
}

static gval *contiguous(g_graph *g, gval *x);

bora_tensor *api_merge(bora_graph *gp, bora_tensor *t, int32_t n, const char *const *axes,
                       const char *into)
{
    g_graph *g = (g_graph *)gp;
    NEED(g, t, axes, into);
    char d[256];
    int first = n > 0 ? g_axis_index(t, axes[0]) : -1;
    int ok = first >= 0 && first + n <= t->ndim;
    for (int k = 1; ok && k < n; k++)
        ok = g_axis_index(t, axes[k]) == first + k;
    int clash = g_axis_index(t, into);
    if (!ok || (clash >= 0 && (clash < first || clash >= first + n))) {
        g_describe(t, d, sizeof d);
        g_fail(g, "merge: %s needs %d adjacent axes in the order given, and a new name", d, n);
        return NULL;
    }
    /* Merging needs each axis to step evenly into the next (size-1 axes always do). */
    int mergeable = 1;
    for (int k = first; k < first + n - 1; k++)
        if (t->dims[k] != 1 && t->dims[k + 1] != 1 &&
            t->strides[k] != t->strides[k + 1] * t->dims[k + 1])
            mergeable = 0;
    if (!mergeable)
        t = contiguous(g, t);
    if (!t)
        return NULL;
    gval *v = g_view(g, t, V_MERGE);
    if (!v)
        return NULL;
    int64_t size = 1, stride = 1;
    for (int k = first; k < first + n; k++) {
        size *= t->dims[k];
        v->node->vparts[k - first] = (bora_axis){t->names[k], t->dims[k]};
    }
    for (int k = first + n - 1; k >= first; k--)
        if (t->dims[k] != 1) {
            stride = t->strides[k];
            break;
        }
    v->node->vn = n;
    v->dims[first] = size;
    v->strides[first] = stride;
    v->names[first] = g_intern(into);
    for (int k = first + n; k < t->ndim; k++) {
        v->dims[k - n + 1] = t->dims[k];
        v->strides[k - n + 1] = t->strides[k];
        v->names[k - n + 1] = t->names[k];
    }
    v->ndim = t->ndim - n + 1;
    v->node->vname[0] = v->names[first];
    return v;
}

bora_tensor *api_broadcast(bora_graph *gp, bora_tensor *t, bora_axis axis)
{
    g_graph *g = (g_graph *)gp;
    NEED(g, t, axis.name);
    char d[256];
    if (t->ndim >= BORA_MAX_DIMS || g_axis_index(t, axis.name) >= 0 || axis.size < 1) {
        g_describe(t, d, sizeof d);
        g_fail(g, "broadcast: cannot add axis '%s' to %s", axis.name, d);
        return NULL;
    }
    int64_t dims[BORA_MAX_DIMS + 1] = {axis.size};
    const char *names[BORA_MAX_DIMS + 1] = {axis.name};
    for (int k = 0; k < t->ndim; k++)
        dims[k + 1] = t->dims[k], names[k + 1] = t->names[k];
    if (g_size_check(g, "broadcast", NULL, t->dtype, t->ndim + 1, dims, names, NULL))
        return NULL;
    gval *v = g_view(g, t, V_BROADCAST);
    if (!v)
        return NULL;
    for (int k = t->ndim; k > 0; k--) {
        v->dims[k] = t->dims[k - 1];
        v->strides[k] = t->strides[k - 1];
        v->names[k] = t->names[k - 1];
    }
    v->dims[0] = axis.size;
    v->strides[0] = 0;
    v->names[0] = g_intern(axis.name);
    v->ndim = t->ndim + 1;
    v->node->vname[0] = v->names[0];
    return v;
}

/* ---- elementwise ------------------------------------------------------------------------- */

/* x seen with the axes of like (x's names are a subset of like's): broadcast views for the
 * missing axes, then a permute into like's order. */
gval *g_align_to(g_graph *g, gval *x, const gval *like)
{
    for (int i = like->ndim - 1; i >= 0 && x; i--)
        if (g_axis_index(x, like->names[i]) < 0)
            x = api_broadcast(&g->pub, x, (bora_axis){like->names[i], like->dims[i]});
    return x ? g_permute(g, x, like->ndim, like->names) : NULL;
}

static int subset(const gval *a, const gval *b)
{
    for (int i = 0; i < a->ndim; i++) {
        int j = g_axis_index(b, a->names[i]);
        if (j < 0)
            return 0;
    }
    return 1;
}

gval *g_binary(g_graph *g, int op, gval *a, gval *b)
{
    char da[256], db[256];
    const char *opname = g_op_name(op);
    if (a->dtype != b->dtype) {
        g_describe(a, da, sizeof da);
        g_describe(b, db, sizeof db);
        g_fail(g, "%s: %s and %s have different dtypes; cast one", opname, da, db);
        return NULL;
    }
    for (int i = 0; i < a->ndim; i++) {
        int j = g_axis_index(b, a->names[i]);
        if (j >= 0 && b->dims[j] != a->dims[i]) {
            g_describe(a, da, sizeof da);
            g_describe(b, db, sizeof db);
            g_fail(g, "%s: axis '%s' is %lld in %s but %lld in %s", opname, a->names[i],
                   (long long)a->dims[i], da, (long long)b->dims[j], db);
            return NULL;
        }
    }
    /* One operand's axes must hold the other's. And a trailing size-1 axis with no partner is
     * the shape of the classic positional mistake ((batch, 1) - (batch), which NumPy turns into
     * (batch, batch)), so it is refused rather than broadcast; a size-1 axis elsewhere (a batch
     * of one) broadcasts like any other. */
    const gval *big = subset(b, a) ? a : subset(a, b) ? b : NULL;
    const gval *small = big == a ? b : a;
    if (!big) {
        g_describe(a, da, sizeof da);
        g_describe(b, db, sizeof db);
        g_fail(g, "%s: %s and %s each have axes the other lacks; broadcast one explicitly", opname,
               da, db);
        return NULL;
    }
    int last = big->ndim - 1;
    if (last >= 0 && big->dims[last] == 1 && g_axis_index(small, big->names[last]) < 0 &&
        small->ndim > 0) {
        g_describe(a, da, sizeof da);
        g_describe(b, db, sizeof db);
        g_fail(g,
               "%s: %s has a trailing size-1 axis '%s' that %s lacks; it would broadcast "
               "silently. Remove it (slice or merge) or broadcast explicitly",
               opname, big == a ? da : db, big->names[last], big == a ? db : da);
        return NULL;
    }
    gval *ins[2] = {g_align_to(g, a, big), g_align_to(g, b, big)};
    if (!ins[0] || !ins[1])
        return NULL;
    return g_op1(g, op, 2, ins, big->dtype, big->ndim, big->dims, big->names);
}

bora_tensor *api_binary(bora_graph *gp, int32_t op, bora_tensor *a, bora_tensor *b)
{
    g_graph *g = (g_graph *)gp;
    NEED(g, a, b);
    if ((op < BORA_OP_ADD || op > BORA_OP_DIV) &&
        (op < BORA_OP_MINIMUM || op > BORA_OP_NOT_EQUAL)) {
        g_fail(g,
               "binary: op %d is not add, sub, mul, div, minimum, maximum, less, less_equal, "
               "equal or not_equal",
               op);
        return NULL;
    }
    if (!g_is_float(a->dtype)) {
        char d[256];
        g_describe(a, d, sizeof d);
        g_fail(g, "%s: %s is not a floating-point tensor", g_op_name(op), d);
        return NULL;
    }
    gval *v = g_binary(g, op, a, b);
    if (v && op >= BORA_OP_LESS) /* a mask: nothing flows back through a comparison */
        v->requires_grad = 0;
    return v;
}

bora_tensor *api_unary(bora_graph *gp, int32_t op, bora_tensor *x)
{
    g_graph *g = (g_graph *)gp;
    NEED(g, x);
    if ((op < BORA_OP_NEG || op > BORA_OP_GELU_EXACT) && (op < BORA_OP_SIN || op > BORA_OP_SIGN)) {
        g_fail(g, "unary: op %d is not a unary op", op);
        return NULL;
    }
    if (!g_is_float(x->dtype)) {
        char d[256];
        g_describe(x, d, sizeof d);
        g_fail(g, "%s: %s is not a floating-point tensor", g_op_name(op), d);
        return NULL;
    }
    return g_op1(g, op, 1, &x, x->dtype, x->ndim, x->dims, x->names);
}

static bora_tensor *api_scale(bora_graph *gp, bora_tensor *x, double factor)
{
    g_graph *g = (g_graph *)gp;
    NEED(g, x);
    gval *v = g_op1(g, BORA_OP_SCALE, 1, &x, x->dtype, x->ndim, x->dims, x->names);
    if (v)
        v->node->opt.scalar = (bora_opt_scalar){sizeof(bora_opt_scalar), 0, factor};
    return v;
}

gval *g_fill(g_graph *g, const gval *like, double value)
{
    gval *v = g_op1(g, BORA_OP_FILL, 0, NULL, like->dtype, like->ndim, like->dims, like->names);
    if (v)
        v->node->opt.scalar = (bora_opt_scalar){sizeof(bora_opt_scalar), 0, value};
    return v;
}

gval *g_copy_as(g_graph *g, gval *x, int dtype)
{
    return g_op1(g, BORA_OP_COPY, 1, &x, dtype, x->ndim, x->dims, x->names);
}

gval *g_contiguous(g_graph *g, gval *x)
{
    return g_copy_as(g, x, x->dtype);
}
static gval *contiguous(g_graph *g, gval *x)
{
    return g_contiguous(g, x);
}

static bora_tensor *api_contiguous(bora_graph *gp, bora_tensor *x)
{
    g_graph *g = (g_graph *)gp;
    NEED(g, x);
    return contiguous(g, x);
}

static bora_tensor *api_cast(bora_graph *gp, bora_tensor *x, int32_t dtype)
{
    g_graph *g = (g_graph *)gp;
    NEED(g, x);
    if (!bora_dtype_size(dtype)) {
        g_fail(g, "cast: unknown dtype %d", dtype);
        return NULL;
    }
    return x->dtype == dtype ? x : g_copy_as(g, x, dtype);
}

/* ---- reductions -------------------------------------------------------------------------- */

/* x with the named axes moved last (in the order given), then reduced by op. */
gval *g_reduce_last(g_graph *g, int op, gval *x, int n, const char *const *axes)
{
    char d[256];
    const char *order[BORA_MAX_DIMS];
    int k = 0;
    for (int i = 0; i < n; i++) {
        int j = g_axis_index(x, axes[i]);
        for (int p = 0; p < i && j >= 0; p++)
            if (!strcmp(axes[p], axes[i]))
                j = -1;
        if (j < 0) {
            g_describe(x, d, sizeof d);
            g_fail(g, "%s: %s has no axis '%s' (or it is named twice)", g_op_name(op), d, axes[i]);
            return NULL;
        }
    }
    for (int i = 0; i < x->ndim; i++) {
        int reduced = 0;
        for (int j = 0; j < n; j++)
            reduced |= !strcmp(axes[j], x->names[i]);
        if (!reduced)
            order[k++] = x->names[i];
    }
    int64_t dims[BORA_MAX_DIMS];
    for (int i = 0; i < k; i++)
        dims[i] = x->dims[g_axis_index(x, order[i])];
    for (int i = 0; i < n; i++)
        order[k + i] = axes[i];
    gval *p = g_permute(g, x, x->ndim, order);
    gval *v = p ? g_op1(g, op, 1, &p, x->dtype, k, dims, order) : NULL;
    if (v)
        v->node->opt.reduce = (bora_opt_reduce){sizeof(bora_opt_reduce), n};
    return v;
}

static bora_tensor *api_reduce(bora_graph *gp, int32_t op, bora_tensor *x, int32_t n,
                               const char *const *axes)
{
    g_graph *g = (g_graph *)gp;
    NEED(g, x, axes);
    if (op != BORA_OP_SUM && op != BORA_OP_MAX && op != 0) {
        g_fail(g, "reduce: op %d is not sum, max or mean (0)", op);
        return NULL;
    }
    gval *v = g_reduce_last(g, op ? op : BORA_OP_SUM, x, n, axes);
    if (!v || op)
        return v;
    int64_t count = 1;
    for (int i = 0; i < n; i++)
        count *= x->dims[g_axis_index(x, axes[i])];
    return api_scale(gp, v, 1.0 / (double)count);
}

/* The gradient of a reduction: sum x (a broadcast-shaped value) down to like's axes. */
gval *g_reduce_sum_to(g_graph *g, gval *x, const gval *like)
{
    const char *extra[BORA_MAX_DIMS], *ones[BORA_MAX_DIMS];
    int n = 0, n1 = 0;
    for (int i = 0; i < x->ndim; i++)
        if (g_axis_index(like, x->names[i]) < 0) {
            if (x->dims[i] == 1)
                ones[n1++] = x->names[i];
            else
                extra[n++] = x->names[i];
        }
    /* a size-1 axis is dropped by a view: nothing to add up */
    for (int i = 0; i < n1 && x; i++)
        x = api_split(&g->pub, x, ones[i], 0, NULL);
    gval *r = n && x ? g_reduce_last(g, BORA_OP_SUM, x, n, extra) : x;
    return r ? g_permute(g, r, like->ndim, like->names) : NULL;
}

gval *g_pad(g_graph *g, gval *x, const gval *like, int axis, int64_t start)
{
    gval *v = g_op1(g, BORA_OP_PAD, 1, &x, like->dtype, like->ndim, like->dims, like->names);
    if (v)
        v->node->opt.pad = (bora_opt_pad){sizeof(bora_opt_pad), axis, start};
    return v;
}

/* ---- introspection and the table --------------------------------------------------------- */

/* A Hessian graph is built from the model's train graph: the model sees BORA_MODE_TRAIN
 * (sdk/bora/model.h); the host reads g->mode itself. */
static int32_t api_mode(bora_graph *gp)
{
    int32_t mode = ((g_graph *)gp)->mode;
    return mode == BORA_MODE_HESSIAN ? BORA_MODE_TRAIN : mode;
}
static int64_t api_batch(bora_graph *gp)
{
    return ((g_graph *)gp)->batch;
}
static bora_status api_status(bora_graph *gp)
{
    g_graph *g = (g_graph *)gp;
    if (g->status)
        bora_error_set(g->status, "%s", g->error);
    return g->status;
}
static int32_t api_ndim(const bora_tensor *t)
{
    return t ? t->ndim : -1;
}
static bora_axis api_axis(const bora_tensor *t, int32_t i)
{
    if (!t || i < 0 || i >= t->ndim)
        return (bora_axis){NULL, 0};
    return (bora_axis){t->names[i], t->dims[i]};
}
static int32_t api_dtype(const bora_tensor *t)
{
    return t ? t->dtype : 0;
}

/* Under r=bf16: x rounded to bf16 (the stream in memory), then widened back to f32 for the ops
 * that read it. Both copies pass their gradient to their source unchanged (autodiff's acc), so
 * the stream's gradient stays f32; a matmul under c=bf16 multiplies the bf16 value itself; and
 * the planner lets a kernel that takes the bf16 operand read it directly (plan.c). */
static bora_tensor *api_residual(bora_graph *gp, bora_tensor *x)
{
    g_graph *g = (g_graph *)gp;
    NEED(g, x);
    if (g->residual != BORA_DTYPE_BF16 || x->dtype != BORA_DTYPE_F32)
        return x;
    gval *r = g_copy_as(g, x, BORA_DTYPE_BF16);
    if (!r)
        return NULL;
    r->mp_cast = 1;
    gval *w = g_copy_as(g, r, BORA_DTYPE_F32);
    if (!w)
        return NULL;
    w->mp_cast = 1;
    w->lowp = r;
    g->residuals++;
    return w;
}

/* A metric's name: 1 to 100 characters of [A-Za-z0-9_./-], not starting or ending with '/'
 * (trackers nest names at '/'). */
static int metric_name_ok(const char *name)
{
    size_t n = strlen(name);
    if (n < 1 || n > 100 || name[0] == '/' || name[n - 1] == '/')
        return 0;
    for (size_t i = 0; i < n; i++) {
        char c = name[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '.' || c == '/' || c == '-'))
            return 0;
    }
    /* the trainer's own train/ names */
    static const char *const reserved[] = {"loss", "final_loss", "steps", "tokens"};
    for (size_t i = 0; i < sizeof reserved / sizeof reserved[0]; i++) {
        size_t r = strlen(reserved[i]);
        if (!strncmp(name, reserved[i], r) && (name[r] == 0 || name[r] == '/'))
            return 0;
    }
    return 1;
}

/* Record t under name for the host to read (ABI 1.14); t itself is returned unchanged, so the
 * declaration adds no node: a graph that never reads its metrics runs the same nodes. */
static bora_tensor *api_metric(bora_graph *gp, bora_tensor *t, const char *name)
{
    g_graph *g = (g_graph *)gp;
    NEED(g, t, name);
    char d[256];
    g_describe(t, d, sizeof d);
    if (!metric_name_ok(name)) {
        g_fail(g,
               "metric: the name '%.120s' is not 1 to 100 characters of [A-Za-z0-9_./-] "
               "(not starting or ending with '/'), or is one of the trainer's own (loss, "
               "final_loss, steps, tokens)",
               name);
        return NULL;
    }
    if (!g_is_float(t->dtype) || t->ndim > 1 || g_numel(t) > BORA_METRIC_MAX_ELEMENTS) {
        g_fail(g,
               "metric '%s': %s must be a float scalar or a 1-d float vector of at most %d "
               "elements",
               name, d, BORA_METRIC_MAX_ELEMENTS);
        return NULL;
    }
    for (size_t i = 0; i < g->n_metrics; i++)
        if (!strcmp(g->metrics[i].name, name)) {
            g_fail(g, "metric '%s' is declared twice", name);
            return NULL;
        }
    if (g->n_metrics == g->cap_metrics) {
        size_t cap = g->cap_metrics ? 2 * g->cap_metrics : 8;
        g_metric *m = realloc(g->metrics, cap * sizeof *m);
        if (!m) {
            g_fail(g, "out of memory");
            return NULL;
        }
        g->metrics = m;
        g->cap_metrics = cap;
    }
    char *copy = bora_strdup(name);
    if (!copy) {
        g_fail(g, "out of memory");
        return NULL;
    }
    g->metrics[g->n_metrics++] = (g_metric){copy, t};
    return t;
}

const bora_graph_api g_api = {
    .struct_size = sizeof(bora_graph_api),
    .mode = api_mode,
    .status = api_status,
    .param = api_param,
    .input = api_input,
    .name = api_name,
    .slice = api_slice,
    .permute = api_permute,
    .rename = api_rename,
    .split = api_split,
    .merge = api_merge,
    .broadcast = api_broadcast,
    .unary = api_unary,
    .binary = api_binary,
    .scale = api_scale,
    .dot = api_dot,
    .reduce = api_reduce,
    .layernorm = api_layernorm,
    .softmax = api_softmax,
    .log_softmax = api_log_softmax,
    .cross_entropy = api_cross_entropy,
    .embedding = api_embedding,
    .attention = api_attention,
    .cast = api_cast,
    .contiguous = api_contiguous,
    .concat = api_concat,
    .checkpoint = api_checkpoint,
    .extent = api_extent,
    .batch = api_batch,
    .assign = api_assign,
    .ndim = api_ndim,
    .axis = api_axis,
    .dtype = api_dtype,
    .state = api_state,
    .write_slice = api_write_slice,
    .residual = api_residual,
    .full = api_full,
    .iota = api_iota,
    .where = api_where,
    .rms_norm = api_rms_norm,
    .rope = api_rope,
    .sample = api_sample,
    .top_k = api_top_k,
    .argsort = api_argsort,
    .bincount = api_bincount,
    .grouped_matmul = api_grouped_matmul,
    .metric = api_metric,
    .conv1d = api_conv1d,
};

g_graph *g_graph_new(g_store *store, int mode)
{
    g_graph *g = calloc(1, sizeof *g);
    if (!g)
        return NULL;
    static uint64_t serial;
    g->serial = ++serial;
    g->pub.api = &g_api;
    g->store = store;
    g->mode = mode;
    g->recompute = 1; /* boundaries are marked only by models that ask for recomputation */
    g->batch = 1;
    /* Apply graphs, and Hessian graphs (whose tangent pass has no rules for bf16 copies), compute
     * in the parameters' own dtype whatever trainer.mp says. */
    int own = mode == BORA_MODE_APPLY || mode == BORA_MODE_HESSIAN;
    g->compute = own ? 0 : store->compute_dtype;
    g->residual = own ? 0 : store->residual_dtype;
    return g;
}

void g_graph_free(g_graph *g)
{
    if (!g)
        return;
    g_profile_print(g);
    free(g->prof_s);
    g_fused_free_all(g);
    for (size_t i = 0; i < g->n_nodes; i++)
        free(g->nodes[i]);
    for (size_t i = 0; i < g->n_vals; i++)
        free(g->vals[i]);
    for (size_t i = 0; i < g->n_inputs; i++)
        if (g->inputs[i].buf)
            g->store->ops->buffer_free(g->store->backend, g->inputs[i].buf);
    free(g->nodes);
    free(g->vals);
    free(g->inputs);
    for (size_t i = 0; i < g->n_consts; i++) {
        if (g->consts[i].buf)
            g->store->ops->buffer_free(g->store->backend, g->consts[i].buf);
        free(g->consts[i].data);
    }
    free(g->consts);
    for (size_t i = 0; i < g->n_metrics; i++)
        free(g->metrics[i].name);
    free(g->metrics);
    free(g->checkpoints);
    free(g->readers);
    free(g);
}

uint32_t g_op_since(int op)
{
    return op >= BORA_OP_CONV1D   ? 15
           : op >= BORA_OP_TOP_K  ? 13
           : op >= BORA_OP_SAMPLE ? 11
           : op >= BORA_OP_SIN    ? 9
                                  : 0;
}

const char *g_op_name(int op)
{
    static const char *const names[] = {"?",
                                        "copy",
                                        "fill",
                                        "add",
                                        "sub",
                                        "mul",
                                        "div",
                                        "neg",
                                        "exp",
                                        "log",
                                        "sqrt",
                                        "rsqrt",
                                        "tanh",
                                        "sigmoid",
                                        "relu",
                                        "silu",
                                        "gelu_tanh",
                                        "gelu_exact",
                                        "scale",
                                        "act_grad",
                                        "sum",
                                        "max",
                                        "matmul",
                                        "layernorm",
                                        "layernorm_grad",
                                        "softmax",
                                        "log_softmax",
                                        "cross_entropy",
                                        "cross_entropy_grad",
                                        "gather",
                                        "scatter_add",
                                        "attention",
                                        "attention_grad",
                                        "pad",
                                        "concat",
                                        "one_hot",
                                        "attention_bias",
                                        "write_slice",
                                        "cross_entropy_fused",
                                        "sum_squares",
                                        "sin",
                                        "cos",
                                        "abs",
                                        "sign",
                                        "minimum",
                                        "maximum",
                                        "less",
                                        "less_equal",
                                        "equal",
                                        "not_equal",
                                        "where",
                                        "iota",
                                        "rms_norm",
                                        "rms_norm_grad",
                                        "rope",
                                        "sample",
                                        "top_k",
                                        "argsort",
                                        "bincount",
                                        "grouped_matmul",
                                        "grouped_matmul_grad",
                                        "conv1d",
                                        "conv1d_grad_input",
                                        "conv1d_grad_weight"};
    _Static_assert(sizeof names / sizeof names[0] == BORA_OP_COUNT_, "a name for every op");
    if (op > 0 && op < (int)(sizeof names / sizeof names[0]))
        return names[op];
    switch (op) {
    case G_PARAM: return "param";
    case G_INPUT: return "input";
    case G_CONST: return "constant";
    case G_VIEW: return "view";
    case G_GRAD: return "grad";
    default: return "?";
    }
}
