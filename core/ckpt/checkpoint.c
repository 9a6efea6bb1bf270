/* core/ckpt/checkpoint.c — atomic checkpoint directories (see checkpoint.h). */
#include "checkpoint.h"

#include "../util/log.h"
#include "../util/str.h"
#include "safetensors.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

bora_status bora_mkdir_p(const char *path)
{
    char buf[4096];
    if (snprintf(buf, sizeof buf, "%s", path) >= (int)sizeof buf)
        return bora_error_set(BORA_ERR_INVALID, "%s: path too long", path);
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || !*p) {
            char c = *p;
            *p = 0;
            if (mkdir(buf, 0777) != 0 && errno != EEXIST)
                return bora_error_set(BORA_ERR_IO, "cannot make %s: %s", buf, strerror(errno));
            *p = c;
            if (!c)
                break;
        }
    }
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode))
        return bora_error_set(BORA_ERR_IO, "%s: not a directory", path);
    return BORA_OK;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static bora_status rm_rf(const char *path)
{
    if (nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS) != 0 && errno != ENOENT)
        return bora_error_set(BORA_ERR_IO, "cannot remove %s: %s", path, strerror(errno));
    return BORA_OK;
}

static bora_status fsync_path(const char *path)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return bora_error_set(BORA_ERR_IO, "%s: %s", path, strerror(errno));
    int rc = fsync(fd);
    int err = errno;
    close(fd);
    if (rc != 0)
        return bora_error_set(BORA_ERR_IO, "fsync %s: %s", path, strerror(err));
    return BORA_OK;
}

static bora_status write_text(const char *path, const char *text)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return bora_error_set(BORA_ERR_IO, "%s: %s", path, strerror(errno));
    size_t n = strlen(text);
    int bad = fwrite(text, 1, n, f) != n;
    bad |= fflush(f) != 0;
    bad |= fsync(fileno(f)) != 0;
    bad |= fclose(f) != 0;
    if (bad)
        return bora_error_set(BORA_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    return BORA_OK;
}

/* Copy a block of the store (parameters or one state slot's copy of the layout) to the host. */
static bora_status block_out(const g_store *s, bora_buffer *buf, size_t offset, char **out)
{
    *out = malloc(s->param_bytes ? s->param_bytes : 1);
    if (!*out)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory for a checkpoint");
    bora_status st = s->ops->copy_out(s->backend, *out, buf, offset, s->param_bytes);
    if (st != BORA_OK) {
        free(*out);
        *out = NULL;
    }
    return st;
}

static bora_status write_block(const g_store *s, const char *path, const char *const *slots)
{
    size_t n_blocks = 1;
    if (slots)
        for (n_blocks = 0; slots[n_blocks]; n_blocks++)
            ;
    size_t n = n_blocks * s->n_slots;
    bora_st_entry *e = calloc(n ? n : 1, sizeof *e);
    char **names = calloc(n ? n : 1, sizeof *names);
    char **blocks = calloc(n_blocks ? n_blocks : 1, sizeof *blocks);
    bora_status st =
        e && names && blocks ? BORA_OK : bora_error_set(BORA_ERR_NOMEM, "out of memory");
    for (size_t b = 0; b < n_blocks && st == BORA_OK; b++)
        st = slots ? block_out(s, s->states, b * s->param_bytes, &blocks[b])
                   : block_out(s, s->params, 0, &blocks[b]);
    for (size_t b = 0; b < n_blocks && st == BORA_OK; b++) {
        for (size_t i = 0; i < s->n_slots; i++) {
            const g_slot *sl = &s->slots[i];
            size_t k = b * s->n_slots + i;
            if (slots) {
                size_t len = strlen(slots[b]) + strlen(sl->name) + 2;
                if (!(names[k] = malloc(len))) {
                    st = bora_error_set(BORA_ERR_NOMEM, "out of memory");
                    break;
                }
                snprintf(names[k], len, "%s.%s", slots[b], sl->name);
            }
            e[k] = (bora_st_entry){slots ? names[k] : sl->name, sl->dtype, sl->ndim, sl->dims,
                                   blocks[b] + sl->offset};
        }
    }
    if (st == BORA_OK)
        st = bora_st_write(path, e, n, NULL, 0);
    for (size_t k = 0; names && k < n; k++)
        free(names[k]);
    for (size_t b = 0; blocks && b < n_blocks; b++)
        free(blocks[b]);
    free(names);
    free(blocks);
    free(e);
    return st;
}

bora_status bora_ckpt_save(const g_store *s, const char *const *slots, const char *run_dir,
                           int64_t step, const char *trainer_json, char *dir, size_t cap)
{
    bora_status st = bora_mkdir_p(run_dir);
    if (st != BORA_OK)
        return st;
    char tmp[4096], path[4200], old[4096];
    snprintf(tmp, sizeof tmp, "%s/.tmp-step-%" PRId64 "-%ld", run_dir, step, (long)getpid());
    snprintf(old, sizeof old, "%s/.old-step-%" PRId64 "-%ld", run_dir, step, (long)getpid());
    if (snprintf(dir, cap, "%s/step-%" PRId64, run_dir, step) >= (int)cap)
        return bora_error_set(BORA_ERR_INVALID, "%s: path too long", run_dir);
    rm_rf(tmp);
    if (mkdir(tmp, 0777) != 0)
        return bora_error_set(BORA_ERR_IO, "cannot make %s: %s", tmp, strerror(errno));
    snprintf(path, sizeof path, "%s/model.safetensors", tmp);
    st = write_block(s, path, NULL);
    if (st == BORA_OK && slots && slots[0] && s->n_states) {
        snprintf(path, sizeof path, "%s/optimizer.safetensors", tmp);
        st = write_block(s, path, slots);
    }
    if (st == BORA_OK) {
        snprintf(path, sizeof path, "%s/trainer.json", tmp);
        st = write_text(path, trainer_json);
    }
    if (st == BORA_OK)
        st = fsync_path(tmp);
    /* A checkpoint of the same step already there (a rerun of a finished run) is replaced. */
    int had_old = 0;
    if (st == BORA_OK && access(dir, F_OK) == 0) {
        if (rename(dir, old) != 0)
            st = bora_error_set(BORA_ERR_IO, "cannot move %s aside: %s", dir, strerror(errno));
        had_old = 1;
    }
    if (st == BORA_OK && rename(tmp, dir) != 0)
        st = bora_error_set(BORA_ERR_IO, "cannot rename %s to %s: %s", tmp, dir, strerror(errno));
    if (st == BORA_OK)
        st = fsync_path(run_dir);
    if (st != BORA_OK) {
        char keep[1024];
        snprintf(keep, sizeof keep, "%s", bora_error_get());
        rm_rf(tmp);
        return bora_error_set(st, "%s", keep);
    }
    if (had_old)
        rm_rf(old);
    return BORA_OK;
}

static int parse_step(const char *name, int64_t *step)
{
    if (strncmp(name, "step-", 5) != 0 || !name[5])
        return 0;
    int64_t v = 0;
    for (const char *p = name + 5; *p; p++) {
        if (*p < '0' || *p > '9' || v > (INT64_MAX - 9) / 10)
            return 0;
        v = v * 10 + (*p - '0');
    }
    *step = v;
    return 1;
}

static int cmp_i64(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;
    return (x > y) - (x < y);
}

bora_status bora_ckpt_list(const char *run_dir, int64_t **steps, size_t *n)
{
    *steps = NULL;
    *n = 0;
    DIR *d = opendir(run_dir);
    if (!d) {
        if (errno == ENOENT)
            return BORA_OK;
        return bora_error_set(BORA_ERR_IO, "%s: %s", run_dir, strerror(errno));
    }
    size_t cap = 0;
    bora_status st = BORA_OK;
    struct dirent *ent;
    while ((ent = readdir(d)) != NULL && st == BORA_OK) {
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", run_dir, ent->d_name);
        if (!strncmp(ent->d_name, ".tmp-step-", 10) || !strncmp(ent->d_name, ".old-step-", 10)) {
            bora_log(BORA_LOG_INFO, "checkpoint: removing %s, left by a save that did not finish",
                     path);
            rm_rf(path);
            continue;
        }
        int64_t step;
        struct stat sb;
        if (!parse_step(ent->d_name, &step) || stat(path, &sb) != 0 || !S_ISDIR(sb.st_mode))
            continue;
        if (*n == cap) {
            cap = cap ? 2 * cap : 16;
            int64_t *grown = realloc(*steps, cap * sizeof *grown);
            if (!grown) {
                st = bora_error_set(BORA_ERR_NOMEM, "out of memory");
                break;
            }
            *steps = grown;
        }
        (*steps)[(*n)++] = step;
    }
    closedir(d);
    if (st != BORA_OK) {
        free(*steps);
        *steps = NULL;
        *n = 0;
        return st;
    }
    if (*n)
        qsort(*steps, *n, sizeof **steps, cmp_i64);
    return BORA_OK;
}

bora_status bora_ckpt_remove(const char *run_dir, int64_t step)
{
    /* Renamed away first, so that a process killed while deleting never leaves a half
     * checkpoint under a step's name (the next listing removes the rest). */
    char path[4200], old[4200];
    snprintf(path, sizeof path, "%s/step-%" PRId64, run_dir, step);
    snprintf(old, sizeof old, "%s/.old-step-%" PRId64 "-%ld", run_dir, step, (long)getpid());
    if (rename(path, old) != 0)
        return bora_error_set(BORA_ERR_IO, "%s: cannot remove: %s", path, strerror(errno));
    return rm_rf(old);
}

static void shape_text(char *buf, size_t cap, int ndim, const int64_t *dims)
{
    size_t at = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && at < cap; i++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%" PRId64, i ? ", " : "", dims[i]);
    if (at < cap)
        snprintf(buf + at, cap - at, "]");
}

/* Read block b of the store (parameters, or state slot b) from a safetensors file. */
static bora_status read_block(g_store *s, const char *path, const char *const *slots)
{
    bora_safetensors *f;
    bora_status st = bora_st_open(path, &f);
    if (st != BORA_OK)
        return st;
    size_t n_blocks = 1;
    if (slots)
        for (n_blocks = 0; slots[n_blocks]; n_blocks++)
            ;
    char *block = malloc(s->param_bytes ? s->param_bytes : 1);
    if (!block)
        st = bora_error_set(BORA_ERR_NOMEM, "out of memory");
    if (st == BORA_OK && f->n_tensors != n_blocks * s->n_slots)
        st = bora_error_set(BORA_ERR_INVALID, "%s: %zu tensors, the run has %zu", path,
                            f->n_tensors, n_blocks * s->n_slots);
    for (size_t b = 0; b < n_blocks && st == BORA_OK; b++) {
        for (size_t i = 0; i < s->n_slots && st == BORA_OK; i++) {
            const g_slot *sl = &s->slots[i];
            char name[1024];
            snprintf(name, sizeof name, "%s%s%s", slots ? slots[b] : "", slots ? "." : "",
                     sl->name);
            const bora_st_tensor *t = bora_st_find(f, name);
            int same = t && t->dtype == sl->dtype && t->ndim == sl->ndim;
            for (int d = 0; same && d < sl->ndim; d++)
                same = t->shape[d] == sl->dims[d];
            if (!t) {
                st = bora_error_set(BORA_ERR_INVALID, "%s: no tensor '%s'", path, name);
            } else if (!same) {
                char want[128], got[128];
                shape_text(want, sizeof want, sl->ndim, sl->dims);
                shape_text(got, sizeof got, t->ndim, t->shape);
                st = bora_error_set(BORA_ERR_INVALID,
                                    "%s: tensor '%s' is %s %s, the model has %s %s", path, name,
                                    t->st_dtype, got, bora_st_dtype_name(sl->dtype), want);
            } else {
                st = bora_st_read(f, t, block + sl->offset, sl->nbytes);
            }
        }
        if (st == BORA_OK)
            st = slots ? s->ops->copy_in(s->backend, s->states, b * s->param_bytes, block,
                                         s->param_bytes)
                       : s->ops->copy_in(s->backend, s->params, 0, block, s->param_bytes);
        if (!slots)
            g_store_params_changed(s); /* even a failed copy may have written some */
    }
    free(block);
    bora_st_close(f);
    return st;
}

bora_status bora_ckpt_load_model(g_store *s, const char *dir)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    return read_block(s, path, NULL);
}

bora_status bora_ckpt_load_optimizer(g_store *s, const char *const *slots, const char *dir)
{
    if (!slots || !slots[0] || !s->n_states)
        return BORA_OK;
    char path[4200];
    snprintf(path, sizeof path, "%s/optimizer.safetensors", dir);
    return read_block(s, path, slots);
}

bora_status bora_ckpt_read_trainer(const char *dir, char **json)
{
    char path[4200];
    size_t len;
    snprintf(path, sizeof path, "%s/trainer.json", dir);
    return bora_read_file(path, 64u << 20, json, &len);
}
