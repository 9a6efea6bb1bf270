#!/bin/sh
# bora generate on each Llama-family type as a user meets it: a tiny model of each trained for a
# few steps, then 60 tokens after a prompt with a 32-position context, with the KV cache (one
# prefill, one position per token until the context is full, then the window again) and with
# --no-cache (the whole window recomputed per token): the same ids, greedy and sampled. The
# Mistral model's window (8) is shorter than its context, so its cache keeps 8 rows as a ring;
# the Qwen2 one slides on its second layer only.
# usage: test_llama_generate.sh BORA PLUGIN_DIR TOKENIZER TEXT WORK_DIR
set -u
bora=$1 plugins=$2 tok=$3 text=$4 work=$5
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 2
head -n 3000 "$text" > small.txt
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
size="seq_len: 32, hidden_size: 32, intermediate_size: 64, num_hidden_layers: 2, num_attention_heads: 4"
for type in llama mistral qwen2 qwen3; do
    case $type in
    llama) model="{type: llama, $size, num_key_value_heads: 2, rope_scaling: {rope_type: llama3, factor: 8, low_freq_factor: 1, high_freq_factor: 4, original_max_position_embeddings: 16}}" ;;
    mistral) model="{type: mistral, $size, num_key_value_heads: 2, sliding_window: 8}" ;;
    qwen2) model="{type: qwen2, $size, num_key_value_heads: 1, use_sliding_window: true, sliding_window: 6, max_window_layers: 1, tie_word_embeddings: true}" ;;
    qwen3) model="{type: qwen3, $size, num_key_value_heads: 2, head_dim: 16}" ;;
    esac
    cat > $type.yaml <<YAML
model: $model
optimizer: {type: adamw, learning_rate: 1e-2, warmup: 5}
data: {train_urls: [$work/small.txt], tokenizer: $tok}
trainer:
  num_train_steps: 40
  train_batch_size: 8
  num_threads: 1
  id: $type
  checkpointer: {base_path: $work/ckpt}
  tracker: []
YAML
    out=$("$bora" --plugin-dir "$plugins" train $type.yaml 2>&1) || { echo "$out"; fail "$type: train"; continue; }
    for how in "--temperature 0" "--temperature 0.9 --seed 5"; do
        # shellcheck disable=SC2086
        a=$("$bora" --plugin-dir "$plugins" generate --checkpoint ckpt/$type/step-40 \
            --prompt "The jury said" --max-tokens 60 --ids $how 2>&1) || fail "$type: generate: $a"
        # shellcheck disable=SC2086
        b=$("$bora" --plugin-dir "$plugins" generate --checkpoint ckpt/$type/step-40 \
            --prompt "The jury said" --max-tokens 60 --ids --no-cache $how 2>&1) ||
            fail "$type: generate --no-cache: $b"
        ia=$(echo "$a" | sed -n 's/^ids: //p') ib=$(echo "$b" | sed -n 's/^ids: //p')
        case $a in *"one-position steps"*) ;; *) fail "$type: the cache did not run: $a" ;; esac
        case $a in *" 0 one-position steps"*) fail "$type: no decode step ran: $a" ;; esac
        [ -n "$ia" ] && [ "$ia" = "$ib" ] || fail "$type ($how): the cache's ids
$ia
differ from the recomputed window's
$ib"
        echo "$type ($how): $(echo "$a" | tail -n 1)"
    done
done
[ $fails = 0 ] && echo "llama generate: the KV cache gives the recomputed window's tokens on all four types"
exit $((fails > 0))
