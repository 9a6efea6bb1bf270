/* core/train/wer_eval.c — the word error rate on an audio validation set, for bora eval and
 * for the trainer's evaluations: every validation clip (or the first wer_clips) transcribed
 * greedily (core/eval/transcribe.h) and
 * compared with its text (core/eval/wer.h). The clips come from the validation loader, in file
 * order, with the features the loss is computed on; a clip's reference is its decoder tokens
 * decoded (the start sequence, <|endoftext|> and the padding left out), which is its manifest
 * text as the tokenizer round-trips it (byte-level BPE: exactly). */
#include "../data/audio/prefix.h"
#include "../eval/transcribe.h"
#include "../util/log.h"
#include "../util/str.h"
#include "internal.h"

#include <stdlib.h>
#include <string.h>

bora_status tr_wer_build(trainer *t)
{
    int n_mels;
    int64_t frames;
    if (t->wer_clips == 0 || !t->eval || t->rank || !bora_eval_features(t->eval, &n_mels, &frames))
        return BORA_OK; /* not an audio model, not asked for, or a rank that does not evaluate */
    const char *name = t->model_entry->ops->name;
    bora_status st = bora_transcriber_new(t->store, (const bora_model_ops *)t->model_entry->ops,
                                          t->model, name, 0, &t->wer);
    if (st == BORA_ERR_UNSUPPORTED) { /* an audio model that only trains: the loss alone */
        bora_log(BORA_LOG_INFO, "eval: model %s cannot transcribe (%s): no word error rate", name,
                 bora_error_get());
        return BORA_OK;
    }
    return st == BORA_OK ? BORA_OK
                         : bora_error_set(st, "eval (word error rate): %s", bora_error_get());
}

typedef struct clip_source {
    trainer *t;
    int32_t *ids, *targets, *segs; /* one row */
} clip_source;

static bora_status validation_clip(void *ctx, int64_t i, float *features, char **reference)
{
    clip_source *s = ctx;
    int64_t count = 0;
    bora_status st = bora_loader_rows(s->t->val, i, 1, 0, 1, s->ids, s->targets, s->segs, &count);
    if (st == BORA_OK)
        st = bora_loader_features(s->t->val, i, 1, 0, 1, features);
    if (st == BORA_OK)
        st = bora_transcript_text(s->t->tok, s->ids, (size_t)s->t->seq_len,
                                  bora_loader_eos(s->t->val), reference);
    return st;
}

bora_status tr_wer_run(trainer *t, bora_wer *w, double *seconds)
{
    double t0 = bora_now_s();
    bora_status st = bora_transcriber_ready(t->wer);
    if (st != BORA_OK)
        return st;
    bora_config *data = bora_cfg_child(bora_cfg_root(t->cfg), "data");
    const char *language = "", *task = "transcribe";
    bora_cfg_string(data, "language", "", &language);
    bora_cfg_string(data, "task", "transcribe", &task);
    int32_t prefix[BORA_WHISPER_PREFIX_MAX];
    int n_prefix = 0;
    if ((st = bora_whisper_prefix(t->tok, *language ? language : NULL, task, 0, prefix,
                                  &n_prefix)) != BORA_OK)
        return st;
    int64_t n = bora_loader_windows(t->val);
    if (t->wer_clips > 0 && t->wer_clips < n)
        n = t->wer_clips;
    size_t row = (size_t)t->seq_len;
    clip_source s = {t, malloc(row * sizeof(int32_t)), malloc(row * sizeof(int32_t)),
                     malloc(row * sizeof(int32_t))};
    if (!s.ids || !s.targets || !s.segs)
        st = bora_error_set(BORA_ERR_NOMEM, "out of memory");
    else
        st = bora_transcribe_wer(t->wer, t->tok, prefix, n_prefix, bora_loader_eos(t->val), n,
                                 validation_clip, &s, 50, w);
    free(s.ids);
    free(s.targets);
    free(s.segs);
    *seconds = bora_now_s() - t0;
    return st;
}
