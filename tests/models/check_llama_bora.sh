#!/bin/sh
# The llama plugin against the independent PyTorch reference (tests/models/llama_torch.py,
# float64): on each of its seven cases (Llama 2 with documents, Llama 3 with llama3 rope scaling,
# yarn with biases, Mistral with a window of 4 in 16 positions, Qwen2 with biases, Qwen3 with
# q/k norms, Qwen3 with a window of 3 on its second layer) bora's logits, summed loss and every
# gradient must match within the reference's stated tolerances; and on each, bora's KV cache (prefill + decode) must give
# the whole window's logits (Qwen2/3 again with windows of 3 on the layers from 1 on).
# usage: check_llama_bora.sh MODEL_DUMP PLUGIN_DIR SCRIPT
set -eu
dump=$1 plugins=$2 script=$3
py=/usr/bin/python3
"$py" -c 'import numpy, torch' 2>/dev/null || { echo "skipped: no python3-torch"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$py" "$script" --write-case all "$tmp" > /dev/null
rm "$tmp"/*/outputs.safetensors # what is compared below is bora's
for c in llama2 llama3 yarn mistral qwen2 qwen3 qwen3_window; do
    case $c in qwen2 | qwen3) extra="--window 3" ;; *) extra="" ;; esac
    # shellcheck disable=SC2086
    "$dump" "$plugins" "$tmp/$c" $extra
done
"$py" "$script" "$tmp"/llama2 "$tmp"/llama3 "$tmp"/yarn "$tmp"/mistral "$tmp"/qwen2 "$tmp"/qwen3 \
    "$tmp"/qwen3_window
