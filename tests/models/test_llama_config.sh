#!/bin/sh
# The Llama family's configuration as a user meets it (bora graph and bora train): each bad key
# is refused naming it and what would be right; a Hugging Face config.json's extra values
# (null head_dim and num_key_value_heads, a Mistral window of null, rope_scaling in the older
# "type" spelling, Qwen's layer_types) are taken; bora graph shows the parameters of each type;
# gradient_checkpointing gives bitwise the losses of a run without it; and the FLOPs estimate
# uses the Llama keys (hidden_size, num_hidden_layers).
# usage: test_llama_config.sh BORA PLUGIN_DIR TOKENIZER TEXT WORK_DIR
set -u
bora=$1 plugins=$2 tok=$3 text=$4 work=$5
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 2
head -n 2000 "$text" > small.txt
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
size="seq_len: 16, hidden_size: 32, intermediate_size: 64, num_hidden_layers: 2, num_attention_heads: 4"
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
    out=$("$bora" --plugin-dir "$plugins" "$@" 2>&1)
    got=$?
    [ "$got" -eq "$want" ] || fail "$model: exit $got, want $want; output:
$out"
    case $out in *"$needle"*) ;; *) fail "$model: no '$needle' in:
$out" ;; esac
}
expect 1 "model.num_key_value_heads: 3 must be at least 1 and divide num_attention_heads 4" \
    "{type: llama, $size, num_key_value_heads: 3}"
expect 1 "model.hidden_size 32 does not divide into 5 heads; give head_dim" \
    "{type: llama, seq_len: 16, hidden_size: 32, intermediate_size: 64, num_hidden_layers: 2, num_attention_heads: 5}"
expect 1 "model.rope_scaling.low_freq_factor: rope_type llama3 needs it" \
    "{type: llama, $size, rope_scaling: {rope_type: llama3, factor: 8, high_freq_factor: 4, original_max_position_embeddings: 16}}"
expect 1 "model.rope_scaling.rope_type: 'llama4' is not one of default, linear, dynamic, llama3, yarn" \
    "{type: llama, $size, rope_scaling: {rope_type: llama4, factor: 8}}"
expect 1 "model.rope_scaling.factor: rope_type linear needs a factor above 0" \
    "{type: llama, $size, rope_scaling: {rope_type: linear}}"
expect 1 "model.hidden_act: 'gelu' is not supported" "{type: llama, $size, hidden_act: gelu}"
expect 1 "model.attention_dropout: 0.1; bora trains without dropout" \
    "{type: llama, $size, attention_dropout: 0.1}"
expect 1 "model.layer_types has 1 entries; num_hidden_layers is 2" \
    "{type: qwen2, $size, num_key_value_heads: 2, layer_types: [full_attention]}"
expect 1 "model.layer_types[1]: 'sliding' is not full_attention or sliding_attention" \
    "{type: qwen3, $size, num_key_value_heads: 2, head_dim: 8, layer_types: [full_attention, sliding]}"
expect 1 "model.head_dim: 7; RoPE rotates pairs of dims: give an even head_dim" \
    "{type: qwen3, $size, num_key_value_heads: 2, head_dim: 7}"
expect 1 "unknown key 'partial_rotary_factor' in model (llama)" \
    "{type: llama, $size, partial_rotary_factor: 0.5}"
expect 1 "model.rope_scaling.beta_fast: inf is not a finite number" \
    "{type: llama, $size, rope_scaling: {rope_type: yarn, factor: 4, beta_fast: .inf}}"
expect 1 "model.rms_norm_eps: 0 would let RMSNorm divide by zero" \
    "{type: mistral, $size, num_key_value_heads: 2, rms_norm_eps: 0}"
expect 1 "model.num_key_value_heads: 32 (not given: qwen2's default) must be at least 1 and divide num_attention_heads 4" \
    "{type: qwen2, $size}"
expect 1 "unknown key 'num_layers' in model (llama)" \
    "{type: llama, seq_len: 16, hidden_size: 32, intermediate_size: 64, num_layers: 2, num_attention_heads: 4}"
expect 1 "unknown key 'sliding_window' in model (llama)" "{type: llama, $size, sliding_window: 8}"
# config.json's own spellings
expect 0 "parameters: 20 tensors" \
    "{type: llama, $size, num_key_value_heads: null, head_dim: null, tie_word_embeddings: true, rope_scaling: {type: linear, factor: 2.0}}"
expect 0 "parameters: 21 tensors" "{type: mistral, $size, num_key_value_heads: 4, sliding_window: null}"
expect 0 "parameters: 27 tensors" \
    "{type: qwen2, $size, num_key_value_heads: 2, layer_types: [full_attention, sliding_attention]}"
expect 0 "parameters: 24 tensors" "{type: qwen3, $size, num_key_value_heads: 1, head_dim: 16, tie_word_embeddings: true}"
# gradient checkpointing: the same losses, bitwise; the FLOPs estimate from the Llama keys (the
# last run's output)
run() {
    expect 0 "trained 3 steps" "{type: llama, $size, num_key_value_heads: 2, gradient_checkpointing: $1}" \
        train run.yaml --trainer.id=ck-$1 "--trainer.tracker={type: jsonl, path: $work/ck-$1.jsonl}"
}
run false
run true
a=$(sed -n 's/.*"train\/loss": *\([-0-9.e]*\).*/\1/p' ck-false.jsonl)
b=$(sed -n 's/.*"train\/loss": *\([-0-9.e]*\).*/\1/p' ck-true.jsonl)
[ -n "$a" ] && [ "$a" = "$b" ] || fail "gradient_checkpointing changed the losses: '$a' against '$b'"
case $out in
*"model FLOPs: "*" per token (6N + 12·L·d·T: model.num_hidden_layers 2, model.hidden_size 32)"*) ;;
*) fail "the FLOPs estimate does not use the Llama keys: $out" ;;
esac
# and from the type's default where a key is not given (llama's 32 layers)
expect 0 "model.num_hidden_layers 32, model.hidden_size 16)" \
    "{type: llama, seq_len: 8, hidden_size: 16, num_attention_heads: 4, intermediate_size: 8, num_key_value_heads: 1}" \
    train run.yaml --trainer.id=defaults --trainer.num_train_steps=1 --optimizer.warmup=0
[ $fails = 0 ] && echo "llama config: refusals name the key; config.json's spellings taken; checkpointing bitwise"
exit $((fails > 0))
