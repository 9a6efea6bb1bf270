#!/bin/sh
# The SDK as a third party uses it: install bora to a temporary prefix, build the example
# plugin in sdk/examples/csv-tracker with only the installed files (CMake package, then
# pkg-config), drop the .so into a plugin directory, and check that bora lists and runs it.
# usage: test_out_of_tree.sh SOURCE_DIR BUILD_DIR DRIVE_TRACKER C_COMPILER
set -eu
src=$1 build=$2 drive=$3 cc=$4
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
prefix=$tmp/prefix

echo "== install to $prefix"
cmake --install "$build" --prefix "$prefix" > "$tmp/install.log"
test -f "$prefix/include/bora/plugin.h"
test -x "$prefix/bin/bora"

echo "== build the example with find_package(bora)"
# A copy outside the source tree, so nothing but the installed SDK can be found.
cp -r "$src/sdk/examples/csv-tracker" "$tmp/example"
cmake -S "$tmp/example" -B "$tmp/example-build" -DCMAKE_PREFIX_PATH="$prefix" \
      -DCMAKE_C_COMPILER="$cc" -DCMAKE_C_FLAGS="-Wall -Wextra -Werror" > "$tmp/configure.log"
cmake --build "$tmp/example-build" > "$tmp/build.log"
mkdir "$tmp/plugins"
cp "$tmp/example-build/bora-tracker-csv.so" "$tmp/plugins/"

echo "== the installed bora lists it beside its own plugins"
"$prefix/bin/bora" plugins --plugin-dir "$tmp/plugins" | tee "$tmp/list"
grep -Eq "^tracker +csv +1\.0\.0 +[0-9]+\.[0-9]+ +$tmp/plugins/bora-tracker-csv.so" "$tmp/list"
grep -Eq "^tracker +jsonl .*/prefix/lib.*/bora/plugins/bora-tracker-jsonl.so" "$tmp/list"
"$prefix/bin/bora" --version | grep -Eq "plugin ABI [0-9]+\.[0-9]+"

echo "== and drives it"
(cd "$tmp" && "$drive" "$tmp/plugins" csv run-1)
cat "$tmp/metrics.csv"
grep -qx "step,metric,value" "$tmp/metrics.csv"
grep -qx "1,train/loss,3.5" "$tmp/metrics.csv"
grep -qx "summary,eval/loss,2.25" "$tmp/metrics.csv"
[ "$(wc -l < "$tmp/metrics.csv")" -eq 8 ]

echo "== build it again with pkg-config alone, dropped in through BORA_PLUGIN_PATH"
export PKG_CONFIG_PATH="$(dirname "$(find "$prefix" -name bora.pc)")"
mkdir "$tmp/plugins2"
# shellcheck disable=SC2046
"$cc" $(pkg-config --cflags bora) -std=c11 -Wall -Wextra -Werror -fPIC -shared -Wl,-z,defs \
      -o "$tmp/plugins2/bora-tracker-csv.so" "$tmp/example/csv.c"
BORA_PLUGIN_PATH="$tmp/plugins2" "$prefix/bin/bora" plugins tracker csv | tee "$tmp/one"
grep -q "file:    $tmp/plugins2/bora-tracker-csv.so" "$tmp/one"
echo "test_out_of_tree: ok"
