#!/bin/sh
# bora generate on Mixtral as a user meets it: a tiny model (4 experts, top 2) trained for 150
# steps with the load-balancing loss, then 60 tokens after a prompt with a 32-position context,
# with the KV cache (one prefill, one position per token until the context is full, then the
# window again) and with --no-cache (the whole window recomputed per token): the same ids,
# greedy and sampled. Its layers slide within 8 positions (shorter than the context and than the
# 60 tokens), so each keeps 8 cache rows as a ring, and every decode step routes one token per
# row through the experts.
# usage: test_mixtral_generate.sh BORA PLUGIN_DIR TOKENIZER TEXT WORK_DIR
set -u
bora=$1 plugins=$2 tok=$3 text=$4 work=$5
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work" && mkdir -p "$work" && cd "$work" || exit 2
head -n 3000 "$text" > small.txt
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
. "$here/generate_same.sh"
same_ids mixtral "{type: mixtral, seq_len: 32, hidden_size: 32, intermediate_size: 32, num_hidden_layers: 2, num_attention_heads: 4, num_key_value_heads: 2, num_local_experts: 4, num_experts_per_tok: 2, sliding_window: 8, output_router_logits: true}" 150
[ $fails = 0 ] && echo "mixtral generate: the KV cache gives the recomputed window's tokens"
exit $((fails > 0))
