/* tests/data_pipeline/test_audio.c — Whisper's audio front end against references outside bora:
 * the log-mel features of a clip equal Hugging Face's WhisperFeatureExtractor (a golden file
 * from transformers.js, and a float64 PyTorch script for 128 mels and other windows); the
 * samples read from WAV equal int16 / 32768 exactly; FLAC, 16 kHz stereo and 44.1 kHz stereo
 * copies made by sox read back as sox converts them; channels average to their mean;
 * truncated, corrupt, empty and non-audio files, samples that are not finite and clips longer
 * than the window are refused with the file named; four threads on four clips get the bits
 * one thread gets; `bora mel` prints and writes the features.
 *
 * usage: test_audio DATA_DIR WORK_DIR PYTHON REF_SCRIPT BORA */
#include "../test.h"
#include "data/audio/audio.h"
#include "util/log.h"

#include <math.h>
#include <pthread.h>
#include <stdint.h>

static const char *data_dir, *work_dir, *python, *ref_script, *bora;

static const char *at(const char *dir, const char *name)
{
    static char buf[8][1200];
    static int k;
    k = (k + 1) % 8;
    snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
    return buf[k];
}

/* A whole file; NULL when it cannot be read. */
static unsigned char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *p = malloc(n > 0 ? (size_t)n : 1);
    *len = p ? fread(p, 1, (size_t)n, f) : 0;
    fclose(f);
    return p;
}

static void write_bytes(const char *path, const void *p, size_t n)
{
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(p, 1, n, f);
        fclose(f);
    }
}

static double max_abs_diff(const float *a, const float *b, size_t n)
{
    double d = 0;
    for (size_t i = 0; i < n; i++)
        d = fmax(d, fabs((double)a[i] - (double)b[i]));
    return d;
}

static bora_mel *make_mel(int n_mels, int64_t n_samples, int cut_long)
{
    bora_mel_opts o = bora_mel_defaults();
    o.n_mels = n_mels, o.n_samples = n_samples, o.cut_long = cut_long;
    bora_mel *m = NULL;
    if (bora_mel_create(&o, &m) != BORA_OK)
        fprintf(stderr, "bora_mel_create: %s\n", bora_error_get());
    return m;
}

/* The features of a path (NULL on error, message printed). */
static float *features_of(const bora_mel *m, const char *path)
{
    size_t len;
    unsigned char *bytes = slurp(path, &len);
    float *out = malloc(bora_mel_size(m) * sizeof *out);
    bora_status st = bytes && out ? bora_mel_of_bytes(m, bytes, len, path, out, NULL) : -1;
    free(bytes);
    if (st != BORA_OK) {
        fprintf(stderr, "%s: %s\n", path, bora_error_get());
        free(out);
        return NULL;
    }
    return out;
}

/* (a) The golden file, and the samples as int16 / 32768 read from the WAV's own bytes. */
static void golden(void)
{
    const char *wav = at(data_dir, "hello16k.wav");
    float *x;
    int64_t n;
    bora_audio_info info;
    CHECK(bora_audio_read(wav, &x, &n, &info) == BORA_OK);
    CHECK(n == 51278 && info.source_rate == 16000 && info.channels == 1);
    size_t len;
    unsigned char *bytes = slurp(wav, &len);
    CHECK(bytes && len == 44 + 2 * 51278); /* a canonical 44-byte header, then int16 LE */
    int exact = 1;
    for (int64_t i = 0; bytes && x && i < n && 44 + 2 * (size_t)i + 1 < len; i++) {
        int16_t v = (int16_t)(bytes[44 + 2 * i] | bytes[45 + 2 * i] << 8);
        exact &= x[i] == (float)v / 32768.0f;
    }
    CHECK(exact);

    bora_mel *m = make_mel(80, 480000, 0);
    CHECK(m && bora_mel_frames(m) == 3000 && bora_mel_size(m) == 80 * 3000);
    float *got = malloc(80 * 3000 * sizeof *got);
    CHECK(bora_mel_compute(m, x, n, wav, got, NULL) == BORA_OK);
    size_t glen;
    unsigned char *gold = slurp(at(data_dir, "hello16k_mel_80x3000_f32le.bin"), &glen);
    CHECK(gold && glen == 80 * 3000 * sizeof(float));
    if (gold && glen == 80 * 3000 * sizeof(float)) {
        double d = max_abs_diff(got, (const float *)gold, 80 * 3000);
        printf("golden 80x3000: max |bora - transformers| = %.3g\n", d); /* measured 1.2e-7 */
        CHECK(d <= 1e-4);
    }
    /* From the bytes, the same bits as from the samples. */
    float *again = malloc(80 * 3000 * sizeof *again);
    bora_audio_info bi;
    CHECK(bora_mel_of_bytes(m, bytes, len, wav, again, &bi) == BORA_OK);
    CHECK(!memcmp(got, again, 80 * 3000 * sizeof *got) && bi.samples == n && !bi.cut);
    free(again), free(gold), free(got), free(bytes), free(x);
    bora_mel_free(m);
}

/* (a) 128 mels, a shorter window that pads, and one that cuts, against the float64 script. */
static void reference(int n_mels, int64_t n_samples)
{
    char cmd[4096], name[64], *out;
    snprintf(name, sizeof name, "ref_%d_%lld.bin", n_mels, (long long)n_samples);
    snprintf(cmd, sizeof cmd, "%s %s %s %d %lld %s", python, ref_script,
             at(data_dir, "hello16k.wav"), n_mels, (long long)n_samples, at(work_dir, name));
    int rc = test_run(cmd, &out);
    if (rc) {
        fprintf(stderr, "%s\n", out);
        CHECK(rc == 0);
    }
    free(out);
    bora_mel *m = make_mel(n_mels, n_samples, 1);
    float *got = m ? features_of(m, at(data_dir, "hello16k.wav")) : NULL;
    size_t rlen;
    unsigned char *ref = slurp(at(work_dir, name), &rlen);
    CHECK(got && ref && rlen == bora_mel_size(m) * sizeof(float));
    if (got && ref && rlen == bora_mel_size(m) * sizeof(float)) {
        double d = max_abs_diff(got, (const float *)ref, bora_mel_size(m));
        printf("%d mels, %lld samples: max |bora - float64 torch| = %.3g\n", n_mels,
               (long long)n_samples, d);
        CHECK(d <= 1e-5); /* both in double, rounded once to float: measured 0 */
    }
    free(ref), free(got);
    bora_mel_free(m);
}

/* Samples sox writes as raw f32 for cmd ("sox IN -r 16000 -c 1 -t f32 -"). */
static float *sox_samples(const char *in, int64_t *n)
{
    char cmd[2048];
    const char *raw = at(work_dir, "sox.f32");
    snprintf(cmd, sizeof cmd, "sox '%s' -r 16000 -c 1 -t f32 '%s'", in, raw);
    char *out;
    int rc = test_run(cmd, &out);
    if (rc)
        fprintf(stderr, "%s: %s\n", cmd, out);
    free(out);
    size_t len;
    unsigned char *p = rc ? NULL : slurp(raw, &len);
    *n = p ? (int64_t)(len / sizeof(float)) : 0;
    return (float *)p;
}

/* (b) Other containers, channel counts and rates, as sox reads them back. */
static void conversions(void)
{
    const char *wav = at(data_dir, "hello16k.wav");
    const char *flac = at(work_dir, "hello.flac"), *st16 = at(work_dir, "st16.wav");
    const char *st44 = at(work_dir, "st44.wav");
    char cmd[4096], *out;
    snprintf(cmd, sizeof cmd,
             "sox '%s' '%s' && sox '%s' -c 2 '%s' && sox '%s' -r 44100 -c 2 '%s' && sox '%s' '%s'",
             wav, flac, wav, st16, wav, st44, wav, at(work_dir, "hello.ogg"));
    int rc = test_run(cmd, &out);
    if (rc)
        fprintf(stderr, "%s\n", out);
    CHECK(rc == 0);
    free(out);

    float *ref;
    int64_t nref;
    CHECK(bora_audio_read(wav, &ref, &nref, NULL) == BORA_OK);
    /* FLAC is lossless and 16 kHz stereo of two equal channels averages back exactly: the same
     * samples, bit for bit, as the WAV and as sox converts them. */
    const char *exact[] = {flac, st16};
    for (int k = 0; k < 2; k++) {
        float *x, *s;
        int64_t n, ns;
        bora_audio_info info;
        CHECK(bora_audio_read(exact[k], &x, &n, &info) == BORA_OK);
        s = sox_samples(exact[k], &ns);
        CHECK(x && s && n == nref && ns == nref);
        CHECK(x && s && n == nref && ns == nref && !memcmp(x, ref, (size_t)n * sizeof *x) &&
              !memcmp(x, s, (size_t)n * sizeof *x));
        CHECK(info.channels == (k ? 2 : 1) && info.source_rate == 16000);
        free(x), free(s);
    }
    /* 44.1 kHz stereo: resampled back to 16 kHz by soxr (HQ) here and by sox's rate (-h) there,
     * two implementations of one design whose filters differ in the last bits. Measured: the
     * same length, samples within 6.3e-5 of sox's (peak 0.6; 9.3e-3 of the original, what the
     * round trip through 44.1 kHz loses), features within 2.5e-4. The bounds are 8 times that. */
    float *x, *s;
    int64_t n, ns;
    bora_audio_info info;
    CHECK(bora_audio_read(st44, &x, &n, &info) == BORA_OK);
    CHECK(info.source_rate == 44100 && info.channels == 2);
    s = sox_samples(st44, &ns);
    CHECK(x && s && n == ns && llabs(n - nref) <= 1);
    if (x && s && n == ns) {
        double d = max_abs_diff(x, s, (size_t)n),
               dref = max_abs_diff(x, ref, (size_t)(n < nref ? n : nref));
        printf("44.1 kHz stereo: %lld samples, max |bora - sox| = %.3g, max |bora - original| = "
               "%.3g\n",
               (long long)n, d, dref);
        CHECK(d <= 5e-4);
        bora_mel *m = make_mel(80, 480000, 0);
        float *fx = malloc(bora_mel_size(m) * sizeof *fx),
              *fs = malloc(bora_mel_size(m) * sizeof *fs);
        CHECK(bora_mel_compute(m, x, n, st44, fx, NULL) == BORA_OK);
        CHECK(bora_mel_compute(m, s, ns, "sox", fs, NULL) == BORA_OK);
        double dm = max_abs_diff(fx, fs, bora_mel_size(m));
        printf("44.1 kHz stereo: max |features(bora) - features(sox)| = %.3g\n", dm);
        CHECK(dm <= 2e-3);
        free(fx), free(fs);
        bora_mel_free(m);
    }
    free(x), free(s), free(ref);
}

/* Expect path to be refused with status st and a message holding each of needles. */
static void refused(const char *path, bora_status st, const char *const *needles)
{
    float *x = (float *)1;
    int64_t n = -1;
    bora_status got = bora_audio_read(path, &x, &n, NULL);
    if (got != st)
        fprintf(stderr, "%s: status %d, want %d (%s)\n", path, got, st, bora_error_get());
    CHECK(got == st && x == NULL && n == 0);
    const char *msg = bora_error_get();
    CHECK_CONTAINS(msg, path);
    for (; *needles; needles++)
        CHECK_CONTAINS(msg, *needles);
}

/* A 16-bit PCM WAV of ch interleaved channels, written here byte by byte. */
static void write_wav16(const char *path, const int16_t *pcm, size_t frames, int ch, int rate)
{
    uint32_t data = (uint32_t)(frames * (size_t)ch * 2);
    unsigned char h[44];
    const uint32_t v32[] = {36 + data, 16, (uint32_t)rate, (uint32_t)(rate * ch * 2), data};
    memcpy(h, "RIFF", 4), memcpy(h + 8, "WAVEfmt ", 8), memcpy(h + 36, "data", 4);
    const int at32[] = {4, 16, 24, 28, 40};
    for (int k = 0; k < 5; k++)
        for (int b = 0; b < 4; b++)
            h[at32[k] + b] = (unsigned char)(v32[k] >> (8 * b));
    const uint16_t v16[] = {1, (uint16_t)ch, (uint16_t)(ch * 2), 16};
    const int at16[] = {20, 22, 32, 34};
    for (int k = 0; k < 4; k++)
        h[at16[k]] = (unsigned char)v16[k], h[at16[k] + 1] = (unsigned char)(v16[k] >> 8);
    FILE *f = fopen(path, "wb");
    if (f) {
        fwrite(h, 1, 44, f);
        for (size_t i = 0; i < frames * (size_t)ch; i++) {
            unsigned char le[2] = {(unsigned char)pcm[i], (unsigned char)((uint16_t)pcm[i] >> 8)};
            fwrite(le, 1, 2, f);
        }
        fclose(f);
    }
}

/* Three different channels average to their mean, computed here from the int16 values. */
static void channels(void)
{
    size_t len;
    unsigned char *wav = slurp(at(data_dir, "hello16k.wav"), &len);
    CHECK(wav && len == 44 + 2 * 51278);
    if (!wav || len != 44 + 2 * 51278)
        return;
    size_t n = 51278;
    int16_t *pcm = malloc(3 * n * sizeof *pcm);
    for (size_t i = 0; i < n; i++) {
        int16_t a = (int16_t)(wav[44 + 2 * i] | wav[45 + 2 * i] << 8);
        int16_t b = (int16_t)(wav[44 + 2 * (n - 1 - i)] | wav[45 + 2 * (n - 1 - i)] << 8);
        pcm[3 * i] = a, pcm[3 * i + 1] = b, pcm[3 * i + 2] = (int16_t)(i % 2 ? 12345 : -32768);
    }
    write_wav16(at(work_dir, "three.wav"), pcm, n, 3, 16000);
    float *x;
    int64_t nx;
    bora_audio_info info;
    CHECK(bora_audio_read(at(work_dir, "three.wav"), &x, &nx, &info) == BORA_OK);
    CHECK(info.channels == 3 && nx == (int64_t)n);
    int exact = x && nx == (int64_t)n;
    for (size_t i = 0; exact && i < n; i++) {
        double mean = ((double)pcm[3 * i] + pcm[3 * i + 1] + pcm[3 * i + 2]) / 32768.0 / 3.0;
        exact &= x[i] == (float)mean;
    }
    CHECK(exact);
    free(x), free(pcm), free(wav);
}

/* (c) Bad files and clips that do not fit. */
static void bad_inputs(void)
{
    size_t len;
    unsigned char *wav = slurp(at(data_dir, "hello16k.wav"), &len);
    CHECK(wav != NULL);
    if (!wav)
        return;
    write_bytes(at(work_dir, "cut_data.wav"), wav, 60000);
    write_bytes(at(work_dir, "cut_header.wav"), wav, 30);
    write_bytes(at(work_dir, "empty.wav"), wav, 0);
    write_bytes(at(work_dir, "header_only.wav"), wav, 44);
    const char *text = "this is not a sound\n";
    write_bytes(at(work_dir, "text.wav"), text, strlen(text));
    free(wav);
    size_t flen;
    unsigned char *flac = slurp(at(work_dir, "hello.flac"), &flen);
    CHECK(flac != NULL);
    if (flac) {
        write_bytes(at(work_dir, "cut.flac"), flac, flen / 2);
        for (size_t i = flen / 3; i < flen / 3 + 40; i++)
            flac[i] ^= 0x5a;
        write_bytes(at(work_dir, "corrupt.flac"), flac, flen);
    }
    free(flac);
    size_t olen;
    unsigned char *ogg = slurp(at(work_dir, "hello.ogg"), &olen);
    CHECK(ogg != NULL);
    if (ogg)
        write_bytes(at(work_dir, "cut.ogg"), ogg, olen / 2);
    free(ogg);

    refused(at(work_dir, "cut_data.wav"), BORA_ERR_IO,
            (const char *[]){"truncated WAV", "102556 bytes", "59956", NULL});
    refused(at(work_dir, "cut_header.wav"), BORA_ERR_IO, (const char *[]){"not readable", NULL});
    refused(at(work_dir, "text.wav"), BORA_ERR_IO,
            (const char *[]){"not readable as audio", "ormat", NULL});
    refused(at(work_dir, "empty.wav"), BORA_ERR_INVALID, (const char *[]){"empty file", NULL});
    refused(at(work_dir, "cut.flac"), BORA_ERR_IO,
            (const char *[]){"of the 51278 frames its header announces", NULL});
    refused(at(work_dir, "corrupt.flac"), BORA_ERR_IO, (const char *[]){"corrupt", NULL});
    refused(at(work_dir, "cut.ogg"), BORA_ERR_IO,
            (const char *[]){"truncated Ogg stream (no end-of-stream page)", NULL});
    refused(at(work_dir, "missing.wav"), BORA_ERR_IO, (const char *[]){NULL});
    /* A last chunk of odd size that ends the file: its pad byte lies past the end. */
    static const unsigned char odd[21] = {'R', 'I', 'F', 'F', 13,  0, 0, 0, 'W', 'A', 'V',
                                          'E', 'L', 'I', 'S', 'T', 1, 0, 0, 0,   'x'};
    write_bytes(at(work_dir, "odd_chunk.wav"), odd, sizeof odd);
    refused(at(work_dir, "odd_chunk.wav"), BORA_ERR_IO, (const char *[]){"not readable", NULL});
    /* A sample rate or channel count of zero. */
    const int16_t pcm[4] = {1, 2, 3, 4};
    write_wav16(at(work_dir, "rate0.wav"), pcm, 4, 1, 0);
    refused(at(work_dir, "rate0.wav"), BORA_ERR_IO, (const char *[]){"not readable", NULL});
    write_wav16(at(work_dir, "channels0.wav"), pcm, 4, 0, 16000);
    refused(at(work_dir, "channels0.wav"), BORA_ERR_IO, (const char *[]){"not readable", NULL});
    /* A header with a data chunk of 0 bytes: a clip of no samples. */
    unsigned char hdr[44];
    unsigned char *w = slurp(at(work_dir, "header_only.wav"), &len);
    if (w && len == 44) {
        memcpy(hdr, w, 44);
        memset(hdr + 40, 0, 4);
        write_bytes(at(work_dir, "no_samples.wav"), hdr, 44);
        refused(at(work_dir, "no_samples.wav"), BORA_ERR_INVALID,
                (const char *[]){"no samples", NULL});
    }
    free(w);

    /* Longer than a 1 s window: refused naming both lengths, or cut when asked. */
    float *x;
    int64_t n;
    CHECK(bora_audio_read(at(data_dir, "hello16k.wav"), &x, &n, NULL) == BORA_OK);
    bora_mel *strict = make_mel(80, 16000, 0), *cutting = make_mel(80, 16000, 1);
    float *a = malloc(80 * 100 * sizeof *a), *b = malloc(80 * 100 * sizeof *b);
    int cut = -1;
    CHECK(bora_mel_compute(strict, x, n, "clip.wav", a, &cut) == BORA_ERR_UNSUPPORTED && !cut);
    CHECK_CONTAINS(bora_error_get(), "clip.wav: 51278 samples (3.20 s) is longer than the window "
                                     "of 16000 samples (1.00 s)");
    CHECK(bora_mel_compute(cutting, x, n, "clip.wav", a, &cut) == BORA_OK && cut == 1);
    CHECK(bora_mel_compute(cutting, x, 16000, "clip.wav", b, &cut) == BORA_OK && cut == 0);
    CHECK(!memcmp(a, b, 80 * 100 * sizeof *a));
    CHECK(bora_mel_compute(cutting, x, 0, "clip.wav", a, &cut) == BORA_ERR_INVALID);
    CHECK_CONTAINS(bora_error_get(), "clip.wav: no samples");
    x[8000] = NAN;
    CHECK(bora_mel_compute(cutting, x, n, "clip.wav", a, &cut) == BORA_ERR_INVALID);
    CHECK_CONTAINS(bora_error_get(), "clip.wav: sample 8000 (at 0.500 s) is nan");
    free(a), free(b), free(x);
    bora_mel_free(strict);
    bora_mel_free(cutting);

    bora_mel_opts o = bora_mel_defaults();
    bora_mel *m = NULL;
    o.n_mels = 0;
    CHECK(bora_mel_create(&o, &m) == BORA_ERR_CONFIG && !m);
    CHECK_CONTAINS(bora_error_get(), "n_mels 0");
    o = bora_mel_defaults();
    o.n_samples = 399;
    CHECK(bora_mel_create(&o, &m) == BORA_ERR_CONFIG && !m);
    CHECK_CONTAINS(bora_error_get(), "n_samples 399");
}

/* Four threads computing the features of four different clips with one bora_mel, over and
 * over, each get the bits one thread alone gets (nothing is shared between calls). */
typedef struct job {
    const bora_mel *m;
    const char *path;
    unsigned char *bytes;
    size_t len;
    float *out;
    int same;
} job;

static void *run_job(void *p)
{
    job *j = p;
    float *want = j->out + bora_mel_size(j->m);
    for (int r = 0; r < 4; r++)
        j->same &= bora_mel_of_bytes(j->m, j->bytes, j->len, j->path, j->out, NULL) == BORA_OK &&
                   !memcmp(j->out, want, bora_mel_size(j->m) * sizeof(float));
    return NULL;
}

static void threads(void)
{
    bora_mel *m = make_mel(128, 480000, 0);
    CHECK(m != NULL);
    if (!m)
        return;
    const char *names[4] = {"st44.wav", "three.wav", "hello.ogg", "hello.flac"};
    job jobs[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        job *j = &jobs[i];
        *j = (job){m, names[i], NULL, 0, malloc(2 * bora_mel_size(m) * sizeof(float)), 1};
        j->bytes = slurp(at(work_dir, names[i]), &j->len);
        CHECK(j->bytes && j->out &&
              bora_mel_of_bytes(m, j->bytes, j->len, j->path, j->out + bora_mel_size(m), NULL) ==
                  BORA_OK);
    }
    for (int i = 0; i < 4; i++)
        pthread_create(&th[i], NULL, run_job, &jobs[i]);
    for (int i = 0; i < 4; i++)
        pthread_join(th[i], NULL);
    for (int i = 0; i < 4; i++) {
        CHECK(jobs[i].same);
        free(jobs[i].out), free(jobs[i].bytes);
    }
    bora_mel_free(m);
}

/* `bora mel`: the summary line, and --out writing what the library computes. */
static void cli(void)
{
    char cmd[4096], *out;
    const char *bin = at(work_dir, "cli.bin");
    snprintf(cmd, sizeof cmd, "%s mel %s --n-mels 128 --out %s", bora, at(data_dir, "hello16k.wav"),
             bin);
    CHECK(test_run(cmd, &out) == 0);
    CHECK_CONTAINS(out, "16000 Hz, 1 channel, 51278 samples (3.20 s)");
    CHECK_CONTAINS(out, "128 mels x 3000 frames");
    free(out);
    bora_mel *m = make_mel(128, 480000, 0);
    float *want = m ? features_of(m, at(data_dir, "hello16k.wav")) : NULL;
    size_t len;
    unsigned char *got = slurp(bin, &len);
    CHECK(want && got && len == 128 * 3000 * sizeof(float) && !memcmp(got, want, len));
    free(want), free(got);
    bora_mel_free(m);

    snprintf(cmd, sizeof cmd, "%s mel %s --seconds 1", bora, at(data_dir, "hello16k.wav"));
    CHECK(test_run(cmd, &out) == 1);
    CHECK_CONTAINS(out, "longer than the window");
    CHECK_CONTAINS(out, "--cut");
    free(out);
    snprintf(cmd, sizeof cmd, "%s mel %s --seconds 1 --cut", bora, at(data_dir, "hello16k.wav"));
    CHECK(test_run(cmd, &out) == 0);
    CHECK_CONTAINS(out, "80 mels x 100 frames (cut to the window)");
    free(out);
    snprintf(cmd, sizeof cmd, "%s mel %s", bora, at(work_dir, "text.wav"));
    CHECK(test_run(cmd, &out) == 1);
    CHECK_CONTAINS(out, "text.wav: not readable as audio");
    free(out);
}

int main(int argc, char **argv)
{
    if (argc != 6) {
        fprintf(stderr, "usage: test_audio DATA_DIR WORK_DIR PYTHON REF_SCRIPT BORA\n");
        return 2;
    }
    data_dir = argv[1], work_dir = argv[2], python = argv[3], ref_script = argv[4], bora = argv[5];
    char cmd[1200], *out;
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", work_dir);
    test_run(cmd, &out);
    free(out);
    golden();
    reference(128, 480000);
    reference(80, 64000); /* 4 s: padded, 400 frames */
    reference(80, 32000); /* 2 s: cut */
    conversions();
    channels();
    bad_inputs();
    threads();
    cli();
    return test_summary("test_audio");
}
