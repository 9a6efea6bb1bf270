/* tests/data_pipeline/test_loader.c — the loader's windows, exactly: documents from a .txt
 * (blank-line blocks) and a .jsonl, each closed by the end-of-text token, cut into seq_len
 * windows with targets one token later, -100 after an end-of-text, and segment ids; batches
 * wrap around; the shuffled order is a permutation of the windows, a pure function of the
 * seed; a prefetching loader gives the same batches; windows held out for validation; a
 * mixture's exact proportions per block and stages; and the keyed permutation is a bijection
 * for many sizes.
 *
 * usage: test_loader BYTES_TOKENIZER WORK_DIR */
#include "../test.h"
#include "data/loader.h"
#include "util/log.h"

#include <unistd.h>

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (f) {
        fputs(text, f);
        fclose(f);
    }
}

static int has_token(const int32_t *row, int n, int32_t id)
{
    for (int i = 0; i < n; i++)
        if (row[i] == id)
            return 1;
    return 0;
}

/* Open a loader and wait for its whole cache: the status of the two. */
static bora_status open_whole(const bora_loader_opts *o)
{
    bora_loader *l = NULL;
    bora_status st = bora_loader_open(o, &l);
    if (st == BORA_OK && bora_loader_windows(l) == 0)
        st = BORA_ERR_INVALID;
    char msg[2048];
    snprintf(msg, sizeof msg, "%s", bora_error_get());
    bora_loader_free(l);
    bora_error_set(st, "%s", msg);
    return st;
}

int main(int argc, char **argv)
{
    if (argc != 3) {
        fprintf(stderr, "usage: test_loader BYTES_TOKENIZER WORK_DIR\n");
        return 2;
    }
    char cmd[1200], txt[1024], jsonl[1024];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", argv[2]);
    if (system(cmd) != 0)
        return 2;
    snprintf(txt, sizeof txt, "%s/a.txt", argv[2]);
    snprintf(jsonl, sizeof jsonl, "%s/b.jsonl", argv[2]);
    write_file(txt, "ab\nc\n\n\n  \nde\n");                                   /* "ab\nc", "de" */
    write_file(jsonl, "{\"text\": \"fgh\"}\n\n{\"text\": \"\", \"x\": 1}\n"); /* "fgh", "" */
    bora_tokenizer *tok;
    CHECK(bora_tokenizer_load(argv[1], &tok) == BORA_OK);
    const char *urls[] = {txt, jsonl};
    bora_loader_opts o = {
        .urls = urls, .n_urls = 2, .text_key = "text", .tok = tok, .seq_len = 4, .seed = 5};
    bora_loader *l;
    CHECK(bora_loader_open(&o, &l) == BORA_OK);
    /* stream: a b \n c EOS d e EOS f g h EOS  (12 tokens; the empty record adds nothing) */
    const int32_t E = 256;
    const int32_t stream[] = {'a', 'b', '\n', 'c', E, 'd', 'e', E, 'f', 'g', 'h', E};
    CHECK(bora_loader_tokens(l) == 12);
    CHECK(bora_loader_windows(l) == 2); /* (12 - 1) / 4 */
    CHECK(bora_loader_eos(l) == E);
    int32_t ids[12], tg[12], sg[12];
    int64_t count;
    CHECK(bora_loader_rows(l, 0, 3, 0, 3, ids, tg, sg, &count) == BORA_OK);
    /* rows: windows 0, 1, 0 (wrapping) */
    const int64_t win[] = {0, 1, 0};
    int64_t want_count = 0;
    for (int r = 0; r < 3; r++) {
        int32_t seg = 0;
        for (int t = 0; t < 4; t++) {
            int32_t in = stream[win[r] * 4 + t];
            int32_t target = in == E ? -100 : stream[win[r] * 4 + t + 1];
            want_count += in != E;
            if (ids[r * 4 + t] != in || tg[r * 4 + t] != target || sg[r * 4 + t] != seg) {
                fprintf(stderr, "row %d position %d: id %d target %d segment %d, want %d %d %d\n",
                        r, t, ids[r * 4 + t], tg[r * 4 + t], sg[r * 4 + t], in, target, seg);
                test_failures++;
            }
            seg += in == E;
        }
    }
    CHECK(count == want_count);
    /* batch 1 of 3 rows: windows 3, 4, 5 mod 2 = 1, 0, 1; rows 1..2 alone */
    CHECK(bora_loader_rows(l, 1, 3, 1, 2, ids, tg, sg, &count) == BORA_OK);
    CHECK(ids[0] == 'a' && ids[4] == E);
    CHECK(bora_loader_rows(l, 0, 3, 2, 2, ids, tg, sg, &count) == BORA_ERR_INVALID);
    bora_loader_free(l);

    /* data.txt_documents: file — the .txt is one document, blank lines and all, so the stream
     * is "ab\nc\n\n\n  \nde" EOS f g h EOS (17 tokens), in a cache of its own. */
    o.txt_whole = 1;
    CHECK(bora_loader_open(&o, &l) == BORA_OK);
    if (l) {
        CHECK(bora_loader_tokens(l) == 17);
        CHECK(bora_loader_rows(l, 0, 3, 0, 3, ids, tg, sg, &count) == BORA_OK);
        const int32_t whole[] = {'a', 'b', '\n', 'c', '\n', '\n', '\n', ' ', ' ', '\n', 'd', 'e'};
        CHECK(!memcmp(ids, whole, sizeof whole));
        CHECK(tg[11] == E && sg[11] == 0);
        CHECK(strstr(bora_loader_cache_dir(l), "/tokens/") != NULL);
    }
    bora_loader_free(l);
    o.txt_whole = 0;

    /* A jsonl line that is not an object with a string field is refused with file and line:
     * when the cache is complete, which may be after the loader opened on the first window. */
    write_file(jsonl, "{\"text\": \"ok\"}\n{\"text\": 5}\n");
    CHECK(open_whole(&o) == BORA_ERR_INVALID);
    CHECK_CONTAINS(bora_error_get(), "b.jsonl:2: field \"text\" is not a string");
    write_file(jsonl, "{\"text\": \"ok\"} trailing\n");
    CHECK(open_whole(&o) == BORA_ERR_INVALID);
    CHECK_CONTAINS(bora_error_get(), "b.jsonl:1: text after the JSON object");
    write_file(jsonl, "{\"text\": \"\\xff\"}\n");
    write_file(txt, "ok\n\n\xff\xfe\n");
    CHECK(open_whole(&o) == BORA_ERR_INVALID);
    CHECK_CONTAINS(bora_error_get(), "a.txt:3: ");

    /* Shuffled: every window once per pass, in an order set by the seed. */
    char big[4096];
    for (int i = 0; i < 4000; i++)
        big[i] = (char)('a' + i % 26);
    big[4000] = 0;
    write_file(txt, big);
    write_file(jsonl, "");
    o.seq_len = 8;
    o.shuffle = 1;
    CHECK(bora_loader_open(&o, &l) == BORA_OK);
    int64_t w = bora_loader_windows(l);
    CHECK(w == 500);
    int seen[500] = {0}, moved = 0;
    for (int64_t k = 0; k < 50; k++) {
        int32_t rows[10 * 8], t2[10 * 8], s2[10 * 8];
        CHECK(bora_loader_rows(l, k, 10, 0, 10, rows, t2, s2, &count) == BORA_OK);
        for (int r = 0; r < 10; r++) {
            int64_t at = (rows[r * 8] - 'a' + 26) % 26; /* the window's first letter */
            int64_t idx = bora_permute(5, 500, (uint64_t)(k * 10 + r));
            CHECK(at == (idx * 8) % 26);
            seen[idx]++;
            moved += idx != k * 10 + r;
        }
    }
    int once = 1;
    for (int i = 0; i < 500; i++)
        once &= seen[i] == 1;
    CHECK(once);
    CHECK(moved > 400);
    bora_loader_free(l);

    /* Eras of 64 windows over the same 500: every window once per pass, each era's windows
     * inside the era (the last one has 52), not in order; batch 1000 read directly equals batch
     * 1000 reached by reading every batch before it. */
    o.shuffle = 64;
    CHECK(bora_loader_open(&o, &l) == BORA_OK);
    bora_loader *l2 = NULL;
    CHECK(bora_loader_open(&o, &l2) == BORA_OK);
    if (l && l2) {
        int hits[500] = {0}, in_era = 1, in_order = 1;
        for (int64_t k = 0; k < 50; k++) {
            int32_t rows[10 * 8], t2[10 * 8], s2[10 * 8];
            CHECK(bora_loader_rows(l, k, 10, 0, 10, rows, t2, s2, &count) == BORA_OK);
            for (int r = 0; r < 10; r++) {
                int64_t i = k * 10 + r, first = (rows[r * 8] - 'a' + 26) % 26;
                int64_t e = i / 64, found = -1;
                for (int64_t ww = e * 64; ww < (e + 1) * 64 && ww < 500; ww++)
                    if ((ww * 8) % 26 == first && found < 0 && !hits[ww])
                        found = ww;
                in_era &= found >= 0;
                if (found >= 0)
                    hits[found]++;
                in_order &= found == i;
            }
        }
        int all = 1;
        for (int i = 0; i < 500; i++)
            all &= hits[i] == 1;
        CHECK(in_era && all && !in_order);
        int32_t a[10 * 8], b2[10 * 8], t2[10 * 8], s2[10 * 8];
        for (int64_t k = 0; k <= 1000; k++)
            CHECK(bora_loader_rows(l, k, 10, 0, 10, a, t2, s2, &count) == BORA_OK);
        CHECK(bora_loader_rows(l2, 1000, 10, 0, 10, b2, t2, s2, &count) == BORA_OK);
        CHECK(!memcmp(a, b2, sizeof a));
    }
    bora_loader_free(l);
    bora_loader_free(l2);

    /* A prefetching loader gives the batches of one that is not, in order and after a jump. */
    o.prefetch = 1;
    CHECK(bora_loader_open(&o, &l) == BORA_OK);
    o.prefetch = 0;
    CHECK(bora_loader_open(&o, &l2) == BORA_OK);
    if (l && l2) {
        int same = 1;
        int32_t a[10 * 8], b2[10 * 8], t2[10 * 8], s2[10 * 8], t3[10 * 8], s3[10 * 8];
        int64_t c2 = 0;
        const int64_t ks[] = {0, 1, 2, 3, 700, 701, 5, 6, 6, 7};
        for (size_t i = 0; i < sizeof ks / sizeof ks[0]; i++) {
            CHECK(bora_loader_rows(l, ks[i], 10, 0, 10, a, t2, s2, &count) == BORA_OK);
            CHECK(bora_loader_rows(l2, ks[i], 10, 0, 10, b2, t3, s3, &c2) == BORA_OK);
            same &= !memcmp(a, b2, sizeof a) && !memcmp(t2, t3, sizeof t2) &&
                    !memcmp(s2, s3, sizeof s2) && count == c2;
        }
        CHECK(same);
    }
    bora_loader_free(l);
    bora_loader_free(l2);

    /* Held out: validation is windows 0..99 of the unshuffled stream, training the rest. */
    o.shuffle = 0;
    o.skip_windows = 100;
    CHECK(bora_loader_open(&o, &l) == BORA_OK);
    bora_loader *val = NULL;
    CHECK(l && bora_loader_carve(l, 100, &val) == BORA_OK);
    if (l && val) {
        CHECK(bora_loader_windows(l) == 400 && bora_loader_windows(val) == 100);
        int32_t a[8], t2[8], s2[8];
        int ok = 1;
        for (int64_t k = 0; k < 500; k++) {
            CHECK(bora_loader_rows(l, k, 1, 0, 1, a, t2, s2, &count) == BORA_OK);
            ok &= (a[0] - 'a' + 26) % 26 == ((100 + k % 400) * 8) % 26;
            if (k < 100) {
                CHECK(bora_loader_rows(val, k, 1, 0, 1, a, t2, s2, &count) == BORA_OK);
                ok &= (a[0] - 'a' + 26) % 26 == (k * 8) % 26;
            }
        }
        CHECK(ok);
        bora_loader *none = NULL;
        CHECK(bora_loader_carve(l, 600, &none) == BORA_ERR_INVALID);
        CHECK_CONTAINS(bora_error_get(), "only 500 windows");
    }
    bora_loader_free(val);
    bora_loader_free(l);
    o.skip_windows = 0;

    /* A mixture of two datasets, 0.7 and 0.3 in blocks of 20 rows, then only the second from
     * step 4 (row 40): exactly 14 and 6 rows of each block, every dataset's windows taken in
     * its own order, each once, and batch 7 read directly equals batch 7 read in turn. */
    char mix_a[1024], mix_b[1024], text[8000];
    snprintf(mix_a, sizeof mix_a, "%s/mix_a.txt", argv[2]);
    snprintf(mix_b, sizeof mix_b, "%s/mix_b.txt", argv[2]);
    for (int part = 0; part < 2; part++) {
        size_t at = 0;
        for (int i = 0; i < 1000; i++)
            at += (size_t)snprintf(text + at, sizeof text - at, "%c%05d ", part ? 'b' : 'a', i);
        write_file(part ? mix_b : mix_a, text);
    }
    const char *ua[] = {mix_a}, *ub[] = {mix_b}, *names[] = {"a", "b"};
    bora_loader_opts parts[2] = {o, o};
    parts[0].urls = ua, parts[0].n_urls = 1;
    parts[1].urls = ub, parts[1].n_urls = 1;
    const int64_t steps[] = {0, 4};
    const double weights[] = {0.7, 0.3, 0, 1};
    bora_mixture_opts m = {2, steps, weights, 20, 10, 1};
    bora_loader *mix = NULL, *only[2] = {NULL, NULL};
    CHECK(bora_loader_open_mixture(parts, names, 2, &m, &mix) == BORA_OK);
    CHECK(bora_loader_open(&parts[0], &only[0]) == BORA_OK);
    CHECK(bora_loader_open(&parts[1], &only[1]) == BORA_OK);
    if (mix && only[0] && only[1]) {
        int64_t c[2] = {0, 0};
        CHECK(bora_loader_mixture_counts(mix, 0, c) == 20 && c[0] == 14 && c[1] == 6);
        /* every row of steps 0..9, sorted by dataset: dataset d's rows must be its windows
         * base..base+n, in some order */
        static int32_t rows[100][8];
        int32_t t2[10 * 8], s2[10 * 8];
        for (int64_t k = 0; k < 10; k++)
            CHECK(bora_loader_rows(mix, k, 10, 0, 10, rows[k * 10], t2, s2, &count) == BORA_OK);
        int exact = 1, windows_ok = 1;
        for (int blk = 0; blk < 5; blk++) {
            int na = 0;
            for (int r = blk * 20; r < blk * 20 + 20; r++)
                na += has_token(rows[r], 8, 'a');
            exact &= na == (blk < 2 ? 14 : 0);
        }
        /* dataset a: its windows 0..27 in stage 0; b: 0..11 there, 12..71 in stage 1 */
        for (int d = 0; d < 2; d++) {
            int64_t want = d ? 72 : 28;
            unsigned char *used = calloc((size_t)want, 1);
            for (int r = 0; used && r < 100; r++) {
                if (has_token(rows[r], 8, 'a') != (d == 0))
                    continue;
                int found = 0;
                for (int64_t j = 0; j < want && !found; j++) {
                    int32_t w8[8], tt[8], ss[8];
                    CHECK(bora_loader_rows(only[d], j, 1, 0, 1, w8, tt, ss, &count) == BORA_OK);
                    if (!used[j] && !memcmp(w8, rows[r], sizeof w8))
                        used[j] = 1, found = 1;
                }
                windows_ok &= found;
            }
            for (int64_t j = 0; used && j < want; j++)
                windows_ok &= used[j];
            free(used);
        }
        CHECK(exact);
        CHECK(windows_ok);
        bora_loader *again = NULL;
        m.prefetch = 0;
        CHECK(bora_loader_open_mixture(parts, names, 2, &m, &again) == BORA_OK);
        int32_t direct[10 * 8];
        CHECK(again && bora_loader_rows(again, 7, 10, 0, 10, direct, t2, s2, &count) == BORA_OK);
        CHECK(!memcmp(direct, rows[70], sizeof direct));
        bora_loader_free(again);
        /* a stage whose first row is not on a block boundary is refused */
        const int64_t bad_steps[] = {0, 3};
        bora_mixture_opts bad = {2, bad_steps, weights, 20, 10, 0};
        CHECK(bora_loader_open_mixture(parts, names, 2, &bad, &again) == BORA_ERR_CONFIG);
        CHECK_CONTAINS(bora_error_get(), "starts at row 30, not a multiple of");
    }
    bora_loader_free(mix);
    bora_loader_free(only[0]);
    bora_loader_free(only[1]);

    /* The data's digest reads a source not yet tokenized: one that cannot be read is an error
     * naming it, never a digest. One worker has 16 files of 64 kB to tokenize before it reaches
     * the last, which is deleted as soon as the first window is ready. */
    {
        char many[17][1100], *body = malloc(65537);
        const char *urls_many[17];
        CHECK(body != NULL);
        for (int i = 0; body && i < 65536; i++)
            body[i] = (char)('a' + i % 26);
        if (body)
            body[65536] = 0;
        for (int i = 0; body && i < 17; i++) {
            snprintf(many[i], sizeof many[i], "%s/many-%02d.txt", argv[2], i);
            write_file(many[i], body);
            urls_many[i] = many[i];
        }
        free(body);
        bora_loader_opts mo = {.urls = urls_many,
                               .n_urls = 17,
                               .text_key = "text",
                               .tok = tok,
                               .seq_len = 4,
                               .seed = 5,
                               .workers = 1};
        char many_cache[1100];
        snprintf(many_cache, sizeof many_cache, "%s/many-cache", argv[2]);
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", many_cache); /* nothing reused from a last run */
        CHECK(system(cmd) == 0);
        mo.cache_dir = many_cache;
        uint64_t hash = 1;
        CHECK(bora_loader_open(&mo, &l) == BORA_OK);
        if (l) {
            CHECK(unlink(many[16]) == 0);
            CHECK(bora_loader_hash(l, &hash) != BORA_OK);
            CHECK(hash == 0);
            CHECK_CONTAINS(bora_error_get(), "many-16.txt: ");
        }
        bora_loader_free(l);
    }

    /* The permutation is a bijection, and another seed gives another order. */
    const uint64_t sizes[] = {1, 2, 3, 7, 64, 65, 1000, 12345, 65536};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        uint64_t n = sizes[s];
        unsigned char *hit = calloc(n, 1);
        int ok = hit != NULL, differs = 0;
        for (uint64_t i = 0; ok && i < n; i++) {
            uint64_t p = bora_permute(42, n, i);
            ok = p < n && !hit[p];
            if (ok)
                hit[p] = 1;
            differs |= p != bora_permute(43, n, i);
        }
        if (!ok || (n > 3 && !differs)) {
            fprintf(stderr, "permutation of %llu: bijection %d, seed matters %d\n",
                    (unsigned long long)n, ok, differs);
            test_failures++;
        }
        free(hit);
    }
    bora_tokenizer_free(tok);
    return test_summary("test_loader");
}
