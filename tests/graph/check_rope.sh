#!/bin/sh
# The host's rotary tables against an independent float64 reference of transformers' formulas
# (Debian's python3-numpy): test_rope --dump prints each case and what the C computed.
# usage: check_rope.sh TEST_ROPE SCRIPT
set -eu
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$1" --dump > "$tmp/rope.txt"
exec /usr/bin/python3 "$2" "$tmp/rope.txt"
