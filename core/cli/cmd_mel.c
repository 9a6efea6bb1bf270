/* core/cli/cmd_mel.c — `bora mel FILE`: a clip's Whisper log-mel features, for looking at what
 * the audio front end makes of a file: what was decoded, the shape, the range, and optionally
 * the features as raw f32. */
#include "../data/audio/audio.h"
#include "../util/log.h"
#include "cli.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int parse_long(const char *opt, const char *s, long long lo, long long hi, long long *v)
{
    char *end;
    errno = 0;
    long long x = strtoll(s, &end, 10);
    if (errno || end == s || *end || x < lo || x > hi) {
        bora_log(BORA_LOG_ERROR, "mel: %s wants a whole number in %lld..%lld, not '%s'", opt, lo,
                 hi, s);
        return -1;
    }
    *v = x;
    return 0;
}

int bora_cmd_mel(const bora_cli *cli)
{
    const char *path = NULL, *out_path = NULL;
    bora_mel_opts o = bora_mel_defaults();
    for (int i = 0; i < cli->argc; i++) {
        const char *a = cli->argv[i];
        const char *v = i + 1 < cli->argc ? cli->argv[i + 1] : NULL;
        long long x;
        if (!strcmp(a, "--n-mels") && v) {
            if (parse_long(a, v, 1, 256, &x))
                return 2;
            o.n_mels = (int)x, i++;
        } else if (!strcmp(a, "--n-samples") && v) {
            if (parse_long(a, v, 400, INT64_MAX / 2, &x))
                return 2;
            o.n_samples = x, i++;
        } else if (!strcmp(a, "--seconds") && v) {
            char *end;
            double s = strtod(v, &end);
            if (end == v || *end || !(s * BORA_AUDIO_RATE >= 400) || s > 1e9) {
                bora_log(BORA_LOG_ERROR,
                         "mel: --seconds wants a duration of at least 0.025, "
                         "not '%s'",
                         v);
                return 2;
            }
            o.n_samples = llround(s * BORA_AUDIO_RATE), i++;
        } else if (!strcmp(a, "--cut"))
            o.cut_long = 1;
        else if (!strcmp(a, "--out") && v)
            out_path = v, i++;
        else if (a[0] != '-' && !path)
            path = a;
        else {
            static const char *const known[] = {"--n-mels", "--n-samples", "--seconds",
                                                "--cut",    "--out",       BORA_CLI_GLOBAL_OPTIONS,
                                                NULL};
            return bora_cli_unknown_option("mel", a, known);
        }
    }
    if (!path) {
        bora_log(BORA_LOG_ERROR, "mel: give an audio FILE (see bora mel --help)");
        return 2;
    }
    bora_mel *m;
    if (bora_mel_create(&o, &m) != BORA_OK) {
        bora_log(BORA_LOG_ERROR, "%s", bora_error_get());
        return 2;
    }
    float *x = NULL, *feat = malloc(bora_mel_size(m) * sizeof *feat);
    int64_t n = 0;
    bora_audio_info info;
    int cut = 0, rc = 1;
    bora_status st = feat ? bora_audio_read(path, &x, &n, &info)
                          : bora_error_set(BORA_ERR_NOMEM, "mel: out of memory");
    if (st == BORA_OK) {
        printf("%s: %d Hz, %d channel%s, %lld samples (%.2f s) at %d Hz\n", path, info.source_rate,
               info.channels, info.channels == 1 ? "" : "s", (long long)n,
               (double)n / BORA_AUDIO_RATE, BORA_AUDIO_RATE);
        st = bora_mel_compute(m, x, n, path, feat, &cut);
    }
    if (st == BORA_ERR_UNSUPPORTED)
        bora_log(BORA_LOG_ERROR, "%s (--cut cuts it, --seconds S sets the window)",
                 bora_error_get());
    else if (st != BORA_OK)
        bora_log(BORA_LOG_ERROR, "%s", bora_error_get());
    else {
        float lo = INFINITY, hi = -INFINITY;
        for (size_t i = 0; i < bora_mel_size(m); i++)
            lo = fminf(lo, feat[i]), hi = fmaxf(hi, feat[i]);
        printf("%d mels x %lld frames%s, min %.4f, max %.4f\n", bora_mel_n_mels(m),
               (long long)bora_mel_frames(m), cut ? " (cut to the window)" : "", lo, hi);
        rc = 0;
        if (out_path) {
            FILE *f = fopen(out_path, "wb");
            int bad = !f || fwrite(feat, sizeof *feat, bora_mel_size(m), f) != bora_mel_size(m);
            bad |= f && fclose(f) != 0;
            if (bad) {
                bora_log(BORA_LOG_ERROR, "mel: cannot write %s: %s", out_path, strerror(errno));
                rc = 1;
            } else
                printf("wrote %s: (%d, %lld) float32, row-major, native byte order\n", out_path,
                       bora_mel_n_mels(m), (long long)bora_mel_frames(m));
        }
    }
    free(x);
    free(feat);
    bora_mel_free(m);
    return rc;
}
