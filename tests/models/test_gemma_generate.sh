#!/bin/sh
# bora generate on each Gemma type as a user meets it: a tiny model of each trained for 150
# steps (enough that its sampled tokens depend on the window's keys), then 60 tokens after a
# prompt with a 32-position context, with the KV cache (one prefill, one position per token
# until the context is full, then the window again) and with --no-cache (the whole window
# recomputed per token): the same ids, greedy and sampled. The Gemma 2 and Gemma 3 models slide within 8 positions (shorter than the context and than the
# 60 tokens), so their sliding layers keep 8 cache rows as a ring: Gemma 2 on layers 0 and 2,
# Gemma 3 on all but layer 2 (sliding_window_pattern 3), with its local RoPE base on those and
# linear rope scaling on the global one; Gemma 2's final logits are soft-capped.
# usage: test_gemma_generate.sh BORA PLUGIN_DIR TOKENIZER TEXT WORK_DIR
set -u
bora=$1 plugins=$2 tok=$3 text=$4 work=$5
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 2
head -n 3000 "$text" > small.txt
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
size="seq_len: 32, hidden_size: 32, intermediate_size: 64, num_attention_heads: 4, head_dim: 8"
for type in gemma gemma2 gemma3; do
    case $type in
    gemma) model="{type: gemma, $size, num_hidden_layers: 2, num_key_value_heads: 1}" ;;
    gemma2) model="{type: gemma2, $size, num_hidden_layers: 3, num_key_value_heads: 2, sliding_window: 8, query_pre_attn_scalar: 16, final_logit_softcapping: 3.0, attn_logit_softcapping: null}" ;;
    gemma3) model="{type: gemma3, $size, num_hidden_layers: 4, num_key_value_heads: 2, sliding_window: 8, sliding_window_pattern: 3, rope_local_base_freq: 100.0, rope_scaling: {rope_type: linear, factor: 2.0}, tie_word_embeddings: false}" ;;
    esac
    cat > $type.yaml <<YAML
model: $model
optimizer: {type: adamw, learning_rate: 1e-2, warmup: 5}
data: {train_urls: [$work/small.txt], tokenizer: $tok}
trainer:
  num_train_steps: 150
  train_batch_size: 8
  num_threads: 1
  id: $type
  checkpointer: {base_path: $work/ckpt}
  tracker: []
YAML
    out=$("$bora" --plugin-dir "$plugins" train $type.yaml 2>&1) || { echo "$out"; fail "$type: train"; continue; }
    for how in "--temperature 0" "--temperature 0.9 --seed 5"; do
        # shellcheck disable=SC2086
        a=$("$bora" --plugin-dir "$plugins" generate --checkpoint ckpt/$type/step-150 \
            --prompt "The jury said" --max-tokens 60 --ids $how 2>&1) || fail "$type: generate: $a"
        # shellcheck disable=SC2086
        b=$("$bora" --plugin-dir "$plugins" generate --checkpoint ckpt/$type/step-150 \
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
[ $fails = 0 ] && echo "gemma generate: the KV cache gives the recomputed window's tokens on all three types"
exit $((fails > 0))
