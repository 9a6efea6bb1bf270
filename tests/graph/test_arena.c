/* tests/graph/test_arena.c — graphs built on a store after it was allocated. The graphs of a
 * store share one arena; one finalized after g_store_materialize that needs more than the arena
 * holds grows it. Here, on the CPU backend behind a wrapper that records every buffer it hands
 * out: a graph built after materialize whose intermediates take far more than the first graph's
 * has every intermediate inside the arena buffer the backend really gave (checked against the
 * wrapper's record, and by ASan in the sanitizer build) and gives what plain loops give here;
 * the graph built before still runs right on the grown arena; a graph needing no more leaves the
 * arena alone; a growth the backend cannot allocate fails that graph's finalize naming the
 * arena and leaves the store as it was.
 *
 * usage: test_arena PLUGIN_DIR */
#include "../test.h"
#include "rig.h"

#include <math.h>
#include <stdint.h>

enum { COLS = 8, ROWS = 512, MANY = 64 };

/* ---- a backend that records its buffers ---------------------------------------------------- */

static const bora_backend_ops *real;
static bora_backend_ops recording;
static struct {
    bora_buffer *buf;
    size_t size;
} held[MANY];
static size_t alloc_limit = SIZE_MAX; /* larger requests fail, as out of memory */

static bora_status rec_alloc(bora_backend *b, size_t size, size_t align, bora_buffer **out)
{
    if (size > alloc_limit)
        return bora_error_set(BORA_ERR_NOMEM, "test: no %zu bytes to be had", size);
    bora_status st = real->buffer_alloc(b, size, align, out);
    for (int i = 0; st == BORA_OK && i < MANY; i++)
        if (!held[i].buf) {
            held[i].buf = *out, held[i].size = size;
            break;
        }
    return st;
}

static void rec_free(bora_backend *b, bora_buffer *buf)
{
    for (int i = 0; i < MANY; i++)
        if (held[i].buf == buf)
            held[i].buf = NULL;
    real->buffer_free(b, buf);
}

/* The bytes the backend gave for buf, or 0 if it is not one of its live buffers. */
static size_t size_of(const bora_buffer *buf)
{
    for (int i = 0; buf && i < MANY; i++)
        if (held[i].buf == buf)
            return held[i].size;
    return 0;
}

/* Whether every intermediate of g lies inside the store's arena buffer as the backend sized it. */
static int inside_arena(const g_graph *g)
{
    size_t have = size_of(g->store->arena);
    if (!have || g->arena_bytes > have)
        return 0;
    for (size_t i = 0; i < g->n_vals; i++) {
        const gval *v = g->vals[i];
        size_t end = (size_t)v->arena_offset + (size_t)g_numel(v) * bora_dtype_size(v->dtype);
        if (v->base == v && v->storage == S_ARENA && v->first_use >= 0 && end > have)
            return 0;
    }
    return 1;
}

/* ---- the graphs ---------------------------------------------------------------------------- */

static const bora_axis col_axis[1] = {{"col", COLS}};

/* small: x (col) * w (col), with the parameter w. */
static g_graph *build_small(g_store *s)
{
    g_graph *g = g_graph_new(s, BORA_MODE_EVAL);
    bora_graph *p = &g->pub;
    bora_tensor *w = bora_param(p, "w", BORA_DTYPE_F64, 1, col_axis, bora_init_normal(0.5), 0);
    g->output = bora_mul(p, bora_input(p, "x", BORA_DTYPE_F64, 1, col_axis), w);
    return g;
}

/* large: Σ_row (exp(u·w)² + u) over u (row=rows, col): (rows, col) f64 intermediates. */
static g_graph *build_large(g_store *s, int64_t rows)
{
    g_graph *g = g_graph_new(s, BORA_MODE_EVAL);
    bora_graph *p = &g->pub;
    bora_axis ua[2] = {{"row", rows}, {"col", COLS}};
    bora_tensor *w = bora_param(p, "w", BORA_DTYPE_F64, 1, col_axis, bora_init_normal(0.5), 0);
    bora_tensor *u = bora_input(p, "u", BORA_DTYPE_F64, 2, ua);
    bora_tensor *h = bora_unary(p, BORA_OP_EXP, bora_mul(p, u, w));
    const char *row[] = {"row"};
    g->output = p->api->reduce(p, BORA_OP_SUM, bora_add(p, bora_mul(p, h, h), u), 1, row);
    return g;
}

/* The large graph's result by plain loops. */
static void large_ref(const double *u, const double *w, double *out)
{
    for (int c = 0; c < COLS; c++) {
        out[c] = 0;
        for (int r = 0; r < ROWS; r++) {
            double h = exp(u[r * COLS + c] * w[c]);
            out[c] += h * h + u[r * COLS + c];
        }
    }
}

static int close_to(const double *got, const double *want, int n)
{
    for (int i = 0; i < n; i++)
        if (!(fabs(got[i] - want[i]) <= 1e-12 * fabs(want[i]))) {
            fprintf(stderr, "element %d: %.17g, want %.17g\n", i, got[i], want[i]);
            return 0;
        }
    return 1;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: test_arena PLUGIN_DIR\n");
        return 2;
    }
    rig r;
    rig_open(&r, argv[1], 1, 7);
    real = r.ops;
    recording = *r.ops;
    recording.buffer_alloc = rec_alloc;
    recording.buffer_free = rec_free;
    g_store_free(r.store);
    r.store = g_store_new(&recording, r.be, "cpu", 7);
    g_store *s = r.store;

    /* The store is allocated for the small graph alone. */
    g_graph *small = build_small(s);
    CHECK(small->output && g_finalize(small) == BORA_OK && g_store_materialize(s) == BORA_OK);
    CHECK(inside_arena(small));
    double w[COLS], x[COLS], got[COLS], want[COLS];
    CHECK(g_store_read(s, S_PARAM, g_store_find(s, "w"), w, sizeof w) == BORA_OK);
    for (int c = 0; c < COLS; c++)
        x[c] = 0.25 * c - 1;
    CHECK(g_set_input(small, "x", x, sizeof x) == BORA_OK && g_run(small) == BORA_OK);
    CHECK(g_read(small, small->output, got, sizeof got) == BORA_OK);
    for (int c = 0; c < COLS; c++)
        CHECK(got[c] == x[c] * w[c]);

    /* A graph built now, whose intermediates take a thousand times the arena. */
    g_graph *large = build_large(s, ROWS);
    CHECK(large->output && g_finalize(large) == BORA_OK);
    CHECK(large->arena_bytes >= 2 * ROWS * COLS * sizeof(double)); /* two live at once */
    CHECK(inside_arena(large) && inside_arena(small));
    static double u[ROWS * COLS];
    for (int i = 0; i < ROWS * COLS; i++)
        u[i] = sin(0.37 * i);
    large_ref(u, w, want);
    CHECK(g_set_input(large, "u", u, sizeof u) == BORA_OK && g_run(large) == BORA_OK);
    CHECK(g_read(large, large->output, got, sizeof got) == BORA_OK && close_to(got, want, COLS));
    /* the first graph, on the grown arena */
    CHECK(g_run(small) == BORA_OK && g_read(small, small->output, got, sizeof got) == BORA_OK);
    for (int c = 0; c < COLS; c++)
        CHECK(got[c] == x[c] * w[c]);

    /* One needing no more than the arena now holds (the large graph's twin) leaves it be. */
    const bora_buffer *arena = s->arena;
    size_t arena_bytes = s->arena_bytes;
    CHECK(arena_bytes == large->arena_bytes);
    g_graph *again = build_large(s, ROWS);
    CHECK(again->output && g_finalize(again) == BORA_OK);
    CHECK(s->arena == arena && s->arena_bytes == arena_bytes && inside_arena(again));
    g_graph_free(again);

    /* A growth the backend cannot allocate fails the graph's finalize, naming the arena, and
     * keeps the arena the other graphs run on. */
    alloc_limit = arena_bytes;
    g_graph *huge = build_large(s, 4 * ROWS);
    CHECK(huge->output && g_finalize(huge) == BORA_ERR_NOMEM);
    CHECK_CONTAINS(huge->error, "cannot grow the graphs' arena");
    CHECK(s->arena == arena && s->arena_bytes == arena_bytes);
    CHECK(g_run(huge) != BORA_OK);
    g_graph_free(huge);
    alloc_limit = SIZE_MAX;
    CHECK(g_run(large) == BORA_OK && g_read(large, large->output, got, sizeof got) == BORA_OK &&
          close_to(got, want, COLS));

    g_graph_free(large);
    g_graph_free(small);
    rig_close(&r);
    if (test_failures)
        fprintf(stderr, "test_arena: %d checks failed\n", test_failures);
    return test_failures ? 1 : 0;
}
