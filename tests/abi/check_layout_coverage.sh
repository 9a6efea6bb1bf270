#!/bin/sh
# Every struct the SDK headers define must have its size pinned in test_layout.c.
# usage: check_layout_coverage.sh SDK_INCLUDE_DIR TEST_LAYOUT_C
set -eu
sdk=$1 layout=$2
missing=0 n=0
for name in $(sed -n 's/^\(typedef \)\{0,1\}struct \(bora_[a-z0-9_]*\) {.*/\2/p' "$sdk"/bora/*.h | sort -u); do
    n=$((n + 1))
    if ! grep -q "sizeof($name)" "$layout"; then
        echo "struct $name is not pinned in $layout" >&2
        missing=$((missing + 1))
    fi
done
[ "$n" -gt 0 ] || { echo "no SDK structs found under $sdk" >&2; exit 1; }
echo "$n SDK structs, $missing unpinned"
[ "$missing" -eq 0 ]
