#!/bin/sh
# Same bits from separate processes, and from a different thread count (f32 on the CPU).
# usage: check_determinism.sh TEST_DETERMINISM PLUGIN_DIR
set -eu
a=$("$1" "$2" 2)
b=$("$1" "$2" 2)
c=$("$1" "$2" 1)
echo "2 threads: $a"
echo "2 threads: $b"
echo "1 thread:  $c"
[ "$a" = "$b" ] || { echo "two runs differ" >&2; exit 1; }
[ "$a" = "$c" ] || { echo "1 and 2 threads differ" >&2; exit 1; }
