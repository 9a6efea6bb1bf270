#!/bin/sh
# The CPU backend's sampled tokens against an independent Philox4x32-10 and inverse CDF in
# Python: test_sample --dump prints each case and the tokens the C drew.
# usage: check_sample.sh TEST_SAMPLE PLUGIN_DIR SCRIPT [BACKEND]  (BACKEND: cpu unless named)
set -eu
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
"$1" "$2" --dump ${4:-cpu} > "$tmp/sample.txt"
exec /usr/bin/python3 "$3" "$tmp/sample.txt"
