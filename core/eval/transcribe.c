/* core/eval/transcribe.c — greedy transcription (see transcribe.h). */
#include "transcribe.h"

#include "../train/inputs.h"
#include "../util/log.h"
#include "../util/str.h"
#include "logits.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct bora_transcriber {
    const char *model_name;
    int cached;
    bora_logits prefill, decode, eval; /* prefill and decode, or eval */
    int mels;
    int64_t frames, T, V;
    int32_t *window; /* (T) the tokens so far, zero-padded */
    int32_t *segs;   /* (T) zeros: the window is one document */
    float *row;      /* (V) one position's logits */
};

/* The graph's input_features: (batch 1, mel, frame) in that order, so that the front end's
 * (mel, frame) row-major features are its bytes. */
static bora_status features_shape(const bora_transcriber *t, const g_graph *g, int *mels,
                                  int64_t *frames)
{
    for (size_t i = 0; i < g->n_inputs; i++) {
        const gval *v = g->inputs[i].value;
        if (!v->label || strcmp(v->label, "input_features"))
            continue;
        if (v->ndim != 3 || strcmp(v->names[0], "batch") || strcmp(v->names[1], "mel") ||
            strcmp(v->names[2], "frame") || v->dims[0] != 1 || v->dtype != BORA_DTYPE_F32 ||
            v->dims[1] < 1 || v->dims[1] > 256 || v->dims[2] < 1) {
            char what[256];
            g_describe(v, what, sizeof what);
            return bora_error_set(BORA_ERR_INVALID,
                                  "model %s: input_features is %s, not (batch 1, mel, frame) f32",
                                  t->model_name, what);
        }
        *mels = (int)v->dims[1];
        *frames = v->dims[2];
        return BORA_OK;
    }
    return bora_error_set(BORA_ERR_INVALID,
                          "model %s reads no input_features: it does not transcribe audio (a "
                          "speech model such as model.type: whisper does)",
                          t->model_name);
}

bora_status bora_transcriber_new(g_store *store, const bora_model_ops *mops, bora_model *model,
                                 const char *model_name, int no_cache, bora_transcriber **out)
{
    *out = NULL;
    bora_transcriber *t = calloc(1, sizeof *t);
    if (!t)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    t->model_name = model_name;
    bora_status st = BORA_ERR_UNSUPPORTED;
    if (!no_cache) {
        st = bora_logits_build(store, mops, model, model_name, BORA_MODE_PREFILL, &t->prefill);
        if (st == BORA_OK)
            st = bora_logits_build(store, mops, model, model_name, BORA_MODE_DECODE, &t->decode);
        if (st == BORA_OK)
            t->cached = 1;
        else if (st == BORA_ERR_UNSUPPORTED) {
            bora_logits_free(&t->prefill); /* the eval graph stands in for both */
            bora_log(BORA_LOG_INFO,
                     "transcribe: model %s has no KV cache (%s); each token runs the whole "
                     "window",
                     model_name, bora_error_get());
        }
    }
    if (!t->cached && st == BORA_ERR_UNSUPPORTED)
        st = bora_logits_build(store, mops, model, model_name, BORA_MODE_EVAL, &t->eval);
    if (st == BORA_OK)
        st = features_shape(t, t->cached ? t->prefill.g : t->eval.g, &t->mels, &t->frames);
    if (st != BORA_OK) {
        st = bora_error_set(st, "model %s: %s", model_name, bora_error_get());
        bora_transcriber_free(t);
        return st;
    }
    *out = t;
    return BORA_OK;
}

bora_status bora_transcriber_ready(bora_transcriber *t)
{
    bora_logits *full = t->cached ? &t->prefill : &t->eval;
    bora_status st = bora_logits_layout(full, t->model_name);
    if (st == BORA_OK && t->cached)
        st = bora_logits_layout(&t->decode, t->model_name);
    if (st != BORA_OK)
        return st;
    t->T = full->T;
    t->V = full->V;
    if (t->cached && (t->decode.T != 1 || t->decode.V != t->V))
        return bora_error_set(BORA_ERR_INVALID,
                              "model %s's decode graph gives %lld positions of %lld logits, not "
                              "1 of %lld",
                              t->model_name, (long long)t->decode.T, (long long)t->decode.V,
                              (long long)t->V);
    free(t->window);
    free(t->segs);
    free(t->row);
    t->window = calloc((size_t)t->T, sizeof *t->window);
    t->segs = calloc((size_t)t->T, sizeof *t->segs);
    t->row = malloc(sizeof(float) * (size_t)t->V);
    if (!t->window || !t->segs || !t->row)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    return BORA_OK;
}

void bora_transcriber_free(bora_transcriber *t)
{
    if (!t)
        return;
    bora_logits_free(&t->prefill);
    bora_logits_free(&t->decode);
    bora_logits_free(&t->eval);
    free(t->window);
    free(t->segs);
    free(t->row);
    free(t);
}

int bora_transcriber_mels(const bora_transcriber *t)
{
    return t->mels;
}

int64_t bora_transcriber_frames(const bora_transcriber *t)
{
    return t->frames;
}

int64_t bora_transcriber_positions(const bora_transcriber *t)
{
    return t->T;
}

int bora_transcriber_cached(const bora_transcriber *t)
{
    return t->cached;
}

/* The most likely token: the first of the largest logits. */
static int32_t argmax(const float *row, int64_t V)
{
    int64_t best = 0;
    for (int64_t v = 1; v < V; v++)
        if (row[v] > row[best])
            best = v;
    return (int32_t)best;
}

/* The whole window: the features and the first n tokens (the rest zeros); the logits of
 * position n - 1 into t->row. Prefill (with the cache) or eval. */
static bora_status run_window(bora_transcriber *t, const float *features, size_t n)
{
    bora_logits *full = t->cached ? &t->prefill : &t->eval;
    g_graph *g = full->g;
    size_t fbytes = sizeof(float) * (size_t)t->mels * (size_t)t->frames;
    int32_t held = (int32_t)n;
    memset(t->window + n, 0, sizeof(int32_t) * ((size_t)t->T - n));
    bora_status st = g_set_input(g, "input_ids", t->window, sizeof(int32_t) * (size_t)t->T);
    if (st == BORA_OK)
        st = g_set_input(g, "input_features", features, fbytes);
    if (st == BORA_OK && bora_inputs_reads(g, "segment_ids")) /* one document */
        st = g_set_input(g, "segment_ids", t->segs, sizeof(int32_t) * (size_t)t->T);
    if (st == BORA_OK && t->cached && bora_inputs_reads(g, "key_length"))
        st = g_set_input(g, "key_length", &held, sizeof held);
    if (st == BORA_OK)
        st = bora_logits_run_row(full, (int64_t)n - 1, t->row);
    return st;
}

/* One decode step: token at position p, attending over p + 1 cached positions. */
static bora_status run_step(bora_transcriber *t, int32_t token, int32_t p)
{
    g_graph *g = t->decode.g;
    int32_t len = p + 1;
    bora_status st = g_set_input(g, "input_ids", &token, sizeof token);
    if (st == BORA_OK && bora_inputs_reads(g, "position"))
        st = g_set_input(g, "position", &p, sizeof p);
    if (st == BORA_OK && bora_inputs_reads(g, "key_length"))
        st = g_set_input(g, "key_length", &len, sizeof len);
    if (st == BORA_OK)
        st = bora_logits_run_row(&t->decode, 0, t->row);
    return st;
}

bora_status bora_transcribe(bora_transcriber *t, const float *features, const int32_t *prefix,
                            int n_prefix, int32_t eot, int64_t max_tokens, bora_ids *out)
{
    out->n = 0;
    if (n_prefix < 1 || n_prefix >= t->T)
        return bora_error_set(BORA_ERR_INVALID,
                              "transcribe: a start sequence of %d tokens does not leave room in "
                              "the decoder's %lld positions",
                              n_prefix, (long long)t->T);
    memcpy(t->window, prefix, sizeof(int32_t) * (size_t)n_prefix);
    size_t n = (size_t)n_prefix;
    bora_status st = run_window(t, features, n);
    while (st == BORA_OK) {
        int32_t next = argmax(t->row, t->V);
        if (next == eot)
            break;
        t->window[n++] = next;
        if ((st = bora_ids_push(out, next)) != BORA_OK)
            return st;
        if ((int64_t)out->n >= max_tokens || (int64_t)n >= t->T)
            break;
        st = t->cached ? run_step(t, next, (int32_t)n - 1) : run_window(t, features, n);
    }
    if (st != BORA_OK)
        return bora_error_set(st, "transcribe: %s", bora_error_get());
    return BORA_OK;
}

bora_status bora_transcript_text(const bora_tokenizer *tok, const int32_t *ids, size_t n,
                                 int32_t eot, char **text)
{
    *text = NULL;
    int32_t *kept = malloc(sizeof(int32_t) * (n ? n : 1));
    if (!kept)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    size_t k = 0;
    for (size_t i = 0; i < n; i++)
        if ((eot < 0 || ids[i] < eot) && bora_tokenizer_token_bytes(tok, ids[i]) > 0)
            kept[k++] = ids[i];
    size_t len = 0;
    bora_status st = bora_tokenizer_decode(tok, kept, k, text, &len);
    free(kept);
    return st;
}

bora_status bora_transcribe_wer(bora_transcriber *t, const bora_tokenizer *tok,
                                const int32_t *prefix, int n_prefix, int32_t eot, int64_t n,
                                bora_clip_fn get, void *ctx, int64_t progress_every, bora_wer *w)
{
    memset(w, 0, sizeof *w);
    size_t floats = (size_t)t->mels * (size_t)t->frames;
    float *features = malloc(sizeof(float) * floats);
    if (!features)
        return bora_error_set(BORA_ERR_NOMEM, "out of memory");
    bora_ids ids = {0};
    bora_status st = BORA_OK;
    double t0 = bora_now_s();
    for (int64_t i = 0; i < n && st == BORA_OK; i++) {
        char *reference = NULL, *text = NULL;
        st = get(ctx, i, features, &reference);
        if (st == BORA_OK)
            st = bora_transcribe(t, features, prefix, n_prefix, eot, t->T, &ids);
        if (st == BORA_OK)
            st = bora_transcript_text(tok, ids.ids, ids.n, eot, &text);
        if (st == BORA_OK)
            st = bora_wer_add(w, reference, text);
        free(reference);
        free(text);
        if (st == BORA_OK && progress_every > 0 && ((i + 1) % progress_every == 0 || i + 1 == n))
            fprintf(stderr, "wer: %lld/%lld clips, WER %.2f%% so far (%.1f s)\n",
                    (long long)(i + 1), (long long)n, 100.0 * bora_wer_rate(w), bora_now_s() - t0);
    }
    bora_ids_free(&ids);
    free(features);
    return st;
}
