#!/bin/sh
# GPT-2's Hessian-vector products against PyTorch's double backward (gpt2_torch.py --hvp, float64
# on bora's float32 weights).
# usage: check_gpt2_hvp.sh GPT2_DUMP PLUGIN_DIR SCRIPT
set -eu
py=/usr/bin/python3
"$py" -c 'import numpy, torch' 2>/dev/null || { echo "skipped: no python3-torch"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$1" "$2" "$tmp" --hvp
exec "$py" "$3" "$tmp" --hvp
