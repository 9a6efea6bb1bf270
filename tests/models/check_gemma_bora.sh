#!/bin/sh
# The gemma plugin against the independent PyTorch reference (tests/models/gemma_torch.py,
# float64), on its four cases of 24 positions: Gemma (multi-query, head_dim 16 with hidden 32,
# untied head), Gemma 2 (windows of 4 on layers 0 and 2, both soft-caps, query_pre_attn_scalar
# 24, two documents per row), Gemma 3 (windows of 5 on three of four layers, local rope base 100,
# linear rope scaling on the full layer) and Gemma 3 with both soft-caps set (transformers applies
# only the final one). bora's logits, summed loss and every gradient must match within the
# reference's tolerances, and each feature switched off in the reference must move its logits far
# from bora's (the ablation). On each case bora's KV cache (prefill + decode, sliding layers on
# ring caches of their window) must give the whole window's logits.
# With --hvp: bora's Hessian-vector products against PyTorch's double backward instead.
# usage: check_gemma_bora.sh MODEL_DUMP PLUGIN_DIR SCRIPT [--hvp]
set -eu
dump=$1 plugins=$2 script=$3 hvp=${4:-}
py=/usr/bin/python3
"$py" -c 'import numpy, torch' 2>/dev/null || { echo "skipped: no python3-torch"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$py" "$script" --write-case all "$tmp" > /dev/null
rm "$tmp"/*/outputs.safetensors # what is compared below is bora's
set --
for c in gemma gemma2 gemma3 gemma3_softcap; do
    # shellcheck disable=SC2086
    "$dump" "$plugins" "$tmp/$c" $hvp
    set -- "$@" "$tmp/$c"
done
# shellcheck disable=SC2086
"$py" "$script" $hvp "$@"
