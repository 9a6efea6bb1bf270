/* tests/data_pipeline/test_source.c — where text comes from: brace ranges (zero padding kept),
 * brace lists and globs expand in order and every member must exist; gzip (several members)
 * and zstd (several frames) are detected by content and read back exactly, a truncated or
 * corrupt stream is refused naming the file; compressed files give the loader the same token
 * stream as plain ones; bad records (invalid JSON, a missing field, invalid UTF-8 in .jsonl
 * and .txt) are counted and named with file and line, an error past data.max_bad_fraction.
 *
 * usage: test_source BYTES_TOKENIZER WORK_DIR */
#include "../test.h"
#include "data/loader.h"
#include "data/source.h"
#include "util/log.h"

#include <zlib.h>
#include <zstd.h>

static char dir[1024];

static const char *at(const char *name)
{
    static char buf[4][1200];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

static void write_bytes(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(data, 1, n, f);
        fclose(f);
    }
}

static void write_text(const char *name, const char *text)
{
    write_bytes(at(name), text, strlen(text));
}

/* One gzip member of text appended to the buffer at *n. */
static void gzip_member(unsigned char *out, size_t *n, const char *text)
{
    z_stream z;
    memset(&z, 0, sizeof z);
    deflateInit2(&z, 6, Z_DEFLATED, 15 + 16, 8, Z_DEFAULT_STRATEGY);
    z.next_in = (unsigned char *)text;
    z.avail_in = (uInt)strlen(text);
    z.next_out = out + *n;
    z.avail_out = 1 << 16;
    deflate(&z, Z_FINISH);
    *n += (1 << 16) - z.avail_out;
    deflateEnd(&z);
}

static void expansion(void)
{
    for (int i = 1; i <= 3; i++) {
        char name[64];
        snprintf(name, sizeof name, "shard.%02d.jsonl", i);
        write_text(name, "{\"text\": \"x\"}\n");
    }
    write_text("extra.txt", "y\n");
    bora_paths p = {0};
    CHECK(bora_source_expand(at("shard.{01..03}.jsonl"), &p) == BORA_OK);
    CHECK(p.n == 3);
    if (p.n == 3) {
        CHECK(strcmp(p.v[0], at("shard.01.jsonl")) == 0);
        CHECK(strcmp(p.v[2], at("shard.03.jsonl")) == 0);
    }
    bora_paths_free(&p);
    CHECK(bora_source_expand(at("shard.{03..02}.jsonl"), &p) == BORA_OK); /* counts down */
    CHECK(p.n == 2 && strcmp(p.v[0], at("shard.03.jsonl")) == 0);
    bora_paths_free(&p);
    CHECK(bora_source_expand(at("{shard.02.jsonl,extra.txt}"), &p) == BORA_OK);
    CHECK(p.n == 2 && strstr(p.v[1], "extra.txt"));
    bora_paths_free(&p);
    CHECK(bora_source_expand(at("shard.*.jsonl"), &p) == BORA_OK); /* a glob, sorted */
    CHECK(p.n == 3 && strstr(p.v[0], "shard.01"));
    bora_paths_free(&p);
    /* every member must exist: no padding means shard.1.jsonl, which does not */
    CHECK(bora_source_expand(at("shard.{1..3}.jsonl"), &p) == BORA_ERR_NOT_FOUND);
    CHECK_CONTAINS(bora_error_get(), "shard.1.jsonl: no such file (from a pattern)");
    bora_paths_free(&p);
    CHECK(bora_source_expand(at("shard.{01..04}.jsonl"), &p) == BORA_ERR_NOT_FOUND);
    CHECK_CONTAINS(bora_error_get(), "shard.04.jsonl: no such file");
    bora_paths_free(&p);
    CHECK(bora_source_expand(at("{extra.txt,missing.txt}"), &p) == BORA_ERR_NOT_FOUND);
    CHECK_CONTAINS(bora_error_get(), "missing.txt: no such file");
    bora_paths_free(&p);
    CHECK(bora_source_expand(at("shard.{01..03.jsonl"), &p) == BORA_ERR_INVALID);
    CHECK_CONTAINS(bora_error_get(), "a '{' without its '}'");
    bora_paths_free(&p);
}

static void compression(void)
{
    const char *a = "{\"text\": \"first document\"}\n", *b = "{\"text\": \"second one\"}\n";
    char plain[256];
    snprintf(plain, sizeof plain, "%s%s", a, b);
    write_text("plain.jsonl", plain);
    /* gzip: two members */
    static unsigned char gz[1 << 18];
    size_t n = 0;
    gzip_member(gz, &n, a);
    gzip_member(gz, &n, b);
    write_bytes(at("two.jsonl.gz"), gz, n);
    char *data = NULL;
    size_t len = 0;
    CHECK(bora_source_read(at("two.jsonl.gz"), &data, &len) == BORA_OK);
    CHECK(data && len == strlen(plain) && memcmp(data, plain, len) == 0);
    free(data);
    /* detected by content: the same bytes under a plain name */
    write_bytes(at("disguised.jsonl"), gz, n);
    CHECK(bora_source_read(at("disguised.jsonl"), &data, &len) == BORA_OK);
    CHECK(len == strlen(plain));
    free(data);
    /* truncated, and corrupt */
    write_bytes(at("cut.jsonl.gz"), gz, n - 12);
    CHECK(bora_source_read(at("cut.jsonl.gz"), &data, &len) == BORA_ERR_INVALID);
    CHECK_CONTAINS(bora_error_get(), "cut.jsonl.gz: the gzip stream is truncated");
    gz[20] ^= 0x55;
    gz[21] ^= 0xaa;
    write_bytes(at("bad.jsonl.gz"), gz, n);
    CHECK(bora_source_read(at("bad.jsonl.gz"), &data, &len) == BORA_ERR_INVALID);
    CHECK_CONTAINS(bora_error_get(), "bad.jsonl.gz: ");
    /* zstd: two frames */
    static unsigned char zs[1 << 16];
    size_t m = ZSTD_compress(zs, sizeof zs, a, strlen(a), 3);
    m += ZSTD_compress(zs + m, sizeof zs - m, b, strlen(b), 3);
    write_bytes(at("two.jsonl.zst"), zs, m);
    CHECK(bora_source_read(at("two.jsonl.zst"), &data, &len) == BORA_OK);
    CHECK(data && len == strlen(plain) && memcmp(data, plain, len) == 0);
    free(data);
    write_bytes(at("cut.jsonl.zst"), zs, m - 5);
    CHECK(bora_source_read(at("cut.jsonl.zst"), &data, &len) == BORA_ERR_INVALID);
    CHECK_CONTAINS(bora_error_get(), "cut.jsonl.zst: the zstd stream is truncated");
}

static bora_status open_one(bora_tokenizer *tok, const char *url, double max_bad, bora_loader **l)
{
    const char *urls[] = {url};
    bora_loader_opts o = {.urls = urls,
                          .n_urls = 1,
                          .text_key = "text",
                          .tok = tok,
                          .seq_len = 4,
                          .seed = 1,
                          .max_bad_fraction = max_bad,
                          .what = "data.train_urls"};
    return bora_loader_open(&o, l);
}

/* The first batch of 4 windows, as ids. */
static void first_rows(bora_loader *l, int32_t *ids)
{
    int32_t tg[16], sg[16];
    int64_t count;
    CHECK(bora_loader_rows(l, 0, 4, 0, 4, ids, tg, sg, &count) == BORA_OK);
}

static void loading(bora_tokenizer *tok)
{
    bora_loader *p = NULL, *g = NULL, *z = NULL;
    CHECK(open_one(tok, at("plain.jsonl"), 0, &p) == BORA_OK);
    CHECK(open_one(tok, at("two.jsonl.gz"), 0, &g) == BORA_OK);
    CHECK(open_one(tok, at("two.jsonl.zst"), 0, &z) == BORA_OK);
    if (p && g && z) {
        CHECK(bora_loader_tokens(p) == bora_loader_tokens(g));
        CHECK(bora_loader_tokens(p) == bora_loader_tokens(z));
        int32_t a[16], b[16], c[16];
        first_rows(p, a);
        first_rows(g, b);
        first_rows(z, c);
        CHECK(!memcmp(a, b, sizeof a) && !memcmp(a, c, sizeof a));
    }
    bora_loader_free(p);
    bora_loader_free(g);
    bora_loader_free(z);

    /* 10 records, 3 bad: invalid JSON (line 3), no text field (line 5), invalid UTF-8 (line 8) */
    write_text("mixed.jsonl", "{\"text\": \"one\"}\n"
                              "{\"text\": \"two\"}\n"
                              "{\"text\": \"three\"\n"
                              "{\"text\": \"four\"}\n"
                              "{\"body\": \"five\"}\n"
                              "{\"text\": \"six\"}\n"
                              "{\"text\": \"seven\"}\n"
                              "{\"text\": \"ei\xff\xfeht\"}\n"
                              "{\"text\": \"nine\"}\n"
                              "{\"text\": \"ten\"}\n");
    bora_loader *l = NULL;
    CHECK(open_one(tok, at("mixed.jsonl"), 0, &l) == BORA_ERR_INVALID);
    CHECK_CONTAINS(bora_error_get(), "data.train_urls: 3 of 10 records are bad");
    CHECK_CONTAINS(bora_error_get(), "mixed.jsonl:3: invalid JSON");
    CHECK_CONTAINS(bora_error_get(), "data.max_bad_fraction (0)");
    CHECK(open_one(tok, at("mixed.jsonl"), 0.25, &l) == BORA_ERR_INVALID);
    CHECK(open_one(tok, at("mixed.jsonl"), 0.3, &l) == BORA_OK);
    if (l) /* the seven good documents (one two four six seven nine ten), each with its EOS */
        CHECK(bora_loader_tokens(l) == 3 + 3 + 4 + 3 + 5 + 4 + 3 + 7);
    bora_loader_free(l);
    l = NULL;
    /* .txt: a block with invalid UTF-8 on its second line */
    write_text("mixed.txt", "good text\n\nfirst line\nbad \xc3\x28 here\n\nmore\n");
    CHECK(open_one(tok, at("mixed.txt"), 0, &l) == BORA_ERR_INVALID);
    CHECK_CONTAINS(bora_error_get(), "1 of 3 records are bad");
    CHECK_CONTAINS(bora_error_get(), "mixed.txt:4: invalid UTF-8 (a block of text from line 3)");
    bora_loader_free(l);
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: test_source BYTES_TOKENIZER WORK_DIR\n");
        return 2;
    }
    snprintf(dir, sizeof dir, "%s", argv[2]);
    char cmd[2200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", dir, dir);
    if (system(cmd) != 0)
        return 2;
    bora_log_set_level(BORA_LOG_ERROR);
    expansion();
    compression();
    bora_tokenizer *tok = NULL;
    CHECK(bora_tokenizer_load(argv[1], &tok) == BORA_OK);
    if (tok)
        loading(tok);
    bora_tokenizer_free(tok);
    return test_summary("test_source");
}
