/* tests/data_pipeline/test_audio_cache.c — the audio cache and the audio loader, over clips the
 * calling script made with espeak-ng and sox: every stored clip's features are the bits
 * bora_mel_of_bytes gives of its file (and within 1e-4 of transformers' golden for the one
 * clip there is one of), its tokens the ids Hugging Face's own tokenizer gives for the start
 * sequence + text + <|endoftext|> (EXPECTED, made by whisper_ids.js); the shards are the same
 * bytes with 1 and 2 workers; a corrupt or truncated shard is refused with the reason and made
 * again with rebuild; a killed build resumes keeping its finished shards; a changed clip is
 * noticed; too many bad clips are refused naming the first; and the loader's rows are the
 * clips as sdk/bora/model.h says (input_ids padded with <|endoftext|>, targets one later with
 * -100 on the start sequence and the padding), in order or in a seeded permutation.
 *
 * usage: test_audio_cache WORK TOKENIZER EXPECTED.jsonl EXPECTED_EN.jsonl GOLDEN_DIR
 * WORK holds train.jsonl, more.jsonl.gz and sub/abs.jsonl (the manifests, in that order)
 * and clips/; the bad lines' messages go to stderr for the script to check. */
#include "../test.h"
#include "data/audio/audio.h"
#include "data/audio/prefix.h"
#include "data/audio_cache.h"
#include "data/loader.h"
#include "data/tokenizer.h"
#include "util/log.h"
#include "util/str.h"

#include <dirent.h>
#include <json-c/json.h>
#include <math.h>
#include <stdint.h>
#include <sys/stat.h>
#include <unistd.h>

enum { MELS = 80, FRAMES = 3000, MAX_TOKENS = 32, MAX_CLIPS = 16 };

typedef struct clip {
    char path[4096];
    int32_t ids[MAX_TOKENS + 8];
    int n;
} clip;

static const char *work, *tok_path;
static bora_tokenizer *tok;
static const char *manifests[3];

static int load_expected(const char *path, clip *clips)
{
    FILE *f = fopen(path, "r");
    if (!f) {
        perror(path);
        exit(1);
    }
    char *line = NULL;
    size_t cap = 0;
    int n = 0;
    while (getline(&line, &cap, f) > 0 && n < MAX_CLIPS) {
        json_object *o = json_tokener_parse(line), *a, *ids;
        if (!o || !json_object_object_get_ex(o, "audio", &a) ||
            !json_object_object_get_ex(o, "ids", &ids)) {
            fprintf(stderr, "%s: not an expected line: %s", path, line);
            exit(1);
        }
        const char *audio = json_object_get_string(a);
        if (audio[0] == '/')
            snprintf(clips[n].path, sizeof clips[n].path, "%s", audio);
        else
            snprintf(clips[n].path, sizeof clips[n].path, "%s/%s", work, audio);
        clips[n].n = (int)json_object_array_length(ids);
        for (int i = 0; i < clips[n].n && i < MAX_TOKENS + 8; i++)
            clips[n].ids[i] = json_object_get_int(json_object_array_get_idx(ids, i));
        json_object_put(o);
        n++;
    }
    free(line);
    fclose(f);
    return n;
}

static bora_status open_cache(const char *dir, int workers, int rebuild, double max_bad,
                              const int32_t *prefix, int n_prefix, bora_audio_cache **c)
{
    bora_audio_cache_opts o = {.urls = manifests,
                               .n_urls = 3,
                               .audio_key = "audio",
                               .text_key = "text",
                               .tok = tok,
                               .prefix = prefix,
                               .n_prefix = n_prefix,
                               .n_mels = MELS,
                               .frames = FRAMES,
                               .max_tokens = MAX_TOKENS,
                               .dir = dir,
                               .workers = workers,
                               .rebuild = rebuild,
                               .max_bad_fraction = max_bad,
                               .what = "data.train_urls"};
    bora_status st = bora_audio_cache_open(&o, c);
    if (st == BORA_OK && (st = bora_audio_cache_wait(*c)) != BORA_OK) {
        char msg[2048];
        snprintf(msg, sizeof msg, "%s", bora_error_get());
        bora_audio_cache_free(*c);
        *c = NULL;
        bora_error_set(st, "%s", msg);
    }
    return st;
}

static char *slurp(const char *path, size_t *len)
{
    char *data = NULL;
    if (bora_read_file(path, (size_t)1 << 30, &data, len) != BORA_OK) {
        fprintf(stderr, "%s\n", bora_error_get());
        exit(1);
    }
    return data;
}

/* Every clip's features and tokens against their references. */
static void check_examples(bora_audio_cache *c, const clip *want, int n, const char *golden)
{
    CHECK(bora_audio_cache_examples(c) == n);
    bora_mel_opts mo = bora_mel_defaults();
    bora_mel *mel;
    CHECK(bora_mel_create(&mo, &mel) == BORA_OK);
    float *got = malloc(MELS * FRAMES * sizeof *got), *ref = malloc(MELS * FRAMES * sizeof *ref);
    int32_t tokens[MAX_TOKENS];
    int golden_seen = 0;
    for (int i = 0; i < n && i < bora_audio_cache_examples(c); i++) {
        int64_t nt = -1;
        bora_audio_cache_example(c, i, got, tokens, &nt);
        size_t len;
        char *bytes = slurp(want[i].path, &len);
        CHECK(bora_mel_of_bytes(mel, bytes, len, want[i].path, ref, NULL) == BORA_OK);
        free(bytes);
        if (memcmp(got, ref, MELS * FRAMES * sizeof *got)) {
            fprintf(stderr, "clip %d (%s): stored features differ from bora_mel_of_bytes'\n", i,
                    want[i].path);
            test_failures++;
        }
        int same = nt == want[i].n;
        for (int k = 0; same && k < nt; k++)
            same = tokens[k] == want[i].ids[k];
        if (!same) {
            fprintf(stderr, "clip %d (%s): %lld tokens [", i, want[i].path, (long long)nt);
            for (int k = 0; k < nt && k < MAX_TOKENS; k++)
                fprintf(stderr, k ? " %d" : "%d", tokens[k]);
            fprintf(stderr, "], Hugging Face's %d\n", want[i].n);
            test_failures++;
        }
        if (golden && strstr(want[i].path, "hello16k.wav")) {
            char gpath[4200];
            snprintf(gpath, sizeof gpath, "%s/hello16k_mel_80x3000_f32le.bin", golden);
            char *g = slurp(gpath, &len);
            CHECK(len == MELS * FRAMES * sizeof(float));
            double d = 0;
            for (size_t k = 0; k < MELS * FRAMES && len == MELS * FRAMES * sizeof(float); k++) {
                float v;
                memcpy(&v, g + 4 * k, 4);
                d = fmax(d, fabs((double)v - got[k]));
            }
            printf("golden clip from the cache: max |bora - transformers| = %.3g\n", d);
            CHECK(d <= 1e-4);
            free(g);
            golden_seen = 1;
        }
    }
    CHECK(!golden || golden_seen);
    free(got);
    free(ref);
    bora_mel_free(mel);
}

/* The shard files of two directories: the same names, the same bytes. */
static int same_shards(const char *a, const char *b)
{
    int same = 1, n = 0;
    for (int i = 0; i < 3; i++) {
        char pa[4200], pb[4200];
        snprintf(pa, sizeof pa, "%s/shard-%05d.bin", a, i);
        snprintf(pb, sizeof pb, "%s/shard-%05d.bin", b, i);
        size_t la, lb;
        char *da = slurp(pa, &la), *db = slurp(pb, &lb);
        same &= la == lb && !memcmp(da, db, la);
        free(da), free(db);
        n++;
    }
    return same && n == 3;
}

static void corrupt_byte(const char *path, long from_end)
{
    FILE *f = fopen(path, "r+b");
    CHECK(f != NULL);
    if (!f)
        return;
    fseek(f, -from_end, SEEK_END);
    int ch = fgetc(f);
    fseek(f, -from_end, SEEK_END);
    fputc(ch ^ 0x40, f);
    fclose(f);
}

/* input_ids, targets, segment_ids of a clip's row by sdk/bora/model.h, and its features. */
static void check_rows(bora_loader *l, int64_t k, int64_t B, const clip *want, const int *which,
                       int32_t eot, int n_prefix)
{
    int64_t T = MAX_TOKENS, count = 0, want_count = 0;
    int32_t *in = malloc(sizeof(int32_t) * (size_t)(B * T)),
            *tg = malloc(sizeof *tg * (size_t)(B * T)), *sg = malloc(sizeof *sg * (size_t)(B * T));
    float *feat = malloc(sizeof *feat * (size_t)B * MELS * FRAMES);
    CHECK(bora_loader_rows(l, k, B, 0, B, in, tg, sg, &count) == BORA_OK);
    CHECK(bora_loader_features(l, k, B, 0, B, feat) == BORA_OK);
    bora_mel_opts mo = bora_mel_defaults();
    bora_mel *mel;
    bora_mel_create(&mo, &mel);
    float *ref = malloc(MELS * FRAMES * sizeof *ref);
    for (int64_t r = 0; r < B; r++) {
        const clip *c = &want[which[r]];
        int bad = 0;
        for (int64_t t = 0; t < T; t++) {
            int32_t in_t = t < c->n ? c->ids[t] : eot;
            int32_t tg_t = t + 1 < c->n && t + 1 >= n_prefix ? c->ids[t + 1] : -100;
            want_count += tg_t != -100;
            bad |= in[r * T + t] != in_t || tg[r * T + t] != tg_t || sg[r * T + t] != 0;
        }
        if (bad) {
            fprintf(stderr, "batch %lld row %lld (clip %d): input_ids/targets differ\n",
                    (long long)k, (long long)r, which[r]);
            test_failures++;
        }
        size_t len;
        char *bytes = slurp(c->path, &len);
        bora_mel_of_bytes(mel, bytes, len, c->path, ref, NULL);
        free(bytes);
        if (memcmp(feat + (size_t)r * MELS * FRAMES, ref, MELS * FRAMES * sizeof *ref)) {
            fprintf(stderr, "batch %lld row %lld (clip %d): features differ\n", (long long)k,
                    (long long)r, which[r]);
            test_failures++;
        }
    }
    CHECK(count == want_count);
    free(ref), free(in), free(tg), free(sg), free(feat);
    bora_mel_free(mel);
}

/* Which clip each row of batch k reads. */
static void rows_of(bora_loader *l, int64_t k, int64_t B, const clip *want, int n, int *which)
{
    int64_t T = MAX_TOKENS, count;
    int32_t *in = malloc(sizeof(int32_t) * (size_t)(B * T)),
            *tg = malloc(sizeof *tg * (size_t)(B * T)), *sg = malloc(sizeof *sg * (size_t)(B * T));
    CHECK(bora_loader_rows(l, k, B, 0, B, in, tg, sg, &count) == BORA_OK);
    for (int64_t r = 0; r < B; r++) {
        which[r] = -1;
        for (int i = 0; i < n && which[r] < 0; i++) {
            int same = 1;
            for (int t = 0; t < want[i].n && same; t++)
                same = in[r * T + t] == want[i].ids[t];
            if (same)
                which[r] = i;
        }
    }
    free(in), free(tg), free(sg);
}

static bora_status open_loader(int64_t shuffle, uint64_t seed, const int32_t *prefix, int np,
                               const char *dir, bora_loader **l)
{
    bora_loader_opts o = {.urls = manifests,
                          .n_urls = 3,
                          .text_key = "text",
                          .tok = tok,
                          .seq_len = MAX_TOKENS,
                          .seed = seed,
                          .shuffle = shuffle,
                          .max_bad_fraction = 0.6,
                          .what = "data.train_urls",
                          .cache_dir = dir,
                          .workers = 2,
                          .audio = 1,
                          .audio_key = "audio",
                          .prefix = prefix,
                          .n_prefix = np,
                          .n_mels = MELS,
                          .frames = FRAMES};
    return bora_loader_open(&o, l);
}

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: test_audio_cache WORK TOKENIZER EXPECTED.jsonl EXPECTED_EN.jsonl "
                        "GOLDEN_DIR\n");
        return 2;
    }
    work = argv[1], tok_path = argv[2];
    const char *golden = argv[5];
    char m0[4200], m1[4200], m2[4200], d1[4200], d2[4200], d3[4200], path[4300];
    snprintf(m0, sizeof m0, "%s/train.jsonl", work);
    snprintf(m1, sizeof m1, "%s/more.jsonl.gz", work);
    snprintf(m2, sizeof m2, "%s/sub/abs.jsonl", work);
    manifests[0] = m0, manifests[1] = m1, manifests[2] = m2;
    snprintf(d1, sizeof d1, "%s/cache1", work);
    snprintf(d2, sizeof d2, "%s/cache2", work);
    snprintf(d3, sizeof d3, "%s/cache-en", work);
    if (bora_tokenizer_load(tok_path, &tok) != BORA_OK) {
        fprintf(stderr, "%s\n", bora_error_get());
        return 1;
    }
    static clip want[MAX_CLIPS], want_en[MAX_CLIPS];
    int n = load_expected(argv[3], want), n_en = load_expected(argv[4], want_en);
    int32_t prefix[BORA_WHISPER_PREFIX_MAX], prefix_en[BORA_WHISPER_PREFIX_MAX];
    int np = 0, np_en = 0;
    CHECK(bora_whisper_prefix(tok, NULL, NULL, 0, prefix, &np) == BORA_OK);
    CHECK(bora_whisper_prefix(tok, "en", "transcribe", 0, prefix_en, &np_en) == BORA_OK);
    int32_t eot = bora_tokenizer_token_id(tok, "<|endoftext|>");

    /* One worker, then two: the same clips, the same bytes. */
    bora_audio_cache *c = NULL;
    bora_status st = open_cache(d1, 1, 0, 0.6, prefix, np, &c);
    CHECK(st == BORA_OK);
    if (st != BORA_OK) {
        fprintf(stderr, "%s\n", bora_error_get());
        return test_summary("test_audio_cache");
    }
    check_examples(c, want, n, golden);
    uint64_t digest = bora_audio_cache_digest(c);
    bora_audio_cache_free(c);
    CHECK(open_cache(d2, 2, 0, 0.6, prefix, np, &c) == BORA_OK);
    if (c) {
        CHECK(bora_audio_cache_digest(c) == digest);
        bora_audio_cache_free(c);
    }
    CHECK(same_shards(d1, d2));

    /* A language and task in the start sequence. */
    CHECK(open_cache(d3, 2, 0, 0.6, prefix_en, np_en, &c) == BORA_OK);
    if (c) {
        check_examples(c, want_en, n_en, NULL);
        CHECK(bora_audio_cache_digest(c) != digest);
        bora_audio_cache_free(c);
    }

    /* Reopened: every shard reused. */
    CHECK(open_cache(d1, 2, 0, 0.6, prefix, np, &c) == BORA_OK);
    if (c) {
        CHECK(bora_audio_cache_reused(c) == 3);
        bora_audio_cache_free(c);
    }

    /* A flipped feature byte: refused by the checksum, made again with rebuild. */
    snprintf(path, sizeof path, "%s/shard-00000.bin", d1);
    corrupt_byte(path, 300);
    st = open_cache(d1, 1, 0, 0.6, prefix, np, &c);
    CHECK(st != BORA_OK);
    CHECK_CONTAINS(bora_error_get(), "shard-00000.bin");
    CHECK_CONTAINS(bora_error_get(), "its checksum does not match (corrupt)");
    CHECK_CONTAINS(bora_error_get(), "data.cache_rebuild");
    CHECK(open_cache(d1, 1, 1, 0.6, prefix, np, &c) == BORA_OK);
    bora_audio_cache_free(c);
    CHECK(same_shards(d1, d2));

    /* A truncated shard. */
    snprintf(path, sizeof path, "%s/shard-00001.bin", d1);
    struct stat stt;
    stat(path, &stt);
    CHECK(truncate(path, stt.st_size - 8) == 0);
    st = open_cache(d1, 1, 0, 0.6, prefix, np, &c);
    CHECK(st != BORA_OK);
    CHECK_CONTAINS(bora_error_get(), "does not match its header (truncated?)");

    /* A build killed after its first shard, mid-write of another: resumed, the finished shard
     * kept, the rest made again, the same bytes. */
    unlink(path);
    snprintf(path, sizeof path, "%s/shard-00002.bin", d1);
    unlink(path);
    snprintf(path, sizeof path, "%s/shard-00001.bin.tmp.99999", d1);
    FILE *f = fopen(path, "w");
    fputs("half a shard", f);
    fclose(f);
    CHECK(open_cache(d1, 2, 0, 0.6, prefix, np, &c) == BORA_OK);
    if (c) {
        CHECK(bora_audio_cache_reused(c) == 1);
        bora_audio_cache_free(c);
    }
    CHECK(access(path, F_OK) != 0);
    CHECK(same_shards(d1, d2));

    /* Too many bad clips: refused, naming the first (train.jsonl line 4). */
    char d4[4200];
    snprintf(d4, sizeof d4, "%s/cache-strict", work);
    st = open_cache(d4, 2, 0, 0.25, prefix, np, &c);
    CHECK(st != BORA_OK);
    CHECK_CONTAINS(bora_error_get(), "data.train_urls: 9 of 16 clips are bad");
    CHECK_CONTAINS(bora_error_get(), "train.jsonl:4: ");
    CHECK_CONTAINS(bora_error_get(), "data.max_bad_fraction (0.25)");

    /* The loader's rows: in order, then a seeded permutation the same each epoch. */
    bora_loader *l = NULL;
    CHECK(open_loader(0, 7, prefix, np, d1, &l) == BORA_OK);
    if (l) {
        int which[MAX_CLIPS];
        for (int i = 0; i < n; i++)
            which[i] = i;
        CHECK(bora_loader_windows(l) == n);
        check_rows(l, 0, n, want, which, eot, np);
        /* batch 1 of 3 rows: clips 3, 4, 5; batch 2 wraps around to clip 0 */
        check_rows(l, 1, 3, want, which + 3, eot, np);
        int wrap[3] = {6, 0, 1};
        check_rows(l, 2, 3, want, wrap, eot, np);
        uint64_t h1 = 0;
        CHECK(bora_loader_hash(l, &h1) == BORA_OK && h1 != 0);
        bora_loader_free(l);
    }
    bora_loader *s1 = NULL, *s2 = NULL, *s3 = NULL;
    CHECK(open_loader(1, 7, prefix, np, d1, &s1) == BORA_OK);
    CHECK(open_loader(1, 7, prefix, np, d2, &s2) == BORA_OK);
    CHECK(open_loader(1, 8, prefix, np, d2, &s3) == BORA_OK);
    if (s1 && s2 && s3) {
        int a[MAX_CLIPS], b[MAX_CLIPS], e1[MAX_CLIPS], other[MAX_CLIPS], seen[MAX_CLIPS] = {0};
        rows_of(s1, 0, n, want, n, a);
        rows_of(s2, 0, n, want, n, b);
        rows_of(s1, 1, n, want, n, e1);
        rows_of(s3, 0, n, want, n, other);
        int in_order = 1, same_other = 1;
        for (int i = 0; i < n; i++) {
            CHECK(a[i] >= 0 && a[i] < n);
            if (a[i] >= 0 && a[i] < n)
                seen[a[i]]++;
            CHECK(a[i] == b[i] && a[i] == e1[i]);
            in_order &= a[i] == i;
            same_other &= a[i] == other[i];
        }
        for (int i = 0; i < n; i++)
            CHECK(seen[i] == 1); /* a permutation: each clip once an epoch */
        CHECK(!in_order);
        CHECK(!same_other);
        check_rows(s1, 0, n, want, a, eot, np);
    }
    bora_loader_free(s1), bora_loader_free(s2), bora_loader_free(s3);

    /* A clip changed since its shard was made: refused naming it, made again with rebuild. */
    snprintf(path, sizeof path, "%s/clips/c.wav", work);
    size_t len;
    char *bytes = slurp(path, &len);
    bytes[len - 2] ^= 0x11; /* one sample */
    f = fopen(path, "wb");
    fwrite(bytes, 1, len, f);
    fclose(f);
    free(bytes);
    st = open_cache(d1, 1, 0, 0.6, prefix, np, &c);
    CHECK(st != BORA_OK);
    CHECK_CONTAINS(bora_error_get(), "clips/c.wav has changed since");
    CHECK(open_cache(d1, 1, 1, 0.6, prefix, np, &c) == BORA_OK);
    if (c) {
        CHECK(bora_audio_cache_reused(c) == 2);
        bora_audio_cache_free(c);
    }
    bora_tokenizer_free(tok);
    return test_summary("test_audio_cache");
}
