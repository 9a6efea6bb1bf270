#!/bin/sh
# Same bits from separate processes, and from a different thread count (f32 on the CPU).
# usage: check_determinism.sh TEST_DETERMINISM PLUGIN_DIR
#
# Under AddressSanitizer, LeakSanitizer's exit-time scan sometimes crashes ("Tracer caught
# signal 11") while oneDNN's worker threads are alive; the multi-threaded runs skip the leak scan,
# and the single-threaded run keeps it.
set -eu
multi="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
a=$(ASAN_OPTIONS="$multi" "$1" "$2" 2)
b=$(ASAN_OPTIONS="$multi" "$1" "$2" 2)
c=$("$1" "$2" 1)
echo "2 threads: $a"
echo "2 threads: $b"
echo "1 thread:  $c"
[ "$a" = "$b" ] || { echo "two runs differ" >&2; exit 1; }
[ "$a" = "$c" ] || { echo "1 and 2 threads differ" >&2; exit 1; }
