/* core/data/audio/decode.c — a clip's bytes to 16 kHz mono float samples: libsndfile reads
 * them through a virtual I/O over the buffer (so bytes fetched from a URL need no file), the
 * channels are averaged, and libsoxr resamples any other rate. */
#include "../../util/log.h"
#include "../source.h"
#include "audio.h"

#include <math.h>
#include <sndfile.h>
#include <soxr.h>
#include <stdlib.h>
#include <string.h>

/* ---- libsndfile's virtual I/O over a byte buffer ------------------------------------------ */

typedef struct membuf {
    const unsigned char *p;
    sf_count_t len, at;
} membuf;

static sf_count_t vio_len(void *u)
{
    return ((membuf *)u)->len;
}

static sf_count_t vio_seek(sf_count_t off, int whence, void *u)
{
    membuf *b = u;
    sf_count_t base = whence == SEEK_CUR ? b->at : whence == SEEK_END ? b->len : 0;
    if (off < -base || off > b->len - base)
        return -1;
    b->at = base + off;
    return b->at;
}

static sf_count_t vio_read(void *ptr, sf_count_t count, void *u)
{
    membuf *b = u;
    sf_count_t n = count < b->len - b->at ? count : b->len - b->at;
    if (n <= 0)
        return 0;
    memcpy(ptr, b->p + b->at, (size_t)n);
    b->at += n;
    return n;
}

static sf_count_t vio_write(const void *ptr, sf_count_t count, void *u)
{
    (void)ptr, (void)count, (void)u;
    return 0; /* opened for reading only */
}

static sf_count_t vio_tell(void *u)
{
    return ((membuf *)u)->at;
}

static uint32_t le32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* A RIFF/WAVE file whose data chunk says it is longer than the bytes there: libsndfile reads
 * what is there without an error, so a cut-off download would pass as a shorter clip. A size
 * of 0 or 0xFFFFFFFF is what writers to a pipe put there, not a truncation. */
static bora_status check_wav_length(const unsigned char *p, size_t len, const char *name)
{
    if (len < 12 || memcmp(p, "RIFF", 4) || memcmp(p + 8, "WAVE", 4))
        return BORA_OK;
    size_t at = 12;
    while (len - at >= 8) {
        uint32_t size = le32(p + at + 4);
        if (!memcmp(p + at, "data", 4)) {
            size_t present = len - at - 8;
            if (size != 0 && size != UINT32_MAX && size > present)
                return bora_error_set(BORA_ERR_IO,
                                      "%s: truncated WAV: its data chunk says %u bytes, the file "
                                      "holds %zu (an incomplete copy or download?)",
                                      name, size, present);
            return BORA_OK;
        }
        size_t step = 8 + (size_t)size + (size & 1); /* a chunk's bytes are padded to even */
        if (step > len - at)
            return BORA_OK; /* the last chunk, or a broken header: libsndfile judges */
        at += step;
    }
    return BORA_OK;
}

/* ---- decoding ----------------------------------------------------------------------------- */

/* All frames of an open file, averaged to mono: *mono malloc'ed, *n frames. */
static bora_status read_mono(SNDFILE *sf, const SF_INFO *fi, const char *name, float **mono,
                             int64_t *n)
{
    int ch = fi->channels;
    int known = fi->frames != SF_COUNT_MAX; /* an Ogg stream without its end says "unknown" */
    if (!known && (fi->format & SF_FORMAT_TYPEMASK) == SF_FORMAT_OGG)
        return bora_error_set(BORA_ERR_IO, "%s: truncated Ogg stream (no end-of-stream page)",
                              name);
    if (known && fi->frames <= 0)
        return bora_error_set(BORA_ERR_INVALID, "%s: no samples (an empty clip)", name);
    /* A header's count is a claim, not a promise: start at most 4 Mi frames and grow. */
    size_t cap = known && fi->frames < (1 << 22) ? (size_t)fi->frames : 1 << 22, len = 0;
    float *out = malloc(cap * sizeof *out);
    enum { CHUNK = 4096 };
    float *buf = malloc((size_t)CHUNK * (size_t)ch * sizeof *buf);
    if (!out || !buf) {
        free(out), free(buf);
        return bora_error_set(BORA_ERR_NOMEM, "%s: out of memory decoding", name);
    }
    sf_count_t got;
    while ((got = sf_readf_float(sf, buf, CHUNK)) > 0) {
        if (len + (size_t)got > cap) {
            size_t grown_cap = cap * 2 > len + (size_t)got ? cap * 2 : len + (size_t)got;
            float *grown =
                grown_cap <= SIZE_MAX / sizeof *out ? realloc(out, grown_cap * sizeof *out) : NULL;
            if (!grown) {
                free(out), free(buf);
                return bora_error_set(BORA_ERR_NOMEM, "%s: out of memory decoding", name);
            }
            out = grown, cap = grown_cap;
        }
        /* Sum each frame's channels in order, then divide: the same bits every time. */
        for (sf_count_t i = 0; i < got; i++) {
            double s = 0;
            for (int c = 0; c < ch; c++)
                s += buf[(size_t)i * (size_t)ch + (size_t)c];
            out[len + (size_t)i] = ch == 1 ? buf[i] : (float)(s / ch);
        }
        len += (size_t)got;
    }
    free(buf);
    bora_status st = BORA_OK;
    /* libsndfile may stop early with or without an error of its own (a FLAC that lost sync):
     * a length it announced and did not deliver is an error either way. */
    int failed = sf_error(sf) != SF_ERR_NO_ERROR;
    const char *why = failed ? sf_strerror(sf) : "the stream ended early";
    if (known && (failed || (sf_count_t)len != fi->frames))
        st = bora_error_set(BORA_ERR_IO,
                            "%s: %zu of the %lld frames its header announces could "
                            "be decoded: %s (a truncated or corrupt file?)",
                            name, len, (long long)fi->frames, why);
    else if (failed)
        st = bora_error_set(BORA_ERR_IO,
                            "%s: decoding failed after %zu frames: %s (a truncated "
                            "or corrupt file?)",
                            name, len, why);
    else if (len == 0)
        st = bora_error_set(BORA_ERR_INVALID, "%s: no samples (an empty clip)", name);
    if (st != BORA_OK) {
        free(out);
        return st;
    }
    *mono = out;
    *n = (int64_t)len;
    return BORA_OK;
}

/* n samples at rate to BORA_AUDIO_RATE; a clip already at it is returned as it is. */
static bora_status resample(float **x, int64_t *n, int rate, const char *name)
{
    if (rate == BORA_AUDIO_RATE)
        return BORA_OK;
    double want = (double)*n * BORA_AUDIO_RATE / rate;
    if (want > (double)(SIZE_MAX / sizeof(float)) - 1)
        return bora_error_set(BORA_ERR_NOMEM, "%s: too long to resample", name);
    size_t olen = (size_t)(want + .5), done = 0;
    float *out = malloc((olen ? olen : 1) * sizeof *out);
    if (!out)
        return bora_error_set(BORA_ERR_NOMEM, "%s: out of memory resampling", name);
    soxr_io_spec_t io = soxr_io_spec(SOXR_FLOAT32_I, SOXR_FLOAT32_I);
    soxr_quality_spec_t q = soxr_quality_spec(SOXR_HQ, 0);
    soxr_runtime_spec_t rt = soxr_runtime_spec(1); /* the same bits at any thread count */
    soxr_error_t err = soxr_oneshot(rate, BORA_AUDIO_RATE, 1, *x, (size_t)*n, NULL, out, olen,
                                    &done, &io, &q, &rt);
    if (err) {
        free(out);
        return bora_error_set(BORA_ERR_IO, "%s: resampling %d Hz to %d Hz failed: %s", name, rate,
                              BORA_AUDIO_RATE, err);
    }
    if (done == 0) {
        free(out);
        return bora_error_set(BORA_ERR_INVALID,
                              "%s: no samples at %d Hz (a clip of %lld "
                              "samples at %d Hz)",
                              name, BORA_AUDIO_RATE, (long long)*n, rate);
    }
    free(*x);
    *x = out;
    *n = (int64_t)done;
    return BORA_OK;
}

bora_status bora_audio_decode(const void *bytes, size_t len, const char *name, float **samples,
                              int64_t *n, bora_audio_info *info)
{
    *samples = NULL;
    *n = 0;
    if (!name)
        name = "audio";
    if (len == 0)
        return bora_error_set(BORA_ERR_INVALID, "%s: empty file (0 bytes)", name);
    if ((uint64_t)len > (uint64_t)INT64_MAX)
        return bora_error_set(BORA_ERR_INVALID, "%s: too large", name);
    bora_status st = check_wav_length(bytes, len, name);
    if (st != BORA_OK)
        return st;
    membuf b = {bytes, (sf_count_t)len, 0};
    SF_VIRTUAL_IO vio = {vio_len, vio_seek, vio_read, vio_write, vio_tell};
    SF_INFO fi;
    memset(&fi, 0, sizeof fi);
    SNDFILE *sf = sf_open_virtual(&vio, SFM_READ, &fi, &b);
    if (!sf)
        return bora_error_set(BORA_ERR_IO, "%s: not readable as audio: %s", name,
                              sf_strerror(NULL));
    if (fi.samplerate <= 0 || fi.channels <= 0) {
        sf_close(sf);
        return bora_error_set(BORA_ERR_INVALID, "%s: sample rate %d Hz, %d channels: not a clip",
                              name, fi.samplerate, fi.channels);
    }
    float *x = NULL;
    int64_t nx = 0;
    st = read_mono(sf, &fi, name, &x, &nx);
    sf_close(sf);
    if (st == BORA_OK)
        st = resample(&x, &nx, fi.samplerate, name);
    if (st != BORA_OK) {
        free(x);
        return st;
    }
    if (info) {
        memset(info, 0, sizeof *info);
        info->source_rate = fi.samplerate;
        info->channels = fi.channels;
        info->samples = nx;
    }
    *samples = x;
    *n = nx;
    return BORA_OK;
}

bora_status bora_audio_read(const char *path, float **samples, int64_t *n, bora_audio_info *info)
{
    char *data;
    size_t len;
    *samples = NULL;
    *n = 0;
    bora_status st = bora_source_read(path, &data, &len);
    if (st != BORA_OK)
        return st;
    st = bora_audio_decode(data, len, path, samples, n, info);
    free(data);
    return st;
}
