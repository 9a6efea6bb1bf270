#!/bin/sh
# The llama plugin's Hessian-vector products against PyTorch's double backward (llama_torch.py
# --hvp, float64 on bora's float32 weights), on the reference's seven cases (Llama 2 with
# documents, Llama 3 with llama3 rope scaling, yarn with biases, Mistral with a window, Qwen2
# with biases, Qwen3 with q/k norms, Qwen3 with a window on its second layer).
# usage: check_llama_hvp.sh MODEL_DUMP PLUGIN_DIR SCRIPT
set -eu
dump=$1 plugins=$2 script=$3
py=/usr/bin/python3
"$py" -c 'import numpy, torch' 2>/dev/null || { echo "skipped: no python3-torch"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$py" "$script" --write-case all "$tmp" > /dev/null
rm "$tmp"/*/outputs.safetensors # what is compared below is bora's
for c in llama2 llama3 yarn mistral qwen2 qwen3 qwen3_window; do
    "$dump" "$plugins" "$tmp/$c" --hvp
done
"$py" "$script" --hvp "$tmp"/llama2 "$tmp"/llama3 "$tmp"/yarn "$tmp"/mistral "$tmp"/qwen2 \
    "$tmp"/qwen3 "$tmp"/qwen3_window
