#!/bin/sh
# The 1-d convolution's values and gradients against PyTorch's float64 conv1d (Debian's
# python3-torch): test_conv1d --dump prints each case and what the C computed.
# usage: check_conv1d.sh TEST_CONV1D PLUGIN_DIR SCRIPT
set -eu
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$1" "$2" --dump > "$tmp/conv1d.txt"
exec /usr/bin/python3 "$3" "$tmp/conv1d.txt"
