/* plugins/models/common/rope_config.c — RoPE's config.json keys (rope_theta, rope_scaling) read
 * into a bora_rope_spec with transformers' fallbacks, and written back (decoder.h). */
#include "decoder.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

bora_status decoder_read_rope(const bora_host *h, const bora_config *cfg, double theta_default,
                              int64_t max_position_embeddings, bora_rope_spec *s,
                              int *original_given)
{
    *s = bora_rope_spec_default();
    *original_given = 0;
    bora_status st = h->config_float(h, cfg, "rope_theta", theta_default, &s->theta);
    if (st != BORA_OK)
        return st;
    if (!(s->theta > 0 && isfinite(s->theta)))
        return h->fail(h, BORA_ERR_CONFIG, "model.rope_theta: %g is not a positive number",
                       s->theta);
    const bora_config *rs = h->config_child(h, cfg, "rope_scaling");
    const char *type = NULL, *legacy = NULL;
    if (rs && ((st = h->config_string(h, rs, "rope_type", NULL, &type)) != BORA_OK ||
               (st = h->config_string(h, rs, "type", NULL, &legacy)) != BORA_OK))
        return st;
    if (!type)
        type = legacy; /* older config.json files say "type" */
    if (!rs || !type) {
        if (rs && h->config_child(h, rs, "factor"))
            return h->fail(h, BORA_ERR_CONFIG,
                           "model.rope_scaling: give rope_type (default, linear, dynamic, "
                           "llama3 or yarn)");
        return BORA_OK;
    }
    static const char *const kinds[] = {"default", "linear", "dynamic", "llama3", "yarn"};
    int kind = -1;
    for (int i = 0; i < 5; i++)
        if (!strcmp(type, kinds[i]))
            kind = i;
    if (kind < 0)
        return h->fail(h, BORA_ERR_CONFIG,
                       "model.rope_scaling.rope_type: '%s' is not one of default, linear, "
                       "dynamic, llama3, yarn",
                       type);
    s->kind = kind;
    int64_t orig = 0;
    int truncate = 1;
    struct {
        const char *key;
        double *out, def;
    } f[] = {{"factor", &s->factor, 0},
             {"low_freq_factor", &s->low_freq_factor, 0},
             {"high_freq_factor", &s->high_freq_factor, 0},
             {"beta_fast", &s->beta_fast, 0},
             {"beta_slow", &s->beta_slow, 0},
             {"mscale", &s->mscale, 0},
             {"mscale_all_dim", &s->mscale_all_dim, 0},
             {"attention_factor", &s->attention_factor, 0}};
    for (size_t i = 0; i < sizeof f / sizeof f[0]; i++) {
        if ((st = h->config_float(h, rs, f[i].key, f[i].def, f[i].out)) != BORA_OK)
            return st;
        if (!isfinite(*f[i].out) || *f[i].out < 0)
            return h->fail(h, BORA_ERR_CONFIG,
                           "model.rope_scaling.%s: %g is not a finite number of 0 or more",
                           f[i].key, *f[i].out);
    }
    if ((st = h->config_int(h, rs, "original_max_position_embeddings", 0, &orig)) != BORA_OK ||
        (st = h->config_bool(h, rs, "truncate", 1, &truncate)) != BORA_OK)
        return st;
    s->truncate = truncate;
    *original_given = h->config_child(h, rs, "original_max_position_embeddings") != NULL;
    /* transformers' fallbacks: the original context is the model's, and yarn without a factor
     * scales by the ratio of the two. Dynamic NTK grows the base past max_position_embeddings
     * only (_compute_dynamic_ntk_parameters and dynamic_rope_update read nothing else; an
     * original_max_position_embeddings in rope_scaling is accepted and has no effect). */
    if (kind == BORA_ROPE_DYNAMIC || (!orig && kind == BORA_ROPE_YARN))
        orig = max_position_embeddings;
    s->original_max_position_embeddings = orig;
    if (kind == BORA_ROPE_YARN && !h->config_child(h, rs, "factor"))
        s->factor = orig > 0 ? (double)max_position_embeddings / (double)orig : 0;
    if (kind == BORA_ROPE_DEFAULT)
        s->factor = 1;
    if (kind != BORA_ROPE_DEFAULT && !(s->factor > 0 && isfinite(s->factor)))
        return h->fail(h, BORA_ERR_CONFIG,
                       "model.rope_scaling.factor: rope_type %s needs a factor above 0 (got %g)",
                       type, s->factor);
    if (kind == BORA_ROPE_LLAMA3) {
        const char *need[] = {"low_freq_factor", "high_freq_factor",
                              "original_max_position_embeddings"};
        for (int i = 0; i < 3; i++)
            if (!h->config_child(h, rs, need[i]))
                return h->fail(h, BORA_ERR_CONFIG,
                               "model.rope_scaling.%s: rope_type llama3 needs it (Llama 3.1 "
                               "uses low_freq_factor 1, high_freq_factor 4, "
                               "original_max_position_embeddings 8192)",
                               need[i]);
        if (!(s->low_freq_factor > 0 && s->low_freq_factor < s->high_freq_factor))
            return h->fail(h, BORA_ERR_CONFIG,
                           "model.rope_scaling: low_freq_factor %g must be above 0 and below "
                           "high_freq_factor %g",
                           s->low_freq_factor, s->high_freq_factor);
    }
    if (orig < 0)
        return h->fail(h, BORA_ERR_CONFIG,
                       "model.rope_scaling.original_max_position_embeddings: %lld is negative",
                       (long long)orig);
    return BORA_OK;
}

/* ---- config.json ------------------------------------------------------------------------------ */

void decoder_put(decoder_json *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int room = b->p && b->len < b->cap;
    int n = vsnprintf(room ? b->p + b->len : NULL, room ? b->cap - b->len : 0, fmt, ap);
    va_end(ap);
    b->len += n > 0 ? (size_t)n : 0;
}

void decoder_put_rope_scaling(decoder_json *b, const bora_rope_spec *s, int original_given)
{
    static const char *const kinds[] = {"default", "linear", "dynamic", "llama3", "yarn"};
    if (s->kind == BORA_ROPE_DEFAULT) {
        decoder_put(b, "\"rope_scaling\": null");
        return;
    }
    decoder_put(b, "\"rope_scaling\": {\"rope_type\": \"%s\", \"factor\": %.17g", kinds[s->kind],
                s->factor);
    if (original_given)
        decoder_put(b, ", \"original_max_position_embeddings\": %lld",
                    (long long)s->original_max_position_embeddings);
    if (s->kind == BORA_ROPE_LLAMA3)
        decoder_put(b, ", \"low_freq_factor\": %.17g, \"high_freq_factor\": %.17g",
                    s->low_freq_factor, s->high_freq_factor);
    if (s->kind == BORA_ROPE_YARN) {
        const char *names[] = {"beta_fast", "beta_slow", "mscale", "mscale_all_dim",
                               "attention_factor"};
        double v[] = {s->beta_fast, s->beta_slow, s->mscale, s->mscale_all_dim,
                      s->attention_factor};
        for (int i = 0; i < 5; i++)
            if (v[i])
                decoder_put(b, ", \"%s\": %.17g", names[i], v[i]);
        if (!s->truncate)
            decoder_put(b, ", \"truncate\": false");
    }
    decoder_put(b, "}");
}
