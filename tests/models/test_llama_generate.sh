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
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 2
head -n 3000 "$text" > small.txt
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
size="seq_len: 32, hidden_size: 32, intermediate_size: 64, num_hidden_layers: 2, num_attention_heads: 4"
. "$here/generate_same.sh"
same_ids llama "{type: llama, $size, num_key_value_heads: 2, rope_scaling: {rope_type: llama3, factor: 8, low_freq_factor: 1, high_freq_factor: 4, original_max_position_embeddings: 16}}" 40
same_ids mistral "{type: mistral, $size, num_key_value_heads: 2, sliding_window: 8}" 40
same_ids qwen2 "{type: qwen2, $size, num_key_value_heads: 1, use_sliding_window: true, sliding_window: 6, max_window_layers: 1, tie_word_embeddings: true}" 40
same_ids qwen3 "{type: qwen3, $size, num_key_value_heads: 2, head_dim: 16}" 40
[ $fails = 0 ] && echo "llama generate: the KV cache gives the recomputed window's tokens on all four types"
exit $((fails > 0))
