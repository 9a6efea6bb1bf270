/* plugins/models/common/model.c — the part of a decoder model's configuration both families
 * share (decoder_dims): its allocation and the keys every type has, read against the type's
 * own table of defaults (decoder.h). */
#include "decoder.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

void *decoder_model_new(const bora_host *h, size_t size)
{
    decoder_dims *d = h->alloc(h, size, 16);
    if (!d) {
        h->fail(h, BORA_ERR_NOMEM, "out of memory");
        return NULL;
    }
    memset(d, 0, size);
    d->h = h;
    d->slides = h->alloc(h, DECODER_MAX_LAYERS, 16);
    if (!d->slides) {
        h->free(h, d);
        h->fail(h, BORA_ERR_NOMEM, "out of memory");
        return NULL;
    }
    memset(d->slides, 0, DECODER_MAX_LAYERS);
    return d;
}

void decoder_model_free(bora_model *model)
{
    decoder_dims *d = (decoder_dims *)model;
    d->h->free(d->h, d->slides);
    d->h->free(d->h, d);
}

bora_status decoder_model_create(const bora_host *h, const bora_config *cfg, size_t size, int kind,
                                 decoder_read_fn read, bora_model **out)
{
    void *m = decoder_model_new(h, size);
    if (!m)
        return BORA_ERR_NOMEM;
    bora_status st = read(h, cfg, m, kind);
    if (st != BORA_OK) {
        decoder_model_free(m);
        return st;
    }
    *out = m;
    return BORA_OK;
}

bora_status decoder_read_dims(const bora_host *h, const bora_config *cfg, const bora_key *keys,
                              const char *type, decoder_dims *d)
{
    struct {
        const char *key;
        int64_t *out;
    } ints[] = {{"seq_len", &d->seq_len},
                {"vocab_size", &d->vocab_size},
                {"hidden_size", &d->hidden_size},
                {"intermediate_size", &d->intermediate_size},
                {"num_hidden_layers", &d->num_hidden_layers},
                {"num_attention_heads", &d->num_attention_heads},
                {"max_position_embeddings", &d->max_position_embeddings}};
    bora_status st = BORA_OK;
    for (size_t i = 0; i < sizeof ints / sizeof ints[0] && st == BORA_OK; i++) {
        st = h->config_int(h, cfg, ints[i].key, decoder_key_int(keys, ints[i].key), ints[i].out);
        if (st == BORA_OK && *ints[i].out < 1)
            return h->fail(h, BORA_ERR_CONFIG, "model.%s must be at least 1, not %lld", ints[i].key,
                           (long long)*ints[i].out);
    }
    if (st != BORA_OK)
        return st;
    /* the ring caches compute their row in f32, exact below 2^23 positions */
    if (d->seq_len > ((int64_t)1 << 23))
        return h->fail(h, BORA_ERR_CONFIG, "model.seq_len: %lld is more than 8388608",
                       (long long)d->seq_len);
    if (d->num_hidden_layers > DECODER_MAX_LAYERS)
        return h->fail(h, BORA_ERR_CONFIG, "model.num_hidden_layers: %lld is more than %d",
                       (long long)d->num_hidden_layers, DECODER_MAX_LAYERS);
    int64_t H = d->num_attention_heads;
    if ((st = decoder_read_int(h, cfg, keys, "num_key_value_heads", H, &d->num_key_value_heads)) !=
        BORA_OK)
        return st;
    if (d->num_key_value_heads < 1 || H % d->num_key_value_heads) {
        char why[96] = "";
        if (!h->config_child(h, cfg, "num_key_value_heads"))
            snprintf(why, sizeof why, " (not given: %s's default)", type);
        return h->fail(h, BORA_ERR_CONFIG,
                       "model.num_key_value_heads: %lld%s must be at least 1 and divide "
                       "num_attention_heads %lld",
                       (long long)d->num_key_value_heads, why, (long long)H);
    }
    d->head_dim = 0;
    if (decoder_has_key(keys, "head_dim") &&
        (st = decoder_read_int(h, cfg, keys, "head_dim", 0, &d->head_dim)) != BORA_OK)
        return st;
    if (!d->head_dim) {
        if (d->hidden_size % H)
            return h->fail(h, BORA_ERR_CONFIG,
                           "model.hidden_size %lld does not divide into %lld heads; give "
                           "head_dim",
                           (long long)d->hidden_size, (long long)H);
        d->head_dim = d->hidden_size / H;
    }
    if (d->head_dim < 1)
        return h->fail(h, BORA_ERR_CONFIG, "model.head_dim must be at least 1, not %lld",
                       (long long)d->head_dim);
    if ((st = decoder_check_sizes(h, H, d->head_dim, d->vocab_size, d->hidden_size,
                                  d->intermediate_size)) != BORA_OK)
        return st;
    double dropout = 0;
    if ((st = h->config_float(h, cfg, "initializer_range", 0.02, &d->initializer_range)) ||
        (st = h->config_float(h, cfg, "rms_norm_eps", decoder_key_float(keys, "rms_norm_eps"),
                              &d->rms_norm_eps)) ||
        (st = h->config_float(h, cfg, "attention_dropout", 0.0, &dropout)) ||
        (st = h->config_bool(h, cfg, "tie_word_embeddings",
                             decoder_key_bool(keys, "tie_word_embeddings"),
                             &d->tie_word_embeddings)) ||
        (st = h->config_bool(h, cfg, "gradient_checkpointing", 0, &d->gradient_checkpointing)))
        return st;
    if (!(d->initializer_range >= 0 && isfinite(d->initializer_range)))
        return h->fail(h, BORA_ERR_CONFIG,
                       "model.initializer_range: %g is not a standard deviation; give 0 or more",
                       d->initializer_range);
    if (!(d->rms_norm_eps > 0 && isfinite(d->rms_norm_eps)))
        return h->fail(h, BORA_ERR_CONFIG,
                       "model.rms_norm_eps: %g would let RMSNorm divide by zero; give a number "
                       "above 0",
                       d->rms_norm_eps);
    if (dropout != 0)
        return h->fail(h, BORA_ERR_CONFIG,
                       "model.attention_dropout: %g; bora trains without dropout (give 0)",
                       dropout);
    if ((st = decoder_read_rope(h, cfg, decoder_key_float(keys, "rope_theta"),
                                d->max_position_embeddings, &d->rope, &d->rope_original_given)) !=
        BORA_OK)
        return st;
    /* both families rotate the whole head (their apply_rotary_pos_emb has no partial path) */
    d->rope.rotary_dims = d->head_dim;
    int64_t least = d->rope.kind == BORA_ROPE_DYNAMIC ? 4 : 2;
    if (d->rope.rotary_dims < least || d->rope.rotary_dims % 2)
        return h->fail(h, BORA_ERR_CONFIG,
                       "model.head_dim: %lld; RoPE rotates pairs of dims: give an even head_dim, "
                       "at least %lld",
                       (long long)d->rope.rotary_dims, (long long)least);
    return BORA_OK;
}

bora_status decoder_read_window_size(const bora_host *h, const bora_config *cfg,
                                     const bora_key *keys, decoder_dims *d)
{
    bora_status st = decoder_read_int(h, cfg, keys, "sliding_window", 0, &d->sliding_window);
    if (st != BORA_OK)
        return st;
    if (d->sliding_window < 0)
        return h->fail(h, BORA_ERR_CONFIG,
                       "model.sliding_window: %lld is negative; give a size or null",
                       (long long)d->sliding_window);
    return BORA_OK;
}
