/* plugins/models/common/keys.c — reading a model's keys against its own table of them: the
 * defaults are written once, in the bora_key table, and read from there (decoder.h). */
#include "decoder.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

int decoder_has_key(const bora_key *keys, const char *key)
{
    for (const bora_key *k = keys; k->name; k++)
        if (!strcmp(k->name, key))
            return 1;
    return 0;
}

int64_t decoder_key_int(const bora_key *keys, const char *key)
{
    for (const bora_key *k = keys; k->name; k++)
        if (!strcmp(k->name, key) && k->default_value && strcmp(k->default_value, "null"))
            return (int64_t)strtoll(k->default_value, NULL, 10);
    return 0;
}

double decoder_key_float(const bora_key *keys, const char *key)
{
    for (const bora_key *k = keys; k->name; k++)
        if (!strcmp(k->name, key) && k->default_value)
            return strtod(k->default_value, NULL);
    return 0;
}

bora_status decoder_read_int(const bora_host *h, const bora_config *cfg, const bora_key *keys,
                             const char *key, int64_t fallback, int64_t *out)
{
    int64_t def = decoder_key_int(keys, key);
    const bora_config *given = h->config_child(h, cfg, key);
    bora_status st = h->config_int(h, cfg, key, given ? INT64_MIN : def, out);
    if (st == BORA_OK && *out == INT64_MIN) /* present and null */
        *out = fallback;
    if (st == BORA_OK && !given && !def)
        *out = fallback;
    return st;
}

bora_status decoder_read_layer_types(const bora_host *h, const bora_config *cfg, int64_t L,
                                     uint8_t *slides, size_t *n)
{
    bora_status st = h->config_list_len(h, cfg, "layer_types", n);
    if (st != BORA_OK)
        return st;
    if (*n && (int64_t)*n != L)
        return h->fail(h, BORA_ERR_CONFIG,
                       "model.layer_types has %zu entries; num_hidden_layers is %lld", *n,
                       (long long)L);
    for (size_t i = 0; i < *n; i++) {
        const char *t = NULL;
        st = h->config_string(h, h->config_list_at(h, cfg, "layer_types", i), NULL, "", &t);
        if (st != BORA_OK)
            return st;
        if (strcmp(t, "full_attention") && strcmp(t, "sliding_attention"))
            return h->fail(h, BORA_ERR_CONFIG,
                           "model.layer_types[%zu]: '%s' is not full_attention or "
                           "sliding_attention",
                           i, t);
        slides[i] = !strcmp(t, "sliding_attention");
    }
    return BORA_OK;
}

bora_status decoder_check_sizes(const bora_host *h, int64_t heads, int64_t head_dim,
                                int64_t vocab_size, int64_t hidden_size, int64_t intermediate_size)
{
    /* the widest products the graph forms, within 2^62 */
    int64_t q, ff2, emb;
    if (__builtin_mul_overflow(heads, head_dim, &q) || q > ((int64_t)1 << 62) ||
        __builtin_mul_overflow(intermediate_size, 2, &ff2) ||
        __builtin_mul_overflow(vocab_size, hidden_size, &emb) ||
        __builtin_mul_overflow(hidden_size, ff2, &ff2) || emb > ((int64_t)1 << 62) ||
        ff2 > ((int64_t)1 << 62))
        return h->fail(h, BORA_ERR_CONFIG,
                       "model: num_attention_heads x head_dim, vocab_size x hidden_size and "
                       "hidden_size x 2·intermediate_size must each stay within 2^62");
    return BORA_OK;
}

int decoder_key_bool(const bora_key *keys, const char *key)
{
    for (const bora_key *k = keys; k->name; k++)
        if (!strcmp(k->name, key) && k->default_value)
            return !strcmp(k->default_value, "true");
    return 0;
}
