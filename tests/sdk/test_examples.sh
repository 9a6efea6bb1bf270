#!/bin/sh
# Every SDK header opens with a worked example (STYLE.md), and every one compiles: this takes
# the example out of each sdk/bora/*.h — in its opening comment, after the line that says
# "worked example", the code indented four spaces past " * " — and compiles it against the SDK with the project's
# warnings as errors, -Woverride-init among them. An example that is a whole plugin (it has
# BORA_PLUGIN_DEFINE) is linked as a shared object with -z defs and loaded with `bora plugins`,
# which must list the component it registers.
# usage: test_examples.sh SDK_DIR BORA C_COMPILER WORK_DIR
set -u
sdk=$1 bora=$2 cc=$3 work=$4
rm -rf "$work" && mkdir -p "$work" || exit 2
flags="-std=c11 -Wall -Wextra -Wpedantic -Wshadow -Wstrict-prototypes -Wmissing-prototypes
       -Wformat=2 -Woverride-init -Werror -I$sdk"
fails=0 n=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
for header in "$sdk"/bora/*.h; do
    base=$(basename "$header" .h)
    src=$work/example_$base.c
    # The opening comment's first code block after "worked example": " *     code" lines, and
    # " *" lines between them.
    awk 'NR == 1 && !/^\/\*/ { exit }
         /\*\// { exit }
         tolower($0) ~ /worked example/ { started = 1; next }
         !started { next }
         /^ \*     / { print substr($0, 8); code = 1; next }
         /^ \*$/ { if (code) print ""; next }
         code { exit }' "$header" > "$src"
    if ! grep -q '[^[:space:]]' "$src"; then
        fail "$header: no worked example (code indented four spaces after \"worked example\" in its opening comment)"
        continue
    fi
    n=$((n + 1))
    if grep -q BORA_PLUGIN_DEFINE "$src"; then
        kind=$(sed -n 's/.*BORA_KIND_\([A-Z]*\), *"\([A-Za-z0-9_-]*\)".*/\1/p' "$src" | head -n 1 |
               tr 'A-Z' 'a-z')
        name=$(sed -n 's/.*BORA_KIND_\([A-Z]*\), *"\([A-Za-z0-9_-]*\)".*/\2/p' "$src" | head -n 1)
        if [ -z "$kind" ] || [ -z "$name" ]; then
            fail "$header: its plugin example names no component (BORA_KIND_..., \"name\")"
            continue
        fi
        mkdir -p "$work/$base"
        # shellcheck disable=SC2086
        if ! out=$("$cc" $flags -fPIC -shared -Wl,-z,defs -o "$work/$base/bora-$kind-$name.so" \
                   "$src" -lm 2>&1); then
            fail "$header: the example does not build:
$out"
            continue
        fi
        out=$("$bora" plugins --plugin-dir "$work/$base" 2>&1) ||
            fail "$header: bora plugins refuses the example: $out"
        printf '%s\n' "$out" | grep -Eq "^$kind +$name .*$work/$base/" ||
            fail "$header: bora plugins does not list $kind $name:
$out"
    else
        # shellcheck disable=SC2086
        out=$("$cc" $flags -Wno-unused-function -c -o "$work/$base.o" "$src" 2>&1) ||
            fail "$header: the example does not compile:
$out"
    fi
done
[ "$n" -gt 0 ] || fail "no header in $sdk/bora"
[ "$fails" -eq 0 ] && echo "test_examples: $n examples compiled"
exit $((fails > 0))
