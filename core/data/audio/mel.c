/* core/data/audio/mel.c — Whisper's log-mel features of 16 kHz samples, as Hugging Face's
 * WhisperFeatureExtractor computes them (feature_extraction_whisper.py, audio_utils.py:
 * window_function, spectrogram, mel_filter_bank), in double precision to a float result. */
#include "../../util/log.h"
#include "audio.h"

#include <fftw3.h>
#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

enum {
    N_FFT = 400, /* 25 ms at 16 kHz */
    HOP = 160,   /* 10 ms */
    N_BINS = N_FFT / 2 + 1,
    MAX_MELS = 256,
};

struct bora_mel {
    bora_mel_opts o;
    int64_t frames;
    double window[N_FFT]; /* periodic Hann */
    double *filters;      /* (n_mels, N_BINS), Slaney-normalised triangles */
    int (*range)[2];      /* (n_mels, 2): each filter's first and past-last nonzero bin */
    fftw_plan plan;       /* r2c of N_FFT, executed on per-call arrays */
};

/* FFTW's planner is not thread-safe (execution is): every plan is made and destroyed under it. */
static pthread_mutex_t planner = PTHREAD_MUTEX_INITIALIZER;

bora_mel_opts bora_mel_defaults(void)
{
    bora_mel_opts o = {.n_mels = 80, .n_samples = 30 * BORA_AUDIO_RATE, .cut_long = 0};
    return o;
}

/* The Slaney mel scale (librosa's default, htk=False): linear below 1 kHz, log above. */
static double hz_to_mel(double hz)
{
    const double step = 27.0 / log(6.4);
    return hz < 1000.0 ? 3.0 * hz / 200.0 : 15.0 + log(hz / 1000.0) * step;
}

static double mel_to_hz(double mel)
{
    const double step = log(6.4) / 27.0;
    return mel < 15.0 ? 200.0 * mel / 3.0 : 1000.0 * exp(step * (mel - 15.0));
}

/* mel_filter_bank(N_BINS, n_mels, 0, 8000, 16000, norm="slaney", mel_scale="slaney"):
 * n_mels + 2 edges evenly spaced in mel, a triangle from edge m to m + 2 peaking at m + 1 over
 * the FFT bins' frequencies, each scaled by 2 / (its width in Hz) to unit area. */
static void make_filters(bora_mel *m)
{
    int nm = m->o.n_mels;
    double edges[MAX_MELS + 2];
    double lo = hz_to_mel(0.0), hi = hz_to_mel(BORA_AUDIO_RATE / 2.0);
    for (int i = 0; i < nm + 2; i++)
        edges[i] = mel_to_hz(i == nm + 1 ? hi : lo + i * ((hi - lo) / (nm + 1)));
    for (int f = 0; f < nm; f++) {
        double *row = m->filters + (size_t)f * N_BINS;
        double enorm = 2.0 / (edges[f + 2] - edges[f]);
        m->range[f][0] = N_BINS, m->range[f][1] = 0;
        for (int b = 0; b < N_BINS; b++) {
            double hz = b * (BORA_AUDIO_RATE / 2.0) / (N_BINS - 1);
            double down = (hz - edges[f]) / (edges[f + 1] - edges[f]);
            double up = (edges[f + 2] - hz) / (edges[f + 2] - edges[f + 1]);
            double w = fmax(0.0, fmin(down, up)) * enorm;
            row[b] = w;
            if (w != 0.0) {
                if (b < m->range[f][0])
                    m->range[f][0] = b;
                m->range[f][1] = b + 1;
            }
        }
    }
}

bora_status bora_mel_create(const bora_mel_opts *opts, bora_mel **out)
{
    *out = NULL;
    if (opts->n_mels < 1 || opts->n_mels > MAX_MELS)
        return bora_error_set(BORA_ERR_CONFIG,
                              "mel features: n_mels %d is not in 1..%d "
                              "(Whisper uses 80, large-v3 128)",
                              opts->n_mels, MAX_MELS);
    size_t cells;
    if (opts->n_samples < N_FFT ||
        __builtin_mul_overflow((size_t)opts->n_mels, (size_t)(opts->n_samples / HOP), &cells) ||
        cells > SIZE_MAX / sizeof(double))
        return bora_error_set(BORA_ERR_CONFIG,
                              "mel features: n_samples %lld is not a window "
                              "of at least %d samples that fits in memory (30 s: 480000)",
                              (long long)opts->n_samples, N_FFT);
    bora_mel *m = calloc(1, sizeof *m);
    if (!m)
        return bora_error_set(BORA_ERR_NOMEM, "mel features: out of memory");
    m->o = *opts;
    /* center=True pads N_FFT/2 each side: 1 + n/HOP frames, of which the last is dropped. */
    m->frames = opts->n_samples / HOP;
    m->filters = malloc((size_t)opts->n_mels * N_BINS * sizeof *m->filters);
    m->range = malloc((size_t)opts->n_mels * sizeof *m->range);
    double *in = fftw_malloc(N_FFT * sizeof *in);
    fftw_complex *spec = fftw_malloc(N_BINS * sizeof *spec);
    if (m->filters && m->range && in && spec) {
        /* FFTW_ESTIMATE: a plan chosen by rule, never by timing, so every run has the same. */
        pthread_mutex_lock(&planner);
        m->plan = fftw_plan_dft_r2c_1d(N_FFT, in, spec, FFTW_ESTIMATE);
        pthread_mutex_unlock(&planner);
    }
    fftw_free(in);
    fftw_free(spec);
    if (!m->plan) {
        bora_mel_free(m);
        return bora_error_set(BORA_ERR_NOMEM, "mel features: out of memory (FFT plan)");
    }
    for (int k = 0; k < N_FFT; k++) /* periodic: np.hanning(N_FFT + 1)[:-1] */
        m->window[k] = 0.5 - 0.5 * cos(2.0 * M_PI * k / N_FFT);
    make_filters(m);
    *out = m;
    return BORA_OK;
}

void bora_mel_free(bora_mel *m)
{
    if (!m)
        return;
    if (m->plan) {
        pthread_mutex_lock(&planner);
        fftw_destroy_plan(m->plan);
        pthread_mutex_unlock(&planner);
    }
    free(m->filters);
    free(m->range);
    free(m);
}

int bora_mel_n_mels(const bora_mel *m)
{
    return m->o.n_mels;
}

int64_t bora_mel_frames(const bora_mel *m)
{
    return m->frames;
}

size_t bora_mel_size(const bora_mel *m)
{
    return (size_t)m->o.n_mels * (size_t)m->frames;
}

bora_status bora_mel_compute(const bora_mel *m, const float *x, int64_t n, const char *name,
                             float *out, int *cut)
{
    if (!name)
        name = "audio";
    if (cut)
        *cut = 0;
    int64_t len = m->o.n_samples; /* the clip zero-padded or cut to the window */
    if (n <= 0)
        return bora_error_set(BORA_ERR_INVALID, "%s: no samples (an empty clip)", name);
    if (n > len) {
        if (!m->o.cut_long)
            return bora_error_set(BORA_ERR_UNSUPPORTED,
                                  "%s: %lld samples (%.2f s) is longer than the window of %lld "
                                  "samples (%.2f s); cut it or make the window longer",
                                  name, (long long)n, (double)n / BORA_AUDIO_RATE, (long long)len,
                                  (double)len / BORA_AUDIO_RATE);
        n = len;
        if (cut)
            *cut = 1;
    }
    for (int64_t i = 0; i < n; i++)
        if (!isfinite(x[i]))
            return bora_error_set(BORA_ERR_INVALID,
                                  "%s: sample %lld (at %.3f s) is %g, not a "
                                  "finite number",
                                  name, (long long)i, (double)i / BORA_AUDIO_RATE, (double)x[i]);
    int nm = m->o.n_mels;
    int64_t frames = m->frames;
    double *in = fftw_malloc(N_FFT * sizeof *in);
    fftw_complex *spec = fftw_malloc(N_BINS * sizeof *spec);
    double *logmel = malloc(bora_mel_size(m) * sizeof *logmel); /* (n_mels, frames) */
    if (!in || !spec || !logmel) {
        fftw_free(in), fftw_free(spec), free(logmel);
        return bora_error_set(BORA_ERR_NOMEM, "%s: out of memory computing features", name);
    }
    double top = -INFINITY;
    for (int64_t t = 0; t < frames; t++) {
        /* Frame t covers padded samples [t*HOP, t*HOP + N_FFT): the window's centre at t*HOP.
         * Reflect padding mirrors about the ends without repeating them (numpy's "reflect"). */
        for (int k = 0; k < N_FFT; k++) {
            int64_t i = t * HOP + k - N_FFT / 2;
            if (i < 0)
                i = -i;
            if (i >= len)
                i = 2 * (len - 1) - i;
            in[k] = (i < n ? (double)x[i] : 0.0) * m->window[k];
        }
        fftw_execute_dft_r2c(m->plan, in, spec);
        double power[N_BINS];
        for (int b = 0; b < N_BINS; b++)
            power[b] = spec[b][0] * spec[b][0] + spec[b][1] * spec[b][1];
        for (int f = 0; f < nm; f++) {
            const double *w = m->filters + (size_t)f * N_BINS;
            double s = 0.0;
            for (int b = m->range[f][0]; b < m->range[f][1]; b++)
                s += w[b] * power[b];
            double v = log10(fmax(s, 1e-10));
            logmel[(size_t)f * (size_t)frames + (size_t)t] = v;
            top = fmax(top, v);
        }
    }
    /* Keep 80 dB below the loudest bin, then scale to about [-1, 1]. */
    for (size_t i = 0; i < bora_mel_size(m); i++)
        out[i] = (float)((fmax(logmel[i], top - 8.0) + 4.0) / 4.0);
    fftw_free(in);
    fftw_free(spec);
    free(logmel);
    return BORA_OK;
}

bora_status bora_mel_of_bytes(const bora_mel *m, const void *bytes, size_t len, const char *name,
                              float *out, bora_audio_info *info)
{
    float *x;
    int64_t n;
    bora_audio_info local;
    if (!info)
        info = &local;
    bora_status st = bora_audio_decode(bytes, len, name, &x, &n, info);
    if (st != BORA_OK)
        return st;
    st = bora_mel_compute(m, x, n, name, out, &info->cut);
    free(x);
    return st;
}
