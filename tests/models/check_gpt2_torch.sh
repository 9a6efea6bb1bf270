#!/bin/sh
# GPT-2 against an independent PyTorch implementation (Debian's python3-torch).
# usage: check_gpt2_torch.sh GPT2_DUMP PLUGIN_DIR SCRIPT
set -eu
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$1" "$2" "$tmp"
exec /usr/bin/python3 "$3" "$tmp"
