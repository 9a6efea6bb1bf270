#!/bin/sh
# Attention with T != S against a float64 PyTorch reference (Debian's python3-torch):
# test_cross_attention --dump prints each case and what the C computed.
# usage: check_cross_attention.sh TEST_CROSS_ATTENTION PLUGIN_DIR SCRIPT
set -eu
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$1" "$2" --dump > "$tmp/attention.txt"
exec /usr/bin/python3 "$3" "$tmp/attention.txt"
