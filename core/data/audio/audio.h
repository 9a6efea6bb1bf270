/* core/data/audio/audio.h — Whisper's audio front end: a clip's bytes (WAV, FLAC, OGG/Vorbis,
 * anything libsndfile reads) to 16 kHz mono samples, and those to the log-mel features
 * Hugging Face's WhisperFeatureExtractor computes.
 *
 *     bora_mel *mel;
 *     bora_mel_opts o = bora_mel_defaults();               // 80 mels, 30 s window
 *     if (bora_mel_create(&o, &mel) != BORA_OK) ...        // plans and filters, made once
 *     float *feat = malloc(bora_mel_size(mel) * sizeof *feat);  // (n_mels, frames) row-major
 *     bora_audio_info info;
 *     bora_status st = bora_mel_of_bytes(mel, bytes, len, "clip.flac", feat, &info);
 *     if (st == BORA_ERR_UNSUPPORTED) ...                  // longer than the window, not cut
 *
 * Decoding (decode.c): the channels are averaged to mono; integer formats are read as float
 * the way libsndfile scales them (int16 by 1/32768, Whisper's convention, exactly); a clip of
 * another rate is resampled to 16 kHz by libsoxr at its HQ setting (a 16 kHz clip is passed
 * through untouched). HQ, not VHQ: its noise and aliasing sit near -120 dB, under the 80 dB the
 * features keep below a clip's loudest bin (max - 8 in log10 power), and it is what `sox`'s
 * `rate` does by default.
 *
 * Features (mel.c), as WhisperFeatureExtractor: the samples zero-padded (or cut) to
 * n_samples; a 400-point periodic Hann window every 160 samples over the signal reflect-padded
 * by 200 each side; the power spectrum (double precision FFT); the last frame dropped; a Slaney
 * mel filterbank (0-8000 Hz, Slaney's area normalisation); log10(max(x, 1e-10)); max(x, top - 8)
 * for top the clip's largest; (x + 4) / 4. frames = n_samples / 160 (3,000 for 30 s).
 *
 * bora_mel_of_bytes is a pure function of the bytes and the options: the same bits at any
 * thread count and on every call (FFTW's plans are estimated, never measured, and the sums run
 * in a fixed order), so a cache may key features on the file's content. A bora_mel is
 * read-only once made: any number of threads may compute with one at once. */
#ifndef BORA_CORE_AUDIO_H
#define BORA_CORE_AUDIO_H

#include <bora/plugin.h>
#include <stddef.h>
#include <stdint.h>

#define BORA_AUDIO_RATE 16000 /* Whisper's sample rate, Hz */

/* What decoding found, for messages and a display. */
typedef struct bora_audio_info {
    int source_rate; /* Hz, as the file says */
    int channels;    /* as the file says, before the mix to mono */
    int64_t samples; /* 16 kHz mono samples decoded (before padding or cutting) */
    int cut;         /* 1: the clip was longer than the window and was cut to it */
} bora_audio_info;

/* A clip's bytes as 16 kHz mono float samples (*samples malloc'ed, *n of them). name is what
 * messages call the clip (a path or URL). An unreadable or truncated file is BORA_ERR_IO with
 * libsndfile's reason and the name; an empty clip, a zero rate or channel count
 * BORA_ERR_INVALID. */
bora_status bora_audio_decode(const void *bytes, size_t len, const char *name, float **samples,
                              int64_t *n, bora_audio_info *info);
/* The same, of a path or http(s) URL, read as the data sources are (source.h). */
bora_status bora_audio_read(const char *path, float **samples, int64_t *n, bora_audio_info *info);

typedef struct bora_mel_opts {
    int n_mels;        /* mel bins: 80 (Whisper up to large-v2) or 128 (large-v3) */
    int64_t n_samples; /* the window, in 16 kHz samples: 480000 (30 s) */
    int cut_long;      /* a clip longer than the window: 1 cut to it, 0 refuse it */
} bora_mel_opts;

bora_mel_opts bora_mel_defaults(void);

typedef struct bora_mel bora_mel;

/* The window, the filterbank and the FFT plan for opts (checked: n_mels 1..256, n_samples at
 * least n_fft (400); frames = n_samples / 160, rounded down). */
bora_status bora_mel_create(const bora_mel_opts *opts, bora_mel **out);
void bora_mel_free(bora_mel *m);
int bora_mel_n_mels(const bora_mel *m);
int64_t bora_mel_frames(const bora_mel *m);
/* Floats in one feature array: n_mels * frames. */
size_t bora_mel_size(const bora_mel *m);

/* Features (n_mels, frames), row-major, of n 16 kHz mono samples. A clip longer than the
 * window is BORA_ERR_UNSUPPORTED naming both lengths, unless opts.cut_long (then *cut = 1);
 * an empty one, or one holding a NaN or infinity, BORA_ERR_INVALID. name is for messages;
 * cut may be NULL. */
bora_status bora_mel_compute(const bora_mel *m, const float *samples, int64_t n, const char *name,
                             float *out, int *cut);
/* File bytes to features: bora_audio_decode then bora_mel_compute. info may be NULL. */
bora_status bora_mel_of_bytes(const bora_mel *m, const void *bytes, size_t len, const char *name,
                              float *out, bora_audio_info *info);

#endif
