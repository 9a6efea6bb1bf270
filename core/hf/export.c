/* core/hf/export.c — writing a Hugging Face folder (see export.h): dtype conversion, shards and
 * their index, config.json completed for transformers' config classes, the tokenizer's files,
 * and the atomic move into place. */
#include "export.h"

#include "../ckpt/checkpoint.h"
#include "../data/loader.h"
#include "../data/tokenizer.h"
#include "../util/log.h"
#include "../util/str.h"

#include <ctype.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <inttypes.h>
#include <json-c/json.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

const char *bora_hf_trim_slashes(const char *path, char *buf, size_t cap)
{
    size_t n = strlen(path);
    if (n < 2 || path[n - 1] != '/' || n >= cap)
        return path;
    while (n > 1 && path[n - 1] == '/')
        n--;
    memcpy(buf, path, n);
    buf[n] = 0;
    return buf;
}

bora_status bora_hf_parse_dtype(const char *text, int32_t *dtype)
{
    if (!strcmp(text, "f32"))
        *dtype = BORA_DTYPE_F32;
    else if (!strcmp(text, "bf16"))
        *dtype = BORA_DTYPE_BF16;
    else if (!strcmp(text, "f16"))
        *dtype = BORA_DTYPE_F16;
    else
        return bora_error_set(BORA_ERR_INVALID, "--dtype '%s' is not one of f32, bf16, f16", text);
    return BORA_OK;
}

bora_status bora_hf_parse_size(const char *text, uint64_t *bytes)
{
    static const struct {
        const char *unit;
        uint64_t scale;
    } units[] = {{"", 1},
                 {"b", 1},
                 {"kb", 1000ull},
                 {"mb", 1000000ull},
                 {"gb", 1000000000ull},
                 {"kib", 1ull << 10},
                 {"mib", 1ull << 20},
                 {"gib", 1ull << 30}};
    const char *p = text;
    uint64_t v = 0;
    int digits = 0;
    for (; *p >= '0' && *p <= '9'; p++, digits++) {
        if (v > (UINT64_MAX - 9) / 10)
            digits = -1000; /* too large */
        v = v * 10 + (uint64_t)(*p - '0');
    }
    for (size_t i = 0; digits > 0 && i < sizeof units / sizeof units[0]; i++) {
        if (strcasecmp(p, units[i].unit) != 0)
            continue;
        if (v == 0 || v > UINT64_MAX / units[i].scale)
            break;
        *bytes = v * units[i].scale;
        return BORA_OK;
    }
    return bora_error_set(BORA_ERR_INVALID,
                          "--max-shard-size '%s' is not a size above 0: give bytes (1000000) or a "
                          "number with KB, MB, GB or KiB, MiB, GiB (5GB, 500MB, 2MiB)",
                          text);
}

/* The directory out is made in, and out's last component. */
static void split_path(const char *out, char *parent, size_t cap, const char **base)
{
    char trimmed[4096];
    snprintf(trimmed, sizeof trimmed, "%s", out);
    for (size_t n = strlen(trimmed); n > 1 && trimmed[n - 1] == '/'; n--)
        trimmed[n - 1] = 0;
    const char *slash = strrchr(trimmed, '/');
    if (!slash)
        snprintf(parent, cap, ".");
    else if (slash == trimmed)
        snprintf(parent, cap, "/");
    else
        snprintf(parent, cap, "%.*s", (int)(slash - trimmed), trimmed);
    *base = out + (slash ? slash - trimmed + 1 : 0);
}

static int dir_is_empty(const char *path)
{
    DIR *d = opendir(path);
    struct dirent *e;
    int empty = 1;
    while (d && empty && (e = readdir(d)) != NULL)
        empty = !strcmp(e->d_name, ".") || !strcmp(e->d_name, "..");
    if (d)
        closedir(d);
    return d && empty;
}

/* Whether path is dir_real (resolved) or lies under it. */
static int within(const char *dir_real, const char *path)
{
    char *p = path ? realpath(path, NULL) : NULL;
    size_t n = strlen(dir_real);
    int in = p && !strncmp(p, dir_real, n) && (p[n] == 0 || p[n] == '/' || n == 1);
    free(p);
    return in;
}

/* Why dir is not a folder bora export could have written (NULL when it could be): one holds
 * config.json and weights in *.safetensors, files only, and no trainer.json. */
static const char *not_an_export(const char *dir, char *why, size_t cap)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int config = 0, weights = 0;
    *why = 0;
    while (d && !*why && (e = readdir(d)) != NULL) {
        char path[8400];
        struct stat st;
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
            continue;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        size_t n = strlen(e->d_name);
        if (lstat(path, &st) != 0 || !S_ISREG(st.st_mode))
            snprintf(why, cap, "it holds %s, which is not a file", e->d_name);
        else if (!strcmp(e->d_name, "trainer.json"))
            snprintf(why, cap, "it holds trainer.json, as a checkpoint does");
        config |= !strcmp(e->d_name, "config.json");
        weights |= n > 12 && !strcmp(e->d_name + n - 12, ".safetensors");
    }
    if (d)
        closedir(d);
    if (!d)
        snprintf(why, cap, "it cannot be read: %s", strerror(errno));
    else if (!*why && (!config || !weights))
        snprintf(why, cap, "it has no config.json and *.safetensors");
    return *why ? why : NULL;
}

static void clean_stale(const char *parent, const char *base);

bora_status bora_hf_check_out(const char *out, int force, const char *checkpoint,
                              const char *tokenizer)
{
    char parent[4096];
    const char *base;
    if (!*out || strlen(out) > 3900)
        return bora_error_set(BORA_ERR_INVALID, "--out '%s': give a directory path", out);
    split_path(out, parent, sizeof parent, &base);
    struct stat st;
    if (stat(parent, &st) != 0 || !S_ISDIR(st.st_mode))
        return bora_error_set(BORA_ERR_NOT_FOUND,
                              "--out %s: its parent directory %s does not exist; make it first",
                              out, parent);
    clean_stale(parent, base);
    if (stat(out, &st) != 0)
        return BORA_OK;
    if (!S_ISDIR(st.st_mode))
        return bora_error_set(BORA_ERR_INVALID, "--out %s is a file, not a directory; give another",
                              out);
    /* the folder is replaced whole: never one that holds what is being exported */
    char *real = realpath(out, NULL);
    const char *what = !real                      ? NULL
                       : within(real, checkpoint) ? "the checkpoint"
                       : within(real, tokenizer)  ? "the tokenizer"
                                                  : NULL;
    free(real);
    if (what)
        return bora_error_set(BORA_ERR_INVALID,
                              "--out %s is or holds %s being exported (%s); give a directory "
                              "outside it",
                              out, what, what[4] == 'c' ? checkpoint : tokenizer);
    if (dir_is_empty(out))
        return BORA_OK;
    if (!force)
        return bora_error_set(BORA_ERR_INVALID,
                              "--out %s exists and is not empty; give a new directory, or --force "
                              "to replace it",
                              out);
    char why[512];
    if (not_an_export(out, why, sizeof why))
        return bora_error_set(BORA_ERR_INVALID,
                              "--out %s is not a Hugging Face folder an export wrote (%s): "
                              "--force replaces only an empty directory or an earlier export; "
                              "give another directory",
                              out, why);
    return BORA_OK;
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
    (void)st, (void)flag, (void)ftw;
    return remove(path);
}

static void rm_rf(const char *path)
{
    nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

static bora_status write_bytes(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return bora_error_set(BORA_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    int bad = fwrite(data, 1, n, f) != n;
    bad |= fflush(f) != 0;
    bad |= fsync(fileno(f)) != 0;
    bad |= fclose(f) != 0;
    if (bad)
        return bora_error_set(BORA_ERR_IO, "cannot write %s: %s", path, strerror(errno));
    return BORA_OK;
}

static bora_status write_json(const char *dir, const char *name, json_object *o)
{
    char path[8400];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    const char *text = json_object_to_json_string_ext(
        o, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED | JSON_C_TO_STRING_NOSLASHESCAPE);
    size_t n = strlen(text);
    char *buf = malloc(n + 2);
    if (!buf)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    memcpy(buf, text, n);
    buf[n] = '\n';
    bora_status st = write_bytes(path, buf, n + 1);
    free(buf);
    return st;
}

/* A file's bytes, gunzipped when it is gzip (zlib reads plain files as they are). */
static bora_status read_any(const char *path, char **data, size_t *len)
{
    gzFile f = gzopen(path, "rb");
    if (!f)
        return bora_error_set(BORA_ERR_IO, "cannot read %s: %s", path, strerror(errno));
    size_t cap = 1 << 20, n = 0;
    char *buf = malloc(cap);
    int got = 0;
    while (buf && (got = gzread(f, buf + n, (unsigned)(cap - n))) > 0) {
        n += (size_t)got;
        if (n == cap) {
            char *grown = cap < ((size_t)1 << 34) ? realloc(buf, cap * 2) : NULL;
            if (!grown) {
                free(buf);
                buf = NULL;
                break;
            }
            buf = grown;
            cap *= 2;
        }
    }
    gzclose(f);
    if (!buf || got < 0) {
        free(buf);
        return bora_error_set(buf ? BORA_ERR_IO : BORA_ERR_NOMEM, "cannot read %s", path);
    }
    *data = buf;
    *len = n;
    return BORA_OK;
}

static bora_status copy_file(const char *from, const char *dir, const char *name)
{
    char *data = NULL;
    size_t len = 0;
    bora_status st = read_any(from, &data, &len);
    if (st != BORA_OK)
        return st;
    char path[8400];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    st = write_bytes(path, data, len);
    free(data);
    return st;
}

static int is_file(const char *dir, const char *name, char *out, size_t cap)
{
    struct stat st;
    snprintf(out, cap, "%s%s%s", dir ? dir : "", dir ? "/" : "", name);
    return stat(out, &st) == 0 && S_ISREG(st.st_mode);
}

/* ---- dtype conversion: round to nearest, ties to even ----------------------------------------- */

static uint16_t f32_to_bf16(uint32_t x)
{
    return (uint16_t)((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

static uint16_t f32_to_f16(uint32_t x)
{
    uint32_t sign = (x >> 16) & 0x8000u, a = x & 0x7fffffffu, e = a >> 23;
    if (e >= 0xff)
        return (uint16_t)(sign | 0x7c00u); /* stays non-finite: refused by the caller */
    if (e < 102)                           /* below half of f16's least subnormal: zero */
        return (uint16_t)sign;
    if (e < 113) { /* an f16 subnormal, in units of 2^-24: the 24-bit significand shifted */
        uint32_t m = (a & 0x7fffffu) | 0x800000u, shift = 126 - e;
        uint32_t q = m >> shift, rem = m & ((1u << shift) - 1), half = 1u << (shift - 1);
        if (rem > half || (rem == half && (q & 1)))
            q++;
        return (uint16_t)(sign | q);
    }
    uint32_t h = ((e - 112) << 10) | ((a >> 13) & 0x3ffu), rem = a & 0x1fffu;
    if (rem > 0x1000u || (rem == 0x1000u && (h & 1)))
        h++; /* a carry into the exponent is right, up to infinity (0x7c00) */
    return (uint16_t)(sign | (h > 0x7c00u ? 0x7c00u : h));
}

static float value_at(int32_t dtype, const unsigned char *p, size_t i)
{
    uint32_t bits = 0;
    if (dtype == BORA_DTYPE_BF16) {
        uint16_t h;
        memcpy(&h, p + 2 * i, 2);
        bits = (uint32_t)h << 16;
    } else {
        memcpy(&bits, p + 4 * i, 4);
    }
    float f;
    memcpy(&f, &bits, 4);
    return f;
}

/* Convert n elements of a tensor (f32 or bf16) to dtype into dst; a value the target cannot
 * hold (it would round to infinity) is refused, naming the tensor. */
static bora_status convert(const bora_st_entry *t, size_t n, int32_t dtype, void *dst)
{
    const unsigned char *src = t->data;
    if (t->dtype == dtype) {
        memcpy(dst, src, n * bora_dtype_size(dtype));
        return BORA_OK;
    }
    for (size_t i = 0; i < n; i++) {
        float f = value_at(t->dtype, src, i);
        uint32_t bits;
        memcpy(&bits, &f, 4);
        if (dtype == BORA_DTYPE_F32) {
            memcpy((char *)dst + 4 * i, &bits, 4);
            continue;
        }
        uint16_t h = dtype == BORA_DTYPE_BF16 ? f32_to_bf16(bits) : f32_to_f16(bits);
        uint16_t exp_mask = dtype == BORA_DTYPE_BF16 ? 0x7f80u : 0x7c00u;
        if ((h & exp_mask) == exp_mask)
            return bora_error_set(BORA_ERR_INVALID,
                                  "tensor '%s' holds %g at element %zu, beyond what %s holds "
                                  "(its largest is %s): export with --dtype %s",
                                  t->name, (double)f, i, bora_st_dtype_name(dtype),
                                  dtype == BORA_DTYPE_F16 ? "65504" : "3.39e38",
                                  dtype == BORA_DTYPE_F16 ? "bf16 or f32" : "f32");
        memcpy((char *)dst + 2 * i, &h, 2);
    }
    return BORA_OK;
}

/* ---- weights ---------------------------------------------------------------------------------- */

/* Elements of a tensor, or 0 with an error when the product overflows. */
static bora_status elements(const bora_st_entry *t, size_t *n)
{
    size_t v = 1;
    for (int d = 0; d < t->ndim; d++) {
        if (t->shape[d] < 0 || (t->shape[d] > 0 && v > SIZE_MAX / 8 / (size_t)t->shape[d]))
            return bora_error_set(BORA_ERR_INVALID, "tensor '%s': its shape is too large", t->name);
        v *= (size_t)t->shape[d];
    }
    *n = v;
    return BORA_OK;
}

/* Write the tensors in shards of at most max bytes (a larger tensor alone), as transformers
 * does: model.safetensors when one is enough, else model-0000i-of-0000N.safetensors and the
 * index naming each tensor's file. */
static bora_status write_weights(const bora_hf_export *o, const char *dir,
                                 const bora_st_entry *tensors, size_t n)
{
    size_t esize = bora_dtype_size(o->dtype);
    size_t *shard_of = calloc(n ? n : 1, sizeof *shard_of),
           *count = calloc(n ? n : 1, sizeof *count);
    size_t *bytes = calloc(n ? n : 1, sizeof *bytes);
    bora_status st =
        shard_of && count && bytes ? BORA_OK : bora_error_set(BORA_ERR_NOMEM, "out of memory");
    size_t shards = 0;
    uint64_t in_shard = 0, total = 0, params = 0;
    for (size_t i = 0; i < n && st == BORA_OK; i++) {
        if (tensors[i].dtype != BORA_DTYPE_F32 && tensors[i].dtype != BORA_DTYPE_BF16) {
            st = bora_error_set(BORA_ERR_UNSUPPORTED, "tensor '%s' is %s: export takes f32 or bf16",
                                tensors[i].name, bora_st_dtype_name(tensors[i].dtype));
            break;
        }
        if ((st = elements(&tensors[i], &count[i])) != BORA_OK)
            break;
        bytes[i] = count[i] * esize;
        if (shards == 0 || (in_shard > 0 && in_shard + bytes[i] > o->max_shard_bytes)) {
            shards++;
            in_shard = 0;
        }
        in_shard += bytes[i];
        shard_of[i] = shards - 1;
        total += bytes[i];
        params += count[i];
    }
    json_object *index = NULL, *map = NULL;
    if (st == BORA_OK && shards > 1) {
        index = json_object_new_object();
        json_object *meta = json_object_new_object();
        map = json_object_new_object();
        json_object_object_add(meta, "total_size", json_object_new_int64((int64_t)total));
        json_object_object_add(meta, "total_parameters", json_object_new_int64((int64_t)params));
        json_object_object_add(index, "metadata", meta);
        json_object_object_add(index, "weight_map", map);
    }
    size_t first = 0;
    for (size_t s = 0; s < shards && st == BORA_OK; s++) {
        size_t last = first, sum = 0;
        while (last < n && shard_of[last] == s)
            sum += bytes[last++];
        char name[64], path[8400];
        if (shards == 1)
            snprintf(name, sizeof name, "model.safetensors");
        else
            snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", s + 1, shards);
        snprintf(path, sizeof path, "%s/%s", dir, name);
        /* each shard converted on its own: memory for one shard beyond the checkpoint's */
        char *buf = o->dtype == BORA_DTYPE_F32 ? NULL : malloc(sum ? sum : 1);
        bora_st_entry *e = malloc(sizeof *e * (last - first + 1));
        if ((o->dtype != BORA_DTYPE_F32 && !buf) || !e)
            st = bora_error_set(BORA_ERR_NOMEM, "out of memory for shard %s", name);
        size_t at = 0;
        for (size_t i = first; i < last && st == BORA_OK; i++) {
            e[i - first] = tensors[i];
            e[i - first].dtype = o->dtype;
            if (buf || tensors[i].dtype != BORA_DTYPE_F32) {
                if (!buf && !(buf = malloc(sum ? sum : 1))) {
                    st = bora_error_set(BORA_ERR_NOMEM, "out of memory for shard %s", name);
                    break;
                }
                st = convert(&tensors[i], count[i], o->dtype, buf + at);
                e[i - first].data = buf + at;
                at += bytes[i];
            }
            if (map)
                json_object_object_add(map, tensors[i].name, json_object_new_string(name));
        }
        if (st == BORA_OK)
            st = bora_st_write(path, e, last - first, NULL, 0);
        if (st == BORA_OK)
            bora_log(BORA_LOG_INFO, "export: %s: %zu tensors, %.1f MB (%zu of %zu)", name,
                     last - first, (double)sum / 1e6, s + 1, shards);
        free(buf);
        free(e);
        first = last;
    }
    if (st == BORA_OK && index)
        st = write_json(dir, "model.safetensors.index.json", index);
    json_object_put(index);
    free(shard_of);
    free(count);
    free(bytes);
    return st;
}

/* ---- the tokenizer's files ---------------------------------------------------------------------- */

typedef struct tok_ids {
    int32_t bos, eos;
    const char *bos_text, *eos_text;
} tok_ids;

static const char *const bos_names[] = {"<|begin_of_text|>", "<s>", "<bos>", "<|endoftext|>", NULL};
static const char *const eos_names[] = {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", NULL};

static void find_special(const bora_tokenizer *tok, tok_ids *ids)
{
    ids->bos = ids->eos = -1;
    ids->bos_text = ids->eos_text = NULL;
    for (const char *const *p = bos_names; *p && ids->bos < 0; p++)
        if ((ids->bos = bora_tokenizer_token_id(tok, *p)) >= 0)
            ids->bos_text = *p;
    ids->eos = bora_eos_id(tok);
    for (const char *const *p = eos_names; *p && !ids->eos_text; p++)
        if (ids->eos >= 0 && bora_tokenizer_token_id(tok, *p) == ids->eos)
            ids->eos_text = *p;
}

/* tokenizer_config.json and special_tokens_map.json where the tokenizer has none of its own. */
static bora_status write_tokenizer_config(const char *dir, const char *cls, const tok_ids *ids,
                                          int64_t max_len, int gpt2_pair, int want_config,
                                          int want_map)
{
    json_object *cfg = json_object_new_object(), *map = json_object_new_object();
    json_object_object_add(cfg, "tokenizer_class", json_object_new_string(cls));
    const char *keys[] = {"bos_token", "eos_token", "unk_token"};
    const char *vals[] = {ids->bos_text, ids->eos_text, gpt2_pair ? ids->eos_text : NULL};
    for (int i = 0; i < 3; i++) {
        if (!vals[i])
            continue;
        json_object_object_add(cfg, keys[i], json_object_new_string(vals[i]));
        json_object_object_add(map, keys[i], json_object_new_string(vals[i]));
    }
    if (gpt2_pair)
        json_object_object_add(cfg, "add_prefix_space", json_object_new_boolean(0));
    if (max_len > 0)
        json_object_object_add(cfg, "model_max_length", json_object_new_int64(max_len));
    json_object_object_add(cfg, "clean_up_tokenization_spaces", json_object_new_boolean(0));
    bora_status st = want_config ? write_json(dir, "tokenizer_config.json", cfg) : BORA_OK;
    if (st == BORA_OK && want_map)
        st = write_json(dir, "special_tokens_map.json", map);
    json_object_put(cfg);
    json_object_put(map);
    return st;
}

/* Write the tokenizer at path into dir as transformers reads it: tokenizer.json (with the
 * tokenizer_config.json and special_tokens_map.json beside it, or ones written here), or GPT-2's
 * pair as vocab.json + merges.txt. ids gets its bos and eos. BORA_ERR_NOT_FOUND: unreadable. */
static bora_status write_tokenizer(const char *path, const char *dir, int64_t max_len, tok_ids *ids)
{
    bora_tokenizer *tok = NULL;
    bora_status st = bora_tokenizer_load(path, &tok);
    if (st != BORA_OK)
        return bora_error_set(BORA_ERR_NOT_FOUND, "%s", bora_error_get());
    find_special(tok, ids);
    bora_tokenizer_free(tok);
    /* which files: as bora_tokenizer_load picks them */
    char json[8400], a[8400], b[8400], side[8400];
    const char *base = strrchr(path, '/') ? strrchr(path, '/') + 1 : path;
    struct stat sb;
    int is_dir = stat(path, &sb) == 0 && S_ISDIR(sb.st_mode), pair = 0;
    char from_dir[4200];
    if (is_dir) {
        snprintf(from_dir, sizeof from_dir, "%s", path);
        if (!is_file(path, "tokenizer.json", json, sizeof json) &&
            !is_file(path, "tokenizer.json.gz", json, sizeof json)) {
            pair = 1;
            if (!is_file(path, "encoder.json", a, sizeof a) ||
                !is_file(path, "vocab.bpe", b, sizeof b)) {
                is_file(path, "vocab.json", a, sizeof a);
                is_file(path, "merges.txt", b, sizeof b);
            }
        }
    } else {
        snprintf(from_dir, sizeof from_dir, "%.*s", base > path ? (int)(base - path - 1) : 1,
                 base > path ? path : ".");
        if (!strcmp(base, "encoder.json") || !strcmp(base, "vocab.json")) {
            pair = 1;
            snprintf(a, sizeof a, "%s", path);
            snprintf(b, sizeof b, "%s/%s", from_dir,
                     strcmp(base, "encoder.json") ? "merges.txt" : "vocab.bpe");
        } else {
            snprintf(json, sizeof json, "%s", path);
        }
    }
    if (pair) {
        st = copy_file(a, dir, "vocab.json");
        if (st == BORA_OK)
            st = copy_file(b, dir, "merges.txt");
        if (st == BORA_OK)
            st = write_tokenizer_config(dir, "GPT2Tokenizer", ids, max_len, 1, 1, 1);
        return st;
    }
    st = copy_file(json, dir, "tokenizer.json");
    /* the tokenizer's own side files where it has them, else ones written from what it holds */
    int own_config = is_file(from_dir, "tokenizer_config.json", side, sizeof side);
    if (st == BORA_OK && own_config)
        st = copy_file(side, dir, "tokenizer_config.json");
    int own_map = is_file(from_dir, "special_tokens_map.json", side, sizeof side);
    if (st == BORA_OK && own_map)
        st = copy_file(side, dir, "special_tokens_map.json");
    if (st == BORA_OK && (!own_config || !own_map))
        st = write_tokenizer_config(dir, "PreTrainedTokenizerFast", ids, max_len, 0, !own_config,
                                    !own_map);
    return st;
}

/* ---- config.json ------------------------------------------------------------------------------ */

static void set_default(json_object *o, const char *key, json_object *v)
{
    if (json_object_object_get_ex(o, key, NULL))
        json_object_put(v);
    else
        json_object_object_add(o, key, v);
}

static json_object *id_or_null(int32_t id)
{
    return id >= 0 ? json_object_new_int(id) : NULL;
}

/* The model's config.json completed with what transformers' config class for its model_type
 * reads and the model's hf_config leaves to the class's defaults, where those defaults would be
 * wrong for a bora model (GPT-2's dropouts: bora trains without). */
static bora_status complete_config(json_object *c, int32_t dtype, const tok_ids *ids)
{
    json_object *type = NULL;
    if (!json_object_object_get_ex(c, "model_type", &type) || !json_object_get_string(type))
        return bora_error_set(BORA_ERR_INVALID, "the model's config.json has no model_type");
    const char *t = json_object_get_string(type);
    const char *dt = dtype == BORA_DTYPE_F32    ? "float32"
                     : dtype == BORA_DTYPE_BF16 ? "bfloat16"
                                                : "float16";
    json_object_object_add(c, "torch_dtype", json_object_new_string(dt));
    json_object_object_add(c, "bos_token_id", id_or_null(ids->bos));
    json_object_object_add(c, "eos_token_id", id_or_null(ids->eos));
    set_default(c, "use_cache", json_object_new_boolean(1));
    if (!strcmp(t, "gpt2")) {
        static const char *const zero[] = {"resid_pdrop", "embd_pdrop", "attn_pdrop",
                                           "summary_first_dropout"};
        for (size_t i = 0; i < 4; i++)
            set_default(c, zero[i], json_object_new_double(0.0));
        set_default(c, "scale_attn_weights", json_object_new_boolean(1));
        set_default(c, "summary_type", json_object_new_string("cls_index"));
        set_default(c, "summary_use_proj", json_object_new_boolean(1));
        set_default(c, "summary_activation", NULL);
        set_default(c, "summary_proj_to_labels", json_object_new_boolean(1));
        json_object *n_pos = NULL;
        if (json_object_object_get_ex(c, "n_positions", &n_pos))
            set_default(c, "n_ctx", json_object_new_int64(json_object_get_int64(n_pos)));
    } else if (!strcmp(t, "whisper")) {
        /* WhisperConfig pads with <|endoftext|>, its eos; decoder_start_token_id keeps
         * transformers' default, <|startoftranscript|> (50257) in Whisper's tokenizers */
        if (ids->eos >= 0)
            set_default(c, "pad_token_id", json_object_new_int(ids->eos));
    } else {
        set_default(c, "attention_dropout", json_object_new_double(0.0));
        set_default(c, "rope_scaling", NULL);
        if (!strcmp(t, "llama"))
            set_default(c, "pretraining_tp", json_object_new_int(1));
    }
    return BORA_OK;
}

static int64_t context_of(json_object *c)
{
    json_object *v = NULL;
    if (json_object_object_get_ex(c, "n_positions", &v) ||
        json_object_object_get_ex(c, "max_position_embeddings", &v) ||
        json_object_object_get_ex(c, "max_target_positions", &v))
        return json_object_get_int64(v);
    return 0;
}

/* ---- the whole folder ------------------------------------------------------------------------- */

static bora_status fsync_dir(const char *path)
{
    int fd = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return bora_error_set(BORA_ERR_IO, "%s: %s", path, strerror(errno));
    int rc = fsync(fd), err = errno;
    close(fd);
    return rc == 0 ? BORA_OK : bora_error_set(BORA_ERR_IO, "fsync %s: %s", path, strerror(err));
}

/* Put tmp in out's place; an existing out (checked by bora_hf_check_out) is moved aside first and
 * removed only once tmp is in place. */
static bora_status move_into_place(const char *tmp, const char *out, const char *parent,
                                   const char *base)
{
    char old[8400];
    snprintf(old, sizeof old, "%s/.%s.old-export-%ld", parent, base, (long)getpid());
    struct stat sb;
    int had = stat(out, &sb) == 0;
    if (had && rename(out, old) != 0)
        return bora_error_set(BORA_ERR_IO, "cannot move %s aside: %s", out, strerror(errno));
    if (rename(tmp, out) != 0) {
        int err = errno;
        if (had && rename(old, out) != 0)
            return bora_error_set(BORA_ERR_IO,
                                  "cannot rename %s to %s: %s; the earlier %s could not be put "
                                  "back (%s): it is %s, rename it yourself",
                                  tmp, out, strerror(err), out, strerror(errno), old);
        return bora_error_set(BORA_ERR_IO, "cannot rename %s to %s: %s", tmp, out, strerror(err));
    }
    if (had)
        rm_rf(old);
    return fsync_dir(parent);
}

/* What an export killed part way left beside out: its hidden work folder is removed, and the
 * earlier folder it had moved aside is put back when out is missing (the kill came between the
 * two renames), else removed. Only those of processes no longer running. */
static void clean_stale(const char *parent, const char *base)
{
    DIR *d = opendir(parent);
    struct dirent *e;
    size_t n = strlen(base);
    while (d && (e = readdir(d)) != NULL) {
        const char *name = e->d_name, *tail = name + 1 + n;
        if (name[0] != '.' || strncmp(name + 1, base, n) || tail[0] != '.')
            continue;
        int old = !strncmp(tail, ".old-export-", 12);
        if (!old && strncmp(tail, ".tmp-export-", 12))
            continue;
        char *end;
        long pid = strtol(tail + 12, &end, 10);
        if (*end || pid <= 0 || pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;
        char path[8400], out[8400];
        struct stat sb;
        snprintf(path, sizeof path, "%s/%s", parent, name);
        snprintf(out, sizeof out, "%s/%s", parent, base);
        if (old && stat(out, &sb) != 0 && rename(path, out) == 0) {
            bora_log(BORA_LOG_WARN,
                     "export: put back %s, which an interrupted export had moved "
                     "aside",
                     out);
            continue;
        }
        rm_rf(path);
    }
    if (d)
        closedir(d);
}

bora_status bora_hf_write(const bora_hf_export *o, const char *hf_config,
                          const bora_st_entry *tensors, size_t n)
{
    bora_status st = bora_hf_check_out(o->out, o->force, o->checkpoint, o->tokenizer);
    if (st != BORA_OK)
        return st;
    json_object *cfg = json_tokener_parse(hf_config);
    if (!json_object_is_type(cfg, json_type_object)) {
        json_object_put(cfg);
        return bora_error_set(BORA_ERR_INTERNAL, "the model's config.json is not a JSON object");
    }
    char parent[4096], tmp[4200];
    const char *base;
    split_path(o->out, parent, sizeof parent, &base);
    snprintf(tmp, sizeof tmp, "%s/.%.*s.tmp-export-%ld", parent, (int)strcspn(base, "/"), base,
             (long)getpid());
    rm_rf(tmp);
    if (mkdir(tmp, 0777) != 0) {
        json_object_put(cfg);
        return bora_error_set(BORA_ERR_IO, "cannot make %s: %s", tmp, strerror(errno));
    }
    tok_ids ids = {-1, -1, NULL, NULL};
    if (o->tokenizer) {
        st = write_tokenizer(o->tokenizer, tmp, context_of(cfg), &ids);
        if (st == BORA_ERR_NOT_FOUND && !o->tokenizer_required) {
            bora_log(BORA_LOG_WARN,
                     "export: no tokenizer files were written: the run's tokenizer cannot be read "
                     "(%s); give --tokenizer PATH to add them",
                     bora_error_get());
            ids = (tok_ids){-1, -1, NULL, NULL};
            st = BORA_OK;
        }
    } else {
        bora_log(BORA_LOG_WARN, "export: no tokenizer files were written: the run names no "
                                "tokenizer; give --tokenizer PATH to add them");
    }
    if (st == BORA_OK)
        st = complete_config(cfg, o->dtype, &ids);
    if (st == BORA_OK)
        st = write_json(tmp, "config.json", cfg);
    if (st == BORA_OK) {
        json_object *gen = json_object_new_object();
        json_object_object_add(gen, "bos_token_id", id_or_null(ids.bos));
        json_object_object_add(gen, "eos_token_id", id_or_null(ids.eos));
        st = write_json(tmp, "generation_config.json", gen);
        json_object_put(gen);
    }
    if (st == BORA_OK)
        st = write_weights(o, tmp, tensors, n);
    if (st == BORA_OK)
        st = fsync_dir(tmp);
    if (st == BORA_OK)
        st = move_into_place(tmp, o->out, parent, base);
    json_object_put(cfg);
    if (st != BORA_OK) {
        char keep[2048];
        snprintf(keep, sizeof keep, "%s", bora_error_get());
        rm_rf(tmp);
        return bora_error_set(st, "%s", keep);
    }
    return BORA_OK;
}
