#!/bin/sh
# The Gemma family's configuration as a user meets it (bora config keys, bora graph, bora train,
# bora import): each bad key is refused naming it and what would be right; each type has its
# own keys and parameters; gradient_checkpointing gives bitwise the losses of a run without it;
# and a transformers config.json is read in its spellings: transformers 5's rope_parameters per
# layer type for gemma3_text, a multimodal Gemma 3 refused with what to import instead, Gemma
# 1.0's hidden_act gelu (the exact GELU in transformers) refused.
# usage: test_gemma_config.sh BORA PLUGIN_DIR TOKENIZER TEXT WORK_DIR
set -u
bora=$1 plugins=$2 tok=$3 text=$4 work=$5
py=/usr/bin/python3
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 2
head -n 2000 "$text" > small.txt
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
B() { "$bora" --plugin-dir "$plugins" "$@"; }
size="seq_len: 16, hidden_size: 32, intermediate_size: 64, num_hidden_layers: 2, num_attention_heads: 4, head_dim: 8"
g2="type: gemma2, $size, num_key_value_heads: 2"
g3="type: gemma3, $size, num_key_value_heads: 2"
g1="type: gemma, $size, num_key_value_heads: 2"
# expect STATUS NEEDLE MODEL [ARGS]: bora graph (or ARGS) on MODEL exits STATUS and says NEEDLE
expect() {
    want=$1 needle=$2 model=$3
    shift 3
    cat > run.yaml <<YAML
model: $model
optimizer: {type: adamw, learning_rate: 1e-2, warmup: 1}
data: {train_urls: [$work/small.txt], tokenizer: $tok}
trainer: {num_train_steps: 3, train_batch_size: 4, num_threads: 1, tracker: [], checkpointer: {base_path: $work/ckpt}}
YAML
    [ $# -gt 0 ] || set -- graph run.yaml
    out=$(B "$@" 2>&1)
    got=$?
    [ "$got" -eq "$want" ] || fail "$model: exit $got, want $want; output:
$out"
    case $out in *"$needle"*) ;; *) fail "$model: no '$needle' in:
$out" ;; esac
}
# each type's own keys, with transformers' defaults
keys() {
    out=$(B config keys model "$1" 2>&1) || fail "config keys model $1: $out"
    shift
    for want in "$@"; do
        echo "$out" | grep -Eq "^ +$want( |$)" || fail "bora config keys: no '$want' in:
$out"
    done
}
keys gemma "hidden_act +string +gelu_pytorch_tanh" "head_dim +int +256" "tie_word_embeddings +bool +true" \
    "vocab_size +int +256000"
keys gemma2 "hidden_activation +string +gelu_pytorch_tanh" "query_pre_attn_scalar +float +256" \
    "final_logit_softcapping +float +30.0" "attn_logit_softcapping +float +50.0" "sliding_window +int +4096"
keys gemma3 "rope_local_base_freq +float +10000.0" "sliding_window_pattern +int +6" \
    "rope_theta +float +1000000.0" "final_logit_softcapping +float +null" "vocab_size +int +262208" \
    "use_bidirectional_attention +bool +false" "max_position_embeddings +int +131072"
out=$(B config keys model gemma 2>&1)
case $out in *query_pre_attn_scalar*|*sliding_window*) fail "gemma has Gemma 2's keys: $out" ;; esac
# refusals naming the key
expect 1 "model.hidden_act: 'gelu' is the exact (erf) GELU in transformers" "{$g1, hidden_act: gelu}"
expect 1 "model.hidden_activation: 'relu' is not supported; Gemma's MLP is GeGLU with gelu_pytorch_tanh" \
    "{$g2, hidden_activation: relu}"
expect 1 "unknown key 'hidden_activation' in model (gemma)" "{$g1, hidden_activation: gelu_pytorch_tanh}"
expect 1 "unknown key 'sliding_window' in model (gemma)" "{$g1, sliding_window: 8}"
expect 1 "model.use_bidirectional_attention: true (EmbeddingGemma's encoder) is not supported" \
    "{$g3, use_bidirectional_attention: true}"
expect 1 "model.layer_types has 3 entries; num_hidden_layers is 2" \
    "{$g2, layer_types: [full_attention, sliding_attention, full_attention]}"
expect 1 "model.layer_types[0]: 'local' is not full_attention or sliding_attention" \
    "{$g3, layer_types: [local, full_attention]}"
expect 1 "model.sliding_window: -4 is negative" "{$g2, sliding_window: -4}"
expect 1 "model.sliding_window_pattern: 0; give 1 or more" "{$g3, sliding_window_pattern: 0}"
expect 1 "model.query_pre_attn_scalar: 0; give a number above 0" "{$g3, query_pre_attn_scalar: 0}"
expect 1 "model.final_logit_softcapping: -1; give a cap above 0 (" \
    "{$g2, final_logit_softcapping: -1}"
# 0 is not "none": transformers would divide by it
expect 1 "model.attn_logit_softcapping: 0; give a cap above 0 (" "{$g2, attn_logit_softcapping: 0}"
expect 1 "model.final_logit_softcapping: 1e+300; give a cap above 0 (" \
    "{$g2, final_logit_softcapping: 1e300}"
expect 1 "model.rope_local_base_freq: 0 is not a positive number" "{$g3, rope_local_base_freq: 0}"
expect 1 "model.num_key_value_heads: 3 must be at least 1 and divide num_attention_heads 4" \
    "{type: gemma, $size, num_key_value_heads: 3}"
expect 1 "model.head_dim: 7; RoPE rotates pairs of dims" \
    "{type: gemma3, seq_len: 16, hidden_size: 32, intermediate_size: 64, num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2, head_dim: 7}"
expect 1 "model.num_key_value_heads: 16 (not given: gemma's default) must be at least 1 and divide num_attention_heads 4" \
    "{type: gemma, $size}"
expect 1 "model.rope_scaling.rope_type: 'llama4' is not one of" "{$g3, rope_scaling: {rope_type: llama4, factor: 8}}"
expect 1 "model.attention_dropout: 0.1; bora trains without dropout" "{$g2, attention_dropout: 0.1}"
expect 1 "model.rms_norm_eps: 0 would let RMSNorm divide by zero" "{$g1, rms_norm_eps: 0}"
# the parameters of each type: gemma 9 per layer, gemma2 11 (sandwich norms), gemma3 13 (q/k
# norms), plus the embedding, the final norm and an untied head
expect 0 "parameters: 20 tensors" "{type: gemma, $size, num_key_value_heads: null}"
expect 0 "parameters: 21 tensors" "{type: gemma, $size, num_key_value_heads: 1, tie_word_embeddings: false}"
expect 0 "parameters: 24 tensors" "{$g2, sliding_window: null, final_logit_softcapping: null}"
expect 0 "parameters: 28 tensors" "{$g3, layer_types: [sliding_attention, full_attention]}"
expect 0 "parameters: 37 tensors" "{$g3, attention_bias: true, tie_word_embeddings: false}"
# gradient checkpointing: the same losses, bitwise
run() {
    expect 0 "trained 3 steps" "{$g3, sliding_window: 4, sliding_window_pattern: 2, rope_theta: 5000.0, rope_local_base_freq: 50.0, gradient_checkpointing: $1}" \
        train run.yaml --trainer.id=ck-$1 "--trainer.tracker={type: jsonl, path: $work/ck-$1.jsonl}"
}
run false
run true
a=$(sed -n 's/.*"train\/loss": *\([-0-9.e]*\).*/\1/p' ck-false.jsonl)
b=$(sed -n 's/.*"train\/loss": *\([-0-9.e]*\).*/\1/p' ck-true.jsonl)
[ -n "$a" ] && [ "$a" = "$b" ] || fail "gradient_checkpointing changed the losses: '$a' against '$b'"
case $out in
*"model FLOPs: "*" per token (6N + 12·L·d·T: model.num_hidden_layers 2, model.hidden_size 32)"*) ;;
*) fail "the FLOPs estimate does not use the Gemma keys: $out" ;;
esac
# config.json: transformers 5 writes Gemma 3's RoPE as rope_parameters per layer type; the
# import must give the model of the file transformers 4 wrote (the same config and weights)
B export --checkpoint ckpt/ck-false/step-3 --out g3.hf > /dev/null 2>&1 || fail "export of the gemma3 run"
cp -r g3.hf g3v5.hf
"$py" - g3v5.hf/config.json <<'PY' || fail "rewriting config.json"
import json, sys
c = json.load(open(sys.argv[1]))
c["rope_parameters"] = {
    "full_attention": {"rope_type": "default", "rope_theta": c.pop("rope_theta")},
    "sliding_attention": {"rope_type": "default", "rope_theta": c.pop("rope_local_base_freq")},
}
assert c.pop("rope_scaling") is None
json.dump(c, open(sys.argv[1], "w"), indent=2)
PY
for v in g3 g3v5; do
    out=$(B import $v.hf --out $v.ckpt 2>&1) || fail "import $v: $out"
    printf 'model: {seq_len: 16}\ndata: {train_urls: [%s/small.txt], validation_urls: [%s/small.txt], tokenizer: %s}\ntrainer: {max_eval_batches: 2, train_batch_size: 4, num_threads: 1}\n' \
        "$work" "$work" "$tok" > eval.yaml
    B eval eval.yaml --hf $v.hf --json > $v.eval 2> err.txt || fail "eval --hf $v: $(cat err.txt)"
done
cmp -s g3.ckpt/model.safetensors g3v5.ckpt/model.safetensors || fail "rope_parameters: other weights"
a=$(sed -n 's/.*"eval\/loss": \([^,]*\),.*/\1/p' g3.eval) b=$(sed -n 's/.*"eval\/loss": \([^,]*\),.*/\1/p' g3v5.eval)
[ -n "$a" ] && [ "$a" = "$b" ] || fail "rope_parameters per layer type: eval loss '$b', the rope_theta file's '$a'"
# ... and a sliding_attention theta that disagrees with rope_local_base_freq is refused
"$py" - g3v5.hf/config.json <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
c["rope_local_base_freq"] = 123.0
json.dump(c, open(sys.argv[1], "w"))
PY
expect 1 "rope_local_base_freq is 123.0, but rope_parameters makes it" "{$g3}" import g3v5.hf --out bad.ckpt
# a multimodal Gemma 3 (Gemma3ForConditionalGeneration) folder is refused with what to do
mkdir -p mm.hf
"$py" - g3.hf/config.json mm.hf/config.json <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))
# in the order the real files have: image token keys bora does not read come first
json.dump({"architectures": ["Gemma3ForConditionalGeneration"], "boi_token_index": 255999,
           "eoi_token_index": 256000, "image_token_index": 262144, "model_type": "gemma3",
           "mm_tokens_per_image": 256, "text_config": t,
           "vision_config": {"model_type": "siglip_vision_model"}},
          open(sys.argv[2], "w"))
PY
expect 1 "text_config is {" "{$g3}" import mm.hf --out mm.ckpt
expect 1 "bora's gemma3 is the text model alone: import a folder whose config.json is the text model's (model_type gemma3_text" \
    "{$g3}" import mm.hf --out mm.ckpt
# Gemma 1.0's config.json: hidden_act gelu, which transformers >= 4.48 computes with erf
expect 0 "trained 3 steps" "{$g1}" train run.yaml --trainer.id=g1
B export --checkpoint ckpt/g1/step-3 --out g1.hf > /dev/null 2>&1 || fail "export gemma"
sed -i 's/"hidden_act": "gelu_pytorch_tanh"/"hidden_act": "gelu", "hidden_activation": "gelu_pytorch_tanh"/' g1.hf/config.json
expect 1 "model.hidden_act: 'gelu' is the exact (erf) GELU in transformers" "{$g3}" import g1.hf --out g1.ckpt
[ $fails = 0 ] && echo "gemma config: refusals name the key; each type's keys and parameters; checkpointing bitwise; config.json's spellings read"
exit $((fails > 0))
