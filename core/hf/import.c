/* core/hf/import.c — a Hugging Face folder read into bora: config.json mapped to the model
 * section through the model's own table of config.json keys (so a key the model does not
 * understand is refused by name, never dropped), and the weights (one model.safetensors, or
 * shards listed by model.safetensors.index.json) checked against the model's parameters and
 * copied in, one memory-mapped shard at a time, converted to f32. */
#include "import.h"

#include "../ckpt/checkpoint.h"
#include "../ckpt/safetensors.h"
#include "../config/schema.h"
#include "../util/log.h"
#include "../util/str.h"

#include <bora/model.h>
#include <errno.h>
#include <json-c/json.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_JSON_BYTES (64u << 20)

static const char *jtext(json_object *v)
{
    return v ? json_object_to_json_string_ext(v, JSON_C_TO_STRING_PLAIN) : "null";
}

/* path parsed as a JSON object, or an error naming the file and what is wrong. */
static bora_status read_object(const char *path, const char *what, json_object **out)
{
    char *text;
    size_t len;
    *out = NULL;
    bora_status st = bora_read_file(path, MAX_JSON_BYTES, &text, &len);
    if (st != BORA_OK)
        return bora_error_set(st, "%s: %s", what, bora_error_get());
    enum json_tokener_error jerr = json_tokener_success;
    json_object *o = json_tokener_parse_verbose(text, &jerr);
    free(text);
    if (!o || !json_object_is_type(o, json_type_object)) {
        json_object_put(o);
        return bora_error_set(BORA_ERR_INVALID, "%s: not a JSON object (%s)", path,
                              o ? "another JSON value" : json_tokener_error_desc(jerr));
    }
    *out = o;
    return BORA_OK;
}

/* Two JSON values the same, numbers compared by value (1 equals 1.0). */
static int json_same(json_object *a, json_object *b)
{
    int ta = a ? (int)json_object_get_type(a) : (int)json_type_null;
    int tb = b ? (int)json_object_get_type(b) : (int)json_type_null;
    int na = ta == json_type_int || ta == json_type_double;
    int nb = tb == json_type_int || tb == json_type_double;
    if (na && nb)
        return ta == json_type_int && tb == json_type_int
                   ? json_object_get_int64(a) == json_object_get_int64(b)
                   : json_object_get_double(a) == json_object_get_double(b);
    if (ta != tb)
        return 0;
    return ta == json_type_null || json_object_equal(a, b);
}

static const bora_hf_key *find_rule(const bora_hf_key *keys, const char *name)
{
    for (; keys->hf_name; keys++)
        if (!strcmp(keys->hf_name, name))
            return keys;
    return NULL;
}

#define GENERIC(k, rule, value, doc)       \
    {                                      \
        k, rule, 0, NULL, NULL, value, doc \
    }
/* The keys transformers' PretrainedConfig gives every model's config.json, for any model whose
 * own table does not name them: metadata, the settings of heads other than the causal LM's
 * (labels, tasks), the output switches of forward(), and the generation settings older
 * transformers kept in config.json. None changes the function a causal LM computes; those that
 * would (an encoder-decoder, cross-attention, pruned heads) must hold their default. */
static const bora_hf_key generic_keys[] = {
    GENERIC("architectures", BORA_HF_IGNORE, NULL, NULL),
    GENERIC("model_type", BORA_HF_IGNORE, NULL, NULL),
    GENERIC("_name_or_path", BORA_HF_IGNORE, NULL, NULL),
    GENERIC("_commit_hash", BORA_HF_IGNORE, NULL, NULL),
    GENERIC("_attn_implementation", BORA_HF_IGNORE, NULL, NULL),
    GENERIC("transformers_version", BORA_HF_IGNORE, NULL, NULL),
    GENERIC("torch_dtype", BORA_HF_IGNORE, NULL, NULL),
    GENERIC("dtype", BORA_HF_IGNORE, NULL, NULL),
    GENERIC("use_bfloat16", BORA_HF_IGNORE, NULL, NULL),
    GENERIC("use_cache", BORA_HF_IGNORE, NULL, NULL),
    GENERIC("gradient_checkpointing", BORA_HF_IGNORE, NULL, NULL),
    GENERIC("return_dict", BORA_HF_IGNORE, NULL, NULL),
    GENERIC("output_hidden_states", BORA_HF_IGNORE, NULL, NULL),
    GENERIC("output_attentions", BORA_HF_IGNORE, NULL, NULL),
    GENERIC("output_past", BORA_HF_IGNORE, NULL, NULL),
    GENERIC("torchscript", BORA_HF_IGNORE, NULL, NULL),
    GENERIC("tf_legacy_loss", BORA_HF_IGNORE, NULL, NULL),
    GENERIC("chunk_size_feed_forward", BORA_HF_IGNORE, NULL, NULL),
    GENERIC("bos_token_id", BORA_HF_IGNORE, NULL, NULL),
    GENERIC("eos_token_id", BORA_HF_IGNORE, NULL, NULL),
    GENERIC("pad_token_id", BORA_HF_IGNORE, NULL, NULL),
    GENERIC("sep_token_id", BORA_HF_IGNORE, NULL, NULL),
    GENERIC("decoder_start_token_id", BORA_HF_IGNORE, NULL, NULL),
    GENERIC("tokenizer_class", BORA_HF_IGNORE, NULL, NULL),
    GENERIC("prefix", BORA_HF_IGNORE, NULL, NULL),
    GENERIC("task_specific_params", BORA_HF_IGNORE, NULL, NULL),
    GENERIC("problem_type", BORA_HF_IGNORE, NULL, NULL),
    GENERIC("finetuning_task", BORA_HF_IGNORE, NULL, NULL),
    GENERIC("id2label", BORA_HF_IGNORE, NULL, NULL),
    GENERIC("label2id", BORA_HF_IGNORE, NULL, NULL),
    GENERIC("num_labels", BORA_HF_IGNORE, NULL, NULL),
    GENERIC("_num_labels", BORA_HF_IGNORE, NULL, NULL),
    /* generation settings (generation_config.json's since transformers 4.26) */
    GENERIC("max_length", BORA_HF_IGNORE, NULL, NULL),
    GENERIC("min_length", BORA_HF_IGNORE, NULL, NULL),
    GENERIC("do_sample", BORA_HF_IGNORE, NULL, NULL),
    GENERIC("early_stopping", BORA_HF_IGNORE, NULL, NULL),
    GENERIC("num_beams", BORA_HF_IGNORE, NULL, NULL),
    GENERIC("num_beam_groups", BORA_HF_IGNORE, NULL, NULL),
    GENERIC("diversity_penalty", BORA_HF_IGNORE, NULL, NULL),
    GENERIC("temperature", BORA_HF_IGNORE, NULL, NULL),
    GENERIC("top_k", BORA_HF_IGNORE, NULL, NULL),
    GENERIC("top_p", BORA_HF_IGNORE, NULL, NULL),
    GENERIC("typical_p", BORA_HF_IGNORE, NULL, NULL),
    GENERIC("repetition_penalty", BORA_HF_IGNORE, NULL, NULL),
    GENERIC("length_penalty", BORA_HF_IGNORE, NULL, NULL),
    GENERIC("no_repeat_ngram_size", BORA_HF_IGNORE, NULL, NULL),
    GENERIC("encoder_no_repeat_ngram_size", BORA_HF_IGNORE, NULL, NULL),
    GENERIC("bad_words_ids", BORA_HF_IGNORE, NULL, NULL),
    GENERIC("num_return_sequences", BORA_HF_IGNORE, NULL, NULL),
    GENERIC("output_scores", BORA_HF_IGNORE, NULL, NULL),
    GENERIC("return_dict_in_generate", BORA_HF_IGNORE, NULL, NULL),
    GENERIC("forced_bos_token_id", BORA_HF_IGNORE, NULL, NULL),
    GENERIC("forced_eos_token_id", BORA_HF_IGNORE, NULL, NULL),
    GENERIC("remove_invalid_values", BORA_HF_IGNORE, NULL, NULL),
    GENERIC("exponential_decay_length_penalty", BORA_HF_IGNORE, NULL, NULL),
    GENERIC("suppress_tokens", BORA_HF_IGNORE, NULL, NULL),
    GENERIC("begin_suppress_tokens", BORA_HF_IGNORE, NULL, NULL),
    /* these change the model: only their defaults describe a causal LM bora builds */
    GENERIC("is_encoder_decoder", BORA_HF_EXPECT, "false", "bora's models are decoders alone"),
    GENERIC("add_cross_attention", BORA_HF_EXPECT, "false",
            "bora's models are decoders without cross-attention"),
    GENERIC("tie_encoder_decoder", BORA_HF_EXPECT, "false", "bora's models have no encoder"),
    GENERIC("cross_attention_hidden_size", BORA_HF_EXPECT, "null", "bora's models have no encoder"),
    GENERIC("pruned_heads", BORA_HF_EXPECT, "{}", "bora's models keep every attention head"),
    {NULL, 0, 0, NULL, NULL, NULL, NULL},
};

/* transformers 5 writes RoPE's settings as one object, rope_parameters ({rope_type, rope_theta,
 * factor, ...}), where earlier versions wrote rope_theta and rope_scaling: read into those two
 * (for a model whose table reads them), refusing a file that gives both ways differently. */
static bora_status split_rope_parameters(const char *file, const bora_hf_key *keys, json_object *c)
{
    json_object *rp = NULL;
    if (!json_object_object_get_ex(c, "rope_parameters", &rp) || !find_rule(keys, "rope_scaling") ||
        !find_rule(keys, "rope_theta"))
        return BORA_OK; /* absent, or refused by name as any key the model does not read */
    if (rp && !json_object_is_type(rp, json_type_object))
        return bora_error_set(BORA_ERR_CONFIG,
                              "%s: rope_parameters is %s; give an object {rope_type, rope_theta, "
                              "...} or null",
                              file, jtext(rp));
    /* Gemma 3's: one object per layer type; the global layers' is the one above, the sliding
     * layers' (default RoPE) gives rope_local_base_freq */
    json_object *full = NULL, *sliding = NULL;
    if (rp && json_object_object_get_ex(rp, "full_attention", &full) &&
        find_rule(keys, "rope_local_base_freq")) {
        json_object_object_get_ex(rp, "sliding_attention", &sliding);
        json_object *st_type = NULL, *st_theta = NULL;
        if (sliding) {
            json_object_object_get_ex(sliding, "rope_type", &st_type);
            json_object_object_get_ex(sliding, "rope_theta", &st_theta);
        }
        if (!json_object_is_type(full, json_type_object) ||
            (sliding && !json_object_is_type(sliding, json_type_object)) ||
            (st_type && strcmp(json_object_get_string(st_type), "default")) ||
            (sliding &&
             json_object_object_length(sliding) > (st_type != NULL) + (st_theta != NULL)))
            return bora_error_set(BORA_ERR_CONFIG,
                                  "%s: rope_parameters is %s; bora reads {full_attention: "
                                  "{rope_type, rope_theta, ...}, sliding_attention: {rope_type: "
                                  "default, rope_theta}}",
                                  file, jtext(rp));
        json_object *old = NULL;
        if (st_theta && json_object_object_get_ex(c, "rope_local_base_freq", &old) &&
            !json_same(old, st_theta))
            return bora_error_set(BORA_ERR_CONFIG,
                                  "%s: rope_local_base_freq is %s, but rope_parameters makes it "
                                  "%s: give one of the two",
                                  file, jtext(old), jtext(st_theta));
        if (st_theta)
            json_object_object_add(c, "rope_local_base_freq", json_object_get(st_theta));
        json_object_get(full);
        json_object_object_add(c, "rope_parameters", full); /* the global layers' */
        rp = full;
    }
    json_object *theta = NULL, *type = NULL, *scaling = NULL;
    if (rp) {
        json_object_object_get_ex(rp, "rope_theta", &theta);
        json_object_object_get_ex(rp, "rope_type", &type);
        int plain = !type || (json_object_is_type(type, json_type_string) &&
                              !strcmp(json_object_get_string(type), "default"));
        if (!plain) {
            scaling = json_object_new_object();
            json_object_object_foreach(rp, k, v)
            {
                if (strcmp(k, "rope_theta"))
                    json_object_object_add(scaling, k, v ? json_object_get(v) : NULL);
            }
        }
    }
    struct {
        const char *key;
        json_object *v;
    } to[] = {{"rope_theta", theta}, {"rope_scaling", scaling}};
    bora_status st = BORA_OK;
    for (int i = 0; i < 2 && st == BORA_OK; i++) {
        json_object *old = NULL;
        int had = json_object_object_get_ex(c, to[i].key, &old);
        if (had && !json_same(old, to[i].v) && (i == 1 || to[i].v))
            st = bora_error_set(BORA_ERR_CONFIG,
                                "%s: %s is %s, but rope_parameters makes it %s: give one of the "
                                "two",
                                file, to[i].key, jtext(old), jtext(to[i].v));
        else if (!had && (to[i].v || i == 1))
            json_object_object_add(c, to[i].key, to[i].v ? json_object_get(to[i].v) : NULL);
    }
    json_object_put(scaling);
    if (st == BORA_OK)
        json_object_object_del(c, "rope_parameters");
    return st;
}

/* Apply the model's table to config.json's object c into sec; 0 when every key passed. */
/* An EXPECT rule on a key's value v: the error where v is not the one value bora takes. */
static bora_status check_expect(const char *file, const char *type, const char *name,
                                json_object *v, const bora_hf_key *r)
{
    json_object *want = r->value ? json_tokener_parse(r->value) : NULL;
    bora_status st = BORA_OK;
    if (v && !json_same(v, want))
        st = bora_error_set(BORA_ERR_CONFIG, "%s: %s is %s; bora's %s takes only %s%s%s", file,
                            name, jtext(v), type, r->value ? r->value : "null", r->doc ? ": " : "",
                            r->doc ? r->doc : "");
    json_object_put(want);
    return st;
}

static bora_status map_keys(const char *file, const char *type, const bora_hf_key *keys,
                            json_object *c, json_object *sec)
{
    /* The refusals first, wherever they stand in the file: a key that says what the file is (a
     * multimodal folder's text_config) explains more than the first key bora does not read. */
    json_object_object_foreach(c, key, value)
    {
        const bora_hf_key *r = find_rule(keys, key);
        if (!r)
            r = find_rule(generic_keys, key);
        bora_status st =
            r && r->rule == BORA_HF_EXPECT ? check_expect(file, type, key, value, r) : BORA_OK;
        if (st != BORA_OK)
            return st;
    }
    json_object_object_foreach(c, name, v)
    {
        const bora_hf_key *r = find_rule(keys, name);
        if (!r)
            r = find_rule(generic_keys, name);
        json_object *want = r && r->value ? json_tokener_parse(r->value) : NULL;
        bora_status st = BORA_OK;
        const char *dst = r && r->key ? r->key : name;
        if (!r) {
            st = bora_error_set(BORA_ERR_CONFIG,
                                "%s: key '%s' is not one bora's %s reads, so the model it "
                                "describes cannot be imported as it is (a key that does not "
                                "change the model may be removed from the file)",
                                file, name, type);
        } else if (r->rule == BORA_HF_COPY) {
            json_object_object_add(sec, dst, v ? json_object_get(v) : json_object_get(want));
        } else if (r->rule == BORA_HF_RATIO) {
            json_object *of = NULL;
            json_object_object_get_ex(c, r->of ? r->of : "", &of);
            if (!v) {
                json_object_object_add(sec, dst, json_object_get(want));
            } else if (!json_object_is_type(v, json_type_int) ||
                       !json_object_is_type(of, json_type_int) || json_object_get_int64(of) < 1 ||
                       json_object_get_int64(v) % json_object_get_int64(of) ||
                       json_object_get_int64(v) < 1) {
                st = bora_error_set(BORA_ERR_CONFIG,
                                    "%s: %s is %s, not a whole multiple of %s (%s): bora's %s "
                                    "needs model.%s = %s / %s to be a whole number",
                                    file, name, jtext(v), r->of ? r->of : "?", jtext(of), type, dst,
                                    name, r->of ? r->of : "?");
            } else {
                json_object_object_add(
                    sec, dst,
                    json_object_new_int64(json_object_get_int64(v) / json_object_get_int64(of)));
            }
        } else if (r->rule == BORA_HF_EXPECT) {
            st = check_expect(file, type, name, v, r);
        } else if (r->rule == BORA_HF_NOTE) {
            if (v && !json_same(v, want))
                bora_log(BORA_LOG_INFO, "note: %s: %s is %s: %s", file, name, jtext(v),
                         r->doc ? r->doc : "bora does not apply it");
        } else if (r->rule != BORA_HF_IGNORE) {
            st = bora_error_set(BORA_ERR_INVALID,
                                "model %s's rule for config.json key '%s' is %d, which this "
                                "bora does not know",
                                type, name, (int)r->rule);
        }
        json_object_put(want);
        if (st != BORA_OK)
            return st;
    }
    return BORA_OK;
}

bora_status bora_hf_model_section(const bora_registry *reg, const char *hf_dir, char **out)
{
    *out = NULL;
    char file[4200];
    snprintf(file, sizeof file, "%s/config.json", hf_dir);
    json_object *c, *mt = NULL;
    struct stat sb;
    if (stat(hf_dir, &sb) != 0 || !S_ISDIR(sb.st_mode))
        return bora_error_set(BORA_ERR_NOT_FOUND,
                              "%s: not a directory (give a Hugging Face model folder: "
                              "config.json and its weights)",
                              hf_dir);
    bora_status st = read_object(file, file, &c);
    if (st != BORA_OK)
        return st;
    if (!json_object_object_get_ex(c, "model_type", &mt) ||
        !json_object_is_type(mt, json_type_string)) {
        json_object_put(c);
        return bora_error_set(BORA_ERR_CONFIG,
                              "%s: no model_type (a string such as \"gpt2\" or \"llama\") says "
                              "which model it describes",
                              file);
    }
    const char *type = json_object_get_string(mt), *given = type;
    /* model_types whose bora type is spelt otherwise (Gemma3ForCausalLM's config class is
     * Gemma3TextConfig; "gemma3" is the multimodal one, refused by the gemma3 plugin's keys) */
    static const char *const alias[][2] = {{"gemma3_text", "gemma3"}};
    for (size_t i = 0; i < sizeof alias / sizeof alias[0]; i++)
        if (!strcmp(type, alias[i][0]))
            type = alias[i][1];
    const bora_entry *e = bora_registry_find(reg, BORA_KIND_MODEL, type);
    if (!e) {
        st = bora_error_set(
            BORA_ERR_NOT_FOUND,
            "%s: model_type '%s' is not a model bora has (bora plugins lists "
            "them: gpt2, llama, mistral, qwen2, qwen3, gemma, gemma2, gemma3_text, whisper ship "
            "with bora)",
            file, given);
    } else if (!((const bora_model_ops *)e->ops)->hf_keys) {
        st = bora_error_set(BORA_ERR_UNSUPPORTED,
                            "%s: model %s (plugin %s) declares no config.json keys "
                            "(bora_model_ops.hf_keys, plugin ABI 1.10), so bora cannot import "
                            "it; rebuild the plugin with a table of them",
                            file, type, e->file->path);
    }
    json_object *sec = st == BORA_OK ? json_object_new_object() : NULL;
    if (st == BORA_OK) {
        json_object_object_add(sec, "type", json_object_new_string(type));
        st = split_rope_parameters(file, ((const bora_model_ops *)e->ops)->hf_keys, c);
        if (st == BORA_OK)
            st = map_keys(file, type, ((const bora_model_ops *)e->ops)->hf_keys, c, sec);
    }
    if (st == BORA_OK && !(*out = bora_strdup(jtext(sec))))
        st = bora_error_set(BORA_ERR_NOMEM, "out of memory");
    json_object_put(sec);
    json_object_put(c);
    return st;
}

/* Whether the configuration's node n holds the JSON value v. */
static int node_agrees(const bora_config *n, json_object *v)
{
    json_type t = v ? json_object_get_type(v) : json_type_null;
    if (t == json_type_null)
        return n->kind == BORA_NODE_NULL || (n->kind == BORA_NODE_SCALAR && !n->quoted &&
                                             (!strcmp(n->text, "null") || !strcmp(n->text, "~")));
    if (t == json_type_object) {
        if (n->kind != BORA_NODE_MAP || n->n != (size_t)json_object_object_length(v))
            return 0;
        for (size_t i = 0; i < n->n; i++) {
            json_object *x = NULL;
            if (!json_object_object_get_ex(v, n->keys[i], &x) || !node_agrees(n->values[i], x))
                return 0;
        }
        return 1;
    }
    if (t == json_type_array) {
        if (n->kind != BORA_NODE_LIST || n->n != json_object_array_length(v))
            return 0;
        for (size_t i = 0; i < n->n; i++)
            if (!node_agrees(n->values[i], json_object_array_get_idx(v, i)))
                return 0;
        return 1;
    }
    if (n->kind != BORA_NODE_SCALAR)
        return 0;
    if (t == json_type_string)
        return !strcmp(n->text, json_object_get_string(v));
    if (t == json_type_boolean) {
        int b;
        return !n->quoted && bora_parse_bool(n->text, &b) == 0 && b == json_object_get_boolean(v);
    }
    double d;
    return !n->quoted && bora_parse_float(n->text, &d) == 0 && d == json_object_get_double(v);
}

bora_status bora_hf_apply_config(bora_cfg *cfg, const bora_registry *reg, const char *hf_dir)
{
    char *text = NULL, file[4200], tok[4200];
    snprintf(file, sizeof file, "%s/config.json", hf_dir);
    if (bora_hf_model_section(reg, hf_dir, &text) != BORA_OK)
        return bora_cfg_error(cfg, NULL, "%s", bora_error_get());
    json_object *sec = json_tokener_parse(text), *doc = json_object_new_object();
    free(text);
    bora_config *root = bora_cfg_root(cfg), *m = bora_cfg_child(root, "model");
    if (m && m->kind == BORA_NODE_MAP) {
        /* A model section beside the folder may only repeat it, or add bora's own keys that
         * no config.json holds (seq_len for the Llama family, gradient_checkpointing): a
         * differing shape would not fit the weights, and another value, or a key config.json
         * leaves to its default, would silently be a different model. */
        static const char *const own[] = {"seq_len", "gradient_checkpointing"};
        for (size_t i = 0; i < m->n; i++) {
            int ok = json_object_object_get_ex(sec, m->keys[i], NULL);
            for (size_t k = 0; k < sizeof own / sizeof own[0]; k++)
                ok |= !strcmp(m->keys[i], own[k]);
            if (!ok)
                bora_cfg_error(cfg, m->values[i],
                               "model.%s: %s does not give it, so the folder's model has the "
                               "default; leave model.%s out (beside a Hugging Face folder, "
                               "model: may add only seq_len and gradient_checkpointing)",
                               m->keys[i], file, m->keys[i]);
        }
        json_object_object_foreach(sec, key, v)
        {
            for (size_t i = 0; i < m->n; i++)
                if (!strcmp(m->keys[i], key) && !node_agrees(m->values[i], v))
                    bora_cfg_error(cfg, m->values[i],
                                   "model.%s: the configuration says %s, but %s makes it %s: "
                                   "leave model.%s out (the folder's value is used) or give "
                                   "the same",
                                   key, m->values[i]->text ? m->values[i]->text : "a map or list",
                                   file, jtext(v), key);
        }
    } else if (m && m->kind != BORA_NODE_NULL) {
        bora_cfg_error(cfg, m, "model: must be a map (or absent) beside a Hugging Face folder");
    }
    json_object_object_add(doc, "model", sec);
    bora_config *data = bora_cfg_child(root, "data");
    /* the folder is the tokenizer when it holds the files bora_tokenizer_load reads from a
     * folder: tokenizer.json (or .gz), or GPT-2's pair */
    static const char *const tok_files[][2] = {{"tokenizer.json", NULL},
                                               {"tokenizer.json.gz", NULL},
                                               {"vocab.json", "merges.txt"},
                                               {"encoder.json", "vocab.bpe"}};
    int has_tok = 0;
    for (size_t i = 0; i < sizeof tok_files / sizeof tok_files[0] && !has_tok; i++) {
        snprintf(tok, sizeof tok, "%s/%s", hf_dir, tok_files[i][0]);
        has_tok = access(tok, R_OK) == 0;
        snprintf(tok, sizeof tok, "%s/%s", hf_dir, tok_files[i][1] ? tok_files[i][1] : "");
        has_tok = has_tok && (!tok_files[i][1] || access(tok, R_OK) == 0);
    }
    char *abs = realpath(hf_dir, NULL);
    if (!bora_cfg_child(data, "tokenizer") && has_tok && abs) {
        json_object *d = json_object_new_object();
        json_object_object_add(d, "tokenizer", json_object_new_string(abs));
        json_object_object_add(doc, "data", d);
    }
    free(abs);
    bora_status st = BORA_ERR_CONFIG;
    if (!bora_cfg_error_count(cfg)) {
        const char *t = jtext(doc);
        st = bora_cfg_load_string(cfg, file, t, strlen(t)); /* JSON is YAML */
    }
    json_object_put(doc);
    return st;
}

/* ---- weights ---------------------------------------------------------------------------------- */

/* transformers' buffers that some published files hold beside the parameters: GPT-2's causal
 * masks and the rotary inverse frequencies of older Llama files; bora computes them. */
static int is_buffer(const char *name)
{
    static const char *const ends[] = {".attn.bias", ".attn.masked_bias", "rotary_emb.inv_freq"};
    size_t n = strlen(name);
    for (size_t i = 0; i < sizeof ends / sizeof ends[0]; i++) {
        size_t k = strlen(ends[i]);
        if (n >= k && !strcmp(name + n - k, ends[i]))
            return 1;
    }
    return 0;
}

/* The parameter a file's tensor name is: the name itself, or, for weights saved from the base
 * model alone (openai-community/gpt2 holds "h.0.attn.c_attn.weight" where GPT2LMHeadModel has
 * "transformer.h.0.attn.c_attn.weight"), the parameter whose name is that one under its model's
 * prefix, as transformers' base_model_prefix loads them. -1 when neither. */
static long find_param(const g_store *s, const char *name)
{
    long at = g_store_find(s, name);
    for (size_t i = 0; at < 0 && i < s->n_slots; i++) {
        const char *dot = strchr(s->slots[i].name, '.');
        if (dot && !strcmp(dot + 1, name))
            at = (long)i;
    }
    return at;
}

/* Whether the index lists parameter slot, under its name or without its model's prefix. */
static int listed(json_object *wmap, const char *slot)
{
    const char *dot = strchr(slot, '.');
    return json_object_object_get_ex(wmap, slot, NULL) ||
           (dot && json_object_object_get_ex(wmap, dot + 1, NULL));
}

static float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31, e = (h >> 10) & 31, m = h & 1023u, bits;
    if (e == 31)
        bits = sign | 0x7f800000u | (m << 13); /* inf, NaN */
    else if (e)
        bits = sign | ((e + 112) << 23) | (m << 13);
    else if (!m)
        bits = sign;
    else { /* subnormal: m * 2^-24, exact in f32 */
        float f = (float)m * 0x1p-24f;
        return sign ? -f : f;
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* n values of src (st_dtype F32, BF16 or F16) as f32 into dst. */
static void to_f32(const char *st_dtype, const unsigned char *src, float *dst, size_t n)
{
    if (!strcmp(st_dtype, "F32")) {
        memcpy(dst, src, n * sizeof(float));
    } else if (!strcmp(st_dtype, "BF16")) {
        for (size_t i = 0; i < n; i++) {
            uint32_t bits = (uint32_t)(src[2 * i] | (src[2 * i + 1] << 8)) << 16;
            memcpy(&dst[i], &bits, sizeof bits);
        }
    } else {
        for (size_t i = 0; i < n; i++)
            dst[i] = f16_to_f32((uint16_t)(src[2 * i] | (src[2 * i + 1] << 8)));
    }
}

/* A name the index's weight_map gives twice: json-c keeps the last, so the text is scanned. */
static const char *scan_string(const char *p, const char **start, size_t *len)
{
    if (*p != '"')
        return NULL;
    *start = ++p;
    while (*p && *p != '"')
        p += *p == '\\' && p[1] ? 2 : 1;
    *len = (size_t)(p - *start);
    return *p ? p + 1 : NULL;
}

static int by_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static bora_status index_duplicates(const char *path, const char *text)
{
    const char *p = strstr(text, "\"weight_map\""), *s;
    size_t len, n = 0, cap = 0;
    char **names = NULL;
    bora_status st = BORA_OK;
    if (!p)
        return BORA_OK;
    p += strlen("\"weight_map\"");
#define SKIP_WS()                                                                         \
    while (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t' || *p == ':' || *p == ',') \
    p++
    SKIP_WS();
    if (*p++ != '{')
        return BORA_OK; /* the parsed object's check reports it */
    for (;;) {
        SKIP_WS();
        if (*p != '"' || !(p = scan_string(p, &s, &len)))
            break;
        if (n == cap) {
            char **g = realloc(names, (cap = cap ? 2 * cap : 256) * sizeof *names);
            if (!g)
                break;
            names = g;
        }
        names[n++] = bora_strndup(s, len);
        SKIP_WS();
        if (*p != '"' || !(p = scan_string(p, &s, &len)))
            break;
    }
#undef SKIP_WS
    qsort(names, n, sizeof *names, by_str);
    for (size_t i = 1; i < n && st == BORA_OK; i++)
        if (names[i] && names[i - 1] && !strcmp(names[i], names[i - 1]))
            st = bora_error_set(BORA_ERR_INVALID,
                                "%s: weight_map names tensor '%s' twice; each tensor is in one "
                                "shard",
                                path, names[i]);
    for (size_t i = 0; i < n; i++)
        free(names[i]);
    free(names);
    return st;
}

static void shape_text(char *buf, size_t cap, int ndim, const int64_t *dims)
{
    size_t at = (size_t)snprintf(buf, cap, "[");
    for (int i = 0; i < ndim && at < cap; i++)
        at += (size_t)snprintf(buf + at, cap - at, "%s%lld", i ? ", " : "", (long long)dims[i]);
    if (at < cap)
        snprintf(buf + at, cap - at, "]");
}

typedef struct loader {
    g_store *s;
    const char *dir, *model;
    char head_path[4200]; /* the file holding a tied head (lm_head.weight), or "" */
    char head[32];        /* that head's name */
    json_object *wmap;    /* the index's weight_map, or NULL for one model.safetensors */
    char *seen;           /* per slot: the shard it was found in + 1 */
    float *buf;           /* the largest parameter, converted */
} loader;

/* A tied head's name in Hugging Face's files and the embedding it is: the decoders' lm_head,
 * Whisper's proj_out. */
static const char *const tied_heads[][2] = {
    {"lm_head.weight", "model.embed_tokens.weight"},
    {"lm_head.weight", "transformer.wte.weight"},
    {"proj_out.weight", "model.decoder.embed_tokens.weight"}};

/* The embedding a file's tied head (lm_head.weight, proj_out.weight) is, for a model that ties
 * its head to it (and so has no such parameter of its own): its slot, or -1. transformers and
 * vLLM load such files, the head being the embedding. */
static long tied_to(const g_store *s, const char *name)
{
    if (find_param(s, name) >= 0)
        return -1;
    for (size_t i = 0; i < sizeof tied_heads / sizeof tied_heads[0]; i++) {
        long at = strcmp(name, tied_heads[i][0]) ? -1 : g_store_find(s, tied_heads[i][1]);
        if (at >= 0)
            return at;
    }
    return -1;
}

/* A tied head in the file (lm_head.weight, proj_out.weight) is skipped when it is the embedding bit for bit
 * (after conversion to f32, as the embedding was read), and refused when it is another matrix:
 * a tied model would silently drop it. */
static bora_status check_tied_head(loader *L)
{
    long emb = tied_to(L->s, L->head);
    const g_slot *sl = &L->s->slots[emb];
    bora_safetensors *f;
    bora_status st = bora_st_open(L->head_path, &f);
    if (st != BORA_OK)
        return st;
    const bora_st_tensor *t = bora_st_find(f, L->head);
    int same = t && t->ndim == sl->ndim;
    for (int d = 0; same && d < sl->ndim; d++)
        same = t->shape[d] == sl->dims[d];
    size_t n = sl->nbytes / sizeof(float), esize = t && !strcmp(t->st_dtype, "F32") ? 4 : 2;
    unsigned char *raw = NULL;
    float *mine = NULL;
    if (!same) {
        char want[128], got[128];
        shape_text(want, sizeof want, sl->ndim, sl->dims);
        shape_text(got, sizeof got, t ? t->ndim : 0, t ? t->shape : NULL);
        st = bora_error_set(BORA_ERR_CONFIG,
                            "%s: tensor '%s' is %s, but model %s ties its head to '%s' (%s)",
                            L->head_path, L->head, got, L->model, sl->name, want);
    } else if (strcmp(t->st_dtype, "F32") && strcmp(t->st_dtype, "BF16") &&
               strcmp(t->st_dtype, "F16")) {
        st = bora_error_set(BORA_ERR_UNSUPPORTED,
                            "%s: tensor '%s' is %s; bora imports F32, BF16 and F16 weights",
                            L->head_path, L->head, t->st_dtype);
    } else if (!(raw = malloc(n * esize)) || !(mine = malloc(sl->nbytes))) {
        st = bora_error_set(BORA_ERR_NOMEM, "out of memory");
    } else if ((st = bora_st_read(f, t, raw, n * esize)) == BORA_OK &&
               (st = L->s->ops->copy_out(L->s->backend, mine, L->s->params, sl->offset,
                                         sl->nbytes)) == BORA_OK) {
        to_f32(t->st_dtype, raw, L->buf, n);
        size_t i = 0;
        while (i < n && !memcmp(&L->buf[i], &mine[i], sizeof(float)))
            i++;
        if (i < n)
            st = bora_error_set(BORA_ERR_CONFIG,
                                "%s: tensor '%s' differs from '%s' (first at element "
                                "%zu: %g, not %g), but model %s ties its head to the embedding: "
                                "the file holds an untied head (for the Llama family, set "
                                "tie_word_embeddings to false in config.json)",
                                L->head_path, L->head, sl->name, i, (double)L->buf[i],
                                (double)mine[i], L->model);
    }
    free(raw);
    free(mine);
    bora_st_close(f);
    return st;
}

/* Copy every tensor of one file (the shard'th) into the store. */
static bora_status load_shard(loader *L, const char *file, size_t shard)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", L->dir, file);
    bora_safetensors *f;
    bora_status st = bora_st_open(path, &f);
    if (st == BORA_ERR_NOT_FOUND && L->wmap)
        return bora_error_set(st,
                              "%s/model.safetensors.index.json lists shard %s, which is missing "
                              "(%s)",
                              L->dir, file, bora_error_get());
    if (st != BORA_OK)
        return st;
    struct stat sb;
    void *map = MAP_FAILED;
    if (fstat(f->fd, &sb) == 0 && sb.st_size > 0)
        map = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, f->fd, 0);
    if (map == MAP_FAILED)
        st = bora_error_set(BORA_ERR_IO, "%s: cannot map it: %s", path, strerror(errno));
    for (size_t i = 0; i < f->n_tensors && st == BORA_OK; i++) {
        const bora_st_tensor *t = &f->tensors[i];
        long at = find_param(L->s, t->name);
        json_object *where = NULL;
        if (at < 0 && is_buffer(t->name))
            continue;
        if (L->wmap && (!json_object_object_get_ex(L->wmap, t->name, &where) ||
                        strcmp(json_object_get_string(where), file))) {
            st = bora_error_set(BORA_ERR_INVALID,
                                "%s holds tensor '%s', which model.safetensors.index.json %s%s",
                                path, t->name, where ? "puts in " : "does not list",
                                where ? json_object_get_string(where) : "");
            break;
        }
        if (at < 0 && tied_to(L->s, t->name) >= 0) {
            if (*L->head_path)
                st = bora_error_set(BORA_ERR_INVALID, "%s: tensor '%s' is there twice", path,
                                    t->name);
            snprintf(L->head_path, sizeof L->head_path, "%s", path);
            snprintf(L->head, sizeof L->head, "%s", t->name);
            continue; /* compared with the embedding once every shard is read */
        }
        if (at < 0) {
            st = bora_error_set(BORA_ERR_CONFIG,
                                "%s: tensor '%s' is no parameter of model %s (config.json and "
                                "the weights do not belong together)",
                                path, t->name, L->model);
            break;
        }
        const g_slot *sl = &L->s->slots[at];
        int same = t->ndim == sl->ndim;
        for (int d = 0; same && d < sl->ndim; d++)
            same = t->shape[d] == sl->dims[d];
        if (L->seen[at]) {
            st = bora_error_set(BORA_ERR_INVALID, "%s: tensor '%s' is there twice", path, t->name);
        } else if (!same || sl->dtype != BORA_DTYPE_F32) {
            char want[128], got[128];
            shape_text(want, sizeof want, sl->ndim, sl->dims);
            shape_text(got, sizeof got, t->ndim, t->shape);
            st = bora_error_set(BORA_ERR_CONFIG,
                                "%s: tensor '%s' is %s, model %s (from config.json) has %s: the "
                                "config.json and the weights do not belong together",
                                path, t->name, got, L->model, want);
        } else if (strcmp(t->st_dtype, "F32") && strcmp(t->st_dtype, "BF16") &&
                   strcmp(t->st_dtype, "F16")) {
            st = bora_error_set(BORA_ERR_UNSUPPORTED,
                                "%s: tensor '%s' is %s; bora imports F32, BF16 and F16 weights",
                                path, t->name, t->st_dtype);
        } else {
            size_t n = sl->nbytes / sizeof(float);
            to_f32(t->st_dtype, (const unsigned char *)map + f->data_start + t->begin, L->buf, n);
            st = bora_ckpt_check_tensor(path, t->name, BORA_DTYPE_F32, L->buf, sl->nbytes, NULL);
            if (st == BORA_OK)
                st =
                    L->s->ops->copy_in(L->s->backend, L->s->params, sl->offset, L->buf, sl->nbytes);
            L->seen[at] = (char)(shard < 126 ? shard + 1 : 127);
        }
    }
    if (map != MAP_FAILED)
        munmap(map, (size_t)sb.st_size);
    bora_st_close(f);
    return st;
}

bora_status bora_hf_load_weights(g_store *s, const char *hf_dir, const char *model, int quiet)
{
    char index_path[4200], single[4200];
    snprintf(index_path, sizeof index_path, "%s/model.safetensors.index.json", hf_dir);
    snprintf(single, sizeof single, "%s/model.safetensors", hf_dir);
    loader L = {s, hf_dir, model, "", "", NULL, calloc(s->n_slots + 1, 1), NULL};
    json_object *index = NULL;
    const char **files = NULL;
    size_t n_files = 0, largest = 0;
    bora_status st = BORA_OK;
    for (size_t i = 0; i < s->n_slots; i++)
        largest = s->slots[i].nbytes > largest ? s->slots[i].nbytes : largest;
    L.buf = malloc(largest ? largest : 1);
    files = calloc(s->n_slots + 1, sizeof *files);
    if (!L.seen || !L.buf || !files)
        st = bora_error_set(BORA_ERR_NOMEM, "out of memory");
    if (st == BORA_OK && access(index_path, F_OK) == 0) {
        char *text;
        size_t len;
        st = bora_read_file(index_path, MAX_JSON_BYTES, &text, &len);
        if (st == BORA_OK) {
            st = index_duplicates(index_path, text);
            free(text);
        }
        if (st == BORA_OK)
            st = read_object(index_path, index_path, &index);
        if (st == BORA_OK && (!json_object_object_get_ex(index, "weight_map", &L.wmap) ||
                              !json_object_is_type(L.wmap, json_type_object)))
            st = bora_error_set(BORA_ERR_INVALID,
                                "%s: no \"weight_map\" object (tensor name to shard file)",
                                index_path);
        /* every parameter listed, nothing else; the shards in the order first named */
        json_object *wmap = st == BORA_OK ? L.wmap : json_object_new_object();
        size_t names = (size_t)json_object_object_length(wmap);
        if (st == BORA_OK && names > s->n_slots) {
            const char **more = realloc(files, (names + 1) * sizeof *files);
            if (more)
                files = more;
            else
                st = bora_error_set(BORA_ERR_NOMEM, "out of memory");
        }
        json_object_object_foreach(wmap, name, where)
        {
            if (st != BORA_OK)
                break;
            const char *w =
                json_object_is_type(where, json_type_string) ? json_object_get_string(where) : NULL;
            if (!w || !*w || strchr(w, '/'))
                st = bora_error_set(BORA_ERR_INVALID,
                                    "%s: tensor '%s' is in %s, which is not a file name in the "
                                    "folder",
                                    index_path, name, jtext(where));
            else if (find_param(s, name) < 0 && !is_buffer(name) && tied_to(s, name) < 0)
                st = bora_error_set(BORA_ERR_CONFIG,
                                    "%s lists tensor '%s', which is no parameter of model %s "
                                    "(config.json and the weights do not belong together)",
                                    index_path, name, model);
            size_t k = 0;
            while (st == BORA_OK && k < n_files && strcmp(files[k], w))
                k++;
            if (st == BORA_OK && k == n_files)
                files[n_files++] = w; /* room: one per weight_map entry */
        }
        if (wmap != L.wmap)
            json_object_put(wmap);
        for (size_t i = 0; i < s->n_slots && st == BORA_OK; i++)
            if (!listed(L.wmap, s->slots[i].name))
                st = bora_error_set(BORA_ERR_CONFIG,
                                    "%s does not list parameter '%s' of model %s: the weights are "
                                    "incomplete",
                                    index_path, s->slots[i].name, model);
    } else if (st == BORA_OK && access(single, F_OK) == 0) {
        files[n_files++] = "model.safetensors";
    } else if (st == BORA_OK) {
        st = bora_error_set(BORA_ERR_NOT_FOUND,
                            "%s holds neither model.safetensors nor model.safetensors.index.json "
                            "(bora imports safetensors weights)",
                            hf_dir);
    }
    for (size_t k = 0; k < n_files && st == BORA_OK; k++) {
        if (!quiet)
            bora_log(BORA_LOG_INFO, "import: reading %s (%zu of %zu)", files[k], k + 1, n_files);
        st = load_shard(&L, files[k], k);
    }
    for (size_t i = 0; i < s->n_slots && st == BORA_OK; i++)
        if (!L.seen[i])
            st = bora_error_set(BORA_ERR_CONFIG, "%s: no tensor '%s' (a parameter of model %s)",
                                n_files == 1 && !L.wmap ? single : hf_dir, s->slots[i].name, model);
    if (st == BORA_OK && *L.head_path)
        st = check_tied_head(&L);
    g_store_params_changed(s);
    json_object_put(index);
    free(files);
    free(L.buf);
    free(L.seen);
    return st;
}
