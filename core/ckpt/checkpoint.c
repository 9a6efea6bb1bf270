/* core/ckpt/checkpoint.c — atomic checkpoint directories (see checkpoint.h). */
#include "checkpoint.h"
#include "../config/config.h"

#include "../util/log.h"
#include "../util/str.h"
#include "safetensors.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>
#include <xxhash.h>

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

void bora_ckpt_digest(const void *data, size_t nbytes, char out[BORA_CKPT_DIGEST_LEN])
{
    snprintf(out, BORA_CKPT_DIGEST_LEN, "xxh3-64:%016llx",
             (unsigned long long)XXH3_64bits(data, nbytes));
}

/* The index of the first non-finite value of a floating-point tensor, or -1 (integers have
 * none). Read through the bits: the data may be unaligned, and a NaN compares unequal. */
static int64_t first_non_finite(int32_t dtype, const unsigned char *p, size_t nbytes, int *nan)
{
    size_t size = bora_dtype_size(dtype);
    uint64_t exp_mask, man_mask;
    switch (dtype) {
    case BORA_DTYPE_F64: exp_mask = 0x7ff0000000000000ull, man_mask = 0x000fffffffffffffull; break;
    case BORA_DTYPE_F32: exp_mask = 0x7f800000u, man_mask = 0x007fffffu; break;
    case BORA_DTYPE_F16: exp_mask = 0x7c00u, man_mask = 0x03ffu; break;
    case BORA_DTYPE_BF16: exp_mask = 0x7f80u, man_mask = 0x007fu; break;
    default: return -1;
    }
    for (size_t i = 0; i + size <= nbytes; i += size) {
        uint64_t bits = 0;
        memcpy(&bits, p + i, size); /* little-endian hosts, as the files */
        if ((bits & exp_mask) == exp_mask) {
            *nan = (bits & man_mask) != 0;
            return (int64_t)(i / size);
        }
    }
    return -1;
}

bora_status bora_ckpt_check_tensor(const char *file, const char *name, int32_t dtype,
                                   const void *data, size_t nbytes, const char *want)
{
    if (want) {
        char got[BORA_CKPT_DIGEST_LEN];
        if (strncmp(want, "xxh3-64:", 8) != 0)
            return bora_error_set(BORA_ERR_INVALID,
                                  "%s: tensor '%s' has a recorded digest '%.40s' of a kind bora "
                                  "does not know (xxh3-64 expected)",
                                  file, name, want);
        bora_ckpt_digest(data, nbytes, got);
        if (strcmp(got, want) != 0)
            return bora_error_set(BORA_ERR_INVALID,
                                  "%s: tensor '%s' does not match the digest trainer.json "
                                  "records (%.40s, the file's bytes give %s): the file is "
                                  "damaged; use an earlier checkpoint, or a good copy of this one",
                                  file, name, want, got);
    }
    int nan = 0;
    int64_t at = first_non_finite(dtype, data, nbytes, &nan);
    if (at >= 0)
        return bora_error_set(BORA_ERR_INVALID,
                              "%s: tensor '%s' holds %s at element %" PRId64
                              ": a checkpoint holds only finite values; use an earlier checkpoint",
                              file, name, nan ? "NaN" : "an infinity", at);
    return BORA_OK;
}

/* How many state blocks parameter i has under slots. */
static size_t slot_count(bora_ckpt_slots slots, size_t i)
{
    size_t k = 0;
    while (slots && slots[i] && slots[i][k])
        k++;
    return k;
}

/* Whether any parameter has optimizer state under slots (in a store that keeps some). */
static int has_state(const g_store *s, bora_ckpt_slots slots)
{
    for (size_t i = 0; slots && s->n_states && i < s->n_slots; i++)
        if (slot_count(slots, i))
            return 1;
    return 0;
}

/* The tensors of one file, in file order: every parameter (slots NULL), or state block b of
 * every parameter that has one, b by b. *n gets their count; malloc'ed pairs (block, slot). */
static size_t *file_tensors(const g_store *s, bora_ckpt_slots slots, size_t *n)
{
    size_t n_blocks = slots ? s->n_states : 1, total = 0;
    size_t *pairs = malloc(2 * (n_blocks * s->n_slots + 1) * sizeof *pairs);
    for (size_t b = 0; pairs && b < n_blocks; b++)
        for (size_t i = 0; i < s->n_slots; i++)
            if (!slots || b < slot_count(slots, i)) {
                pairs[2 * total] = b, pairs[2 * total + 1] = i;
                total++;
            }
    *n = total;
    return pairs;
}

/* Write one block as a safetensors file; the digest of each tensor goes to digests as
 * "file": {"tensor": "xxh3-64:...", ...} after sep. */
static bora_status write_block(const g_store *s, const char *path, bora_ckpt_slots slots,
                               FILE *digests, const char *sep)
{
    size_t n_blocks = slots ? s->n_states : 1, n;
    size_t *pairs = file_tensors(s, slots, &n);
    bora_st_entry *e = calloc(n ? n : 1, sizeof *e);
    char **names = calloc(n ? n : 1, sizeof *names);
    char **blocks = calloc(n_blocks ? n_blocks : 1, sizeof *blocks);
    bora_status st =
        e && names && blocks && pairs ? BORA_OK : bora_error_set(BORA_ERR_NOMEM, "out of memory");
    for (size_t b = 0; b < n_blocks && st == BORA_OK; b++)
        if (slots && s->state_host) /* a sharded run's, gathered on the host: used in place */
            blocks[b] = s->state_host + b * s->param_bytes;
        else
            st = slots ? block_out(s, s->states, b * s->param_bytes, &blocks[b])
                       : block_out(s, s->params, 0, &blocks[b]);
    for (size_t k = 0; k < n && st == BORA_OK; k++) {
        size_t b = pairs[2 * k];
        const g_slot *sl = &s->slots[pairs[2 * k + 1]];
        if (slots) {
            const char *slot = slots[pairs[2 * k + 1]][b];
            size_t len = strlen(slot) + strlen(sl->name) + 2;
            if (!(names[k] = malloc(len))) {
                st = bora_error_set(BORA_ERR_NOMEM, "out of memory");
                break;
            }
            snprintf(names[k], len, "%s.%s", slot, sl->name);
        }
        e[k] = (bora_st_entry){slots ? names[k] : sl->name, sl->dtype, sl->ndim, sl->dims,
                               blocks[b] + sl->offset};
    }
    /* Every load refuses a non-finite value, so a save refuses it too: written, it would replace
     * the last checkpoint that can be loaded. */
    for (size_t k = 0; k < n && st == BORA_OK; k++) {
        const g_slot *sl = &s->slots[pairs[2 * k + 1]];
        int nan = 0;
        int64_t at = first_non_finite(sl->dtype, e[k].data, sl->nbytes, &nan);
        if (at >= 0)
            st = bora_error_set(BORA_ERR_INVALID,
                                "tensor '%s' holds %s at element %" PRId64
                                " (the run has diverged): a checkpoint holds only finite values, "
                                "so none is saved; lower optimizer.learning_rate or set "
                                "optimizer.max_grad_norm, and resume from an earlier checkpoint",
                                e[k].name, nan ? "NaN" : "an infinity", at);
    }
    if (st == BORA_OK) {
        const char *file = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
        fprintf(digests, "%s\n    ", sep);
        bora_json_string(digests, file);
        fputs(": {", digests);
        for (size_t k = 0; k < n; k++) {
            char d[BORA_CKPT_DIGEST_LEN];
            bora_ckpt_digest(e[k].data, s->slots[pairs[2 * k + 1]].nbytes, d);
            fputs(k ? ",\n      " : "\n      ", digests);
            bora_json_string(digests, e[k].name);
            fprintf(digests, ": \"%s\"", d);
        }
        fputs("\n    }", digests);
        st = bora_st_write(path, e, n, NULL, 0);
    }
    for (size_t k = 0; names && k < n; k++)
        free(names[k]);
    for (size_t b = 0; blocks && b < n_blocks && !(slots && s->state_host); b++)
        free(blocks[b]);
    free(names);
    free(blocks);
    free(e);
    free(pairs);
    return st;
}

bora_status bora_ckpt_save(const g_store *s, bora_ckpt_slots slots, const char *run_dir,
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
    /* trainer.json gets the digest of every tensor written, as "digests" after its own keys. */
    const char *close = strrchr(trainer_json, '}');
    char *record = NULL;
    size_t record_len = 0;
    FILE *rec = close ? open_memstream(&record, &record_len) : NULL;
    if (!rec)
        st = bora_error_set(close ? BORA_ERR_NOMEM : BORA_ERR_INVALID,
                            close ? "out of memory" : "trainer.json's text is not an object");
    if (st == BORA_OK) {
        size_t keep = (size_t)(close - trainer_json);
        while (keep && (trainer_json[keep - 1] == '\n' || trainer_json[keep - 1] == ' '))
            keep--;
        fwrite(trainer_json, 1, keep, rec);
        fputs(",\n  \"digests\": {", rec);
        snprintf(path, sizeof path, "%s/model.safetensors", tmp);
        st = write_block(s, path, NULL, rec, "");
    }
    if (st == BORA_OK && has_state(s, slots)) {
        snprintf(path, sizeof path, "%s/optimizer.safetensors", tmp);
        st = write_block(s, path, slots, rec, ",");
    }
    if (rec) {
        fputs("\n  }\n}\n", rec);
        if (fclose(rec) != 0 && st == BORA_OK)
            st = bora_error_set(BORA_ERR_NOMEM, "out of memory");
    }
    if (st == BORA_OK) {
        snprintf(path, sizeof path, "%s/trainer.json", tmp);
        st = write_text(path, record);
    }
    free(record);
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

void bora_ckpt_clean(const char *run_dir)
{
    DIR *d = opendir(run_dir);
    struct dirent *ent;
    while (d && (ent = readdir(d)) != NULL) {
        if (strncmp(ent->d_name, ".tmp-step-", 10) != 0 &&
            strncmp(ent->d_name, ".old-step-", 10) != 0)
            continue;
        char path[4200];
        snprintf(path, sizeof path, "%s/%s", run_dir, ent->d_name);
        bora_log(BORA_LOG_INFO, "checkpoint: removing %s, left by a save that did not finish",
                 path);
        rm_rf(path);
    }
    if (d)
        closedir(d);
}

bora_status bora_ckpt_lock(const char *run_dir, int *fd)
{
    *fd = -1;
    bora_status st = bora_mkdir_p(run_dir);
    if (st != BORA_OK)
        return bora_error_set(st,
                              "checkpoints cannot go to %s: %s; give "
                              "trainer.checkpointer.base_path a directory you can write",
                              run_dir, bora_error_get());
    /* access() sees a read-only file system even for root, who passes permission checks. */
    if (access(run_dir, W_OK | X_OK) != 0)
        return bora_error_set(BORA_ERR_IO,
                              "checkpoints cannot go to %s: %s; give "
                              "trainer.checkpointer.base_path a directory you can write",
                              run_dir, strerror(errno));
    char path[4200];
    snprintf(path, sizeof path, "%s/.lock", run_dir);
    int f = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (f < 0)
        return bora_error_set(BORA_ERR_IO,
                              "checkpoints cannot go to %s: cannot open %s: %s; give "
                              "trainer.checkpointer.base_path a directory you can write",
                              run_dir, path, strerror(errno));
    if (flock(f, LOCK_EX | LOCK_NB) != 0) {
        int err = errno;
        char holder[256] = "";
        ssize_t got = err == EWOULDBLOCK ? pread(f, holder, sizeof holder - 1, 0) : -1;
        holder[got > 0 ? got : 0] = 0;
        holder[strcspn(holder, "\n")] = 0;
        close(f);
        if (err != EWOULDBLOCK)
            return bora_error_set(BORA_ERR_IO, "cannot lock %s: %s", path, strerror(err));
        return bora_error_set(BORA_ERR_IO,
                              "run directory %s is in use by another bora train (%s); wait for "
                              "it to end, or give another trainer.id",
                              run_dir, *holder ? holder : "its pid and host not yet written");
    }
    char host[256] = "?", text[400];
    if (gethostname(host, sizeof host) != 0)
        snprintf(host, sizeof host, "?");
    host[sizeof host - 1] = 0;
    int len = snprintf(text, sizeof text, "pid %ld on host %s\n", (long)getpid(), host);
    if (ftruncate(f, 0) != 0 || pwrite(f, text, (size_t)len, 0) != len) {
        int err = errno;
        close(f);
        return bora_error_set(BORA_ERR_IO, "checkpoints cannot go to %s: cannot write %s: %s",
                              run_dir, path, strerror(err));
    }
    *fd = f;
    return BORA_OK;
}

void bora_ckpt_unlock(const char *run_dir, int fd, int made)
{
    if (fd < 0)
        return;
    /* Only .lock there: a start that failed before its first save leaves nothing behind. The
     * file goes while this process still holds the lock, so no other process takes a lock on a
     * file about to vanish; a directory that is not empty stays. */
    int only_lock = made;
    DIR *d = made ? opendir(run_dir) : NULL;
    struct dirent *ent;
    while (d && only_lock && (ent = readdir(d)) != NULL)
        only_lock = !strcmp(ent->d_name, ".") || !strcmp(ent->d_name, "..") ||
                    !strcmp(ent->d_name, ".lock");
    if (d)
        closedir(d);
    if (d && only_lock) {
        char path[4200];
        snprintf(path, sizeof path, "%s/.lock", run_dir);
        if (unlink(path) == 0)
            rmdir(run_dir);
    }
    close(fd);
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

/* Read a block of the store (the parameters, or every state slot) from dir/file, checking each
 * tensor against its digest in file_digests (NULL: none recorded) and for finite values before
 * any of it reaches the backend; with copy 0 only check. */
static bora_status read_block(g_store *s, const char *dir, const char *file, bora_ckpt_slots slots,
                              json_object *file_digests, int copy)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    bora_safetensors *f;
    bora_status st = bora_st_open(path, &f);
    if (st != BORA_OK)
        return st;
    size_t n_blocks = slots ? s->n_states : 1, n;
    size_t *pairs = file_tensors(s, slots, &n);
    char *block = malloc(s->param_bytes ? s->param_bytes : 1);
    if (!block || !pairs)
        st = bora_error_set(BORA_ERR_NOMEM, "out of memory");
    /* names before counts: a missing tensor is named (a resume whose optimizer.groups changed
     * a parameter's slots), and only a file with tensors beyond the run's is counted */
    for (size_t k = 0; k < n && st == BORA_OK; k++) {
        const g_slot *sl = &s->slots[pairs[2 * k + 1]];
        char name[1024];
        snprintf(name, sizeof name, "%s%s%s", slots ? slots[pairs[2 * k + 1]][pairs[2 * k]] : "",
                 slots ? "." : "", sl->name);
        if (!bora_st_find(f, name))
            st = bora_error_set(BORA_ERR_CONFIG, "%s: no tensor '%s'", path, name);
    }
    if (st == BORA_OK && f->n_tensors != n)
        st = bora_error_set(BORA_ERR_CONFIG, "%s: %zu tensors, the run has %zu", path, f->n_tensors,
                            n);
    size_t k = 0;
    for (size_t b = 0; b < n_blocks && st == BORA_OK; b++) {
        int any = 0;
        if (slots) /* a block no parameter uses stays zero, as the store made it */
            memset(block, 0, s->param_bytes);
        for (; k < n && pairs[2 * k] == b && st == BORA_OK; k++) {
            const g_slot *sl = &s->slots[pairs[2 * k + 1]];
            char name[1024];
            snprintf(name, sizeof name, "%s%s%s", slots ? slots[pairs[2 * k + 1]][b] : "",
                     slots ? "." : "", sl->name);
            any = 1;
            const bora_st_tensor *t = bora_st_find(f, name);
            int same = t && t->dtype == sl->dtype && t->ndim == sl->ndim;
            for (int d = 0; same && d < sl->ndim; d++)
                same = t->shape[d] == sl->dims[d];
            json_object *want = NULL;
            if (!t) {
                st = bora_error_set(BORA_ERR_CONFIG, "%s: no tensor '%s'", path, name);
            } else if (!same) {
                char want_shape[128], got[128];
                shape_text(want_shape, sizeof want_shape, sl->ndim, sl->dims);
                shape_text(got, sizeof got, t->ndim, t->shape);
                st = bora_error_set(BORA_ERR_CONFIG,
                                    "%s: tensor '%s' is %s %s, the model has %s %s", path, name,
                                    t->st_dtype, got, bora_st_dtype_name(sl->dtype), want_shape);
            } else if (file_digests && (!json_object_object_get_ex(file_digests, name, &want) ||
                                        !json_object_is_type(want, json_type_string))) {
                st = bora_error_set(BORA_ERR_INVALID,
                                    "%s: %s/trainer.json records no digest for tensor '%s': "
                                    "the checkpoint's files do not belong together",
                                    path, dir, name);
            } else if ((st = bora_st_read(f, t, block + sl->offset, sl->nbytes)) == BORA_OK) {
                st = bora_ckpt_check_tensor(path, name, sl->dtype, block + sl->offset, sl->nbytes,
                                            want ? json_object_get_string(want) : NULL);
            }
        }
        if (st == BORA_OK && copy && slots && s->state_host) /* a sharded run's, on the host */
            memcpy(s->state_host + b * s->param_bytes, block, s->param_bytes);
        else if (st == BORA_OK && copy && (any || slots))
            st = slots ? s->ops->copy_in(s->backend, s->states, b * s->param_bytes, block,
                                         s->param_bytes)
                       : s->ops->copy_in(s->backend, s->params, 0, block, s->param_bytes);
        if (!slots && copy)
            g_store_params_changed(s); /* even a failed copy may have written some */
    }
    free(block);
    free(pairs);
    bora_st_close(f);
    return st;
}

/* dir/trainer.json, parsed, when there is one (else *rec is NULL); its step must be the one its
 * directory is named for. *digests gets its "digests" object, or NULL for a checkpoint saved
 * before bora recorded them (with a warning). */
static bora_status read_record(const char *dir, json_object **rec, json_object **digests)
{
    *rec = *digests = NULL;
    char path[4200];
    snprintf(path, sizeof path, "%s/trainer.json", dir);
    if (access(path, F_OK) != 0) {
        bora_log(BORA_LOG_WARN, "%s has no trainer.json: its tensors are loaded unverified", dir);
        return BORA_OK;
    }
    char *text;
    bora_status st = bora_ckpt_read_trainer(dir, &text);
    if (st != BORA_OK)
        return st;
    *rec = json_tokener_parse(text);
    free(text);
    if (!json_object_is_type(*rec, json_type_object)) {
        json_object_put(*rec);
        *rec = NULL;
        return bora_error_set(BORA_ERR_INVALID, "%s: not a JSON object; restore it as saved", path);
    }
    char trimmed[4200]; /* "step-4/" names step-4 too */
    snprintf(trimmed, sizeof trimmed, "%s", dir);
    for (size_t n = strlen(trimmed); n > 1 && trimmed[n - 1] == '/'; n--)
        trimmed[n - 1] = 0;
    const char *base = strrchr(trimmed, '/') ? strrchr(trimmed, '/') + 1 : trimmed;
    int64_t dir_step;
    json_object *jstep = NULL;
    if (parse_step(base, &dir_step) &&
        (!json_object_object_get_ex(*rec, "step", &jstep) ||
         !json_object_is_type(jstep, json_type_int) || json_object_get_int64(jstep) != dir_step))
        return bora_error_set(
            BORA_ERR_INVALID,
            "%s records step %s, but its directory is %s: a checkpoint's "
            "files belong to the step it is named for; restore the directory "
            "as it was saved",
            path, jstep ? json_object_to_json_string_ext(jstep, JSON_C_TO_STRING_PLAIN) : "none",
            base);
    if (!json_object_object_get_ex(*rec, "digests", digests)) {
        bora_log(BORA_LOG_WARN,
                 "%s records no digests (saved by an older bora): its tensors are checked for "
                 "finite values but not against digests",
                 path);
        *digests = NULL;
    } else if (!json_object_is_type(*digests, json_type_object)) {
        return bora_error_set(BORA_ERR_INVALID, "%s: \"digests\" is not an object", path);
    }
    return BORA_OK;
}

/* Read (copy 1) or only check (copy 0) a checkpoint's model, and with slots its optimizer
 * state. */
static bora_status load_dir(g_store *s, bora_ckpt_slots slots, const char *dir, int copy)
{
    json_object *rec, *digests, *file_digests = NULL;
    bora_status st = read_record(dir, &rec, &digests);
    static const char *const files[] = {"model.safetensors", "optimizer.safetensors"};
    int with_state = has_state(s, slots);
    for (int i = 0; i < 1 + with_state && st == BORA_OK; i++) {
        if (digests && (!json_object_object_get_ex(digests, files[i], &file_digests) ||
                        !json_object_is_type(file_digests, json_type_object)))
            st = bora_error_set(BORA_ERR_INVALID,
                                "%s/trainer.json records no digests for %s: the checkpoint's "
                                "files do not belong together",
                                dir, files[i]);
        else
            st =
                read_block(s, dir, files[i], i ? slots : NULL, digests ? file_digests : NULL, copy);
    }
    json_object_put(rec);
    return st;
}

bora_status bora_ckpt_load_model(g_store *s, const char *dir)
{
    return load_dir(s, NULL, dir, 1);
}

bora_status bora_ckpt_load(g_store *s, bora_ckpt_slots slots, const char *dir)
{
    return load_dir(s, slots, dir, 1);
}

bora_status bora_ckpt_verify(g_store *s, bora_ckpt_slots slots, const char *dir)
{
    return load_dir(s, slots, dir, 0);
}

bora_status bora_ckpt_read_trainer(const char *dir, char **json)
{
    char path[4200];
    size_t len;
    snprintf(path, sizeof path, "%s/trainer.json", dir);
    return bora_read_file(path, 64u << 20, json, &len);
}

bora_status bora_ckpt_load_config(const char *dir, bora_cfg *cfg)
{
    char *text;
    bora_status st = bora_ckpt_read_trainer(dir, &text);
    if (st != BORA_OK)
        return st;
    json_object *o = json_tokener_parse(text), *c = NULL;
    free(text);
    if (!o || !json_object_object_get_ex(o, "config", &c) ||
        !json_object_is_type(c, json_type_object)) {
        json_object_put(o);
        return bora_error_set(BORA_ERR_INVALID, "%s/trainer.json has no configuration", dir);
    }
    const char *cj = json_object_to_json_string_ext(c, JSON_C_TO_STRING_PLAIN);
    char name[4200];
    snprintf(name, sizeof name, "%s/trainer.json", dir);
    st = bora_cfg_load_string(cfg, name, cj, strlen(cj)); /* JSON is YAML */
    json_object_put(o);
    return st;
}
