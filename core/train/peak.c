/* core/train/peak.c — the backend's peak matmul rate, measured once per machine (see peak.h). */
#include "peak.h"

#include "../util/log.h"
#include "../util/str.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

/* ${XDG_CACHE_HOME:-$HOME/.cache}/bora/peak.tsv, or "" when neither is set. */
static void cache_path(char *buf, size_t cap, int make_dir)
{
    const char *xdg = getenv("XDG_CACHE_HOME"), *home = getenv("HOME");
    char dir[4096];
    if (xdg && *xdg)
        snprintf(dir, sizeof dir, "%s/bora", xdg);
    else if (home && *home)
        snprintf(dir, sizeof dir, "%s/.cache/bora", home);
    else {
        buf[0] = 0;
        return;
    }
    if (make_dir) {
        char *slash = strrchr(dir, '/');
        *slash = 0;
        mkdir(dir, 0755);
        *slash = '/';
        mkdir(dir, 0755);
    }
    snprintf(buf, cap, "%s/peak.tsv", dir);
}

static double cached(const char *key)
{
    char path[4200], line[2048];
    cache_path(path, sizeof path, 0);
    FILE *f = *path ? fopen(path, "r") : NULL;
    double v = 0;
    size_t n = strlen(key);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, key, n) && line[n] == '\t')
            v = strtod(line + n + 1, NULL);
    if (f)
        fclose(f);
    return v;
}

static void remember(const char *key, double gflops)
{
    char path[4200];
    cache_path(path, sizeof path, 1);
    FILE *f = *path ? fopen(path, "a") : NULL;
    if (!f) {
        bora_log(BORA_LOG_DEBUG, "peak: cannot write %s: %s", path, strerror(errno));
        return;
    }
    fprintf(f, "%s\t%.1f\n", key, gflops);
    fclose(f);
}

/* Best GFLOP/s of an n x n x n matmul on the backend, over a few runs: f32, or under c=bf16 bf16
 * operands with an f32 result (the inputs are bf16 already, so no cast is timed). */
static double probe(const bora_backend_ops *ops, bora_backend *be, const char *name, int dtype)
{
    enum { N = 1024 };
    double best = 0;
    g_store *s = g_store_new(ops, be, name, 0);
    if (s)
        s->compute_dtype = dtype;
    g_graph *g = s ? g_graph_new(s, BORA_MODE_EVAL) : NULL;
    size_t size = (dtype == BORA_DTYPE_BF16 ? 2 : 4) * (size_t)N * N;
    unsigned char *data = malloc(size);
    if (g && data) {
        bora_axis aa[2] = {{"m", N}, {"k", N}}, ba[2] = {{"k", N}, {"n", N}};
        bora_tensor *a = bora_input(&g->pub, "a", dtype, 2, aa);
        bora_tensor *b = bora_input(&g->pub, "b", dtype, 2, ba);
        const char *k[] = {"k"};
        g->output = bora_dot(&g->pub, a, b, 1, k);
        for (size_t i = 0; i < (size_t)N * N; i++) {
            float v = (float)((i * 7919u) % 17u) * 0.0625f - 0.5f; /* a bf16 value too */
            if (dtype == BORA_DTYPE_BF16) {
                uint32_t u;
                memcpy(&u, &v, sizeof u);
                uint16_t top = (uint16_t)(u >> 16);
                memcpy(data + 2 * i, &top, 2);
            } else {
                memcpy(data + 4 * i, &v, 4);
            }
        }
        if (bora_graph_status(&g->pub) == BORA_OK && g_finalize(g) == BORA_OK &&
            g_store_materialize(s) == BORA_OK && g_set_input(g, "a", data, size) == BORA_OK &&
            g_set_input(g, "b", data, size) == BORA_OK && g_run(g) == BORA_OK) {
            for (int rep = 0; rep < 5; rep++) {
                double t0 = bora_now_s();
                if (g_run(g) != BORA_OK)
                    break;
                double dt = bora_now_s() - t0, rate = 2.0 * N * N * N / dt / 1e9;
                if (rate > best)
                    best = rate;
            }
        }
    }
    free(data);
    g_graph_free(g);
    g_store_free(s);
    return best;
}

double bora_peak_gflops(const bora_backend_ops *ops, bora_backend *be, const char *name,
                        const char *cpu, int dtype, int *measured)
{
    char desc[512] = "", key[1024];
    if (ops->describe)
        ops->describe(be, desc, sizeof desc);
    snprintf(key, sizeof key, "%s | %s: %s | %s", cpu, name, desc,
             dtype == BORA_DTYPE_BF16 ? "bf16" : "f32");
    for (char *p = key; *p; p++)
        if (*p == '\t' || *p == '\n')
            *p = ' ';
    *measured = 0;
    double v = cached(key);
    if (v > 0)
        return v;
    v = probe(ops, be, name, dtype);
    if (v > 0) {
        *measured = 1;
        remember(key, v);
    }
    return v;
}
