#!/bin/sh
# The whisper plugin against the independent PyTorch reference (tests/models/whisper_torch.py,
# float64): on each case (2+2 layers, d_model 64, 80 mels, 100 frames, 16 decoder positions with
# padded targets; exact GELU, then tanh GELU with scale_embedding and 2 decoder heads, then 3
# encoder layers recomputed in the backward pass (gradient_checkpointing)) bora's
# logits, summed loss and every gradient must match within the reference's tolerances, the
# frozen encoder positions getting none; the caches (prefill + decode) must give the whole
# window's logits; and bora's initial sinusoids (1500 x 384) must equal transformers' float32
# sinusoids().
# usage: check_whisper_bora.sh WHISPER_DUMP PLUGIN_DIR SCRIPT
set -eu
dump=$1 plugins=$2 script=$3
py=/usr/bin/python3
"$py" -c 'import numpy, torch' 2>/dev/null || { echo "skipped: no python3-torch"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$py" "$script" --write-case all "$tmp" > /dev/null
rm "$tmp"/*/outputs.safetensors # what is compared below is bora's
for c in tiny tiny_tanh tiny_recompute; do
    "$dump" "$plugins" "$tmp/$c"
done
"$py" "$script" "$tmp"/tiny "$tmp"/tiny_tanh "$tmp"/tiny_recompute
"$dump" "$plugins" --sinusoids "$tmp/sinusoids.safetensors"
"$py" "$script" --sinusoids "$tmp/sinusoids.safetensors"
