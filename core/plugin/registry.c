/* core/plugin/registry.c — finding, checking and loading plugins; the component registry. */
#include "registry.h"

#include "../util/log.h"
#include "../util/str.h"
#include "host.h"

#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#ifndef BORA_PLUGIN_RELDIR
#define BORA_PLUGIN_RELDIR "../lib/bora/plugins"
#endif

/* ---- kinds ---------------------------------------------------------------------------- */

typedef struct member {
    size_t offset;
    const char *name;
} member;

#define M(type, field)                \
    {                                 \
        offsetof(type, field), #field \
    }
static const member model_required[] = {
    M(bora_model_ops, create), M(bora_model_ops, build), M(bora_model_ops, destroy), {0, NULL}};
static const member optimizer_required[] = {M(bora_optimizer_ops, create),
                                            M(bora_optimizer_ops, build_update),
                                            M(bora_optimizer_ops, destroy),
                                            {0, NULL}};
static const member backend_required[] = {M(bora_backend_ops, probe),
                                          M(bora_backend_ops, create),
                                          M(bora_backend_ops, destroy),
                                          M(bora_backend_ops, buffer_alloc),
                                          M(bora_backend_ops, buffer_free),
                                          M(bora_backend_ops, copy_in),
                                          M(bora_backend_ops, copy_out),
                                          M(bora_backend_ops, kernel),
                                          {0, NULL}};
static const member tracker_required[] = {
    M(bora_tracker_ops, create), M(bora_tracker_ops, log), M(bora_tracker_ops, destroy), {0, NULL}};
#undef M

typedef struct kind_info {
    int kind;
    const char *name;
    size_t ops_size;
    const member *required;
} kind_info;

static const kind_info kinds[] = {
    {BORA_KIND_MODEL, "model", sizeof(bora_model_ops), model_required},
    {BORA_KIND_OPTIMIZER, "optimizer", sizeof(bora_optimizer_ops), optimizer_required},
    {BORA_KIND_BACKEND, "backend", sizeof(bora_backend_ops), backend_required},
    {BORA_KIND_TRACKER, "tracker", sizeof(bora_tracker_ops), tracker_required},
};

static const kind_info *kind_lookup(int kind)
{
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (kinds[i].kind == kind)
            return &kinds[i];
    return NULL;
}

const char *bora_kind_name(int kind)
{
    const kind_info *k = kind_lookup(kind);
    return k ? k->name : "unknown";
}

int bora_kind_parse(const char *s)
{
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
        if (strcmp(kinds[i].name, s) == 0)
            return kinds[i].kind;
    return 0;
}

size_t bora_kind_ops_size(int kind)
{
    const kind_info *k = kind_lookup(kind);
    return k ? k->ops_size : 0;
}

/* ---- search path ---------------------------------------------------------------------- */

bora_registry *bora_registry_new(void)
{
    return calloc(1, sizeof(bora_registry));
}

bora_status bora_registry_add_dir(bora_registry *reg, const char *dir, int must_exist)
{
    struct stat st;
    int found = stat(dir, &st) == 0;
    if (!found || !S_ISDIR(st.st_mode)) {
        if (must_exist)
            return bora_error_set(BORA_ERR_NOT_FOUND, "plugin directory '%s': %s", dir,
                                  found ? "not a directory" : strerror(errno));
        return BORA_OK;
    }
    char **dirs = realloc(reg->dirs, (reg->n_dirs + 1) * sizeof *dirs);
    if (!dirs)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    reg->dirs = dirs;
    char real[PATH_MAX];
    reg->dirs[reg->n_dirs] = bora_strdup(realpath(dir, real) ? real : dir);
    if (!reg->dirs[reg->n_dirs])
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    reg->n_dirs++;
    return BORA_OK;
}

bora_status bora_registry_add_path_list(bora_registry *reg, const char *list)
{
    const char *p = list;
    while (p && *p) {
        const char *colon = strchr(p, ':');
        size_t len = colon ? (size_t)(colon - p) : strlen(p);
        if (len > 0) {
            char *dir = bora_strndup(p, len);
            if (!dir)
                return bora_error_set(BORA_ERR_NOMEM, "out of memory");
            bora_status s = bora_registry_add_dir(reg, dir, 0);
            free(dir);
            if (s != BORA_OK)
                return s;
        }
        p = colon ? colon + 1 : NULL;
    }
    return BORA_OK;
}

bora_status bora_default_plugin_dir(char *buf, size_t cap)
{
    char exe[PATH_MAX];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (n <= 0)
        return bora_error_set(BORA_ERR_NOT_FOUND, "cannot find the bora executable: %s",
                              strerror(errno));
    exe[n] = 0;
    char *slash = strrchr(exe, '/');
    if (slash)
        *slash = 0;
    int w = snprintf(buf, cap, "%s/%s", exe, BORA_PLUGIN_RELDIR);
    if (w < 0 || (size_t)w >= cap)
        return bora_error_set(BORA_ERR_INVALID, "plugin directory path too long");
    return BORA_OK;
}

/* ---- refusals ------------------------------------------------------------------------- */

static void refuse(bora_registry *reg, const char *path, int level, const char *fmt, ...)
    BORA_PRINTF(4, 5);
static void refuse(bora_registry *reg, const char *path, int level, const char *fmt, ...)
{
    char reason[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(reason, sizeof reason, fmt, ap);
    va_end(ap);
    bora_log(level, "skipping %s: %s", path, reason);
    if (level > BORA_LOG_WARN)
        return; /* unavailable files are kept on their file record, not as refusals */
    bora_refusal *r = realloc(reg->refusals, (reg->n_refusals + 1) * sizeof *r);
    if (!r)
        return;
    reg->refusals = r;
    r[reg->n_refusals].path = bora_strdup(path);
    r[reg->n_refusals].reason = bora_strdup(reason);
    reg->n_refusals++;
}

static void file_set_reason(bora_plugin_file *f, int state, const char *reason)
{
    f->state = state;
    free(f->reason);
    f->reason = bora_strdup(reason);
}

/* ---- registration (host->add) --------------------------------------------------------- */

static int valid_name(const char *s)
{
    if (!s || !*s || strlen(s) > 64)
        return 0;
    for (; *s; s++)
        if (!((*s >= 'a' && *s <= 'z') || (*s >= 'A' && *s <= 'Z') || (*s >= '0' && *s <= '9') ||
              *s == '_' || *s == '-' || *s == '.'))
            return 0;
    return 1;
}

bora_status bora_registry_add_component(bora_plugin_file *f, const bora_component *ops)
{
    bora_registry *reg = f->reg;
    const char *who = f->name ? f->name : f->path;
    if (!f->in_init)
        return bora_error_set(BORA_ERR_INVALID, "%s: add() is only valid during init()", who);
    if (!ops) {
        refuse(reg, f->path, BORA_LOG_WARN, "plugin '%s' added a NULL ops table", who);
        return bora_error_set(BORA_ERR_INVALID, "%s: add(NULL)", who);
    }
    const kind_info *k = kind_lookup((int)ops->kind);
    const char *name = valid_name(ops->name) ? ops->name : NULL;
    char what[128];
    snprintf(what, sizeof what, "%s '%s'", k ? k->name : "component", name ? name : "?");

    const char *problem = NULL;
    char buf[512];
    if (!k) {
        snprintf(buf, sizeof buf, "plugin '%s' added a component of unknown kind %u", who,
                 ops->kind);
        problem = buf;
    } else if (!name) {
        snprintf(buf, sizeof buf,
                 "plugin '%s' added a %s with an invalid name (use letters, "
                 "digits, '_', '-', '.')",
                 who, k->name);
        problem = buf;
    } else if (ops->struct_size < sizeof(bora_component)) {
        snprintf(buf, sizeof buf, "%s: ops table is %u bytes, smaller than its header (%zu)", what,
                 ops->struct_size, sizeof(bora_component));
        problem = buf;
    } else if (ops->struct_size > k->ops_size) {
        snprintf(buf, sizeof buf,
                 "%s: ops table is %u bytes but this host knows %zu (built against a newer SDK?)",
                 what, ops->struct_size, k->ops_size);
        problem = buf;
    }
    if (problem) {
        f->n_add_refused++;
        refuse(reg, f->path, BORA_LOG_WARN, "%s", problem);
        return bora_error_set(BORA_ERR_VERSION, "%s", problem);
    }

    /* Copy what the plugin knows into a zeroed table of the host's size. */
    bora_component *copy = calloc(1, k->ops_size);
    if (!copy)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    memcpy(copy, ops, ops->struct_size);

    for (const member *m = k->required; m->name; m++) {
        void (*fn)(void) = NULL;
        memcpy(&fn, (const char *)copy + m->offset, sizeof fn);
        if (!fn) {
            f->n_add_refused++;
            refuse(reg, f->path, BORA_LOG_WARN, "%s lacks required member '%s'", what, m->name);
            free(copy);
            return bora_error_set(BORA_ERR_INVALID, "%s lacks required member '%s'", what, m->name);
        }
    }
    for (size_t i = 0; i < reg->n_entries; i++) {
        const bora_entry *e = &reg->entries[i];
        if (e->kind == k->kind && strcmp(e->ops->name, name) == 0) {
            f->n_add_refused++;
            refuse(reg, f->path, BORA_LOG_WARN, "duplicate %s: %s already provides it (kept)", what,
                   e->file->path);
            free(copy);
            return bora_error_set(BORA_ERR_INVALID, "duplicate %s", what);
        }
    }
    bora_entry *entries = realloc(reg->entries, (reg->n_entries + 1) * sizeof *entries);
    if (!entries) {
        free(copy);
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    }
    reg->entries = entries;
    reg->entries[reg->n_entries++] = (bora_entry){k->kind, copy, f};
    f->n_components++;
    return BORA_OK;
}

/* Drop the components a plugin registered (its init failed after some add() calls). */
static void drop_components(bora_registry *reg, const bora_plugin_file *f)
{
    size_t w = 0;
    for (size_t i = 0; i < reg->n_entries; i++) {
        if (reg->entries[i].file == f)
            free((void *)reg->entries[i].ops);
        else
            reg->entries[w++] = reg->entries[i];
    }
    reg->n_entries = w;
}

/* ---- loading one file ----------------------------------------------------------------- */

static void load_file(bora_registry *reg, bora_plugin_file *f)
{
    dlerror();
    void *handle = dlopen(f->path, RTLD_NOW | RTLD_LOCAL);
    if (!handle) {
        const char *err = dlerror();
        char reason[1024];
        snprintf(reason, sizeof reason, "cannot be loaded: %s", err ? err : "unknown error");
        file_set_reason(f, BORA_FILE_UNAVAILABLE, reason);
        refuse(reg, f->path, BORA_LOG_DEBUG, "%s", reason);
        return;
    }
    /* Never dlclose: components and strings point into the library for the whole run. */
    union {
        void *obj;
        bora_plugin_entry_fn fn;
    } sym;
    sym.obj = dlsym(handle, BORA_PLUGIN_ENTRY_SYMBOL);
    char reason[1024];
    if (!sym.obj) {
        snprintf(reason, sizeof reason, "not a bora plugin (no '%s' symbol)",
                 BORA_PLUGIN_ENTRY_SYMBOL);
        goto refused;
    }
    const bora_plugin *d = sym.fn();
    if (!d) {
        snprintf(reason, sizeof reason, "%s() returned NULL", BORA_PLUGIN_ENTRY_SYMBOL);
        goto refused;
    }
    f->abi_major = d->abi_major;
    f->abi_minor = d->abi_minor;
    /* The version fields are the only ones read before the version check. */
    if (d->abi_major != BORA_ABI_MAJOR) {
        snprintf(reason, sizeof reason, "plugin was built for ABI %u.%u; this host speaks %d.%d",
                 d->abi_major, d->abi_minor, BORA_ABI_MAJOR, BORA_ABI_MINOR);
        goto refused;
    }
    if (d->abi_minor > BORA_ABI_MINOR) {
        snprintf(reason, sizeof reason,
                 "plugin was built for ABI %u.%u, newer than this host's %d.%d; upgrade bora",
                 d->abi_major, d->abi_minor, BORA_ABI_MAJOR, BORA_ABI_MINOR);
        goto refused;
    }
    if (d->struct_size < offsetof(bora_plugin, fini) || d->struct_size > sizeof(bora_plugin)) {
        snprintf(reason, sizeof reason, "plugin descriptor is %u bytes; this host expects %zu",
                 d->struct_size, sizeof(bora_plugin));
        goto refused;
    }
    memcpy(&f->desc, d, d->struct_size);
    if (!valid_name(f->desc.name)) {
        snprintf(reason, sizeof reason, "plugin descriptor has no valid name");
        goto refused;
    }
    f->name = bora_strdup(f->desc.name);
    f->version = bora_strdup(f->desc.version ? f->desc.version : "?");
    if (!f->desc.init) {
        snprintf(reason, sizeof reason, "plugin '%s' lacks required member 'init'", f->name);
        goto refused;
    }
    bora_host_init_for_plugin(&f->host, f);
    f->in_init = 1;
    bora_error_clear();
    bora_status st = f->desc.init(&f->host);
    f->in_init = 0;
    if (st != BORA_OK) {
        drop_components(reg, f);
        f->n_components = 0;
        if (f->n_add_refused) {
            /* init passed on add()'s refusal, which was already reported in one line. */
            file_set_reason(f, BORA_FILE_REFUSED, reg->refusals[reg->n_refusals - 1].reason);
            return;
        }
        snprintf(reason, sizeof reason, "plugin '%s' init failed: %s", f->name, bora_error_get());
        goto refused;
    }
    f->state = BORA_FILE_LOADED;
    return;
refused:
    file_set_reason(f, BORA_FILE_REFUSED, reason);
    refuse(reg, f->path, BORA_LOG_WARN, "%s", reason);
}

static int is_plugin_file_name(const char *n)
{
    size_t len = strlen(n);
    return strncmp(n, "bora-", 5) == 0 && len > 8 && strcmp(n + len - 3, ".so") == 0;
}

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static int seen_basename(const bora_registry *reg, const char *base)
{
    for (size_t i = 0; i < reg->n_files; i++) {
        const char *b = strrchr(reg->files[i]->path, '/');
        if (strcmp(b ? b + 1 : reg->files[i]->path, base) == 0)
            return 1;
    }
    return 0;
}

static bora_status load_dir(bora_registry *reg, const char *dir)
{
    DIR *d = opendir(dir);
    if (!d) {
        bora_log(BORA_LOG_WARN, "cannot read plugin directory '%s': %s", dir, strerror(errno));
        return BORA_OK;
    }
    char **names = NULL;
    size_t n = 0;
    struct dirent *de;
    while ((de = readdir(d))) {
        if (!is_plugin_file_name(de->d_name))
            continue;
        char **nn = realloc(names, (n + 1) * sizeof *nn);
        if (!nn)
            break;
        names = nn;
        names[n] = bora_strdup(de->d_name);
        if (names[n])
            n++;
    }
    closedir(d);
    qsort(names, n, sizeof *names, cmp_str);
    for (size_t i = 0; i < n; i++) {
        if (seen_basename(reg, names[i])) {
            bora_log(BORA_LOG_DEBUG, "%s/%s is shadowed by an earlier directory", dir, names[i]);
            free(names[i]);
            continue;
        }
        bora_plugin_file *f = calloc(1, sizeof *f);
        bora_plugin_file **files = realloc(reg->files, (reg->n_files + 1) * sizeof *files);
        if (!f || !files) {
            free(f);
            free(names[i]);
            continue;
        }
        reg->files = files;
        f->reg = reg;
        f->path = bora_path_join(dir, names[i]);
        free(names[i]);
        if (!f->path) {
            free(f);
            continue;
        }
        reg->files[reg->n_files++] = f;
        load_file(reg, f);
    }
    free(names);
    return BORA_OK;
}

bora_status bora_registry_load(bora_registry *reg)
{
    for (size_t i = 0; i < reg->n_dirs; i++) {
        /* The same directory named twice (a path and the default) is scanned once. */
        int dup = 0;
        for (size_t j = 0; j < i && !dup; j++)
            dup = bora_same_file(reg->dirs[i], reg->dirs[j]);
        if (!dup)
            load_dir(reg, reg->dirs[i]);
    }
    return BORA_OK;
}

/* ---- lookup --------------------------------------------------------------------------- */

const bora_entry *bora_registry_find(const bora_registry *reg, int kind, const char *name)
{
    for (size_t i = 0; i < reg->n_entries; i++)
        if (reg->entries[i].kind == kind && strcmp(reg->entries[i].ops->name, name) == 0)
            return &reg->entries[i];
    const char *kn = bora_kind_name(kind);
    /* A file named for it that could not be used explains the absence best. */
    char expect[256];
    snprintf(expect, sizeof expect, "bora-%s-%s.so", kn, name);
    for (size_t i = 0; i < reg->n_files; i++) {
        const bora_plugin_file *f = reg->files[i];
        const char *b = strrchr(f->path, '/');
        if (f->state != BORA_FILE_LOADED && strcmp(b ? b + 1 : f->path, expect) == 0) {
            bora_error_set(BORA_ERR_NOT_FOUND, "%s '%s' is not available: %s %s", kn, name, f->path,
                           f->reason ? f->reason : "could not be used");
            return NULL;
        }
    }
    char avail[1024] = "";
    size_t used = 0;
    for (size_t i = 0; i < reg->n_entries && used < sizeof avail - 64; i++) {
        if (reg->entries[i].kind != kind)
            continue;
        int w = snprintf(avail + used, sizeof avail - used, "%s%s", used ? ", " : "",
                         reg->entries[i].ops->name);
        if (w > 0)
            used += (size_t)w;
    }
    const char *close = NULL;
    size_t best = 3;
    for (size_t i = 0; i < reg->n_entries; i++) {
        if (reg->entries[i].kind != kind)
            continue;
        size_t dist = bora_edit_distance(name, reg->entries[i].ops->name);
        if (dist < best) {
            best = dist;
            close = reg->entries[i].ops->name;
        }
    }
    if (close)
        bora_error_set(BORA_ERR_NOT_FOUND, "no %s named '%s'; did you mean '%s'?", kn, name, close);
    else if (used)
        bora_error_set(BORA_ERR_NOT_FOUND, "no %s named '%s'; available: %s", kn, name, avail);
    else
        bora_error_set(BORA_ERR_NOT_FOUND,
                       "no %s named '%s', and no %s plugins were found (see `bora plugins`)", kn,
                       name, kn);
    return NULL;
}

void bora_registry_free(bora_registry *reg)
{
    if (!reg)
        return;
    for (size_t i = 0; i < reg->n_files; i++)
        if (reg->files[i]->state == BORA_FILE_LOADED && reg->files[i]->desc.fini)
            reg->files[i]->desc.fini();
    for (size_t i = 0; i < reg->n_entries; i++)
        free((void *)reg->entries[i].ops);
    for (size_t i = 0; i < reg->n_files; i++) {
        bora_plugin_file *f = reg->files[i];
        free(f->path);
        free(f->reason);
        free(f->name);
        free(f->version);
        free(f);
    }
    for (size_t i = 0; i < reg->n_refusals; i++) {
        free(reg->refusals[i].path);
        free(reg->refusals[i].reason);
    }
    for (size_t i = 0; i < reg->n_dirs; i++)
        free(reg->dirs[i]);
    free(reg->refusals);
    free(reg->entries);
    free(reg->files);
    free(reg->dirs);
    free(reg);
}

/* The backend trainer.backend names, or the highest probe() for auto. */
const bora_entry *bora_registry_pick_backend(const bora_registry *reg, const char *name)
{
    if (strcmp(name, "auto") != 0)
        return bora_registry_find(reg, BORA_KIND_BACKEND, name);
    const bora_entry *best = NULL;
    int32_t best_score = 0;
    for (size_t i = 0; i < reg->n_entries; i++) {
        const bora_entry *e = &reg->entries[i];
        if (e->kind != BORA_KIND_BACKEND)
            continue;
        int32_t score = ((const bora_backend_ops *)e->ops)->probe(&e->file->host);
        if (score > best_score)
            best = e, best_score = score;
    }
    if (!best)
        bora_error_set(BORA_ERR_NOT_FOUND, "no backend can run here (see bora plugins)");
    return best;
}
