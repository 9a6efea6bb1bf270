/* core/cli/cmd_transcribe.c — `bora transcribe --checkpoint DIR | --hf DIR CLIP [CLIP ...]`:
 * each clip's greedy transcript from a speech model (model.type: whisper), printed as
 * "path<TAB>text". The model is loaded as bora generate loads one (load.h); each clip is decoded
 * and resampled to 16 kHz mono and made into the log-mel features of the model's mel and frame
 * sizes (core/data/audio); the decoder starts from Whisper's start sequence (prefix.h) and runs
 * as core/eval/transcribe.h says. A clip that cannot be read, or is longer than the model's
 * window, is reported by name and the others are still transcribed (exit status 1). */
#include "../data/audio/audio.h"
#include "../data/audio/prefix.h"
#include "../data/loader.h"
#include "../eval/transcribe.h"
#include "../util/log.h"
#include "../util/str.h"
#include "load.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct transcribe_opts {
    const char *checkpoint, *hf, *tokenizer, *language, *task;
    int64_t max_tokens; /* 0: until the window is full */
    int no_cache, print_ids, timestamps;
    const char **clips;
    int n_clips;
} transcribe_opts;

static const char *const transcribe_options[] = {"--checkpoint",
                                                 "--hf",
                                                 "--tokenizer",
                                                 "--language",
                                                 "--task",
                                                 "--max-tokens",
                                                 "--no-cache",
                                                 "--timestamps",
                                                 "--ids",
                                                 BORA_CLI_GLOBAL_OPTIONS,
                                                 NULL};

static int parse_opts(const bora_cli *cli, transcribe_opts *o)
{
    memset(o, 0, sizeof *o);
    o->clips = calloc((size_t)cli->argc + 1, sizeof *o->clips);
    if (!o->clips)
        return 1;
    for (int i = 0; i < cli->argc; i++) {
        const char *a = cli->argv[i], *v = i + 1 < cli->argc ? cli->argv[i + 1] : NULL;
        const char **field = !strcmp(a, "--checkpoint")  ? &o->checkpoint
                             : !strcmp(a, "--hf")        ? &o->hf
                             : !strcmp(a, "--tokenizer") ? &o->tokenizer
                             : !strcmp(a, "--language")  ? &o->language
                             : !strcmp(a, "--task")      ? &o->task
                                                         : NULL;
        if (field || !strcmp(a, "--max-tokens")) {
            if (!v) {
                bora_log(BORA_LOG_ERROR, "transcribe: %s needs a value", a);
                return 2;
            }
            i++;
            if (field) {
                *field = v;
                continue;
            }
            char *end = NULL;
            o->max_tokens = strtoll(v, &end, 10);
            if (!*v || *end || o->max_tokens < 1 || o->max_tokens > 1000000) {
                bora_log(BORA_LOG_ERROR,
                         "transcribe: --max-tokens: '%s' is not a number in 1..1000000", v);
                return 2;
            }
        } else if (!strcmp(a, "--no-cache"))
            o->no_cache = 1;
        else if (!strcmp(a, "--timestamps"))
            o->timestamps = 1;
        else if (!strcmp(a, "--ids"))
            o->print_ids = 1;
        else if (a[0] == '-' && a[1])
            return bora_cli_unknown_option("transcribe", a, transcribe_options);
        else
            o->clips[o->n_clips++] = a;
    }
    if (!o->checkpoint == !o->hf || o->n_clips < 1) {
        bora_log(BORA_LOG_ERROR, "transcribe: give --checkpoint DIR (or --hf DIR, a Hugging Face "
                                 "folder) and one or more audio files");
        return 2;
    }
    return 0;
}

/* One clip: its features, transcript and line of output. */
static bora_status transcribe_clip(bora_transcriber *tr, const bora_mel *mel, float *features,
                                   const bora_tokenizer *tok, const int32_t *prefix, int n_prefix,
                                   int32_t eot, int64_t max_tokens, const char *path, bora_ids *ids,
                                   int print_ids)
{
    float *samples = NULL;
    int64_t n = 0;
    bora_audio_info info;
    bora_status st = bora_audio_read(path, &samples, &n, &info);
    if (st == BORA_OK)
        st = bora_mel_compute(mel, samples, n, path, features, NULL);
    free(samples);
    if (st == BORA_ERR_UNSUPPORTED)
        return bora_error_set(st, "%s (the model hears at most %.2f s)", bora_error_get(),
                              (double)bora_transcriber_frames(tr) * 160 / BORA_AUDIO_RATE);
    if (st == BORA_OK)
        st = bora_transcribe(tr, features, prefix, n_prefix, eot, max_tokens, ids);
    char *text = NULL;
    if (st == BORA_OK)
        st = bora_transcript_text(tok, ids->ids, ids->n, eot, &text);
    if (st != BORA_OK)
        return st;
    /* the text on one line: Whisper's begins with the space of its first word */
    const char *shown = text;
    while (*shown == ' ')
        shown++;
    for (char *c = text; *c; c++)
        if (*c == '\n' || *c == '\t')
            *c = ' ';
    printf("%s\t%s\n", path, shown);
    fflush(stdout);
    free(text);
    if (print_ids) {
        fprintf(stderr, "%s: ids [", path);
        for (size_t i = 0; i < ids->n; i++)
            fprintf(stderr, "%s%d", i ? ", " : "", ids->ids[i]);
        fputs("]\n", stderr);
    }
    return BORA_OK;
}

int bora_cmd_transcribe(const bora_cli *cli)
{
    transcribe_opts o;
    int rc = parse_opts(cli, &o);
    if (rc) {
        free(o.clips);
        return rc;
    }
    rc = 1;
    bora_loaded L;
    bora_transcriber *tr = NULL;
    bora_mel *mel = NULL;
    float *features = NULL;
    bora_ids ids = {0};
    if (bora_load_model(cli, "transcribe", o.checkpoint, o.hf, o.tokenizer, &L) != BORA_OK)
        goto out;
    if (bora_transcriber_new(L.store, L.mops, L.model, L.model_name, o.no_cache, &tr) != BORA_OK) {
        bora_log(BORA_LOG_ERROR, "transcribe: %s", bora_error_get());
        goto out;
    }
    if (bora_load_weights(&L, "transcribe") != BORA_OK)
        goto out;
    if (bora_transcriber_ready(tr) != BORA_OK) {
        bora_log(BORA_LOG_ERROR, "transcribe: %s", bora_error_get());
        goto out;
    }
    /* the start sequence: --language/--task, else the run's data.language and data.task */
    bora_config *data = bora_cfg_child(bora_cfg_root(L.cfg), "data");
    const char *language = o.language, *task = o.task;
    if (!language && data)
        bora_cfg_string(data, "language", NULL, &language);
    if (!task && data)
        bora_cfg_string(data, "task", NULL, &task);
    if (language && !*language)
        language = NULL;
    int32_t prefix[BORA_WHISPER_PREFIX_MAX], eot = bora_eos_id(L.tok);
    int n_prefix = 0;
    if (bora_whisper_prefix(L.tok, language, task, o.timestamps, prefix, &n_prefix) != BORA_OK ||
        eot < 0) {
        bora_log(BORA_LOG_ERROR, "transcribe: %s",
                 eot < 0 ? "the tokenizer has no <|endoftext|>" : bora_error_get());
        goto out;
    }
    bora_mel_opts mo = bora_mel_defaults();
    mo.n_mels = bora_transcriber_mels(tr);
    mo.n_samples = bora_transcriber_frames(tr) * 160;
    if (bora_mel_create(&mo, &mel) != BORA_OK ||
        !(features = malloc(bora_mel_size(mel) * sizeof *features))) {
        bora_log(BORA_LOG_ERROR, "transcribe: %s", bora_error_get());
        goto out;
    }
    int64_t max_tokens = o.max_tokens ? o.max_tokens : bora_transcriber_positions(tr);
    int failed = 0;
    int64_t tokens = 0;
    double t0 = bora_now_s();
    for (int i = 0; i < o.n_clips; i++) {
        ids.n = 0; /* a clip that fails before decoding adds no tokens */
        if (transcribe_clip(tr, mel, features, L.tok, prefix, n_prefix, eot, max_tokens, o.clips[i],
                            &ids, o.print_ids) != BORA_OK) {
            bora_log(BORA_LOG_ERROR, "transcribe: %s", bora_error_get());
            failed++;
        }
        tokens += (int64_t)ids.n;
    }
    double dt = bora_now_s() - t0;
    fprintf(stderr,
            "transcribe: %d clip%s (%d failed), %lld tokens in %.2f s (%.1f tokens/s); %s\n",
            o.n_clips, o.n_clips == 1 ? "" : "s", failed, (long long)tokens, dt,
            dt > 0 ? (double)tokens / dt : 0.0,
            bora_transcriber_cached(tr) ? "KV cache" : "no KV cache");
    rc = failed ? 1 : 0;
out:
    free(features);
    bora_mel_free(mel);
    bora_ids_free(&ids);
    bora_transcriber_free(tr);
    bora_loaded_free(&L);
    free(o.clips);
    return rc;
}
