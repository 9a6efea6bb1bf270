#!/bin/sh
# The model contract as a plugin author meets it through `bora graph` and `bora train`: a graph
# reading an input bora does not fill (a misspelt name) is refused when the graph is built,
# naming it and the inputs that exist; so is a train graph without targets, and an input
# declared with a dtype other than the one bora writes; segment_ids is optional (a model that
# does not read it trains); and `bora graph` gives the model the tokenizer's vocabulary as
# `bora train` does, so both count the same parameters.
# usage: test_model_inputs.sh BORA PLUGIN_DIR FIXTURE_DIR TOKENIZER WORK_DIR
set -u
bora=$1 plugins=$2 fixtures=$3 tok=$4 work=$5
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 2
i=0
while [ $i -lt 200 ]; do
    echo "the quick brown fox jumps over the lazy dog $i times"
    i=$((i + 1))
done > small.txt
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
# expect STATUS NEEDLE COMMAND ARGS...: run bora, check the exit status and that the output has
# NEEDLE
expect() {
    want=$1 needle=$2
    shift 2
    out=$("$bora" --plugin-dir "$plugins" --plugin-dir "$fixtures" "$@" 2>&1)
    got=$?
    [ "$got" -eq "$want" ] || fail "bora $*: exit $got, want $want; output:
$out"
    case $out in *"$needle"*) ;; *) fail "bora $*: no '$needle' in:
$out" ;; esac
}
cat > lm.yaml <<YAML
model: {type: contract, width: 257, classes: 257}
optimizer: {type: adamw, learning_rate: 1e-2, warmup: 1}
data: {train_urls: [$work/small.txt], tokenizer: $tok}
trainer:
  num_train_steps: 2
  train_batch_size: 4
  num_threads: 1
  checkpointer: {base_path: $work/ckpt, save_interval: 0s}
YAML

misspelt="model contract: the train graph reads input 'input_idz', which bora does not fill (it \
fills input_ids, targets, segment_ids, input_features in train mode)"
expect 1 "$misspelt" graph lm.yaml --model.ids_input=input_idz
expect 1 "$misspelt" train lm.yaml --model.ids_input=input_idz
case $out in *"step 1"*) fail "the misspelt input reached step 1: $out" ;; esac

# loss_scale is the host's own, declared after the model's build.
expect 1 "model contract: the train graph reads input 'loss_scale', which is the host's own" \
    train lm.yaml --model.ids_input=loss_scale

forgot="model contract: the train graph does not read input 'targets', which every train graph \
needs"
expect 1 "$forgot" graph lm.yaml --model.targets=false
expect 1 "$forgot" train lm.yaml --model.targets=false
case $out in *"step 1"*) fail "the forgotten input reached step 1: $out" ;; esac

# An input bora fills, declared with another dtype than bora writes.
expect 1 "model contract: the train graph's input 'segment_ids' is not (batch, position) i32" \
    train lm.yaml --model.segment_dtype=f32

# segment_ids is optional: bora fills it only where the graph reads it.
expect 0 "trained 2 steps" train lm.yaml --model.segment_ids=false
expect 0 "trained 2 steps" train lm.yaml

# The vocabulary: the tokenizer's 257 tokens in both, so the same parameter count (gpt2's
# default vocabulary, 50257, would give 804,352 more).
cat > gpt2.yaml <<YAML
model: {type: gpt2, seq_len: 16, hidden_dim: 16, num_layers: 1, num_heads: 2}
optimizer: {type: adamw, learning_rate: 1e-2, warmup: 1}
data: {train_urls: [$work/small.txt], tokenizer: $tok}
trainer:
  num_train_steps: 1
  train_batch_size: 4
  num_threads: 1
  checkpointer: {base_path: $work/ckpt, save_interval: 0s}
YAML
expect 0 "vocabulary: 257 tokens, data.tokenizer's" graph gpt2.yaml
graph_n=$(printf '%s\n' "$out" | sed -n 's/^parameters: [0-9]* tensors, \([0-9]*\) values.*/\1/p')
expect 0 "model gpt2: " train gpt2.yaml
train_n=$(printf '%s\n' "$out" | sed -n 's/^model gpt2: \([0-9]*\) parameters.*/\1/p')
[ -n "$graph_n" ] && [ "$graph_n" = "$train_n" ] ||
    fail "bora graph counts '$graph_n' parameters, bora train '$train_n'"
expect 0 "vocabulary: 300 tokens, model.vocab_size" graph gpt2.yaml --model.vocab_size=300

[ "$fails" -eq 0 ] && echo "test_model_inputs: all passed"
exit $((fails > 0))
