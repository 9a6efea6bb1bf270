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
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 2
head -n 3000 "$text" > small.txt
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
size="seq_len: 32, hidden_size: 32, intermediate_size: 64, num_attention_heads: 4, head_dim: 8"
. "$here/generate_same.sh"
same_ids gemma "{type: gemma, $size, num_hidden_layers: 2, num_key_value_heads: 1}" 150
same_ids gemma2 "{type: gemma2, $size, num_hidden_layers: 3, num_key_value_heads: 2, sliding_window: 8, query_pre_attn_scalar: 16, final_logit_softcapping: 3.0, attn_logit_softcapping: 4.0}" 150
same_ids gemma3 "{type: gemma3, $size, num_hidden_layers: 4, num_key_value_heads: 2, sliding_window: 8, sliding_window_pattern: 3, rope_local_base_freq: 100.0, rope_scaling: {rope_type: linear, factor: 2.0}, tie_word_embeddings: false}" 150
[ $fails = 0 ] && echo "gemma generate: the KV cache gives the recomputed window's tokens on all three types"
exit $((fails > 0))
