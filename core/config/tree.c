/* core/config/tree.c — configuration nodes, their memory, diagnostics, and writing a tree out
 * as YAML or JSON. */
#include "internal.h"

#include "../util/log.h"
#include "../util/str.h"

#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

/* ---- memory: every node and string of a configuration lives in one arena ---------------- */

typedef struct chunk {
    struct chunk *next;
    size_t used, cap;
    max_align_t data[];
} chunk;

void *cfg_alloc(bora_cfg *cfg, size_t size)
{
    size = (size + 15) & ~(size_t)15;
    chunk *c = cfg->chunks;
    if (!c || c->cap - c->used < size) {
        size_t cap = size > 65536 ? size : 65536;
        c = malloc(sizeof(chunk) + cap);
        if (!c)
            return NULL;
        c->next = cfg->chunks;
        c->used = 0;
        c->cap = cap;
        cfg->chunks = c;
    }
    void *p = (char *)c->data + c->used;
    c->used += size;
    memset(p, 0, size);
    return p;
}

char *cfg_strndup(bora_cfg *cfg, const char *s, size_t n)
{
    char *d = cfg_alloc(cfg, n + 1);
    if (d) {
        memcpy(d, s, n);
        d[n] = 0;
    }
    return d;
}

char *cfg_strdup(bora_cfg *cfg, const char *s)
{
    return cfg_strndup(cfg, s, strlen(s));
}

bora_config *cfg_node(bora_cfg *cfg, int kind, const char *origin, uint32_t line, uint32_t col)
{
    if (cfg->n_nodes >= BORA_CFG_MAX_NODES)
        return NULL;
    bora_config *n = cfg_alloc(cfg, sizeof *n);
    if (!n)
        return NULL;
    cfg->n_nodes++;
    n->cfg = cfg;
    n->kind = kind;
    n->origin = origin;
    n->line = line;
    n->col = col;
    return n;
}

static int grow(bora_cfg *cfg, void **arr, size_t elem, size_t n, size_t *cap)
{
    if (n < *cap)
        return 0;
    size_t ncap = *cap ? *cap * 2 : 8;
    void *p = cfg_alloc(cfg, ncap * elem);
    if (!p)
        return -1;
    if (n)
        memcpy(p, *arr, n * elem);
    *arr = p;
    *cap = ncap;
    return 0;
}

int cfg_map_put(bora_config *map, const char *key, bora_config *key_node, bora_config *value)
{
    bora_cfg *cfg = map->cfg;
    size_t cap_k = map->cap, cap_n = map->cap, cap_v = map->cap;
    if (grow(cfg, (void **)&map->keys, sizeof *map->keys, map->n, &cap_k) ||
        grow(cfg, (void **)&map->key_nodes, sizeof *map->key_nodes, map->n, &cap_n) ||
        grow(cfg, (void **)&map->values, sizeof *map->values, map->n, &cap_v))
        return -1;
    map->cap = cap_k;
    map->keys[map->n] = key;
    map->key_nodes[map->n] = key_node;
    map->values[map->n] = value;
    value->parent = map;
    value->key = key;
    map->n++;
    return 0;
}

int cfg_list_push(bora_config *list, bora_config *value)
{
    size_t cap = list->cap;
    if (grow(list->cfg, (void **)&list->values, sizeof *list->values, list->n, &cap))
        return -1;
    list->cap = cap;
    value->parent = list;
    value->index = list->n;
    list->values[list->n++] = value;
    return 0;
}

long cfg_map_find(const bora_config *map, const char *key)
{
    if (!map || map->kind != BORA_NODE_MAP)
        return -1;
    for (size_t i = 0; i < map->n; i++)
        if (strcmp(map->keys[i], key) == 0)
            return (long)i;
    return -1;
}

bora_cfg *bora_cfg_new(void)
{
    bora_cfg *cfg = calloc(1, sizeof *cfg);
    if (!cfg)
        return NULL;
    cfg->root = cfg_node(cfg, BORA_NODE_MAP, "", 0, 0);
    if (!cfg->root) {
        free(cfg);
        return NULL;
    }
    return cfg;
}

void bora_cfg_free(bora_cfg *cfg)
{
    if (!cfg)
        return;
    for (chunk *c = cfg->chunks, *next; c; c = next) {
        next = c->next;
        free(c);
    }
    for (size_t i = 0; i < cfg->n_diags; i++)
        free(cfg->diags[i].text);
    free(cfg->diags);
    free(cfg);
}

bora_config *bora_cfg_root(bora_cfg *cfg)
{
    return cfg->root;
}

/* ---- diagnostics ------------------------------------------------------------------------ */

static bora_status add_diag(bora_cfg *cfg, const char *origin, uint32_t line, uint32_t col,
                            const char *msg)
{
    char text[2048];
    if (origin && *origin && line && col)
        snprintf(text, sizeof text, "%s:%u:%u: %s", origin, line, col, msg);
    else if (origin && *origin && line)
        snprintf(text, sizeof text, "%s:%u: %s", origin, line, msg);
    else if (origin && *origin)
        snprintf(text, sizeof text, "in %s: %s", origin, msg);
    else
        snprintf(text, sizeof text, "%s", msg);
    bora_error_set(BORA_ERR_CONFIG, "%s", text);
    /* The same problem reached twice (a key read by two components) is reported once. */
    for (size_t i = 0; i < cfg->n_diags; i++)
        if (strcmp(cfg->diags[i].text, text) == 0)
            return BORA_ERR_CONFIG;
    if (cfg->n_diags == cfg->cap_diags) {
        size_t cap = cfg->cap_diags ? cfg->cap_diags * 2 : 16;
        cfg_diag *d = realloc(cfg->diags, cap * sizeof *d);
        if (!d)
            return BORA_ERR_CONFIG;
        cfg->diags = d;
        cfg->cap_diags = cap;
    }
    cfg->diags[cfg->n_diags++] =
        (cfg_diag){origin ? origin : "", line, col, cfg->n_diags, bora_strdup(text)};
    return BORA_ERR_CONFIG;
}

bora_status cfg_error_at(bora_cfg *cfg, const char *origin, uint32_t line, uint32_t col,
                         const char *fmt, ...)
{
    char msg[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return add_diag(cfg, origin, line, col, msg);
}

bora_status bora_cfg_error(bora_cfg *cfg, const bora_config *node, const char *fmt, ...)
{
    char msg[1536];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return add_diag(cfg, node ? node->origin : NULL, node ? node->line : 0, node ? node->col : 0,
                    msg);
}

size_t bora_cfg_error_count(const bora_cfg *cfg)
{
    return cfg->n_diags;
}

const char *bora_cfg_first_error(const bora_cfg *cfg)
{
    return cfg->n_diags ? cfg->diags[0].text : NULL;
}

static int diag_cmp(const void *a, const void *b)
{
    const cfg_diag *x = a, *y = b;
    /* Files before command-line overrides (which have no lines), then by position. */
    if ((x->line == 0) != (y->line == 0))
        return x->line == 0 ? 1 : -1;
    int c = strcmp(x->origin, y->origin);
    if (c)
        return c;
    if (x->line != y->line)
        return x->line < y->line ? -1 : 1;
    if (x->col != y->col)
        return x->col < y->col ? -1 : 1;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

void bora_cfg_print_errors(const bora_cfg *cfg, FILE *out)
{
    if (cfg->n_diags == 0)
        return;
    qsort(cfg->diags, cfg->n_diags, sizeof *cfg->diags, diag_cmp);
    for (size_t i = 0; i < cfg->n_diags; i++)
        fprintf(out, "%s\n", cfg->diags[i].text);
}

/* ---- paths and labels ------------------------------------------------------------------- */

void bora_cfg_path(const bora_config *node, char *buf, size_t cap)
{
    /* Collect the chain to the root, then print it from the top. */
    const bora_config *chain[BORA_CFG_MAX_DEPTH * 2 + 8];
    size_t n = 0;
    for (const bora_config *p = node; p && p->parent && n < sizeof chain / sizeof *chain;
         p = p->parent)
        chain[n++] = p;
    size_t w = 0;
    buf[0] = 0;
    while (n-- > 0 && w < cap) {
        const bora_config *p = chain[n];
        int k = p->parent->kind == BORA_NODE_LIST
                    ? snprintf(buf + w, cap - w, "[%zu]", p->index)
                    : snprintf(buf + w, cap - w, "%s%s", w ? "." : "", p->key ? p->key : "?");
        if (k < 0)
            break;
        w += (size_t)k;
    }
    if (w >= cap && cap > 0)
        buf[cap - 1] = 0;
}

/* ---- writing ---------------------------------------------------------------------------- */

static int needs_quotes(const bora_config *n)
{
    const char *s = n->text;
    if (n->text_len == 0 || strlen(s) != n->text_len)
        return 1;
    if (strchr(",[]{}#&*!|>'\"%@` ", s[0]) || s[n->text_len - 1] == ' ')
        return 1;
    /* "-", "?" and ":" start YAML syntax only when a space or the end follows. */
    if (strchr("-?:", s[0]) && (s[1] == ' ' || s[1] == 0))
        return 1;
    for (const char *p = s; *p; p++) {
        if ((unsigned char)*p < 0x20 || *p == '#' || (*p == ':' && (p[1] == ' ' || !p[1])))
            return 1;
    }
    /* A quoted scalar that would read back as another type keeps its quotes. */
    if (n->quoted) {
        int64_t i;
        double d;
        int b;
        if (!bora_parse_int(s, &i) || !bora_parse_float(s, &d) || !bora_parse_bool(s, &b) ||
            !strcmp(s, "null") || !strcmp(s, "~"))
            return 1;
    }
    return 0;
}

static void write_quoted(const char *s, size_t len, FILE *out)
{
    fputc('"', out);
    for (size_t i = 0; i < len; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\')
            fprintf(out, "\\%c", c);
        else if (c == '\n')
            fputs("\\n", out);
        else if (c == '\t')
            fputs("\\t", out);
        else if (c < 0x20 || c == 0x7f)
            fprintf(out, "\\x%02x", c);
        else
            fputc(c, out);
    }
    fputc('"', out);
}

static void write_scalar(const bora_config *n, FILE *out)
{
    if (n->kind == BORA_NODE_NULL)
        fputs("null", out);
    else if (needs_quotes(n))
        write_quoted(n->text, n->text_len, out);
    else
        fputs(n->text, out);
}

/* " value\n" for a scalar or an empty map or list, on the line of its key or dash. */
static void write_inline(const bora_config *v, FILE *out)
{
    fputc(' ', out);
    if (v->kind == BORA_NODE_MAP)
        fputs("{}", out);
    else if (v->kind == BORA_NODE_LIST)
        fputs("[]", out);
    else
        write_scalar(v, out);
    fputc('\n', out);
}

static void write_yaml(const bora_config *n, int indent, FILE *out)
{
    if (n->kind == BORA_NODE_MAP) {
        for (size_t i = 0; i < n->n; i++) {
            const bora_config *v = n->values[i];
            fprintf(out, "%*s%s:", indent, "", n->keys[i]);
            if ((v->kind == BORA_NODE_MAP || v->kind == BORA_NODE_LIST) && v->n > 0) {
                fputc('\n', out);
                write_yaml(v, indent + 2, out);
            } else {
                write_inline(v, out);
            }
        }
    } else if (n->kind == BORA_NODE_LIST) {
        for (size_t i = 0; i < n->n; i++) {
            const bora_config *v = n->values[i];
            fprintf(out, "%*s-", indent, "");
            if (v->kind == BORA_NODE_MAP && v->n > 0) {
                /* The first key goes on the dash line, the rest indented under it. */
                fputc(' ', out);
                char *buf = NULL;
                size_t len = 0;
                FILE *mem = open_memstream(&buf, &len);
                if (mem) {
                    write_yaml(v, indent + 2, mem);
                    fclose(mem);
                    fputs(buf + indent + 2, out);
                    free(buf);
                }
            } else if (v->kind == BORA_NODE_LIST && v->n > 0) {
                fputc('\n', out);
                write_yaml(v, indent + 2, out);
            } else {
                write_inline(v, out);
            }
        }
    } else {
        fprintf(out, "%*s", indent, "");
        write_scalar(n, out);
        fputc('\n', out);
    }
}

void bora_cfg_write_yaml(const bora_config *node, FILE *out)
{
    write_yaml(node, 0, out);
}

void bora_cfg_write_json(const bora_config *n, FILE *out)
{
    switch (n->kind) {
    case BORA_NODE_NULL: fputs("null", out); return;
    case BORA_NODE_MAP:
        fputc('{', out);
        for (size_t i = 0; i < n->n; i++) {
            if (i)
                fputc(',', out);
            bora_json_string(out, n->keys[i]);
            fputc(':', out);
            bora_cfg_write_json(n->values[i], out);
        }
        fputc('}', out);
        return;
    case BORA_NODE_LIST:
        fputc('[', out);
        for (size_t i = 0; i < n->n; i++) {
            if (i)
                fputc(',', out);
            bora_cfg_write_json(n->values[i], out);
        }
        fputc(']', out);
        return;
    default: break;
    }
    int64_t iv;
    double dv;
    int bv;
    if (!n->quoted && !bora_parse_int(n->text, &iv))
        fprintf(out, "%lld", (long long)iv);
    else if (!n->quoted && !bora_parse_float(n->text, &dv) && isfinite(dv))
        fprintf(out, "%.17g", dv);
    else if (!n->quoted && !bora_parse_bool(n->text, &bv))
        fputs(bv ? "true" : "false", out);
    else if (!n->quoted && (!strcmp(n->text, "null") || !strcmp(n->text, "~")))
        fputs("null", out);
    else
        bora_json_string(out, n->text);
}

bora_config *bora_cfg_overlay(bora_config *base, bora_config *over, const char *const *drop)
{
    bora_cfg *cfg = over->cfg;
    bora_config *m = cfg_node(cfg, BORA_NODE_MAP, over->origin, over->line, over->col);
    if (!m)
        return NULL;
    for (int pass = 0; pass < 2; pass++) {
        const bora_config *src = pass ? over : base;
        for (size_t i = 0; src && src->kind == BORA_NODE_MAP && i < src->n; i++) {
            const char *key = src->keys[i];
            /* a default filled into base is base's optimizer's, not one written for the group */
            int skip =
                !pass && (cfg_map_find(over, key) >= 0 ||
                          (src->values[i]->origin && !strcmp(src->values[i]->origin, "default")));
            for (const char *const *d = drop; d && *d && !skip; d++)
                skip = !strcmp(*d, key);
            bora_config *v = skip ? NULL : cfg_node(cfg, BORA_NODE_NULL, NULL, 0, 0);
            if (skip)
                continue;
            if (!v)
                return NULL;
            *v = *src->values[i]; /* a shallow copy: its children stay where they were */
            v->asked = NULL;
            v->n_asked = v->cap_asked = 0;
            if (cfg_map_put(m, key, src->key_nodes[i], v))
                return NULL;
        }
    }
    m->parent = over->parent; /* paths read as the group's: optimizer.groups[0].beta1 */
    m->key = over->key;
    m->index = over->index;
    return m;
}
