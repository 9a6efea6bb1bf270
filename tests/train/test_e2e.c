/* tests/train/test_e2e.c — GPT-2 learns English: a 2-layer GPT-2 (hidden 128) trained for 300
 * steps on the Brown corpus with the GPT-2 tokenizer ends with a training loss at least 1 nat
 * below the corpus's unigram entropy under that tokenizer (the loss of the best model that
 * ignores context), computed here over the same token stream the loader serves.
 * Batches of 128 windows of 64 tokens (2.5M tokens in all, 1.6 passes over Brown), shuffled;
 * AdamW at 6e-3 with 30 steps of warmup, cosine. About 15 minutes on two cores (3,000 tokens/s).
 *
 * With MODEL (a YAML flow mapping, its seq_len 64), BATCH and STEPS the same check trains that
 * model instead: the Llama family's is a 4-layer Llama (hidden 128, GQA, tied head) with Llama
 * 3's tokenizer (128,256 tokens), 600 steps of 64 windows (the same tokens in twice the steps);
 * the Gemma family's a 4-layer Gemma 3 (hidden 64, a sliding window of 16 on every other layer)
 * with Gemma 3's tokenizer (262,144 tokens), 600 steps of 32 windows (a 262k-wide head makes
 * every row dear: 1.2M tokens, about 0.9 passes).
 *
 * usage: test_e2e PLUGIN_DIR TOKENIZER TEXT WORK_DIR [MODEL BATCH STEPS] */
#include "../test.h"
#include "data/loader.h"
#include "train_rig.h"
#include "util/log.h"

#include <math.h>

#define SEQ_LEN 64
#define MAX_STEPS 4000

/* Entropy (nats) of the token frequencies over every window's inputs. */
static double unigram_entropy(const char *tokenizer, const char *text)
{
    bora_tokenizer *tok;
    if (bora_tokenizer_load(tokenizer, &tok) != BORA_OK) {
        fprintf(stderr, "%s\n", bora_error_get());
        return NAN;
    }
    const char *urls[] = {text};
    bora_loader_opts o = {
        .urls = urls, .n_urls = 1, .text_key = "text", .tok = tok, .seq_len = SEQ_LEN};
    bora_loader *l;
    double h = NAN;
    if (bora_loader_open(&o, &l) == BORA_OK) {
        size_t vocab = bora_tokenizer_vocab_size(tok);
        int64_t w = bora_loader_windows(l), chunk = 1024, total = 0, ignored;
        uint64_t *counts = calloc(vocab, sizeof *counts);
        int32_t *ids = malloc(chunk * SEQ_LEN * sizeof *ids),
                *tg = malloc(chunk * SEQ_LEN * sizeof *tg),
                *sg = malloc(chunk * SEQ_LEN * sizeof *sg);
        for (int64_t r = 0; counts && ids && tg && sg && r < w; r += chunk) {
            int64_t n = w - r < chunk ? w - r : chunk;
            bora_loader_rows(l, 0, w, r, n, ids, tg, sg, &ignored);
            for (int64_t i = 0; i < n * SEQ_LEN; i++)
                counts[ids[i]]++;
            total += n * SEQ_LEN;
        }
        h = 0;
        for (size_t i = 0; counts && i < vocab; i++)
            if (counts[i])
                h -= (double)counts[i] / (double)total * log((double)counts[i] / (double)total);
        printf("unigram entropy: %.4f nats over %lld tokens\n", h, (long long)total);
        free(counts);
        free(ids);
        free(tg);
        free(sg);
        bora_loader_free(l);
    }
    bora_tokenizer_free(tok);
    return h;
}

int main(int argc, char **argv)
{
    if (argc != 5 && argc != 8) {
        fprintf(stderr, "usage: test_e2e PLUGIN_DIR TOKENIZER TEXT WORK_DIR [MODEL BATCH STEPS]\n");
        return 2;
    }
    const char *model = "{type: gpt2, seq_len: 64, hidden_dim: 128, num_layers: 2, num_heads: 4}";
    int batch = 128, steps = 300;
    if (argc == 8) {
        model = argv[5];
        batch = atoi(argv[6]);
        steps = atoi(argv[7]);
        if (batch < 1 || steps < 20 || steps > MAX_STEPS)
            return 2;
    }
    const char *plugin_dir = argv[1], *tokenizer = argv[2], *text = argv[3], *work = argv[4];
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "rm -rf '%s' && mkdir -p '%s'", work, work);
    if (system(cmd) != 0)
        return 2;
    double h = unigram_entropy(tokenizer, text);
    CHECK(isfinite(h));
    char yaml[2048];
    snprintf(yaml, sizeof yaml,
             "model: %s\n"
             "optimizer: {type: adamw, learning_rate: 6e-3, warmup: 30, lr_schedule: cosine}\n"
             "data: {train_urls: [%s], tokenizer: %s, shuffle: true}\n"
             "trainer:\n"
             "  num_train_steps: %d\n  train_batch_size: %d\n  num_threads: 0\n  seed: 1\n"
             "  id: e2e\n  checkpointer: {base_path: %s/ckpt}\n"
             "  tracker: {type: jsonl, path: %s/metrics.jsonl}\n",
             model, text, tokenizer, steps, batch, work, work);
    CHECK(train_yaml(plugin_dir, "e2e.yaml", yaml) == 0);

    char path[1200];
    snprintf(path, sizeof path, "%s/metrics.jsonl", work);
    double loss[MAX_STEPS + 1];
    int n = read_losses(path, loss, steps);
    CHECK(n == steps);
    if (n == steps && isfinite(h)) {
        double mean = 0;
        for (int i = steps - 20; i < steps; i++)
            mean += loss[i] / 20;
        printf("loss: first %.4f, final %.4f, mean of the last 20 %.4f; unigram entropy %.4f "
               "(final is %.3f nats below)\n",
               loss[0], loss[steps - 1], mean, h, h - loss[steps - 1]);
        CHECK(loss[steps - 1] <= h - 1.0);
        CHECK(mean <= h - 1.0);
    }
    return test_summary("test_e2e");
}
