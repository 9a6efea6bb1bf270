/* core/config/get.c — typed reads of configuration values, and the scalar syntaxes they accept:
 * integers (12, -3, 1_000_000, 0x40; 1e6, 1.5e3 and 2.0 when whole and within int64), floats,
 * booleans (true/false, yes/no, on/off), durations (90s, 15m, 2h, 1d, 250ms, 1h30m; a bare number
 * is seconds) and byte sizes (512MB = 512e6, 4GiB = 4·2^30, 64K = 64·2^10; a bare number is
 * bytes). */
#include "internal.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

/* ---- scalar syntaxes -------------------------------------------------------------------- */

/* A decimal written with a point or an exponent (2.0, 1e6, 1.5e3, 4e18) as an integer, worked
 * out digit by digit rather than through a double, so every whole value of int64 is exact. */
static int parse_exponent_int(const char *s, int64_t *out)
{
    const char *p = s;
    int neg = 0;
    if (*p == '+' || *p == '-')
        neg = *p++ == '-';
    const char *first = NULL, *last = NULL; /* significant digits: first nonzero to last nonzero */
    long frac = 0, after_last = 0; /* digits after the point; digits (of either part) after last */
    int digits = 0, point = 0;
    for (; *p && *p != 'e' && *p != 'E'; p++) {
        if (*p == '.' && !point) {
            point = 1;
            continue;
        }
        if (*p < '0' || *p > '9')
            return BORA_PARSE_SYNTAX;
        digits++;
        if (point)
            frac++;
        if (*p != '0') {
            if (!first)
                first = p;
            last = p;
            after_last = 0;
        } else if (first) {
            after_last++;
        }
    }
    if (!digits)
        return BORA_PARSE_SYNTAX;
    long exp = 0;
    if (*p) {
        p++;
        int eneg = 0;
        if (*p == '+' || *p == '-')
            eneg = *p++ == '-';
        if (!*p)
            return BORA_PARSE_SYNTAX;
        for (; *p; p++) {
            if (*p < '0' || *p > '9')
                return BORA_PARSE_SYNTAX;
            if (exp < 100000) /* far past any int64; keeps the sum below from overflowing */
                exp = exp * 10 + (*p - '0');
        }
        if (eneg)
            exp = -exp;
    }
    if (!first) {
        *out = 0;
        return 0;
    }
    /* value = (the significant digits) · 10^shift; the zeros after the last nonzero digit that
     * sit before the point count towards the shift, those after it cancel fraction digits. */
    long shift = exp - frac + after_last;
    if (shift < 0)
        return BORA_PARSE_NOT_WHOLE;
    uint64_t v = 0, limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    for (const char *q = first; q <= last; q++) {
        if (*q == '.')
            continue;
        uint64_t d = (uint64_t)(*q - '0');
        if (v > (limit - d) / 10)
            return BORA_PARSE_RANGE;
        v = v * 10 + d;
    }
    for (long i = 0; i < shift; i++) {
        if (v > limit / 10)
            return BORA_PARSE_RANGE;
        v *= 10;
    }
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 0;
}

int bora_parse_int(const char *s, int64_t *out)
{
    const char *p = s;
    int neg = 0;
    if (*p == '+' || *p == '-')
        neg = *p++ == '-';
    if (!*p)
        return BORA_PARSE_SYNTAX;
    uint64_t v = 0, limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
    int range = 0; /* too large, but read on: "1_000x" is a syntax error, not a range error */
    if (p[0] == '0' && (p[1] == 'x' || p[1] == 'X') && p[2]) {
        for (p += 2; *p; p++) {
            int d = *p >= '0' && *p <= '9'   ? *p - '0'
                    : *p >= 'a' && *p <= 'f' ? *p - 'a' + 10
                    : *p >= 'A' && *p <= 'F' ? *p - 'A' + 10
                                             : -1;
            if (d < 0)
                return BORA_PARSE_SYNTAX;
            if (v > (limit - (uint64_t)d) / 16)
                range = 1;
            else
                v = v * 16 + (uint64_t)d;
        }
    } else {
        int digits = 0;
        for (; *p; p++) {
            if (*p == '_' && digits && p[1] >= '0' && p[1] <= '9')
                continue;
            if (*p < '0' || *p > '9') /* 1e6 and 2.0 are integers when they are whole */
                return parse_exponent_int(s, out);
            if (v > (limit - (uint64_t)(*p - '0')) / 10)
                range = 1;
            else
                v = v * 10 + (uint64_t)(*p - '0');
            digits++;
        }
    }
    if (range)
        return BORA_PARSE_RANGE;
    *out = neg ? (int64_t)(0 - v) : (int64_t)v;
    return 0;
}

int bora_parse_float(const char *s, double *out)
{
    if (!*s || *s == ' ' || *s == '\t' || *s == '\n')
        return -1;
    const char *body = (*s == '+' || *s == '-') ? s + 1 : s;
    if (!strcmp(body, ".inf") || !strcmp(body, ".Inf") || !strcmp(body, ".INF")) {
        *out = *s == '-' ? -INFINITY : INFINITY;
        return 0;
    }
    if (!strcmp(s, ".nan") || !strcmp(s, ".NaN") || !strcmp(s, ".NAN")) {
        *out = NAN;
        return 0;
    }
    /* Only decimal notation: strtod would also take hex floats and words like "infinity". */
    for (const char *p = body; *p; p++)
        if (!strchr("0123456789.eE+-", *p))
            return -1;
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (end == s || *end || errno == ERANGE)
        return -1;
    *out = v;
    return 0;
}

int bora_parse_bool(const char *s, int *out)
{
    static const char *const yes[] = {"true", "yes", "on"}, *const no[] = {"false", "no", "off"};
    for (int i = 0; i < 3; i++) {
        if (!strcasecmp(s, yes[i]))
            return *out = 1, 0;
        if (!strcasecmp(s, no[i]))
            return *out = 0, 0;
    }
    return -1;
}

/* A number followed by a unit, repeated ("1h30m"); units maps suffix -> multiplier. */
typedef struct unit {
    const char *suffix;
    double scale;
} unit;

static int parse_with_units(const char *s, const unit *units, int repeat, double *out)
{
    double total = 0;
    const char *p = s;
    if (!*p)
        return -1;
    while (*p) {
        char *end;
        if (!((*p >= '0' && *p <= '9') || *p == '.'))
            return -1; /* no signs: sizes and durations are never negative */
        errno = 0;
        double v = strtod(p, &end);
        if (end == p || errno == ERANGE)
            return -1;
        p = end;
        while (*p == ' ')
            p++;
        const unit *u = NULL;
        size_t best = 0;
        for (const unit *k = units; k->suffix; k++) {
            size_t n = strlen(k->suffix);
            if (n > best && !strncmp(p, k->suffix, n) && !(p[n] >= 'a' && p[n] <= 'z') &&
                !(p[n] >= 'A' && p[n] <= 'Z')) {
                u = k;
                best = n;
            }
        }
        if (!u) {
            if (*p || p != end)
                return -1;
            total += v; /* a bare number in the base unit */
            break;
        }
        total += v * u->scale;
        p += best;
        while (*p == ' ')
            p++;
        if (*p && !repeat)
            return -1;
    }
    if (!isfinite(total))
        return -1;
    *out = total;
    return 0;
}

int bora_parse_duration(const char *s, double *out_s)
{
    static const unit units[] = {
        {"ms", 1e-3}, {"s", 1},     {"sec", 1},   {"m", 60}, {"min", 60},
        {"h", 3600},  {"hr", 3600}, {"d", 86400}, {NULL, 0},
    };
    return parse_with_units(s, units, 1, out_s);
}

int bora_parse_bytes(const char *s, uint64_t *out)
{
    static const unit units[] = {
        {"B", 1},
        {"KB", 1e3},
        {"MB", 1e6},
        {"GB", 1e9},
        {"TB", 1e12},
        {"KiB", 1024.0},
        {"MiB", 1048576.0},
        {"GiB", 1073741824.0},
        {"TiB", 1099511627776.0},
        {"K", 1024.0},
        {"k", 1024.0},
        {"M", 1048576.0},
        {"G", 1073741824.0},
        {"T", 1099511627776.0},
        {NULL, 0},
    };
    double v;
    if (parse_with_units(s, units, 0, &v) || v >= 18446744073709551616.0)
        return -1;
    *out = (uint64_t)llround(v);
    return 0;
}

/* ---- reading nodes ---------------------------------------------------------------------- */

static const char *describe(const bora_config *v)
{
    switch (v->kind) {
    case BORA_NODE_MAP: return "a mapping";
    case BORA_NODE_LIST: return "a list";
    case BORA_NODE_NULL: return "nothing";
    default: return NULL;
    }
}

/* "path: expected X, got 'text'" and why, when the text has the right form but not the value. */
static bora_status type_error_why(bora_config *v, const char *expected, const char *why)
{
    char path[512];
    bora_cfg_path(v, path, sizeof path);
    const char *what = describe(v);
    char got[160];
    if (what)
        snprintf(got, sizeof got, "%s", what);
    else if (v->text_len > 60)
        snprintf(got, sizeof got, "'%.57s...'", v->text);
    else
        snprintf(got, sizeof got, "'%s'", v->text);
    return bora_cfg_error(v->cfg, v, "%s%sexpected %s, got %s%s", path, *path ? ": " : "", expected,
                          got, why);
}

static bora_status type_error(bora_config *v, const char *expected)
{
    return type_error_why(v, expected, "");
}

static void remember_asked(bora_config *map, const char *key)
{
    for (size_t i = 0; i < map->n_asked; i++)
        if (!strcmp(map->asked[i], key))
            return;
    if (map->n_asked == map->cap_asked) {
        size_t cap = map->cap_asked ? map->cap_asked * 2 : 8;
        const char **a = cfg_alloc(map->cfg, cap * sizeof *a);
        if (!a)
            return;
        if (map->n_asked)
            memcpy(a, map->asked, map->n_asked * sizeof *a);
        map->asked = a;
        map->cap_asked = cap;
    }
    const char *copy = cfg_strdup(map->cfg, key);
    if (copy)
        map->asked[map->n_asked++] = copy;
}

bora_config *bora_cfg_child(bora_config *node, const char *key)
{
    if (!node || node->kind == BORA_NODE_NULL)
        return NULL;
    node->read = 1;
    if (node->kind != BORA_NODE_MAP) {
        if (!node->complained) {
            node->complained = 1;
            type_error(node, "a mapping of keys");
        }
        return NULL;
    }
    remember_asked(node, key);
    long i = cfg_map_find(node, key);
    if (i < 0)
        return NULL;
    node->key_nodes[i]->read = 1;
    node->values[i]->read = 1;
    return node->values[i];
}

bora_config *bora_cfg_at(bora_config *node, size_t i)
{
    if (!node || node->kind != BORA_NODE_LIST || i >= node->n)
        return NULL;
    node->values[i]->read = 1;
    return node->values[i];
}

/* The scalar to read: NULL when absent or null (use the default), or an error. */
static bora_status scalar_of(bora_config *node, const char *key, const char *expected,
                             bora_config **out)
{
    bora_config *v = key ? bora_cfg_child(node, key) : node;
    *out = NULL;
    if (!v || v->kind == BORA_NODE_NULL)
        return node && node->complained ? BORA_ERR_CONFIG : BORA_OK;
    v->read = 1;
    if (v->kind != BORA_NODE_SCALAR)
        return type_error(v, expected);
    *out = v;
    return BORA_OK;
}

bora_status bora_cfg_int(bora_config *node, const char *key, int64_t def, int64_t *out)
{
    bora_config *v;
    *out = def;
    bora_status st = scalar_of(node, key, "an integer", &v);
    if (st != BORA_OK || !v)
        return st;
    int rc = bora_parse_int(v->text, out);
    if (rc == 0)
        return BORA_OK;
    *out = def;
    return type_error_why(v, "an integer",
                          rc == BORA_PARSE_RANGE       ? " (out of range: an integer is at least "
                                                         "-9223372036854775808 and at most "
                                                         "9223372036854775807)"
                          : rc == BORA_PARSE_NOT_WHOLE ? " (not a whole number)"
                                                       : "");
}

bora_status bora_cfg_float(bora_config *node, const char *key, double def, double *out)
{
    bora_config *v;
    *out = def;
    bora_status st = scalar_of(node, key, "a number", &v);
    if (st != BORA_OK || !v)
        return st;
    if (bora_parse_float(v->text, out)) {
        *out = def;
        return type_error(v, "a number");
    }
    return BORA_OK;
}

bora_status bora_cfg_bool(bora_config *node, const char *key, int def, int *out)
{
    bora_config *v;
    *out = def;
    bora_status st = scalar_of(node, key, "true or false", &v);
    if (st != BORA_OK || !v)
        return st;
    if (bora_parse_bool(v->text, out)) {
        *out = def;
        return type_error(v, "true or false");
    }
    return BORA_OK;
}

bora_status bora_cfg_string(bora_config *node, const char *key, const char *def, const char **out)
{
    bora_config *v;
    *out = def;
    bora_status st = scalar_of(node, key, "a string", &v);
    if (st != BORA_OK || !v)
        return st;
    if (strlen(v->text) != v->text_len)
        return type_error(v, "a string without NUL bytes");
    *out = v->text;
    return BORA_OK;
}

bora_status bora_cfg_duration(bora_config *node, const char *key, double def_s, double *out_s)
{
    bora_config *v;
    *out_s = def_s;
    bora_status st = scalar_of(node, key, "a duration such as 90s, 15m or 2h", &v);
    if (st != BORA_OK || !v)
        return st;
    if (bora_parse_duration(v->text, out_s)) {
        *out_s = def_s;
        return type_error(v, "a duration such as 90s, 15m or 2h");
    }
    return BORA_OK;
}

bora_status bora_cfg_bytes(bora_config *node, const char *key, uint64_t def, uint64_t *out)
{
    bora_config *v;
    *out = def;
    bora_status st = scalar_of(node, key, "a size such as 512MB or 4GiB", &v);
    if (st != BORA_OK || !v)
        return st;
    if (bora_parse_bytes(v->text, out)) {
        *out = def;
        return type_error(v, "a size such as 512MB or 4GiB");
    }
    return BORA_OK;
}

bora_status bora_cfg_list_len(bora_config *node, const char *key, size_t *out)
{
    bora_config *v = key ? bora_cfg_child(node, key) : node;
    *out = 0;
    if (!v || v->kind == BORA_NODE_NULL)
        return node && node->complained ? BORA_ERR_CONFIG : BORA_OK;
    v->read = 1;
    if (v->kind != BORA_NODE_LIST)
        return type_error(v, "a list");
    *out = v->n;
    return BORA_OK;
}

void cfg_mark_read(bora_config *node)
{
    node->read = 1;
    for (size_t i = 0; i < node->n; i++) {
        if (node->kind == BORA_NODE_MAP)
            node->key_nodes[i]->read = 1;
        cfg_mark_read(node->values[i]);
    }
}
